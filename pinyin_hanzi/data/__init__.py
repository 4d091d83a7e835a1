"""Corpora -> prepared examples and vocabularies -> training batches."""

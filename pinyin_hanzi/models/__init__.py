"""The Transformer, as the book writes it."""

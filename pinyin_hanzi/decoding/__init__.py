"""Typed lines -> readings -> constrained beam search -> n-best: the Converter."""

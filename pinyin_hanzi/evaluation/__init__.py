"""Scoring conversions: metrics, and a converter evaluated and compared on a file (validation during
training is training/validation.py)."""

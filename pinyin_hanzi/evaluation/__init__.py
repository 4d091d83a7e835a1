"""Scoring conversions: metrics, validation during training, evaluating and comparing on a file."""

"""The training recipe, its loss and its processes."""

"""The training recipe, its loss, its validation and its processes."""

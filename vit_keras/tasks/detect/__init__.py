"""The detection task's library part: the DETR-style detector (`model`), its set loss and
matching (`loss`) and box arithmetic (`boxes`)."""

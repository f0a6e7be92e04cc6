"""Segmentation's application part: its data (folders of images and masks, the built-in
scenes), inference part, mask writing and scores."""

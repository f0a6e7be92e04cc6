"""Segmentation's training part: its objective, pipeline, loss and built-in preset."""

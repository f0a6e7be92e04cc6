"""Classification's application part: its data specs, inference part and multi-label scores."""

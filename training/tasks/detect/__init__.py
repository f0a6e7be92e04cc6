"""Detection's training part: its objective, pipeline and built-in preset."""

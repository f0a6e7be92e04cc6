"""The clip task's training part: its objective, pipeline, preset and preset section."""

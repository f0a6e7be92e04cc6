"""The segmentation task's library part: the segmenter (`model`), its scores (`scores`) and
its sliding windows over large images (`windows`)."""

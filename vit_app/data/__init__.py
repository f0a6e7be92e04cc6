"""Data sources (digits, folders, CSV files, tfds, TFRecords) and class subsets, shared by
training and evaluation."""

"""Detection's application part: its data (COCO, YOLO and Pascal VOC box files, the built-in
digit boxes), inference part, box drawing and scores."""

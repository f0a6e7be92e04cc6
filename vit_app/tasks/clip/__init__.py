"""The clip task's application part (clips and volumes): its data (`data`) and what `vit
export`, `evaluate` and `predict` do with its models (`inference`)."""

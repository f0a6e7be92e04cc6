"""Each registered task's application part, one folder a task: its data (`data`: label kind,
built-in set, the folders it recognises, their readers and checks) and what `vit predict`,
`evaluate`, `serve` and `export` do with its models (`inference`, `predict`, `evaluate`)."""

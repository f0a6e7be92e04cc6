"""`vit export` and the export at the end of `vit train`: the command (`command`), the
formats' table (`formats`, read without a framework), their writers (`writers`), the images each
file is checked on (`data`), the conversion and check of one file (`pipeline`) and the table they
report (`report`)."""

"""The `vit` command: the front door over the application, and nothing else.

- `cli`: the sub-command registry and the backend choice before any framework loads;
- `commands/`: each sub-command's flags and checks (`checks.py`: what several share), handing
  over to `vit_app.inference` or `training` once the flags are read;
- `__main__`: `python -m vit`.

Nothing imports this package: the application's parts live below it, in `vit_app` (the base
and inference) and `training` (`tests/test_structure.py` holds the order).
"""

"""A task written from the recipe of docs/architecture.md ("Add a task"), outside the project:
`count`, how many dots an image holds. `tests/test_new_task.py` copies this package into a
temporary folder, registers it with one line of `vit_keras.tasks.TASKS` and runs every `vit`
command on it.

Its parts, one module each: `model` (its head, `ViTCounter`, and its export contract),
`objective` (training), `section` (its preset section, `count`), `preset` (`dots_count`),
`data` (its data before any framework) and `data.sources` (read), `inference` (what `vit
predict`, `evaluate`, `serve` and `export` do with its models), `options` (its `vit predict`
flags) and `drawing.js` (how the page draws its answer).
"""

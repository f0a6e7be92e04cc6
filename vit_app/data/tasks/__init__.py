"""Each registered task's data as read before any framework: one module a task, whose `DATA`
(`vit_app.data.specs.TaskData`) names its built-in set, recognises its folders and checks its
specs. A task's line in `vit_keras.tasks.TASKS` names its module (`TaskParts.specs`);
`vit_app.data.specs` asks every registered one. No framework is imported here."""

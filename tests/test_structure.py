"""Imports flow one way through the whole project: the library `vit_keras`, then the app's base
(`vit_app`: console, run files, images, data, inference), the training application
(`training`) and the front door (`vit`: the command line, which nothing imports).

`RANKS` gives every module group a rank; a module may import (anywhere in it, imports inside
functions included) only modules of its own rank or lower, no two modules may import each
other in a circle, and every module must be in the table. `docs/architecture.md` explains
each rank. `--help` imports no framework.
"""

import ast
import dataclasses
import pathlib

import pytest

REPO = pathlib.Path(__file__).resolve().parent.parent
PACKAGES = ("vit_keras", "vit_app", "training", "vit")

# Lowest first. A group is a module or a package (all its modules), where `*` stands for one
# name (each task's folder); the longest match wins.
RANKS = (
    # The library: what a model is, then how it computes, then how weights reach it.
    ("vit_keras.preprocessing", "vit_keras.atomic", "vit_keras.timing", "vit_keras.names",
     "vit_keras._after_import", "vit_keras._lazy", "vit_keras.tasks.__init__",
     "vit_keras.tasks.*.__init__", "vit_keras.mobilevit.config"),
    ("vit_keras.config",),
    ("vit_keras.keras_compat", "vit_keras.families", "vit_keras.legacy"),
    ("vit_keras.quantization", "vit_keras.fast_paths"),
    ("vit_keras.checkpoints",),
    ("vit_keras.lora", "vit_keras.weight_decay", "vit_keras.pretrained"),
    ("vit_keras.core",),
    ("vit_keras.weights",),
    ("vit_keras.applications", "vit_keras.family_models", "vit_keras.intermediates",
     "vit_keras.hub_presets", "vit_keras.task_encoder", "vit_keras.mobilevit"),
    # What a model attends to, below the task folders, whose own analyses build on it.
    ("vit_keras.analysis",),
    # Each task's library folder (`vit_keras/tasks/<task>/`): its model on the encoder.
    ("vit_keras.tasks",),
    ("vit_keras.export", "vit_keras.convert", "vit_keras.serializable"),
    ("vit_keras.__init__",),
    # The application: its base, the inference and deployment commands, training, the CLI.
    # A task's folder sits beside each: its data (`vit_app/tasks/<task>/data`) with the data,
    # the rest with inference; its preset with the presets, the rest with training.
    ("vit_app.__init__", "vit_app.console", "vit_app.outputs", "vit_app.backend",
     "vit_app.hardware", "vit_app.paths", "vit_app.images", "vit_app.data",
     "vit_app.tasks.__init__", "vit_app.tasks.*.__init__", "vit_app.tasks.*.data"),
    ("vit_app.inference", "vit_app.tasks"),
    ("training.__init__", "training.presets", "training.tasks.__init__",
     "training.tasks.*.__init__", "training.tasks.*.preset", "training.tasks.*.section"),
    ("training",),
    ("training.report", "training.setup"),
    ("training.fitting",),
    ("training.finish",),
    ("training.run",),
    ("training.train", "training.bench"),
    # The front door: the `vit` command alone, nothing below imports it.
    ("vit",),
)


def module_name(path: pathlib.Path) -> str:
    """'vit_keras.core.model' for vit_keras/core/model.py; packages keep '.__init__'."""
    return ".".join(path.relative_to(REPO).with_suffix("").parts)


def importable_name(name: str) -> str:
    return name[: -len(".__init__")] if name.endswith(".__init__") else name


def in_group(name: str, group: str) -> bool:
    """Whether module `name` is `group` or inside it; a `*` in `group` matches one name."""
    parts, pattern = name.split("."), group.split(".")
    return len(parts) >= len(pattern) and all(
        want in ("*", have) for want, have in zip(pattern, parts))


def rank(name: str) -> int:
    """The rank of module `name` (`module_name` form): that of its longest matching group."""
    best, best_length = None, -1
    for position, groups in enumerate(RANKS):
        for group in groups:
            if in_group(name, group) and len(group) > best_length:
                best, best_length = position, len(group)
    if best is None:
        raise AssertionError(f"{name} has no rank: add it (or its package) to RANKS in "
                             "tests/test_structure.py and to docs/architecture.md")
    return best


def modules() -> dict[str, pathlib.Path]:
    return {module_name(path): path for package in PACKAGES
            for path in (REPO / package).rglob("*.py")}


def imported_modules(path: pathlib.Path, by_import_name: dict[str, str]) -> set[str]:
    """Every project module that the file at `path` imports, anywhere in it."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # `from package import module` needs the module; `from module import name`, the module.
            submodules = {f"{node.module}.{alias.name}" for alias in node.names}
            submodules &= set(by_import_name)
            found.update(submodules or {node.module})
    return {by_import_name[name] for name in found if name in by_import_name}


def import_graph() -> dict[str, set[str]]:
    files = modules()
    by_import_name = {importable_name(name): name for name in files}
    return {name: imported_modules(path, by_import_name) - {name}
            for name, path in files.items()}


def test_every_module_has_a_rank():
    for name in modules():
        rank(name)  # raises, naming the module, when it has none


def test_imports_flow_downwards_only():
    upward = [f"{importer} (rank {rank(importer)}) imports {imported} (rank {rank(imported)})"
              for importer, imports in import_graph().items()
              for imported in imports
              if rank(imported) > rank(importer)]
    assert not upward, "imports that go up:\n" + "\n".join(sorted(upward))


def test_no_import_circle():
    graph = import_graph()
    for start in graph:
        seen, stack = set(), [(start, (start,))]
        while stack:
            node, path = stack.pop()
            for nxt in graph[node]:
                if nxt == start:
                    pytest.fail("import circle: " + " -> ".join(path + (start,)))
                if nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, path + (nxt,)))


def test_the_rank_check_catches_an_upward_import(tmp_path):
    """The checker itself: a core module importing the weights stack is reported."""
    assert rank("vit_keras.core.layers") < rank("vit_keras.weights")
    assert rank("vit_keras.config") < rank("vit_keras.core.model") < rank("vit_app.inference.serve")
    assert rank("vit_app.inference.export.command") < rank("training.run") < rank("vit.cli")
    probe = tmp_path / "probe.py"
    probe.write_text("def late():\n    from vit_keras import weights\n")
    graph = imported_modules(probe, {"vit_keras.weights": "vit_keras.weights"})
    assert graph == {"vit_keras.weights"}


HEAVY_MODULES = ("keras", "tensorflow", "jax", "torch")
IMPORT_PROBE = """
import sys
{STATEMENT}
print(sorted(name for name in {HEAVY} if name in sys.modules))
"""
HELP_PROBE = """
from vit import cli
try:
    cli.main(sys.argv[1:] + ["--help"])
except SystemExit:
    pass
"""


def _heavy_modules_after(statement: str, tmp_path, *argv: str) -> tuple[list, str]:
    """The frameworks loaded by running `statement` in a fresh process, and its stdout."""
    import subprocess
    import sys

    from runs import vit_env

    probe = IMPORT_PROBE.replace("{HEAVY}", repr(HEAVY_MODULES)).replace("{STATEMENT}",
                                                                         statement)
    done = subprocess.run([sys.executable, "-c", probe, *argv], env=vit_env(), cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    return ast.literal_eval(done.stdout.strip().splitlines()[-1]), done.stdout


@pytest.mark.parametrize("command", ["", "train", "evaluate", "predict", "serve", "export",
                                     "inspect", "bench", "weights", "embed"])
def test_help_imports_neither_keras_nor_tensorflow(command, tmp_path):
    """`vit --help` and `vit CMD --help` answer at once: no framework is imported."""
    loaded, stdout = _heavy_modules_after(HELP_PROBE, tmp_path, *([command] if command else []))
    assert loaded == []
    assert "usage: vit" in stdout


@pytest.mark.parametrize("module", ["vit_keras", "vit_keras.config", "vit_keras.preprocessing",
                                    "training.presets"])
def test_configs_import_without_a_framework(module, tmp_path):
    """A config, a preset or the package itself is read without loading Keras."""
    loaded, _ = _heavy_modules_after(f"import {module}", tmp_path)
    assert loaded == []


# The modules that may import Keras, TensorFlow, NumPy or our own modules inside a function,
# and why; everywhere else such imports sit at the top, where a reader sees them. Optional
# extras (ONNX, LiteRT, JAX, PyTorch, PIL, ...) and the standard library may be deferred
# anywhere: a missing extra fails only the feature that needs it.
DEFERRED_IMPORTS = {
    "vit.cli": "it chooses the Keras backend before anything imports Keras",
    "vit.commands": "`run` imports its command's implementation once the backend is chosen",
    "vit_app.inference.export.formats": "`vit export --help` reads its table without a framework",
    "vit_app.inference.export.writers": "the export format table names its writers",
    "vit_app.inference.model_files": "`vit export --help` reads ACTIVATIONS without a framework",
    "vit_app.hardware": "it probes the machine before the backend is chosen",
    "training.bench": "the GPU benchmark imports it on a machine without TensorFlow",
    "vit_keras.preprocessing": "configs and presets read it without a framework",
    "vit_keras.checkpoints.read": "only a .keras checkpoint needs Keras; .npz, .safetensors and "
                                  ".pth files are read with NumPy",
}
OPTIONAL_IMPORTS = ("tensorflow", "onnx", "onnxruntime", "tf2onnx", "ai_edge_litert", "tflite_runtime", "PIL",
                    "jax", "jaxlib", "torch", "matplotlib", "huggingface_hub", "kagglehub",
                    "tensorflow_datasets", "h5py", "safetensors", "sklearn", "tensorboard",
                    "cv2", "skimage", "transformers", "timm", "keras_hub", "psutil")


def deferred_imports(path: pathlib.Path) -> list[str]:
    """'line: module' for each import inside a function of Keras, TensorFlow, NumPy or a
    module of ours."""
    import sys

    found = []
    for function in ast.walk(ast.parse(path.read_text())):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(function):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top not in OPTIONAL_IMPORTS:
                    found.append(f"{node.lineno}: {name}")
    return found


def test_imports_inside_functions_have_a_reason():
    """Keras, TensorFlow, NumPy and our own modules are imported at a module's top, but in the
    modules of `DEFERRED_IMPORTS`."""
    allowed = tuple(DEFERRED_IMPORTS)
    deferred = [f"{name}:{line}" for name, path in modules().items()
                if not importable_name(name).startswith(allowed)
                for line in deferred_imports(path)]
    assert not deferred, "move to the module's top (or give a reason in DEFERRED_IMPORTS):\n" + \
        "\n".join(deferred)


def test_the_deferred_import_check_sees_a_late_import(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("import json\n\ndef late():\n    import keras\n    import onnx\n"
                     "    from vit_keras import names\n")
    assert deferred_imports(probe) == ["4: keras", "6: vit_keras"]


MAX_FUNCTION_LINES = 60


def code_lines(function: ast.FunctionDef) -> int:
    """The lines of a function from its `def` to its end, its docstring apart."""
    body = function.body
    docstring = ast.get_docstring(function, clean=False) is not None
    if docstring:
        body = body[1:]
        if not body:
            return 1
        return (body[-1].end_lineno - body[0].lineno + 1) + 1  # and the `def` line
    return function.end_lineno - function.lineno + 1


def test_functions_are_short():
    """A function whose code (its docstring apart) runs over `MAX_FUNCTION_LINES` is split."""
    long = [f"{path.relative_to(REPO)}:{node.lineno} {node.name} ({code_lines(node)} lines)"
            for path in modules().values()
            for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and code_lines(node) > MAX_FUNCTION_LINES]
    assert not long, "functions to split:\n" + "\n".join(long)


# Each order is a fresh process (about 5 s): the two orders a user writes run in the default
# tier, the orders that once broke registration in the slow one.
@pytest.mark.parametrize("imports", [
    "import vit_keras; import keras",
    "import keras; import vit_keras",
    pytest.param("import vit_keras.config; import tensorflow; import keras",
                 marks=pytest.mark.slow),
    # A module of ours whose first line imports Keras: the layers register after it, not
    # half-way through it (they import it back).
    pytest.param("import vit_keras.fast_paths; import keras", marks=pytest.mark.slow),
    pytest.param("import vit_keras.lora; import keras", marks=pytest.mark.slow),
])
def test_keras_files_load_after_import_vit_keras_alone(imports, tmp_path):
    """The lazy package still registers its layers, whichever is imported first (TensorFlow
    asks whether Keras is installed before importing it; a module of ours may import Keras
    itself)."""
    import subprocess
    import sys

    import vit_keras
    from runs import vit_env

    config = vit_keras.ViTConfig(image_size=8, patch_size=4, hidden_size=8, mlp_dim=16,
                                 num_heads=2, num_layers=1, num_classes=3)
    vit_keras.VisionTransformer(config).save(tmp_path / "tiny.keras")
    probe = f"{imports}\nkeras.saving.load_model({str(tmp_path / 'tiny.keras')!r}, " \
            "safe_mode=True)\nprint('loaded')"
    done = subprocess.run([sys.executable, "-c", probe], env=vit_env(), cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().endswith("loaded")


# --- tasks: only a task's own modules branch on it --------------------------------------------

# A task's own modules are its folders, one in each layer (`vit_keras/tasks/<task>/`,
# `vit_app/tasks/<task>/`, `training/tasks/<task>/`), and the modules its line in
# `vit_keras.tasks.TASKS` names: the only modules that may compare with its name, test for its
# model class or read its kind from the shape of a model's outputs (docs/architecture.md, "Add
# a task"). Classification's model is the encoder's own head, so the encoder is its too.
TASK_FOLDERS = ("vit_keras.tasks", "vit_app.tasks", "training.tasks")
ENCODER_HEADS = {"classify": ("vit_keras.core",)}


def task_model_classes() -> dict[str, str]:
    """A task's model class (what its line exports, beside the plain encoder) -> the task."""
    from vit_keras import tasks

    return {name: task for task, parts in tasks.TASKS.items() for name in parts.exports}


# Shape checks that are no task's: module -> why
SHAPE_CHECKS = {"vit_keras.analysis.looking_inside": "few-shot features must be [batch, D], "
                                                     "whatever the model was trained for"}


def own_modules(task: str) -> tuple[str, ...]:
    from vit_keras import tasks

    parts = tasks.TASKS[task]
    named = (parts.head, parts.inference, parts.objective.partition(":")[0], parts.specs)
    folders = tuple(f"{layer}.{task}" for layer in TASK_FOLDERS)
    return (*folders, *ENCODER_HEADS.get(task, ()), *named)


def _in_group(name: str, groups) -> bool:
    return any(name == group or name.startswith(group + ".") for group in groups)


def _reads_output_shape(node: ast.Compare) -> bool:
    """`len(outputs.shape) == 4`, `logits.ndim == 4` and the like."""
    sides = [node.left, *node.comparators]
    for side in sides:
        target = side
        if isinstance(side, ast.Call) and getattr(side.func, "id", "") == "len" and side.args:
            target = side.args[0]
        if isinstance(target, ast.Attribute) and target.attr in ("ndim", "shape",
                                                                 "output_shape"):
            text = ast.unparse(target.value)
            if "logits" in text or "output" in text:
                return True
    return False


def task_branches(path: pathlib.Path) -> list[tuple[int, str, str | None]]:
    """(line, what, the task it concerns or None: any) of each branch on a task in a file."""
    from vit_keras import tasks

    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Compare):
            constants = [side.value for side in ast.walk(node)
                         if isinstance(side, ast.Constant) and side.value in tasks.TASKS]
            found += [(node.lineno, f"compares with {name!r}", name) for name in constants]
            if _reads_output_shape(node):
                found.append((node.lineno, "reads the task from an output's shape", None))
        elif isinstance(node, ast.Attribute) and node.attr == "per_pixel":
            found.append((node.lineno, "reads per_pixel", None))
        elif isinstance(node, ast.Call) and getattr(node.func, "id", "") == "isinstance":
            names = {getattr(each, "id", getattr(each, "attr", "")) for each in ast.walk(node)}
            found += [(node.lineno, f"tests for {name}", task)
                      for name, task in task_model_classes().items() if name in names]
    return found


def test_only_a_tasks_own_modules_branch_on_it():
    """Evaluate, predict, serve, export and training ask the model's task
    (`vit_keras.tasks`, `vit_app.inference.inference_task`, the objectives); no other module
    compares with a task's name, tests for a task's model class or reads a task from output
    shapes."""
    stray = [f"{path.relative_to(REPO)}:{line} {what}"
             for name, path in modules().items()
             for line, what, task in task_branches(path)
             if (task is None and name not in SHAPE_CHECKS) or
             (task is not None and not _in_group(name, own_modules(task)))]
    assert not stray, "branches on a task outside its own modules:\n" + "\n".join(stray)


def test_the_task_check_sees_a_branch(tmp_path):
    """The checker itself: a comparison with a task's name, an output-shape test and
    `per_pixel` are each reported."""
    source = tmp_path / "app.py"
    source.write_text("if kind == 'segment':\n    pass\n"
                      "per = len(model.outputs[0].shape) == 4\n"
                      "flag = model.per_pixel\n")
    assert [(line, task) for line, _, task in task_branches(source)] == \
        [(1, "segment"), (3, None), (4, None)]


# Imports of a task's folder from outside it that are left, each with why; a new one fails.
TASK_IMPORTS_LEFT: dict = {}


def task_folder_of(name: str) -> str | None:
    """The task whose folder holds module `name`, or None for shared code."""
    from vit_keras import tasks

    return next((task for task in tasks.TASKS for layer in TASK_FOLDERS
                 if _in_group(name, (f"{layer}.{task}",))), None)


def imports_of_task_folders(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    """(importer, imported) where shared code or another task's folder imports a task's folder
    (a task's registered parts are reached through `vit_keras.tasks`, never imported)."""
    return {(importer, imported) for importer, imports in graph.items()
            for imported in imports
            if task_folder_of(imported) not in (None, task_folder_of(importer))}


def test_no_module_outside_a_tasks_folder_imports_it():
    """Shared code reaches a task through the registry, and one task does not build on
    another's folder: what they share lives in shared modules (`vit_keras.task_encoder`,
    `training.augment.photometric`, `vit_app.images.palette`)."""
    found = imports_of_task_folders(import_graph())
    new = sorted(f"{importer} imports {imported}"
                 for importer, imported in found - set(TASK_IMPORTS_LEFT))
    assert not new, "imports of a task's folder from outside it:\n" + "\n".join(new)
    gone = set(TASK_IMPORTS_LEFT) - found
    assert not gone, f"no longer imported, drop from TASK_IMPORTS_LEFT: {sorted(gone)}"


def test_the_task_import_check_sees_shared_code_and_other_tasks():
    """The checker itself: shared code and another task importing a task's folder are
    reported; a task importing its own folder and shared code is not."""
    graph = {"vit_app.inference.predict": {"vit_app.tasks.detect.predict"},
             "training.tasks.detect.pipeline": {"training.tasks.segment.pipeline",
                                                "training.tasks.detect.objective",
                                                "training.augment"}}
    assert imports_of_task_folders(graph) == {
        ("vit_app.inference.predict", "vit_app.tasks.detect.predict"),
        ("training.tasks.detect.pipeline", "training.tasks.segment.pipeline")}


# --- tasks: only a task's own modules use its words -------------------------------------------

# A task's words: its built-in data set, its label kind, its metric keys, what its exported
# files agree on and its preset section's keys (and the keys they replaced). Classification's
# are left out: it is the encoder's own head and the default task, whose words ('digits',
# 'classes', 'accuracy') the shared data readers and presets still speak.
WORDS_LEFT: dict = {}
SHARED_METRICS = ("", "loss", "val_loss")


def task_words(task: str) -> set[str]:
    """The words of `task` (see above), from its registered parts."""
    from vit_app.data.specs import task_data
    from vit_keras import tasks

    parts, data = tasks.parts(task), task_data(task)
    objective = tasks.load_part(parts.objective)
    metrics = {name for metric in (*objective.epoch_metrics, objective.monitor)
               for name in (metric, metric.removeprefix("val_"))} - set(SHARED_METRICS)
    words = {data.built_in, data.labels, tasks.load_part(parts.inference).agreement, *metrics}
    if parts.section:
        section = tasks.load_part(parts.section)
        renamed = getattr(section, "RENAMED_FROM", "")
        words |= {key for field in dataclasses.fields(section)
                  for key in (f"{section.NAME}.{field.name}",
                              *([f"{renamed}{field.name}"] if renamed else []))}
    return words


def words_used(path: pathlib.Path, words: dict[str, str]) -> list[tuple[int, str, str]]:
    """(line, word, its task) of each string in the file that is a task's word."""
    return [(node.lineno, node.value, words[node.value])
            for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and node.value in words]


def test_only_a_tasks_own_modules_use_its_words():
    """No module outside a task's own names its built-in data, label kind, metric keys, file
    agreement or preset keys: the shared code asks the registered task for them."""
    from vit_keras import tasks

    shared = task_words(tasks.CLASSIFY)  # a task that classifies too speaks its words
    words = {word: task for task in tasks.TASKS if task != tasks.CLASSIFY
             for word in task_words(task) - shared}
    assert {"digit-scenes", "masks", "val_mean_iou", "segment.head", "objective.segment_head",
            "digit-boxes", "boxes", "box_f1"} <= set(words)
    found = {(name, word): f"{path.relative_to(REPO)}:{line} {word!r} ({task})"
             for name, path in modules().items()
             for line, word, task in words_used(path, words)
             if not _in_group(name, own_modules(task))}
    stray = sorted(where for key, where in found.items() if key not in WORDS_LEFT)
    assert not stray, "a task's words outside its own modules:\n" + "\n".join(stray)
    assert not set(WORDS_LEFT) - set(found), "no longer used, drop from WORDS_LEFT"


def test_the_word_check_sees_a_tasks_words(tmp_path):
    """The checker itself: a built-in set's name, a metric key and a preset key are reported,
    a word no task owns is not."""
    source = tmp_path / "shared.py"
    source.write_text('SPEC = "digit-scenes"\nKEY = "val_box_f1"\n'
                      'SET = ["segment.native"]\nOTHER = "accuracy"\n')
    words = {"digit-scenes": "segment", "val_box_f1": "detect", "segment.native": "segment"}
    assert words_used(source, words) == [(1, "digit-scenes", "segment"),
                                         (2, "val_box_f1", "detect"),
                                         (3, "segment.native", "segment")]


# --- scripts outside the packages ---------------------------------------------------------------

def project_imports(path: pathlib.Path) -> list[tuple[int, str, str | None]]:
    """(line, module, name or None) of each import of a project package in a script; a name
    for `from MODULE import NAME`."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module \
                and node.module.split(".")[0] in PACKAGES:
            found += [(node.lineno, node.module, alias.name) for alias in node.names]
        elif isinstance(node, ast.Import):
            found += [(node.lineno, alias.name, None) for alias in node.names
                      if alias.name.split(".")[0] in PACKAGES]
    return found


def missing_import(module: str, name: str | None) -> str | None:
    """What of `from module import name` (or `import module`) the project lacks, or None."""
    import importlib
    import importlib.util

    def found(dotted: str) -> bool:
        try:
            return importlib.util.find_spec(dotted) is not None
        except ModuleNotFoundError:  # a parent that is a module, not a package
            return False

    if not found(module):
        return module
    if name is None or found(f"{module}.{name}"):
        return None
    return None if hasattr(importlib.import_module(module), name) else f"{module}.{name}"


@pytest.mark.parametrize("folder", ["benchmarks", "tools"])
def test_benchmarks_and_tools_import_only_what_the_project_has(folder):
    """A module moved or renamed leaves no script importing its old name (the scripts run
    only when someone measures, so nothing else would notice)."""
    gone = [f"{path.relative_to(REPO)}:{line}: {what}"
            for path in sorted((REPO / folder).glob("*.py"))
            for line, module, name in project_imports(path)
            if (what := missing_import(module, name))]
    assert not gone, "imports of what the project no longer has:\n" + "\n".join(gone)


def test_the_script_import_check_sees_a_moved_module(tmp_path):
    script = tmp_path / "bench.py"
    script.write_text("from vit_app.data import sources\nfrom vit_keras import nothing_here\n"
                      "import vit_app.no_such\nimport numpy\nfrom vit_app.data import specs\n")
    assert [missing_import(module, name) for _, module, name in project_imports(script)] == \
        ["vit_app.data.sources", "vit_keras.nothing_here", "vit_app.no_such", None]

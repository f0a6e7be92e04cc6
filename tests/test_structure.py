"""The application's layers import one way: base <- inference <- training <- cli, with no
import circle among the modules (imports inside functions included); `--help` imports no
framework."""

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent / "vit"
LAYER_OF_PACKAGE = {"vit.inference": 1, "training": 2, "vit.cli": 3, "vit.__main__": 3}


def module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer(name: str) -> int:
    for package, rank in LAYER_OF_PACKAGE.items():
        if name == package or name.startswith(package + "."):
            return rank
    return 0  # the base: console, outputs, backend, hardware, images, data


def imported_modules(path: pathlib.Path, known: set[str]) -> set[str]:
    """Every `vit` module that the file at `path` imports, anywhere in it."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # `from package import module` needs the module; `from module import name`, the module.
            submodules = {f"{node.module}.{alias.name}" for alias in node.names} & known
            found.update(submodules or {node.module})
    return {name for name in found if name in known}


def import_graph() -> dict[str, set[str]]:
    files = {module_name(path): path for path in ROOT.rglob("*.py")}
    known = set(files)
    return {name: imported_modules(path, known) - {name} for name, path in files.items()}


def test_layers_import_downwards_only():
    upward = [f"{importer} imports {imported}"
              for importer, imports in import_graph().items()
              for imported in imports
              if layer(imported) > layer(importer)]
    assert upward == []


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


HEAVY_MODULES = ("keras", "tensorflow", "jax", "torch")
HELP_PROBE = """
import sys
from vit import cli
try:
    cli.main(sys.argv[1:] + ["--help"])
except SystemExit:
    pass
print(sorted(name for name in {HEAVY} if name in sys.modules))
"""


@pytest.mark.parametrize("command", ["", "train", "evaluate", "predict", "serve", "export",
                                     "inspect", "bench", "weights", "embed"])
def test_help_imports_neither_keras_nor_tensorflow(command, tmp_path):
    """`vit --help` and `vit CMD --help` answer at once: no framework is imported."""
    import subprocess
    import sys

    from runs import vit_env

    probe = HELP_PROBE.replace("{HEAVY}", repr(HEAVY_MODULES))
    done = subprocess.run([sys.executable, "-c", probe, *([command] if command else [])],
                          env=vit_env(), cwd=tmp_path, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "[]"
    assert "usage: vit" in done.stdout

"""Artifacts the tests build once and share: tiny trained models, their exports, reference runs.

A test that needs a trained model asks `shared(name, key, build)` for a folder. The first
process to ask (any xdist worker, any pytest run, the default tier or the slow one) builds it
under a file lock; every other asker waits for that build and then reads the same folder.

The folder's name is `name` plus a digest of `key` (what the test asks for: a config, training
options) and of `CODE_KEY` (every source file of the packages that shape a model or a run, the
test helpers that train, and the versions of the frameworks). A changed line in `vit_keras/`,
`vit_app/`, `training/` or `vit/`, or a new Keras, therefore builds afresh; nothing stale is
ever read.

The artifacts live under `$VIT_TEST_ARTIFACTS` (default `~/.cache/vit_keras/test-artifacts`), so
the slow tier reuses what the default tier built. Entries unused for a week are removed at the
start of a run. `VIT_TEST_ARTIFACTS=` (empty) keeps them in the run's own temporary folder.
"""

import contextlib
import fcntl
import hashlib
import importlib.metadata
import inspect
import json
import os
import pathlib
import shutil
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parent.parent
_CODE = ("vit_keras", "vit_app", "training", "vit")
_TEST_CODE = ("tests/helpers.py", "tests/artifacts.py", "tests/runs.py", "tests/conftest.py")
_VERSIONS = ("keras", "tensorflow", "jax", "jaxlib", "numpy", "scikit-learn", "onnxruntime",
             "ai-edge-litert", "tf2onnx")
DEFAULT_ROOT = os.path.join(os.path.expanduser("~"), ".cache", "vit_keras", "test-artifacts")
UNUSED_DAYS = 7
JAX_CACHE = "jax-compilation-cache"
# The JAX cache's bound, kept by `prune` when a run starts (its oldest entries go first). Not
# JAX's own limit (JAX_COMPILATION_CACHE_MAX_SIZE): with one, every entry JAX writes first
# reads the time stamp of every entry there, under a lock all processes share, and a run slows
# as its cache grows (docs/testing.md has the figures).
JAX_CACHE_BYTES = 2 * 2**30
_COMPLETE = ".complete"


def _code_key() -> str:
    digest = hashlib.sha256()
    paths = [path for package in _CODE for path in sorted((REPO / package).rglob("*.py"))]
    paths += [REPO / name for name in _TEST_CODE]
    for path in paths:
        digest.update(str(path.relative_to(REPO)).encode())
        digest.update(path.read_bytes())
    for name in _VERSIONS:
        try:
            digest.update(f"{name}=={importlib.metadata.version(name)}".encode())
        except importlib.metadata.PackageNotFoundError:
            digest.update(f"{name} absent".encode())
    return digest.hexdigest()


CODE_KEY = _code_key()


def root() -> pathlib.Path:
    """The folder that holds every shared artifact (made on first use)."""
    folder = os.environ.get("VIT_TEST_ARTIFACTS")
    if folder is None:
        folder = DEFAULT_ROOT
    elif not folder:
        # Set per run by conftest for every xdist worker: the run's own temporary folder.
        folder = os.environ["VIT_TEST_RUN_ARTIFACTS"]
    # Absolute: every test runs in a working directory of its own.
    path = pathlib.Path(folder).expanduser().resolve()
    path.mkdir(parents=True, exist_ok=True)
    return path


def digest(name: str, key, build=None) -> str:
    """`name-<16 hex>`: the folder name of artifact `name` for `key` under the current code,
    the current Keras backend and, given `build`, the whole file that defines it (its
    constants and helpers shape the artifact too)."""
    text = json.dumps(key, sort_keys=True, default=repr) + CODE_KEY
    text += os.environ.get("KERAS_BACKEND", "")
    if build is not None:
        text += pathlib.Path(inspect.getsourcefile(build)).read_text()
    return f"{name}-{hashlib.sha256(text.encode()).hexdigest()[:16]}"


@contextlib.contextmanager
def _locked(path: pathlib.Path, blocking: bool = True):
    """Holds the lock file `path` (yields False at once when `blocking` is off and another
    process holds it). Lock files are never removed: a process may be waiting on one."""
    with open(path, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


# Seconds this process spent building shared artifacts or waiting for another process's build;
# tests/budget.py does not charge them to the test that happened to ask first.
seconds_building = 0.0


def shared(name: str, key, build) -> pathlib.Path:
    """The folder of artifact `name` for `key`, built once by `build(folder)`.

    Args:
        name: a short name for the artifact (the folder's prefix).
        key: everything the artifact depends on besides the code (a config, options): any
            JSON-able value; other objects count by their `repr`.
        build: writes the artifact into the empty folder it is given. It runs in a temporary
            sibling that is renamed when it returns, so no reader sees half an artifact.

    Returns:
        The finished folder; its files must be treated as read-only (copy before changing).
    """
    global seconds_building
    base = root()
    final = base / digest(name, key, build)
    marker = final / _COMPLETE
    started = time.perf_counter()
    with _locked(base / f"{final.name}.lock"):
        if not marker.exists():
            scratch = pathlib.Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=base))
            try:
                build(scratch)
                (scratch / _COMPLETE).write_text(f"{time.time()}\n")
                shutil.rmtree(final, ignore_errors=True)
                os.rename(scratch, final)
            finally:
                shutil.rmtree(scratch, ignore_errors=True)
        os.utime(marker)  # under the lock: `prune` never removes it meanwhile
    seconds_building += time.perf_counter() - started
    return final


def prune(days: float = UNUSED_DAYS) -> None:
    """Removes artifacts (and scratch folders a killed build left) unused for `days` days;
    one in use by another process (its lock held) stays."""
    base = root()
    cutoff = time.time() - days * 86400
    for entry in base.iterdir():
        if not entry.is_dir() or entry.name == JAX_CACHE:
            continue
        name = entry.name.split(".")[1] if entry.name.startswith(".") else entry.name
        with _locked(base / f"{name}.lock", blocking=False) as free:
            marker = entry / _COMPLETE
            used = marker.stat().st_mtime if marker.exists() else entry.stat().st_mtime
            if free and used < cutoff:
                shutil.rmtree(entry, ignore_errors=True)
    _bound_jax_cache(base / JAX_CACHE)


def _bound_jax_cache(folder: pathlib.Path, limit: int = JAX_CACHE_BYTES) -> None:
    """Removes the oldest entries of JAX's compilation cache until it holds at most `limit`
    bytes (an entry another process reads meanwhile is compiled again, with a warning)."""
    if not folder.is_dir():
        return
    entries = sorted(((item.stat(), item) for item in folder.iterdir() if item.is_file()),
                     key=lambda pair: pair[0].st_mtime)
    total = sum(stat.st_size for stat, _ in entries)
    for stat, item in entries:
        if total <= limit:
            break
        item.unlink(missing_ok=True)
        total -= stat.st_size

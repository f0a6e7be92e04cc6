"""Shared test setup: quiet TensorFlow, a fixed seed, a clean Keras state and a working
directory of its own per test."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")


def _share_the_cores() -> tuple[int, list[str], bool]:
    """Each xdist worker computes on its share of the cores: OpenMP's and OpenBLAS's pools here
    (read when the libraries load), TensorFlow's intra-op pool once it is imported. On 2 cores,
    255 tests of 9 files took 103-110 s with two threads per worker, 98 s with one
    (docs/testing.md). Returns (threads, the variables set here, whether this process is
    limited): the variables are removed again once the libraries have read them, so the
    processes a test starts use every core, as a user's run does (most of the slow tier is one
    such process at a time; limited, its JAX pass took 2-4 times longer per file)."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    threads = max(1, len(os.sched_getaffinity(0)) // workers)
    set_here = []
    # A pytest a test starts (the JAX pass) inherits the worker's variables: only the worker
    # that set the owner (itself) is limited.
    if workers > 1 and os.environ.setdefault("VIT_TEST_THREADS_OWNER",
                                             str(os.getpid())) == str(os.getpid()):
        for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
            if name not in os.environ:
                os.environ[name] = str(threads)
                set_here.append(name)
        return threads, set_here, True
    return threads, set_here, False


_THREADS, _SET_HERE, _THREADS_LIMITED = _share_the_cores()

import gc  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402
import tempfile  # noqa: E402

import pytest  # noqa: E402

# A shell without job control starts background jobs (`.ci/run &`) with SIGINT ignored, which
# `vit train` respects (as `nohup` wants) and every child would inherit: the Ctrl+C tests need
# the disposition an interactive run has. Children exec'd from here then start with the default.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

from vit_keras import ViTConfig  # noqa: E402  (no framework: the configuration alone)

keras = None  # imported by `_load_frameworks` in the processes that run tests


def _runs_tests(config) -> bool:
    """False only in xdist's controller, which hands the tests to its workers."""
    return hasattr(config, "workerinput") or not getattr(config.option, "numprocesses", None)


def _load_frameworks():
    """Keras (and the backend under it) with the core share `_share_the_cores` chose. Only the
    processes that run tests pay for the import: xdist's workers start a few seconds sooner
    when the controller does not import Keras first."""
    global keras
    from vit_app import console

    with console.quiet_native_stderr():  # TensorFlow's and jaxlib's start-up lines, as `vit`
        import keras as imported
    keras = imported
    if _THREADS_LIMITED and keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        tf.config.threading.set_intra_op_parallelism_threads(_THREADS)
    for name in _SET_HERE:  # read by now (NumPy's OpenBLAS, OpenMP); children start unlimited
        os.environ.pop(name)


DEFAULT_TIER_WORKERS = 2
# A slow test mostly starts processes (`vit train` runs to kill and resume, JAX coordinators,
# servers) and waits on them: on 2 cores the whole slow tier took 1,137 s of wall with two
# workers (the cores 88% busy) and 1,079 s with three (98%) (docs/testing.md).
SLOW_TIER_WORKERS = DEFAULT_TIER_WORKERS + 1


def pytest_xdist_auto_num_workers(config):
    """The workers of `-n auto` (the project's addopts): one more for the slow tier (`-m
    slow`) than for the default one."""
    return SLOW_TIER_WORKERS if config.getoption("markexpr") == "slow" else DEFAULT_TIER_WORKERS


def pytest_configure(config):
    """Caches every worker and every process it starts share, XLA's quick compilation
    (`runs.TEST_XLA_FLAGS`) and the time-budget guard.

    The controller (or a run without xdist) chooses the artifact folder (`tests/artifacts.py`)
    before the workers start, so they inherit it; the JAX compilation cache lies in it, so each
    JAX process compiles an op only once per shape, whichever process met it first.
    """
    import artifacts
    import budget
    from runs import TEST_XLA_FLAGS, xla_flags

    os.environ["XLA_FLAGS"] = xla_flags(*TEST_XLA_FLAGS)  # read when XLA starts, in any process
    if _runs_tests(config):
        _load_frameworks()
    if not hasattr(config, "workerinput"):
        if os.environ.get("VIT_TEST_ARTIFACTS") == "":
            os.environ["VIT_TEST_RUN_ARTIFACTS"] = tempfile.mkdtemp(prefix="vit-test-artifacts-")
        artifacts.prune()
    for name, value in (("JAX_COMPILATION_CACHE_DIR", str(artifacts.root() / artifacts.JAX_CACHE)),
                        ("JAX_COMPILATION_CACHE_MAX_SIZE", "-1"),  # bounded by artifacts.prune
                        ("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0"),
                        ("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")):
        os.environ.setdefault(name, value)
    config.pluginmanager.register(budget.BudgetGuard(config), "vit-budget-guard")


def pytest_unconfigure(config):
    if not hasattr(config, "workerinput") and os.environ.get("VIT_TEST_ARTIFACTS") == "":
        shutil.rmtree(os.environ.pop("VIT_TEST_RUN_ARTIFACTS", ""), ignore_errors=True)


@pytest.fixture(autouse=True)
def _own_working_directory(tmp_path, monkeypatch):
    """Every test runs in a folder of its own, never in the checkout: a `vit train` without
    --output writes saved_models/ under the working directory, and the project's own
    saved_models/ (from the README's first command) must neither change nor change a result."""
    monkeypatch.chdir(tmp_path)


@pytest.fixture(autouse=True)
def _clean_keras_state():
    keras.mixed_precision.set_global_policy("float32")
    keras.utils.set_random_seed(0)
    yield
    keras.mixed_precision.set_global_policy("float32")
    # Without the full garbage collection clear_session does by default: it took a quarter of
    # the suite's time (0.25-1.5 s a test); Python's own collector still runs as it always does.
    keras.backend.clear_session(free_memory=False)


# A 2-block ViT on 32x32 images with 8x8 patches: fast enough for any test.
TINY_CONFIG = ViTConfig(image_size=32, patch_size=8, hidden_size=32, mlp_dim=64, num_heads=4,
                        num_layers=2, num_classes=5)


@pytest.fixture
def tiny_config():
    """`TINY_CONFIG`: a 2-block ViT on 32x32 images with 8x8 patches."""
    return TINY_CONFIG


# --- how many slow tests the default run leaves out (pyproject's -m "not slow") -----------------

_slow_deselected = []


# Each tier's longest tests (the whole runs, and what builds the artifacts others wait for),
# started first so that the rest fills the other worker around them instead of waiting for
# them at the end: xdist hands each worker a contiguous half and a worker that runs out takes
# the tail of the other's, so the last tests left are short ones.
LONGEST_FIRST = ("tests/test_backends.py::test_library_tests_pass_on",
                 "tests/test_segmentation_large.py::test_a_folder_of_large_grayscale_slices",
                 "tests/reliability/test_preemption.py::test_two_jax_processes",
                 "tests/test_detection_run.py::test_a_folder_of_voc_photographs",
                 "tests/test_gpu_benchmarks.py::test_gpu_benchmark_rows_run_on_a_cpu",
                 "tests/test_detection_run.py::test_a_folder_of_yolo_boxes",
                 "tests/test_export_command.py::test_an_int8_file_below_its_bar",
                 "tests/test_tasks.py::test_a_task_registered_by_one_line",
                 "tests/test_segmentation_data.py::test_train_segment_on_a_folder",
                 "tests/test_training_adapt.py::test_vit_train_on_a_folder_adapts",
                 "tests/test_training_run.py::test_an_export_that_fails_its_check",
                 "tests/test_segmentation_deploy.py::test_every_format_matches_keras",
                 "tests/test_structure.py::test_keras_files_load_after_import_vit_keras_alone")


def pytest_collection_modifyitems(config, items):
    """Moves the cases of sampled families past their count to the slow tier (`tiers.py`);
    counts the slow tests the marker expression deselects (pytest deselects them after); puts
    `LONGEST_FIRST` at the front."""
    import tiers

    tiers.mark_sampled(items)
    if "not slow" in (config.option.markexpr or ""):
        _slow_deselected.append(sum(1 for item in items if item.get_closest_marker("slow")))
    items.sort(key=lambda item: next((rank for rank, prefix in enumerate(LONGEST_FIRST)
                                      if item.nodeid.startswith(prefix)), len(LONGEST_FIRST)))


def pytest_sessionfinish(session):
    """xdist workers hand their count to the controller."""
    if hasattr(session.config, "workeroutput"):
        session.config.workeroutput["slow_deselected"] = max(_slow_deselected, default=0)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """The controller (under xdist) receives each worker's count."""
    _slow_deselected.append(getattr(node, "workeroutput", {}).get("slow_deselected", 0))


def pytest_terminal_summary(terminalreporter, config):
    count = max(_slow_deselected, default=0)
    if count:
        terminalreporter.write_line(
            f"{count} slow test{'s' if count != 1 else ''} deselected (-m 'not slow'); run "
            "them with: pytest -m slow")


class TrainedModel:
    """A tiny classifier trained for a few seconds (`helpers.trained_digit_classifier`), built
    once for every worker and run (`artifacts.shared`): `model()` loads a fresh copy; `train`
    (0..255, calibration), `held_out` and `labels` are images it never trained on."""

    def __init__(self, path, config, train, held_out, labels):
        self.path, self.config = str(path), config
        self.train, self.held_out, self.labels = train, held_out, labels

    def model(self):
        import vit_keras  # noqa: F401  registers the layers

        return keras.saving.load_model(self.path, compile=False)


def train_once(config, **options) -> TrainedModel:
    """`config` trained on the digits with `trained_digit_classifier(config, **options)`, or
    the copy an earlier test, worker or run already trained under the same code."""
    from artifacts import shared
    from helpers import digit_split, trained_digit_classifier

    def build(folder):
        model = trained_digit_classifier(config, **options)[0]
        model.save(folder / "model.keras")
        keras.backend.clear_session(free_memory=False)

    folder = shared("trained-digits", {"config": config, "options": options}, build)
    held_out = options.get("held_out", 200)
    return TrainedModel(folder / "model.keras", config, *digit_split(config, held_out))


@pytest.fixture(scope="session")
def trained_tiny():
    """`tiny_config` trained on five digits (93.5-98% top-1 on held-out images, with one or two
    threads, with or without oneDNN)."""
    return train_once(TINY_CONFIG)




def pytest_collection_finish(session):
    """What every test shares (the frameworks, the test modules, their parameters) leaves the
    garbage collector's generations: each worker's heap holds millions of TensorFlow and Keras
    objects that every full collection walked again. (Rarer collections as well were faster on
    a subset, but let cyclic garbage pile up until one `gc.collect()` stalled a test for 36 s.)"""
    gc.collect()
    gc.freeze()

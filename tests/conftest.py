"""Shared test setup: quiet TensorFlow, a fixed seed, a clean Keras state and a working
directory of its own per test."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import signal  # noqa: E402

import pytest  # noqa: E402

# A shell without job control starts background jobs (`.ci/run &`) with SIGINT ignored, which
# `vit train` respects (as `nohup` wants) and every child would inherit: the Ctrl+C tests need
# the disposition an interactive run has. Children exec'd from here then start with the default.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

from vit import console  # noqa: E402

with console.quiet_native_stderr():  # TensorFlow's and jaxlib's start-up lines, as `vit` does
    import keras  # noqa: E402

from vit_keras import ViTConfig  # noqa: E402


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


@pytest.fixture
def tiny_config():
    """A 2-block ViT on 32x32 images with 8x8 patches: fast enough for any test."""
    return ViTConfig(image_size=32, patch_size=8, hidden_size=32, mlp_dim=64, num_heads=4,
                     num_layers=2, num_classes=5)


# --- how many slow tests the default run leaves out (pyproject's -m "not slow") -----------------

_slow_deselected = []


def pytest_collection_modifyitems(config, items):
    """Counts the slow tests the marker expression deselects (pytest deselects them after)."""
    if "not slow" in (config.option.markexpr or ""):
        _slow_deselected.append(sum(1 for item in items if item.get_closest_marker("slow")))


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
            "them with: pytest -m slow -n 0")


class TrainedModel:
    """A tiny classifier trained for a few seconds (`helpers.trained_digit_classifier`), saved
    once per session: `model()` loads a fresh copy; `train` (0..255, calibration), `held_out`
    and `labels` are images it never trained on."""

    def __init__(self, path, config, train, held_out, labels):
        self.path, self.config = str(path), config
        self.train, self.held_out, self.labels = train, held_out, labels

    def model(self):
        import vit_keras  # noqa: F401  registers the layers

        return keras.saving.load_model(self.path, compile=False)


def train_once(factory, config, name, **options) -> TrainedModel:
    """Trains `config` on the digits and saves it under the session's temporary folder."""
    from helpers import trained_digit_classifier

    model, train, held_out, labels = trained_digit_classifier(config, **options)
    path = factory.mktemp(name) / "model.keras"
    model.save(path)
    keras.backend.clear_session(free_memory=False)
    return TrainedModel(path, config, train, held_out, labels)


@pytest.fixture(scope="session")
def trained_tiny(tmp_path_factory):
    """`tiny_config` trained on five digits (about 95% top-1 on held-out images, with or without oneDNN)."""
    config = ViTConfig(image_size=32, patch_size=8, hidden_size=32, mlp_dim=64, num_heads=4,
                       num_layers=2, num_classes=5)
    return train_once(tmp_path_factory, config, "trained_tiny")

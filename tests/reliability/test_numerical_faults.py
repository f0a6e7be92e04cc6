"""A NaN loss stops `vit train` cleanly at the first check after the step it appears (every
`loop.check_every` steps, every backup and every epoch end; with check_every=1 at that very
step), before any backup of a later step; the last good backup resumes."""

import json
import math

import keras
import numpy as np
import pytest
import tensorflow as tf

from training import callbacks, pipeline, run
from training.presets import get_preset

POISONED_STEP = 7  # 1-based global step whose batch holds NaN pixels
# digits on a 1-block, 8 px ViT: 2 epochs of 9 steps run in a few seconds.
PRESET = get_preset("digits_tiny").replace(
    schedule={"epochs": 2, "batch_size": 128},
    augment={"translate": 0.0, "rotate": 0.0, "zoom": 0.0},
    loop={"eval_every": 2, "backup_every": 3},
    model={"image_size": 8, "patch_size": 4, "hidden_size": 16, "mlp_dim": 32, "num_heads": 2,
           "num_layers": 1})


def _poisoned(train_dataset, step):
    """`pipeline.train_dataset` whose `step`-th batch (1-based, counting from the start) is NaN."""
    def poisoned_dataset(*args, **kwargs):
        dataset = train_dataset(*args, **kwargs)
        first = kwargs.get("start_epoch", 0) * kwargs["steps_per_epoch"] + kwargs.get(
            "start_step", 0)

        def maybe_poison(index, batch):
            images, labels = batch
            bad = tf.equal(index + first + 1, step)
            return tf.where(bad, images * np.nan, images), labels

        return dataset.enumerate().map(maybe_poison)

    return poisoned_dataset


@pytest.mark.slow
def test_nan_batch_stops_at_the_next_check_keeps_backup_and_resumes(tmp_path, monkeypatch):
    output = str(tmp_path)
    monkeypatch.setattr(pipeline, "train_dataset", _poisoned(pipeline.train_dataset, POISONED_STEP))
    # Checked before the backups (3, 6) and at the epoch's end (step 9, where the epoch's
    # backup would be): the NaN of step 7 is seen there, before that backup.
    assert PRESET.loop.check_every > 9
    with pytest.raises(callbacks.NonFiniteLossError,
                       match=r"epoch 1, step 9 \(global step 9; the loss was finite at the check "
                             r"of global step 6\)") as stopped:
        run.train(PRESET, output=output, strategy="default", export=False, inspect=False)
    assert "last good backup (global step 6)" in str(stopped.value)
    assert not (tmp_path / "model.keras").exists()
    state = json.loads((tmp_path / "backup" / "state.json").read_text())
    assert state["global_step"] == 6            # the step before the NaN, not the NaN step
    import h5py

    with h5py.File(tmp_path / "backup" / state["weights"]) as weights:
        arrays = []
        weights.visititems(lambda name, item: arrays.append(item[()])
                           if isinstance(item, h5py.Dataset) else None)
    assert arrays and all(np.all(np.isfinite(a)) for a in arrays if a.dtype.kind == "f")

    monkeypatch.undo()  # the data is fixed: resume finishes the run
    keras.backend.clear_session()
    assert run.train(PRESET, output=output, resume=True, strategy="default",
                     export=False, inspect=False) == 0
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert math.isfinite(metrics["val_loss"])


@pytest.mark.slow
def test_cli_reports_the_step_and_exits_1(tmp_path, monkeypatch, capsys):
    from vit import cli
    from training import train

    monkeypatch.setattr(pipeline, "train_dataset", _poisoned(pipeline.train_dataset, 2))
    every_step = PRESET.replace(loop={"check_every": 1})
    monkeypatch.setattr(train, "resolve_preset", lambda args: every_step)
    status = cli.main(["train", "--output", str(tmp_path), "--no-export", "--no-inspect",
                       "--strategy", "default"])
    assert status == 1
    assert ("non-finite loss (nan) at epoch 1, step 2 (global step 2; the loss was finite at "
            "the check of global step 1)") in capsys.readouterr().err

"""The clip task from the command line: `vit train --task clip` on a folder of videos, frame
folders and volumes as users bring them (several lengths and sizes), the readers' axes and
errors, and the windows a clip becomes."""

import json
import os

import numpy as np
import pytest
import tensorflow as tf
from clip_files import moving_square, write_nifti, write_video

from vit import cli
from vit_app.tasks.clip.data import clip_classes, readers, recognises
from vit_app.tasks.clip.data.sources import Windows, window_indices

TINY = ["--epochs", "1", "--batch-size", "4", "--no-inspect", "--formats", "tflite",
        "--set", "model.image_size=16", "--set", "model.patch_size=8",
        "--set", "model.hidden_size=16", "--set", "model.mlp_dim=32",
        "--set", "model.num_heads=2", "--set", "model.num_layers=1",
        "--set", "clip.frames=4", "--set", "data.adapt=false"]


def _clip_folder(root):
    """Two classes; in each a video, a frame folder, a .npy and a NIfTI volume, of several
    lengths and sizes."""
    from PIL import Image

    for label, direction in (("left", -1), ("right", 1)):
        folder = root / label
        folder.mkdir(parents=True)
        for index in range(2):
            write_video(str(folder / f"video{index}.{('mp4', 'avi')[index]}"),
                         moving_square(10 + 4 * index, 40, 48 + 8 * index, direction))
            frames = folder / f"frames{index}"
            frames.mkdir()
            for number, frame in enumerate(moving_square(6 + index, 24, 24, direction)):
                Image.fromarray(frame).save(frames / f"frame_{number + 1}.png")
            np.save(folder / f"scan{index}.npy",
                    moving_square(5, 20, 20, direction)[..., 0].astype(np.int16) * 7)
            write_nifti(str(folder / f"scan{index}.nii.gz"),
                         moving_square(8, 18, 22, direction)[..., 0].astype(np.float32))
    return root


@pytest.mark.slow  # 18 s: trains, exports, predicts from two files and evaluates
def test_vit_train_on_a_folder_of_videos_frames_and_volumes(tmp_path):
    data = _clip_folder(tmp_path / "clips")
    assert recognises(str(data)) and len(clip_classes(str(data))["left"]) == 8
    output = tmp_path / "run"
    assert cli.main(["train", "--task", "clip", "--data", f"folder:{data}",
                     "--set", "data.val_split=0.25", "--output", str(output), *TINY]) == 0
    metrics = json.loads((output / "metrics.json").read_text())
    assert metrics["objective"] == "clip" and metrics["num_train_examples"] == 12
    assert 0.0 <= metrics["val_top1_views"] <= 1.0 and metrics["views"] == 3
    report = json.loads((output / "export.json").read_text())
    assert report["task"] == "clip" and report["formats"]["tflite"]["passed"]
    import keras

    model = keras.saving.load_model(output / "model.keras", safe_mode=True)
    assert model.vit_task == "clip" and model.input_shape == (None, 4, 16, 16, 3)
    _predict_and_evaluate(tmp_path, data, output)


def _predict_and_evaluate(tmp_path, data, output):
    """`vit predict` answers new files of each kind (and the TFLite file the same class),
    skipping an unreadable one by name; `vit evaluate` scores a clip folder."""
    new = tmp_path / "new"
    new.mkdir()
    write_video(str(new / "new.mp4"), moving_square(12, 30, 30, 1))
    write_nifti(str(new / "new.nii.gz"), moving_square(9, 16, 16, -1)[..., 0])
    (new / "broken.webm").write_bytes(b"\x1a\x45\xdf\xa3 truncated")
    answers = {}
    for name in ("model.keras", "model.tflite"):
        written = tmp_path / f"{name}.json"
        assert cli.main(["predict", str(new), str(data / "left" / "frames0"), "--model",
                         str(output / name), "--top-k", "2", "--output", str(written)]) == 0
        report = json.loads(written.read_text())
        answers[name] = [row["top"][0]["class"] for row in report["predictions"]]
        assert [os.path.basename(row["file"]) for row in report["predictions"]] == \
            ["new.mp4", "new.nii.gz", "frames0"]
        assert all(len(row["top"]) == 2 and row["top"][0]["score"] >= row["top"][1]["score"]
                   for row in report["predictions"])
        assert "broken.webm" in json.dumps(report["skipped"])
    assert answers["model.keras"] == answers["model.tflite"]
    scored = tmp_path / "scores.json"
    assert cli.main(["evaluate", "--model", str(output / "model.keras"), "--data",
                     f"folder:{data}", "--output", str(scored)]) == 0
    results = json.loads(scored.read_text())
    assert results["examples"] == 16 and 0.0 <= results["top1"] <= 1.0 and results["views"] == 3


def test_bad_clips_are_named_before_training(tmp_path, capsys):
    data = _clip_folder(tmp_path / "clips")
    (data / "left" / "broken.mp4").write_bytes(b"not a video at all")
    np.save(data / "right" / "slice.npy", np.zeros((20, 20), np.float32))
    assert cli.main(["train", "--task", "clip", "--data", f"folder:{data}",
                     "--output", str(tmp_path / "run"), *TINY]) == 2
    message = capsys.readouterr().err
    assert "2 of 18 clips cannot be used" in message and "epoch" not in message
    assert "broken.mp4: no frame could be decoded" in message
    assert "slice.npy: an array of shape (20, 20); expected a volume of depth x height" in \
        message
    (data / "left" / "photo.png").write_bytes(b"")
    with pytest.raises(ValueError, match="photo.png: a single image; a clip is a video"):
        clip_classes(str(data))


def test_a_short_clip_is_refused_by_name_under_the_refuse_rule(tmp_path, capsys):
    data = _clip_folder(tmp_path / "clips")
    assert cli.main(["train", "--task", "clip", "--data", f"folder:{data}", "--output",
                     str(tmp_path / "run"), *TINY, "--set", "clip.short=refuse",
                     "--set", "clip.stride=3"]) == 2
    assert "frames0: 6 frames, a window needs 10" in capsys.readouterr().err


def test_volumes_are_read_depth_first_and_stretched_to_8_bits(tmp_path):
    volume = np.arange(4 * 5 * 6, dtype=np.float32).reshape(4, 5, 6)
    write_nifti(str(tmp_path / "scan.nii"), volume)
    np.savez(tmp_path / "scan.npz", volume=volume)
    from_nifti = readers.read_clip(str(tmp_path / "scan.nii"))
    from_npz = readers.read_clip(str(tmp_path / "scan.npz"))
    assert from_nifti.shape == (4, 5, 6, 3) and from_nifti.dtype == np.uint8
    np.testing.assert_array_equal(from_nifti, from_npz)
    assert from_nifti[0, 0, 0, 0] == 0 and from_nifti[-1, -1, -1, 0] == 255
    np.savez(tmp_path / "two.npz", a=volume, b=volume)
    with pytest.raises(ValueError, match="holds 2 arrays .*expected one volume"):
        readers.read_clip(str(tmp_path / "two.npz"))


def test_frame_folders_are_read_in_natural_order(tmp_path):
    from PIL import Image

    for number in (1, 2, 10):
        Image.fromarray(np.full((4, 4, 3), number, np.uint8)).save(tmp_path / f"f{number}.png")
    assert list(readers.read_clip(str(tmp_path))[:, 0, 0, 0]) == [1, 2, 10]


@pytest.mark.parametrize("length, start, expected", [
    (20, 3, [3, 5, 7, 9]),  # a window of 4 frames 2 apart, from frame 3
    (5, 0, [0, 1, 3, 4]),   # 5 frames, shorter than the window's 7: stretched over it
])
def test_a_window_takes_frames_stride_apart_or_stretches_a_short_clip(length, start,
                                                                      expected):
    indices = window_indices(tf.constant(length), Windows(frames=4, stride=2), tf.constant(start))
    assert indices.numpy().tolist() == expected

"""The built-in clips (moving sprites) and the benchmark's synthetic scans (solids): balanced,
repeatable, and told apart only across their frames; and the clips benchmark's verdicts."""

import importlib.util
import os

import numpy as np
import pytest

from vit_app.tasks.clip.data import solids as solid_scans
from vit_app.tasks.clip.data.motion import CLASS_NAMES, moving_sprites
from vit_app.tasks.clip.data.readers import volume_to_frames

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_clips_are_balanced_repeatable_and_in_range():
    clips, labels = moving_sprites(8, frames=4, size=16, seed=3)
    assert clips.shape == (8, 4, 16, 16, 3) and clips.dtype == np.uint8
    assert np.bincount(labels).tolist() == [2] * len(CLASS_NAMES)
    again, _ = moving_sprites(8, frames=4, size=16, seed=3)
    np.testing.assert_array_equal(clips, again)
    assert not np.array_equal(clips, moving_sprites(8, frames=4, size=16, seed=4)[0])
    with pytest.raises(ValueError, match="at least 2 frames of 16 px, got 1 frames of 32 px"):
        moving_sprites(4, frames=1)


def _moving_sprite_steps(clip):
    """The (rows, cols) shift that best maps each frame onto the next (a torus), summed."""
    total = np.zeros(2)
    for before, after in zip(clip[:-1].mean(-1), clip[1:].mean(-1)):
        scores = {(dr, dc): (np.roll(before, (dr, dc), (0, 1)) * after).sum()
                  for dr in range(-3, 4) for dc in range(-3, 4) if (dr, dc) != (0, 0)}
        total += max(scores, key=scores.get)
    return total


def test_no_single_frame_tells_the_class_and_consecutive_frames_do():
    """Any one frame of a clip is a draw from the same distribution for every class: each
    class's mean frame differs from the mean of all by no more than sampling noise (the
    squared difference over its expected variance, about 0.75 for equal means). The shift
    between consecutive frames gives the direction."""
    clips, labels = moving_sprites(2000, frames=4, size=16, seed=0)
    one_frame = clips[np.arange(len(clips)), np.arange(len(clips)) % 4].mean(-1)
    overall = one_frame.mean(0)
    for label in range(len(CLASS_NAMES)):
        frames = one_frame[labels == label]
        noise = frames.var(0) / len(frames)
        ratio = ((frames.mean(0) - overall) ** 2 / noise).mean()
        assert ratio < 1.5, (CLASS_NAMES[label], ratio)  # 0.6-0.9 measured
    expected = {"left": (0, -1), "right": (0, 1), "up": (-1, 0), "down": (1, 0)}
    for clip, label in zip(clips[:8], labels[:8]):
        direction = np.sign(_moving_sprite_steps(clip)).tolist()
        assert direction == list(expected[CLASS_NAMES[label]]), CLASS_NAMES[label]


def test_solids_are_16_bit_scans_whose_class_is_the_run_of_their_cross_sections():
    """A slice's solid is a disk of about the same area whatever the class (the class means
    of a slice's area lie within a third of their spread); the areas' run through the slices
    gives the class: rising and falling, flat, rising, falling."""
    volumes, labels = solid_scans.solids(400, depth=8, size=32, seed=0)
    assert volumes.dtype == np.uint16 and volumes.shape == (400, 8, 32, 32)
    assert np.bincount(labels).tolist() == [100] * len(solid_scans.CLASS_NAMES)
    np.testing.assert_array_equal(volumes[:4], solid_scans.solids(4, 8, 32, seed=0)[0])
    bright = solid_scans.BACKGROUND + 2 * solid_scans.NOISE
    areas = (volumes > bright).reshape(400, 8, -1).sum(-1).astype(float)
    slice_means = [areas[labels == label].mean() for label in range(4)]
    assert np.ptp(slice_means) < areas.std() / 3, slice_means
    middle, ends = areas[:, 3:5].mean(1), areas[:, [0, -1]].mean(1)
    rise = areas[:, -2:].mean(1) - areas[:, :2].mean(1)
    runs = {"spindle": middle - ends, "cylinder": -np.abs(rise), "widening": rise,
            "narrowing": -rise}
    for label, name in enumerate(solid_scans.CLASS_NAMES):
        assert np.median(runs[name][labels == label]) > 0 or name == "cylinder"
        assert np.median(np.abs(rise[labels == 1])) < np.median(np.abs(rise[labels == 2])) / 4
    frames = volume_to_frames(volumes[0], "solid")
    assert frames.dtype == np.uint8 and frames.shape == (8, 32, 32, 3)
    with pytest.raises(ValueError, match="at least 4 slices of 16 voxels, got 2 slices"):
        solid_scans.solids(4, depth=2)


def _benchmark():
    spec = importlib.util.spec_from_file_location(
        "clips_benchmark", os.path.join(ROOT, "benchmarks", "clips.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_benchmark_fails_the_default_layout_when_it_does_not_see_motion(capsys):
    """The bars hold the layout of `vit train --task clip` (the `sprites_clip` preset's); the
    other layout's row is reported beside it."""
    benchmark = _benchmark()

    class Args:
        train, val, seconds = 100, 400, 1.0

    def row(accuracy):
        return {"accuracy": accuracy, "steps": 1, "train_s": 1.0, "weights": 1}

    held, other = (f"spacetime_{layout}" for layout in (
        benchmark._default_layout(), *({"divided", "joint"} - {benchmark._default_layout()})))
    seeing = {held: row(0.9), other: row(0.3), "conv3d": row(0.5), "frame_average": row(0.25)}
    for data in ("sprites", "solids"):
        assert benchmark.report(data, seeing, Args) == 0
        assert benchmark.report(data, {**seeing, held: row(0.40)}, Args) == 1
    assert benchmark.report("sprites", {**seeing, "conv3d": row(0.95)}, Args) == 1
    assert benchmark.report("solids", {**seeing, "conv3d": row(0.95)}, Args) == 0  # reported
    printed = capsys.readouterr().out
    assert (f"{held} - frame_average: +15.0 points (at least +25, less 6.5 of sampling noise): "
            "DOES NOT HOLD") in printed
    assert (f"{held} - conv3d: -5.0 points (at least +0, less 3.7 of sampling noise): "
            "DOES NOT HOLD") in printed
    tie = {**seeing, held: row(0.995), "conv3d": row(1.0)}  # 2 clips of 400: noise
    assert benchmark.report("sprites", tie, Args) == 0
    assert f"{other}: reported; the bars hold the default job's layout ({held})" in printed
    assert f"| {held} | 90.0% |" in printed

"""`vit inspect` of a clip model: where and when it looks in each clip.

Each clip's middle window goes through the model; the attention rollout of the joint layout
(`vit_keras.tasks.clip.attention`) gives a map over each token frame's patches, drawn over the
first frame of its tubelet, with the share of the clip's attention that token frame gets.
inspect.json holds the maps, the shares and the predicted classes. A model of another layout
gets its predictions and the reason it has no maps.
"""

from __future__ import annotations

import os

import keras
import numpy as np
import tensorflow as tf

import vit_keras
from vit_app.outputs import write_json
from vit_keras.analysis import plots
from vit_keras.core.model import preprocessing_of
from vit_keras.tasks.clip.attention import space_time_rollout


def inspect_clips(model, clips, output_dir: str, names: list[str], discard_ratio: float,
                  head_fusion: str) -> dict:
    """Writes `rollout_<i>.png` per clip and inspect.json into `output_dir`.

    Args:
        model: a `SpaceTimeViT`.
        clips: float32 [n, frames, height, width, 3] windows in 0..255 at the model's size.
        output_dir: where the figures and inspect.json go (created if needed).
        names: the clips' names, n of them.
        discard_ratio, head_fusion: the rollout's (`vit_keras.analysis.rollout_matrix`).

    Returns:
        The inspect.json content with 'figures' (name -> PNG path), 'skipped' (name -> why
        not drawn) and 'json'.
    """
    pixels = np.asarray(clips, np.float32)
    if len(names) != len(pixels):
        raise ValueError(f"got {len(names)} names for {len(pixels)} clips")
    inputs = keras.ops.convert_to_numpy(vit_keras.preprocess_input(
        pixels, preprocessing=preprocessing_of(model)))
    predicted = keras.ops.convert_to_numpy(model(inputs, training=False)).argmax(-1).tolist()
    summary = {"config": vit_keras.config_from_model(model).to_dict(), "layout": model.layout,
               "frames": model.frames, "tubelet_frames": model.tubelet_frames,
               "clips": list(names), "predicted_class": predicted, "figures": {},
               "skipped": {}}
    tf.io.gfile.makedirs(output_dir)
    if model.layout != "joint":
        summary["skipped"]["rollout"] = (
            f"the {model.layout} layout attends within frames and across them in turn: the "
            "space-time rollout follows the joint layout, where every token attends to every "
            "other")
    else:
        maps = space_time_rollout(model, inputs, discard_ratio, head_fusion)
        shares = maps.sum(axis=(2, 3))
        summary["rollout"] = {"discard_ratio": discard_ratio, "head_fusion": head_fusion,
                              "frame_shares": shares.round(4).tolist(),
                              "maps": maps.round(5).tolist()}
        for index, name in enumerate(names):
            path = os.path.join(output_dir, f"rollout_{index}.png")
            _plot_clip(pixels[index], maps[index], shares[index], name, model, path)
            summary["figures"][f"rollout_{index}"] = path
    json_path = os.path.join(output_dir, "inspect.json")
    write_json(json_path, summary)
    return dict(summary, json=json_path)


def _plot_clip(clip, maps, shares, name: str, model, path: str) -> None:
    """The first frame of each tubelet over its map, titled with its frames and share."""
    step = model.tubelet_frames
    titles = [f"{name}: frames {1 + index * step}-{(index + 1) * step}, {100 * share:.0f}%"
              for index, share in enumerate(shares)]
    plots.plot_rollout(clip[::step], maps, path, titles=titles)

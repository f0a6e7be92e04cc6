"""`vit inspect`: attention rollout, attention distance, position-embedding similarity and
patch filters of a ViT as PNGs plus inspect.json, or the cost table of a variant
(--complexity). The flags are `vit.commands.inspect`'s; `training.finish` runs
`inspect_model` at the end of a run.
"""

from __future__ import annotations

import argparse
import os

import keras
import numpy as np
import tensorflow as tf

import vit_keras
from vit_app import console
from vit_app.inference import inference_task as inference_tasks
from vit_app.inference.model_files import load_model
from vit_app.outputs import write_json
from vit_keras import analysis, tasks
from vit_keras.analysis import complexity, network_cost, plots
from vit_keras.core.model import preprocessing_of
from vit_keras.mobilevit.config import VARIANTS as MOBILEVIT_VARIANTS
from vit_keras.mobilevit.config import timm_name as mobilevit_name

FIGURES = {
    "rollout": "rollout.png",
    "attention_distance": "attention_distance.png",
    "position_similarity": "position_similarity.png",
    "filters": "filters.png",
}


def run(args: argparse.Namespace) -> int:
    """Runs `vit inspect`."""
    if args.complexity:
        console.say(complexity_table(args.complexity, args.image_size, args.batch_size))
        return 0
    if not args.model or not args.images:
        raise ValueError("give --model PATH and at least one IMAGE (or --complexity VARIANT)")
    model = load_model(args.model)
    inputs, names = inference_tasks.get(tasks.task_of(model)).inspect_inputs(
        model, args.model, args.images)
    output = args.output or os.path.join(os.path.dirname(os.path.abspath(args.model)), "inspect")
    summary = inspect_model(model, inputs, output, image_names=names,
                            discard_ratio=args.discard_ratio, head_fusion=args.head_fusion)
    for name, path in summary["figures"].items():
        console.say(f"{name:>20}: {path}")
    for name, why in summary["skipped"].items():
        console.say(f"{name:>20}: not written: {why}")
    console.say(f"{'numbers':>20}: {summary['json']}")
    return 0


def complexity_table(variant: str, image_sizes, batch_size: int = 1) -> str:
    """The `--complexity` report: one row per resolution of `variant` (a MobileViT's
    measured on its graph, for one image)."""
    if mobilevit := mobilevit_name(variant):
        variant = mobilevit
        costs = [network_cost.measured_cost(vit_keras.create_mobilevit(variant,
                                                                       image_size=size))
                 for size in image_sizes]
        return (f"{variant}: {MOBILEVIT_VARIANTS[variant].summary} (timm's ImageNet top-1); "
                "batch 1, FLOPs of its traced graph (TensorFlow's profiler)\n"
                + network_cost.format_costs(costs))
    config = vit_keras.get_variant(variant)
    rows = [complexity.estimate(config, image_size=size, batch_size=batch_size)
            for size in image_sizes]
    title = (f"ViT-{variant}: patch {config.patch_size}, width {config.hidden_size}, "
             f"{config.num_layers} layers, {config.num_heads} heads, batch {batch_size} "
             "(MACs of matmuls incl. attention; FLOPs = 2 x MACs)")
    return title + "\n" + complexity.format_table(rows)


def inspect_model(model, images, output_dir: str, *, image_names=None,
                  discard_ratio: float = 0.0, head_fusion: str = "mean") -> dict:
    """Runs every analysis on `images` and writes the figures plus inspect.json.

    Args:
        model: a model built by `vit_keras.VisionTransformer` (e.g. loaded from .keras).
        images: float32 [n, h, w, c] pixels in 0..255 at the model's resolution.
        output_dir: directory to write to (created if needed; local or gs://).
        image_names: optional n captions for the rollout figure and the JSON.
        discard_ratio: rollout's fraction of dropped weak attention weights.
        head_fusion: rollout's head fusion, 'mean', 'max' or 'min'.

    Returns:
        The numbers written to inspect.json, with 'figures' (name -> PNG path) and 'skipped'
        (name -> why that figure is not drawn for this model), plus 'json'. A task with an
        analysis of its own (`InferenceTask.inspect`: a clip model's, on clips) gives its
        own.
    """
    own = inference_tasks.get(tasks.task_of(model)).inspect(
        model, images, output_dir, image_names, discard_ratio, head_fusion)
    if own is not None:
        return own
    config = vit_keras.config_from_model(model)
    pixels = np.asarray(images, dtype=np.float32)
    inputs = keras.ops.convert_to_numpy(vit_keras.preprocess_input(
        pixels, preprocessing=preprocessing_of(model)))
    names = _image_names(image_names, len(pixels))
    if config.architecture != "vit":
        return _network_summary(model, config, inputs, names, output_dir)

    rollout, distances = _attention_figures_data(model, config, inputs, discard_ratio,
                                                 head_fusion)
    similarity = analysis.position_embedding_similarity(model)
    filters, explained = _patch_filters(model, config)
    skipped = {} if filters is not None else {
        "filters": _NO_FILTERS[config.stem if config.resnet_layers is None else "hybrid"]}
    outputs = keras.ops.convert_to_numpy(model(inputs, training=False))

    named = tasks.contract(tasks.task_of(model)).class_per_image
    predicted = outputs.argmax(axis=-1).tolist() if named else None
    titles = names if predicted is None else [
        f"{name}: class {label}" for name, label in zip(names, predicted)]

    figures = _draw_figures(output_dir, config, pixels, titles, rollout, distances, similarity,
                            filters)
    summary = {
        "config": config.to_dict(),
        "images": names,
        "predicted_class": predicted,
        "rollout": {"discard_ratio": discard_ratio, "head_fusion": head_fusion,
                    "maps": rollout.round(5).tolist()},
        "mean_attention_distance_px": _distance_summary(distances),
        "position_embedding_similarity": _similarity_summary(similarity),
        "embedding_filters": None if filters is None else {
            "components": len(filters), "explained_variance": explained.round(5).tolist()},
        "complexity": complexity.estimate(config).to_dict(),
        "figures": figures,
        "skipped": skipped,
    }
    json_path = os.path.join(output_dir, "inspect.json")
    write_json(json_path, summary)
    return dict(summary, json=json_path)


def _image_names(image_names, count: int) -> list[str]:
    """The captions of `count` images: `image_names`, or 'image 0', 'image 1', ..."""
    names = list(image_names) if image_names is not None else [
        f"image {i}" for i in range(count)]
    if len(names) != count:
        raise ValueError(f"got {len(names)} image_names for {count} images")
    return names


def _network_summary(model, config, inputs, names, output_dir) -> dict:
    """inspect.json of a network that is no ViT (a MobileViT): its predictions and measured
    cost; the ViT's figures are skipped, each with the reason."""
    outputs = keras.ops.convert_to_numpy(model(inputs, training=False))
    why = (f"a {config.architecture} attends within groups of pixels of its feature maps, "
           "not over the image's patches: there is no patch-level attention, position "
           "embedding or patch filter to draw")
    summary = {"config": config.to_dict(), "images": names,
               "predicted_class": outputs.argmax(axis=-1).tolist(),
               "complexity": network_cost.measured_cost(model).to_dict(),
               "figures": {}, "skipped": {name: why for name in FIGURES}}
    json_path = os.path.join(output_dir, "inspect.json")
    write_json(json_path, summary)
    return dict(summary, json=json_path)


_NO_FILTERS = {
    "conv": "the model has a convolutional stem (model.stem=conv, the small-data rule's "
            "choice): its 3x3 convolutions see across patches, so there are no per-patch "
            "linear filters to draw",
    "hybrid": "the model is a hybrid: its patches are ResNet features, not pixels",
}


def _draw_figures(output_dir, config, pixels, titles, rollout, distances, similarity,
                  filters) -> dict:
    """Writes the PNGs into `output_dir`; returns {figure name: path} of those written
    (filters.png only when the model has patch filters)."""
    tf.io.gfile.makedirs(output_dir)
    figures = {name: os.path.join(output_dir, file) for name, file in FIGURES.items()
               if name != "filters" or filters is not None}
    plots.plot_rollout(pixels, rollout, figures["rollout"], titles=titles)
    plots.plot_attention_distance(distances, figures["attention_distance"],
                                  image_size=config.image_hw)
    plots.plot_position_similarity(similarity, figures["position_similarity"])
    if filters is not None:
        plots.plot_filters(filters, figures["filters"])
    return figures


def _patch_filters(model, config):
    """(principal patch filters, explained variance), or (None, None) for a conv stem or a
    hybrid (`_NO_FILTERS` says why)."""
    if config.stem == "conv" or config.resnet_layers is not None:
        return None, None
    limit = min(config.hidden_size, config.patch_size ** 2 * config.channels)
    return analysis.principal_filters(analysis.patch_filter_kernel(model), k=min(28, limit))


def _distance_summary(distances) -> dict:
    return {"per_head": distances.round(3).tolist(),
            "per_layer_mean": distances.mean(axis=1).round(3).tolist(),
            "class_token": "excluded; patch weights renormalised over patches"}


def _attention_figures_data(model, config, inputs, discard_ratio, head_fusion):
    """(rollout maps [n, rows, cols], mean attention distances [layers, heads]) from one pass."""
    attentions = analysis.attention_maps(model, inputs)
    has_class_token = config.classifier == "token"
    patch_tokens = analysis.patch_token_slice(config)
    rollout = analysis.rollout_from_attention(
        attentions, has_class_token, discard_ratio=discard_ratio, head_fusion=head_fusion,
        patch_tokens=patch_tokens).reshape(-1, *config.grid_size)
    distances = analysis.mean_attention_distance_from_attention(
        attentions, config.grid_size, config.patch_size, has_class_token, patch_tokens)
    return rollout, distances


def _similarity_summary(similarity) -> dict:
    """Neighbour vs overall similarity (is the 2-D grid learned?), and the full array if small."""
    rows, cols = similarity.shape[:2]
    flat = similarity.reshape(rows * cols, rows * cols)
    row_index, col_index = np.divmod(np.arange(rows * cols), cols)
    grid_distance = (np.abs(row_index[:, None] - row_index[None, :])
                     + np.abs(col_index[:, None] - col_index[None, :]))
    summary = {
        "grid": [rows, cols],
        "mean_to_4_neighbours": _mean_or_none(flat[grid_distance == 1]),
        "mean_to_others": _mean_or_none(flat[grid_distance > 0]),
    }
    if rows * cols <= 256:
        summary["cosine"] = similarity.round(4).tolist()
    return summary


def _mean_or_none(values):
    return round(float(values.mean()), 5) if values.size else None

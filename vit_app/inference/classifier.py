"""A trained classifier from any file `vit` writes, behind one interface for `vit predict` and
`vit serve`: a `.keras` model, a SavedModel directory, a `.tflite` or `.onnx` file, or an
architecture with pretrained weights.

Every format takes RGB pixels in 0..255 at its input size and gives `logits` and
`probabilities`: sigmoid for a multi-label model (the `activation` that `vit train` writes in
the config.json next to its files, or that `vit export` writes in export.json) and for
ImageNet-21k heads, which were pre-trained multi-label; softmax for the others. A SavedModel
gives its own `probabilities` output. Encoded image files are checked (format,
corruption, the decompression-bomb pixel limit) and decoded as in evaluation: bilinear,
antialiased resize to the input size (`vit_app.images`).
"""

from __future__ import annotations

import dataclasses
import functools
import os
from typing import Callable

import numpy as np
import tensorflow as tf

import vit_keras
from vit_app import console
from vit_app.images import decode_checked, decode_native, prepare_decoder
from vit_app.inference import inference_task as tasks
from vit_app.inference.model_files import (ACTIVATIONS, activation_beside, check_model_path,
                                       labels_beside, load_model, patch_size_beside,
                                       preprocessing_beside, task_beside)
from vit_app.outputs import read_labels
from vit_keras import analysis, families, pretrained, preprocess_input
from vit_keras import tasks as library_tasks
from vit_keras.checkpoints import keras_hub_config
from vit_keras.core.model import config_from_model, input_image_size, preprocessing_of
from vit_keras.export import ONNXModel, TFLiteModel, graph
from vit_keras.export.serving import SERVE_BYTES, SERVING_DEFAULT
from vit_keras.preprocessing import OFFICIAL, Preprocessing
from vit_keras.pretrained import labels as released_labels

IMAGENET21K_CLASSES = 21843  # heads pre-trained with sigmoid cross-entropy (multi-label)
FORMATS = ("keras", "saved_model", "tflite", "onnx", "pretrained")


@dataclasses.dataclass
class Classifier:
    """A loaded model and what a caller needs to feed it and name its classes.

    Attributes:
        path: what it was loaded from (a file, a directory or an architecture name).
        format: one of `FORMATS`.
        image_size: (height, width) encoded images are resized to; None for a SavedModel
            taking any size (its `serve_bytes` signature decodes and resizes in its graph).
        num_classes: width of the logits.
        labels: class names, or None (then classes are named by their index).
        run_outputs: float32 [batch, H, W, 3] pixels -> {'probabilities', 'logits'}.
        keras_model: the Keras model when there is one (attention rollout needs it).
        takes_any_size: `predict` accepts images of any size (`dynamic_image_size`).
        run_encoded: a 1-D object array of encoded files -> the same outputs, when the model
            decodes them itself (a SavedModel's `serve_bytes`); else they are decoded here.
        activation: 'sigmoid' when the scores are independent per class (a multi-label
            model), 'softmax' when they sum to 1, None when not recorded (then as
            `scores_from_logits` chooses).
        preprocessing: how encoded images are resized for it (the weights' rule; the
            normalisation is inside `run_outputs`).
        patch_size: pixels per patch side of its input (a hybrid's ResNet stride included),
            None when not known (an exported file without the run's config.json beside it).
        task: what the model is for ('classify', 'segment': `vit_app.inference.inference_task`),
            as the model records it (a Keras model's own record, an exported file's export.json or
            config.json).
        input_shape: one input without the batch ((height, width, 3); a clip model's (frames,
            height, width, 3)), None where a side is free or not known.
    """

    path: str
    format: str
    image_size: tuple[int, int] | None
    num_classes: int
    labels: list[str] | None
    run_outputs: Callable[[np.ndarray], dict[str, np.ndarray]]
    keras_model: object = None
    takes_any_size: bool = False
    run_encoded: Callable[[np.ndarray], dict[str, np.ndarray]] | None = None
    activation: str | None = None
    preprocessing: Preprocessing = OFFICIAL
    patch_size: int | None = None
    task: str = library_tasks.CLASSIFY
    input_shape: tuple | None = None

    @property
    def class_names(self) -> list[str]:
        """A name per class: the labels, else the class index as text."""
        names = list(self.labels or [])
        return names + [str(i) for i in range(len(names), self.num_classes)]

    @property
    def decodes_in_graph(self) -> bool:
        """Whether encoded files go to the model itself (a SavedModel's `serve_bytes`)."""
        return self.run_encoded is not None

    @property
    def takes_files(self) -> bool:
        """Whether encoded files go whole to `predict_encoded`, not decoded to the model's
        size first: a SavedModel decoding them in its graph, or a model fed each image at its
        own size (`preprocessing.native`)."""
        return self.decodes_in_graph or self.preprocessing.native

    def predict(self, images) -> dict[str, np.ndarray]:
        """float32 [batch, H, W, 3] pixels in 0..255 -> {'probabilities', 'logits'} [batch, C]."""
        return self.run_outputs(np.asarray(images, dtype=np.float32))

    def size_problem(self, height: int, width: int) -> str | None:
        """Why images of this size cannot go to `predict`, or None when they can."""
        if not self.takes_any_size:
            if (height, width) == tuple(self.image_size):
                return None
            return f"expected images of {self.image_size[0]}x{self.image_size[1]} pixels"
        if self.keras_model is None:
            return None  # an exported graph checks the size itself
        step, pads = self._patch_rule
        if pads or (height % step == 0 and width % step == 0):
            return None
        return (f"this model takes any size whose height and width are multiples of {step} "
                f"(its patch size), got {height}x{width}")

    @property
    def resize_rule(self) -> Preprocessing:
        """How encoded files are resized for it: the weights' rule, except for a task that
        sees each image whole (never centre-cropped: a segmenter's mask covers all of it)."""
        if not tasks.whole_image(self.task) or self.preprocessing.resizes_whole:
            return self.preprocessing
        return dataclasses.replace(self.preprocessing, crop_mode="squash", crop_fraction=1.0)

    @functools.cached_property
    def _patch_rule(self) -> tuple[int, bool]:
        """(pixels per patch side, whether other sizes are padded) of the Keras model."""
        config = config_from_model(self.keras_model)
        return config.patch_step, config.dynamic_image_pad

    def warm_up(self) -> None:
        """Runs batches of 1 and 2 blank images, so that the compiled function is traced for a
        varying batch size before the first real request pays for it; traces the decoder of
        encoded files too (a server's first file would wait for it, and the others with it)."""
        if self.image_size is not None:
            sample = self.input_shape or (*self.image_size, 3)
            for batch in (1, 2):
                self.predict(np.zeros((batch, *sample), np.float32))
            if self.run_encoded is None and len(sample) == 3:  # a clip's files: its task's
                prepare_decoder(self.image_size, preprocessing=self.resize_rule)

    def predict_encoded(self, files) -> dict[str, np.ndarray]:
        """Encoded JPEG/PNG/BMP/GIF/TIFF files (already checked) -> the outputs of `predict`; for a
        model fed at the images' own size (`preprocessing.native`), lists of one array per
        file at its size (`predict_native`)."""
        if self.preprocessing.native:
            per_file = [self.predict_native(decode_native(data)) for data in files]
            return {key: [outputs[key] for outputs in per_file]
                    for key in ("probabilities", "logits")}
        if self.run_encoded is not None:
            return self.run_encoded(np.asarray(files, dtype=object))
        return self.predict(decode_checked(files, self.image_size,
                                           preprocessing=self.resize_rule))

    def predict_native(self, image) -> dict[str, np.ndarray]:
        """One image's outputs at its own size, as the model's task runs an image there (a
        segmenter: whole for a model taking any size, in windows of its size for a
        fixed-size file; `TaskContract.native_scores`).

        Args:
            image: float32 [height, width, 3] pixels in 0..255.

        Returns:
            {'probabilities', 'logits'}, each [height, width, classes].

        Raises:
            ValueError: the model's task never feeds images at their own size.
        """
        run_native = library_tasks.contract(self.task).native_scores
        if run_native is None:
            raise ValueError(f"{self.path}: a {self.task} model is not fed images at their own "
                             "size (preprocessing 'native' is a segmenter's)")
        logits = run_native(lambda pixels: self.predict(pixels)["logits"],
                            np.asarray(image, np.float32),
                            None if self.takes_any_size else self.image_size, self.patch_size)
        return {"probabilities": scores_from_logits(logits, self.activation).astype(np.float32),
                "logits": logits}

    def attention_rollout(self, images) -> np.ndarray:
        """Where the model looks: [batch, grid rows, grid cols] rollout weights in [0, 1].

        Raises:
            ValueError: the classifier is not a Keras ViT (exported files keep no attention).
        """
        if self.keras_model is None:
            raise ValueError(f"attention rollout needs a .keras model; this is a {self.format} "
                             "file")
        maps = analysis.attention_rollout(self.keras_model,
                                          preprocess_input(images, model=self.keras_model))
        peaks = maps.reshape(len(maps), -1).max(axis=1).reshape(-1, 1, 1)
        return (maps / np.maximum(peaks, 1e-12)).astype(np.float32)


def outputs_from_logits(run_logits: Callable,
                        activation: str | None = None) -> Callable[[np.ndarray], dict]:
    """A `run_outputs` from a function giving logits: probabilities by `scores_from_logits`."""
    def run_outputs(images):
        logits = np.asarray(run_logits(images), dtype=np.float32)
        return {"probabilities": scores_from_logits(logits, activation).astype(np.float32),
                "logits": logits}

    return run_outputs


def scores_from_logits(logits, activation: str | None = None) -> np.ndarray:
    """Probabilities from logits [batch, classes] (a segmenter's: [batch, H, W, classes]).

    Args:
        logits: the model's logits.
        activation: 'sigmoid' (independent per-class scores, a multi-label model),
            'softmax', or 'linear' (the logits are the scores); None: sigmoid for an
            ImageNet-21k head, else softmax.
    """
    logits = np.asarray(logits, dtype=np.float64)
    if activation not in (None, *ACTIVATIONS):
        raise ValueError(f"activation must be one of {ACTIVATIONS}, got {activation!r}")
    if activation == "linear":
        return logits
    if activation == "sigmoid" or (activation is None and
                                   logits.shape[-1] == IMAGENET21K_CLASSES):
        return 1.0 / (1.0 + np.exp(-logits))
    # The class axis is the last: [batch, classes], or a segmenter's [batch, H, W, classes].
    probabilities = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return probabilities / probabilities.sum(axis=-1, keepdims=True)


def load(path: str, weights: str | None = None, labels_path: str | None = None,
         preprocessing: Preprocessing | None = None) -> Classifier:
    """Loads a classifier, choosing the format from `path`.

    Args:
        path: a `.keras` file, a keras-hub preset folder, a SavedModel directory, a `.tflite`
            or `.onnx` file; with `weights`, an architecture name (B/16, S/16, R50+B/16, ...).
        weights: pretrained weights for the architecture (a name from `vit weights list`, a URL,
            hf://ORG/REPO or a file).
        labels_path: labels.txt (default: the one next to the model; for pretrained ImageNet
            heads, the ImageNet class names shipped with vit_keras).
        preprocessing: how the weights expect images prepared, for a Keras model whose
            weights file or `.keras` file does not say (default: what the model records).

    Returns:
        The `Classifier`.

    Raises:
        ValueError: the file does not exist or is not one of these formats; `preprocessing`
            for an exported file (its normalisation is inside its graph).
    """
    if weights:
        return _pretrained(path, weights, labels_path, preprocessing)
    check_model_path(path)
    if keras_hub_config.is_preset(path):
        return _keras_hub_preset(path, labels_path, preprocessing)
    if path.lower().endswith(".keras"):
        return _keras(path, labels_path, preprocessing)
    if preprocessing is not None:
        raise ValueError(f"{path}: an exported file normalises its images inside its graph, "
                         "as recorded when it was exported; to change that, export again: "
                         "vit export --model model.keras --preprocessing ...")
    if os.path.isdir(path):
        return _saved_model(path, labels_path)
    return _lite_runtime(path, labels_path)


def from_keras_model(model, path: str, format: str = "keras", labels=None,
                     activation: str | None = None) -> Classifier:
    """A `Classifier` around a Keras ViT.

    Args:
        model: a Keras classifier taking [-1, 1] images and giving logits.
        path: what the model was loaded from (it names the model in messages).
        format: 'keras' or 'pretrained'.
        labels: class names, or None.
        activation: see `scores_from_logits`.

    Returns:
        The `Classifier`, with attention rollout.
    """
    def run_logits(images):  # the compiled predict function (tf.function / jax.jit)
        return np.asarray(model.predict_on_batch(preprocess_input(images, model=model)))

    return Classifier(path=path, format=format, image_size=input_image_size(model),
                      num_classes=int(model.output_shape[-1]), labels=labels,
                      run_outputs=outputs_from_logits(run_logits, activation), keras_model=model,
                      takes_any_size=graph.takes_any_size(model), activation=activation,
                      preprocessing=preprocessing_of(model),
                      patch_size=config_from_model(model).patch_step,
                      task=library_tasks.task_of(model), input_shape=_fixed(model.input_shape))


def _fixed(shape) -> tuple | None:
    """A Keras input shape without its batch, or None when a side is free."""
    sides = tuple(shape[1:])
    return None if None in sides else tuple(int(side) for side in sides)


def _keras(path: str, labels_path: str | None, preprocessing=None) -> Classifier:
    model = load_model(path)
    if preprocessing is not None:
        model.set_preprocessing(preprocessing)
    return from_keras_model(model, path, "keras", labels_beside(path, labels_path),
                            activation_beside(path))


def _keras_hub_preset(path: str, labels_path: str | None, preprocessing=None) -> Classifier:
    """A keras-hub preset with its classifier task; class names from labels.txt in the folder,
    else ImageNet's for 1000 or 21843 classes."""
    if not keras_hub_config.preset_architecture(path).has_head:
        raise ValueError(f"keras-hub preset {path!r} is a backbone without classifier task "
                         "weights: classifying needs a head. `vit embed --model PRESET` gives "
                         "its features; `vit train --weights PRESET` trains a head")
    model = vit_keras.from_preset(path)
    if preprocessing is not None:
        model.set_preprocessing(preprocessing)
    inside = os.path.join(path, "labels.txt")
    labels = _imagenet_labels(int(model.output_shape[-1]),
                              labels_path or (inside if os.path.isfile(inside) else None))
    return from_keras_model(model, path, "keras", labels)


def _pretrained(architecture: str, weights: str, labels_path: str | None,
                preprocessing=None) -> Classifier:
    refuse_untrained_head(weights, architecture)
    model = vit_keras.create_model(architecture, weights=weights)
    if preprocessing is not None:
        model.set_preprocessing(preprocessing)
    labels = _imagenet_labels(int(model.output_shape[-1]), labels_path)
    return from_keras_model(model, architecture, "pretrained", labels)


def _lite_runtime(path: str, labels_path: str | None) -> Classifier:
    with console.quiet_native_stderr():  # LiteRT announces its XNNPACK delegate on stderr
        runner = (ONNXModel if path.lower().endswith(".onnx") else TFLiteModel)(path,
                                                                                num_threads=2)
    activation = activation_beside(path)
    return Classifier(path=path, format=path.rsplit(".", 1)[1].lower(),
                      image_size=tuple(runner.input_shape[-3:-1]),
                      num_classes=int(runner.num_classes),
                      labels=labels_beside(path, labels_path),
                      run_outputs=outputs_from_logits(runner, activation), activation=activation,
                      preprocessing=preprocessing_beside(path),
                      patch_size=patch_size_beside(path),
                      task=recorded_task(path, runner.output_rank),
                      input_shape=tuple(runner.input_shape))


def _saved_model(path: str, labels_path: str | None) -> Classifier:
    loaded = tf.saved_model.load(path)
    missing = {SERVING_DEFAULT, SERVE_BYTES} - set(loaded.signatures)
    if missing:
        raise ValueError(f"SavedModel {path!r} lacks the signatures {sorted(missing)}: expected "
                         "one written by `vit export` / `vit train`")
    serve = loaded.signatures[SERVING_DEFAULT]
    shape = tuple(serve.structured_input_signature[1]["images"].shape)
    any_size = shape[-3] is None or shape[-2] is None
    clips = len(shape) == 5  # [batch, frames, height, width, 3]: each file is a clip's frame

    def run(signature: str, **inputs):  # through `loaded`, which owns the variables
        result = loaded.signatures[signature](**inputs)
        return {name: result[name].numpy() for name in ("probabilities", "logits")}

    return Classifier(
        path=path, format="saved_model",
        task=recorded_task(path, len(serve.structured_outputs["logits"].shape)),
        image_size=None if any_size else (int(shape[-3]), int(shape[-2])),
        input_shape=None if any_size else tuple(int(side) for side in shape[1:]),
        num_classes=int(serve.structured_outputs["logits"].shape[-1]),
        labels=labels_beside(path, labels_path), takes_any_size=any_size,
        activation=activation_beside(path), patch_size=patch_size_beside(path),
        preprocessing=preprocessing_beside(path),
        run_outputs=lambda images: run(SERVING_DEFAULT, images=tf.constant(images)),
        run_encoded=None if clips else (
            lambda files: run(SERVE_BYTES, image_bytes=tf.constant(list(files)))))


def recorded_task(path: str, logits_rank: int) -> str:
    """The task recorded beside an exported file, checked against the rank of its logits.

    Raises:
        ValueError: the file's logits are not what its recorded task gives (a file moved
            away from the export.json written with it).
    """
    task, where = task_beside(path)
    expected = tasks.get(task).logits_rank
    if logits_rank != expected:
        raise ValueError(f"{path} gives logits of {logits_rank} dimensions, but its task as "
                         f"recorded by {where} is {task!r}, whose logits have {expected}: keep "
                         "the export.json written with the file beside it (vit export writes "
                         "one), or export the .keras model again")
    return task


def refuse_untrained_head(weights: str, architecture: str) -> None:
    """Predictions of a release whose head was zeroed for release would be meaningless, and a
    family model without a head (DINOv2, SigLIP, CLIP) gives embeddings, not classes."""
    if families.is_family_name(architecture):
        spec, _ = families.split_name(architecture)
        if not spec.has_head:
            raise ValueError(f"{spec.name} ({spec.summary}) has no classifier head: its weights "
                             f"give image embeddings (vit embed IMAGE --model {spec.name} "
                             f"--weights {weights}), or fine-tune a head with vit train")
        return

    if weights in pretrained.weight_names():
        release = pretrained.find(weights, architecture)
        if not release.head_trained:
            trained = [other.name for other in pretrained.releases()
                       if other.variant == release.variant and other.head_trained]
            raise ValueError(f"the {weights!r} head of ViT-{release.variant} is all zeros (it "
                             "was released for fine-tuning); for predictions use one of "
                             f"{trained or 'the other releases'}")


def _imagenet_labels(num_classes: int, labels_path: str | None) -> list[str] | None:
    if labels_path:
        return read_labels(labels_path)
    if num_classes in released_labels.LABEL_FILES:
        return [name for _, name in released_labels.imagenet_classes(num_classes)]
    return None

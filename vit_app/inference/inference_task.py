"""What `vit predict`, `vit evaluate`, `vit serve` and `vit export` do per task.

A loaded model (`vit_app.inference.classifier.Classifier`) records its task (`Classifier.task`:
a Keras model's own record, an exported file's export.json or config.json); each command asks
that task's `InferenceTask` what to write, score, answer and draw, and never looks at the
shape of the model's outputs to decide. A task's inference part is one module of this
package, named with its other parts by the task's line in `vit_keras.tasks.TASKS`.
"""

from __future__ import annotations

import argparse
import os

import numpy as np

from vit_app.images import ImageError, load_files, read_file
from vit_keras import tasks as library_tasks
from vit_keras.core.model import config_from_model, preprocessing_of


class InferenceTask:
    """The interface of a task's inference part; each task's module subclasses it.

    Attributes:
        name: the task's name, as models record it (`vit_keras.tasks`).
        logits_rank: dimensions of its logits, batch included ([batch, classes]: 2); a file
            whose outputs have another rank was recorded with the wrong task.
        agreement: what an exported file is compared with Keras on (export.json's
            `agreement`).
        agreement_column, score_column: the export table's names of the agreement and of the
            score on labelled images.
        summary_kind: what `vit train`'s result table says a file agrees on ('pixel ').
        summary_score: what that table calls the score on labelled images ('top-1').
        verb: what the page says while the model works ('Classifying').
        input_noun: what `vit predict` reads for its models ('image', 'clip').
        reads_served_files: `vit serve`'s encoded files are the task's own to read
            (`served_inputs`), not images the server decodes.
    """

    name = ""
    logits_rank = 2
    agreement = "top-1"
    agreement_column = "top-1 agreement"
    score_column = "accuracy"
    summary_kind = ""
    summary_score = "top-1"
    verb = "Classifying"
    input_noun = "image"
    reads_served_files = False

    def read_inputs(self, paths: list[str]) -> tuple[list[tuple[str, object]], list]:
        """`vit predict`'s inputs: ((path, what `predict` takes) of each usable one, (path,
        why) of each skipped one). Here image files, as bytes."""
        readable, skipped = [], []
        for path in paths:
            try:
                readable.append((path, read_file(path)))
            except ImageError as error:
                skipped.append((path, str(error)))
        return readable, skipped

    def agreement_cell(self, entry: dict) -> str:
        """The export table's agreement cell of a file's export.json entry."""
        return percent(entry["top1_agreement"])

    def score_cell(self, entry: dict) -> str:
        """The export table's score cell of a file's (or Keras') entry; '' when unscored."""
        return percent_or_blank(entry.get("accuracy"))

    def score_summary(self, entry: dict) -> str:
        """The score as `vit train`'s result table names it ('top-1 97.00%'); ''."""
        cell = self.score_cell(entry)
        return cell and f"{self.summary_score} {cell}"

    def predict(self, model, readable, args: argparse.Namespace) -> tuple[list[dict], str]:
        """`vit predict`: (a row per image for `--output`, the text printed)."""
        raise NotImplementedError

    def output_records(self, rows: list[dict]) -> tuple[list[str], list[list], list[dict]]:
        """`vit predict --output`'s records of `predict`'s rows: (the CSV header, its rows, the
        JSON predictions). Here one CSV row per image, its top-k classes and scores."""
        top_k = max(len(row["top"]) for row in rows)
        header = ["file"] + [f"{field}_{rank}" for rank in range(1, top_k + 1)
                             for field in ("class", "score")]
        csv_rows = [[row["file"]] + [value for name, score in row["top"]
                                     for value in (name, f"{score:.6f}")] for row in rows]
        predictions = [{"file": row["file"], "top": [{"class": name, "score": score}
                                                     for name, score in row["top"]]}
                       for row in rows]
        return header, csv_rows, predictions

    def evaluate(self, model, args: argparse.Namespace) -> tuple[dict, list[str]]:
        """`vit evaluate`: scores `model` on `args.data`; (the results `--output` gets, the
        report's lines)."""
        raise NotImplementedError

    def export_examples(self, spec: str, trained_on: tuple, rule, input_size: tuple):
        """The data `vit export` calibrates and evaluates on, read from a data spec of `vit
        train` as the run that trained the model read it.

        Args:
            spec: the data spec.
            trained_on: the run's (validation data spec, validation split, seed).
            rule: the model's preprocessing (`vit_keras.preprocessing`), whose resize rule
                applies.
            input_size: the model's input: an image's (height, width), a clip's (frames,
                height, width).

        Returns:
            (the data, with its `train` and `val` sources (`val` may be None); a function of
            (source, count) giving at most `count` of its inputs, float32 in 0..255 at
            `input_size`, and their labels).
        """
        raise NotImplementedError

    def checked_labels(self, labels: np.ndarray, images: np.ndarray) -> np.ndarray:
        """The labels of `vit export`'s evaluation images, checked against them: class ids
        [N] int64, multi-hot [N, classes] float32 or masks [N, H, W] int64 at the images' size
        (`checked_labels`)."""
        return checked_labels(labels, images)

    def label_scores(self, logits, labels) -> dict:
        """export.json's scores of logits against labels (`{'accuracy': None}` without)."""
        raise NotImplementedError

    def file_agreement(self, logits, keras_logits, labels, image_hw=None) -> dict:
        """export.json's columns of an exported file beyond its argmax agreement with Keras
        (`top1_agreement`) and its `label_scores`, for `check` to judge (none); `image_hw`:
        the (height, width) of the images compared on."""
        return {}

    def check(self, entry: dict, bar: float, quantization: str | None) -> tuple[str | None, bool]:
        """Whether an exported file is still its model.

        Args:
            entry: the file's export.json entry (`top1_agreement`, `file_agreement`'s columns,
                its label scores).
            bar: the agreement it must reach (`vit_keras.export.bars`, or `--min-agreement`).
            quantization: the file's (None or 'float32', 'fp16', 'dynamic_int8', 'int8').

        Returns:
            (None when it passes, else why it fails; whether the failure means the file
            computes something other than its model, so that the format's own advice applies:
            for a float file, a bug). Here: its top-1 agreement against `bar`.
        """
        agreement = entry["top1_agreement"]
        if agreement >= bar:
            return None, False
        return (f"{self.agreement_column} with the Keras model {percent(agreement)} < "
                f"{percent(bar)}", True)

    def near_tie_advice(self) -> str:
        """What to try when a file fails without computing something else (`check`'s second
        answer False)."""
        return ""

    def answer(self, model, kind: str, inputs, outputs: dict) -> dict:
        """The batch answer `vit serve` returns for the model's `outputs` on `inputs` (`kind`:
        'images', 'encoded' or 'explain', the page's call)."""
        return outputs

    def served_inputs(self, model, files: list[bytes]) -> tuple[np.ndarray, int]:
        """`vit serve`'s model inputs of a request's encoded files, where the task reads them
        (`reads_served_files`).

        Returns:
            (float32 inputs, the rows of them per file, whose outputs `joined` averages).

        Raises:
            ValueError: a file it cannot read, naming it ('instance 2: ...').
        """
        raise NotImplementedError

    def joined(self, outputs: dict, rows: int) -> dict:
        """A request's answer from its model outputs, `rows` per input: each input's
        'probabilities' and 'logits' averaged over its rows."""
        if rows == 1:
            return outputs
        return {name: np.asarray(value).reshape(-1, rows, *np.shape(value)[1:]).mean(1)
                for name, value in outputs.items()}

    def page_picture(self, inputs: np.ndarray, rows: int) -> dict:
        """What the page draws in place of the file it sent ({'picture': a PNG data URL}),
        where that is no image; {}: the file itself."""
        return {}

    def inspect_inputs(self, model, model_path: str, paths: list[str]):
        """`vit inspect`'s inputs of `paths` for a loaded Keras `model` (its file at
        `model_path`): (float32 model inputs in 0..255, their names). Here images, resized by
        the model's rule."""
        config = config_from_model(model)
        images = load_files(paths, config.image_hw, config.channels, preprocessing_of(model))
        return images, [os.path.basename(path) for path in paths]

    def inspect(self, model, inputs, output_dir: str, names: list[str], discard_ratio: float,
                head_fusion: str) -> dict | None:
        """The task's own `vit inspect` analysis of `inputs` (as `inspect_inputs` gives
        them), written into `output_dir` with its inspect.json; returns the summary, with
        'figures', 'skipped' and 'json' (as `vit_app.inference.inspect.inspect_model`'s).
        None: the shared analysis of images applies."""
        return None

    def explains(self, model) -> bool:
        """Whether the page's call runs as 'explain' (adds what the page draws beside)."""
        return False

    def page_answer(self, name: str, model, outputs: dict) -> dict:
        """The page's JSON for one image's `answer`: 'model', 'top' (its list of labels, each
        with a 'probability' or a 'share'), 'drawing' (how the page draws the rest: 'labels',
        the attention 'heatmap' where there is one; 'mask'; 'boxes'; the task's name, by its
        `page_script`), what that drawing
        takes, 'caption' (the text under it), 'empty' (what the page says when 'top' is
        empty) and, optionally, 'score_of' (what a top score is a share of)."""
        raise NotImplementedError

    def page_script(self) -> str | None:
        """The path of the task's own drawing, a JavaScript module whose `draw(result,
        canvas)` draws an answer whose `drawing` is the task's name over the image (the page
        loads it as /static/task.js); None: the page's own drawings serve."""
        return None

    def page_features(self, model) -> dict:
        """What the page may show for this model, beside its name and size."""
        return {"heatmap": False}

    def serving_outputs(self, height: int, width: int, num_classes: int) -> dict:
        """{output name: (TF dtype name, shape)} of the REST predict answer (`-1`: any)."""
        return {name: ("DT_FLOAT", [-1, num_classes]) for name in ("probabilities", "logits")}


def checked_labels(labels, images):
    """Multi-hot [N, classes] float32, masks [N, H, W] int64 (a segmenter's, at the images'
    size, 255 ignored) or class ids [N] int64, one per image."""
    if labels.ndim == 3 and labels.shape[1:] != images.shape[1:3]:
        raise ValueError(f"eval masks must be [N, {images.shape[1]}, {images.shape[2]}] (the eval "
                         f"images' size), got shape {labels.shape}")
    if labels.ndim == 2:
        labels = labels.astype(np.float32)
    else:
        labels = labels.astype(np.int64) if labels.ndim == 3 else \
            labels.astype(np.int64).reshape(-1)
    if len(labels) != len(images):
        raise ValueError(f"got {len(labels)} eval labels for {len(images)} eval images")
    return labels


# A file's score is judged only against a validation set that can measure it: fewer images
# than this and the table says the score was not judged (the file is judged on its agreement).
MIN_JUDGED_IMAGES = 8
BOOTSTRAP_DRAWS = 200


def sampling_noise(deltas_of, count: int, draws: int = BOOTSTRAP_DRAWS) -> dict:
    """How much a file's score differences from Keras' move with the choice of images.

    The bootstrap is paired: each resample scores the file and Keras on the same images, so a
    difference that one or two images make (a near tie flipped on a small set) shows as noise,
    while a file worse on every image shows as a steady difference.

    Args:
        deltas_of: indices of images (repeats allowed) -> {name: file's score - Keras' on
            those images}.
        count: the number of validation images.
        draws: bootstrap resamples (seeded, so a verdict does not change between runs).

    Returns:
        {name: the standard deviation of the difference over the resamples}; resamples where a
        difference is undefined (None or NaN) are left out (0.0 when under two remain).
    """
    rng = np.random.default_rng(0)
    found: dict[str, list[float]] = {}
    for _ in range(draws):
        for name, value in deltas_of(rng.integers(0, count, count)).items():
            if value is not None and not np.isnan(value):
                found.setdefault(name, []).append(float(value))
    return {name: float(np.std(values)) if len(values) > 1 else 0.0
            for name, values in found.items()}


def score_failure(entry: dict, margins: dict, kind: str, agreement: str) -> str | None:
    """Why a file's scores refuse it, or None.

    A file is refused for a score only when that score is *worse* than Keras' by more than
    its margin plus the difference's sampling noise: a file scoring at least as well as
    its model is never refused for it, and a set of fewer than `MIN_JUDGED_IMAGES` images is
    not asked to tell the difference (`entry['scores_judged']` False).

    Args:
        entry: the file's export.json entry: `<key>_delta` (file - Keras) and `<key>_noise`
            for each key of `margins`.
        margins: {key: (what the table calls it, margin)}.
        kind: 'float' or 'int8', for the message.
        agreement: the file's agreement where Keras is sure, for the message ('99.80%').
    """
    if not entry.get("scores_judged", True):
        return None
    for key, (name, margin) in margins.items():
        delta, noise = entry.get(f"{key}_delta"), entry.get(f"{key}_noise") or 0.0
        if delta is not None and delta < -(margin + noise):
            return (f"{name} {100 * delta:+.2f} points from Keras' (a {kind} file may lose "
                    f"{100 * margin:.1f}, plus {100 * noise:.2f} of sampling noise on "
                    f"{entry.get('scored_images', '?')} images); it agrees where Keras is sure "
                    f"({agreement})")
    return None


def judged_images(count: int) -> dict:
    """export.json's columns saying on how many images a file's scores were taken and whether
    that is enough to judge them (`MIN_JUDGED_IMAGES`)."""
    return {"scored_images": int(count), "scores_judged": count >= MIN_JUDGED_IMAGES}


PAGE_TOP_K = 5  # classes the page lists


def page_top(scores, names: list[str]) -> list[dict]:
    """The page's `top` of one input's class probabilities: the `PAGE_TOP_K` best, each with
    its index, label and probability."""
    return [{"index": int(i), "label": names[i], "probability": float(scores[i])}
            for i in np.argsort(-scores, kind="stable")[:PAGE_TOP_K]]


def percent(value) -> str:
    """0.9876 -> '98.76%' (the export table's form)."""
    return f"{100 * value:.2f}%"


def percent_or_blank(value) -> str:
    """`percent`, or '' for no value."""
    return "" if value is None else percent(value)


def get(name: str) -> InferenceTask:
    """The `InferenceTask` of the task `name` (raises ValueError for an unknown one)."""
    return library_tasks.load_part(library_tasks.parts(name).inference)


def whole_image(name: str) -> bool:
    """Whether encoded images are resized whole for the task (never centre-cropped)."""
    return library_tasks.contract(name).whole_image

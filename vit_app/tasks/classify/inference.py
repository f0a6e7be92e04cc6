"""The classify task's inference part: a class (or, multi-label, several) per image.

`vit predict` gives each image's top-k classes; `vit evaluate` top-1/top-5 (mAP and F1 for a
multi-label model, the few-shot probe on request); `vit serve` answers probabilities and
logits and its page draws the top classes with the attention rollout of a `.keras` model;
an exported file is checked on its top-1 agreement with Keras.
"""

from __future__ import annotations

import argparse

import numpy as np

from vit_app.data import evaluation as data_evaluation, specs

from vit_app.data import training_data
from vit_app.tasks.classify.data import readers
from vit_app.inference import evaluate as evaluation
from vit_app.tasks.classify import evaluate as classify_scores
from vit_app.tasks.classify import multilabel_scores
from vit_app.inference.predict import table
from vit_app.inference.inference_task import InferenceTask, page_top, percent



class Classify(InferenceTask):
    """See the module docstring."""

    name = "classify"

    def score_cell(self, entry: dict) -> str:
        """Top-1 accuracy, or the mAP of a multi-label model ('81.20% mAP')."""
        if entry.get("mAP") is not None:
            return f"{percent(entry['mAP'])} mAP"
        return super().score_cell(entry)

    def score_summary(self, entry: dict) -> str:
        return self.score_cell(entry) if entry.get("mAP") is not None else \
            super().score_summary(entry)

    def predict(self, model, readable, args: argparse.Namespace) -> tuple[list[dict], str]:
        rows = predict_files(model, readable, args.top_k, args.batch_size)
        return rows, table(rows)

    def export_examples(self, spec: str, trained_on: tuple, rule, input_size: tuple):
        """Images resized by the model's rule, as `vit train` resizes them for evaluation;
        their class ids."""
        def take(source, count):
            return data_evaluation.take_raw_images(source, input_size, count, rule)

        return readers.open_training_data(spec, *trained_on), take

    def evaluate(self, model, args: argparse.Namespace) -> tuple[dict, list[str]]:
        specs.refuse_other_tasks_data(args.data, self.name, model=args.model)
        source = readers.load_source(args.data, training_data.evaluation_subset(args.data),
                                     args.data_dir, val_split=0.0)
        scored = model.keras_model if model.keras_model is not None else model
        names = evaluation.class_names_for(args.model, args.labels, source.class_names)
        multilabel = classify_scores.is_multilabel(args.model, source)
        if multilabel:
            results = _multilabel_results(scored, source, names, args)
        else:
            results = classify_scores.evaluate(scored, source, args.batch_size,
                                               args.image_size)
        if args.few_shot is not None:
            _add_few_shot(results, scored, source, args)
        evaluation.name_classes(results, names)
        height, width = classify_scores.scorer(scored, args.image_size)[0]
        where = (f"{args.model} on {args.data}: {results['examples']} images at "
                 f"{height}x{width}")
        lines = classify_scores.multilabel_lines if multilabel else classify_scores.lines
        return results, lines(results, where)

    def label_scores(self, logits, labels) -> dict:
        """{'accuracy': top-1} for class ids; {'accuracy': None, 'mAP'} for multi-hot labels."""
        if labels is None:
            return {"accuracy": None}
        if labels.ndim == 2:
            average = multilabel_scores.mean_average_precision(labels, logits)[0]
            return {"accuracy": None, "mAP": None if np.isnan(average) else float(average)}
        return {"accuracy": float((logits.argmax(-1) == labels).mean())}

    def answer(self, model, kind: str, inputs, outputs: dict) -> dict:
        if kind == "explain":
            outputs["rollout"] = model.attention_rollout(inputs)
        return outputs

    def explains(self, model) -> bool:
        return model.keras_model is not None  # an exported file keeps no attention maps

    def page_answer(self, name: str, model, outputs: dict) -> dict:
        top = page_top(outputs["probabilities"][0], model.class_names)
        heatmap = None
        if "rollout" in outputs:
            rollout = outputs["rollout"][0]
            heatmap = {"rows": int(rollout.shape[0]), "cols": int(rollout.shape[1]),
                       "values": [round(float(v), 4) for v in rollout.ravel()]}
        caption = "Attention rollout: where the model looks, through every block." if heatmap \
            else f"a {model.format} file keeps no attention maps; serve the .keras model to " \
            "see where it looks"
        return {"model": name, "top": top, "drawing": "labels", "heatmap": heatmap,
                "caption": caption, "empty": "no class."}

    def page_features(self, model) -> dict:
        return {"heatmap": self.explains(model)}


def predict_files(model, readable, top_k: int, batch_size: int) -> list[dict]:
    """Each image's top-k classes: [{'file', 'top': [(class name, score), ...]}], in order."""
    names = model.class_names
    rows = []
    for start in range(0, len(readable), batch_size):
        batch = readable[start:start + batch_size]
        scores = model.predict_encoded([data for _, data in batch])["probabilities"]
        for (path, _), image_scores in zip(batch, scores):
            best = np.argsort(-image_scores, kind="stable")[:top_k]
            rows.append({"file": path,
                         "top": [(names[index], float(image_scores[index])) for index in best]})
    return rows


def _multilabel_results(model, source, names: list[str], args: argparse.Namespace) -> dict:
    if args.few_shot is not None:
        raise ValueError("--few-shot fits single-label classifiers; this model or data is "
                         "multi-label: leave --few-shot out")
    if source.multilabel and names != source.class_names:
        raise ValueError(f"{args.data} has the classes {source.class_names}, the model "
                         f"{names}: expected the same classes in the same order (a "
                         "labels.txt beside the CSV file fixes its list)")
    return classify_scores.evaluate_multilabel(model, source, args.batch_size,
                                               args.image_size)


def _add_few_shot(results: dict, model, source, args: argparse.Namespace) -> None:
    shots = tuple(args.few_shot) or (1, 5, 10, 25)
    results["few_shot"] = classify_scores.few_shot_report(
        model, args.data, args.data_dir, source, shots, args.image_size, args.block)
    if args.block is not None:
        results["few_shot_block"] = args.block


TASK = Classify()

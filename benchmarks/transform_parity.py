"""Our prediction against timm's, from a JPEG photo to the probabilities: one randomly
initialised timm model per family (written, with timm's own outputs, by
`tools/make_transform_references.py --models DIR`), loaded by its timm name as a user loads a
bare weights file (`vit predict PHOTO --model NAME --weights FILE`).

A random-weight model amplifies any difference in its input, so the top-5 agree only when
the decode, the resize and the crop are timm's to the level. For the families without a head
(DINOv2, SigLIP, CLIP) the embedding is compared. It exits 1 when a model's top-5 differs
from timm's (or a probability by more than PROBABILITY_GAP), or an embedding's cosine to
timm's is under MIN_COSINE.

    /tmp/timm/bin/python tools/make_transform_references.py --models /tmp/transform_models
    python benchmarks/transform_parity.py /tmp/transform_models
"""

from __future__ import annotations

import argparse
import glob
import json
import os

import numpy as np

import vit_keras
from vit_app.images import decode_checked
from vit_app.inference import classifier, embed
from vit_keras.core.model import input_image_size, preprocessing_of

PHOTO = os.path.join(os.path.dirname(__file__), "..", "tests", "data", "photo_coffee.jpg")
PROBABILITY_GAP = 1e-3
MIN_COSINE = 0.9999


def compare(record: dict, weights: str, photo: bytes) -> tuple[str, bool]:
    """The table row comparing our outputs for one model with timm's `record`, and whether
    they agree."""
    name = record["model"].split(".")[0]
    if "top5" in record:
        model = classifier.load(name, weights=weights)
        scores = model.predict_encoded([photo])["probabilities"][0]
        ours = np.argsort(-scores, kind="stable")[:5]
        gaps = [abs(float(scores[index]) - probability) for index, probability in record["top5"]]
        same = [int(index) for index in ours] == [index for index, _ in record["top5"]]
        timm_top = ", ".join(f"{index} {probability:.3f}" for index, probability in record["top5"])
        our_top = ", ".join(f"{index} {scores[index]:.3f}" for index in ours)
        agree = same and max(gaps) <= PROBABILITY_GAP
        return (f"| {record['model']} | top-5 | {timm_top} | {our_top} | "
                f"{'yes' if agree else 'NO'}, largest probability gap {max(gaps):.1e} |", agree)
    expected = np.asarray(record["embedding"], np.float32)
    got = _embedding(name, weights, photo)
    cosine = float(expected @ got / np.linalg.norm(expected) / np.linalg.norm(got))
    agree = cosine >= MIN_COSINE
    return (f"| {record['model']} | embedding | {expected.shape[0]} values | max abs diff "
            f"{np.abs(expected - got).max():.2e} | {'yes' if agree else 'NO'}, cosine "
            f"{cosine:.6f} |", agree)


def _embedding(name: str, weights: str, photo: bytes) -> np.ndarray:
    """What `vit embed PHOTO --model NAME --weights FILE` gives."""
    model = embed.load_model(name, weights)
    pixels = decode_checked([photo], input_image_size(model),
                            preprocessing=preprocessing_of(model))
    inputs = vit_keras.preprocess_input(pixels, model=model)
    return np.asarray(embed.embedding_model(model, None).predict_on_batch(inputs)[0],
                      np.float32)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", help="the folder tools/make_transform_references.py wrote")
    args = parser.parse_args(argv)
    with open(PHOTO, "rb") as handle:
        photo = handle.read()
    print("| timm model (random weights, seed 0) | compared | timm | ours | agreement |")
    print("|---|---|---|---|---|")
    disagreements = 0
    records = sorted(glob.glob(os.path.join(args.models, "*.json")))
    if not records:
        print(f"FAILED: no <model>.json in {args.models}: expected the folder that "
              "tools/make_transform_references.py --models wrote")
        return 1
    for path in records:
        with open(path) as handle:
            record = json.load(handle)
        weights = path[:-len(".json")] + ".safetensors"
        row, agree = compare(record, weights, photo)
        print(row, flush=True)
        disagreements += not agree
    if disagreements:
        print(f"FAILED: {disagreements} model(s) disagree with timm")
    return 1 if disagreements else 0


if __name__ == "__main__":
    raise SystemExit(main())

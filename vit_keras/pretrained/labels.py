"""ImageNet class names for the official heads, shipped with the package, and `decode_predictions`.

`imagenet1k.txt` (1000 classes) and `imagenet21k.txt.gz` (21843 classes) hold one
`WNID<TAB>lemmas` line per class in head order (sorted WordNet IDs); `tools/make_imagenet_labels.py`
writes them.
"""

from __future__ import annotations

import functools
import gzip
import os

import numpy as np

LABEL_FILES = {1000: "imagenet1k.txt", 21843: "imagenet21k.txt.gz"}


@functools.lru_cache(maxsize=None)
def imagenet_classes(num_classes: int) -> tuple[tuple[str, str], ...]:
    """The (WordNet ID, name) of every class of an official ImageNet head, in head order.

    Args:
        num_classes: 1000 (ImageNet-1k) or 21843 (ImageNet-21k).

    Returns:
        `num_classes` pairs; the name is the synset's first lemma ('tench', 'great white shark').
    """
    if num_classes not in LABEL_FILES:
        raise ValueError(f"ImageNet class names exist for heads of {sorted(LABEL_FILES)} "
                         f"classes, got {num_classes}")
    path = os.path.join(os.path.dirname(__file__), LABEL_FILES[num_classes])
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as file:
        rows = [line.rstrip("\n").split("\t", 1) for line in file if line.strip()]
    return tuple((wnid, lemmas.split(",")[0].strip()) for wnid, lemmas in rows)


def decode_predictions(predictions, top: int = 5) -> list[list[tuple[str, str, float]]]:
    """The `top` classes of each prediction of an ImageNet head, as keras.applications returns.

    Args:
        predictions: [batch, 1000] or [batch, 21843] scores (probabilities or logits: the
            order is the same).
        top: classes per image.

    Returns:
        One list per image of (WordNet ID, class name, score) tuples, best first.
    """
    scores = np.asarray(predictions, dtype=np.float64)
    if scores.ndim != 2:
        raise ValueError(f"decode_predictions expects [batch, classes] scores, got shape "
                         f"{scores.shape}")
    if top < 1:
        raise ValueError(f"top must be >= 1, got {top}")
    classes = imagenet_classes(scores.shape[1])
    best = np.argsort(-scores, axis=1, kind="stable")[:, :top]
    return [[(*classes[index], float(row[index])) for index in indices]
            for row, indices in zip(scores, best)]

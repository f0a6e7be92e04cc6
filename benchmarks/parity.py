"""Max abs logit difference against every committed reference vector, on this backend.

    python benchmarks/parity.py                       # KERAS_BACKEND picks the backend
    for b in tensorflow jax torch; do KERAS_BACKEND=$b python benchmarks/parity.py; done

The references (tests/data/*_vectors.npz) were made by timm and Hugging Face transformers
(tests/data/make_timm_vectors.py, make_hybrid_deit_vectors.py): timm and HF files loaded here
('timm_*', 'hf_*', 'timm_hybrid', 'timm_deit'), and our official-layout `.npz` loaded into timm
('ours_*_in_timm': the official layout read back here). The tests hold the same bounds
(tests/test_checkpoints_parity.py, tests/test_hybrid.py, tests/test_deit.py); this prints the
numbers, one line per reference, for a before/after table.
"""

from __future__ import annotations

import json
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402

import vit_keras  # noqa: E402

DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests",
                    "data")
SETS = (("parity_configs.json", "parity_vectors.npz"),
        ("hybrid_deit_configs.json", "hybrid_deit_vectors.npz"))


def difference(case: dict, images, reference) -> float:
    """Max abs difference of our outputs for `case` from `reference`."""
    case = dict(case)
    weights = case.pop("weights")
    include_top, pooling = case.pop("include_top", True), case.pop("pooling", None)
    model = vit_keras.VisionTransformer(vit_keras.ViTConfig(**case), include_top=include_top,
                                        pooling=pooling)
    vit_keras.load_weights(model, os.path.join(DATA, weights), skip_head=False)
    outputs = keras.ops.convert_to_numpy(model(images))
    return float(np.abs(outputs - reference).max())


def main() -> None:
    print(f"backend {keras.backend.backend()}, vit_keras from {vit_keras.__file__}")
    for configs, vectors in SETS:
        with open(os.path.join(DATA, configs)) as file:
            cases = {name: case for name, case in json.load(file).items()
                     if not name.startswith("_")}
        with np.load(os.path.join(DATA, vectors), allow_pickle=False) as archive:
            for name, case in sorted(cases.items()):
                value = difference(case, archive[f"{name}/images"], archive[f"{name}/outputs"])
                print(f"{name:24s} max |ours - reference| = {value:.2e}")


if __name__ == "__main__":
    main()

"""keras-hub presets both ways, on the Keras backend of KERAS_BACKEND: the max abs difference
between keras-hub's outputs and ours for tiny presets that keras-hub writes with random weights
(read here), and for the presets written here back in keras-hub (ViT only: the one it loads).

    for backend in tensorflow jax torch; do KERAS_BACKEND=$backend python benchmarks/keras_hub_parity.py; done

Prints a Markdown table (family, direction, backend, what is compared, max abs difference) and
exits 1 when a difference passes 1e-5. The presets come from tests/test_keras_hub_presets.py.
"""

import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
import keras  # noqa: E402
import test_keras_hub_presets as cases  # noqa: E402
import vit_keras  # noqa: E402

BOUND = 1e-5


def _diff(a, b) -> float:
    return float(np.abs(keras.ops.convert_to_numpy(a) - keras.ops.convert_to_numpy(b)).max())


def _vit_rows(folder, name, options):
    theirs = cases._vit_classifier(os.path.join(folder, name), **options)
    images = cases._images(32)
    ours = vit_keras.from_preset(os.path.join(folder, name))
    backbone = vit_keras.from_preset(os.path.join(folder, name), include_top=False)
    vit_keras.save_preset(ours, os.path.join(folder, name + "_back"))
    back = cases.keras_hub.models.ImageClassifier.from_preset(os.path.join(folder, name + "_back"))
    return [(name, "read", "logits", _diff(theirs(images), ours(images))),
            (name, "read", "last-block normed tokens",
             _diff(theirs.backbone(images), cases._tokens(backbone, images))),
            (name, "written", "logits", _diff(back(images), ours(images))),
            (name, "written", "last-block normed tokens",
             _diff(back.backbone(images), cases._tokens(backbone, images)))]


def _tower_rows(folder):
    rows = []
    for registers in (0, 2):
        path = os.path.join(folder, f"dinov2_{registers}")
        theirs, images = cases._dinov2(path, registers), cases._images(16)
        ours = vit_keras.from_preset(path, include_top=False)
        rows.append((f"dinov2 {registers} registers", "read", "last-block normed tokens",
                     _diff(theirs({"images": images}), cases._tokens(ours, images))))
    theirs, images = cases._deit(os.path.join(folder, "deit")), cases._images(32)
    ours = vit_keras.from_preset(os.path.join(folder, "deit"), include_top=False)
    rows.append(("deit", "read", "last-block normed tokens",
                 _diff(theirs(images), cases._tokens(ours, images))))
    for kind, arange, what in (("siglip", True, "pooled embedding"),
                               ("clip", True, "projected embedding"),
                               ("clip", False, "projected embedding (zero position ids)")):
        path = os.path.join(folder, f"{kind}_{arange}")
        theirs, images = cases._two_tower(kind, path, arange), cases._images(32)
        reference = theirs.vision_encoder({"images": images}) if kind == "siglip" else \
            theirs.get_vision_embeddings(images)
        rows.append((kind, "read", what,
                     _diff(reference, vit_keras.from_preset(path, include_top=False)(images))))
    return rows


def main() -> int:
    backend = keras.backend.backend()
    keras.utils.set_random_seed(0)
    with tempfile.TemporaryDirectory() as folder:
        rows = []
        for name, options in (("vit token", {}),
                              ("vit gap + pre-logits", dict(class_token=False, pooling="gap",
                                                            intermediate_dim=12)),
                              ("vit no biases", dict(use_mha_bias=False, use_mlp_bias=False))):
            rows += _vit_rows(folder, name, options)
        rows += _tower_rows(folder)
    print(f"keras-hub {cases.keras_hub.__version__}, Keras {keras.__version__}, float32\n")
    print("| family | direction | backend | compared | max abs diff |\n|---|---|---|---|---|")
    for family, direction, what, difference in rows:
        print(f"| {family} | {direction} | {backend} | {what} | {difference:.1e} |")
    worst = max(difference for *_, difference in rows)
    print(f"\nworst {worst:.1e} (bound {BOUND:.0e})")
    return 0 if worst < BOUND else 1


if __name__ == "__main__":
    sys.exit(main())

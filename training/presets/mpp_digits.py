"""mpp_digits: masked patch prediction pre-training (paper 4.6) on the digits, offline, CPU.

The digits_tiny ViT (16 px, 4x4 patches, D=64, 4 blocks, mean pooling) learns to predict the
3-bit mean colour of the corrupted patches of the 80% training split (labels unused). Digits
are grey, so only the 8 grey classes (r = g = b) of the 512 ever occur. Writes
saved_models/mpp_digits/encoder.npz; fine-tune it with the mpp_digits_finetune preset:

    vit train --config mpp_digits
    vit train --config mpp_digits_finetune --weights saved_models/mpp_digits/encoder.npz
"""

from training.presets.digits_tiny import PRESET as DIGITS

PRESET = DIGITS.replace(name="mpp_digits",
                        objective={"kind": "mpp", "label_smoothing": 0.0},
                        schedule={"epochs": 100, "warmup_epochs": 5},
                        optim={"lr": 1e-3},
                        loop={"eval_every": 100})

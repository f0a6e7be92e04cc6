"""mpp_digits_finetune: digits_tiny's supervised recipe, meant to start from mpp_digits.

Pass the pre-trained encoder with `--weights saved_models/mpp_digits/encoder.npz`; without
`--weights` it is the from-scratch baseline at the same fine-tuning budget.
"""

from training.presets.digits_tiny import PRESET as DIGITS

PRESET = DIGITS.replace(name="mpp_digits_finetune")

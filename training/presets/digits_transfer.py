"""digits_transfer: fine-tune a model of the digits 0-4 on the digits 5-9 (offline transfer).

    vit train --config digits_upstream
    vit train --config digits_transfer --weights saved_models/digits_upstream/model.keras \
        --finetune lora --lr 2e-2

30 epochs of digits_tiny's recipe (warmup, cosine, the same light augmentation); every
`--finetune` mode runs from it. LoRA adapts query, value and the MLPs at rank 8: on a model
this small (width 64) query and value alone are too few weights to follow full fine-tuning.
`benchmarks/finetune_modes.py` runs every mode and from-scratch training side by side.
"""

from training.presets.digits_tiny import PRESET as DIGITS

PRESET = DIGITS.replace(name="digits_transfer",
                        data={"classes": "5,6,7,8,9"},
                        schedule={"epochs": 30},
                        finetune={"lora_targets": "query,value,mlp"})

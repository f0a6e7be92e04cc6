"""cifar10_scratch: ViT for small data from scratch, DeiT-style, on tfds:cifar10 (32 px).

AdamW (lr 5e-4 x batch/512, wd 0.05), warmup + cosine, label smoothing 0.1, RandAugment (2, 9),
MixUp 0.8 / CutMix 1.0, random erasing 0.25, pad-and-crop + flips; a ViT-Ti-width model on 4x4
patches (64 tokens) with mean pooling.
"""

from training.presets import Preset
from training.presets.sections import Augment, Data, Loop, Objective, Optim, Schedule
from vit_keras import ViTConfig

PRESET = Preset(
    name="cifar10_scratch",
    model=ViTConfig(image_size=32, patch_size=4, hidden_size=192, mlp_dim=768, num_heads=3,
                    num_layers=9, num_classes=10, classifier="gap"),
    data=Data(
        train="tfds:cifar10",
    ),
    optim=Optim(
        optimizer="adamw",
        lr=5e-4 * 256 / 512,
        weight_decay=0.05,
        clipnorm=1.0,
    ),
    schedule=Schedule(
        epochs=200,
        batch_size=256,
        decay="cosine",
        warmup_epochs=5,
        min_lr=1e-6,
    ),
    augment=Augment(
        crop="pad_crop",
        pad=4,
        flip=True,
        randaugment_ops=2,
        randaugment_magnitude=9,
        mixup_alpha=0.8,
        cutmix_alpha=1.0,
        erasing_prob=0.25,
    ),
    objective=Objective(
        label_smoothing=0.1,
    ),
    loop=Loop(
        eval_every=5,
        mixed_precision="auto",
        backup_every=500,
    ),
)

"""imagenet_s16: big_vision's plain ViT-S/16 on ImageNet-1k (76.5% top-1 in 90 epochs).

Adam 1e-3 (decoupled wd 1e-4), batch 1024, 10k warmup steps then cosine, clip 1.0, inception
crop + flip, RandAugment (2, 10), MixUp 0.2, mean pooling and fixed 2-D sin-cos position
embeddings, as big_vision. Needs the data:
`--data tfds:imagenet2012 --data-dir gs://...` or `--data folder:/data/imagenet/train`.
"""

from training.presets import Preset
from training.presets.sections import Augment, Data, Loop, Optim, Schedule
from vit_keras import get_variant

PRESET = Preset(
    name="imagenet_s16",
    model=get_variant("S/16", classifier="gap", posemb="sincos2d"),
    data=Data(
        train="tfds:imagenet2012",
    ),
    optim=Optim(
        optimizer="adam",
        lr=1e-3,
        weight_decay=1e-4,
        clipnorm=1.0,
    ),
    schedule=Schedule(
        epochs=90,
        batch_size=1024,
        decay="cosine",
        warmup_steps=10_000,
    ),
    augment=Augment(
        crop="inception",
        crop_area_min=0.05,
        flip=True,
        randaugment_ops=2,
        randaugment_magnitude=10,
        mixup_alpha=0.2,
    ),
    loop=Loop(
        mixed_precision="auto",
        eval_every=1,
        backup_every=1000,
    ),
)

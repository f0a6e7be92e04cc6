"""pretrain_b16: the paper's ViT-B/16 pre-training (ImageNet-21k scale data, 224 px).

Adam (0.9, 0.999), batch 4096, decoupled weight decay 0.1, 10k warmup steps then linear decay,
clip 1.0, a pre_logits layer of width 768, head bias -10, dropout 0.1, inception crop + flip.
Needs the data (e.g. `--data tfrecord:gs://bucket/imagenet21k/train-*`).
"""

from training.presets import Preset
from training.presets.sections import Augment, Data, Loop, Optim, Schedule
from vit_keras import get_variant

PRESET = Preset(
    name="pretrain_b16",
    model=get_variant("B/16", num_classes=21843, representation_size=768, head_bias_init=-10.0,
                      dropout_rate=0.1),
    data=Data(
        train="tfds:imagenet2012",
    ),
    optim=Optim(
        optimizer="adam",
        beta1=0.9,
        beta2=0.999,
        lr=1e-3,
        weight_decay=0.1,
        clipnorm=1.0,
    ),
    schedule=Schedule(
        epochs=90,
        batch_size=4096,
        decay="linear",
        warmup_steps=10_000,
    ),
    augment=Augment(
        crop="inception",
        crop_area_min=0.05,
        flip=True,
    ),
    loop=Loop(
        mixed_precision="auto",
        eval_every=1,
        backup_every=1000,
    ),
)

"""finetune_384: the official ViT fine-tuning recipe at 384 px (google-research/vision_transformer).

SGD momentum 0.9, no weight decay, batch 512 (accumulated 8 x 64 where devices are smaller),
lr 0.01, 500 warmup steps then cosine, global-norm clip 1.0, inception crop + flip for training,
plain resize for evaluation. Start from official weights with `--weights augreg-in21k` (or
`imagenet21k`, or a file): the head is replaced and the position embeddings are resized to the
24x24 grid. Default data: CIFAR-10
(10k steps in the paper = 102 epochs of 50k at batch 512; the default here is shorter).
"""

from training.presets import Preset
from training.presets.sections import Augment, Data, Loop, Objective, Optim, Schedule
from vit_keras import get_variant

PRESET = Preset(
    name="finetune_384",
    model=get_variant("B/16", image_size=384, num_classes=10),
    data=Data(
        train="tfds:cifar10",
    ),
    optim=Optim(
        optimizer="sgd",
        momentum=0.9,
        lr=0.01,
        weight_decay=0.0,
        clipnorm=1.0,
    ),
    schedule=Schedule(
        epochs=10,
        batch_size=512,
        grad_accum_steps=8,
        decay="cosine",
        warmup_steps=500,
    ),
    augment=Augment(
        crop="inception",
        crop_area_min=0.05,
        flip=True,
    ),
    objective=Objective(
        label_smoothing=0.0,
    ),
    loop=Loop(
        eval_every=1,
        mixed_precision="auto",
        backup_every=200,
    ),
)

"""digits_segment: the offline segmentation job (`vit train --task segment`).

The built-in `digit-scenes` (scikit-learn's digits drawn in colour on noisy 32x32 canvases,
each pixel labelled with its digit or background) and a small ViT with the skip head: 4x4
patches give an 8x8 token grid, which climbs back to 32x32 in two 2x levels beside a light
conv path from the image at 32x32 and 16x16 (UNETR's skips keep the digits' edges).
The digits' own recipe carries over (convolutional stem, locality self-attention); no flips,
since a mirrored digit is another shape. A random rescale of 0.75-1.5x teaches digits of several
sizes. On other data the small-data rule (`training.adapt`, its segmentation variant) fits the
image size, patch size, head levels and epochs to the images given; images of 128 px and more
train as 128 px crops at their own resolution and are segmented whole at their size.
"""

from training.presets import Preset
from training.presets.sections import Augment, Data, Loop, Objective, Optim, Schedule
from training.tasks.segment.section import Segment
from vit_keras import ViTConfig

PRESET = Preset(
    name="digits_segment",
    model=ViTConfig(image_size=32, patch_size=4, hidden_size=64, mlp_dim=128, num_heads=4,
                    num_layers=4, num_classes=11, classifier="gap", drop_path_rate=0.1,
                    stem="conv", locality_attention=True),
    seed=0,
    data=Data(train="digit-scenes", adapt=True),  # the digit scenes leave it as it is
    optim=Optim(optimizer="adamw", lr=2e-3, weight_decay=0.05, clipnorm=1.0),
    # 15 epochs: about two minutes on 2 CPU cores (the skip head 64 wide: 71% mIoU in a minute;
    # the progressive head 52% in 85 s, the linear head 24% in 20 epochs). 128 wide, shape
    # scenes come within 1.1 points of a U-Net given the same time (64 wide: 2.4 behind).
    schedule=Schedule(epochs=15, batch_size=32, decay="cosine", warmup_epochs=2),
    augment=Augment(crop="resize"),
    objective=Objective(kind="segment"),
    tasks=(Segment(head="skip", width=128, stages=2, scale_min=0.75, scale_max=1.5),),
    loop=Loop(eval_every=5, mixed_precision="auto"),
)

"""digits_detect: the offline detection job (`vit train --task detect`).

The built-in `digit-boxes` (scikit-learn's digits drawn in colour on plain 64x64 canvases, one
to four apart in each, boxed round their ink) and a small ViT under DETR's decoder: 8x8 patches
give an 8x8 token grid, which 20 object queries read through 3 decoder blocks, each refining the
queries' boxes. The digits' own recipe carries over (convolutional stem, locality
self-attention); no flips, since a mirrored digit is another shape. On other data the small-data
rule (`training.adapt`, its detection variant) fits the image size, patch size and epochs to
the images given; photographs also get flips.
"""

from training.presets import Preset
from training.presets.sections import Augment, Data, Loop, Objective, Optim, Schedule
from training.tasks.detect.section import Detect
from vit_keras import ViTConfig

PRESET = Preset(
    name="digits_detect",
    model=ViTConfig(image_size=64, patch_size=8, hidden_size=64, mlp_dim=128, num_heads=4,
                    num_layers=4, num_classes=10, classifier="gap", stem="conv",
                    locality_attention=True),
    seed=0,
    data=Data(train="digit-boxes", adapt=True),  # the digit boxes leave it as it is
    optim=Optim(optimizer="adamw", lr=2e-3, weight_decay=0.05, clipnorm=1.0),
    schedule=Schedule(epochs=30, batch_size=32, decay="cosine", warmup_epochs=2),
    augment=Augment(crop="resize"),
    objective=Objective(kind="detect"),
    tasks=(Detect(queries=20, layers=3, width=128, scale_min=0.7),),
    loop=Loop(eval_every=5, mixed_precision="auto"),
)

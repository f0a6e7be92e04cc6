"""digits_segment: the offline segmentation job (`vit train --task segment`).

The built-in `digit-scenes` (scikit-learn's digits drawn in colour on noisy 32x32 canvases,
each pixel labelled with its digit or background) and a small ViT with the progressive head:
4x4 patches give an 8x8 token grid, and two conv-BN-ReLU + 2x stages bring it back to 32x32.
The digits' own recipe carries over (convolutional stem, locality self-attention); no flips,
since a mirrored digit is another shape. A random rescale of 0.75-1.5x teaches digits of several
sizes. On other data the small-data rule (`training.adapt`, its segmentation variant) fits the
image size, patch size, head stages and epochs to the images given.
"""

from training.presets import Preset
from training.presets.sections import Augment, Data, Loop, Objective, Optim, Schedule
from vit_keras import ViTConfig

PRESET = Preset(
    name="digits_segment",
    model=ViTConfig(image_size=32, patch_size=4, hidden_size=64, mlp_dim=128, num_heads=4,
                    num_layers=4, num_classes=11, classifier="gap", drop_path_rate=0.1,
                    stem="conv", locality_attention=True),
    seed=0,
    data=Data(train="digit-scenes", adapt=True),  # the digit scenes leave it as it is
    optim=Optim(optimizer="adamw", lr=2e-3, weight_decay=0.05, clipnorm=1.0),
    # 15 epochs: about 2.5 minutes on 2 CPU cores (52% mIoU; the linear head reaches 24% in
    # 20 epochs of the same time, the reason this preset's head is the progressive one).
    schedule=Schedule(epochs=15, batch_size=32, decay="cosine", warmup_epochs=2),
    augment=Augment(crop="resize"),
    objective=Objective(kind="segment", segment_head="progressive", segment_width=64,
                        segment_stages=2, segment_scale_min=0.75, segment_scale_max=1.5),
    loop=Loop(eval_every=5, mixed_precision="auto"),
)

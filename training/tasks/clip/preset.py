"""sprites_clip: the offline clip job (`vit train --task clip`).

The built-in `moving-sprites` (a sprite moving left, right, up or down over 8 frames of 32 px
beside a still one: only motion tells the classes apart) and a small space-time ViT in the
joint layout (every token attends to every other: 4 tubelet frames of 16 tokens), its
tubelets 2 frames of 8x8 px. With 8 px patches the divided layout stayed at chance from one
of three seeds (seed 1, whatever its warm-up or rate) where the joint one reached 98-100%
with each; 4 px patches cost 6 times as much a step (docs/clips.md). On
other data the small-data rule (`training.adapt`, its clip variant) fits the frame size,
patch size and epochs to the clips given.
"""

from training.presets import Preset
from training.presets.sections import Augment, Data, Loop, Objective, Optim, Schedule
from training.tasks.clip.section import Clip
from vit_keras import ViTConfig

PRESET = Preset(
    name="sprites_clip",
    model=ViTConfig(image_size=32, patch_size=8, hidden_size=64, mlp_dim=128, num_heads=4,
                    num_layers=4, num_classes=4, classifier="gap"),
    seed=0,
    data=Data(train="moving-sprites", adapt=True),  # the sprites leave it as it is
    optim=Optim(optimizer="adamw", lr=1e-3, weight_decay=0.05, clipnorm=1.0),
    schedule=Schedule(epochs=10, batch_size=32, decay="cosine", warmup_epochs=1),
    augment=Augment(crop="resize"),
    objective=Objective(kind="clip"),
    tasks=(Clip(frames=8, stride=1, tubelet_frames=2, layout="joint"),),
    loop=Loop(mixed_precision="auto"),
)

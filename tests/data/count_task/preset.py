"""dots_count: the count task's offline job (`vit train --task count`): the built-in dots and
a small ViT whose 4x4 patches each see at most one dot."""

from count_task.section import Count
from training.presets import Preset
from training.presets.sections import Augment, Data, Objective, Optim, Schedule
from vit_keras import ViTConfig

PRESET = Preset(
    name="dots_count",
    model=ViTConfig(image_size=16, patch_size=4, hidden_size=32, mlp_dim=64, num_heads=2,
                    num_layers=2, num_classes=1, classifier="gap"),
    data=Data(train="dot-counts"),
    optim=Optim(optimizer="adamw", lr=2e-3, weight_decay=0.05),
    schedule=Schedule(epochs=20, batch_size=32, decay="cosine", warmup_epochs=1),
    augment=Augment(crop="resize"),
    objective=Objective(kind="count"),
    tasks=(Count(loss="huber"),),
)

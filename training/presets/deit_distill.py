"""deit_distill: DeiT hard-label distillation of the digits_tiny ViT from a teacher.

The student gets a distillation token and a second head trained on the teacher's argmax; at
inference both heads are averaged. Any Keras classifier of [-1, 1] 16x16 images can teach, e.g.
a digits_tiny model trained first:

    vit train --config digits_tiny --output saved_models/teacher
    vit train --config deit_distill --set objective.teacher=saved_models/teacher/model.keras

DeiT's regularisation (stochastic depth 0.1) is on; the rest is digits_tiny's recipe.
"""

from training.presets.digits_tiny import PRESET as DIGITS

PRESET = DIGITS.replace(name="deit_distill",
                        model=DIGITS.model.replace(classifier="token", drop_path_rate=0.1),
                        objective={"kind": "distill"})

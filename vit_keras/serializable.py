"""Every module that registers serializable layers, imported together, so that `.keras` files
of every model option load with `safe_mode=True`.

`import vit_keras` arranges for this module to be imported as soon as Keras is (see
`vit_keras/__init__.py`), so `import vit_keras` alone is enough to load such a file. Each
registered task's head module (`vit_keras.tasks.TASKS`) is imported here too: it registers its
model and layers, and imports the rest of its folder that does.
"""

import importlib

from vit_keras import intermediates, tasks  # noqa: F401
from vit_keras.core import (attention, deit, heads, layers, masked_patch, model,  # noqa: F401
                            normalization, patch_dropout, posemb, remat, resnet, stems)
from vit_keras.mobilevit import layers as mobilevit_layers  # noqa: F401
from vit_keras.mobilevit import model as mobilevit_model  # noqa: F401

for _parts in tasks.TASKS.values():
    importlib.import_module(_parts.head)

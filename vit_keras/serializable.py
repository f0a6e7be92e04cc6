"""Every module that registers serializable layers, imported together, so that `.keras` files
of every model option load with `safe_mode=True`.

`import vit_keras` arranges for this module to be imported as soon as Keras is (see
`vit_keras/__init__.py`), so `import vit_keras` alone is enough to load such a file.
"""

from vit_keras import detection, detection_loss, intermediates, segmentation  # noqa: F401
from vit_keras.core import (attention, deit, heads, layers, masked_patch, model,  # noqa: F401
                            normalization, patch_dropout, posemb, remat, resnet, stems)

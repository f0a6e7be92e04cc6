"""The count task's preset section, `count` (`--set count.loss=mse`), read without a
framework."""

from __future__ import annotations

import dataclasses

from training.presets.sections import Section


@dataclasses.dataclass(frozen=True)
class Count(Section):
    """How a counter is trained (`vit train --task count`).

    Attributes:
        loss: 'huber' (squared error within one dot, linear beyond) or 'mse'.
        flip: random horizontal and vertical flips (a count does not change with them).
    """

    NAME = "count"
    RULES = {"loss": ("huber", "mse")}

    loss: str = "huber"
    flip: bool = True

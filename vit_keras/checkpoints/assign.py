"""Assign: fitted tensors -> the model's variables, all or nothing: every missing, unexpected
or mis-shaped tensor is listed before anything is written."""

from __future__ import annotations

import numpy as np

MAX_LISTED = 25  # offending keys listed per kind in an error message


def _listing(title: str, lines: list[str]) -> str:
    shown = lines[:MAX_LISTED]
    more = f"\n    ... and {len(lines) - MAX_LISTED} more" if len(lines) > MAX_LISTED else ""
    return f"  {title} ({len(lines)}):\n" + "\n".join(f"    {line}" for line in shown) + more


def problems(tensors, targets) -> str | None:
    """All problems between checkpoint tensors and model variables, or None."""
    missing = [f"{name}: expected {tuple(targets[name].shape)}"
               for name in sorted(set(targets) - set(tensors))]
    extra = [f"{name}: found {tuple(np.shape(tensors[name]))}"
             for name in sorted(set(tensors) - set(targets))]
    mis_shaped = [f"{name}: expected {tuple(targets[name].shape)}, found "
                  f"{tuple(np.shape(tensors[name]))}"
                  for name in sorted(set(tensors) & set(targets))
                  if tuple(np.shape(tensors[name])) != tuple(targets[name].shape)]
    parts = [_listing(title, lines) for title, lines in (
        ("missing from the checkpoint", missing), ("unexpected in the checkpoint", extra),
        ("shape mismatch", mis_shaped)) if lines]
    return "\n".join(parts) if parts else None


def assign(tensors: dict, targets: dict, what: str) -> None:
    """Writes `tensors` into the `targets` variables of the same names.

    Args:
        tensors: canonical name -> array.
        targets: canonical name -> `keras.Variable`.
        what: the checkpoint and model, for the error message.

    Raises:
        ValueError: any missing, unexpected or mis-shaped tensor; nothing is written then.
    """
    found = problems(tensors, targets)
    if found:
        raise ValueError(f"{what}; nothing was loaded:\n{found}")
    for name, variable in targets.items():
        variable.assign(np.asarray(tensors[name], dtype=variable.dtype))

"""`--set KEY=VALUE` overrides of a preset, and the listing of every key for `vit train --help`.

Keys are `SECTION.FIELD` (`optim.lr`, `augment.translate`, `model.drop_path_rate`) or `seed`; a
flat key of the presets before they had sections (`lr`, `translate`) is refused with its
sectioned name. Values are
typed like the fields. `vit train --help` lists every field with the first line of its docs,
read from the sections' and `ViTConfig`'s dataclass fields and docstrings (no framework is
imported for it).
"""

from __future__ import annotations

import dataclasses
import inspect
import types
import typing
from typing import Any

from training.presets import Preset, unknown_key_message
from training.presets.sections import all_sections
from vit_keras.config import ViTConfig
from vit_keras.preprocessing import Preprocessing, parse_preprocessing

MODEL_PREFIX = "model."


def apply_overrides(preset: Preset, assignments: list[str]) -> Preset:
    """Applies `key=value` strings (from `--set`) to `preset`, typed like the fields, logged
    as set by '--set'.

    Raises:
        ValueError: on a malformed assignment, an unknown key or a value of the wrong type or
            range.
    """
    return preset.with_values(parse_overrides(assignments), "--set")


def parse_overrides(assignments: list[str]) -> dict:
    """`key=value` strings (from `--set`) as `{'SECTION.FIELD': typed value}`.

    Raises:
        ValueError: on a malformed assignment, an unknown key or a value of the wrong type.
    """
    values, kinds = {}, field_types()
    for assignment in assignments:
        key, sep, text = assignment.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ValueError(f"--set expects key=value, got {assignment!r}")
        if key not in kinds:
            raise ValueError(unknown_key_message(key, "--set"))
        try:
            values[key] = parse_value(text, kinds[key])
        except ValueError as error:
            raise ValueError(f"--set {key}: {error}") from None
    if MODEL_PREFIX + "num_classes" in values:
        raise ValueError("--set model.num_classes: the number of classes comes from the data")
    return values


def field_types() -> dict[str, Any]:
    """`SECTION.FIELD` -> its annotated type, for every section and model field."""
    types_ = {"seed": int}
    types_.update({MODEL_PREFIX + name: kind
                   for name, kind in typing.get_type_hints(ViTConfig).items()})
    for name, section in all_sections().items():
        types_.update({f"{name}.{field}": kind
                       for field, kind in typing.get_type_hints(section).items()
                       if field not in ("NAME", "RULES")})
    return types_


def parse_value(text: str, kind: Any) -> Any:
    """Converts the command-line string `text` to the annotated type `kind`.

    Understands bool, int, float, str, `X | None` ('none' = None), `tuple[int, ...]`
    ('3,4,9'; '' or '()' = ()), `int | tuple[int, int]` ('224' or '224x320') and a
    `Preprocessing` ('imagenet', 'clip,crop=0.9': `parse_preprocessing`).
    """
    text = text.strip()
    options = typing.get_args(kind) if isinstance(kind, types.UnionType) else (kind,)
    if type(None) in options:
        if text.lower() == "none":
            return None
        options = tuple(option for option in options if option is not type(None))
    errors = []
    for option in options:
        try:
            return _parse_one(text, option)
        except ValueError as error:
            errors.append(str(error))
    raise ValueError(" or ".join(errors))


def _parse_one(text: str, kind: Any) -> Any:
    if kind is Preprocessing:
        return parse_preprocessing(text)
    if kind is bool:
        if text.lower() in ("1", "true", "yes", "on"):
            return True
        if text.lower() in ("0", "false", "no", "off"):
            return False
        raise ValueError(f"expected a boolean (true/false), got {text!r}")
    if typing.get_origin(kind) is tuple:
        parts = [part for part in text.strip("()").replace("x", ",").split(",") if part.strip()]
        return tuple(_parse_one(part.strip(), int) for part in parts)
    if kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            noun = "an integer" if kind is int else "a number"
            raise ValueError(f"expected {noun}, got {text!r}") from None
    return text



def model_fields() -> dict[str, str]:
    """`ViTConfig`'s field names and one-line docs."""
    return section_fields(ViTConfig)


def section_fields(section) -> dict[str, str]:
    """A section's field names and one-line docs."""
    docs = docstring_fields(section.__doc__ or "")
    return {field.name: docs.get(field.name, "") for field in dataclasses.fields(section)}


def docstring_fields(doc: str) -> dict[str, str]:
    """The one-line description of each field, read from the 'Attributes:' section of a class
    docstring (entries 'name: text' or 'name1, name2: text', continued on deeper lines)."""
    doc = inspect.cleandoc(doc).split("Attributes:", 1)[-1]
    entries, current = {}, None
    for line in doc.splitlines():
        stripped = line.strip()
        head, sep, text = stripped.partition(": ")
        names = [name.strip() for name in head.split(",")]
        if sep and line.startswith(" " * 4) and not line.startswith(" " * 5) and all(
                name.isidentifier() for name in names):
            current = names
            for name in names:
                entries[name] = text
        elif current and stripped:
            for name in current:
                entries[name] += " " + stripped
    return entries

"""Package namespaces that import their public names on first use (PEP 562), so that importing
a cheap submodule (`vit_keras.config`, `vit_keras.pretrained.registry`) never pays for the
framework a sibling needs."""

from __future__ import annotations

import importlib


def lazy_names(package: str, namespace: dict, homes: dict[str, tuple[str, ...]],
               more_homes=None):
    """The `__getattr__` and `__dir__` of a package whose public names live in its modules.

    Args:
        package: the package's `__name__`.
        namespace: its `globals()`; a name is cached there after its first lookup.
        homes: module name -> the public names it defines.
        more_homes: None, or a function giving more such {module: names} when a name is
            looked up (names that may be added while the program runs).

    Returns:
        (`__getattr__`, `__dir__`, `__all__`) for the package to bind.
    """
    fixed = {name: module for module, names in homes.items() for name in names}

    def home_of() -> dict[str, str]:
        extra = more_homes() if more_homes else {}
        return {**{name: module for module, names in extra.items() for name in names}, **fixed}

    def __getattr__(name: str):
        if name in (homes_now := home_of()):
            value = getattr(importlib.import_module(homes_now[name]), name)
            namespace[name] = value  # the next lookup is a plain attribute
            return value
        try:
            return importlib.import_module(f"{package}.{name}")
        except ModuleNotFoundError as error:
            if error.name != f"{package}.{name}":
                raise
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(home_of()))

    return __getattr__, __dir__, sorted(home_of())

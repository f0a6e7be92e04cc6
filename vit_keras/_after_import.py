"""Run a function right after a module is first imported (a one-shot post-import hook).

`vit_keras` uses it once: its layers register with Keras when Keras is imported, so that
`import vit_keras` itself loads no framework and `.keras` files still load after it.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from typing import Callable


class _CallAfter(importlib.abc.MetaPathFinder):
    """Finds `module_name` through the other finders, then wraps its loader so that `then`
    runs once the module has executed; removes itself then."""

    def __init__(self, module_name: str, then: Callable[[], object]):
        self.module_name, self.then = module_name, then

    def find_spec(self, fullname, path=None, target=None):
        # Stays in place until the module executes: a bare `importlib.util.find_spec` (e.g.
        # TensorFlow asking whether Keras is installed) finds it without importing it.
        if fullname != self.module_name:
            return None
        sys.meta_path.remove(self)  # the other finders locate the module
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        execute = spec.loader.exec_module

        def execute_then(module):
            execute(module)
            if self in sys.meta_path:
                sys.meta_path.remove(self)
                self.then()

        spec.loader.exec_module = execute_then
        return spec


def call_after(module_name: str, then: Callable[[], object]) -> None:
    """Calls `then()` right after `module_name` is first imported (now, if it already is).

    Args:
        module_name: a top-level module, e.g. 'keras'.
        then: what to run once it has executed.
    """
    if module_name in sys.modules:
        then()
        return
    if not any(isinstance(finder, _CallAfter) and finder.module_name == module_name
               for finder in sys.meta_path):
        sys.meta_path.insert(0, _CallAfter(module_name, then))

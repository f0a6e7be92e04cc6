"""Run a function once a module is imported, outside any import of the package's own modules.

`vit_keras` uses it once: its layers register with Keras when Keras is imported, so that
`import vit_keras` itself loads no framework and `.keras` files still load after it.

When the import of Keras comes from one of the package's own modules (`import
vit_keras.fast_paths` as a program's first line, whose body starts with `import keras`), the
layers cannot be imported at that moment: they import that module back while it is half
executed. So the call waits until the outermost import of the package's modules has finished.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from typing import Callable


class _WrapLoaders(importlib.abc.MetaPathFinder):
    """Finds the modules `wanted(name)` selects through the other finders and wraps their
    loaders' `exec_module` with `around(execute, module)`."""

    def __init__(self, wanted: Callable[[str], bool], around):
        self.wanted, self.around = wanted, around

    def find_spec(self, fullname, path=None, target=None):
        # Stays in place while the other finders look: a bare `importlib.util.find_spec` (e.g.
        # TensorFlow asking whether Keras is installed) finds a module without importing it.
        if not self.wanted(fullname):
            return None
        index = sys.meta_path.index(self)
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            sys.meta_path.insert(index, self)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        execute = spec.loader.exec_module
        spec.loader.exec_module = lambda module: self.around(execute, module)
        return spec


class _AfterImport:
    """Calls `then` once `module_name` is imported and no module of `package` is importing."""

    def __init__(self, module_name: str, package: str, then: Callable[[], object]):
        self.module_name, self.package, self.then = module_name, package, then
        self.depth = 0  # nested imports of the package's modules under way
        self.done = False
        self.finders = [
            _WrapLoaders(lambda name: name == module_name and not self.done, self._after_target),
            _WrapLoaders(lambda name: name.startswith(package + ".") and not self.done,
                         self._counted)]
        sys.meta_path[:0] = self.finders

    def _after_target(self, execute, module):
        execute(module)
        self._call_if_settled()

    def _counted(self, execute, module):
        self.depth += 1
        try:
            execute(module)
        finally:
            self.depth -= 1
        self._call_if_settled()

    def _call_if_settled(self):
        if self.done or self.depth or self.module_name not in sys.modules:
            return
        self.done = True
        for finder in self.finders:
            if finder in sys.meta_path:
                sys.meta_path.remove(finder)
        self.then()


def call_after(module_name: str, package: str, then: Callable[[], object]) -> None:
    """Calls `then()` once `module_name` is imported (now, if it already is), at the end of
    any import of `package`'s modules under way then.

    Args:
        module_name: a top-level module, e.g. 'keras'.
        package: the calling package, e.g. 'vit_keras'; `then` may import its modules.
        then: what to run.
    """
    if module_name in sys.modules:
        then()
        return
    _AfterImport(module_name, package, then)

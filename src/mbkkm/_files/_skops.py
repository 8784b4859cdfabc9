"""``skops.io``, imported without the optional libraries it would drag in.

``import skops.io`` builds skops' list of trusted scikit-learn types at import time
with ``sklearn.utils.all_estimators()``, which walks every package of scikit-learn:
on the way it imports the array-API adapters ``sklearn.externals.array_api_compat
.torch`` and ``.dask`` (so torch and dask, about 3 s together) and
``sklearn.utils._testing`` (pytest). None of them is a scikit-learn estimator, so
the list is the same without them. :func:`import_skops_io` imports ``skops.io``
while refusing, in the importing thread only, those three libraries when they are
not imported yet: the adapters fail to import (``all_estimators`` skips packages
that raise ImportError) and ``sklearn.utils._testing`` goes on without pytest; it
is then dropped from ``sys.modules`` so that a later import of it (under pytest)
runs again in full. A model file whose content needs torch still imports it: the
refusal lasts only as long as the import of ``skops.io``.
"""

from __future__ import annotations

import sys
import threading
from types import ModuleType

#: Top-level packages kept out of the import of skops.io (when not imported already).
KEPT_OUT = ("torch", "dask", "distributed", "pytest", "_pytest")

_lock = threading.Lock()


class _KeepOut:
    """A meta-path finder refusing ``names`` (and their submodules) in one thread,
    recording which modules asked for them."""

    def __init__(self, names):
        self.names = frozenset(names)
        self.thread = threading.get_ident()
        self.askers: set[str] = set()

    def find_spec(self, fullname, path=None, target=None):
        if fullname.partition(".")[0] not in self.names or threading.get_ident() != self.thread:
            return None
        frame = sys._getframe(1)
        while frame is not None and "importlib" in frame.f_code.co_filename:
            frame = frame.f_back
        if frame is not None:
            self.askers.add(frame.f_globals.get("__name__", ""))
        raise ModuleNotFoundError(
            f"No module named {fullname!r} (kept out of the import of skops.io by mbkkm)",
            name=fullname,
        )


def import_skops_io() -> ModuleType:
    """``skops.io``, imported without torch, dask or pytest (see the module's docstring).

    Raises
    ------
    ImportError
        When skops is not installed, saying which extra installs it.
    """
    module = sys.modules.get("skops.io")
    if module is not None:
        return module
    with _lock:
        finder = _KeepOut(name for name in KEPT_OUT if name not in sys.modules)
        before = set(sys.modules)
        sys.meta_path.insert(0, finder)
        try:
            import skops.io
        except ImportError as exc:
            if exc.name is not None and exc.name.partition(".")[0] == "skops":
                raise ImportError(
                    "model files need skops: pip install 'mbkkm[cli]' (or "
                    "pip install -e '.[cli]' in a clone)"
                ) from exc
            raise
        finally:
            sys.meta_path.remove(finder)
        for name in finder.askers - before:  # imported without what it asked for
            if name.partition(".")[0] not in ("skops", "mbkkm", ""):
                sys.modules.pop(name, None)
                parent, _, child = name.rpartition(".")
                if parent in sys.modules and getattr(sys.modules[parent], child, None):
                    delattr(sys.modules[parent], child)
    return skops.io

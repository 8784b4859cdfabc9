"""Root conftest: what pytest collects outside tests/.

The docstring examples of ``src/mbkkm`` run as doctests (``--doctest-modules`` on
the ``src/mbkkm`` test path). Importing a module whose optional dependency is not
installed would be a collection error, so such modules are left out here (their
tests in ``tests/`` skip on their own). ``docs/conf.py`` and the gallery scripts
are never collected: the documentation build runs them.
"""

from __future__ import annotations

import importlib.util

collect_ignore_glob = ["docs/*.py", "docs/**/*.py", "examples/*.py", "benchmarks/*.py"]

# module (relative to the repository root) -> the optional package it imports
# (only modules that import it at the top; the others import lazily)
_OPTIONAL = {
    "src/mbkkm/backends/_torch.py": "torch",
    "src/mbkkm/cli.py": "click",
}
collect_ignore = [
    path for path, package in _OPTIONAL.items() if importlib.util.find_spec(package) is None
]

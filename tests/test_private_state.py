"""No module reads or writes an estimator's private attributes but the estimator's own.

A fit's private state (``_device``, ``_tensor_io``, ``_state``, ``_init``...) is set
and read by the estimator's class; input adapters, kernel kinds, the fit problem,
checkpoints and helpers get what they need as arguments and return data (issue 38).
The check parses ``src/mbkkm`` with :mod:`ast` and finds, outside the estimator
classes, every ``x._name`` (read, write or delete) and every
``getattr``/``setattr``/``hasattr``/``delattr(x, "_name")`` where ``x`` is a
variable that holds an estimator (``est``, ``estimator``, ``model``...).
"""

from __future__ import annotations

import ast
from pathlib import Path

import mbkkm

SRC = Path(mbkkm.__file__).parent

#: Names the package gives a variable holding an estimator.
ESTIMATOR_NAMES = {"est", "estimator", "model", "fitted", "km"}

#: scikit-learn's estimator protocol, read by helpers on any estimator.
PROTOCOL = {"_parameter_constraints"}

#: Accesses still there, each with its reason: (module, attribute) -> why. Remove an
#: entry when its access goes; the test fails on an entry that no longer matches.
KNOWN = {
    ("_dask.py", "_labels_inertia"): "a chunk's labelling task calls the model's pass",
    ("cluster/_measure.py", "_validate_X"): "measure_memory runs the estimator's own "
    "labelling pass, apart from fit, to measure it",
    ("cluster/_measure.py", "_labels_inertia"): "the same labelling pass",
}

_ATTR_FUNCS = {"getattr", "setattr", "hasattr", "delattr"}


def _private(name):
    return name.startswith("_") and not name.startswith("__") and name not in PROTOCOL


def private_accesses(source):
    """``[(line, variable, attribute)]``: the private attributes of estimator-holding
    variables that ``source`` touches."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in ESTIMATOR_NAMES
            and _private(node.attr)
        ):
            found.append((node.lineno, node.value.id, node.attr))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in _ATTR_FUNCS
            and len(node.args) >= 2
            and isinstance(node.args[0], ast.Name)
            and node.args[0].id in ESTIMATOR_NAMES
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
            and _private(node.args[1].value)
        ):
            found.append((node.lineno, node.args[0].id, node.args[1].value))
    return found


def _scan(root):
    """``{(module, attribute): [lines]}`` over the package under ``root``."""
    hits = {}
    for path in sorted(root.rglob("*.py")):
        module = path.relative_to(root).as_posix()
        for line, _, attr in private_accesses(path.read_text(encoding="utf-8")):
            hits.setdefault((module, attr), []).append(line)
    return hits


def test_no_module_touches_an_estimators_private_attributes():
    hits = _scan(SRC)
    new = {key: lines for key, lines in hits.items() if key not in KNOWN}
    assert not new, (
        "private attributes of an estimator used outside its class (module, attribute): "
        f"lines {new}; pass the values as arguments, or return them as data"
    )
    stale = sorted(set(KNOWN) - set(hits))
    assert not stale, f"these known accesses are gone: remove them from KNOWN: {stale}"


def test_the_check_finds_the_accesses_it_forbids(tmp_path):
    # What the fit path did before issue 38: adapters writing and reading the
    # estimator's device and output library, a hook reading its kernel kind.
    (tmp_path / "adapter.py").write_text(
        "def validate(est, X):\n"
        "    est._device = resolve(est.device)\n"
        "    tensor_io = getattr(est, '_tensor_io', False)\n"
        "    setattr(estimator, '_auto_start', None)\n"
        "    estimator._kernel_kind.check_checkpoint(estimator)\n"
        "    return est.n_features_in_, est.__class__, X._private\n",
        encoding="utf-8",
    )
    hits = _scan(tmp_path)
    assert hits == {
        ("adapter.py", "_device"): [2],
        ("adapter.py", "_tensor_io"): [3],
        ("adapter.py", "_auto_start"): [4],
        ("adapter.py", "_kernel_kind"): [5],
    }

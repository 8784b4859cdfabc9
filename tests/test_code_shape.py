"""The shape of the code stays within its limits (``benchmarks/code_shape.py``).

Few branches on the kind of input inside ``cluster/``. Function length and
parameter counts are not capped: a cap rewards packing code under it, and
readability is judged by reading.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_spec = importlib.util.spec_from_file_location("code_shape", ROOT / "benchmarks" / "code_shape.py")
code_shape = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(code_shape)

#: Conditions on the kind of input inside cluster/ (the adapters' own dispatch included).
MAX_KIND_BRANCHES = 10


def test_input_kind_branches_in_cluster():
    found = code_shape.kind_branches()
    assert len(found) <= MAX_KIND_BRANCHES, "\n".join(
        f"{path}:{line}: {src}" for path, line, src in found
    )


def test_the_counters_count(tmp_path):
    """The counters find what they look for, on a small module written here."""
    (tmp_path / "m.py").write_text(
        "def f(X, a, b, c, d, e, f, g, h):\n"
        '    """Doc."""\n'
        "    # a comment\n"
        "    if is_tensor(X):\n"
        "        return 1\n"
        "    if isinstance(a, str):  # a parameter's type: not an input kind\n"
        "        return 2\n"
        '    return 3 if kind == "precomputed" else 4\n'
    )
    ((_, lines, params, private),) = code_shape.functions(tmp_path)
    assert (lines, params, private) == (6, 9, False)
    assert [line for _, line, _ in code_shape.kind_branches(tmp_path)] == [4, 8]

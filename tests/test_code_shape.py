"""The shape of the code stays within its limits (``benchmarks/code_shape.py``).

No function in ``src/`` over 80 lines of code (docstring, comments and blank lines
aside); no private or core function with more than 8 parameters; few branches on
the kind of input inside ``cluster/``. The functions still over a limit are listed
with their size today: they may shrink, not grow, and no other may join them.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_spec = importlib.util.spec_from_file_location("code_shape", ROOT / "benchmarks" / "code_shape.py")
code_shape = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(code_shape)

MAX_LINES, MAX_PARAMS = 80, 8
#: Over a limit today: {function: its size}. Shrink them and lower the numbers.
LONG = {}
MANY_PARAMS: dict[str, int] = {}
#: Conditions on the kind of input inside cluster/ (the adapters' own dispatch included).
MAX_KIND_BRANCHES = 10


def test_no_function_grows_past_80_lines():
    over = {name: n for name, n, _, _ in code_shape.functions() if n > MAX_LINES}
    grown = {name: n for name, n in over.items() if n > LONG.get(name, MAX_LINES)}
    assert not grown, f"functions over {MAX_LINES} lines of code: {grown}"


def test_no_private_or_core_function_takes_more_than_8_parameters():
    over = {name: p for name, _, p, private in code_shape.functions()
            if private and p > MAX_PARAMS}
    grown = {name: p for name, p in over.items() if p > MANY_PARAMS.get(name, MAX_PARAMS)}
    assert not grown, f"private or core functions over {MAX_PARAMS} parameters: {grown}"


def test_input_kind_branches_in_cluster():
    found = code_shape.kind_branches()
    assert len(found) <= MAX_KIND_BRANCHES, "\n".join(
        f"{path}:{line}: {src}" for path, line, src in found)


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
        '    return 3 if kind == "precomputed" else 4\n')
    (_, lines, params, private), = code_shape.functions(tmp_path)
    assert (lines, params, private) == (6, 9, False)
    assert [line for _, line, _ in code_shape.kind_branches(tmp_path)] == [4, 8]

"""The shape of the code in numbers: the targets of the estimators' structure.

``python benchmarks/code_shape.py [--list]`` prints, for ``src/mbkkm``:

- **lines of code**: of each module and in all, docstrings, comments and blank
  lines aside (the code formatted with ``ruff format``);

- **input-kind branches in cluster/**: conditions (``if``, ``elif``, ``while``,
  conditional expressions, comprehension filters, ``assert``) inside
  ``src/mbkkm/cluster`` that test the kind of an input: a call to
  ``isinstance`` (not against ``str``, ``bool``, ``int``, ``float``, ``dict`` or
  ``numbers`` types: those check a parameter's type, as ``init="k-means++"``
  against an array), ``is_tensor``, ``issparse`` / ``is_sparse``, ``is_dask*``, a
  comparison with the kinds' names ("precomputed", "graph", "point", "index",
  "dask", "sparse", "tensor", "dense"), or a read of an attribute or name that
  holds a kind (``_kind``, ``is_index``, ``is_tensor``, ``_index_kernel``,
  ``GRAPH_KERNELS``). One condition
  counts once, however many such tests it holds (the backend's ``is_host`` is a
  backend, not an input kind, and is not counted);
- **the longest functions**: lines of code of each function or method, its
  docstring, comments and blank lines aside (nested functions count in their
  parent's lines, and again on their own);
- **the most parameters**: of private functions and methods (name starting with
  ``_``, dunder methods aside) and of every function in ``mbkkm._core``; ``self``
  and ``cls`` are not counted, ``*args`` / ``**kwargs`` are.

Everything is read with :mod:`ast` (nothing is imported), so the numbers are
the same on every machine.
"""

from __future__ import annotations

import ast
import io
import sys
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "mbkkm"

KIND_CALLS = {"isinstance", "is_tensor", "issparse", "is_sparse", "isspmatrix"}
KIND_NAMES = {"_kind", "is_index", "is_tensor", "_index_kernel", "GRAPH_KERNELS"}
KIND_STRINGS = {"precomputed", "graph", "point", "index", "dask", "sparse", "tensor", "dense"}


#: isinstance against these types checks a parameter's type, not an input's kind
#: (a file path; one of mbkkm's estimators, as ``_model_files.ESTIMATORS`` or the one
#: ``measure_memory`` measures; a ``random_state`` given as a generator; the containers
#: and partials a checkpoint's fingerprint reads in a parameter).
PARAMETER_TYPES = {
    "str",
    "bool",
    "int",
    "float",
    "dict",
    "Integral",
    "Real",
    "Number",
    "PathLike",
    "ESTIMATORS",
    "MiniBatchKernelKMeans",
    "RandomState",
    "list",
    "tuple",
    "set",
    "frozenset",
    "partial",
}


def _parameter_type_check(call):
    if len(call.args) != 2:
        return False
    types = call.args[1].elts if isinstance(call.args[1], ast.Tuple) else [call.args[1]]
    names = [
        t.id if isinstance(t, ast.Name) else t.attr if isinstance(t, ast.Attribute) else None
        for t in types
    ]
    return all(n in PARAMETER_TYPES for n in names)


def _is_kind_test(node):
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call):
            f = sub.func
            name = (
                f.id
                if isinstance(f, ast.Name)
                else f.attr
                if isinstance(f, ast.Attribute)
                else None
            )
            if name == "isinstance" and _parameter_type_check(sub):
                continue
            if name is not None and (name in KIND_CALLS or name.startswith("is_dask")):
                return True
        elif isinstance(sub, ast.Attribute) and sub.attr in KIND_NAMES:
            return True
        elif isinstance(sub, ast.Name) and sub.id in KIND_NAMES:
            return True
        elif isinstance(sub, ast.Compare) and any(
            isinstance(c, ast.Constant) and c.value in KIND_STRINGS
            for c in [sub.left, *sub.comparators]
        ):
            return True
    return False


def _conditions(tree):
    for node in ast.walk(tree):
        if isinstance(node, ast.If | ast.While | ast.IfExp | ast.Assert):
            yield node, node.test
        elif isinstance(node, ast.comprehension):
            for cond in node.ifs:
                yield cond, cond


def kind_branches(folder=SRC / "cluster"):
    """(path, line, source) of every input-kind condition under ``folder``."""
    found = []
    for path in sorted(folder.rglob("*.py")):
        text = path.read_text()
        for node, test in _conditions(ast.parse(text)):
            if _is_kind_test(test):
                found.append(
                    (
                        path.relative_to(folder.parent),
                        node.lineno,
                        ast.get_source_segment(text, test),
                    )
                )
    return found


def _code_lines(text):
    """Line numbers holding code: not blank, not only a comment, not in a docstring."""
    lines = set()
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type in (
            tokenize.COMMENT,
            tokenize.NL,
            tokenize.NEWLINE,
            tokenize.INDENT,
            tokenize.DEDENT,
            tokenize.ENDMARKER,
        ):
            continue
        lines.update(range(tok.start[0], tok.end[0] + 1))
    return lines


def _docstring_lines(tree):
    lines = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if (
                body
                and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)
            ):
                lines.update(range(body[0].lineno, body[0].end_lineno + 1))
    return lines


def functions(root=SRC):
    """(qualified name, lines of code, parameters, private or core) of every function."""
    out = []
    for path in sorted(root.rglob("*.py")):
        text = path.read_text()
        tree = ast.parse(text)
        code = _code_lines(text) - _docstring_lines(tree)
        module = ".".join(path.relative_to(root.parent).with_suffix("").parts)
        core = module.startswith("mbkkm._core")

        def visit(node, prefix, in_class, module=module, code=code, core=core):
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.ClassDef):
                    visit(child, f"{prefix}{child.name}.", True)
                elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                    a = child.args
                    params = [*a.posonlyargs, *a.args, *a.kwonlyargs]
                    if in_class and params and params[0].arg in ("self", "cls"):
                        params = params[1:]
                    n_params = len(params) + (a.vararg is not None) + (a.kwarg is not None)
                    start = min([d.lineno for d in child.decorator_list] + [child.lineno])
                    n_lines = len([ln for ln in code if start <= ln <= child.end_lineno])
                    name = child.name
                    private = name.startswith("_") and not (
                        name.startswith("__") and name.endswith("__")
                    )
                    out.append((f"{module}:{prefix}{name}", n_lines, n_params, private or core))
                    visit(child, f"{prefix}{name}.", False)
                else:
                    visit(child, prefix, in_class)

        visit(tree, "", False)
    return out


def lines_of_code(root=SRC):
    """{path: lines of code} of every module: docstrings, comments and blank lines aside."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        text = path.read_text()
        out[path.relative_to(root)] = len(_code_lines(text) - _docstring_lines(ast.parse(text)))
    return out


def main(argv):
    show = "--list" in argv
    loc = lines_of_code()
    print(f"lines of code in src/mbkkm: {sum(loc.values())} in {len(loc)} modules; largest:")
    for path, n in sorted(loc.items(), key=lambda kv: -kv[1])[: 8 if not show else 30]:
        print(f"  {n:5d}  {path}")
    branches = kind_branches()
    print(f"input-kind branches in src/mbkkm/cluster: {len(branches)}")
    if show:
        for path, line, src in branches:
            print(f"  {path}:{line}: {src}")
    funcs = functions()
    longest = sorted(funcs, key=lambda f: -f[1])
    print(f"functions over 80 lines of code: {sum(f[1] > 80 for f in funcs)}; longest:")
    for name, n, _, _ in longest[: 8 if not show else 20]:
        print(f"  {n:4d}  {name}")
    many = sorted((f for f in funcs if f[3]), key=lambda f: -f[2])
    print(f"private/core functions over 8 parameters: {sum(f[2] > 8 for f in many)}; most:")
    for name, _, p, _ in many[: 8 if not show else 20]:
        print(f"  {p:4d}  {name}")


if __name__ == "__main__":
    main(sys.argv[1:])

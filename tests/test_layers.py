"""The import contracts of pyproject.toml's ``[tool.importlinter]`` hold.

Lowest first: backends (and _validation) < kernels < _core and _dask < cluster and
datasets < experiments < cli and demo; no module imports one of a higher layer, and
no two modules of one package import each other (directly or through others), not
even inside a function, so no import cycle can come back.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("importlinter")

ROOT = Path(__file__).resolve().parents[1]
_RUN = (
    "import sys; from importlinter.cli import lint_imports_command; "
    "sys.exit(lint_imports_command())"
)


def _lint_imports(cwd, src):
    env = dict(os.environ, PYTHONPATH=str(src))
    return subprocess.run(
        [sys.executable, "-c", _RUN, "--no-cache", "--no-logo", "pyproject.toml"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_import_contracts_are_kept():
    result = _lint_imports(ROOT, ROOT / "src")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_no_import_cycle_between_modules():
    """The same graph (function-level imports included), searched for any cycle."""
    from _import_cycles import import_cycles

    assert import_cycles("mbkkm", ROOT / "src") == []


def test_the_cycle_finder_finds_a_hidden_cycle(tmp_path):
    shutil.copytree(
        ROOT / "src" / "mbkkm", tmp_path / "mbkkm", ignore=shutil.ignore_patterns("__pycache__")
    )
    with open(tmp_path / "mbkkm" / "_core" / "_state.py", "a") as f:
        f.write("\n\ndef _lazy():\n    from ._pool import step_windows\n")
    result = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "_import_cycles.py"), "mbkkm", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert "mbkkm._core._pool <-> mbkkm._core._state" in result.stdout


@pytest.mark.parametrize(
    ("module", "upward"),
    [
        ("backends/_numpy.py", "from ..kernels import KERNELS"),  # backends -> kernels
        ("_dask.py", "from .cluster import _params"),  # the Dask source -> the estimators
        # a cycle inside one package: the Lloyd core <-> the estimator that calls it
        ("_core/_lloyd.py", "from ..cluster._kernel_kmeans import KernelKMeans"),
        # a cycle between two estimator modules, below the layers' resolution
        ("cluster/_base.py", "from ._kernel_kmeans import KernelKMeans"),
        # a cycle between two core modules: the shared state <-> the device step
        ("_core/_state.py", "from ._pool import step_windows"),
    ],
)
def test_an_upward_import_breaks_the_contract(tmp_path, module, upward):
    """The check can fail: the same contracts on a copy with one upward import,
    hidden in a function body as the cycles of the past were."""
    shutil.copytree(
        ROOT / "src" / "mbkkm",
        tmp_path / "src" / "mbkkm",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    with open(tmp_path / "src" / "mbkkm" / module, "a") as f:
        f.write(f"\n\ndef _upward():\n    {upward}\n")
    result = _lint_imports(tmp_path, tmp_path / "src")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "BROKEN" in result.stdout

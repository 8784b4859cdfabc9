"""Features that need an optional package name the extra that installs it, and say
so before any work, where the package is missing."""

from __future__ import annotations

import importlib.abc
import sys

import numpy as np
import pytest
from sklearn.datasets import make_blobs

from mbkkm import MiniBatchKernelKMeans


class _Hide(importlib.abc.MetaPathFinder):
    """``import name`` (and its submodules) fails as where it is not installed."""

    def __init__(self, name):
        self.name = name

    def find_spec(self, fullname, path, target=None):
        if fullname.split(".")[0] == self.name:
            raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)


@pytest.fixture
def hide(monkeypatch):
    def hide(name):
        for mod in [m for m in sys.modules if m.split(".")[0] == name]:
            monkeypatch.delitem(sys.modules, mod)  # put back at the end
        monkeypatch.setattr(sys, "meta_path", [_Hide(name), *sys.meta_path])

    return hide


def test_width_selection_plot_without_matplotlib(hide):
    X, _ = make_blobs(300, centers=3, random_state=0)
    km = MiniBatchKernelKMeans(3, max_iter=5, random_state=0).fit(X)
    hide("matplotlib")
    with pytest.raises(ModuleNotFoundError, match=r"plot needs matplotlib.*mbkkm\[plot\]"):
        km.gamma_selection_.plot()


def test_result_tables_without_pandas(hide, tmp_path):
    from mbkkm.experiments import plot_results, read_results, summarize

    (tmp_path / "r.csv").write_text("dataset,status\nx,ok\n")
    hide("pandas")
    for func in (read_results, summarize):
        with pytest.raises(ModuleNotFoundError, match=r"needs pandas.*mbkkm\[cli\]"):
            func(tmp_path / "r.csv")
    with pytest.raises(ModuleNotFoundError, match=r"plot_results needs pandas"):
        plot_results(tmp_path / "r.csv", tmp_path / "figs")


def test_plot_results_without_matplotlib(hide, tmp_path):
    from mbkkm.experiments import plot_results

    hide("matplotlib")
    with pytest.raises(ModuleNotFoundError, match=r"plot_results needs matplotlib.*\[plot\]"):
        plot_results(tmp_path / "missing.csv", tmp_path / "figs")


def test_demo_without_matplotlib_says_so_before_the_work(hide, monkeypatch, tmp_path):
    from mbkkm import demo

    def no_work(**kwargs):
        raise AssertionError("the demo ran before saying matplotlib is missing")

    monkeypatch.setattr(demo, "run_demo", no_work)
    hide("matplotlib")
    with pytest.raises(
        ModuleNotFoundError, match=r"demo's picture \(skip it with --no-plot\) needs matplotlib"
    ):
        demo.main(["--out", str(tmp_path / "d"), "--quick"])


def test_require_keeps_the_error_of_an_installed_module(tmp_path, monkeypatch):
    """A module that is there but fails to import one of its own dependencies keeps
    its own error: it is not reported as missing."""
    from mbkkm._validation import require

    assert require("numpy", "cli", "x") is np
    (tmp_path / "mbkkm_fake_pkg.py").write_text("import mbkkm_fake_dependency\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ModuleNotFoundError, match=r"^No module named 'mbkkm_fake_dependency'$"):
        require("mbkkm_fake_pkg", "cli", "x")
    with pytest.raises(ModuleNotFoundError, match="x needs mbkkm_absent_pkg"):
        require("mbkkm_absent_pkg.sub", "cli", "x")

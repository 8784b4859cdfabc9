"""benchmarks/bench_gpu.py runs end to end in its CPU smoke mode (--device cpu --quick).

The GPU numbers are measured by whoever has a GPU; this checks that every section
(a)-(f) runs on torch CPU tensors, prints its ratio and writes the markdown report,
so the script is ready when a GPU is.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

pytest.importorskip("torch")

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_gpu.py"


def _load():
    spec = importlib.util.spec_from_file_location("bench_gpu", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_smoke_mode_runs_every_section(tmp_path, capsys):
    bench = _load()
    out = tmp_path / "gpu.md"
    # A missing data file: synthetic data of MNIST's shape (what a fresh clone has).
    rc = bench.main(["--device", "cpu", "--quick", "--data", str(tmp_path / "none.npz"),
                     "--out", str(out)])
    text = out.read_text()
    assert rc == 0, text
    assert "synthetic" in text
    for header in ("## (a)", "## (b)", "## (c)", "## (d)", "## (e)", "## (f)", "## Summary"):
        assert header in text
    for key in "abcd":
        assert f"**Target ({key})**" in text
    assert "Ratio k = 100 / k = 10" in text
    assert "Ratio full batch / mini-batch" in text
    assert "aten operators" in text
    assert "failed" not in text
    assert "not judged" in text
    assert "## Summary" in capsys.readouterr().out  # printed as well as written


def test_no_cuda_is_refused_with_a_hint(tmp_path, monkeypatch, capsys):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    bench = _load()
    assert bench.main(["--device", "cuda", "--out", str(tmp_path / "x.md")]) == 2
    assert "--device cpu --quick" in capsys.readouterr().out

"""benchmarks/bench_gpu.py runs end to end in its CPU smoke mode (--device cpu --quick),
and its compile check holds on the CPU (--device cpu --compile-check).

The GPU numbers are measured by whoever has a GPU; this checks that every section
(a)-(g) runs on torch CPU tensors, prints its ratio and writes the markdown report,
so the script is ready when a GPU is.
"""

from __future__ import annotations

import importlib.util
import re
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
    rc = bench.main(
        ["--device", "cpu", "--quick", "--data", str(tmp_path / "none.npz"), "--out", str(out)]
    )
    text = out.read_text()
    assert rc == 0, text
    assert "synthetic" in text
    for header in (
        "## (a)",
        "## (b)",
        "## (c)",
        "## (d)",
        "## (e)",
        "## (f)",
        "## (g)",
        "## Summary",
    ):
        assert header in text
    for key in "abcde":
        assert f"**Target ({key})**" in text
    assert "Ratio k = 100 / k = 10" in text
    assert "full batch / mini-batch" in text and "mean ARI" in text
    assert "aten operators" in text
    assert re.search(r"Dispatcher counts per iteration .*_local_scalar_dense 0, lift_fresh 0", text)
    assert "padded" in text and "pool layout" in text
    assert "failed" not in text
    assert "not judged" in text
    assert "## Summary" in capsys.readouterr().out  # printed as well as written


def test_no_cuda_is_refused_with_a_hint(tmp_path, monkeypatch, capsys):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    bench = _load()
    assert bench.main(["--device", "cuda", "--out", str(tmp_path / "x.md")]) == 2
    assert "--device cpu --quick" in capsys.readouterr().out


@pytest.mark.slow
def test_compile_check_prints_one_line_and_holds(capsys):
    """One iteration of a fit's loop compiles into one graph (fullgraph=True,
    dynamic=False): no graph break, no recompile over 50 iterations, the labels of
    every iteration equal to the eager loop's."""
    bench = _load()
    rc = bench.main(["--device", "cpu", "--compile-check"])
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 1, out
    m = re.fullmatch(
        r"compile-check: graph_breaks=(\d+) recompiles=(\d+) iterations=50 "
        r"equal_to_eager=(True|False)",
        out[0],
    )
    assert m, out[0]
    assert m.groups() == ("0", "0", "True")
    assert rc == 0


def test_host_overhead_counts_no_upload_in_the_loop():
    """benchmarks/bench_host_overhead.py: a torch fit's loop uploads no host array and
    reads the device back once per block of iterations (16 in steady state)."""
    spec = importlib.util.spec_from_file_location(
        "bench_host_overhead", SCRIPT.parent / "bench_host_overhead.py"
    )
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    import numpy as np
    import torch

    X = torch.from_numpy(np.random.RandomState(0).rand(500, 2).astype(np.float32))
    params = dict(n_clusters=5, gamma=1.0, batch_size=32, tau=8)
    for tol in (None, 1e-12):
        per, uploads, reads = bench.counts_per_iteration(X, 63, 15, dict(tol=tol, **params))
        # 15 -> 63 iterations: read-backs after 31 and 47, then at the end (63).
        assert uploads == 0, per
        assert per["aten.lift_fresh.default"] == 0, per
        assert 0 < reads <= 3 / 48, per


def test_dispatch_counts_print_totals_and_operators(tmp_path, capsys):
    """--dispatch-counts (the issue's CPU operator count): one line of totals, then one
    line per operator, no read-back and no upload inside the loop."""
    bench = _load()
    assert (
        bench.main(
            [
                "--device",
                "cpu",
                "--dispatch-counts",
                "--quick",
                "--data",
                str(tmp_path / "absent.npz"),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out.splitlines()
    m = re.match(
        r"dispatch-counts: kernel_launching=([\d.]+) all=([\d.]+) "
        r"local_scalar_dense=0 lift_fresh=0 per iteration",
        out[0],
    )
    assert m, out[0]
    assert 0 < float(m.group(1)) < float(m.group(2))
    assert any("aten.segment_reduce" in line for line in out[1:])
    assert not any("index_add" in line for line in out[1:])

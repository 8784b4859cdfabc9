"""The GPU benchmarks run end to end on torch CPU tensors, so that they are ready when
a GPU is lent (whoever has one measures the GPU numbers).

- benchmarks/bench_gpu.py in its CPU smoke mode (--device cpu --quick): every
  section (a)-(g) runs, prints its ratio and writes the markdown report; its compile
  check holds on the CPU (--device cpu --compile-check);
- benchmarks/bench_scale.py's device path (--device torch-cpu runs what --device
  cuda runs: 10^9 rows generated in host memory, nothing on disk); the CSV it
  appends to keeps older rows when its columns grow;
- benchmarks/bench_host_overhead.py's counts of uploads and read-backs.
"""

from __future__ import annotations

import csv
import importlib.util
import re
from pathlib import Path

import pytest

pytest.importorskip("torch")

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_gpu.py"


def _load(name="bench_gpu"):
    """The benchmark script ``benchmarks/<name>.py`` as a module."""
    spec = importlib.util.spec_from_file_location(name, SCRIPT.parent / f"{name}.py")
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
def test_compile_check_prints_one_line_and_holds(capsys, tmp_path, monkeypatch):
    """One iteration of a fit's loop compiles into one graph (fullgraph=True,
    dynamic=False): no graph break, no recompile over 50 iterations, the labels of
    every iteration equal to the eager loop's.

    Compiled in a cache of its own: torch's shared cache (/tmp/torchinductor_<user>)
    handed a kernel compiled for AVX-512 to a run under ATEN_CPU_CAPABILITY=avx2, which
    crashed the process (the same at the previous release)."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
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
    bench = _load("bench_host_overhead")
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


@pytest.mark.slow
def test_bench_scale_device_path_runs_on_torch_cpu(tmp_path):
    bench = _load("bench_scale")
    out = tmp_path / "scale.csv"
    # a file with the columns of an older version: rewritten with today's header
    old = [c for c in bench.COLUMNS if c not in ("gen_s", "device_peak_mb")]
    with open(out, "w", newline="") as fh:
        writer = csv.DictWriter(fh, old)
        writer.writeheader()
        writer.writerow({c: "1" for c in old})
    bench.main(
        ["--device", "torch-cpu", "--n", "3000", "--out", str(out), "--log-dir", str(tmp_path)]
    )
    rows = bench.read_rows(out)
    assert list(rows[0]) == bench.COLUMNS and rows[0]["n"] == "1" and rows[0]["gen_s"] == ""
    row = rows[1]
    assert row["device"] == "torch-cpu" and row["n"] == "3000"
    assert float(row["ari"]) > 0.9  # 20 well separated blobs
    assert int(row["m"]) > 0 and float(row["label_vs_limit"]) > 0 and float(row["gen_s"]) >= 0
    assert row["full_batch_s"] == ""
    log = (tmp_path / "log_3000.txt").read_text()
    assert "time: fit" in log and "limit:" in log

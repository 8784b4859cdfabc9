"""benchmarks/bench_scale.py's device path runs end to end on torch CPU tensors.

``--device cuda`` is what a lent GPU machine runs (10^9 rows generated in host
memory, nothing on disk); ``--device torch-cpu`` runs the same child script on the
CPU, so the script is known to work before a GPU is lent. The CSV it appends to
keeps older rows when its columns grow.
"""

from __future__ import annotations

import csv
import importlib.util
from pathlib import Path

import pytest

pytest.importorskip("torch")

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_scale.py"


def _load():
    spec = importlib.util.spec_from_file_location("bench_scale", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_device_path_runs_on_torch_cpu(tmp_path):
    bench = _load()
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
    assert int(row["m"]) > 0 and float(row["limit_label_s"]) > 0 and float(row["gen_s"]) >= 0
    assert row["full_batch_s"] == ""
    log = (tmp_path / "log_3000.txt").read_text()
    assert "time: fit" in log and "limit:" in log

"""The demo (``make demo``) runs, writes its picture and shows the kernel's advantage."""

import os

import pytest

from mbkkm import demo


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo_output")
    rows = demo.main(["--out", str(out), "--quick"])
    return out, rows


def test_demo_writes_png_and_csv(quick_run):
    out, _ = quick_run
    png = out / "circles.png"
    assert png.is_file()
    assert os.path.getsize(png) > 1000
    with open(png, "rb") as fh:
        assert fh.read(8) == b"\x89PNG\r\n\x1a\n"
    csv_text = (out / "results.csv").read_text()
    assert csv_text.splitlines()[0] == "dataset,method,ari,nmi,seconds"
    assert len(csv_text.splitlines()) == 1 + 3 * 3


def test_demo_kernel_beats_kmeans_on_circles(quick_run):
    _, rows = quick_run
    ari = {r["method"]: r["ari"] for r in rows if r["dataset"] == "circles"}
    assert ari["MiniBatchKernelKMeans"] > 0.9
    assert ari["MiniBatchKernelKMeans"] > ari["KMeans"] + 0.5
    assert ari["MiniBatchKernelKMeans"] > ari["MiniBatchKMeans"] + 0.5


def test_demo_prints_table_and_gammas(tmp_path, capsys):
    demo.main(["--out", str(tmp_path), "--quick", "--no-plot", "--seed", "1"])
    text = capsys.readouterr().out
    assert "gamma=" in text
    for word in (
        "circles",
        "moons",
        "digits",
        "KMeans",
        "MiniBatchKMeans",
        "MiniBatchKernelKMeans",
        "ARI",
        "NMI",
        "seconds",
    ):
        assert word in text
    assert not (tmp_path / "circles.png").exists()


def test_format_table_aligned():
    rows = [
        {"dataset": "a", "method": "m", "ari": 1.0, "nmi": 0.5, "seconds": 0.1},
        {"dataset": "bb", "method": "mmm", "ari": -0.01, "nmi": 0.25, "seconds": 10.0},
    ]
    lines = [ln for ln in demo.format_table(rows).splitlines() if ln]
    assert len({len(ln) for ln in lines}) == 1


def test_demo_uses_the_default_width(quick_run):
    # One story about the width: the demo does not fix gamma, it reports the one
    # chosen from the data, and that width separates both 2-d sets.
    _, rows = quick_run
    for ds in demo.make_sets(quick=True):
        kernel = dict(demo._methods(ds, True, 0))["MiniBatchKernelKMeans"]
        assert kernel.get_params()["gamma"] is None
    kernel_rows = [r for r in rows if r["method"] == "MiniBatchKernelKMeans"]
    assert all(r["gamma"] > 0 for r in kernel_rows)
    assert all(r["ari"] > 0.95 for r in kernel_rows if r["dataset"] in ("circles", "moons"))

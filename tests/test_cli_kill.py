"""SIGKILL during ``mbkkm fit --labels-out --model-out``: the targets are always
the old file or the new one, whole and loadable (docs/reliability.md).

Each round puts the previous outputs (of another seed) in place, starts a fit in
a child process that writes new ones, and kills it with SIGKILL: at random
moments, or just after one of the outputs' temporary files appears (so the kill
lands while that output is being written).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import sys
import time

import numpy as np
import pytest
from click.testing import CliRunner

from mbkkm.cli import load_model, main

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals and fork")


def _fit(data, labels, model, seed):
    return [
        "fit",
        str(data),
        "-k",
        "8",
        "--gamma",
        "0.5",
        "--batch-size",
        "512",
        "--tau",
        "400",
        "--max-iter",
        "5",
        "--seed",
        str(seed),
        "--labels-out",
        str(labels),
        "--model-out",
        str(model),
        "-q",
    ]


@pytest.mark.slow
def test_outputs_survive_sigkill(tmp_path):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(100_000, 16)) + rng.integers(0, 8, (100_000, 1)) * 2.0
    data = tmp_path / "data.npy"
    np.save(data, X.astype(np.float32))
    out = tmp_path / "out"
    out.mkdir()
    labels, model = out / "labels.txt", out / "model.skops"
    # the old outputs (seed 1) and the new ones an uninterrupted run writes (seed 2)
    runner = CliRunner()
    ref = {}
    for seed in (1, 2):
        r = runner.invoke(main, _fit(data, labels, model, seed))
        assert r.exit_code == 0, r.output
        ref[seed] = (labels.read_bytes(), model.read_bytes(), load_model(model).predict(X[:500]))
    assert ref[1][0] != ref[2][0]

    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["mbkkm.cli", "mbkkm.cluster", "skops.io", "sklearn.decomposition"])
    import _cli_child

    outcomes = {"old": 0, "new": 0}
    during_write = 0
    for round_ in range(12):
        labels.write_bytes(ref[1][0])
        model.write_bytes(ref[1][1])
        for f in out.iterdir():
            if f.name.startswith("."):
                f.unlink()  # a previous round's temporary file
        started = ctx.Event()
        child = ctx.Process(target=_cli_child.run_cli, args=(_fit(data, labels, model, 2), started))
        child.start()
        assert started.wait(60)
        target = ("labels.txt", "model.skops", None)[round_ % 3]
        deadline = time.monotonic() + 60
        if target is None:  # a random moment of the whole command
            child.join(rng.uniform(0.0, 1.5))
        else:  # soon after the target's temporary file appears
            while time.monotonic() < deadline and child.exitcode is None:
                if any(f.startswith(f".{target}.") for f in os.listdir(out)):
                    time.sleep(rng.uniform(0.0, 0.01))
                    break
                time.sleep(0.0005)
        if child.exitcode is None:
            during_write += any(f.startswith(".") for f in os.listdir(out))
            with contextlib.suppress(ProcessLookupError):  # it may end in between
                os.kill(child.pid, 9)  # SIGKILL
        child.join()
        for path, old, new in ((labels, ref[1][0], ref[2][0]), (model, None, None)):
            content = path.read_bytes()
            if path == labels:
                assert content in (old, new), f"round {round_}: labels neither old nor new"
                outcomes["old" if content == old else "new"] += 1
            else:  # zip timestamps differ between runs: compare what the model predicts
                got = load_model(path).predict(X[:500])
                assert np.array_equal(got, ref[1][2]) or np.array_equal(got, ref[2][2])
    assert during_write >= 4, f"only {during_write} kills landed while an output was written"
    assert outcomes["old"] >= 1, outcomes


def _fit_checkpointed(data, labels, model, checkpoint):
    return [
        "fit",
        str(data),
        "-k",
        "8",
        "--gamma",
        "0.05",
        "--batch-size",
        "256",
        "--tau",
        "100",
        "--max-iter",
        "200",
        "--seed",
        "3",
        "--labels-out",
        str(labels),
        "--model-out",
        str(model),
        "--checkpoint",
        str(checkpoint),
        "--checkpoint-every",
        "5",
        "-q",
    ]


def _inode(path):
    try:
        return os.stat(path).st_ino
    except FileNotFoundError:
        return None


@pytest.mark.slow
def test_checkpointed_fit_survives_sigkill(tmp_path):
    """``mbkkm fit --checkpoint`` killed with SIGKILL at random iterations 5 times and
    run again each time ends with the labels and the model of an uninterrupted run."""
    from mbkkm.cluster._checkpoint import read_checkpoint

    rng = np.random.default_rng(1)
    X = rng.normal(size=(20_000, 16)) + rng.integers(0, 8, (20_000, 1)) * 2.0
    data = tmp_path / "data.npy"
    np.save(data, X.astype(np.float32))
    labels, model, ck = tmp_path / "labels.txt", tmp_path / "model.skops", tmp_path / "fit.ckpt"
    runner = CliRunner()
    args = _fit_checkpointed(data, labels, model, ck)
    r = runner.invoke(main, [a for a in args[:-5]] + ["-q"])  # no checkpoint
    assert r.exit_code == 0, r.output
    ref_labels, ref_model = labels.read_bytes(), load_model(model)
    labels.unlink()
    model.unlink()

    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["mbkkm.cli", "mbkkm.cluster", "skops.io"])
    import _cli_child

    resumed_at = []
    for _ in range(5):
        started = ctx.Event()
        child = ctx.Process(target=_cli_child.run_cli, args=(args, started))
        child.start()
        assert started.wait(60)
        # after a random number of saves, a random moment before the next ones
        saves, last = int(rng.integers(1, 6)), _inode(ck)
        deadline = time.monotonic() + 120
        while saves and child.exitcode is None and time.monotonic() < deadline:
            if _inode(ck) != last:
                last = _inode(ck)
                saves -= 1
            time.sleep(0.0005)
        time.sleep(rng.uniform(0.0, 0.05))
        assert child.exitcode is None, "the fit ended before it could be killed"
        os.kill(child.pid, 9)  # SIGKILL
        child.join()
        assert not labels.exists() and not model.exists()
        resumed_at.append(int(read_checkpoint(ck)["fit"]["n_iter"]))
    assert resumed_at == sorted(resumed_at) and resumed_at[-1] < 200, resumed_at
    assert len(set(resumed_at)) >= 4, resumed_at
    r = runner.invoke(main, args)
    assert r.exit_code == 0, r.output
    assert labels.read_bytes() == ref_labels
    got = load_model(model)
    for name in (
        "support_vectors_",
        "dual_coef_",
        "support_labels_",
        "center_norms_",
        "batch_objective_",
    ):
        assert np.array_equal(getattr(got, name), getattr(ref_model, name)), name
    assert got.n_iter_ == ref_model.n_iter_ == 200
    assert not ck.exists()  # removed once the outputs are written

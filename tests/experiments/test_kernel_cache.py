"""The runner's kernel cache: built once under a lock, memory-mapped, equal to a fresh build."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from mbkkm.experiments import Grid, expand, read_results, run_grid
from mbkkm.experiments._kernel_cache import cache_key, cached_matrix
from mbkkm.kernels import LowRankKernel, kernel_block, kernel_diagonal


def _kernels():
    rng = np.random.default_rng(0)
    A = rng.normal(size=(30, 30))
    dense = A @ A.T
    S = sp.random(30, 30, density=0.2, random_state=0, format="csr")
    U, _ = np.linalg.qr(rng.normal(size=(30, 4)))
    low = LowRankKernel(U, np.array([4.0, 3.0, 2.0, 1.0]), 0.5, description="test")
    return {"dense": dense, "csr": S + S.T, "lowrank": low}


@pytest.mark.parametrize("kind", ["dense", "csr", "lowrank"])
def test_round_trip(tmp_path, kind):
    K = _kernels()[kind]
    calls = []

    def build():
        calls.append(1)
        return K, 1.5, 1.25

    got, s, c = cached_matrix(tmp_path, "key", build)
    again, s2, c2 = cached_matrix(tmp_path, "key", build)
    assert len(calls) == 1 and (s, c) == (s2, c2) == (1.5, 1.25)
    idx = np.arange(30)
    for M in (got, again):
        np.testing.assert_array_equal(kernel_block(M, idx, idx), kernel_block(K, idx, idx))
        np.testing.assert_array_equal(kernel_diagonal(M), kernel_diagonal(K))
    if kind == "lowrank":
        assert again.error == 0.5 and again.description == "test"
        assert isinstance(again.U, np.memmap) or isinstance(again.U.base, np.memmap)
    if kind == "csr":
        assert sp.issparse(again) and again.indices.dtype == K.indices.dtype


def test_incomplete_entry_is_built_again(tmp_path):
    K = _kernels()["dense"]
    cached_matrix(tmp_path, "key", lambda: (K, 1.0, 1.0))
    (tmp_path / "key" / "meta.json").unlink()  # a build killed before it finished
    got, s, _ = cached_matrix(tmp_path, "key", lambda: (2 * K, 2.0, 2.0))
    assert s == 2.0 and np.array_equal(got, 2 * K)
    with pytest.raises(TypeError, match="cannot cache"):
        cached_matrix(tmp_path, "other", lambda: ([[1.0]], 1.0, 1.0))


def test_key_covers_what_the_matrix_depends_on():
    base = dict(
        dataset="pendigits",
        synthetic_samples=None,
        n_samples=10,
        kernel="knn",
        params={"n_neighbors": 5},
        source="abc",
    )
    keys = {cache_key(**base)}
    for change in (
        dict(dataset="letter"),
        dict(n_samples=11),
        dict(kernel="heat"),
        dict(params={"n_neighbors": 6}),
        dict(source="abd"),
        dict(synthetic_samples=100),
        dict(data="0123"),
    ):
        keys.add(cache_key(**{**base, **change}))
    assert len(keys) == 8


@pytest.mark.parametrize("kernel", ["rbf", "knn"])
def test_other_data_or_edited_code_under_one_name_builds_a_new_matrix(tmp_path, kernel):
    """Before, the key held the dataset's name and the commit only: the matrix of a
    dataset file since replaced (or found in another data folder), or of code edited
    since (one ``+dirty`` commit for every edit), was reused silently. Now the key
    holds a fingerprint of the points and of the package's files."""
    from mbkkm.experiments._runner import build_kernel

    # a fixed rbf width or k: the two datasets share the kernel's parameters
    fixed = dict(gamma=0.5) if kernel == "rbf" else dict(n_neighbors=5)
    g = Grid(name="c", datasets="pendigits", algorithms="full-batch", kernels=kernel, **fixed)
    run = expand(g)[0]
    rng = np.random.default_rng(0)
    X1 = rng.normal(size=(40, 3))
    X2 = X1.copy()
    X2[:5] *= 3.0  # the same shape and name, other points
    idx = np.arange(40)
    seconds = []
    for X in (X1, X2, X1):
        k = build_kernel(X, run, matrix=True, cache_dir=tmp_path, source="abc+dirty")
        fresh = build_kernel(X, run, matrix=True)
        np.testing.assert_array_equal(
            kernel_block(k.matrix, idx, idx), kernel_block(fresh.matrix, idx, idx)
        )
        seconds.append(k.seconds)
    assert seconds[2] == seconds[0]  # the same points again: the first entry, reused
    assert len([p for p in tmp_path.iterdir() if p.is_dir()]) == 2

    from mbkkm.experiments._kernel_cache import _tree_digest, data_fingerprint

    assert data_fingerprint(X1) != data_fingerprint(X2)
    assert data_fingerprint(sp.csr_matrix(X1)) != data_fingerprint(sp.csr_matrix(X2))
    assert data_fingerprint(X1.astype(np.float32)) != data_fingerprint(X1)
    assert data_fingerprint(np.asfortranarray(X1)) == data_fingerprint(X1)
    # an edit of a source file (the commit unchanged) is another source
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.py").write_text("x = 1\n")
    before = _tree_digest(tmp_path / "src")
    (tmp_path / "src" / "a.py").write_text("x = 2\n")
    assert _tree_digest(tmp_path / "src") != before


def test_grid_with_cache_equals_grid_without(tmp_path):
    g = Grid(
        name="c",
        datasets=("blobs",),
        algorithms=("full-batch", "truncated"),
        kernels=("knn",),
        batch_sizes=(32,),
        taus=(10,),
        seeds=(0, 1),
        max_iter=5,
        n_neighbors=15,
        synthetic_samples=150,
    )
    run_grid(g, tmp_path / "plain.csv", progress=False)
    cache = tmp_path / "cache"
    s = run_grid(g, tmp_path / "cached.csv", progress=False, kernel_cache=cache, jobs=2)
    assert s.ok == len(expand(g))
    entries = [p for p in cache.iterdir() if p.is_dir()]
    assert len(entries) == 1 and (entries[0] / "meta.json").exists()
    a = read_results(tmp_path / "plain.csv").set_index("run_id").sort_index()
    b = read_results(tmp_path / "cached.csv").set_index("run_id").sort_index()
    cols = ["ari", "nmi", "objective", "n_iter", "kernel_params"]
    assert a[cols].equals(b[cols])
    # Every row reports the one build's time; a second table reuses the entry.
    assert b["kernel_seconds"].nunique() == 1 and (b["kernel_seconds"] > 0).all()
    run_grid(g, tmp_path / "again.csv", progress=False, kernel_cache=cache)
    c = read_results(tmp_path / "again.csv").set_index("run_id").sort_index()
    assert (c["kernel_seconds"] == b["kernel_seconds"]).all()
    assert len([p for p in cache.iterdir() if p.is_dir()]) == 1

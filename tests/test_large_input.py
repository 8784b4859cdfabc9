"""A fit of many rows spends its time in the iterations, not before them (issue 39).

The subsamples drawn without replacement take the first rows of a permutation of
all n rows: O(n) draws. A fit with an integer seed draws that permutation for the
width selection and again for the initialisation, from the same state; the second
is served from the first (mbkkm._core._init.choice_without_replacement) with
the same rows and the same random state after it, so the model is unchanged.
"""

from __future__ import annotations

import numpy as np
import pytest

from mbkkm import MiniBatchKernelKMeans
from mbkkm._core import _init
from mbkkm._core._init import choice_without_replacement, draw_init_subsample
from mbkkm._core._width import draw_sample


@pytest.fixture
def memo_from(monkeypatch):
    """Remember permutations from ``rows`` rows on (the default is 2**20), memo cleared."""

    def set_min(rows):
        monkeypatch.setattr(_init, "MEMO_MIN_ROWS", rows)
        monkeypatch.setattr(_init, "_memo", None)

    return set_min


@pytest.fixture
def permutations(monkeypatch):
    """The n of every permutation drawn by choice_without_replacement."""
    drawn = []
    real = _init._permutation

    def spy(random_state, n):
        drawn.append(n)
        return real(random_state, n)

    monkeypatch.setattr(_init, "_permutation", spy)
    return drawn


def _same_state(a, b):
    return np.array_equal(a.randint(2**30, size=20), b.randint(2**30, size=20))


@pytest.mark.parametrize("sizes", [(5, 300, 7), (300, 5), (600, 300)])
def test_choice_without_replacement_is_choice(memo_from, permutations, sizes):
    memo_from(1000)
    n = 3000
    for size in sizes:
        ref, rng = np.random.RandomState(3), np.random.RandomState(3)
        ref.standard_normal(), rng.standard_normal()  # a cached gaussian in the state
        expected = ref.choice(n, size=size, replace=False)
        got = choice_without_replacement(rng, n, size)
        assert got.dtype == expected.dtype
        np.testing.assert_array_equal(got, expected)
        assert ref.standard_normal() == rng.standard_normal()
        assert _same_state(ref, rng)
    # one permutation for all the draws from the same state, however large the
    # subsample (up to MEMO_PREFIX rows)
    assert permutations == [n]


def test_another_state_or_n_draws_again(memo_from, permutations):
    memo_from(1000)
    choice_without_replacement(np.random.RandomState(0), 3000, 10)
    choice_without_replacement(np.random.RandomState(1), 3000, 10)
    choice_without_replacement(np.random.RandomState(1), 3001, 10)
    rng = np.random.RandomState(1)
    rng.randint(5)
    choice_without_replacement(rng, 3001, 10)
    assert permutations == [3000, 3000, 3001, 3001]


def test_larger_than_the_remembered_prefix(memo_from, monkeypatch, permutations):
    memo_from(1000)
    monkeypatch.setattr(_init, "MEMO_PREFIX", 50)
    choice_without_replacement(np.random.RandomState(0), 3000, 10)
    ref, rng = np.random.RandomState(0), np.random.RandomState(0)
    np.testing.assert_array_equal(
        choice_without_replacement(rng, 3000, 51), ref.choice(3000, size=51, replace=False)
    )
    assert _same_state(ref, rng)
    assert permutations == [3000, 3000]


def test_small_n_and_other_generators_call_choice(memo_from, permutations):
    memo_from(1000)
    choice_without_replacement(np.random.RandomState(0), 999, 10)
    generator = np.random.default_rng(0)
    got = choice_without_replacement(generator, 5000, 10)
    np.testing.assert_array_equal(
        got, np.random.default_rng(0).choice(5000, size=10, replace=False)
    )
    with pytest.raises(ValueError, match="larger sample"):
        choice_without_replacement(np.random.RandomState(0), 5000, 5001)
    assert permutations == []


def test_width_sample_then_init_draw_one_permutation(memo_from, permutations):
    memo_from(1000)
    n = 5000
    draw = draw_sample(0, n, 500, 4)
    init = draw_init_subsample(np.random.RandomState(0), n, 3072, 4)
    ref = np.random.RandomState(0)
    np.testing.assert_array_equal(draw.indices, np.sort(ref.choice(n, 500, replace=False)))
    ref = np.random.RandomState(0)
    np.testing.assert_array_equal(init, np.sort(ref.choice(n, 3072, replace=False)))
    assert permutations == [n]


def test_fit_of_a_memmap_draws_one_permutation_and_the_same_model(
    tmp_path, memo_from, permutations
):
    rng = np.random.default_rng(0)
    centers = rng.uniform(-10, 10, size=(4, 3))
    X = (centers[rng.integers(0, 4, 6000)] + rng.standard_normal((6000, 3))).astype(np.float32)
    np.save(tmp_path / "X.npy", X)
    X = np.load(tmp_path / "X.npy", mmap_mode="r")

    def fit():
        params = dict(batch_size=256, max_iter=20, compute_labels=False, random_state=0)
        return MiniBatchKernelKMeans(4, **params).fit(X)

    memo_from(10**12)  # never remembered: RandomState.choice, as before
    before = fit()
    memo_from(1000)
    after = fit()
    assert permutations == [6000]  # the width sample's, then served to the init
    assert after.gamma_ == before.gamma_
    np.testing.assert_array_equal(after.support_vectors_, before.support_vectors_)
    np.testing.assert_array_equal(after.predict(X[:500]), before.predict(X[:500]))


def _two_passes(X, step):
    """The data width's mean squared distance as chunks of float64 rows compute it."""
    s = np.zeros(X.shape[1])
    for start in range(0, X.shape[0], step):
        s += np.asarray(X[start : start + step], dtype=np.float64).sum(0)
    mean = s / X.shape[0]
    ss = 0.0
    for start in range(0, X.shape[0], step):
        chunk = np.array(X[start : start + step], dtype=np.float64) - mean
        ss += np.einsum("ij,ij->i", chunk, chunk).sum()
    return 2.0 * ss / X.shape[0]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("block_rows", [7, 100, 4096])
def test_mean_squared_distance_in_blocks_and_threads_is_bit_identical(
    tmp_path, monkeypatch, dtype, block_rows
):
    from mbkkm.backends import _numpy, _threads
    from mbkkm.kernels import mean_squared_pairwise_distance

    rng = np.random.default_rng(block_rows)
    X = rng.standard_normal((5003, 6)) * np.logspace(-3, 3, 6) + rng.uniform(-1e3, 1e3, 6)
    X[::7, 2] = -0.0
    np.save(tmp_path / "X.npy", X.astype(dtype))
    X = np.load(tmp_path / "X.npy", mmap_mode="r")
    monkeypatch.setattr(_numpy, "_MSD_CHUNK_BYTES", 8 * 6 * 999)  # 6 chunks, the last short
    monkeypatch.setattr(_numpy, "_MSD_BLOCK_ROWS", block_rows)
    monkeypatch.setattr(_threads, "MIN_PART_WORK", 1000)  # parts on 2 threads
    with _threads.thread_policy(2):
        got = mean_squared_pairwise_distance(X)
    assert got.hex() == float(_two_passes(X, 999)).hex()


def test_mbkkm_fit_checks_the_rows_finite_once(tmp_path, monkeypatch):
    """The command line checks every block finite as it reads; the fit does not read
    all the rows again for scikit-learn's check (a pass over 6.4 GB at 10^8 rows)."""
    pytest.importorskip("click")
    import traceback

    import sklearn
    from click.testing import CliRunner
    from sklearn.utils import validation

    from mbkkm.cli import main

    rng = np.random.default_rng(0)
    path = tmp_path / "X.npy"
    np.save(path, rng.standard_normal((3000, 3)).astype(np.float32))
    checked = []
    real = validation._assert_all_finite

    def spy(X, *args, **kwargs):
        if not sklearn.get_config()["assume_finite"]:  # checked, by whom
            checked.append({frame.name for frame in traceback.extract_stack()})
        return real(X, *args, **kwargs)

    monkeypatch.setattr(validation, "_assert_all_finite", spy)
    fit = ["fit", str(path), "-k", "3", "--max-iter", "5", "--batch-size", "256", "-q"]
    r = CliRunner().invoke(main, [*fit, "--labels-out", str(tmp_path / "labels.npy")])
    assert r.exit_code == 0, r.output
    # the labelling checks the blocks it labels (each read anyway), the fit nothing
    assert checked and not any("_fit_model" in names for names in checked)
    # a NaN is still refused, by the reading, with its row
    X = np.load(path)
    X[1234, 1] = np.nan
    np.save(path, X)
    r = CliRunner().invoke(main, fit)
    assert r.exit_code != 0 and "row 1235" in r.output

"""A fit of many rows spends its time in the iterations, not before them (issue 39).

The subsamples drawn without replacement (the width selection's, the
initialisation's) are ``RandomState.choice``'s below
``mbkkm._core._init.EXACT_CHOICE_MAX_ROWS`` rows (small-n models unchanged); from
there up they are drawn in O(size), where ``choice`` permutes all n rows.
"""

from __future__ import annotations

import numpy as np
import pytest

from mbkkm import MiniBatchKernelKMeans
from mbkkm._core import _init
from mbkkm._core._init import choice_without_replacement, draw_init_subsample
from mbkkm._core._width import draw_sample


@pytest.fixture
def exact_below(monkeypatch):
    """Draw ``RandomState.choice``'s rows below ``rows`` rows (the default is 2**22)."""

    def set_max(rows):
        monkeypatch.setattr(_init, "EXACT_CHOICE_MAX_ROWS", rows)

    return set_max


def _same_state(a, b):
    return np.array_equal(a.randint(2**30, size=20), b.randint(2**30, size=20))


@pytest.mark.parametrize("n, size", [(3000, 5), (3000, 300), (3000, 3000), (50, 7)])
@pytest.mark.parametrize("seed", [0, 3])
def test_below_the_threshold_it_is_choice(n, size, seed):
    ref, rng = np.random.RandomState(seed), np.random.RandomState(seed)
    ref.standard_normal(), rng.standard_normal()  # a cached gaussian in the state
    expected = ref.choice(n, size=size, replace=False)
    got = choice_without_replacement(rng, n, size)
    assert got.dtype == expected.dtype
    np.testing.assert_array_equal(got, expected)
    assert ref.standard_normal() == rng.standard_normal()
    assert _same_state(ref, rng)


def test_other_generators_and_sizes_above_n_call_choice(exact_below):
    exact_below(1000)
    got = choice_without_replacement(np.random.default_rng(0), 5000, 10)
    np.testing.assert_array_equal(
        got, np.random.default_rng(0).choice(5000, size=10, replace=False)
    )
    with pytest.raises(ValueError, match="larger sample"):
        choice_without_replacement(np.random.RandomState(0), 5000, 5001)


@pytest.mark.parametrize("n, size", [(1000, 1), (1000, 10), (5000, 600), (1000, 1000)])
def test_above_the_threshold_distinct_rows_seeded_by_the_state(exact_below, n, size):
    exact_below(100)
    rng = np.random.RandomState(7)
    got = choice_without_replacement(rng, n, size)
    assert got.shape == (size,) and got.dtype.kind == "i"
    assert np.unique(got).size == size and got.min() >= 0 and got.max() < n
    np.arange(n)[got]  # usable as indices
    # the oracle: one int64 seed drawn from the state starts Generator.choice
    ref = np.random.RandomState(7)
    seed = ref.randint(np.iinfo(np.int64).max, dtype=np.int64)
    expected = np.random.default_rng(seed).choice(n, size=size, replace=False)
    np.testing.assert_array_equal(got, expected)
    assert _same_state(ref, rng)
    other = choice_without_replacement(np.random.RandomState(8), n, size)
    assert size == n or not np.array_equal(np.sort(other), np.sort(got))


def test_above_the_threshold_every_row_equally_likely(exact_below):
    # n = 200, size = 20: each row is drawn with probability 0.1; over 4,000 draws
    # each row's count is binomial(4000, 0.1): mean 400, sd 19. Five sd either side.
    exact_below(100)
    counts = np.zeros(200, dtype=np.int64)
    rng = np.random.RandomState(0)
    for _ in range(4000):
        counts[choice_without_replacement(rng, 200, 20)] += 1
    assert counts.sum() == 4000 * 20
    assert np.all(np.abs(counts - 400) <= 5 * np.sqrt(4000 * 0.1 * 0.9))


def test_at_a_trillion_rows_it_draws_only_the_sample():
    # O(size): a permutation of 10^12 rows would not fit in memory
    got = choice_without_replacement(np.random.RandomState(0), 10**12, 100)
    assert np.unique(got).size == 100 and got.max() < 10**12
    got = draw_init_subsample(np.random.RandomState(0), 10**12, 300, 3)
    assert np.all(np.diff(got) > 0) and got[-1] < 10**12
    assert draw_sample(0, 10**12, 1000, 4).indices.shape == (1000,)


def test_fit_above_the_threshold_is_deterministic(tmp_path, exact_below):
    rng = np.random.default_rng(0)
    centers = rng.uniform(-10, 10, size=(4, 3))
    X = (centers[rng.integers(0, 4, 6000)] + rng.standard_normal((6000, 3))).astype(np.float32)
    np.save(tmp_path / "X.npy", X)
    X = np.load(tmp_path / "X.npy", mmap_mode="r")

    def fit(seed=0):
        params = dict(batch_size=256, max_iter=20, compute_labels=False, random_state=seed)
        return MiniBatchKernelKMeans(4, **params).fit(X)

    exact = fit()
    exact_below(1000)
    first, again = fit(), fit()
    assert first.gamma_ == again.gamma_
    np.testing.assert_array_equal(first.support_vectors_, again.support_vectors_)
    np.testing.assert_array_equal(first.predict(X[:500]), again.predict(X[:500]))
    # other rows than RandomState.choice's: another width sample and init subsample
    assert first.gamma_ != exact.gamma_ or not np.array_equal(
        first.support_vectors_, exact.support_vectors_
    )


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

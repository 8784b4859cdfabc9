"""``check_precomputed_matrix``: its tiled symmetry check against the plain one."""

from __future__ import annotations

import re

import numpy as np
import pytest

from mbkkm.kernels._index import check_precomputed_matrix


def _plain_is_symmetric(K):
    """Symmetric within sqrt(eps) of the dtype times the largest |K| entry."""
    rtol = np.sqrt(np.finfo(np.result_type(K.dtype, np.float32)).eps)
    return np.max(np.abs(K - K.T)) <= rtol * np.max(np.abs(K))


def _gram(n, dtype, seed=0):
    X = np.random.RandomState(seed).normal(size=(n, 4))
    return np.exp(-0.1 * ((X[:, None] - X[None]) ** 2).sum(-1)).astype(dtype)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("tile", [1, 3, 7, 16, 100])
def test_symmetric_matrices_pass_at_every_tile(dtype, tile):
    K = _gram(23, dtype)
    np.testing.assert_array_equal(
        check_precomputed_matrix(K, tile=tile), np.diagonal(K).astype(np.float64)
    )


@pytest.mark.parametrize("tile", [1, 3, 7, 16, 100])
@pytest.mark.parametrize("where", [(0, 22), (22, 0), (5, 6), (6, 5), (14, 9), (20, 21)])
def test_one_asymmetric_pair_is_found_in_any_tile(tile, where):
    K = _gram(23, np.float64)
    i, j = where
    K[i, j] += 1e-3
    assert not _plain_is_symmetric(K)
    with pytest.raises(ValueError, match="not a symmetric kernel matrix") as info:
        check_precomputed_matrix(K, tile=tile)
    named = {int(a) for a in re.findall(r"K\[(\d+), (\d+)\]", str(info.value))[0]}
    assert named == {i, j}


def test_tolerance_equals_the_plain_check():
    K = _gram(30, np.float64)
    rtol = np.sqrt(np.finfo(np.float64).eps)
    scale = np.max(np.abs(K))
    below, above = K.copy(), K.copy()
    below[3, 17] += 0.5 * rtol * scale
    above[3, 17] += 2.0 * rtol * scale
    assert _plain_is_symmetric(below) and not _plain_is_symmetric(above)
    check_precomputed_matrix(below, tile=4)
    with pytest.raises(ValueError, match="symmetric"):
        check_precomputed_matrix(above, tile=4)


def test_a_memmap_is_checked_like_the_array(tmp_path):
    K = _gram(40, np.float64)
    path = tmp_path / "K.npy"
    np.save(path, K)
    mm = np.load(path, mmap_mode="r")
    np.testing.assert_array_equal(check_precomputed_matrix(mm, tile=8), np.diagonal(K))
    K[39, 0] += 1.0
    np.save(path, K)
    with pytest.raises(ValueError, match=r"K\[0, 39\]"):
        check_precomputed_matrix(np.load(path, mmap_mode="r"), tile=8)


class _Reads(np.ndarray):
    """An array that records the shape of every block of it that is read."""

    def __getitem__(self, key):
        out = super().__getitem__(key)
        if isinstance(out, np.ndarray) and out.ndim == 2:
            self.reads.append(out.shape)
        return out


def test_reads_tiles_never_whole_rows_or_columns():
    # the point of the tiles: a memory-mapped matrix read block by block, each block
    # and its mirror small enough to stay in cache (never a block of whole columns,
    # which touches every page of the file once per block of rows)
    K = _gram(50, np.float64).view(_Reads)
    K.reads = []
    check_precomputed_matrix(K, tile=8)
    assert K.reads and max(r * c for r, c in K.reads) <= 8 * 8
    # the upper triangle of tiles and their mirrors: each tile pair read once
    n_tiles = -(-50 // 8)
    assert len(K.reads) == 2 * n_tiles * (n_tiles + 1) // 2

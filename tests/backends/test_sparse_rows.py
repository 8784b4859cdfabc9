"""Row gathers of sparse items (mbkkm.backends._numpy) against the dense operations."""

import numpy as np
import pytest
import scipy.sparse as sp

from mbkkm.backends import numpy_backend
from mbkkm.backends._numpy import (
    as_csr,
    row_norms_sq,
    take_rows,
    vstack_rows,
)


def _dense(seed, n, d, dtype=np.float64):
    rng = np.random.default_rng(seed)
    A = (rng.normal(size=(n, d)) * (rng.random((n, d)) < 0.3)).astype(dtype)
    A[2:3] = 0  # an empty row (when there is a third row)
    return A


def _canonical(M):
    return sp.issparse(M) and M.format == "csr" and M.has_sorted_indices and M.has_canonical_format


@pytest.mark.parametrize("container", [sp.csr_matrix, sp.csc_matrix, sp.csr_array])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_take_rows_with_repeats(container, dtype):
    A = _dense(0, 15, 8, dtype)
    idx = np.array([3, 3, 0, 14, 2, 7, 3])
    R = take_rows(container(A), idx)
    assert _canonical(R) and R.dtype == dtype and R.shape == (7, 8)
    np.testing.assert_array_equal(R.toarray(), A[idx])
    # the container kind (matrix or array) is kept
    assert isinstance(R, sp.sparray) == isinstance(container(A), sp.sparray)
    np.testing.assert_array_equal(take_rows(A, idx), A[idx])  # dense: plain indexing
    assert take_rows(container(A), np.array([], dtype=np.intp)).shape == (0, 8)


def test_take_rows_sorts_unsorted_indices():
    M = sp.csr_matrix((np.array([1.0, 2.0]), np.array([3, 1]), np.array([0, 2, 2])), shape=(2, 4))
    assert not M.has_sorted_indices
    R = take_rows(M, np.array([0, 0]))
    assert _canonical(R)
    np.testing.assert_array_equal(R.toarray(), M.toarray()[[0, 0]])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_vstack_rows(dtype):
    parts = [_dense(s, n, 6, dtype) for s, n in [(1, 4), (2, 0), (3, 5), (4, 1)]]
    S = vstack_rows([sp.csr_matrix(p) for p in parts])
    assert _canonical(S) and S.dtype == dtype and S.shape == (10, 6)
    np.testing.assert_array_equal(S.toarray(), np.concatenate(parts))
    # slices of a CSR (what the core stacks: kept window rows and new batch rows)
    M = sp.csr_matrix(parts[2])
    S2 = vstack_rows([M[1:3], take_rows(M, np.array([4, 0])), M[0:0]])
    np.testing.assert_array_equal(S2.toarray(), parts[2][[1, 2, 4, 0]])
    np.testing.assert_array_equal(vstack_rows(parts), np.concatenate(parts))
    empty = vstack_rows([sp.csr_matrix((0, 6), dtype=dtype)])
    assert empty.shape == (0, 6) and empty.dtype == dtype and empty.format == "csr"


def test_vstack_rows_refuses_mixed_and_mismatched():
    A = _dense(5, 3, 4)
    with pytest.raises(TypeError, match="dense and sparse"):
        vstack_rows([A, sp.csr_matrix(A)])
    with pytest.raises(ValueError, match="columns"):
        vstack_rows([sp.csr_matrix(A), sp.csr_matrix(A[:, :2])])
    with pytest.raises(ValueError, match="at least one"):
        vstack_rows([])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_row_norms_sq(dtype):
    A = _dense(6, 30, 7, dtype)
    A[-1] = 0  # an empty last row (reduceat's edge)
    expected = np.einsum("ij,ij->i", A.astype(np.float64), A.astype(np.float64))
    got = row_norms_sq(sp.csr_matrix(A))
    assert got.dtype == dtype and got.shape == (30,)
    np.testing.assert_allclose(got, expected, rtol=1e-6 if dtype == np.float32 else 1e-14)
    assert row_norms_sq(sp.csr_matrix((4, 3), dtype=dtype)).tolist() == [0, 0, 0, 0]
    # duplicates are summed first: ||(1 + 2, 0)||^2 = 9, not 1 + 4
    dup = sp.csr_matrix((np.array([1.0, 2.0]), np.array([0, 0]), np.array([0, 2])), shape=(1, 2))
    assert row_norms_sq(dup).tolist() == [9.0]


def test_as_csr_does_not_modify_its_input():
    M = sp.csr_matrix(
        (np.array([1.0, 2.0, 5.0]), np.array([2, 2, 0]), np.array([0, 3])), shape=(1, 3)
    )
    data = M.data.copy()
    C = as_csr(M)
    assert _canonical(C) and C is not M
    np.testing.assert_array_equal(M.data, data)
    np.testing.assert_array_equal(C.toarray(), M.toarray())
    assert as_csr(C) is C  # canonical CSR: no copy
    with pytest.raises(TypeError, match=r"scipy\.sparse"):
        as_csr(np.zeros((2, 2)))


def test_numpy_backend_gathers_sparse_rows():
    nx = numpy_backend()
    A = _dense(8, 12, 5)
    M = sp.csr_matrix(A)
    idx = np.array([1, 1, 11, 0])
    R = nx.take(M, nx.index(idx))
    assert _canonical(R)
    np.testing.assert_array_equal(R.toarray(), A[idx])
    S = vstack_rows([M[3:5], R])
    assert _canonical(S)
    np.testing.assert_array_equal(S.toarray(), np.concatenate([A[3:5], A[idx]]))
    # dense arrays: unchanged behaviour
    np.testing.assert_array_equal(nx.take(A, idx), A[idx])
    np.testing.assert_array_equal(nx.take(A, idx % 5, axis=1), A[:, idx % 5])


def test_check_no_overflow_on_sparse():
    from mbkkm.cluster._rows import check_no_overflow

    A = _dense(9, 10, 4, np.float32)
    check_no_overflow(sp.csr_matrix(A))  # fine
    A[5, 1] = 3e19  # finite, but its square overflows float32
    with pytest.raises(ValueError, match="too large for float32"):
        check_no_overflow(sp.csr_matrix(A))
    check_no_overflow(sp.csr_matrix(A.astype(np.float64)))  # fine in float64

    class Exploding:
        is_callable = False

        def diag(self, X):
            return np.full(X.shape[0], np.inf)

        def __repr__(self):
            return "Kernel('polynomial')"

    with pytest.raises(ValueError, match="overflows"):
        check_no_overflow(sp.csr_matrix(_dense(10, 3, 2)), Exploding())

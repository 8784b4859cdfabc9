"""Sparse X in both kernel estimators.

The oracle is the dense run: CSR (or CSC) input and the same data densified give
the same model from the same seed (labels, support rows, coefficients) and the
same distances up to float rounding, for every kernel that is defined on sparse
data. Rows are never densified: a fit on data with a million columns allocates
far less than one dense batch (tracemalloc).
"""

from __future__ import annotations

import tracemalloc
import warnings

import numpy as np
import pytest
import scipy.sparse as sp

from _agreement import assert_no_near_tie, assert_same_labels
from mbkkm import KernelKMeans, MiniBatchKernelKMeans
from mbkkm.cluster import EmptyClusterWarning
from mbkkm.datasets import make_topic_corpus
from mbkkm.kernels import KERNELS, knn_kernel

#: Every named kernel defined on sparse data, from the registry.
SPARSE_KERNELS = sorted(n for n, s in KERNELS.items() if not s.transductive and s.accepts_sparse)
DTYPES = [np.float32, np.float64]


def _corpus(n=240, d=300, dtype=np.float64, seed=0):
    # Dense enough that few documents share no term with a center: two centers with
    # no term in common with x are at exactly the same distance from it, and such
    # ties are broken by rounding, which differs between the sparse and dense paths.
    X, y = make_topic_corpus(n, d, n_topics=3, density=0.1, random_state=seed, dtype=dtype)
    return X, y


def _mbkkm(**kw):
    params = dict(n_clusters=3, batch_size=48, tau=30, max_iter=15, random_state=0)
    return MiniBatchKernelKMeans(**{**params, **kw})


def _kkm(**kw):
    # tol=0: stop at strict convergence only; a relative tolerance on the objective
    # could stop one iteration earlier on one path than on the other (rounding).
    return KernelKMeans(**{**dict(n_clusters=3, max_iter=30, tol=0, random_state=0), **kw})


ESTIMATORS = {"MiniBatchKernelKMeans": _mbkkm, "KernelKMeans": _kkm}


def _tol(dtype):
    return dict(rtol=1e-4, atol=1e-5) if dtype == np.float32 else dict(rtol=1e-9, atol=1e-11)


def _assert_same_model(a, b, dtype, X):
    """a fitted on CSR, b on the dense copy (of X): the same model up to rounding.

    The sparse and dense products round differently, so the fits' discrete choices
    (every batch's labels, hence the rows kept and their coefficients) agree exactly
    only if no point meets a tie within rounding; checked on the final distances (the
    corpus is dense enough for it, see _corpus), which rules out a rounding flip as
    the cause of a difference."""
    assert sp.issparse(a.support_vectors_) and a.support_vectors_.format == "csr"
    assert a.support_vectors_.dtype == dtype
    assert_no_near_tie(
        b.transform(X.toarray() if sp.issparse(X) else X),
        rtol=1e-4 if dtype == np.float32 else 1e-9,
    )
    np.testing.assert_array_equal(a.labels_, b.labels_)
    np.testing.assert_array_equal(a.support_labels_, b.support_labels_)
    Sb = b.support_vectors_.toarray() if sp.issparse(b.support_vectors_) else b.support_vectors_
    np.testing.assert_array_equal(a.support_vectors_.toarray(), Sb)
    np.testing.assert_allclose(a.dual_coef_, b.dual_coef_, rtol=1e-12)
    np.testing.assert_allclose(a.center_norms_, b.center_norms_, **_tol(dtype))
    np.testing.assert_allclose(a.inertia_, b.inertia_, **_tol(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kernel", SPARSE_KERNELS)
@pytest.mark.parametrize("name", list(ESTIMATORS))
def test_sparse_fit_equals_dense(name, kernel, dtype):
    X, _ = _corpus(dtype=dtype)
    Xd = X.toarray()
    a = ESTIMATORS[name](kernel=kernel).fit(X)
    b = ESTIMATORS[name](kernel=kernel).fit(Xd)
    _assert_same_model(a, b, dtype, X)
    Xn, _ = _corpus(n=60, dtype=dtype, seed=1)  # new points
    Da, Db = a.transform(Xn), b.transform(Xn.toarray())
    assert Da.dtype == Db.dtype
    np.testing.assert_allclose(Da, Db, **_tol(dtype))
    assert_same_labels(
        a.predict(Xn), b.predict(Xn.toarray()), Db, rtol=1e-4 if dtype == np.float32 else 1e-9
    )
    np.testing.assert_allclose(a.score(Xn), b.score(Xn.toarray()), **_tol(dtype))
    # mixed: a model fitted on CSR labels dense rows, and the other way round
    np.testing.assert_allclose(a.transform(Xn.toarray()), Da, **_tol(dtype))
    np.testing.assert_allclose(b.transform(Xn), Db, **_tol(dtype))


@pytest.mark.parametrize("name", list(ESTIMATORS))
def test_sparse_weights_n_init_and_init_array(name):
    X, _ = _corpus()
    Xd = X.toarray()
    w = np.random.RandomState(0).uniform(0, 2, X.shape[0])
    w[:10] = 0
    for kw in [dict(n_init=3), dict(init="random"), dict(init=Xd[[0, 100, 200]])]:
        a = ESTIMATORS[name](kernel="cosine", **kw).fit(X, sample_weight=w)
        b = ESTIMATORS[name](kernel="cosine", **kw).fit(Xd, sample_weight=w)
        _assert_same_model(a, b, np.float64, X)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kernel", ["rbf", "cosine"])
def test_untruncated_sparse_equals_dense(kernel, dtype):
    X, _ = _corpus(dtype=dtype)
    a = _mbkkm(kernel=kernel, tau=None).fit(X)
    b = _mbkkm(kernel=kernel, tau=None).fit(X.toarray())
    _assert_same_model(a, b, dtype, X)
    np.testing.assert_allclose(a.transform(X), b.transform(X.toarray()), **_tol(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
def test_partial_fit_predict_transform_score_on_csr(dtype):
    X, _ = _corpus(dtype=dtype)
    Xd = X.toarray()
    # gamma given: the data-driven one of the first batch is computed by another
    # formula for sparse rows (equal up to rounding, tested with the kernels)
    a, b = _mbkkm(kernel="rbf", gamma=0.5), _mbkkm(kernel="rbf", gamma=0.5)
    for lo in range(0, X.shape[0], 60):
        a.partial_fit(X[lo : lo + 60])
        b.partial_fit(Xd[lo : lo + 60])
        assert sp.issparse(a.support_vectors_)
        np.testing.assert_array_equal(a.support_vectors_.toarray(), b.support_vectors_)
    D = b.transform(Xd)
    assert_no_near_tie(D, rtol=1e-4 if dtype == np.float32 else 1e-9)  # as _assert_same_model
    np.testing.assert_array_equal(a.labels_, b.labels_)
    np.testing.assert_array_equal(a.predict(X), b.predict(Xd))
    np.testing.assert_allclose(a.transform(X), b.transform(Xd), **_tol(dtype))
    np.testing.assert_allclose(a.score(X), b.score(Xd), **_tol(dtype))


class _CountingCSC(sp.csc_matrix):
    """A CSC matrix that counts its conversions to CSR."""

    n_tocsr = 0

    def tocsr(self, copy=False):
        type(self).n_tocsr += 1
        return sp.csc_matrix(self).tocsr(copy=copy)


@pytest.mark.parametrize("name", list(ESTIMATORS))
def test_csc_converted_once(name):
    X, _ = _corpus()
    Xc = _CountingCSC(X.tocsc())
    _CountingCSC.n_tocsr = 0
    a = ESTIMATORS[name](kernel="cosine").fit(Xc)
    assert _CountingCSC.n_tocsr == 1
    b = ESTIMATORS[name](kernel="cosine").fit(X)
    _assert_same_model(a, b, np.float64, X)
    _CountingCSC.n_tocsr = 0
    np.testing.assert_allclose(a.transform(Xc), b.transform(X), rtol=1e-12)
    assert _CountingCSC.n_tocsr == 1


@pytest.mark.parametrize("fmt", ["coo", "lil", "bsr"])
def test_other_formats_equal_csr(fmt):
    X, _ = _corpus()
    a = _mbkkm(kernel="linear").fit(X.asformat(fmt))
    b = _mbkkm(kernel="linear").fit(X)
    np.testing.assert_array_equal(a.labels_, b.labels_)


def test_unsorted_indices_and_duplicates_are_canonicalised():
    X, _ = _corpus()
    coo = X.tocoo()
    # every stored value split in two halves at the same position, in reverse order
    half = coo.data / 2
    dup = sp.csr_matrix(
        (np.r_[half, half][::-1], (np.r_[coo.row, coo.row][::-1], np.r_[coo.col, coo.col][::-1])),
        shape=X.shape,
    )
    dup.has_canonical_format = False
    a = _mbkkm(kernel="rbf").fit(dup)
    b = _mbkkm(kernel="rbf").fit(X)
    np.testing.assert_array_equal(a.labels_, b.labels_)
    np.testing.assert_allclose(a.transform(X), b.transform(X), rtol=1e-10)


@pytest.mark.parametrize("name", list(ESTIMATORS))
def test_chi2_sparse_refused_naming_the_kernel(name):
    X, _ = _corpus()
    with pytest.raises(ValueError, match=r"kernel='chi2' does not support sparse X"):
        ESTIMATORS[name](kernel="chi2").fit(X)
    est = ESTIMATORS[name](kernel="chi2").fit(X.toarray())  # dense: fine
    with pytest.raises(ValueError, match=r"chi2.*sparse"):
        est.predict(X)


def test_graph_kernel_sparse_refused():
    X, _ = _corpus()
    with pytest.raises(TypeError, match="dense data is required"):
        _mbkkm(kernel="knn", kernel_params={"n_neighbors": 5}).fit(X)


def test_torch_device_sparse_refused():
    pytest.importorskip("torch")
    X, _ = _corpus()
    with pytest.raises(ValueError, match=r"scipy.sparse.*device='torch'.*no sparse path"):
        _mbkkm(device="torch").fit(X)
    with pytest.raises(ValueError, match="no sparse path"):
        _mbkkm(device="torch").partial_fit(X)
    est = _mbkkm(device="torch").fit(X.toarray())
    with pytest.raises(ValueError, match="no sparse path"):
        est.predict(X)
    # "auto" picks the best backend for the data: numpy for sparse X
    a = _mbkkm(device="auto").fit(X)
    b = _mbkkm().fit(X)
    np.testing.assert_array_equal(a.labels_, b.labels_)
    assert sp.issparse(a.support_vectors_)


@pytest.mark.parametrize("name", list(ESTIMATORS))
def test_precomputed_sparse_kernel_matrix_unchanged(name):
    X, _ = _corpus()
    Xd = X.toarray()
    K = knn_kernel(Xd, 10)  # sparse (n, n)
    a = ESTIMATORS[name](kernel="precomputed").fit(K)
    b = ESTIMATORS[name](kernel="precomputed").fit(K.toarray())
    np.testing.assert_array_equal(a.labels_, b.labels_)
    # predict with K(X_new, X_fit) given sparse or dense
    K_new = K[:50]
    np.testing.assert_array_equal(a.predict(K_new), b.predict(K_new.toarray()))
    diag = K.diagonal()[:50]
    np.testing.assert_allclose(
        a.transform(K_new, kernel_diag=diag),
        b.transform(K_new.toarray(), kernel_diag=diag),
        rtol=1e-12,
    )


def test_callable_kernel_receives_csr_rows():
    from sklearn.metrics.pairwise import cosine_similarity

    seen = set()

    def my_cosine(A, B):
        seen.update((sp.issparse(A), sp.issparse(B)))
        return cosine_similarity(A, B)

    X, _ = _corpus()
    a = _mbkkm(kernel=my_cosine).fit(X)
    b = _mbkkm(kernel="cosine").fit(X)
    assert seen == {True}
    np.testing.assert_array_equal(a.labels_, b.labels_)
    np.testing.assert_allclose(a.dual_coef_, b.dual_coef_, rtol=1e-12)


@pytest.mark.parametrize("name", list(ESTIMATORS))
def test_sparse_tags(name):
    assert ESTIMATORS[name]().__sklearn_tags__().input_tags.sparse
    assert ESTIMATORS[name](kernel="precomputed").__sklearn_tags__().input_tags.sparse
    assert not ESTIMATORS[name](kernel="chi2").__sklearn_tags__().input_tags.sparse
    assert not ESTIMATORS[name](kernel="knn").__sklearn_tags__().input_tags.sparse


@pytest.mark.parametrize("kernel", ["cosine", "rbf"])
@pytest.mark.parametrize("name", list(ESTIMATORS))
def test_rows_never_densified(name, kernel):
    # 10^6 columns: one dense row is 8 MB, one dense batch of 48 rows 384 MB, X 2.4 GB.
    n, d = 300, 10**6
    rng = np.random.RandomState(0)
    nnz_row = 20
    rows = np.repeat(np.arange(n), nnz_row)
    topic = rng.randint(3, size=n)
    cols = topic[rows] * 1000 + rng.randint(0, 3000, rows.size)  # overlapping topic terms
    X = sp.csr_matrix((rng.uniform(0.5, 1.5, rows.size), (rows, cols)), shape=(n, d))
    est = ESTIMATORS[name](kernel=kernel)
    tracemalloc.start()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", EmptyClusterWarning)
            est.fit(X)
            D = est.transform(X)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert sp.issparse(est.support_vectors_)
    assert D.shape == (n, 3) and np.all(np.isfinite(D))
    # O(d) vectors (the transposed support's row pointers), O(n^2) kernel blocks and
    # for rbf the width selection's n x n matrices on its sparse sample: far below one
    # dense batch (384 MB).
    assert peak < 48 * 2**20, f"peak {peak / 2**20:.0f} MiB"


@pytest.mark.parametrize("first", ["sparse", "dense"])
def test_partial_fit_mixing_sparse_and_dense_batches(first):
    # The support keeps the kind of the data it was initialised from; rows of the
    # other kind are converted as they join it. Same model as all-dense batches.
    X, _ = _corpus()
    Xd = X.toarray()
    a, b = _mbkkm(kernel="rbf", gamma=0.5), _mbkkm(kernel="rbf", gamma=0.5)
    for i, lo in enumerate(range(0, X.shape[0], 60)):
        sparse_now = (i % 2 == 0) == (first == "sparse")
        a.partial_fit(X[lo : lo + 60] if sparse_now else Xd[lo : lo + 60])
        b.partial_fit(Xd[lo : lo + 60])
    assert sp.issparse(a.support_vectors_) == (first == "sparse")
    S = a.support_vectors_.toarray() if first == "sparse" else a.support_vectors_
    np.testing.assert_array_equal(S, b.support_vectors_)
    np.testing.assert_array_equal(a.labels_, b.labels_)
    np.testing.assert_allclose(a.transform(X), b.transform(Xd), rtol=1e-10)


def test_sparse_torch_tensor_refused():
    torch = pytest.importorskip("torch")
    X, _ = _corpus()
    coo = X.tocoo()
    T = torch.sparse_coo_tensor(np.vstack([coo.row, coo.col]), coo.data, size=X.shape)
    with pytest.raises(ValueError, match="sparse torch tensor"):
        _mbkkm().fit(T)


@pytest.mark.parametrize("name", list(ESTIMATORS))
@pytest.mark.parametrize("kernel", ["cosine", "linear", "rbf"])
def test_sparse_rows_of_another_dtype_than_the_fit(name, kernel):
    """A model fitted on float32 CSR rows labels float64 and integer CSR rows (and a
    float64 model float32 ones), as it does dense rows of any dtype: the tile is
    computed in the rows' common dtype, then written into the model's buffer (it
    raised 'out array must be same dtype'). Oracle: the same rows cast to the fit's
    dtype first."""
    X32, _ = _corpus(dtype=np.float32)
    params = {"gamma": 0.5} if kernel == "rbf" else {}
    est = ESTIMATORS[name](kernel=kernel, **params).fit(X32)
    for other in (X32.astype(np.float64), (X32 * 10).astype(np.int64)):
        ref = other.astype(np.float32)
        np.testing.assert_array_equal(est.predict(other), est.predict(ref))
        np.testing.assert_allclose(est.transform(other), est.transform(ref), rtol=1e-5, atol=1e-6)
    X64, _ = _corpus(dtype=np.float64)
    est = ESTIMATORS[name](kernel=kernel, **params).fit(X64)
    np.testing.assert_array_equal(
        est.predict(X64.astype(np.float32)), est.predict(X64.astype(np.float32).astype(np.float64))
    )
    if name == "MiniBatchKernelKMeans":  # partial_fit on chunks of both dtypes
        a = (
            _mbkkm(kernel=kernel, **params)
            .partial_fit(X32[:120])
            .partial_fit(X32[120:].astype(np.float64))
        )
        b = _mbkkm(kernel=kernel, **params).partial_fit(X32[:120]).partial_fit(X32[120:])
        np.testing.assert_array_equal(a.predict(X32), b.predict(X32))

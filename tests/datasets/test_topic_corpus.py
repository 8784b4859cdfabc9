"""mbkkm.datasets.make_topic_corpus: a sparse synthetic TF-IDF corpus."""

import tracemalloc

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.feature_extraction.text import TfidfTransformer

from mbkkm.datasets import SYNTHETIC, make_topic_corpus


def test_shape_dtype_labels_and_format():
    X, y = make_topic_corpus(3000, 4000, n_topics=7, density=0.01, random_state=0)
    assert sp.issparse(X) and X.format == "csr" and X.shape == (3000, 4000)
    assert X.dtype == np.float32 and X.indices.dtype == np.int32
    assert X.has_canonical_format and np.all(X.data > 0)
    assert y.shape == (3000,) and y.dtype == np.int64
    counts = np.bincount(y)
    assert counts.size == 7 and counts.max() - counts.min() <= 1
    assert not np.array_equal(y[:100], np.sort(y[:100]))  # shuffled


@pytest.mark.parametrize(("n_features", "density"), [(4000, 0.01), (20000, 0.001), (500, 0.2)])
def test_density_matches_the_request(n_features, density):
    X, _ = make_topic_corpus(4000, n_features, n_topics=5, density=density, random_state=1)
    assert X.nnz / (4000 * n_features) == pytest.approx(density, rel=0.05)


def test_tfidf_equals_sklearn_on_the_counts():
    kw = dict(n_topics=4, density=0.02, random_state=2, chunk_size=333)
    C, y = make_topic_corpus(1500, 1000, tfidf=False, dtype=np.float64, **kw)
    assert np.array_equal(C.data, np.round(C.data)) and C.data.min() >= 1  # counts
    T, y2 = make_topic_corpus(1500, 1000, dtype=np.float64, **kw)
    np.testing.assert_array_equal(y, y2)
    ref = TfidfTransformer().fit_transform(C)
    np.testing.assert_allclose(T.toarray(), ref.toarray(), rtol=1e-12, atol=1e-15)
    norms = np.sqrt(np.asarray(T.multiply(T).sum(1))).ravel()
    np.testing.assert_allclose(norms[np.diff(T.indptr) > 0], 1, rtol=1e-12)


def test_deterministic():
    A, ya = make_topic_corpus(800, 900, n_topics=3, density=0.02, random_state=5)
    B, yb = make_topic_corpus(800, 900, n_topics=3, density=0.02, random_state=5)
    assert (A != B).nnz == 0 and np.array_equal(ya, yb)
    C, yc = make_topic_corpus(800, 900, n_topics=3, density=0.02, random_state=6)
    assert not np.array_equal(ya, yc) and (A != C).nnz > 0


def test_topics_are_recoverable_from_the_terms():
    """Nearest topic centroid (cosine, centroids of the other half) recovers the labels;
    with topic_weight=0 it is chance."""

    def accuracy(weight):
        X, y = make_topic_corpus(
            4000, 2000, n_topics=5, density=0.02, topic_weight=weight, random_state=3
        )
        fit, test = slice(0, 2000), slice(2000, 4000)
        cent = np.vstack([np.asarray(X[fit][y[fit] == k].mean(0)) for k in range(5)])
        cent /= np.linalg.norm(cent, axis=1, keepdims=True)
        return float(np.mean(np.argmax(X[test] @ cent.T, axis=1) == y[test]))

    assert accuracy(0.5) > 0.95
    assert accuracy(0.0) < 0.5


def test_memory_stays_near_the_csr_size():
    tracemalloc.start()
    try:
        X, _ = make_topic_corpus(
            20000, 20000, n_topics=10, density=0.0025, random_state=4, chunk_size=2048
        )
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    csr = X.data.nbytes + X.indices.nbytes + X.indptr.nbytes
    # the arrays sized for all tokens (about 1.3 x the stored values), the laws
    # (n_topics x n_features float64 at the calibration) and one chunk
    assert peak < 2.5 * csr + 20 * 20000 * 8, (peak, csr)


def test_registered_and_float64():
    assert SYNTHETIC["topics"] is make_topic_corpus
    X, _ = SYNTHETIC["topics"](
        n_samples=200, n_features=300, density=0.05, random_state=0, dtype=np.float64
    )
    assert X.dtype == np.float64


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        ({"n_samples": 0}, ValueError, "n_samples"),
        ({"n_features": 3, "n_topics": 5}, ValueError, "n_features must be >= n_topics"),
        ({"density": 0.0}, ValueError, "density"),
        ({"density": 1.5}, ValueError, "density"),
        ({"topic_weight": -0.1}, ValueError, "topic_weight"),
        ({"n_topics": 2.5}, TypeError, "n_topics"),
        ({"tfidf": "yes"}, TypeError, "tfidf"),
        ({"dtype": np.int32}, TypeError, "dtype"),
        ({"chunk_size": 0}, ValueError, "chunk_size"),
    ],
)
def test_bad_parameters(kwargs, exc, match):
    base = dict(n_samples=10, n_features=50, n_topics=2, density=0.1)
    base.update(kwargs)
    with pytest.raises(exc, match=match):
        make_topic_corpus(**base)

"""Synthetic datasets for demos and tests.

Concentric circles, moons and concentric shells are clusters that plain
(linear) k-means cannot separate but kernel k-means can; blobs are the easy
case. All generators take ``random_state`` and return ``(X, y)`` with ``X`` of
the requested floating ``dtype`` and ``y`` of dtype ``int64``.
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np
from sklearn import datasets as _skd

_DEFAULT_CHUNK = 1 << 18


def _check_int(value: Any, name: str) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}.")
    if value < 1:
        raise ValueError(f"{name} must be >= 1, got {value}.")
    return int(value)


def _check_float_dtype(dtype: Any, single_or_double: bool = False) -> np.dtype:
    try:
        dt = np.dtype(dtype)
    except TypeError as exc:
        raise TypeError(f"dtype must be a floating numpy dtype, got {dtype!r}.") from exc
    if not np.issubdtype(dt, np.floating):
        raise TypeError(f"dtype must be a floating numpy dtype, got {dt}.")
    if single_or_double and dt not in (np.dtype(np.float32), np.dtype(np.float64)):
        raise TypeError(f"dtype must be np.float32 or np.float64, got {dt}.")
    return dt


def _check_noise(noise: Any) -> float:
    if noise is None:
        return 0.0
    if isinstance(noise, (bool, np.bool_)) or not isinstance(noise, numbers.Real):
        raise TypeError(f"noise must be a non-negative float or None, got {type(noise).__name__}.")
    value = float(noise)
    if not np.isfinite(value) or value < 0:
        raise ValueError(f"noise must be a non-negative finite float, got {noise}.")
    return value


def _as_generator(random_state: Any) -> np.random.Generator:
    """A :class:`numpy.random.Generator` from None, an int, a Generator or a RandomState."""
    if isinstance(random_state, bool):
        raise TypeError("random_state must be None, an int or a numpy random generator.")
    if isinstance(random_state, np.random.RandomState):
        random_state = random_state.randint(np.iinfo(np.int32).max)
    if isinstance(random_state, numbers.Integral):
        random_state = int(random_state)
    if random_state is None or isinstance(
        random_state, (int, np.random.SeedSequence, np.random.Generator)
    ):
        return np.random.default_rng(random_state)  # a Generator is returned as it is
    raise TypeError(
        "random_state must be None, an int, a numpy Generator or a RandomState, "
        f"got {type(random_state).__name__}."
    )


def _from_sklearn(make, n_samples, dtype, **kwargs):
    """``make(n_samples=..., **kwargs)`` of :mod:`sklearn.datasets`, with ``n_samples``,
    ``dtype`` and ``noise`` (when given) checked; ``X`` in ``dtype``, ``y`` as int64."""
    n_samples = _check_int(n_samples, "n_samples")
    dt = _check_float_dtype(dtype)
    if "noise" in kwargs:
        kwargs["noise"] = _check_noise(kwargs["noise"]) or None
    X, y = make(n_samples=n_samples, **kwargs)
    return X.astype(dt), y.astype(np.int64)


def make_circles(
    n_samples: int = 1000,
    *,
    noise: float | None = 0.05,
    factor: float = 0.5,
    random_state: Any = None,
    dtype: Any = np.float32,
) -> tuple[np.ndarray, np.ndarray]:
    """Two concentric circles in 2-d (a wrapper of :func:`sklearn.datasets.make_circles`).

    Parameters
    ----------
    n_samples : int, default=1000
        Number of points (split evenly between the two circles).
    noise : float or None, default=0.05
        Standard deviation of the Gaussian noise added to each coordinate.
    factor : float, default=0.5
        Radius of the inner circle relative to the outer one (radius 1), in (0, 1).
    random_state : int, RandomState instance or None, default=None
        Seed for reproducible output.
    dtype : floating dtype, default=np.float32
        dtype of ``X``.

    Returns
    -------
    X : ndarray of shape (n_samples, 2)
    y : ndarray of shape (n_samples,)
        0 for the outer circle, 1 for the inner one (``int64``).
    """
    if not 0 < factor < 1:
        raise ValueError(f"factor must lie in (0, 1), got {factor}.")
    return _from_sklearn(
        _skd.make_circles, n_samples, dtype, noise=noise, factor=factor, random_state=random_state
    )


def make_moons(
    n_samples: int = 1000,
    *,
    noise: float | None = 0.05,
    random_state: Any = None,
    dtype: Any = np.float32,
) -> tuple[np.ndarray, np.ndarray]:
    """Two interleaving half circles in 2-d (a wrapper of :func:`sklearn.datasets.make_moons`).

    Parameters
    ----------
    n_samples : int, default=1000
        Number of points (split evenly between the two moons).
    noise : float or None, default=0.05
        Standard deviation of the Gaussian noise added to each coordinate.
    random_state : int, RandomState instance or None, default=None
        Seed for reproducible output.
    dtype : floating dtype, default=np.float32
        dtype of ``X``.

    Returns
    -------
    X : ndarray of shape (n_samples, 2)
    y : ndarray of shape (n_samples,)
        The moon of each point, 0 or 1 (``int64``).
    """
    return _from_sklearn(_skd.make_moons, n_samples, dtype, noise=noise, random_state=random_state)


def make_blobs(
    n_samples: int = 1000,
    *,
    n_features: int = 2,
    centers: int | np.ndarray = 3,
    cluster_std: float = 1.0,
    random_state: Any = None,
    dtype: Any = np.float32,
) -> tuple[np.ndarray, np.ndarray]:
    """Isotropic Gaussian blobs (a wrapper of :func:`sklearn.datasets.make_blobs`).

    Parameters
    ----------
    n_samples : int, default=1000
        Number of points (split evenly between the blobs).
    n_features : int, default=2
        Dimension (ignored when ``centers`` is an array).
    centers : int or ndarray of shape (n_centers, n_features), default=3
        Number of blobs, or their centres.
    cluster_std : float, default=1.0
        Standard deviation of each blob.
    random_state : int, RandomState instance or None, default=None
        Seed for reproducible output.
    dtype : floating dtype, default=np.float32
        dtype of ``X``.

    Returns
    -------
    X : ndarray of shape (n_samples, n_features)
    y : ndarray of shape (n_samples,)
        The blob of each point (``int64``).
    """
    return _from_sklearn(
        _skd.make_blobs,
        n_samples,
        dtype,
        n_features=_check_int(n_features, "n_features"),
        centers=centers,
        cluster_std=cluster_std,
        random_state=random_state,
    )


def make_shells(
    n_samples: int = 10000,
    n_features: int = 16,
    *,
    n_shells: int = 3,
    noise: float | None = 0.05,
    radii: Any = None,
    random_state: Any = None,
    dtype: Any = np.float32,
    chunk_size: int = _DEFAULT_CHUNK,
) -> tuple[np.ndarray, np.ndarray]:
    """Concentric spherical shells in ``n_features`` dimensions.

    Shell ``k`` is the sphere of radius ``radii[k]`` (default ``k + 1``); each point
    has a direction drawn uniformly on the unit sphere and a radius
    ``radii[k] + noise * N(0, 1)``. The shells share a centre, so plain k-means
    cannot separate them; a Gaussian kernel can. Labels are balanced (the shell
    sizes differ by at most one) and in random order.

    Points are generated in chunks of ``chunk_size`` rows directly into the
    output array, in ``dtype``: no temporary of the full size in float64 is made,
    so 10,000,000 x 16 float32 needs about the 640 MB of the result.

    Parameters
    ----------
    n_samples : int, default=10000
        Number of points.
    n_features : int, default=16
        Dimension of the space (>= 1).
    n_shells : int, default=3
        Number of shells (clusters), >= 1.
    noise : float or None, default=0.05
        Standard deviation of the Gaussian perturbation of each point's radius.
    radii : array-like of shape (n_shells,), optional
        Radii of the shells (positive). Default ``1, 2, ..., n_shells``.
    random_state : int, numpy Generator, RandomState or None, default=None
        Seed for reproducible output. The output depends on ``random_state``
        and ``chunk_size``.
    dtype : {np.float32, np.float64}, default=np.float32
        dtype of ``X``.
    chunk_size : int, default=262144
        Rows generated at a time.

    Returns
    -------
    X : ndarray of shape (n_samples, n_features)
    y : ndarray of shape (n_samples,)
        The shell of each point (``int64``), 0 for the innermost shell by default.

    Examples
    --------
    >>> X, y = make_shells(1000, 8, n_shells=2, noise=0.0, random_state=0)
    >>> X.shape, X.dtype, sorted(set(y.tolist()))
    ((1000, 8), dtype('float32'), [0, 1])
    """
    n_samples = _check_int(n_samples, "n_samples")
    n_features = _check_int(n_features, "n_features")
    n_shells = _check_int(n_shells, "n_shells")
    chunk_size = _check_int(chunk_size, "chunk_size")
    noise = _check_noise(noise)
    dt = _check_float_dtype(dtype, single_or_double=True)
    radii_arr = np.asarray(np.arange(1, n_shells + 1) if radii is None else radii, dtype=np.float64)
    if radii_arr.shape != (n_shells,):
        raise ValueError(
            f"radii must have shape ({n_shells},) (one per shell), got {radii_arr.shape}."
        )
    if not np.all(np.isfinite(radii_arr)) or np.any(radii_arr <= 0):
        raise ValueError(f"radii must be positive and finite, got {radii_arr.tolist()}.")
    radii_dt = radii_arr.astype(dt)
    rng = _as_generator(random_state)

    y = np.arange(n_samples, dtype=np.int64) % n_shells
    rng.shuffle(y)
    X = np.empty((n_samples, n_features), dtype=dt)
    tiny = np.finfo(dt).tiny
    for start in range(0, n_samples, chunk_size):
        block = X[start : start + chunk_size]
        rng.standard_normal(out=block, dtype=dt)
        norms = np.sqrt(np.einsum("ij,ij->i", block, block))
        np.maximum(norms, tiny, out=norms)
        radius = radii_dt[y[start : start + chunk_size]]
        if noise:
            radius = radius + dt.type(noise) * rng.standard_normal(len(block), dtype=dt)
        block *= (radius / norms)[:, None]
    return X, y


def _zipf(n, exponent=1.0):
    """Zipf weights 1 / rank^exponent over n ranks, normalised to sum 1 (float64)."""
    w = np.arange(1, n + 1, dtype=np.float64) ** -exponent
    return w / w.sum()


def _expected_distinct(p, lam):
    """E[number of distinct terms] of a Poisson(lam)-length document with term law p.

    With a Poisson number of tokens, the count of term t is Poisson(lam p_t) and
    independent across terms, so E[distinct] = sum_t (1 - exp(-lam p_t)).
    """
    return float(np.sum(-np.expm1(-lam * p)))


def _calibrate_length(p, target):
    """The Poisson mean length lam with E[distinct terms] = target (bisection)."""
    lo, hi = 0.0, max(1.0, float(target))
    while _expected_distinct(p, hi) < target:
        hi *= 2.0
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        if _expected_distinct(p, mid) < target:
            lo = mid
        else:
            hi = mid
    return hi


def _check_fraction(value: Any, name: str, low_open: bool) -> float:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a float, got {type(value).__name__}.")
    v = float(value)
    if not (0 < v <= 1 if low_open else 0 <= v <= 1):  # also refuses nan and inf
        interval = "(0, 1]" if low_open else "[0, 1]"
        raise ValueError(f"{name} must lie in {interval}, got {value}.")
    return v


def _topic_laws(rng, n_features, n_topics, topic_weight, density):
    """The corpus' laws: background Zipf over a random ranking of all terms; topic k
    Zipf over its own block of a random partition of the vocabulary; and the Poisson
    mean length of each topic's documents. Returns ``(background CDF, terms of each
    topic, topic CDFs, mean lengths (n_topics,))``."""
    background = np.empty(n_features)
    background[rng.permutation(n_features)] = _zipf(n_features)
    bg_cdf = np.cumsum(background)
    terms_of = np.array_split(rng.permutation(n_features), n_topics)
    topic_laws = [_zipf(t.size) for t in terms_of]
    topic_cdfs = [np.cumsum(law) for law in topic_laws]
    target = density * n_features
    lam = np.empty(n_topics)
    for k in range(n_topics):
        p = (1.0 - topic_weight) * background
        p[terms_of[k]] += topic_weight * topic_laws[k]
        lam[k] = _calibrate_length(p, min(target, n_features * (1 - 1e-9)))
    return bg_cdf, terms_of, topic_cdfs, lam


def _tfidf_in_place(data, indices, indptr, df, chunk_size):
    """Counts (CSR arrays) to scikit-learn's default TF-IDF, in place: times
    idf = ln((1 + n) / (1 + df)) + 1, then each row to unit L2 norm (norms in
    float64), chunk by chunk."""
    n_samples, dt = indptr.size - 1, data.dtype
    idf = (np.log((1.0 + n_samples) / (1.0 + df)) + 1.0).astype(dt)
    for start in range(0, data.size, 1 << 22):
        sl = slice(start, start + (1 << 22))
        data[sl] *= idf[indices[sl]]
    rows_nnz = np.diff(indptr)
    for r0 in range(0, n_samples, chunk_size):
        r1 = min(r0 + chunk_size, n_samples)
        vals = data[indptr[r0] : indptr[r1]]
        nonempty = rows_nnz[r0:r1] > 0
        sq = np.zeros(r1 - r0)
        if vals.size:
            starts = indptr[r0:r1][nonempty] - indptr[r0]
            sq[nonempty] = np.add.reduceat(vals.astype(np.float64) ** 2, starts)
        inv = np.divide(1.0, np.sqrt(sq), out=np.zeros_like(sq), where=nonempty)
        vals *= np.repeat(inv, rows_nnz[r0:r1]).astype(dt)


def make_topic_corpus(
    n_samples: int = 200_000,
    n_features: int = 50_000,
    *,
    n_topics: int = 20,
    density: float = 0.001,
    topic_weight: float = 0.5,
    tfidf: bool = True,
    random_state: Any = None,
    dtype: Any = np.float32,
    chunk_size: int = 8192,
):
    """A synthetic corpus of documents on topics, as a sparse document-term matrix.

    A bag-of-words model of text (documents x terms, ``n_features`` terms):

    - the *background* law over all terms is Zipf (weight 1 / rank) over a random
      ranking of the vocabulary: a few terms occur in most documents, as stop
      words do;
    - topic ``k`` prefers its own ``n_features // n_topics`` terms (the
      vocabulary is split at random), with a Zipf law over them;
    - a document of topic ``k`` has a Poisson number of tokens; each token is
      drawn from topic ``k``'s law with probability ``topic_weight``, else from
      the background. Its row holds the counts of its distinct terms.

    The Poisson mean length of each topic is chosen so that a document has
    ``density * n_features`` distinct terms on average (exactly: with Poisson
    lengths the count of term t is Poisson(lambda p_t), so
    E[distinct] = sum_t (1 - exp(-lambda p_t)), solved for lambda). Topics are
    balanced (sizes differ by at most one) and in random order.

    With ``tfidf=True`` the counts become scikit-learn's default TF-IDF
    (:class:`sklearn.feature_extraction.text.TfidfTransformer`: raw counts times
    idf = ln((1 + n) / (1 + df)) + 1, then each row scaled to unit L2 norm; a
    document with no tokens stays a zero row).

    Documents are drawn ``chunk_size`` at a time straight into the output
    arrays, which are allocated once for the total number of tokens (an upper
    bound of the number of stored values, about 1.3 times it for the defaults)
    and shrunk in place at the end: the peak memory is about that of the CSR
    arrays plus one chunk. 200,000 x 50,000 at density 0.001: about 10 million
    stored values, 80 MB in float32 with int32 indices.

    Parameters
    ----------
    n_samples : int, default=200000
        Number of documents (rows).
    n_features : int, default=50000
        Number of terms (columns), >= ``n_topics``.
    n_topics : int, default=20
        Number of topics (the labels ``y``).
    density : float in (0, 1], default=0.001
        Mean fraction of the terms that a document contains.
    topic_weight : float in [0, 1], default=0.5
        Probability that a token comes from the document's topic rather than from
        the background (0: the topics are indistinguishable).
    tfidf : bool, default=True
        Return L2-normalised TF-IDF rows; else the raw term counts.
    random_state : int, numpy Generator, RandomState or None, default=None
        Seed for reproducible output. The output depends on ``random_state``
        and ``chunk_size``.
    dtype : {np.float32, np.float64}, default=np.float32
        dtype of ``X``'s values.
    chunk_size : int, default=8192
        Documents generated at a time.

    Returns
    -------
    X : scipy.sparse.csr_matrix of shape (n_samples, n_features)
        Sorted indices, no explicit zeros, int32 indices when they fit.
    y : ndarray of shape (n_samples,)
        The topic of each document (``int64``).

    Examples
    --------
    >>> X, y = make_topic_corpus(1000, 2000, n_topics=5, density=0.01, random_state=0)
    >>> X.shape, X.dtype, X.format, sorted(set(y.tolist()))
    ((1000, 2000), dtype('float32'), 'csr', [0, 1, 2, 3, 4])
    >>> bool(abs(X.nnz / (1000 * 2000) - 0.01) < 0.002)
    True
    """
    import scipy.sparse as sp

    n_samples = _check_int(n_samples, "n_samples")
    n_topics = _check_int(n_topics, "n_topics")
    n_features = _check_int(n_features, "n_features")
    if n_features < n_topics:
        raise ValueError(
            f"n_features must be >= n_topics (each topic needs its own terms), got "
            f"n_features={n_features} < n_topics={n_topics}."
        )
    density = _check_fraction(density, "density", low_open=True)
    topic_weight = _check_fraction(topic_weight, "topic_weight", low_open=False)
    chunk_size = _check_int(chunk_size, "chunk_size")
    if not isinstance(tfidf, (bool, np.bool_)):
        raise TypeError(f"tfidf must be a bool, got {type(tfidf).__name__}.")
    dt = _check_float_dtype(dtype, single_or_double=True)
    rng = _as_generator(random_state)

    bg_cdf, terms_of, topic_cdfs, lam = _topic_laws(
        rng, n_features, n_topics, topic_weight, density
    )

    y = np.arange(n_samples, dtype=np.int64) % n_topics
    rng.shuffle(y)
    lengths = rng.poisson(lam[y])  # tokens per document, (n,)
    capacity = int(lengths.sum())  # >= the number of distinct (document, term) pairs
    idx_dtype = np.int32 if max(capacity, n_features) < np.iinfo(np.int32).max else np.int64
    data = np.empty(capacity, dtype=dt)
    indices = np.empty(capacity, dtype=idx_dtype)
    indptr = np.zeros(n_samples + 1, dtype=idx_dtype)
    df = np.zeros(n_features, dtype=np.int64)
    nnz = 0
    for start in range(0, n_samples, chunk_size):
        stop = min(start + chunk_size, n_samples)
        row = np.repeat(np.arange(stop - start), lengths[start:stop])  # document of each token
        from_topic = rng.random(row.size) < topic_weight
        u = rng.random(row.size)
        # the background's term of every token; a topic's tokens are drawn again below
        term = np.minimum(np.searchsorted(bg_cdf, u, side="right"), n_features - 1)
        tok_topic = y[start + row]
        for k in range(n_topics):
            sel = from_topic & (tok_topic == k)
            pos = np.searchsorted(topic_cdfs[k], u[sel], side="right")
            term[sel] = terms_of[k][np.minimum(pos, terms_of[k].size - 1)]
        # Counts per (document, term), sorted by document then term.
        uniq, counts = np.unique(row * n_features + term, return_counts=True)
        r, t = np.divmod(uniq, n_features)
        m = uniq.size
        data[nnz : nnz + m] = counts
        indices[nnz : nnz + m] = t
        indptr[start + 1 : stop + 1] = nnz + np.cumsum(np.bincount(r, minlength=stop - start))
        df += np.bincount(t, minlength=n_features)
        nnz += m
    data.resize(nnz, refcheck=False)  # in place: no copy of the arrays
    indices.resize(nnz, refcheck=False)
    if tfidf:
        _tfidf_in_place(data, indices, indptr, df, chunk_size)
    X = sp.csr_matrix((data, indices, indptr), shape=(n_samples, n_features), copy=False)
    X.has_sorted_indices = True
    return X, y


#: Synthetic generators by name (for demos and the command line). Each is called
#: as ``gen(n_samples=..., random_state=...)``; "topics" returns a sparse CSR X.
SYNTHETIC: dict[str, Any] = {
    "circles": make_circles,
    "moons": make_moons,
    "blobs": make_blobs,
    "shells": make_shells,
    "topics": make_topic_corpus,
}

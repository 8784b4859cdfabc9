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


def _check_n_samples(n_samples: Any, minimum: int = 1) -> int:
    if isinstance(n_samples, (bool, np.bool_)) or not isinstance(n_samples, numbers.Integral):
        raise TypeError(f"n_samples must be an int, got {type(n_samples).__name__}.")
    if n_samples < minimum:
        raise ValueError(f"n_samples must be >= {minimum}, got {n_samples}.")
    return int(n_samples)


def _check_float_dtype(dtype: Any) -> np.dtype:
    try:
        dt = np.dtype(dtype)
    except TypeError as exc:
        raise TypeError(f"dtype must be a floating numpy dtype, got {dtype!r}.") from exc
    if not np.issubdtype(dt, np.floating):
        raise TypeError(f"dtype must be a floating numpy dtype, got {dt}.")
    return dt


def _check_noise(noise: Any) -> float:
    if noise is None:
        return 0.0
    if isinstance(noise, (bool, np.bool_)) or not isinstance(noise, numbers.Real):
        raise TypeError(f"noise must be a non-negative float or None, got {type(noise).__name__}.")
    if not np.isfinite(noise) or noise < 0:
        raise ValueError(f"noise must be a non-negative finite float, got {noise}.")
    return float(noise)


def _as_generator(random_state: Any) -> np.random.Generator:
    """A :class:`numpy.random.Generator` from None, an int, a Generator or a RandomState."""
    if random_state is None or isinstance(random_state, (numbers.Integral, np.random.SeedSequence)):
        if isinstance(random_state, (bool, np.bool_)):
            raise TypeError("random_state must be None, an int or a numpy random generator.")
        return np.random.default_rng(random_state)
    if isinstance(random_state, np.random.Generator):
        return random_state
    if isinstance(random_state, np.random.RandomState):
        return np.random.default_rng(random_state.randint(np.iinfo(np.int32).max))
    raise TypeError(
        "random_state must be None, an int, a numpy Generator or a RandomState, "
        f"got {type(random_state).__name__}."
    )


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
    n_samples = _check_n_samples(n_samples)
    dt = _check_float_dtype(dtype)
    noise = _check_noise(noise)
    if not 0 < factor < 1:
        raise ValueError(f"factor must lie in (0, 1), got {factor}.")
    X, y = _skd.make_circles(
        n_samples=n_samples, noise=noise or None, factor=factor, random_state=random_state
    )
    return X.astype(dt), y.astype(np.int64)


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
    n_samples = _check_n_samples(n_samples)
    dt = _check_float_dtype(dtype)
    noise = _check_noise(noise)
    X, y = _skd.make_moons(n_samples=n_samples, noise=noise or None, random_state=random_state)
    return X.astype(dt), y.astype(np.int64)


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
    n_samples = _check_n_samples(n_samples)
    dt = _check_float_dtype(dtype)
    if isinstance(n_features, bool) or not isinstance(n_features, numbers.Integral):
        raise TypeError(f"n_features must be an int, got {type(n_features).__name__}.")
    if n_features < 1:
        raise ValueError(f"n_features must be >= 1, got {n_features}.")
    X, y = _skd.make_blobs(
        n_samples=n_samples,
        n_features=int(n_features),
        centers=centers,
        cluster_std=cluster_std,
        random_state=random_state,
    )
    return X.astype(dt), y.astype(np.int64)


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
    n_samples = _check_n_samples(n_samples)
    if isinstance(n_features, bool) or not isinstance(n_features, numbers.Integral):
        raise TypeError(f"n_features must be an int, got {type(n_features).__name__}.")
    if n_features < 1:
        raise ValueError(f"n_features must be >= 1, got {n_features}.")
    if isinstance(n_shells, bool) or not isinstance(n_shells, numbers.Integral):
        raise TypeError(f"n_shells must be an int, got {type(n_shells).__name__}.")
    if n_shells < 1:
        raise ValueError(f"n_shells must be >= 1, got {n_shells}.")
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, numbers.Integral):
        raise TypeError(f"chunk_size must be an int, got {type(chunk_size).__name__}.")
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}.")
    noise = _check_noise(noise)
    dt = _check_float_dtype(dtype)
    if dt not in (np.dtype(np.float32), np.dtype(np.float64)):
        raise TypeError(f"dtype must be np.float32 or np.float64, got {dt}.")
    if radii is None:
        radii_arr = np.arange(1, n_shells + 1, dtype=np.float64)
    else:
        radii_arr = np.asarray(radii, dtype=np.float64)
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
    X = np.empty((n_samples, int(n_features)), dtype=dt)
    tiny = np.finfo(dt).tiny
    for start in range(0, n_samples, int(chunk_size)):
        stop = min(start + int(chunk_size), n_samples)
        block = X[start:stop]
        rng.standard_normal(out=block, dtype=dt)
        norms = np.sqrt(np.einsum("ij,ij->i", block, block))
        np.maximum(norms, tiny, out=norms)
        radius = radii_dt[y[start:stop]]
        if noise:
            radius = radius + dt.type(noise) * rng.standard_normal(stop - start, dtype=dt)
        block *= (radius / norms)[:, None]
    return X, y


#: Synthetic generators by name (for demos and the command line).
SYNTHETIC: dict[str, Any] = {
    "circles": make_circles,
    "moons": make_moons,
    "blobs": make_blobs,
    "shells": make_shells,
}

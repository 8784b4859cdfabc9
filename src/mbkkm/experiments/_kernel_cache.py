"""A folder of kernel matrices built by the runner, shared by its processes.

A graph kernel on MNIST (a 70,000-point k-NN graph) takes minutes and gigabytes
to build. With a cache folder, the first process that needs a matrix builds it
under an exclusive lock and saves it as ``.npy`` arrays; every other process,
and every later resume of the grid, waits for the lock and maps the same files
read-only (``numpy.load(mmap_mode="r")``), so side-by-side workers share one
copy through the page cache instead of holding one each.

A matrix is keyed by everything it depends on: the dataset (and its synthetic
size), the number of points, a fingerprint of the loaded points themselves
(:func:`data_fingerprint`: their shape, dtype and a hash of every value, so a
dataset file replaced, or found in another folder with other contents, builds a
new matrix), the kernel and its resolved parameters, and the code
(:func:`source_fingerprint`: the mbkkm commit or version, a hash of the package's
source files, so that an uncommitted edit, a ``+dirty`` commit, is a new
version, and the numpy, scipy and scikit-learn versions). The build's wall
and CPU time are stored with it and reported on the rows that use it, as if
each run had built its own (as without a cache).

Layout: ``<folder>/<key>/`` holds ``meta.json`` and the arrays (dense: ``K.npy``;
sparse CSR: ``data.npy``, ``indices.npy``, ``indptr.npy``; low-rank: ``U.npy``,
``weights.npy``). ``meta.json`` is written last, through a temporary file and an
atomic rename: an entry without it is incomplete (a build was killed) and is
built again.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from .._files import atomic_write
from ..kernels._graph import LowRankKernel

_META = "meta.json"


def cache_key(
    *,
    dataset: str,
    synthetic_samples,
    n_samples: int,
    kernel: str,
    params: dict,
    source: str,
    data: str = "",
) -> str:
    """20 hex digits naming one matrix (see the module docstring for what it covers).

    ``data`` is the :func:`data_fingerprint` of the points, ``source`` the
    :func:`source_fingerprint` of the code.
    """
    parts = {**locals(), "n_samples": int(n_samples)}  # the arguments, by name
    blob = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha1(blob.encode()).hexdigest()[:20]


def data_fingerprint(X) -> str:
    """A hash of the points ``X`` (an array or a scipy.sparse matrix): their shape,
    dtype and every stored value, so that no matrix is reused for other data.

    It reads the array once (about a second for MNIST's 70,000 x 784 floats), a
    small part of any build the cache saves.
    """
    h = hashlib.blake2b(digest_size=16)
    if sp.issparse(X):
        X = sp.csr_matrix(X)
        X.sort_indices()  # one layout per matrix
        arrays = [X.data, X.indices, X.indptr]
    else:
        arrays = [np.asarray(X)]
    h.update(json.dumps([type(X).__name__, list(X.shape)]).encode())
    for a in arrays:
        a = np.ascontiguousarray(a)
        h.update(f"{a.dtype.str}{a.shape}".encode())
        h.update(a.reshape(-1).view(np.uint8).data)  # the bytes, not copied
    return h.hexdigest()


def _tree_digest(folder: Path) -> str:
    """A hash of the names and contents of the ``.py`` files under ``folder``."""
    h = hashlib.blake2b(digest_size=16)
    for path in sorted(folder.rglob("*.py")):
        h.update(path.relative_to(folder).as_posix().encode() + b"\0")
        h.update(path.read_bytes() + b"\0")
    return h.hexdigest()


@functools.cache
def _package_digest() -> str:
    return _tree_digest(Path(__file__).resolve().parent.parent)


def source_fingerprint(source: str | None) -> str:
    """``source`` (the mbkkm commit, or its version) with a hash of the mbkkm
    package's source files and the numpy, scipy and scikit-learn versions: a
    commit with uncommitted changes (``+dirty``), or a version whose files were
    edited, is another source for each edit."""
    import scipy
    import sklearn

    versions = f"numpy {np.__version__}, scipy {scipy.__version__}, sklearn {sklearn.__version__}"
    return f"{source or ''}; files {_package_digest()}; {versions}"


def _lock(path: Path):
    """An exclusive advisory lock on ``path`` (blocking), held until the returned
    context (the open file; no lock where there is no ``fcntl``) is closed."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not on POSIX: no lock
        return nullcontext()
    f = open(path, "a")
    fcntl.flock(f.fileno(), fcntl.LOCK_EX)
    return f


def _save(folder: Path, K, seconds: float, cpu_seconds: float) -> None:
    """Write ``K`` and the time of its build to ``folder`` (replaced whole)."""
    meta = {"seconds": seconds, "cpu_seconds": cpu_seconds}
    tmp = folder.with_name(folder.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    if isinstance(K, np.ndarray):
        arrays, kind = {"K": K}, "dense"
    elif sp.issparse(K):
        K = K.tocsr()
        arrays, kind = {"data": K.data, "indices": K.indices, "indptr": K.indptr}, "csr"
    elif isinstance(K, LowRankKernel):
        arrays, kind = {"U": K.U, "weights": K.weights}, "lowrank"
        meta.update(error=K.error, description=K.description)
    else:
        raise TypeError(f"cannot cache a kernel matrix of type {type(K).__name__}")
    for name, arr in arrays.items():
        with atomic_write(tmp / f"{name}.npy") as f:  # fsynced
            np.save(f, np.ascontiguousarray(arr))
    with atomic_write(tmp / _META, "w") as f:
        json.dump({**meta, "kind": kind, "shape": list(K.shape)}, f, sort_keys=True)
    shutil.rmtree(folder, ignore_errors=True)
    os.replace(tmp, folder)


def _load(folder: Path) -> tuple[Any, dict]:
    meta = json.loads((folder / _META).read_text())

    def arr(name):
        return np.load(folder / f"{name}.npy", mmap_mode="r", allow_pickle=False)

    kind, shape = meta["kind"], tuple(meta["shape"])
    if kind == "dense":
        K = arr("K")
    elif kind == "csr":
        K = sp.csr_matrix((arr("data"), arr("indices"), arr("indptr")), shape=shape, copy=False)
    elif kind == "lowrank":
        K = LowRankKernel(arr("U"), arr("weights"), meta["error"], meta.get("description", ""))
    else:  # pragma: no cover - written by a newer version
        raise ValueError(f"unknown cached kernel kind {kind!r} in {folder}")
    return K, meta


def cached_matrix(folder: str | os.PathLike, key: str, build) -> tuple[Any, float, float]:
    """The matrix named ``key`` in ``folder``, built with ``build()`` when absent.

    Parameters
    ----------
    folder : path
        The cache folder (created).
    key : str
        From :func:`cache_key`.
    build : callable
        ``build() -> (K, seconds, cpu_seconds)``.

    Returns
    -------
    K : ndarray, scipy.sparse.csr_matrix or LowRankKernel
        Memory-mapped from the cache's files, read-only.
    seconds, cpu_seconds : float
        Wall and CPU time of the build that made it.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    entry = folder / key
    with _lock(folder / f"{key}.lock"):
        if not (entry / _META).exists():
            _save(entry, *build())  # the built matrix is freed when _save returns
        K, meta = _load(entry)
    return K, float(meta["seconds"]), float(meta["cpu_seconds"])

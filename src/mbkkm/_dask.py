"""Fit and predict on Dask arrays: the batch rows travel once, the model travels once.

Fit
    The estimators draw every random index exactly as for an in-memory array (the
    init subsample, then the whole batch plan of ``max_iter`` iterations, from
    ``random_state``), and read rows through a :class:`DaskRows` instead of an
    ndarray. ``DaskRows`` answers ``X[indices]`` from rows it has gathered; what it
    does not hold it gathers in **one pass**: the sorted distinct indices are
    grouped by chunk, one task per chunk takes its rows, and one ``compute``
    brings them back. After the estimator hands it the batch plan
    (:meth:`DaskRows.prefetch`), the rows of all iterations are gathered in one
    such pass, or in groups of iterations when b x d x max_iter would exceed the
    memory budget. The fit itself then runs locally on the gathered rows, so a
    seed gives the same model on a numpy array and on a Dask array of the same
    data (bit for bit when the kernel parameters do not depend on the data;
    see :meth:`DaskRows.resolve_kernel` for the data-driven gamma).

    The init subsample is gathered in its own (small) pass: k-means++ consumes
    ``random_state`` between the init subsample and the batch plan, a number of
    draws that depends on the data, so the plan is only known after the init.

Labels, predict, transform, score
    Computed per chunk with ``map_blocks`` (or one delayed task per chunk), the
    fitted model shipped once: one ``dask.delayed`` object that every task of the
    graph references by key (not ``client.scatter``: a key of the graph is run
    again when the workers holding it die, scattered data is lost with them).

Rows on disk
    :func:`read_npy` opens a ``.npy`` file as a Dask array without reading it: the
    graph holds the file's path, shape and dtype (a few hundred bytes), and each
    chunk's task maps the file and copies its rows where it runs, on a worker.
    (``da.from_array(np.load(path, mmap_mode="r"))`` would instead pickle the
    whole memory map, so every row, into the graph.)

Each task runs with one thread (BLAS and mbkkm's own), as Dask expects of a task:
the scheduler's workers are the parallelism.

Dask is imported lazily: :func:`is_dask_array` looks at ``sys.modules`` first, so
``import mbkkm`` never imports dask.
"""

from __future__ import annotations

import copy
import os
import sys
import uuid

import numpy as np

from ._validation import check_sample_weight
from .backends._threads import single_thread
from .kernels import get_spec, resolve_kernel
from .kernels._kernel import check_nonnegative


def is_dask_array(X):
    """Whether X is a Dask collection (array, DataFrame, ...), without importing dask."""
    if "dask" not in sys.modules:
        return False
    from dask import is_dask_collection

    return is_dask_collection(X)


# --------------------------------------------------------------------------- files
class NpyFile:
    """A ``.npy`` file read where it is sliced: what :func:`read_npy` wraps.

    Pickles as its path, shape, dtype, order and stamp (never the data);
    ``self[key]`` maps the file read-only and returns a copy of the selected part,
    so a task holds the rows it asked for and no open map. The file's size and
    modification time, recorded here, are checked at each read: a file changed
    after :func:`read_npy` raises instead of returning other rows.
    """

    def __init__(self, path):
        self.path = os.path.abspath(os.fspath(path))
        with open(self.path, "rb") as fh:
            if fh.read(6) != b"\x93NUMPY":  # np.load would speak of pickles
                raise ValueError(
                    f"{path}: not a .npy file (no numpy header); read_npy_dask reads files "
                    "written by numpy.save"
                )
        mm = np.load(self.path, mmap_mode="r")  # reads the header only
        self.shape, self.dtype = tuple(mm.shape), mm.dtype
        self.order = "F" if mm.ndim > 1 and mm.flags.f_contiguous else "C"
        self.ndim = len(self.shape)
        self.stamp = self._stamp()

    def _stamp(self):
        st = os.stat(self.path)
        return st.st_size, st.st_mtime_ns

    def __repr__(self):
        return f"NpyFile({self.path!r}, shape={self.shape}, dtype={self.dtype})"

    def __dask_tokenize__(self):
        return ("mbkkm.NpyFile", self.path, self.shape, str(self.dtype), self.order, self.stamp)

    def __getitem__(self, key):
        if self._stamp() != self.stamp:
            raise RuntimeError(
                f"{self.path} changed after it was opened as a Dask array "
                "(size or modification time); open it again with mbkkm.read_npy_dask"
            )
        mm = np.load(self.path, mmap_mode="r")  # the same file (stamp): same header
        return np.array(mm[key])  # a copy: the map is closed when mm goes


def read_npy(path, chunk_rows=None):
    """A ``.npy`` file as a Dask array chunked by rows, read by the tasks themselves.

    Only the header is read here. Each chunk's task maps the file read-only where
    it runs and copies its rows, so on a distributed cluster the **workers** read
    the file (the path must be readable there, e.g. a shared file system) and the
    client never holds the rows.

    Parameters
    ----------
    path : str or path-like
        A ``.npy`` file (``numpy.save``, or ``numpy.lib.format.open_memmap`` for one
        written piece by piece). Made absolute here: the workers' working directory
        is not the client's.
    chunk_rows : int or None
        Rows per chunk (the last one may be shorter); None lets Dask choose
        (``"auto"``: chunks of about ``array.chunk-size``, 128 MiB by default).
        The columns are one chunk.

    Returns
    -------
    dask.array.Array
        Of the file's shape and dtype. Its graph holds the file's path, shape,
        dtype and header offset, not the data.

    Examples
    --------
    >>> import numpy as np, tempfile, os
    >>> from mbkkm import read_npy_dask
    >>> path = os.path.join(tempfile.mkdtemp(), "x.npy")
    >>> np.save(path, np.arange(12.0).reshape(6, 2))
    >>> X = read_npy_dask(path, chunk_rows=4)
    >>> X.chunks
    ((4, 2), (2,))
    >>> X[4:].compute()
    array([[ 8.,  9.],
           [10., 11.]])
    """
    import dask.array as da
    from dask.base import tokenize

    source = NpyFile(path)
    if source.ndim < 1:
        raise ValueError(f"{path}: a 0-d array has no rows")
    rows = "auto" if chunk_rows is None else int(chunk_rows)
    if rows != "auto" and rows < 1:
        raise ValueError(f"chunk_rows must be a positive integer, got {chunk_rows!r}")
    chunks = (rows,) + (-1,) * (source.ndim - 1)
    return da.from_array(
        source,
        chunks=chunks,
        name="read-npy-" + tokenize(source, chunks),
        lock=False,
        asarray=False,
        fancy=False,
        meta=np.empty((0,) * source.ndim, dtype=source.dtype),
    )


# --------------------------------------------------------------------------- checks
def check_dask_array(X, *, n_features=None, input_name="X"):
    """A 2-D float32/float64 Dask array with known chunks and one chunk of columns.

    The Dask counterpart of scikit-learn's ``check_array(dtype=[float64, float32])``:
    float32 stays float32, other real dtypes become float64 (lazily). Chunks that
    are scipy.sparse matrices (``X._meta``) are refused with a ValueError.
    """
    import dask.array as da

    if not isinstance(X, da.Array):
        kind = type(X).__name__
        hint = ""
        if hasattr(X, "to_dask_array"):
            hint = f"; convert it with {input_name}.to_dask_array(lengths=True)"
        raise TypeError(f"{input_name}: a Dask {kind} is not supported, only a Dask array is{hint}")
    meta = getattr(X, "_meta", None)
    sparse = sys.modules.get("scipy.sparse")  # not imported here when it is not loaded
    if sparse is not None and sparse.issparse(meta):
        raise ValueError(
            f"{input_name}: a Dask array of scipy.sparse chunks ({type(meta).__name__}) is "
            "not supported. Either compute it into one scipy.sparse CSR matrix "
            f"({input_name}.compute(), then scipy.sparse.csr_matrix(...) if needed) and "
            f"pass that, or densify its chunks ({input_name}.map_blocks(lambda b: "
            "b.toarray(), dtype=...)) if the dense array fits the workers' memory"
        )
    if X.ndim != 2:
        raise ValueError(
            f"{input_name}: expected a 2-D Dask array of shape "
            f"(n_samples, n_features), got {X.ndim} dimension(s) "
            f"(shape {X.shape})"
        )
    if any(np.isnan(c) for axis in X.chunks for c in axis):
        raise ValueError(
            f"{input_name}: the Dask array has unknown chunk sizes (shape "
            f"{X.shape}); call {input_name}.compute_chunk_sizes() first, or "
            "build it with known lengths (e.g. to_dask_array(lengths=True))"
        )
    if X.dtype.kind not in "biuf":
        raise TypeError(
            f"{input_name}: a Dask array of dtype {X.dtype} is not supported; "
            "expected real numbers (float32 is kept, other real dtypes "
            "become float64)"
        )
    for size, what in zip(X.shape, ("sample", "feature")):
        if size < 1:
            raise ValueError(
                f"{input_name}: found array with 0 {what}(s) (shape {X.shape}) "
                "while a minimum of 1 is required"
            )
    if n_features is not None and X.shape[1] != n_features:
        raise ValueError(
            f"{input_name} has {X.shape[1]} features, but the estimator is "
            f"expecting {n_features} features as input"
        )
    if X.dtype not in (np.float32, np.float64):
        X = X.astype(np.float64)
    return X.rechunk({1: -1})  # one chunk of columns (X itself when it has one)


# --------------------------------------------------------------------------- gather
def _take_rows(block, local_idx):
    return np.asarray(block)[local_idx]


def _gather_tasks(blocks, bounds, indices):
    """One delayed task per chunk holding some of the sorted distinct ``indices``."""
    import dask

    block_of = np.searchsorted(bounds, indices, side="right") - 1
    local = (indices - bounds[block_of]).astype(np.intp)
    chunks, starts = np.unique(block_of, return_index=True)  # sorted: one run per chunk
    take = dask.delayed(_take_rows, pure=True)
    return [take(blocks[i], part) for i, part in zip(chunks, np.split(local, starts[1:]))]


def gather_rows(X, indices):
    """Rows ``X[indices]`` of a Dask array in one pass (one task per chunk involved).

    Parameters
    ----------
    X : dask.array.Array of shape (n_samples, n_features)
        With known chunk sizes and one chunk of columns.
    indices : array-like of int
        Any order, repeats allowed.

    Returns
    -------
    rows : ndarray of shape (len(indices), n_features)
    """
    return DaskRows(X)[np.asarray(indices, dtype=np.intp)]


class DaskRows:
    """The rows of a Dask array, as the fit reads them: ``rows[indices]`` -> ndarray.

    Holds the rows of the last gather (sorted distinct indices and their rows); a
    request it cannot answer is gathered in one pass. After :meth:`prefetch`, a
    request for a batch of the plan that is not held gathers the rows of the next
    group of iterations instead.

    Parameters
    ----------
    X : dask.array.Array
        Checked by :func:`check_dask_array`.
    working_memory : float or None
        Budget in MiB of the gathered rows (None: scikit-learn's setting).
    check_rows : callable or None
        ``check_rows(rows)`` raises on rows the fit cannot compute with (values too
        large for the kernel arithmetic): called on every gathered set of rows and on
        every chunk the fit labels, where the rows are read anyway.

    Attributes
    ----------
    n_passes : int
        Number of gathers run (each one ``compute``).
    n_rows_gathered : int
        Distinct rows transferred, summed over the gathers.
    """

    def __init__(self, X, working_memory=None, check_rows=None):
        self.check_rows = check_rows
        self.shape = tuple(int(s) for s in X.shape)
        self.dtype = X.dtype
        self.ndim = 2
        if working_memory is None:
            from sklearn import get_config

            working_memory = get_config()["working_memory"]
        self.budget = int(working_memory * 2**20)
        self._bounds = np.concatenate([[0], np.cumsum(X.chunks[0])]).astype(np.int64)
        self._blocks = X.to_delayed(optimize_graph=True).ravel()
        self._keys = np.empty(0, dtype=np.intp)
        self._rows = np.empty((0, self.shape[1]), dtype=self.dtype)
        self._plan = np.empty((0, 0), dtype=np.intp)  # the batch plan, after prefetch
        self._group = 1
        self._next_it = 0
        self.n_passes = 0
        self.n_rows_gathered = 0

    def __len__(self):
        return self.shape[0]

    def __repr__(self):
        return (
            f"DaskRows(shape={self.shape}, dtype={self.dtype}, chunks="
            f"{len(self._blocks)}, held={self._keys.size})"
        )

    def __array__(self, dtype=None, copy=None):
        raise TypeError(
            "DaskRows: refusing to load the whole Dask array into memory; "
            "index it with the rows you need"
        )

    # ------------------------------------------------------------------ reading
    def _normalize(self, key):
        n = self.shape[0]
        if isinstance(key, slice):
            return np.arange(*key.indices(n), dtype=np.intp)
        if isinstance(key, tuple):
            raise TypeError("DaskRows supports row indexing only")
        idx = np.asarray(key)
        if idx.dtype == bool:
            return np.flatnonzero(idx)
        if idx.dtype.kind not in "iu":
            raise TypeError(f"DaskRows: row indices must be integers, got {idx.dtype}")
        idx = idx.astype(np.intp, copy=False)
        if idx.size and (idx.min() < -n or idx.max() >= n):
            raise IndexError(f"row index out of range for {n} rows")
        return np.where(idx < 0, idx + n, idx)

    def _lookup(self, idx):
        pos = np.searchsorted(self._keys, idx)
        if pos.size and (pos.max() >= self._keys.size or np.any(self._keys[pos] != idx)):
            return None
        return self._rows[pos]

    def _load(self, distinct):
        """Gather the rows of the sorted distinct indices, in one pass."""
        import dask

        parts = dask.compute(*_gather_tasks(self._blocks, self._bounds, distinct))
        rows = np.concatenate(parts) if parts else np.empty((0, self.shape[1]), dtype=self.dtype)
        if not np.all(np.isfinite(rows)):
            raise ValueError("Input X contains NaN or infinity.")
        if self.check_rows is not None:
            self.check_rows(rows)
        self._keys, self._rows = distinct, np.ascontiguousarray(rows, dtype=self.dtype)
        self.n_passes += 1
        self.n_rows_gathered += distinct.size

    def __getitem__(self, key):
        idx = self._normalize(key)
        scalar = idx.ndim == 0
        idx = np.atleast_1d(idx)
        rows = self._lookup(idx)
        if rows is None:
            it = self._find_batch(idx)  # a batch of the plan: its group of iterations
            if it is None:
                self._load(np.unique(idx))
            else:
                self._load_group(it)
            rows = self._lookup(idx)
        return rows[0] if scalar else rows

    # ------------------------------------------------------------------ plan
    def prefetch(self, plan):
        """Gather the rows of the batch plan (shape (n_iter, b): an array or a
        :class:`~mbkkm._core._init.BatchPlan`, read forwards) in one pass.

        In groups of ``budget // (b * d * itemsize)`` iterations when the whole
        plan would exceed the memory budget; later groups are gathered when the fit
        asks for their first batch.
        """
        per_iter = max(1, plan.shape[1] * self.shape[1] * self.dtype.itemsize)
        self._plan = plan
        self._group = max(1, min(plan.shape[0], self.budget // per_iter))
        self._next_it = 0
        if plan.shape[0]:
            self._load_group(0)

    def _find_batch(self, idx):
        later = range(self._next_it, len(self._plan))
        return next((it for it in later if np.array_equal(self._plan[it], idx)), None)

    def _load_group(self, it):
        stop = min(self._plan.shape[0], it + self._group)
        self._load(np.unique(self._plan[it:stop]))
        self._next_it = stop

    def _block_weights(self, sample_weight):
        """The weights of the rows of each chunk, float64 (Nones without weights)."""
        if sample_weight is None:
            return [None] * len(self._blocks)
        return np.split(np.asarray(sample_weight, dtype=np.float64), self._bounds[1:-1])

    def labels_inertia(self, estimator, sample_weight=None):
        """labels_ (a persisted Dask array) and inertia_ (a float) in one pass.

        Each chunk's task calls ``estimator._labels_inertia(block, w_block)`` on the
        model shipped once.
        """
        import dask
        import dask.array as da

        model = _ship(estimator)
        parts, labels = [], []
        weights = self._block_weights(sample_weight)
        for block, w, size in zip(self._blocks, weights, np.diff(self._bounds)):
            part = dask.delayed(_block_labels_inertia, pure=True, nout=2)(
                model, block, w, self.check_rows
            )
            parts.append(part[1])
            labels.append(da.from_delayed(part[0], shape=(int(size),), dtype=np.intp))
        inertia = dask.delayed(sum, pure=True)(parts)
        # not optimised: the array's optimisation would fuse each chunk's task into
        # tasks of its own, and every chunk would be labelled twice
        labels, inertia = dask.persist(da.concatenate(labels), inertia, optimize_graph=False)
        return labels, float(inertia.compute())

    # ------------------------------------------------------------------ kernel
    def resolve_kernel(
        self, kernel, *, gamma=None, kernel_params=None, X=None, sample_weight=None, **params
    ):
        """:func:`mbkkm.kernels.resolve_kernel` with the data statistics from Dask
        (``params``: its other parameters, passed on; ``X`` is ignored).

        The data-driven gamma (1 / mean squared pairwise distance, = 1 / (2 sum of
        feature variances)) and the non-negativity check of chi2 come from one pass
        of per-chunk reductions (weighted counts, means and centred sums of squares
        in float64, merged with Chan's pairwise formula). The in-memory path sums
        the same quantities in another order, so this gamma equals it to rounding
        (relative ~1e-15), not bit for bit.
        """
        spec = get_spec(kernel)
        given = kernel_params if isinstance(kernel_params, dict) else {}
        need_gamma = (
            spec is not None
            and "gamma" in spec.params
            and gamma is None
            and given.get("gamma") is None
            and spec.default_gamma == "data"
        )
        need_min = spec is not None and spec.nonnegative_data
        if need_gamma or need_min:
            msd, low = self.moments(sample_weight)
            if need_min:  # the in-memory check, on the minimum alone: the same message
                check_nonnegative(np.array([low]), spec.name)
            if need_gamma:
                gamma = 1.0 / msd if msd > 0 else 1.0
        # Zero rows with the right width: n_features-based defaults, no data pass.
        proxy = np.empty((0, self.shape[1]), dtype=self.dtype)
        return resolve_kernel(kernel, gamma=gamma, kernel_params=kernel_params, X=proxy, **params)

    def moments(self, sample_weight=None):
        """(mean squared pairwise distance, minimum entry) of the rows, in one pass."""
        import dask

        moments = dask.delayed(_block_moments, pure=True)
        stats = dask.compute(*map(moments, self._blocks, self._block_weights(sample_weight)))
        self.n_passes += 1
        total, mean, m2, low = stats[0]
        for w_b, mean_b, m2_b, low_b in stats[1:]:
            # Chan, Golub & LeVeque: merge (count, mean, M2) of two parts.
            low = min(low, low_b)
            if w_b == 0:
                continue
            n_ab = total + w_b
            delta = mean_b - mean
            mean = mean + delta * (w_b / n_ab)
            m2 = m2 + m2_b + delta * delta * (total * w_b / n_ab)
            total = n_ab
        if not (np.all(np.isfinite(m2)) and np.isfinite(low)):
            raise ValueError("Input X contains NaN or infinity.")
        return 2.0 * float(m2.sum()) / total, float(low)


def _block_moments(block, w):
    x = np.asarray(block, dtype=np.float64)
    low = float(x.min()) if x.size else np.inf
    if w is None:
        total = float(x.shape[0])
        mean = x.mean(0) if x.shape[0] else np.zeros(x.shape[1])
    else:
        total = float(w.sum())
        mean = (w @ x) / total if total > 0 else np.zeros(x.shape[1])
    c = x - mean
    m2 = np.einsum("ij,ij->j", c, c) if w is None else w @ (c * c)
    return total, mean, m2, low


# --------------------------------------------------------------------------- fit
def dask_rows(X, working_memory=None, check_rows=None):
    """Check a Dask X at the start of ``MiniBatchKMeans.fit``: the :class:`DaskRows` the
    fit reads (the kernel estimators check theirs in ``fit_input``)."""
    return DaskRows(check_dask_array(X), working_memory, check_rows)


# --------------------------------------------------------------------------- predict
def _ship(estimator):
    """The model as one key of the graph, that every task of a pass references: a
    shallow copy of the estimator without its Dask attributes (labels_ of a Dask fit).

    Sent once with the graph; a distributed scheduler runs the key on one worker
    and copies its result to the others as a dependency. Unlike data scattered with
    ``client.scatter``, the key can be run again: a pass survives losing every
    worker that held the model (a scattered model would be lost with them, and the
    pass would fail).
    """
    import dask

    model = copy.copy(estimator)
    for name, value in list(vars(model).items()):
        if is_dask_array(value):
            delattr(model, name)
    return dask.delayed(model, name=f"mbkkm-model-{uuid.uuid4().hex}", pure=False)


def _check_predict_input(estimator, X):
    from sklearn.utils.validation import check_is_fitted

    check_is_fitted(estimator)
    return check_dask_array(X, n_features=estimator.n_features_in_)


def _block_call(block, model, method):
    with single_thread():  # Dask's workers are the parallelism: one thread per task
        return getattr(model, method)(block)


def _per_chunk(estimator, X, method):
    """``estimator.<method>`` on each chunk of X, the model shipped once; the output's
    dtype and width are those of the method on one zero row."""
    X = _check_predict_input(estimator, X)
    out = np.asarray(getattr(estimator, method)(np.zeros((1, X.shape[1]), dtype=X.dtype)))
    shape = {"drop_axis": 1} if out.ndim == 1 else {"chunks": (X.chunks[0], (out.shape[1],))}
    meta = np.empty((0,) * out.ndim, dtype=out.dtype)
    return X.map_blocks(_block_call, _ship(estimator), method, dtype=out.dtype, meta=meta, **shape)


def chunked_like(values, X):
    """Host results of X's rows (``(n,)`` or ``(n, k)``) as a Dask array chunked as X's
    rows."""
    import dask.array as da

    return da.from_array(values, chunks=(X.chunks[0], *values.shape[1:]))


def dask_predict(estimator, X):
    """``estimator.predict`` per chunk: a Dask array of shape (n_samples,)."""
    return _per_chunk(estimator, X, "predict")


def dask_transform(estimator, X):
    """``estimator.transform`` per chunk: a Dask array of shape (n_samples, n_out)."""
    return _per_chunk(estimator, X, "transform")


def _block_score(block, w, model):
    w = None if w is None else np.asarray(w).ravel()
    with single_thread():
        return np.array([model.score(block, sample_weight=w)], dtype=np.float64)


def dask_score(estimator, X, sample_weight=None):
    """``estimator.score`` summed over the chunks (one pass): a float."""
    import dask.array as da

    X = _check_predict_input(estimator, X)
    if is_dask_array(sample_weight):
        sample_weight = np.asarray(sample_weight.compute())
    # Chunked like the rows of X; None: no weights or unit weights (check_sample_weight).
    w = check_sample_weight(sample_weight, np.empty((X.shape[0], 0)))
    parts = da.map_blocks(
        _block_score,
        X,
        None if w is None else da.from_array(w, chunks=(X.chunks[0],))[:, None],
        _ship(estimator),
        drop_axis=1,
        chunks=((1,) * len(X.chunks[0]),),
        dtype=np.float64,
    )
    return float(parts.sum().compute())


def _block_labels_inertia(model, block, w, check_rows=None):
    block = np.ascontiguousarray(block)
    if check_rows is not None:
        check_rows(block)
    with single_thread():
        labels, inertia = model._labels_inertia(block, w)
    return labels, float(inertia)

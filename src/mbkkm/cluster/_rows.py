"""One adapter per kind of input: all the branching on the kind of X is here.

A fit's validated X is wrapped once in the adapter of its kind (by the kernel's
kind, :func:`._base.kernel_kind`, then by :func:`rows_of`); the estimators and
:func:`._base.fit_input` then ask it questions instead of testing the kind
again. The adapters return data; they never call into the estimator:

- :class:`Rows`: a numpy array or memmap; the core works on its rows;
- :class:`SparseRows`: a scipy sparse matrix (canonical CSR, never densified);
- :class:`TensorRows`: a torch tensor, on its device;
- :class:`DaskFitRows`: a Dask array, its rows gathered batch plan by batch plan;
- :class:`PrecomputedRows`: the (n, n) kernel matrix; the core works on point
  indices 0..n-1;
- :class:`GraphRows`: the points of a graph kernel ("knn", "heat"); point indices
  too, the kernel matrix being built on the k-NN graph of the points.
"""

from __future__ import annotations

import functools

import numpy as np
from scipy import sparse
from sklearn.utils.validation import check_array

from .. import _dask
from .._warn import one_line
from ..backends import backend_for, get_backend, is_tensor, resolve_device, same_device
from ..backends._numpy import as_csr, row_chunks, row_norms_sq, row_range, to_dense
from ..kernels import LowRankKernel, resolve_kernel
from ..kernels._index import check_precomputed_matrix
from . import _device


class Rows:
    """Dense rows on the host: a numpy array or memmap (read in rows, never copied)."""

    #: Whether the core's items are point indices (the kernel is a stored matrix).
    is_index = False
    #: Whether the rows are a torch tensor (results then go back as tensors).
    is_tensor = False

    # -------------------------------------------------------------- validation
    def fit_data(self, device, validate_numpy, **params):
        """A fit's X checked as its kind is (:meth:`validated`), and the device the fit
        runs on (the estimator's ``device`` resolved for it). ``params``: the
        estimator's ``kernel``, ``tau``, ``working_memory``, the kernel's ``kind`` and
        ``accept_dask`` (what a Dask array checks)."""
        dev = resolve_device(device)
        return self.validated(dev, device, validate_numpy), dev

    def validated(
        self, dev, device, validate_numpy, n_features_in=None, owner="", keep_host=False, dtype=None
    ):
        """The rows checked by ``validate_numpy`` (scikit-learn's checks), then moved to
        ``dev`` (None or "cpu": they stay on the host). ``device`` is the estimator's
        parameter (for messages), ``n_features_in`` the fitted width (None in fit);
        ``keep_host``: dense host rows stay there (a labelling pass streams them to
        ``dev``); ``dtype``: the fitted model's (a tensor's dtype: tensors are cast to
        it, as torch does not mix dtypes; arrays keep theirs, numpy mixes them)."""
        X = validate_numpy(self.data)
        if dev not in (None, "cpu") and not keep_host:
            nx = backend_for(dev)
            X = nx.asarray(X, dtype=np.float32 if nx.device.type == "cuda" else X.dtype)
        return X

    def check_init(self, init, n_clusters, kernel):
        """``init`` given as an array: the initial centers as points, checked."""
        shape = f"(n_clusters, n_features) = ({n_clusters}, {self.n_features})"
        try:
            init = check_array(
                init, dtype=_device.host_dtype(self.data), copy=True, input_name="init"
            )
        except ValueError as exc:  # scikit-learn's message does not say which array
            raise ValueError(
                f"init: the initial centers should be numbers of shape {shape}; {one_line(exc)}"
            ) from None
        if init.shape != (n_clusters, self.n_features):
            raise ValueError(
                f"init: the initial centers should have shape {shape}, got {init.shape}"
            )
        return init

    def __init__(self, data):
        self.data = data

    @property
    def nx(self):
        """The backend the rows live on."""
        return get_backend(self.data)

    @property
    def n_samples(self):
        return int(self.data.shape[0])

    @property
    def n_features(self):
        return int(self.data.shape[1])

    @property
    def itemsize(self):
        """Bytes of one value of the rows (the host dtype of a tensor)."""
        return np.dtype(_device.host_dtype(self.data)).itemsize

    def host_rows(self, idx):
        """Rows ``idx`` as a host float64 array (a CSR matrix for sparse rows)."""
        return np.asarray(self.data[idx], dtype=np.float64)

    def described(self):
        """What the data is, for messages ("a numpy.ndarray", "a torch tensor")."""
        return f"a {type(self.data).__module__}.{type(self.data).__name__}"

    def host_values(self):
        """The data as host values (a tensor read back; others as they are), for
        values that drive work on the host (``sample_weight``)."""
        return self.data

    def fingerprint_index(self, count):
        """Up to ``count`` evenly spaced rows, first and last included: the rows that
        identify the data in a checkpoint's fingerprint, cheap whatever n is."""
        n = self.n_samples
        return np.unique(np.linspace(0, n - 1, min(n, count)).astype(np.intp))

    def kernel_sample(self, kernel, count, itemsize):
        """The kernel matrix of up to ``count`` evenly spaced rows (float64, computed in
        the dtype of ``itemsize`` bytes the fit computes in), whether those rows are
        not all one row repeated, and that dtype; None where the kernel is not a
        function of rows (graph kernels, low-rank matrices)."""
        S = self.host_rows(self.fingerprint_index(count))
        S = S.astype(np.float32 if itemsize == 4 else np.float64, copy=False)
        varied = abs(S - S[np.zeros(S.shape[0], dtype=np.intp)]).max() > 0  # dense or CSR
        return np.asarray(kernel.tile(S, S), dtype=np.float64), bool(varied), S.dtype

    def fingerprint_arrays(self, count):
        """Host arrays that identify the data (hashed by a checkpoint): the rows of
        :meth:`fingerprint_index`."""
        return (np.asarray(self.data[self.fingerprint_index(count)]),)

    def check_no_overflow(self, kernel=None, underflow=False):
        """Refuse finite rows too large (or, with ``underflow``, too small) for the
        kernel arithmetic: :func:`check_no_overflow`."""
        check_no_overflow(self.data, kernel, underflow=underflow)

    def in_rows_dtype(self, values):
        """Per-row results (a full-batch fit's float64 distances) in the rows' dtype,
        as a labelling pass gives them (float32 rows, or a float32 kernel matrix:
        float32); as computed where the data has no dtype (a low-rank kernel)."""
        dtype = getattr(self.data, "dtype", None)
        return values if dtype is None else self.nx.astype(values, dtype)

    def take(self, idx):
        """Rows ``idx`` on the rows' backend, in their dtype."""
        nx = self.nx
        return nx.take(self.data, nx.index(idx))

    #: The items of the support points ``idx`` of a fitted model: their rows.
    support_items = take

    def as_given(self, values):
        """Per-row results of a fit in the kind X was given as (:class:`FitInput`'s
        ``output``): as they are, but for a Dask array."""
        return values

    def centers(self, init):
        """Initial centers given as points, in the form of the rows."""
        return self.nx.asarray(init, dtype=self.data.dtype)

    #: KernelKMeans' initial centers given as points: dense, on the rows' backend, for
    #: every kind of rows (None for index rows: their init holds point indices).
    init_points = centers

    #: :func:`mbkkm.kernels.resolve_kernel` on these rows (a data-driven gamma).
    resolve_kernel = staticmethod(resolve_kernel)

    def prefetch(self, plan):
        """Get ready to read the batches of ``plan`` (only Dask rows need to)."""

    # What a fitted estimator does with new data of this kind, when it is not computed
    # in memory (None: compute it in memory; a Dask array: chunk by chunk, through the
    # estimator's public methods).
    def lazy_fit_rows(self, working_memory):
        """MiniBatchKMeans' fit: the rows it gathers lazily (Dask), or None: validate X."""
        return None

    def lazy_predict(self, estimator):
        return None

    def lazy_transform(self, estimator, kernel_diag=None):
        return None

    def lazy_score(self, estimator, sample_weight):
        return None

    def lazy_labels_inertia(self, estimator, sample_weight):
        return None


class SparseRows(Rows):
    """A scipy sparse matrix as canonical CSR: rows are CSR slices, never densified."""

    def fit_data(self, device, validate_numpy, **params):
        stored = params["kind"].stored_matrix(self.data)
        if stored is not None:  # "precomputed": the kernel matrix as it is, on the host
            return stored, resolve_device(device)
        if isinstance(device, str) and device == "auto":
            # "auto": the best backend for X; sparse X has numpy only
            return self.validated("cpu", device, validate_numpy), "cpu"
        return super().fit_data(device, validate_numpy, **params)

    def validated(
        self, dev, device, validate_numpy, n_features_in=None, owner="", keep_host=False, dtype=None
    ):
        if dev not in (None, "cpu"):
            raise ValueError(
                f"X is a scipy.sparse matrix, but device={device!r} "
                f"({_device.device_name(dev)}) runs with PyTorch, which has no sparse path: "
                "use device=None or 'cpu' for sparse X, or densify X (X.toarray()) if it "
                "fits in memory"
            )
        # sorted indices, no duplicates: what the kernels expect
        return as_csr(validate_numpy(self.data))

    def host_rows(self, idx):
        return sparse.csr_matrix(self.data[idx], dtype=np.float64)

    def fingerprint_arrays(self, count):
        rows = self.data[self.fingerprint_index(count)]
        return rows.data, rows.indices, rows.indptr

    def centers(self, init):
        return type(self.data)(init.astype(self.data.dtype, copy=False))


class TensorRows(Rows):
    """A dense torch tensor on its device (the run's backend is torch there)."""

    is_tensor = True

    def fit_data(self, device, validate_numpy, **params):
        # "auto" picks a backend for arrays; a tensor already says where it runs
        return super().fit_data(None if device == "auto" else device, validate_numpy)

    def validated(
        self, dev, device, validate_numpy, n_features_in=None, owner="", keep_host=False, dtype=None
    ):
        X = self.data
        if dev == "cpu":  # "cpu" is numpy's backend, not torch's CPU
            raise ValueError(
                f"X is a torch tensor but device={device!r} runs on numpy arrays; leave "
                "device=None (or pass 'torch-cpu') to run on the tensor, or pass "
                "X.numpy() to run with numpy"
            )
        if dev is not None and not same_device(dev, X.device):
            raise ValueError(
                f"X is a torch tensor on {X.device} but device={device!r} "
                f"({_device.device_name(dev)}); move X there, or leave device=None to run "
                "where X lives"
            )
        return _device.validate_tensor(X, n_features_in, owner, dtype)

    def check_no_overflow(self, kernel=None, underflow=False):
        """:func:`check_no_overflow` reduced on the tensor's device, a scalar read back a
        chunk; a chunk that fails (or X, when every row norm underflows) is checked again
        on the host, for the message with its numbers."""
        X, check_diag = self.data, kernel is not None and not kernel.is_callable
        largest = None  # the largest squared row norm, on the device
        for start in range(0, X.shape[0], _OVERFLOW_CHUNK):
            chunk = X[start : start + _OVERFLOW_CHUNK]
            sq = (chunk * chunk).sum(1)
            finite = sq.isfinite().all()
            if check_diag:
                finite = finite & kernel.diag(chunk).isfinite().all()
            if not bool(finite):
                check_no_overflow(self.nx.to_numpy(chunk), kernel)
            largest = sq.max() if largest is None else largest.maximum(sq.max())
        tiny = np.finfo(_device.host_dtype(X)).tiny
        if underflow and largest is not None and float(largest) < tiny:
            check_no_overflow(self.nx.to_numpy(X), underflow=True)

    def host_rows(self, idx):
        return np.asarray(self.nx.to_numpy(self.take(idx)), dtype=np.float64)

    def described(self):
        return "a torch tensor"

    def host_values(self):
        return self.nx.to_numpy(self.data)

    def fingerprint_arrays(self, count):
        return (self.nx.to_numpy(self.take(self.fingerprint_index(count))),)


class DaskArrayRows(Rows):
    """A Dask array as given by the user (read only where rows are asked for)."""

    def host_rows(self, idx):
        return np.asarray(_dask.gather_rows(self.data, idx), dtype=np.float64)

    def as_given(self, values):
        # a whole-data fit (KernelKMeans) computed X: its results chunked as X's rows
        return _dask.chunked_like(values, self.data)

    def fit_data(self, device, validate_numpy, **params):
        if not params["accept_dask"]:  # read as an array (computed) by the validation
            return super().fit_data(device, validate_numpy)
        if resolve_device(device) not in (None, "cpu"):
            raise ValueError(
                f"device={device!r}: Dask input runs with numpy; use device=None or 'cpu'"
            )
        params["kind"].check_lazy_rows(params["kernel"])  # a stored or graph kernel
        if params["tau"] is None:
            raise ValueError(
                "tau=None (untruncated, a dynamic program over all n points) "
                "is not supported on a Dask array; pass a numpy array or set tau"
            )
        # the rows the fit gathers, the batches of the whole plan in few passes
        data = _dask.check_dask_array(self.data)
        return _dask.DaskRows(data, params["working_memory"], check_no_overflow), None

    def lazy_fit_rows(self, working_memory):
        # the rows' values too large for the arithmetic: refused as they are read
        return _dask.dask_rows(self.data, working_memory, check_no_overflow)

    def lazy_predict(self, estimator):
        return _dask.dask_predict(estimator, self.data)  # a Dask array, per chunk

    def lazy_transform(self, estimator, kernel_diag=None):
        # K(x, x) given as an array: in memory (None)
        return None if kernel_diag is not None else _dask.dask_transform(estimator, self.data)

    def lazy_score(self, estimator, sample_weight):
        return _dask.dask_score(estimator, self.data, sample_weight)  # one pass


class DaskFitRows(Rows):
    """A Dask array during ``fit``: :class:`mbkkm._dask.DaskRows` gathers the rows the
    fit reads, the batches of the whole plan in few passes."""

    def resolve_kernel(self, *args, **kwargs):
        # The data-driven gamma from one pass of Dask reductions.
        return self.data.resolve_kernel(*args, **kwargs)

    def prefetch(self, plan):
        self.data.prefetch(plan)

    def check_no_overflow(self, kernel=None, underflow=False):
        # the rows are read where the fit gathers or labels them: checked there, with
        # the kernel's diagonal once it is known (the underflow would need a pass)
        self.data.check_rows = functools.partial(check_no_overflow, kernel=kernel)

    def lazy_labels_inertia(self, estimator, sample_weight):
        # labels_ (a Dask array) and inertia_ in one pass over the chunks
        return self.data.labels_inertia(estimator, sample_weight)

    def fingerprint_index(self, count):
        # the first and last rows only: each row chunk read is a pass over the data
        n, half = self.n_samples, count // 2
        return np.unique(np.r_[np.arange(min(n, half)), np.arange(max(0, n - half), n)])


class LowRankRows(Rows):
    """A low-rank kernel matrix K ~= U diag(w) U^T (a precomputed heat kernel), read
    through its factors."""

    def fit_data(self, device, validate_numpy, **params):
        stored = params["kind"].stored_matrix(self.data)
        if stored is not None:  # "precomputed": the kernel matrix as it is, on the host
            return stored, resolve_device(device)
        return super().fit_data(device, validate_numpy, **params)

    def fingerprint_arrays(self, count):
        return self.data.U[self.fingerprint_index(count)], np.asarray(self.data.weights)

    def kernel_sample(self, kernel, count, itemsize):
        return None  # U diag(w) U^T with w >= 0: positive semi-definite by construction


class PrecomputedRows(Rows):
    """``kernel="precomputed"``: X is the (n, n) kernel matrix; items are indices."""

    is_index = True
    n_features = 0  # the items are point indices: no columns

    def __init__(self, data, index_dtype=None):
        super().__init__(data)
        self.diag = check_precomputed_matrix(data)  # square, K(x, x) >= 0, symmetric
        self.index_dtype = index_dtype

    def check_init(self, init, n_clusters, kernel):
        """``init`` given as an array: the initial centers as point indices, checked."""
        n = self.n_samples
        init = np.asarray(init)
        if (
            init.shape != (n_clusters,)
            or not np.issubdtype(init.dtype, np.integer)
            or init.min() < 0
            or init.max() >= n
        ):
            raise ValueError(
                f"init: with kernel={kernel!r} the initial centers are given as "
                f"{n_clusters} point indices in [0, {n}), an integer array of shape "
                f"(n_clusters,); got dtype {init.dtype} and shape {init.shape}"
            )
        return init.astype(np.intp)

    def init_points(self, init):
        return None

    def support_items(self, idx):
        return np.asarray(idx, dtype=np.intp)

    def fingerprint_arrays(self, count):
        return rows_of(self.data).fingerprint_arrays(count)  # the matrix's own kind

    def kernel_sample(self, kernel, count, itemsize):
        idx = self.fingerprint_index(count)  # the items are the points
        K = np.asarray(to_dense(kernel.tile(idx, idx)), dtype=np.float64)
        return K, True, np.dtype(kernel.dtype)


class GraphRows(PrecomputedRows):
    """A graph kernel ("knn", "heat"): the k-NN graph of the rows is built and the
    kernel matrix over them resolved; items are indices (transductive)."""

    def __init__(self, data, index_dtype=None):
        Rows.__init__(self, data)  # no kernel matrix to check (index_dtype: unused)

    def kernel_sample(self, kernel, count, itemsize):
        return None  # built from the graph: heat is positive semi-definite, knn is not


_OVERFLOW_CHUNK = 65536


def check_no_overflow(X, kernel=None, input_name="X", underflow=False):
    """Raise a ValueError when X is finite but too large for the kernel arithmetic
    (or, with ``underflow``, too small).

    The kernel blocks are computed in X's dtype from squared row norms and dot
    products (||x - y||^2 = ||x||^2 - 2 <x, y> + ||y||^2), so finite data whose
    squared norms overflow (|x| above about 1e154 in float64, 1e19 in float32)
    would silently give NaN distances. With a resolved point ``kernel``, K(x, x)
    must be finite too (for a positive semi-definite kernel that bounds every
    |K(x, y)| <= sqrt(K(x, x) K(y, y))). Read in row chunks (a memmap is never
    loaded whole, a scipy sparse X never densified: its rows are read in ranges of
    bounded stored values that share X's arrays). Dask inputs and non-arrays are
    skipped.

    ``underflow`` (data a fit learns from): also raise when X is not zero but every
    squared row norm is below the dtype's smallest normal number (|x| below about
    1e-154 in float64, 1e-19 in float32): the distances, and the width chosen from
    them, would be zero or lose their digits (one cluster, or NaN inside the width's
    selection).
    """
    # the chunks share X's values; a CSR range's row pointers are new (one range at a
    # time), dense views are kept for the underflow's second read
    csr = sparse.issparse(X)
    if csr:
        X = as_csr(X)
        chunks = (row_range(X, start, stop) for start, stop in row_chunks(X))
    elif isinstance(X, np.ndarray) and X.ndim == 2:
        chunks = [X[s : s + _OVERFLOW_CHUNK] for s in range(0, X.shape[0], _OVERFLOW_CHUNK)]
    else:
        return
    if X.dtype.kind != "f":
        return
    check_diag = kernel is not None and not kernel.is_callable
    largest = 0.0  # the largest squared row norm
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        for chunk in chunks:
            sq = row_norms_sq(chunk)
            largest = max(largest, float(np.max(sq, initial=0.0)))
            if not np.all(np.isfinite(sq)):
                values = chunk.data if csr else chunk
                if not np.isfinite(values).all():  # scikit-learn's check was skipped
                    raise ValueError(
                        f"Input {input_name} contains NaN or infinity (scikit-learn's "
                        "finiteness check is off: sklearn.set_config(assume_finite=True))"
                    )
                big = float(np.max(np.abs(values)))
                scaler = "MaxAbsScaler" if csr else "StandardScaler"
                raise ValueError(
                    f"{input_name} has values too large for {X.dtype} arithmetic: squared "
                    f"row norms overflow (max |{input_name}| = {big:.3g}). Rescale "
                    f"{input_name} (for example with sklearn.preprocessing.{scaler})"
                    + (" or use float64" if X.dtype != np.float64 else "")
                )
            if check_diag and not np.all(np.isfinite(kernel.diag(chunk))):
                raise ValueError(
                    f"{input_name}: the kernel {kernel!r} overflows in {X.dtype} on "
                    f"these values (K(x, x) is not finite). Rescale {input_name} or "
                    "change the kernel parameters"
                )
    if underflow and largest < np.finfo(X.dtype).tiny:  # rare: X is read once more
        parts = [X.data] if csr else chunks
        small = max((float(np.max(np.abs(part), initial=0.0)) for part in parts), default=0.0)
        if small > 0:
            raise ValueError(
                f"{input_name} has values too small for {X.dtype} arithmetic: every "
                f"squared row norm underflows (max |{input_name}| = {small:.3g}). Rescale "
                f"{input_name} (for example with sklearn.preprocessing.StandardScaler)"
            )


def rows_of(X):
    """The adapter of data X by its kind (no kernel involved): the one place that
    tells the kinds of arrays apart."""
    if type(X) is np.ndarray:  # the common kind first: dense rows on the host
        return Rows(X)
    if isinstance(X, _dask.DaskRows):
        return DaskFitRows(X)
    if _dask.is_dask_array(X):
        return DaskArrayRows(X)
    if is_tensor(X):
        return TensorRows(X)
    if sparse.issparse(X):
        return SparseRows(X)
    if isinstance(X, LowRankKernel):
        return LowRankRows(X)
    return Rows(X)


#: Messages of :func:`same_library` ({got}: what was passed, {fitted}: the fit's library).
X_MIXED = (
    "X is {got}, but the model was fitted on {fitted}: mixed array libraries are "
    "not supported; pass X as {fitted}"
)
WEIGHTS_MIXED = (
    "sample_weight and X come from different array libraries (sample_weight "
    "is {got}, X {fitted}); pass both as tensors or both as numpy arrays"
)


def same_library(x, tensor_io, message):
    """The adapter of ``x``, which must come from the array library of the fit's X
    (``tensor_io``: torch tensors, else numpy): else a ValueError, ``message``."""
    got = rows_of(x)
    if got.is_tensor != tensor_io:
        fitted = "torch tensors" if tensor_io else "numpy arrays"
        raise ValueError(message.format(got=got.described(), fitted=fitted))
    return got


def host_sample_weight(sample_weight, tensor_io):
    """``sample_weight`` as host values (weights drive host sampling), or None: a tensor
    with tensor X only (``tensor_io``), a non-tensor with non-tensor X only."""
    if sample_weight is None:
        return None
    return same_library(sample_weight, tensor_io, WEIGHTS_MIXED).host_values()

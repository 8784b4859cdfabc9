"""Kernel tiles and diagonals on torch tensors (the torch backend's implementations).

Imported on first use by :meth:`mbkkm.kernels.KernelSpec.implementation` (through
the registry's ``Tiles("._torch_tiles", ...)`` entries), so ``import mbkkm`` never
imports torch. Tiles are written in place: one GEMM into the output
(``torch.addmm`` folds the |y|^2 term into it for rbf) and in-place elementwise
maps (``exp_``, ``clamp_max_``, ``tanh_``, ``pow_``); on CPU a version with
temporaries is 2-5x slower.

Every tile has the signature ``tile(X, Y, *, out=None, **params) -> (n_x, n_y)`` in
X's dtype on X's device, every diagonal ``diag(X, **params) -> (n,)``, as the numpy
ones of :mod:`mbkkm.kernels._pairwise` (which they must equal, tested in
``tests/backends``). chi2 has none (its sum of (x - y)^2 / (x + y) has no GEMM form).
"""

from __future__ import annotations

from functools import partial

import numpy as np
import torch

from ._pairwise import check_callable_tile, diag_of_tiles, write_into

#: Device types on which :func:`rbf_tail` folds the row norms into its GEMM ...
FOLD_DEVICES = ("cuda",)
#: ... for blocks of at least this many values (64 MiB in float32). Measured on an
#: H100: the b = 16,384 MNIST fit (a 76,881 x 16,384 block) 4.1-4.2 s folded against
#: 5.9 s; the b = 1,024 fit (a 4,321 x 1,024 block) the same either way (0.16-0.20 s):
#: below, the fold only adds the operand copies.
FOLD_MIN_VALUES = 1 << 24

#: Elements of X squared at once by :func:`row_norms_sq` (16 MiB in float32).
_NORM_BLOCK = 1 << 22


def row_norms_sq(X):
    """Squared Euclidean norm of each row, shape (n,), in X's dtype.

    Two calls (no views) when X is small, as in every iteration; a large X (a
    labelling chunk, the support of a large fit) in row blocks, so that the squares'
    temporary never takes more than :data:`_NORM_BLOCK` elements.
    """
    n, d = X.shape
    if n * d <= _NORM_BLOCK:
        return (X * X).sum(1)
    out = torch.empty(n, dtype=X.dtype, device=X.device)
    step = max(1, _NORM_BLOCK // max(d, 1))
    for start in range(0, n, step):
        part = X[start : start + step]
        torch.sum(part * part, 1, out=out[start : start + step])
    return out


def linear(X, Y, *, out=None, **_):
    """K(x, y) = <x, y>."""
    return X @ Y.T if out is None else torch.mm(X, Y.T, out=out)


def rbf(X, Y, *, gamma, out=None, fold=None, **_):
    """K(x, y) = exp(-gamma ||x - y||^2).

    ``fold``: the norms folded into the GEMM as in :func:`rbf_tail` (values equal
    to rounding); default :func:`_folds`: on CUDA, for the labelling pass's tiles of
    the support against a chunk of rows (two passes over the tile fewer: labelling
    1.5-1.75x faster on torch CPU tensors with the fold switched on, d = 16,
    m = 4,459, 200,000 rows: ``benchmarks/bench_scale.py --fold-ab``).
    """
    if _folds(X, Y, fold):
        return _folded(X, Y, gamma, out, row_norms_sq(X).mul_(-0.5), row_norms_sq(Y).mul_(-0.5))
    return _unfolded(X, Y, gamma, out, row_norms_sq(X).mul_(gamma), row_norms_sq(Y).mul_(gamma))


def _unfolded(X, Y, gamma, out, gxx, gyy):
    """exp(-gamma ||x - y||^2) from ``gxx`` = gamma |x|^2 and ``gyy`` = gamma |y|^2:
    -gamma ||x - y||^2 = 2 gamma <x, y> - gamma |y|^2 - gamma |x|^2, the |y|^2 term
    rides in the GEMM (addmm's input), the rest in place; clipped at 0 (K <= 1)."""
    out = X.new_empty((X.shape[0], Y.shape[0])) if out is None else out
    torch.addmm(gyy[None, :], X, Y.T, beta=-1.0, alpha=2.0 * gamma, out=out)
    out.sub_(gxx[:, None])
    return out.clamp_max_(0).exp_()


def _folds(X, Y, fold):
    """Whether an rbf block of X against Y folds the row norms into its GEMM (``fold``
    None: on the devices of :data:`FOLD_DEVICES`, for blocks of at least
    :data:`FOLD_MIN_VALUES` values whose operand copies are small beside them: each
    side's copy, :func:`folded_width` values a row, at most an eighth of the block)."""
    if fold is None:
        return (
            X.device.type in FOLD_DEVICES
            and X.shape[0] * Y.shape[0] >= FOLD_MIN_VALUES
            and 8 * folded_width(X.shape[1]) <= min(X.shape[0], Y.shape[0])
        )
    return fold


def folded_width(d):
    """Values one row of d features takes in the folded operands of an rbf block
    (:func:`_folded`): d + 2 columns, 4-aligned, and its norm."""
    return -(-(d + 2) // 4) * 4 + 1


def rbf_tail(X, Y, *, gamma, out=None, fold=None, **_):
    """K(X, Y) for rbf when Y is X's last rows (``Y = X[-len(Y):]``, the batch at the
    tail of the device pool): X's squared row norms serve both sides, one pass fewer
    than :func:`rbf` and the same values (the same products, in the same order).

    ``fold`` (default: on the device types of :data:`FOLD_DEVICES`, for blocks of at
    least :data:`FOLD_MIN_VALUES` values) folds both norms into the GEMM instead,
    through operands with two more columns (:func:`_folded`): the (n_x, n_y)
    block then takes the GEMM's write and two in-place passes (clip, exp) instead of
    five (the bias copied in, read by the GEMM, subtract, clip, exp). On a GPU the
    block's memory traffic, not the GEMM, is the cost for large batches; the
    operands' copies cost (n_x + n_y) (d + 4) values.
    The values equal the unfolded ones to float rounding (another order of the same
    sums), not bit for bit.
    """
    if fold is None:
        fold = X.device.type in FOLD_DEVICES and X.shape[0] * Y.shape[0] >= FOLD_MIN_VALUES
    if fold:
        half = row_norms_sq(X).mul_(-0.5)  # X's norms serve both sides
        return _folded(X, Y, gamma, out, half, half[X.shape[0] - Y.shape[0] :])
    gxx = row_norms_sq(X).mul_(gamma)
    return _unfolded(X, Y, gamma, out, gxx, gxx[X.shape[0] - Y.shape[0] :])


def _folded(X, Y, gamma, out, half_x, half_y):
    """exp(-gamma ||x - y||^2) for the rows x of X and y of Y, the exponent by one GEMM:
    2 gamma [x, -|x|^2 / 2, 1, 0...] . [y, 1, -|y|^2 / 2, 0...], the operands padded with
    zero columns to a multiple of 4 (16-byte aligned rows in float32); ``half_x``,
    ``half_y``: -|x|^2 / 2 and -|y|^2 / 2. Clipped at 0 (K <= 1)."""
    width = folded_width(X.shape[1]) - 1  # the columns; the norm aside
    Xa = _operand(X, width, half_x, 1)
    Ya = _operand(Y, width, 1, half_y)
    out = X.new_empty((X.shape[0], Y.shape[0])) if out is None else out
    return torch.addmm(out, Xa, Ya.T, beta=0, alpha=2.0 * gamma, out=out).clamp_max_(0).exp_()


def _operand(Z, width, first, second):
    """[Z, first, second, 0...], ``width`` columns (``first``, ``second``: a column of
    values or a number)."""
    d = Z.shape[1]
    Za = Z.new_empty((Z.shape[0], width))
    Za[:, :d] = Z
    Za[:, d] = first
    Za[:, d + 1] = second
    Za[:, d + 2 :] = 0  # the padding only: the rest is written above
    return Za


def _power(degree):
    return int(degree) if float(degree).is_integer() else float(degree)


def polynomial(X, Y, *, gamma, degree, coef0, out=None, **_):
    """K(x, y) = (gamma <x, y> + coef0) ** degree."""
    return linear(X, Y, out=out).mul_(gamma).add_(coef0).pow_(_power(degree))


def sigmoid(X, Y, *, gamma, coef0, out=None, **_):
    """K(x, y) = tanh(gamma <x, y> + coef0)."""
    return linear(X, Y, out=out).mul_(gamma).add_(coef0).tanh_()


def _unit_rows(X):
    norms = torch.sqrt(row_norms_sq(X))
    return X / torch.where(norms == 0, 1, norms)[:, None]


def cosine(X, Y, *, out=None, **_):
    """K(x, y) = <x, y> / (|x| |y|) (0 for a zero vector, as in scikit-learn)."""
    return linear(_unit_rows(X), _unit_rows(Y), out=out)


def laplacian(X, Y, *, gamma, out=None, **_):
    """K(x, y) = exp(-gamma ||x - y||_1)."""
    D = torch.cdist(X, Y, p=1)  # (n_x, n_y) L1 distances
    return write_into(out, D).mul_(-gamma).exp_()


# --- diagonals K(x, x), shape (n,) -------------------------------------------------


def diag_ones(X, **_):
    return torch.ones(X.shape[0], dtype=X.dtype, device=X.device)


def diag_linear(X, **_):
    return row_norms_sq(X)


def diag_polynomial(X, *, gamma, degree, coef0, **_):
    return row_norms_sq(X).mul_(gamma).add_(coef0).pow_(_power(degree))


def diag_sigmoid(X, *, gamma, coef0, **_):
    return row_norms_sq(X).mul_(gamma).add_(coef0).tanh_()


def diag_cosine(X, **_):
    return (row_norms_sq(X) > 0).to(X.dtype)


# --- callables ---------------------------------------------------------------------


def cpu_tensor(X):
    """A host array as a CPU tensor sharing its values (a copy where it is not
    contiguous or is read-only, as ``torch.from_numpy`` needs)."""
    X = np.asarray(X)
    if not (X.flags.c_contiguous and X.flags.writeable):
        X = np.array(X, order="C")
    return torch.from_numpy(X)


def call_user(func, params, X, Y, check_finite=True):
    """``func(X, Y, **params)`` on tensors, checked: a real tensor of shape
    (len(X), len(Y)) on X's device with finite values, returned in X's dtype.

    ``check_finite=False`` skips the finiteness check, which reads a value back from
    the device (the device-resident iteration checks its objectives instead)."""
    try:
        K = func(X, Y, **params)
    except Exception as exc:
        raise RuntimeError(
            f"the callable kernel raised {type(exc).__name__} on torch tensors: {exc}"
        ) from exc
    if not isinstance(K, torch.Tensor):
        raise TypeError(
            f"kernel: on the torch backend the callable must return a torch tensor, "
            f"got {type(K).__name__}"
        )
    if K.device != X.device:
        raise ValueError(
            f"kernel: the callable returned a tensor on {K.device}, expected {X.device}"
        )
    check_callable_tile(K, X, Y, not (K.is_complex() or K.dtype == torch.bool))
    K = K.to(X.dtype)
    if check_finite and not bool(torch.isfinite(K).all()):
        raise ValueError("kernel: the callable returned non-finite values (NaN or inf)")
    return K


def call_user_diag(func, params, X, step=256, check_finite=True):
    """K(x, x) of a callable on tensors, from the diagonals of (step x step) tiles."""
    tile = partial(call_user, func, params, check_finite=check_finite)
    return diag_of_tiles(tile, X, X.new_empty(X.shape[0]), step)

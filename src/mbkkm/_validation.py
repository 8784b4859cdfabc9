"""Input checks shared by the estimators (:mod:`mbkkm.cluster`) and the Dask data
source (:mod:`mbkkm._dask`), and the short messages of the usual input mistakes.

The lowest layer beside :mod:`mbkkm.backends`: it imports nothing from mbkkm, so
both can use it without importing each other.
"""

from __future__ import annotations

import difflib
from numbers import Integral

import numpy as np
from sklearn import get_config
from sklearn.utils import assert_all_finite
from sklearn.utils._param_validation import (
    Interval,
    InvalidParameterError,
    StrOptions,
    make_constraint,
)
from sklearn.utils.validation import _check_sample_weight, check_array


def check_sample_weight(sample_weight, X, dtype=np.float64):
    """Validated, non-negative weights with a positive sum; None for no weights *and for
    unit weights*.

    Unit weights are no weights, as in scikit-learn (where None means ones): the two
    must give the same model bit for bit, and downstream the weighted code paths
    differ from the unweighted ones in their draws (batches drawn by the weights'
    cumulative sum instead of ``randint``, the width's sample by ``choice`` with
    ``p``, the k-means++ and random starts) and in their rounding (weighted sums
    instead of sums and means). Mapping all-ones weights to None here, at the one
    door every estimator's weights pass, puts both on the one unweighted path, and
    keeps unweighted fits as they were.
    """
    if sample_weight is None:
        return None
    try:
        sw = _check_sample_weight(sample_weight, X, dtype=dtype, ensure_non_negative=True)
    except ValueError as exc:
        msg = str(exc) if "sample_weight" in str(exc) else f"sample_weight: {exc}"
        raise ValueError(msg) from exc
    if not np.all(np.isfinite(sw)):
        raise ValueError("sample_weight must be finite")
    total = sw.sum()
    if total <= 0:
        raise ValueError("sample_weight must have a positive sum; got all zeros")
    if not np.isfinite(total):  # each finite, their sum not: inertia_ would be inf
        raise ValueError(
            f"sample_weight sums to infinity in float64 (the largest is {sw.max():.3g}); "
            "divide the weights by a common factor: only their ratios shape the model"
        )
    return None if np.all(sw == 1) else sw  # unit weights: the unweighted fit (see above)


def constant_as_scale(sample_weight):
    """``(weights, scale)``: checked weights that are all equal to c become no weights
    and the scale c; others are returned with the scale 1.

    A whole fit's model depends on its weights only relative to one another
    (batches and samples drawn in proportion to them, weighted means), so constant
    weights must give the unweighted model; as unit weights do
    (:func:`check_sample_weight`), they take the unweighted path, whose draws and
    rounding differ from the weighted one's. The scale multiplies what sums over the
    weights (``inertia_``). Not for ``partial_fit``, where a batch's weights also
    count against the other batches'.
    """
    if sample_weight is not None and np.all(sample_weight == sample_weight[0]):
        return None, float(sample_weight[0])
    return sample_weight, 1.0


# ------------------------------------------------------------- names of options
def match_columns(estimator, X):
    """X with its columns put in the fitted order, when they are the fitted ones.

    A table (anything with ``columns``, e.g. a pandas DataFrame) whose column names
    are exactly ``estimator.feature_names_in_`` in another order is reordered by
    name, so that a file or frame written with its columns shuffled is read as the
    model was fitted. Anything else is returned as it is and checked by
    ``validate_data``, which refuses missing and unseen names, naming them, and
    warns when names are present on one side only. scikit-learn refuses a
    reordering too; we match by name instead, since the names say unambiguously
    which column is which.
    """
    fitted = getattr(estimator, "feature_names_in_", None)
    columns = getattr(X, "columns", None)
    if fitted is None or columns is None or not hasattr(X, "__getitem__"):
        return X
    names, wanted = list(columns), list(fitted)
    reordered = names != wanted and len(names) == len(wanted) and set(names) == set(wanted)
    return X[wanted] if reordered and all(isinstance(name, str) for name in names) else X


def unknown_name_message(param, value, known, *, what=None, also=()):
    """``param='value' is not a known ...``: the known names sorted, the nearest first.

    Parameters
    ----------
    param : str
        The parameter's name (``"kernel"``).
    value : str
        The name given.
    known : iterable of str
        The names accepted.
    what : str, default=None
        What a name stands for (``"kernel"``); ``param`` when None.
    also : sequence of str, default=()
        Other accepted kinds of value, in words (``"a callable"``).
    """
    known = sorted(known)
    near = difflib.get_close_matches(value, known, n=1, cutoff=0.6)
    hint = f" Did you mean {near[0]!r}?" if near else ""
    options = ", ".join(known)
    if also:
        options += "; or " + " or ".join(also)
    return f"{param}={value!r} is not a known {what or param}.{hint} Expected one of: {options}."


def check_param_values(estimator):
    """Refuse, by the parameter's name, what scikit-learn's parameter validation words
    poorly or lets through: an unknown string option (with the nearest known name),
    and a bool given for a count.

    Runs before scikit-learn's own validation, whose message lists the options in
    set order with no suggestion. Only parameters whose constraints include
    :class:`~sklearn.utils._param_validation.StrOptions` and that hold a string none
    of their constraints accepts are reported as unknown options. True is an
    Integral to Python: as a count (an integer constraint) it was read as 1 by some
    code and refused deep in numpy, without the parameter's name, by other.
    Everything else is left to scikit-learn.

    Raises
    ------
    sklearn.utils._param_validation.InvalidParameterError
        A ValueError (and TypeError), as scikit-learn raises.
    """
    params = estimator.get_params(deep=False)
    owner = type(estimator).__name__
    for name, constraints in estimator._parameter_constraints.items():
        value = params.get(name)
        if not isinstance(constraints, list):
            continue
        counts = [c for c in constraints if isinstance(c, Interval) and c.type is Integral]
        if counts and isinstance(value, (bool, np.bool_)):
            raise InvalidParameterError(
                f"The {name!r} parameter of {owner} must be an int (a count), not a bool; "
                f"got {value!r}."
            )
        options = [c for c in constraints if isinstance(c, StrOptions)]
        if not isinstance(value, str) or not options:
            continue
        if any(make_constraint(c).is_satisfied_by(value) for c in constraints):
            continue
        known = set().union(*(c.options for c in options))
        # the other kinds of value, in scikit-learn's words ("a callable", "None", ...)
        also = [str(make_constraint(c)) for c in constraints if not isinstance(c, StrOptions)]
        raise InvalidParameterError(
            f"{owner}: " + unknown_name_message(name, value, known, also=also)
        )


def numpy_scalar_params(estimator):
    """The parameters of ``estimator`` given as numpy scalars (``np.int32(10)``, read
    from an array), by name."""
    params = estimator.get_params(deep=False)
    return {name: value for name, value in params.items() if isinstance(value, np.generic)}


def require(module, extra, feature):
    """``import module`` for ``feature``, or a ModuleNotFoundError that names the
    extra of mbkkm that installs it (``pip install 'mbkkm[extra]'``)."""
    import importlib

    top = module.split(".")[0]
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] != top:  # the module is there, one of its own is not
            raise
        raise ModuleNotFoundError(
            f"{feature} needs {top}, which is not installed: pip install 'mbkkm[{extra}]' "
            f"(or pip install {top}; in a clone of mbkkm: pip install -e '.[{extra}]')",
            name=top,
        ) from None


# ------------------------------------------------------------------ input data
def as_rows(X, owner):
    """X as a 2-d table of rows for a function that reads only some of them
    (:func:`mbkkm.cluster.select_gamma`): arrays of rows as they are (numpy arrays,
    memmaps, scipy sparse, tensors, Dask arrays: nothing read), other array-likes
    (lists, tuples, data frames) converted by scikit-learn's ``check_array``; a
    table that is not 2-d is refused with ``owner``'s name."""
    if not (hasattr(X, "shape") and hasattr(X, "dtype")):  # a list, a data frame
        try:
            X = check_array(X, accept_sparse="csr", ensure_all_finite=False, input_name="X")
        except ValueError as exc:
            raise ValueError(f"{owner}: {_rewrite(str(exc), X, owner) or exc}") from None
    if len(X.shape) != 2:
        raise ValueError(
            f"{owner}: X must be 2-D, shape (n_samples, n_features); got an array of "
            f"shape {tuple(X.shape)}"
        )
    return X


def check_sampled_rows_finite(Xs, owner, n_total):
    """Refuse rows that hold NaN or infinity (``Xs``: the rows read of a table of
    ``n_total``), naming the problem rather than its effect on the arithmetic."""
    values = Xs.data if hasattr(Xs, "tocoo") else Xs  # scipy.sparse: the stored values
    if not np.isfinite(values).all():
        raise ValueError(
            f"{owner}: X contains NaN or infinity (in the {Xs.shape[0]} of its {n_total} "
            "rows it read); impute or drop those values first."
        )


#: Dense float arrays of at least this many values are checked for NaN and infinity in
#: row parts on every thread: scikit-learn's check is one pass on one thread (about
#: 10 s for 64 GB), the same work on 16 threads takes a fraction of it.
PARALLEL_FINITE_MIN_VALUES = 2**24


def short_input_errors(check, X, owner, parallel=None, **options):
    """``check(X, **options)`` (scikit-learn's ``check_array`` or ``validate_data``) as
    the estimators check X (float64 or float32, C order, at least one row), with short
    messages for the usual mistakes.

    scikit-learn's messages print a whole 1-D or complex array, do not name the
    column of a DataFrame that holds strings, and answer NaN with advice about
    supervised estimators. These are rewritten (after the failure, so valid input
    costs nothing more); every other error is raised as it was.

    Parameters
    ----------
    check : callable
        ``check(X, dtype=..., order=..., ensure_min_samples=..., **options)`` returns
        the checked X.
    X : array-like
        The input as the user gave it.
    owner : str
        The estimator's name, for the messages.
    parallel : callable, optional
        ``parallel(func, n)`` calls ``func(start, stop)`` over row parts of ``range(n)``
        on every thread: then a dense float X of at least
        :data:`PARALLEL_FINITE_MIN_VALUES` values is checked for NaN and infinity
        part by part, with scikit-learn's own check and messages. None: in one pass.
    **options
        More keywords of ``check`` (``accept_sparse``, ...).
    """
    in_parts = (
        parallel is not None
        and not get_config()["assume_finite"]
        and isinstance(X, np.ndarray)
        and X.dtype.kind == "f"
        and X.size >= PARALLEL_FINITE_MIN_VALUES
    )
    if in_parts:
        options["ensure_all_finite"] = False
    try:
        X_checked = check(
            X, dtype=[np.float64, np.float32], order="C", ensure_min_samples=1, **options
        )
        if in_parts:

            def check_part(start, stop):
                assert_all_finite(X_checked[start:stop], input_name="X", estimator_name=owner)

            parallel(check_part, X_checked.shape[0])
        return X_checked
    except ValueError as exc:
        msg = _rewrite(str(exc), X, owner)
        if msg is None:
            raise
    raise ValueError(msg) from None  # the original prints the whole array


def _rewrite(msg, X, owner):
    if msg.startswith("Expected 2D array, got"):
        shape = np.shape(X)
        what = "a scalar" if shape == () else f"a {len(shape)}-D array of shape {shape}"
        return (
            f"X must be 2-D, shape (n_samples, n_features); got {what}. Reshape your data: "
            "X.reshape(-1, 1) if it holds one feature, X.reshape(1, -1) if one sample."
        )
    if msg.startswith("Complex data not supported"):
        dtype = X.dtype if hasattr(X, "dtype") else np.asarray(X).dtype
        return (
            f"Complex data not supported: X has dtype {dtype}; pass real features "
            "(e.g. the real and imaginary parts as separate columns)."
        )
    if msg.startswith("Input X contains NaN"):
        return (
            f"Input X contains NaN{_position(X, np.isnan)}. {owner} does not accept missing "
            "values: impute them (e.g. sklearn.impute.SimpleImputer in a Pipeline) or drop "
            "those rows."
        )
    if msg.startswith("Input X contains infinity"):
        return (
            f"Input X contains infinity{_position(X, np.isinf)}. {owner} needs finite "
            "values: replace them (e.g. with a large finite value, or NaN and then impute) "
            "or drop those rows."
        )
    if "could not convert" in msg or "convert your data to numeric" in msg.lower():
        return _non_numeric(X)
    return None


def _columns(X):
    """(name, column) pairs of a data frame, or of a 2-D array (names are indices)."""
    if hasattr(X, "columns") and hasattr(X, "dtypes"):  # pandas, polars
        return [(repr(name), X[name]) for name in X.columns]
    A = np.asarray(X, dtype=object)
    if A.ndim != 2:
        return []
    return [(str(j), A[:, j]) for j in range(A.shape[1])]


def _non_numeric(X):
    """Name the columns that hold values that are not numbers (or None if none found)."""
    bad = []  # (name, its dtype in words, a value that is not a number)
    for name, col in _columns(X):
        try:
            np.asarray(col, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            dtype = f"dtype {col.dtype}, " if hasattr(col, "dtype") else ""
            bad.append((name, dtype, str(exc).rpartition(": ")[2]))
    if not bad:
        return None
    name, dtype, example = bad[0]
    more = ""
    if len(bad) > 1:
        more = f" (and {len(bad) - 1} more: {', '.join(b[0] for b in bad[1:4])}"
        more += ", ...)" if len(bad) > 4 else ")"
    return (
        f"X: column {name} is not numeric ({dtype}e.g. {example}){more}. Encode it "
        "(e.g. sklearn.preprocessing.OneHotEncoder in a ColumnTransformer) or drop it."
    )


def _position(X, test):
    """`` (n values; the first in row i, column j)`` of the values where ``test``
    (``np.isnan``, ``np.isinf``) holds, or ``""`` where X cannot say."""
    if hasattr(X, "columns") and hasattr(X, "dtypes"):  # a data frame: name the columns
        found = []  # (name, mask) of each numeric column that holds such a value
        for name, col in _columns(X):
            try:
                nan = test(np.asarray(col, dtype=np.float64))
            except (TypeError, ValueError):
                continue
            if nan.any():
                found.append((name, nan))
        if not found:
            return ""
        # the first value found row by row: the smallest row, its leftmost column
        row, column = min(((int(np.argmax(nan)), name) for name, nan in found), key=lambda f: f[0])
        total = sum(int(nan.sum()) for _, nan in found)
        names = ", ".join(name for name, _ in found[:3]) + (", ..." if len(found) > 3 else "")
        label = X.index[row]
        index = "" if label == row else f" (index {label!r})"
        return (
            f" ({_values(total)}, in column{'s' * (len(found) > 1)} {names}; the "
            f"first in row {row}{index}, column {column})"
        )
    if hasattr(X, "tocoo"):  # scipy.sparse: only the stored values can hold one
        coo = X.tocoo()
        mask = test(coo.data)
        rows, cols = coo.row[mask], coo.col[mask]
    else:
        try:
            rows, cols = np.nonzero(test(np.asarray(X, dtype=np.float64)))
        except (TypeError, ValueError):  # also: X is not 2-D (not two index arrays)
            return ""
    if rows.size == 0:
        return ""
    first = np.lexsort((cols, rows))[0]
    return f" ({_values(rows.size)}; the first in row {rows[first]}, column {cols[first]})"


def _values(n):
    return f"{n} value{'s' * (n != 1)}"

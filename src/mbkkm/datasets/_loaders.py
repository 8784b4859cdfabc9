"""Finding, reading, downloading and preprocessing the paper's datasets.

Data files
----------
Each dataset is one compressed numpy file ``<name>.npz`` (e.g. ``mnist.npz``)
that ``np.load(path, allow_pickle=False)`` reads, with the keys

``X``
    features exactly as in the source (``uint8`` for MNIST, ``float32`` otherwise);
``y``
    ``int64`` labels ``0..C-1``;
``class_names`` (optional)
    ``class_names[c]`` is the source's own label of class ``c``;
``split`` (optional)
    ``int8``, 0 for the official train part, 1 for the official test part.

Where files are looked for
--------------------------
In this order, the first folder holding ``<name>.npz`` wins:

1. the folder passed as ``data_home``;
2. the folder(s) in the environment variable ``MBKKM_DATA`` (several folders
   may be given, separated by ``os.pathsep``, ``:`` on POSIX);
3. the per-user cache folder, ``$XDG_CACHE_HOME/mbkkm`` or, when
   ``XDG_CACHE_HOME`` is unset, ``~/.cache/mbkkm`` (see :func:`get_cache_dir`).

When the file is found nowhere and ``download=True``, the dataset is fetched
from OpenML with :func:`sklearn.datasets.fetch_openml`, converted to the format
above and written to the cache folder, where later calls find it.
"""

from __future__ import annotations

import importlib.util
import os
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.utils import Bunch

from .._files import atomic_write
from ._registry import PREPROCESSING, DatasetSpec, dataset_names, get_spec

#: Environment variable naming extra data folders (``os.pathsep``-separated).
ENV_VAR = "MBKKM_DATA"


class DatasetNotFoundError(FileNotFoundError):
    """A dataset file is not available locally and could not be downloaded."""


class DatasetFormatError(ValueError):
    """A dataset file exists but cannot be read, or its content is not as expected."""


# ---------------------------------------------------------------------------
# Locations
# ---------------------------------------------------------------------------


def get_cache_dir() -> Path:
    """The per-user cache folder of mbkkm's datasets.

    ``$XDG_CACHE_HOME/mbkkm`` when the environment variable ``XDG_CACHE_HOME``
    holds an absolute path, ``~/.cache/mbkkm`` otherwise. The folder is not
    created by this function.

    Returns
    -------
    path : pathlib.Path
    """
    xdg = Path(os.environ.get("XDG_CACHE_HOME", "")).expanduser()  # unset: "."
    return (xdg if xdg.is_absolute() else Path.home() / ".cache") / "mbkkm"


def _search_locations(data_home: Any = None) -> list[tuple[Path, str]]:
    """``(folder, where it comes from)`` pairs, in search order."""
    locations: list[tuple[Path, str]] = []
    if data_home is not None:
        if not isinstance(data_home, (str, os.PathLike)):
            raise TypeError(
                "data_home must be None, a str or an os.PathLike naming a folder, "
                f"got {type(data_home).__name__}."
            )
        if isinstance(data_home, str) and not data_home.strip():
            raise ValueError("data_home must name a folder, got an empty string.")
        locations.append((Path(data_home).expanduser(), "data_home"))
    parts = os.environ.get(ENV_VAR, "").split(os.pathsep)
    locations += [(Path(part).expanduser(), f"${ENV_VAR}") for part in parts if part.strip()]
    return [*locations, (get_cache_dir(), "cache")]


def get_data_dirs(data_home: str | os.PathLike | None = None) -> list[Path]:
    """The folders searched for dataset files, in search order.

    Parameters
    ----------
    data_home : str or os.PathLike, optional
        A folder searched first.

    Returns
    -------
    folders : list of pathlib.Path
        ``data_home`` (if given), the folders of ``$MBKKM_DATA`` (if set), then
        the cache folder (:func:`get_cache_dir`). Folders need not exist.
    """
    return [folder for folder, _ in _search_locations(data_home)]


def find_dataset_file(name: str, data_home: str | os.PathLike | None = None) -> Path | None:
    """Path of the first ``<name>.npz`` found in the searched folders.

    Parameters
    ----------
    name : str
        A registered dataset name (see :func:`dataset_names`).
    data_home : str or os.PathLike, optional
        A folder searched first.

    Returns
    -------
    path : pathlib.Path or None
        ``None`` when the file is in none of the folders of :func:`get_data_dirs`.
    """
    filename = get_spec(name).filename
    paths = (folder / filename for folder in get_data_dirs(data_home))
    return next((path for path in paths if path.is_file()), None)


# ---------------------------------------------------------------------------
# Information
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class DatasetInfo:
    """What is known of a dataset and whether it is available locally.

    Attributes
    ----------
    spec : DatasetSpec
        The registry entry (sizes, preprocessing, the paper's kernel parameters).
    path : pathlib.Path or None
        The file that :func:`load_dataset` would read, ``None`` if not found.
    searched : tuple of pathlib.Path
        The folders searched, in order.
    """

    spec: DatasetSpec
    path: Path | None
    searched: tuple[Path, ...] = ()

    @property
    def name(self) -> str:
        """The dataset name."""
        return self.spec.name

    @property
    def available(self) -> bool:
        """Whether a local file was found."""
        return self.path is not None

    def as_dict(self) -> dict[str, Any]:
        """A flat dict of plain values (for tables and JSON).

        Returns
        -------
        info : dict
        """
        spec = self.spec
        numbers = "n_samples n_features n_classes preprocessing sigma knn_neighbors heat_neighbors"
        return {
            "name": spec.name,
            "available": self.available,
            "path": None if self.path is None else str(self.path),
            **{name: getattr(spec, name) for name in numbers.split()},
            "openml": f"{spec.openml_name} (version {spec.openml_version})",
            "note": "" if self.available else spec.offline_note,
        }

    def __str__(self) -> str:
        spec = self.spec
        where = str(self.path) if self.path is not None else "not found locally"
        return (
            f"{spec.name}: {spec.n_samples} x {spec.n_features}, {spec.n_classes} classes, "
            f"preprocessing {spec.preprocessing!r}; {where}"
        )


def dataset_info(name: str, *, data_home: str | os.PathLike | None = None) -> DatasetInfo:
    """What is known of a dataset, and where (if anywhere) it is available locally.

    Parameters
    ----------
    name : str
        A registered dataset name (see :func:`dataset_names`).
    data_home : str or os.PathLike, optional
        A folder searched first.

    Returns
    -------
    info : DatasetInfo

    Raises
    ------
    ValueError
        If ``name`` is not a registered dataset.
    """
    spec = get_spec(name)
    searched = tuple(get_data_dirs(data_home))
    return DatasetInfo(spec, find_dataset_file(spec.name, data_home), searched)


def list_datasets(*, data_home: str | os.PathLike | None = None) -> list[DatasetInfo]:
    """:func:`dataset_info` of every registered dataset, in registry order.

    Parameters
    ----------
    data_home : str or os.PathLike, optional
        A folder searched first.

    Returns
    -------
    infos : list of DatasetInfo
    """
    return [dataset_info(name, data_home=data_home) for name in dataset_names()]


# ---------------------------------------------------------------------------
# Reading and writing
# ---------------------------------------------------------------------------


def _corrupt(path: Path, reason: str) -> DatasetFormatError:
    return DatasetFormatError(
        f"Cannot use dataset file {path}: {reason}. Expected a numpy .npz file with "
        "keys 'X' (n_samples x n_features), 'y' (int labels 0..C-1) and optionally "
        "'class_names' and 'split'. Replace or delete the file and load again."
    )


def read_dataset_file(path: str | os.PathLike, spec: DatasetSpec | None = None) -> dict[str, Any]:
    """Read and check one dataset file.

    Parameters
    ----------
    path : str or os.PathLike
        The ``.npz`` file.
    spec : DatasetSpec, optional
        When given, the number of features and of classes are checked against it.

    Returns
    -------
    arrays : dict
        ``X``, ``y``, ``class_names`` (array of str) and ``split`` (array or ``None``).

    Raises
    ------
    DatasetFormatError
        If the file cannot be read or its content is not as expected; the
        message names the file.
    """
    path = Path(path)
    try:
        with open(path, "rb") as fh:
            start = fh.read(6)
    except OSError as exc:
        raise _corrupt(path, f"it could not be read ({type(exc).__name__}: {exc})") from exc
    if not start.startswith((b"PK", b"\x93NUMPY")):  # numpy's message would blame pickles
        raise _corrupt(path, "it is not an .npz archive (nor an .npy array)")
    try:
        loaded = np.load(path, allow_pickle=False)
        if not isinstance(loaded, np.ndarray):  # (an .npy file's single array has no `with`)
            with loaded as npz:
                arrays = {key: npz[key] for key in npz.files}
    except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile) as exc:
        raise _corrupt(path, f"it could not be read ({type(exc).__name__}: {exc})") from exc
    if isinstance(loaded, np.ndarray):
        raise _corrupt(path, "it holds a single array, not an .npz archive")
    missing = [key for key in ("X", "y") if key not in arrays]
    if missing:
        raise _corrupt(path, f"missing key(s) {missing} (keys present: {list(arrays)})")

    X, y = arrays["X"], arrays["y"]
    if X.ndim != 2:
        raise _corrupt(path, f"'X' must be 2-dimensional, got shape {X.shape}")
    if not (np.issubdtype(X.dtype, np.number) or X.dtype == np.bool_):
        raise _corrupt(path, f"'X' must be numeric, got dtype {X.dtype}")
    if spec is not None and X.shape[1] != spec.n_features:
        raise _corrupt(
            path, f"'X' has {X.shape[1]} features, dataset {spec.name!r} has {spec.n_features}"
        )
    if y.ndim != 1 or y.shape[0] != X.shape[0]:
        raise _corrupt(path, f"'y' must have shape ({X.shape[0]},), got {y.shape}")
    if not np.issubdtype(y.dtype, np.integer):
        raise _corrupt(path, f"'y' must hold integer labels, got dtype {y.dtype}")

    class_names = arrays.get("class_names")
    if class_names is not None:
        class_names = np.asarray(class_names).astype(str).ravel()
        n_classes = len(class_names)
        if spec is not None and n_classes != spec.n_classes:
            raise _corrupt(
                path,
                f"'class_names' holds {n_classes} classes, dataset {spec.name!r} has "
                f"{spec.n_classes}",
            )
    elif spec is not None:
        n_classes = spec.n_classes
    else:
        n_classes = int(y.max()) + 1 if y.size else 0
    if y.size and (y.min() < 0 or y.max() >= n_classes):
        raise _corrupt(path, f"labels 'y' must lie in 0..{n_classes - 1}, got {y.min()}..{y.max()}")
    if class_names is None:
        class_names = np.array([str(c) for c in range(n_classes)])

    split = arrays.get("split")
    if split is not None and split.shape != y.shape:
        raise _corrupt(path, f"'split' must have shape {y.shape}, got {split.shape}")
    return {"X": X, "y": y.astype(np.int64, copy=False), "class_names": class_names, "split": split}


def write_dataset_file(
    path: str | os.PathLike,
    X: np.ndarray,
    y: np.ndarray,
    class_names: Sequence[str] | np.ndarray | None = None,
    split: np.ndarray | None = None,
) -> Path:
    """Write a dataset file in the format :func:`load_dataset` reads.

    The file is written to a temporary name in the same folder, then renamed,
    so that an interrupted write never leaves a truncated ``<name>.npz``.

    Parameters
    ----------
    path : str or os.PathLike
        Destination (``<name>.npz``); its folder is created if needed.
    X : ndarray of shape (n_samples, n_features)
        Features, stored as given.
    y : ndarray of shape (n_samples,)
        Integer labels ``0..C-1``, stored as ``int64``.
    class_names : sequence of str, optional
        ``class_names[c]`` is the original label of class ``c``.
    split : ndarray of shape (n_samples,), optional
        0 = train, 1 = test; stored as ``int8``.

    Returns
    -------
    path : pathlib.Path
    """
    path = Path(path)
    X, y = np.asarray(X), np.asarray(y)
    if X.ndim != 2:
        raise ValueError(f"X must be 2-dimensional, got shape {X.shape}.")
    if y.shape != (X.shape[0],):
        raise ValueError(f"y must have shape ({X.shape[0]},), got {y.shape}.")
    arrays: dict[str, np.ndarray] = {"X": X, "y": y.astype(np.int64)}
    if class_names is not None:
        arrays["class_names"] = np.asarray(class_names).astype(str)
    if split is not None:
        arrays["split"] = np.asarray(split).astype(np.int8)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_write(path, "wb") as fh:
        np.savez_compressed(fh, **arrays)  # type: ignore[arg-type]  # numpy's stubs
    return path


def _labels_to_codes(labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Integer codes ``0..C-1`` and class names; numeric labels sorted as numbers."""
    names, inverse = np.unique(np.asarray(labels).astype(str).ravel(), return_inverse=True)
    try:
        order = np.argsort(names.astype(np.float64), kind="stable")
    except ValueError:  # not all numeric: keep the lexicographic order
        order = np.arange(len(names))
    rank = np.argsort(order)  # the place of each name in that order
    return rank[inverse], names[order]


def _fetch_from_openml(spec: DatasetSpec, cache_dir: Path) -> Path:
    """Download ``spec`` from OpenML, convert it and write ``<cache_dir>/<name>.npz``.

    scikit-learn keeps its own copy of the downloaded ARFF in ``<cache_dir>/openml``.
    """
    from sklearn.datasets import fetch_openml

    bunch = fetch_openml(
        spec.openml_name,
        version=spec.openml_version,
        as_frame=False,
        # the faster parser needs pandas, which mbkkm does not require
        parser="auto" if importlib.util.find_spec("pandas") else "liac-arff",
        data_home=str(cache_dir / "openml"),
    )
    X = np.asarray(bunch.data.toarray() if hasattr(bunch.data, "toarray") else bunch.data)
    if spec.x_dtype == "uint8" and not (
        np.all(X == np.round(X)) and X.min() >= 0 and X.max() <= 255
    ):
        raise DatasetFormatError(
            f"OpenML {spec.openml_name!r} (version {spec.openml_version}) does not hold "
            "integer pixel values in 0..255 as expected."
        )
    X = X.astype(spec.x_dtype)
    if X.ndim != 2 or X.shape[1] != spec.n_features:
        raise DatasetFormatError(
            f"OpenML {spec.openml_name!r} (version {spec.openml_version}) has shape {X.shape}, "
            f"expected {spec.n_features} features for dataset {spec.name!r}."
        )
    y, class_names = _labels_to_codes(bunch.target)
    if len(class_names) != spec.n_classes:  # said now, not by the next read of the file
        raise DatasetFormatError(
            f"OpenML {spec.openml_name!r} (version {spec.openml_version}) has "
            f"{len(class_names)} classes, expected {spec.n_classes} for dataset {spec.name!r}."
        )
    return write_dataset_file(cache_dir / spec.filename, X, y, class_names)


def _not_found_message(spec: DatasetSpec, data_home: Any, download_note: str) -> str:
    lines = [
        f"Dataset {spec.name!r} is not available locally: no file {spec.filename!r} in the "
        "folders searched, in order:"
    ]
    for i, (folder, origin) in enumerate(_search_locations(data_home), start=1):
        exists = "" if folder.is_dir() else ", folder does not exist"
        lines.append(f"  {i}. {folder}  ({origin}{exists})")
    lines.append(download_note)
    lines.append(
        f"To use it, put {spec.filename} (an .npz with keys 'X', 'y' and optionally "
        f"'class_names', 'split') in a folder and pass data_home=<folder>, or set the "
        f"environment variable {ENV_VAR}=<folder>, or place it in the cache folder "
        f"{get_cache_dir()}."
    )
    if spec.offline_note:
        lines.append(spec.offline_note)
    return "\n".join(lines)


# ---------------------------------------------------------------------------
# Preprocessing
# ---------------------------------------------------------------------------


def _resolve_preprocess(preprocess: Any, spec: DatasetSpec) -> str:
    if preprocess is None or isinstance(preprocess, (bool, np.bool_)):
        return spec.preprocessing if preprocess else "none"
    if isinstance(preprocess, str):
        if preprocess not in PREPROCESSING:
            raise ValueError(
                f"preprocess must be True, False or one of {sorted(PREPROCESSING)}, "
                f"got {preprocess!r}."
            )
        return preprocess
    raise TypeError(
        f"preprocess must be a bool or one of {sorted(PREPROCESSING)}, "
        f"got {type(preprocess).__name__}."
    )


def preprocess_features(X: np.ndarray, method: str, *, dtype: Any = np.float32) -> np.ndarray:
    """Apply one of the paper's preprocessing steps.

    Parameters
    ----------
    X : array-like of shape (n_samples, n_features)
        Raw features (any numeric dtype; ``uint8`` is cast before arithmetic).
    method : {"standardize", "divide_255", "none"}
        ``"standardize"``: per feature, subtract the mean and divide by the
        (population) standard deviation, computed in float64; constant features
        are only centred. ``"divide_255"``: divide by 255. ``"none"``: no change.
    dtype : dtype or None, default=np.float32
        dtype of the result. ``None``: float64 for ``"standardize"`` and
        ``"divide_255"``, the input dtype for ``"none"``. Must be a floating
        dtype unless ``method="none"``.

    Returns
    -------
    X_out : ndarray of shape (n_samples, n_features)
        A new array, except for ``method="none"`` when no cast is needed.

    Examples
    --------
    >>> import numpy as np
    >>> preprocess_features(np.array([[0, 255], [255, 0]], dtype=np.uint8), "divide_255")
    array([[0., 1.],
           [1., 0.]], dtype=float32)
    """
    if method not in PREPROCESSING:
        raise ValueError(f"method must be one of {sorted(PREPROCESSING)}, got {method!r}.")
    X = np.asarray(X)
    out_dtype = None if dtype is None else np.dtype(dtype)
    if method == "none":
        return X if out_dtype is None else X.astype(out_dtype, copy=False)
    if out_dtype is not None and not np.issubdtype(out_dtype, np.floating):
        raise TypeError(
            f"dtype must be a floating dtype (or None) for preprocessing {method!r}, "
            f"got {out_dtype}."
        )
    if method == "divide_255":
        return np.divide(X, 255, dtype=out_dtype or np.float64)
    # standardize
    work = X.astype(np.float64, copy=True)
    work -= work.mean(axis=0)
    std = np.sqrt(np.mean(work * work, axis=0))
    std[std == 0] = 1.0
    work /= std
    return work if out_dtype is None else work.astype(out_dtype, copy=False)


# ---------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------


def load_dataset(
    name: str,
    *,
    data_home: str | os.PathLike | None = None,
    preprocess: bool | str = True,
    dtype: Any = np.float32,
    download: bool = True,
    return_X_y: bool = True,
) -> tuple[np.ndarray, np.ndarray] | Bunch:
    """Load one of the paper's datasets (pendigits, har, mnist, letter).

    The file ``<name>.npz`` is looked for in ``data_home``, then the folder(s)
    of the environment variable ``MBKKM_DATA``, then the cache folder
    (``$XDG_CACHE_HOME/mbkkm`` or ``~/.cache/mbkkm``). When it is in none of them
    and ``download=True``, it is fetched from OpenML and written to the cache
    folder.

    Parameters
    ----------
    name : str
        One of :func:`dataset_names` (``"pendigits"``, ``"har"``, ``"mnist"``,
        ``"letter"``), case-insensitive.
    data_home : str or os.PathLike, optional
        A folder searched first.
    preprocess : bool or {"standardize", "divide_255", "none"}, default=True
        ``True``: the paper's preprocessing for this dataset
        (:attr:`DatasetSpec.preprocessing`: pendigits and letter standardised
        per feature, mnist divided by 255, har raw). ``False``: the raw features.
        A string applies that step instead (see :func:`preprocess_features`).
    dtype : dtype or None, default=np.float32
        dtype of ``X``. ``None`` keeps the stored dtype for raw features (``uint8``
        for mnist) and gives float64 for preprocessed ones.
    download : bool, default=True
        Whether to fetch a missing dataset from OpenML (needs network access).
    return_X_y : bool, default=True
        ``True``: return ``(X, y)``. ``False``: return a :class:`~sklearn.utils.Bunch`.

    Returns
    -------
    X : ndarray of shape (n_samples, n_features)
        The features.
    y : ndarray of shape (n_samples,)
        ``int64`` labels ``0..C-1``.

    bunch : sklearn.utils.Bunch
        When ``return_X_y=False``: ``data`` (X), ``target`` (y), ``target_names``
        (the original label of each class, also as ``class_names``), ``split``
        (0 = official train, 1 = official test, or ``None``), ``name``, ``spec``
        (the :class:`DatasetSpec`), ``filename``, ``preprocessing`` (the step
        applied) and ``DESCR``.

    Raises
    ------
    ValueError
        If ``name`` is unknown (the message lists the known names) or
        ``preprocess`` is not a known step.
    DatasetNotFoundError
        (a :class:`FileNotFoundError`) If the file is not found and downloading
        is off or fails; the message lists the folders searched and where to put
        the file.
    DatasetFormatError
        (a :class:`ValueError`) If the file cannot be read or its content is not
        as expected; the message names the file.
    """
    spec = get_spec(name)
    method = _resolve_preprocess(preprocess, spec)
    for flag, value in (("download", download), ("return_X_y", return_X_y)):
        if not isinstance(value, (bool, np.bool_)):
            raise TypeError(f"{flag} must be a bool, got {type(value).__name__}.")
    try:
        np.dtype(dtype)  # (np.dtype(None) is float64: None passes)
    except TypeError as exc:
        raise TypeError(f"dtype must be a numpy dtype or None, got {dtype!r}.") from exc

    path = find_dataset_file(spec.name, data_home)
    if path is None:
        if not download:
            note = "Downloading was not attempted (download=False)."
            raise DatasetNotFoundError(_not_found_message(spec, data_home, note))
        try:
            path = _fetch_from_openml(spec, get_cache_dir())
        except Exception as exc:
            note = (
                f"Downloading from OpenML ({spec.openml_name!r}, version "
                f"{spec.openml_version}) failed: {type(exc).__name__}: {exc}"
            )
            raise DatasetNotFoundError(_not_found_message(spec, data_home, note)) from exc

    arrays = read_dataset_file(path, spec)
    X = preprocess_features(arrays["X"], method, dtype=dtype)
    if return_X_y:
        return X, arrays["y"]
    descr = (
        f"{spec.title} ({spec.source}): {X.shape[0]} samples, {X.shape[1]} features, "
        f"{len(arrays['class_names'])} classes. Preprocessing: {PREPROCESSING[method]}. "
        f"Read from {path}."
    )
    return Bunch(
        data=X,
        target=arrays["y"],
        target_names=arrays["class_names"],
        class_names=arrays["class_names"],
        split=arrays["split"],
        name=spec.name,
        spec=spec,
        filename=str(path),
        preprocessing=method,
        DESCR=descr,
    )

"""Model files: :func:`save_model` and :func:`load_model` (the skops format).

A model file is a skops file (a zip archive: ``schema.json`` and the arrays) whose
top-level object is one of mbkkm's estimators. :func:`load_model` looks at what a
file is before loading anything from it, and refuses with a message saying what
it is and how to make a loadable one: a pickle or a joblib file (loading one can
run any code), a skops file of another object (a scikit-learn ``KMeans``, an mbkkm
checkpoint), a damaged or truncated file, or something else (a data file given in
place of the model).
"""

from __future__ import annotations

import bz2
import io
import json
import lzma
import os
import pickletools
import re
import zipfile
import zlib
from pathlib import Path

from .._files import atomic_write
from .._files._skops import import_skops_io
from .._warn import one_line
from ._kernel_kmeans import KernelKMeans
from ._minibatch_kernel import MiniBatchKernelKMeans
from ._minibatch_kmeans import MiniBatchKMeans

__all__ = ["ESTIMATORS", "load_model", "save_model"]

#: The estimators a model file may hold.
ESTIMATORS = (MiniBatchKernelKMeans, KernelKMeans, MiniBatchKMeans)

#: Prefix of the types a model may contain that mbkkm trusts when loading.
TRUSTED_PREFIX = "mbkkm."

#: Other types a saved model may contain (a k-NN kernel model holds its sparse matrix).
TRUSTED_TYPES = ("scipy.sparse._csr.csr_matrix",)

#: Bytes read to tell what a file is.
HEAD_BYTES = 1 << 16

_HOW = (
    "save the model with mbkkm.save_model(estimator, path), or fit it with "
    "'mbkkm fit DATA -k K --model-out model.skops'"
)


def save_model(estimator, path) -> None:
    """Save a fitted mbkkm estimator to ``path`` (skops format, written atomically).

    Parameters
    ----------
    estimator : MiniBatchKernelKMeans, KernelKMeans or MiniBatchKMeans
        A fitted estimator.
    path : str or os.PathLike
        The file; a previous file there is replaced only once the new one is complete.

    Raises
    ------
    TypeError
        When ``estimator`` is not one of mbkkm's estimators.
    sklearn.exceptions.NotFittedError
        When it is not fitted.
    ValueError
        When its kernel is a callable: :func:`load_model` trusts only mbkkm's
        types, so the file could never be loaded (pickle such a model instead); or
        when it was fitted with torch (tensors as X, or a torch ``device``): the
        format holds numpy arrays, not tensors.
    ImportError
        When skops is not installed (``pip install "mbkkm[cli]"``).

    Examples
    --------
    >>> import numpy as np
    >>> from mbkkm import MiniBatchKMeans, load_model, save_model
    >>> X = np.random.default_rng(0).normal(size=(200, 2))
    >>> km = MiniBatchKMeans(n_clusters=3, random_state=0).fit(X)
    >>> import tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "model.skops")
    >>> save_model(km, path)
    >>> bool((load_model(path).predict(X) == km.predict(X)).all())
    True
    """
    from sklearn.utils.validation import check_is_fitted

    if not isinstance(estimator, ESTIMATORS):
        raise TypeError(
            f"save_model: estimator must be one of mbkkm's estimators "
            f"({', '.join(c.__name__ for c in ESTIMATORS)}), got "
            f"{_qualname(type(estimator))}"
        )
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"save_model: path must be a str or os.PathLike, got {type(path).__name__}")
    check_is_fitted(estimator)
    for param in ("kernel", "init"):
        value = getattr(estimator, param, None)
        if callable(value):
            also = (
                ", or set the parameter to what the fit does not need "
                "(estimator.set_params(init='k-means++')) before saving"
                if param == "init"
                else ""
            )
            raise ValueError(
                f"save_model: {param} is a callable ({getattr(value, '__name__', value)}), "
                "which load_model would not trust, so the file could never be loaded; save "
                "this model with pickle or joblib (and load such files only from a source "
                f"you trust){also}"
            )
    sio = import_skops_io()
    try:
        with atomic_write(path, "wb") as fh:  # nothing is left at path on an error
            sio.dump(estimator, fh)
    except RuntimeError as exc:  # torch's, from skops rebuilding a tensor's type
        raise ValueError(
            f"save_model: the skops format cannot store this model ({one_line(exc)}): a "
            "model fitted with torch (tensors as X, or a torch device) holds tensors; fit "
            "it on numpy arrays with device=None to save it, or pickle it"
        ) from exc


def load_model(path):
    """Load a model saved by :func:`save_model` or ``mbkkm fit --model-out``.

    Only skops files holding one of mbkkm's estimators are loaded, and only the
    types ``mbkkm.*`` (and skops' defaults) are trusted inside them. Any other
    file is refused before anything is loaded from it, with a message saying
    what it is: a pickle or joblib file (which can run any code when loaded), a
    skops file of another object (e.g. a scikit-learn ``KMeans``), a damaged or
    truncated file.

    Parameters
    ----------
    path : str or os.PathLike

    Returns
    -------
    estimator : MiniBatchKernelKMeans, KernelKMeans or MiniBatchKMeans

    Raises
    ------
    ValueError
        When the file is not a model file mbkkm loads (the message says what it
        is and how to make one).
    OSError
        When the file cannot be read.
    ImportError
        When skops is not installed (``pip install "mbkkm[cli]"``).
    """
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"load_model: path must be a str or os.PathLike, got {type(path).__name__}")
    path = Path(path)
    with open(path, "rb") as fh:
        head = fh.read(HEAD_BYTES)
    _check_is_skops(path, head)
    _check_estimator(path, _schema(path))
    sio = import_skops_io()
    try:
        untrusted = sio.get_untrusted_types(file=path)
    except Exception as exc:  # skops' own errors on a damaged tree
        raise ValueError(_damaged(path, exc)) from None
    foreign = [t for t in untrusted if not t.startswith(TRUSTED_PREFIX) and t not in TRUSTED_TYPES]
    if foreign:
        raise ValueError(f"{path} holds types mbkkm does not trust: {', '.join(foreign)}.")
    try:
        estimator = sio.load(path, trusted=untrusted)
    except (zipfile.BadZipFile, KeyError, EOFError, json.JSONDecodeError) as exc:
        raise ValueError(_damaged(path, exc)) from None
    if not isinstance(estimator, ESTIMATORS):  # pragma: no cover - checked on the schema
        raise ValueError(
            f"{path} holds a {_qualname(type(estimator))}, not one of mbkkm's estimators; {_HOW}."
        )
    return estimator


# ---------------------------------------------------------------------------
# What a file is
# ---------------------------------------------------------------------------

_ZIP = (b"PK\x03\x04", b"PK\x05\x06")
_COMPRESSED = {  # magic bytes -> (name, decompressor of a head, or None)
    b"\x1f\x8b": ("gzip", lambda: zlib.decompressobj(16 + zlib.MAX_WBITS)),
    b"BZh": ("bz2", bz2.BZ2Decompressor),
    b"\xfd7zXZ\x00": ("xz", lzma.LZMADecompressor),
    b"\x5d\x00\x00": ("lzma", lzma.LZMADecompressor),
    b"\x04\x22\x4d\x18": ("lz4", None),
}
_GLOBAL0 = re.compile(rb"^c([\w.]+)\n([\w.]+)\n")


def _qualname(cls) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _damaged(path: Path, exc: Exception) -> str:
    return f"{path} is a damaged model file ({type(exc).__name__}: {one_line(exc)}); {_HOW}."


def _check_is_skops(path: Path, head: bytes) -> None:
    """Refuse, with what it is, a file that is not a zip archive."""
    if head.startswith(_ZIP):
        return
    if not head:
        raise ValueError(f"{path} is empty, not a model file; {_HOW}.")
    what = _pickled(head)
    if what is not None:
        raise ValueError(
            f"{path} is {what}, not a model file mbkkm loads: loading a pickle "
            "can run any code, so mbkkm reads only its skops model files. If "
            "it holds an mbkkm estimator from a source you trust, load it with "
            f"joblib.load or pickle.load, then {_HOW}."
        )
    raise ValueError(
        f"{path} is not a model file (a skops zip archive){_looks_like(head)}; {_HOW}."
    )


def _pickled(head: bytes) -> str | None:
    """'a pickle file (of ...)', 'a joblib file ...', or None when ``head`` is neither."""
    for magic, (name, decompressor) in _COMPRESSED.items():
        if head.startswith(magic):
            what = _pickled_inside(decompressor, head)
            if what is None:
                return f"a {name}-compressed file (joblib.dump(..., compress=...) writes these)"
            return f"{what}, {name}-compressed (joblib)"
    if head[:1] == b"x" and len(head) > 1 and (head[0] * 256 + head[1]) % 31 == 0:
        what = _pickled_inside(zlib.decompressobj, head)
        if what is not None:
            return f"{what}, zlib-compressed (joblib)"
    if head[:2] == b"ZF":  # joblib < 0.10's compressed files
        return "a compressed joblib file (joblib < 0.10)"
    if not ((head[:1] == b"\x80" and len(head) > 1 and 2 <= head[1] <= 5) or _GLOBAL0.match(head)):
        return None
    joblib = b"joblib.numpy_pickle" in head or b"NumpyArrayWrapper" in head
    kind = "a joblib file (joblib.dump)" if joblib else "a pickle file"
    cls = _first_class(head)
    return f"{kind} of {cls}" if cls else kind


def _pickled_inside(decompressor, head: bytes) -> str | None:
    """What :func:`_pickled` says of the decompressed ``head`` ("a pickle of ..."), or
    None (no decompressor, not decompressible, or no pickle inside)."""
    if decompressor is None:
        return None
    try:
        inner = decompressor().decompress(head)[:HEAD_BYTES]
    except (OSError, EOFError, ValueError, lzma.LZMAError, zlib.error):
        return None
    what = _pickled(inner) if inner else None
    return None if what is None else what.replace("a pickle file", "a pickle")


def _first_class(head: bytes) -> str | None:
    """The first class a pickle names (its top-level object's, as a rule), read from
    its opcodes without running any."""
    strings: list[str] = []
    try:
        for op, arg, _ in pickletools.genops(io.BytesIO(head)):
            if op.name == "GLOBAL" and isinstance(arg, str):
                module, name = arg.split(" ", 1)
                if module not in ("copy_reg", "copyreg", "__builtin__", "builtins"):
                    return f"{module}.{name}"
            elif op.name == "STACK_GLOBAL" and len(strings) >= 2:
                module, name = strings[-2:]
                if module not in ("copyreg", "builtins"):
                    return f"{module}.{name}"
            elif isinstance(arg, str):
                strings.append(arg)
    except Exception:  # a head cut in the middle of an opcode, or joblib's raw arrays
        return None
    return None


def _looks_like(head: bytes) -> str:
    """What a file that is neither a zip nor a pickle looks like, for the message."""
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError:  # (a head cut inside a character is rare enough)
        text = ""
    if not text or not "".join(text.split()).isprintable():
        return f" (it starts with {head[:8]!r})"
    if text.lstrip().startswith(("{", "[")):
        return " (it is JSON-like text)"
    return " (it is text: a data file? 'mbkkm predict' takes the MODEL first, then the DATA)"


def _schema(path: Path) -> dict:
    """The skops schema (``schema.json``) of a zip file; refuses a damaged one."""
    try:
        with zipfile.ZipFile(path) as archive:
            if "schema.json" not in archive.namelist():
                raise ValueError(
                    f"{path} is a zip archive but not a skops file (it has no schema.json); {_HOW}."
                )
            schema = json.loads(archive.read("schema.json"))
    except zipfile.BadZipFile as exc:
        raise ValueError(
            f"{path} is a damaged or truncated zip archive ({one_line(exc)}), "
            f"not a readable model file; {_HOW}."
        ) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(
            f"{path} is a damaged skops file (its schema.json is not JSON: "
            f"{one_line(exc)}); {_HOW}."
        ) from None
    if not isinstance(schema, dict):
        raise ValueError(
            f"{path} is a damaged skops file (its schema.json is not an object); {_HOW}."
        )
    return schema


def _check_estimator(path: Path, schema: dict) -> None:
    """Refuse a skops file whose top-level object is not one of mbkkm's estimators."""
    module, name = schema.get("__module__"), schema.get("__class__")
    if str(module).startswith(TRUSTED_PREFIX) and name in {c.__name__ for c in ESTIMATORS}:
        return  # (only a str module starts with a prefix: JSON has no other kind that does)
    what = f"{module}.{name}" if module and module != "builtins" else str(name)
    content = schema.get("content")
    if name == "dict" and isinstance(content, dict) and "fingerprint" in content:
        raise ValueError(
            f"{path} is an mbkkm fit checkpoint ('mbkkm fit --checkpoint', "
            "fit(checkpoint=...)), not a model: run the same fit again to resume "
            f"it and finish it; {_HOW}."
        )
    hint = "; load it with skops.io.load" if str(module).startswith("sklearn.") else ""
    raise ValueError(
        f"{path} is a skops file holding a {what}, not one of mbkkm's estimators "
        f"({', '.join(c.__name__ for c in ESTIMATORS)}){hint}. mbkkm loads its own "
        f"models only: {_HOW}."
    )

"""Checkpointed fits of MiniBatchKernelKMeans: save every N iterations, resume exactly.

``MiniBatchKernelKMeans.fit(X, checkpoint=PATH, checkpoint_every=N)`` writes the
fit's state to PATH (skops format, atomically: a temporary file in the same
folder, fsynced, renamed onto PATH) after the initialisation, every N iterations
and at the end. A fit started again with the same file, parameters and data
resumes from the state saved last and ends with the model of an uninterrupted fit,
bit for bit.

What a checkpoint holds, and why it is enough:

* the fit's loop state (:func:`mbkkm._core._loop.snapshot`): the host windows, or on
  a torch device every buffer of the fixed-shape pool as it is, its layout and the
  read-back cadence; the iteration counter, the batch objectives read so far and
  early stopping's flag;
* the random generator's state after the initialisation: the batch plan is drawn
  from it up front, so the resumed fit draws the same plan again (the plan itself,
  max_iter x batch_size indices, is not saved) and leaves the generator as an
  uninterrupted fit does;
* with a chosen width (``gamma="auto"``), the selection: the resumed fit uses its
  width and does not run it (nor the initialisation) again;
* a fingerprint of the fit (class, parameters but ``verbose`` and
  ``compute_labels``, the mbkkm version, the backend, the data's shape and dtype,
  a hash of up to 1024 evenly spaced rows, a hash of ``sample_weight``): a file
  written by another fit is refused with the differences named.

The rest of the model (the kernel's data-driven parameters, the memory plan) is
recomputed from the parameters and the data, deterministically.
"""

from __future__ import annotations

import functools
import hashlib
import sys
import types
from numbers import Integral
from pathlib import Path

import numpy as np

from .._files import atomic_write
from .._files._skops import import_skops_io
from ..backends import get_backend
from ._base import kernel_kind

#: Version of the checkpoint's content; another version is refused.
FORMAT = 1

#: Types a checkpoint may hold besides mbkkm's own (``mbkkm.*``) and skops' defaults.
TRUSTED_TYPES = ("scipy.sparse._csr.csr_matrix", "numpy.dtype")

#: Parameters that do not change the fitted model (left out of the fingerprint).
NOT_FINGERPRINTED = ("verbose", "compute_labels")

#: Rows hashed for the data's fingerprint (evenly spaced, first and last included).
DIGEST_ROWS = 1024

#: The fields of numpy's RandomState.get_state() tuple, the keys of a checkpoint's
#: ``"random_state"``.
RNG_FIELDS = ("name", "key", "pos", "has_gauss", "cached_gaussian")


def check_checkpoint(checkpoint, checkpoint_every, estimator):
    """``fit``'s checkpoint arguments checked before any work: a FitCheckpoint or None
    (the estimator's ``kernel``, ``tau`` and ``max_iter`` are read).

    Raises TypeError / ValueError naming ``checkpoint`` or ``checkpoint_every``, and
    ImportError when skops (``mbkkm[cli]``) is missing.
    """
    if checkpoint is None:
        if checkpoint_every is not None:
            raise ValueError(
                "checkpoint_every is set but checkpoint is None: pass the file "
                "to save the fit in as checkpoint"
            )
        return None
    try:
        path = Path(checkpoint)  # a str or an os.PathLike
    except TypeError:
        raise TypeError(
            f"checkpoint must be a file path (str or os.PathLike), got {type(checkpoint).__name__}"
        ) from None
    if path.is_dir():
        raise ValueError(f"checkpoint: {str(path)!r} is a folder, expected a file path")
    if not path.parent.is_dir():
        raise ValueError(f"checkpoint: the folder of {str(path)!r} does not exist")
    every = max(1, estimator.max_iter // 10) if checkpoint_every is None else checkpoint_every
    # (numpy's bool_ is not Integral either)
    if isinstance(every, bool) or not isinstance(every, Integral) or every < 1:
        raise ValueError(
            f"checkpoint_every must be an integer >= 1 (iterations between "
            f"two checkpoints) or None, got {checkpoint_every!r}"
        )
    if estimator.tau is None:
        raise ValueError(
            "checkpoint needs an integer tau: tau=None (the untruncated "
            "algorithm) keeps a table over all points, which is not checkpointed"
        )
    kernel_kind(estimator.kernel).check_checkpoint(estimator.kernel)  # graph kernels: refused
    try:
        import_skops_io()
    except ImportError as exc:
        raise ImportError("checkpoint needs skops: pip install 'mbkkm[cli]'") from exc
    return FitCheckpoint(path, int(every))


class FitCheckpoint:
    """One fit's checkpoint file: reads it before the fit, writes it during the fit.

    Used by ``MiniBatchKernelKMeans.fit`` in this order: :meth:`open` (the
    fingerprint, and the saved state when the file exists), :attr:`gamma_selection`
    (the width to reuse), :meth:`record_random_state` (after the initialisation, or
    resuming instead of it), :meth:`loop` (the fit's loop, restored or new, with the
    saving hook attached).
    """

    def __init__(self, path, every):
        self.path, self.every = Path(path), every
        self.saved = None
        self.fingerprint = None

    # ------------------------------------------------------------------- read
    def open(self, estimator, rows, sample_weight):
        """Fingerprint this fit (``rows``: its checked input, in the adapter of its kind);
        read the file when it exists and refuse another fit's."""
        self.fingerprint = fingerprint(estimator, rows, sample_weight)
        if not self.path.exists():
            return
        saved = read_checkpoint(self.path)
        if saved["fingerprint"] != self.fingerprint:
            diff = _differences(saved["fingerprint"], self.fingerprint)
            raise ValueError(
                f"checkpoint: {str(self.path)!r} was written by another fit ({diff}); "
                "delete it or pass another file to start this fit"
            )
        self.saved = saved

    @property
    def resuming(self):
        """Whether the file holds a state of this fit to resume from."""
        return self.saved is not None

    @property
    def gamma_selection(self):
        """The saved width selection (a GammaSelection), or None."""
        return None if self.saved is None else self.saved["gamma_selection"]

    def record_random_state(self, random_state):
        """After the initialisation, before the plan is drawn: the generator's state.

        Resuming, the fit skips the initialisation: ``random_state`` is first set to
        its saved state after it.
        """
        if self.saved is not None:
            saved = self.saved["random_state"]
            random_state.set_state(tuple(saved[field] for field in RNG_FIELDS))
        self._rng_after_init = random_state.get_state()

    # ------------------------------------------------------------------ write
    def loop(self, estimator, windows, items, plan, random_state, cfg):
        """The fit's :class:`~mbkkm._core._loop.Loop`, restored from the file or
        new (then saved at once, so a kill during the first iterations keeps the init),
        saving itself every ``every`` iterations and when it is done."""
        from .._core._loop import fit_loop

        self._gamma_selection = estimator.gamma_selection_
        if self.saved is not None:  # (the generator's state: recorded after its restore)
            loop = fit_loop(None, items, plan, random_state, cfg, saved=self.saved["fit"])
            self.saved = None  # the loop owns the state now
        else:
            loop = fit_loop(windows, items, plan, random_state, cfg)
            self.save(loop.state)
        self._last = loop.state.n_iter
        loop.on_read_back.append(self._on_advance)
        return loop

    def _on_advance(self, fs):
        if fs.done or fs.n_iter - self._last >= self.every:
            self.save(fs)
            self._last = fs.n_iter

    def save(self, fs):
        """Write the checkpoint of the complete FitState ``fs`` (atomically)."""
        from .._core._loop import snapshot

        sio = import_skops_io()

        state = snapshot(fs)
        for key in ("objectives", "objectives_after"):  # arrays: compact in the file
            state[key] = np.asarray(state[key], dtype=np.float64)
        content = {
            "format": FORMAT,
            "fingerprint": self.fingerprint,
            "random_state": dict(zip(RNG_FIELDS, self._rng_after_init)),
            "gamma_selection": self._gamma_selection,
            "fit": state,
        }
        try:
            with atomic_write(self.path, "wb") as fh:
                sio.dump(content, fh)
        except OSError as exc:
            raise OSError(
                exc.errno, f"checkpoint: cannot write {str(self.path)!r}: {exc.strerror or exc}"
            ) from exc


def read_checkpoint(path):
    """The content of a checkpoint file (a dict), with mbkkm's types trusted only.

    Parameters
    ----------
    path : str or os.PathLike

    Returns
    -------
    content : dict
        ``"format"``, ``"fingerprint"`` (dict), ``"random_state"``,
        ``"gamma_selection"`` and ``"fit"`` (the loop state; ``fit["n_iter"]`` is the
        iteration it resumes at).

    Raises
    ------
    ValueError
        When the file is not a checkpoint of this version, or holds a type mbkkm does
        not trust.
    """
    sio = import_skops_io()
    path = Path(path)
    data = path.read_bytes()
    try:
        untrusted = sio.get_untrusted_types(data=data)
    except Exception as exc:  # not a skops file (zip), or damaged
        raise ValueError(
            f"checkpoint: {str(path)!r} is not an mbkkm checkpoint "
            f"({type(exc).__name__}: {exc}); delete it or pass another file"
        ) from None
    foreign = [t for t in untrusted if not t.startswith("mbkkm.") and t not in TRUSTED_TYPES]
    if foreign:
        raise ValueError(
            f"checkpoint: {str(path)!r} holds types mbkkm does not trust: {', '.join(foreign)}"
        )
    content = sio.loads(data, trusted=untrusted)
    if not isinstance(content, dict) or "fingerprint" not in content:
        raise ValueError(f"checkpoint: {str(path)!r} is not an mbkkm checkpoint")
    if content.get("format") != FORMAT:
        raise ValueError(
            f"checkpoint: {str(path)!r} has format {content.get('format')!r}; "
            f"this version of mbkkm reads format {FORMAT}"
        )
    return content


# ------------------------------------------------------------------ fingerprint
def fingerprint(estimator, rows, sample_weight):
    """What must be equal for a checkpoint to resume this fit (a dict of plain values);
    ``rows``: the fit's checked input in its adapter (:mod:`._rows`)."""
    # The package is loaded whenever this module is: its version is read there, not
    # imported, so that no module of the package imports the package's top.
    version = sys.modules[__name__.partition(".")[0]].__version__
    params = {
        name: _canon(value)
        for name, value in estimator.get_params(deep=False).items()
        if name not in NOT_FINGERPRINTED
    }
    X = rows.data
    nx = get_backend(X)
    backend = nx.name if nx.is_host else f"{nx.name}:{nx.device}"
    return {
        "estimator": type(estimator).__name__,
        "mbkkm": version,
        "params": params,
        "backend": backend,
        "shape": [int(s) for s in X.shape],
        "dtype": str(getattr(X, "dtype", "")),
        "data": _digest(*rows.fingerprint_arrays(DIGEST_ROWS)),
        "sample_weight": (
            None
            if sample_weight is None
            else _digest(np.ascontiguousarray(sample_weight, dtype=np.float64))
        ),
    }


@functools.singledispatch
def _canon(value):
    """A parameter as a plain, comparable value (arrays, generators and callables hashed)."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, Integral):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, dict):
        return {str(k): _canon(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, functools.partial):
        return ["partial", _canon(value.func), _canon(value.args), _canon(value.keywords)]
    if callable(value):  # a function, a bound method, an instance with __call__
        kind = value if hasattr(value, "__qualname__") else type(value)
        return f"callable:{_name_of(kind)}" + _code_digest(value)
    if hasattr(value, "shape"):  # an init array, numpy or tensor
        arr = value.detach().cpu().numpy() if hasattr(value, "detach") else np.asarray(value)
        return f"array{list(arr.shape)}:{arr.dtype}:" + _digest(np.ascontiguousarray(arr))
    return repr(value)


def _code_digest(f, seen=()):
    """A callable's code and the values it reads as a hash (empty for other callables):
    two lambdas, or a function redefined in a notebook cell, share a name.

    A function: its code, defaults, closure, the module-level values its code names
    (functions, classes and modules there by name only) and, for a bound method, its
    object's attributes; an instance of a class with ``__call__``: that method's and
    its attributes. What would differ from one process to the next (an object shown by
    its address) counts by its type only, so that a killed fit still resumes.
    """
    if f in seen:
        return ""
    seen = (*seen, f)
    code = getattr(f, "__code__", None)
    if code is None:
        call = type(f).__call__  # only callables come here
        if getattr(call, "__code__", None) is None:
            return ""
        parts = [_code_digest(call, seen), _plain(getattr(f, "__dict__", {}), seen)]
    else:
        module = getattr(f, "__globals__", {})
        named = {name: module[name] for name in code.co_names if name in module}
        parts = [
            _plain(code, seen),
            _plain(f.__defaults__, seen),
            _plain(f.__kwdefaults__, seen),
            _plain([cell.cell_contents for cell in f.__closure__ or ()], seen),
            _plain({k: v for k, v in named.items() if not _by_name(v)}, seen),
            sorted(_name_of(v) for v in named.values() if _by_name(v)),
            _plain(getattr(getattr(f, "__self__", None), "__dict__", None), seen),
        ]
    return ":" + hashlib.sha256(repr(parts).encode()).hexdigest()[:16]


def _by_name(value):
    """A module-level function, class or module: fingerprinted by its name."""
    return callable(value) or isinstance(value, types.ModuleType)


def _name_of(value):
    return f"{getattr(value, '__module__', '')}.{getattr(value, '__qualname__', value.__name__)}"


def _plain(value, seen):
    """A value as text for :func:`_code_digest`, the same in every process."""
    if hasattr(value, "__code__"):  # a function: its name and its own code
        text = _name_of(value) + _code_digest(value, seen)
    elif hasattr(value, "co_code"):  # a code object: a lambda or a def inside
        text = repr([value.co_code, value.co_names, [_plain(c, seen) for c in value.co_consts]])
    elif isinstance(value, (list, tuple)):
        text = repr([_plain(v, seen) for v in value])
    elif isinstance(value, (set, frozenset)):  # in an order that is the same each run
        text = repr(sorted(_plain(v, seen) for v in value))
    elif isinstance(value, dict):
        text = repr(sorted((str(k), _plain(v, seen)) for k, v in value.items()))
    else:
        text = repr(_canon(value))
    return type(value).__qualname__ if " at 0x" in text else text


@_canon.register(list)
@_canon.register(tuple)
def _(value):
    return [_canon(v) for v in value]


@_canon.register(np.random.RandomState)
def _(value):  # its state at the start of the fit
    return "RandomState:" + _digest(*(np.asarray(v) for v in value.get_state()[1:]))


@_canon.register(np.random.Generator)
def _(value):
    return f"Generator:{value.bit_generator.state!r}"


def _digest(*arrays):
    h = hashlib.sha256()
    for a in arrays:
        a = np.ascontiguousarray(a)
        h.update(f"{a.dtype.str}{a.shape}".encode())
        h.update(a.tobytes())
    return h.hexdigest()[:32]


def _differences(saved, current, prefix=""):
    """The fingerprint entries that differ, as text (at most 4 named)."""
    out = []
    for key in sorted(set(saved) | set(current)):
        a, b = saved.get(key), current.get(key)
        if a == b:
            continue
        if isinstance(a, dict) and isinstance(b, dict):
            out.append(_differences(a, b, prefix=f"{prefix}{key}."))
        elif key in ("data", "sample_weight"):
            out.append(f"{prefix}{key} differ")
        else:
            out.append(f"{prefix}{key} {a!r} there, {b!r} here")
    return "; ".join(out[:4]) + ("; ..." if len(out) > 4 else "")

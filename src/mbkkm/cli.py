"""The ``mbkkm`` command line (needs the ``cli`` extra: click, tqdm, skops, matplotlib).

Commands::

    mbkkm fit DATA --n-clusters K [options]   cluster your own data (CSV, .npy, .npz,
                                              Parquet, Feather)
    mbkkm predict MODEL DATA [options]        label new data with a saved model
    mbkkm datasets                            the paper's datasets: known and local
    mbkkm experiment PRESET|FILE --out DIR    run an experiment grid (resumable)
    mbkkm plot RESULTS... --out DIR           figures from saved result tables
    mbkkm kernel-scale DATASET --kernel rbf|knn|heat  the paper's gamma = max_x sqrt(K(x, x))

Exit codes: 0 success; 1 a runtime failure (unreadable or non-numeric data, a
failed fit, no results to plot); 2 a usage error (unknown option, preset,
dataset, algorithm or kernel; a missing file; columns that are not the model's;
an .npz without the --key array; --gamma for a kernel without one, or --gamma
auto for a kernel without a width; an output that is an input or another output,
or labels or distances to a suffix of a format not written (.npz, .gz); a header
name held twice).
Errors are printed as one line (``Error: ...``), without a traceback.
"""

from __future__ import annotations

import io
import itertools
import os
import sys
import threading
import time
import warnings
from contextlib import ExitStack, closing, contextmanager, suppress
from dataclasses import dataclass
from functools import cached_property, partial, wraps
from pathlib import Path

try:
    import click
except ModuleNotFoundError as _exc:  # the ``cli`` extra is not installed
    if _exc.name != "click":
        raise
    raise ModuleNotFoundError(
        "No module named 'click': the mbkkm command line needs the 'cli' extra: "
        'pip install "mbkkm[cli]" (from a clone: pip install -e ".[cli]")',
        name="click",
    ) from None
import numpy as np

from . import __version__
from ._files import (
    ColumnSelectionError,
    OptionError,
    Table,
    atomic_write,
    names_list,
    open_table,
    open_writer,
    output_kind,
)
from ._files._alloc import release_free_memory, tune_allocator
from ._progress import Progress, reporting
from ._warn import one_line

# ---------------------------------------------------------------------------
# Reading user data
# ---------------------------------------------------------------------------


def read_data(
    path: str | Path,
    *,
    header: bool | None = None,
    key: str = "X",
    columns=None,
    drop=None,
    dtype=None,
) -> np.ndarray:
    """Read a numeric 2-d array from delimited text, .npy, .npz, Parquet or Feather/Arrow.

    Parameters
    ----------
    path : path
        ``.npy``: the array, memory-mapped (read-only, never copied when its dtype
        is kept and all columns are read); ``.npz``: the array under ``key``;
        ``.parquet`` / ``.pq`` and ``.feather`` / ``.arrow`` / ``.ipc``: all
        numeric columns (needs pyarrow); anything else: delimited text (delimiter
        sniffed among ``,``, tab, ``;`` and space, checked against the next lines),
        parsed in blocks by pandas' C parser straight into ``dtype``, by as many
        threads as mbkkm uses (``threadpool_limits`` and ``OMP_NUM_THREADS`` set
        them).
    header : bool, optional
        Whether the first non-blank text line is a header; None: a header when some
        field of that line is not a number, or when it is the column indices 0, 1,
        ..., d-1 in order (the header pandas writes for unnamed columns).
    key : str, default="X"
        The array of an ``.npz`` file.
    columns, drop : sequence of (str or int), optional
        Columns to read / to leave out, by header name or 0-based index.
    dtype : {None, "float32", "float64"}, default=None
        None: float32, except that a float32 or float64 ``.npy`` / ``.npz`` array
        keeps its own.

    Returns
    -------
    X : ndarray of shape (n_samples, n_features)

    Raises
    ------
    OSError
        If the file cannot be read.
    ValueError
        If the content is not a numeric 2-d table; the message names the first
        offending column and line.
    """
    return open_table(path, header=header, key=key, columns=columns, drop=drop, dtype=dtype).read(
        n_threads=_reading_threads()
    )


def _reading_threads() -> int:
    """Threads that parse text input: the library's own count (scikit-learn's rule)."""
    from .backends._threads import effective_n_threads

    return effective_n_threads()


def load_model(path: str | Path):
    """Load a model saved by ``mbkkm fit --model-out`` or :func:`mbkkm.save_model`.

    The same function as :func:`mbkkm.load_model`: only skops files holding one of
    mbkkm's estimators are loaded, trusting the ``mbkkm.*`` types only; a pickle,
    joblib or foreign skops file is refused with a message saying what it is.
    """
    from .cluster import load_model as _load_model

    return _load_model(path)


@contextmanager
def _spinner(message: str):
    """Elapsed time on stderr while a fit runs (only on a terminal). Yields ``stop()``,
    which ends it early and clears its line (a progress bar takes its place)."""
    stop = threading.Event()

    def spin():
        start = time.perf_counter()
        for mark in itertools.cycle("|/-\\"):
            if stop.wait(0.2):
                break
            sys.stderr.write(f"\r{mark} {message} {time.perf_counter() - start:.1f} s")
            sys.stderr.flush()
        sys.stderr.write("\r" + " " * (len(message) + 16) + "\r")  # its line cleared
        sys.stderr.flush()

    thread = threading.Thread(target=spin, daemon=True)

    def end():
        stop.set()
        if thread.ident is not None:  # started: on a terminal
            thread.join()

    if sys.stderr.isatty():
        thread.start()
    try:
        yield end
    finally:
        end()


# ---------------------------------------------------------------------------
# Options declared once
# ---------------------------------------------------------------------------

#: Points drawn in a ``--plot`` (a random sample of the rows beyond it).
PLOT_POINTS = 20_000
#: Bytes of distances per labelling block (bounds the block's rows for large k).
LABEL_BLOCK_BYTES = 64 * 2**20

_POSITIVE = click.IntRange(1)
_POSITIVE_FLOAT = click.FloatRange(0, min_open=True)
_INPUT = click.Path(exists=True, dir_okay=False)
_FOLDER = click.Path(file_okay=False)


@contextmanager
def _fails(*errors, prefix: str = "", usage: bool = False):
    """The ``errors`` raised in the block as the command's one-line error, without
    a traceback: a runtime failure (exit 1), or with ``usage`` a usage error (exit
    2, the message as it is)."""
    try:
        yield
    except BrokenPipeError:
        raise  # standard output's reader has gone: the command stops quietly (main)
    except errors as exc:
        if usage:
            raise click.UsageError(str(exc)) from None
        raise click.ClickException(prefix + one_line(exc)) from None


def _options(*decorators, into: str):
    """Click options (and arguments) declared once, applied as one decorator in
    this order; the command receives their values as one dict named ``into``."""
    names = [decorator(lambda: None).__click_params__[0].name for decorator in decorators]

    def apply(command):
        @wraps(command)
        def receive(**kwargs):
            kwargs[into] = {name: kwargs.pop(name) for name in names}
            return command(**kwargs)

        for decorator in reversed(decorators):
            receive = decorator(receive)
        return receive

    return apply


def _out_option(help: str):
    """The folder ``--out`` of a command's results."""
    return click.option("--out", "out_dir", type=_FOLDER, required=True, help=help)


def _file_option(*names, **kwargs):
    """An option naming a file to write (default None: not written)."""
    return click.option(*names, type=click.Path(dir_okay=False, writable=True), **kwargs)


def _split_names(ctx, param, values) -> list[str] | None:
    """Comma-separated column names of a repeatable option (its callback); None
    when not given."""
    if not values:
        return None
    names = [v.strip() for value in values for v in value.split(",") if v.strip()]
    if not names:
        raise click.UsageError(
            f"{param.opts[0]}: no column named (an empty list); give header "
            "names or 0-based indices, comma-separated."
        )
    return names


def _names_option(name: str, help: str):
    """A repeatable option of comma-separated column names (received as a list, or
    None)."""
    return click.option(name, multiple=True, metavar="NAMES", callback=_split_names, help=help)


#: The options of ``open_table``, received as one dict ``source``.
_data_options = _options(
    click.option(
        "--header/--no-header",
        default=None,
        help="Whether a text file has a header line (default: detected: a line with a "
        "field that is not a number, or the column indices 0, 1, ..., d-1).",
    ),
    click.option("--key", default="X", help="Array name in an .npz file."),
    _names_option(
        "--columns",
        "Columns to use, by header name or 0-based index, comma-separated "
        "(e.g. --columns x,y,z or --columns 0,2). Default: all (predict: the model's, "
        "found by name; the fit's choice is saved with the model).",
    ),
    _names_option(
        "--drop",
        "Columns to leave out (an id, a label), by header name or 0-based "
        "index, comma-separated (predict: default the fit's).",
    ),
    click.option(
        "--dtype",
        type=click.Choice(["float32", "float64"]),
        help="Precision of the data in memory. Default: float32 (as the "
        "estimators prefer); a float64 .npy/.npz keeps float64.",
    ),
    into="source",
)


class _NumberOr(click.ParamType):
    """A positive number (``integer``: a positive integer), or one of the ``words``
    (a word -> its value, case-insensitive)."""

    def __init__(self, words: dict, integer: bool = False):
        self.words, self.integer = words, integer
        self.name = "|".join(["INTEGER" if integer else "FLOAT", *words])

    def convert(self, value, param, ctx):
        if str(value).strip().lower() in self.words:
            return self.words[str(value).strip().lower()]
        try:
            number = (int if self.integer else float)(value)
        except (TypeError, ValueError):
            kinds = ["a positive " + ("integer" if self.integer else "number")]
            kinds += map(repr, self.words)
            self.fail(f"{value!r} is not {', '.join(kinds[:-1])} or {kinds[-1]}", param, ctx)
        if self.integer and number < 1:
            self.fail(f"{number} is not >= 1", param, ctx)
        if not (np.isfinite(number) and number > 0):
            self.fail(f"{value!r} is not a positive number", param, ctx)
        return number


class _KernelChoice(click.Choice):
    """The registry's kernel names, read on first use: the registry imports
    scikit-learn, which ``mbkkm --help`` and most option errors do without."""

    def __init__(self, graph: bool = False):
        self.graph, self.case_sensitive = graph, True

    @cached_property
    def choices(self):
        from .kernels import kernel_names

        return tuple(kernel_names(transductive=None if self.graph else False))


#: The estimator's options of ``mbkkm fit`` (with --n-neighbors, --t and
#: --gamma-plot, which are not), received as one dict ``params``.
_model_options = _options(
    click.option(
        "--kernel",
        type=_KernelChoice(graph=True),
        default="rbf",
        help="Kernel. 'heat': the heat kernel of the data's k-NN graph (diffusion time --t, "
        "neighbours --n-neighbors); 'knn': the paper's k-NN kernel (needs --n-neighbors).",
    ),
    click.option(
        "--n-neighbors",
        type=_POSITIVE,
        help="Graph kernels: neighbours per point, the point itself included "
        "(heat: 10, 20 or 40 chosen by the graph's eigengap by default).",
    ),
    click.option(
        "--t",
        "heat_t",
        type=_NumberOr({"auto": "auto"}),
        help="Heat kernel: diffusion time, or 'auto' to choose it without labels "
        "(prints the choice; the candidates with --verbose). Default: auto.",
    ),
    click.option(
        "--gamma",
        type=_NumberOr({"auto": "auto", "mean-distance": "mean-distance"}),
        help="Kernel width (rbf: exp(-gamma ||x-y||^2)): a number; 'auto' to choose it "
        "without labels (prints the choice; the candidates with --verbose); 'mean-distance' "
        "for 1 / (2 sum of feature variances). Default: rbf and laplacian as 'auto' when "
        "min(n, 1000) >= 10 points per cluster (k <= 100), else "
        "'mean-distance'; other kernels their own default.",
    ),
    _file_option(
        "--gamma-plot",
        help="When the width is chosen (--gamma auto or the default): save the "
        "criterion against gamma to this image.",
    ),
    click.option("--batch-size", type=_POSITIVE, default=1024, help="Points per mini-batch."),
    click.option(
        "--tau",
        type=_NumberOr({"none": None}, integer=True),
        default="200",
        help="Window length (points kept per center); 'none' for the untruncated "
        "algorithm (a table over all points).",
    ),
    click.option(
        "--max-iter", type=_POSITIVE, default=200, help="Number of mini-batch iterations."
    ),
    click.option(
        "--learning-rate",
        type=click.Choice(["adaptive", "classic"]),
        default="adaptive",
        help="Learning rate.",
    ),
    click.option(
        "--seed", "random_state", type=click.IntRange(0, 2**32 - 1), default=0, help="Random seed."
    ),
    click.option(
        "--device",
        help="Where the iterations and the labelling run: 'cpu' (numpy, the default), "
        "'cuda', 'cuda:N' or 'auto' (a GPU through PyTorch; the data stays in host "
        "memory for the labelling, streamed to the GPU in chunks), 'torch-cpu'.",
    ),
    into="params",
)

#: The help of --labels-out and --transform-out (of fit and predict): the formats.
_LABEL_FILES = (
    "one per line (text), or .npy, .parquet, .feather by the suffix (not .npz); '-' for stdout."
)
_DISTANCE_FILES = (
    "Write the squared distances of every point to the k centers (float32; "
    "text, .npy, .parquet or .feather by the suffix; '-' for stdout"
)

#: The outputs of ``mbkkm fit`` and its checkpoint, received as one dict ``outputs``.
_fit_output_options = _options(
    _file_option("--labels-out", "labels", help="Write the labels: " + _LABEL_FILES),
    _file_option("--transform-out", "transform", help=_DISTANCE_FILES + ")."),
    _file_option(
        "--model-out",
        "model",
        help="Save the fitted model (skops format; load with mbkkm.cli.load_model, "
        "use with 'mbkkm predict').",
    ),
    _file_option(
        "--plot",
        help="Save a scatter plot of the clusters to this image (.png, .svg, .pdf): "
        "the two columns when there are two, else the first two principal "
        f"components; at most {PLOT_POINTS:,} points, drawn at random.",
    ),
    _file_option(
        "--checkpoint",
        help="Save the fit's state to this file every --checkpoint-every iterations; "
        "the same command run again resumes from it (a file of another "
        "command is refused). Removed once the outputs are written.",
    ),
    click.option(
        "--checkpoint-every",
        type=_POSITIVE,
        metavar="N",
        help="Iterations between two checkpoints (default: max-iter / 10).",
    ),
    into="outputs",
)

# ---------------------------------------------------------------------------
# Data in: the columns, the fit's choice saved with the model, matched at predict
# ---------------------------------------------------------------------------


def _note_reading(table: Table, quiet: bool) -> None:
    """Say on stderr (unless ``quiet``) how ``table`` was read where a user may not
    expect it: a first line of numbers read as a header because it is the column
    indices 0, 1, ..., d-1, or a 1-d array read as one column."""
    if table.one_dimensional and not quiet:
        click.echo(
            f"note: the array of {table.path} is 1-d ({table.n_rows:,} values): read as one "
            "column, one feature per point.",
            err=True,
        )
    if table.index_header and not quiet:
        d = table.n_file_columns
        indices = ", ".join(map(str, range(d))) if d <= 3 else f"0, 1, ..., {d - 1}"
        click.echo(
            f"note: the first line of {table.path} ({indices}: the names pandas gives "
            "unnamed columns) is read as a header; --no-header reads it as data.",
            err=True,
        )


def _check_unique_names(table: Table, data) -> None:
    """Refuse (a usage error) header names the fit would use more than once: the
    model's feature names must be unique, as scikit-learn's are."""
    names = table.names or []
    doubled = sorted({n for n in names if names.count(n) > 1})
    if doubled:
        raise click.UsageError(
            f"{data}: the header holds {names_list(doubled)} more than once; rename the "
            "columns, or leave the copies out with --drop (by 0-based index)."
        )


def _check_named(table: Table, data, source) -> None:
    """Refuse (a usage error) a header with a column without a name, unless --columns or
    --drop says which columns to use: pandas writes its index so
    (``df.to_csv(path)``), and the row numbers would be clustered as a feature."""
    names = table.file_names or []
    unnamed = [j for j, n in enumerate(names) if not n.strip()]
    if unnamed and source.get("columns") is None and source.get("drop") is None:
        which = ", ".join(map(str, unnamed))
        like = (
            "as a delimiter at the end of every line gives the last column"
            if unnamed == [len(names) - 1]
            else "as pandas' index does (df.to_csv(path) without index=False)"
        )
        raise click.UsageError(
            f"{data}: column {which} (0-based) has no name in the header, {like}; leave "
            f"it out with --drop {which}, or choose the columns with --columns."
        )


def _open_data(data, refused="--{option}: {detail}", **source) -> Table:
    """open_table with the CLI's errors: a column choice that does not fit DATA is a
    usage error (2; ``refused`` formatted with ``option``, ``detail`` and ``data``),
    as is another option that does not (an .npz without the --key array);
    unreadable data is a runtime failure (1)."""
    with _fails(OSError, ValueError, ImportError):
        try:
            return open_table(data, **source)
        except ColumnSelectionError as exc:
            message = refused.format(option=exc.option, detail=exc.detail, data=data)
            raise click.UsageError(message) from None
        except OptionError as exc:
            raise click.UsageError(f"--{exc.option}: {exc.detail}") from None


#: The attribute in which ``mbkkm fit`` saves its column choice with the model
#: (see :func:`_record_columns`); models fitted in Python have none.
COLUMN_CHOICE = "_mbkkm_columns"


def _record_columns(est, table: Table, columns, drop) -> None:
    """Save with the fitted model what ``mbkkm predict`` needs to find its columns
    again: the header names of the columns used (``feature_names_in_``, as
    scikit-learn records a DataFrame's), and the ``--columns`` / ``--drop`` choice
    with the columns it used and left out."""
    names = table.file_names
    if table.names is not None:
        est.feature_names_in_ = np.asarray(table.names, dtype=object)
    choice = {"columns": columns, "drop": drop, "file_columns": int(table.n_file_columns)}
    choice["used"] = [int(j) for j in table.columns]
    # header names of the file's columns not used (None: the file had no header)
    choice["left_out"] = None
    if names is not None:
        choice["left_out"] = [str(n) for j, n in enumerate(names) if j not in table.columns]
    setattr(est, COLUMN_CHOICE, choice)


def _predict_table(est, data, source) -> Table:
    """DATA opened with the model's columns, in the model's order.

    The model's feature names (``feature_names_in_``) and a header in DATA: the
    columns are found by name, wherever they are; a column the model needs that
    is not there, or one it was not fitted on that is (after ``--columns`` /
    ``--drop``, or the fit's choice saved with the model), is refused as a usage
    error naming them. Names on one side only: a warning, and the columns are
    taken by position. Without ``--columns`` / ``--drop`` the fit's choice is
    replayed.
    """
    names = getattr(est, "feature_names_in_", None)
    names = None if names is None else [str(n) for n in names]
    saved = getattr(est, COLUMN_CHOICE, None) or {}
    given = source["columns"] is not None or source["drop"] is not None
    reopen = partial(_open_data, data, **source)
    table = reopen()
    if names is not None and table.names is not None:
        return _select_by_name(table, names, saved, given, data, reopen)
    if names is not None:
        click.echo(
            f"Warning: {data} has no column names, but the model was fitted on named "
            f"columns ({names_list(names)}); its columns are taken by position.",
            err=True,
        )
        if not given and saved.get("file_columns") == table.n_file_columns:
            table = reopen(columns=saved["used"])
        return table
    if table.names is not None:
        click.echo(
            f"Warning: {data} has column names, but the model was fitted without "
            "(from a file without a header, or an array); its columns are taken by "
            "position.",
            err=True,
        )
    if not given and (saved.get("columns") or saved.get("drop")):
        # indices (a fit without a header): the same choice, by position
        table = reopen(
            columns=saved["columns"],
            drop=saved["drop"],
            refused="the model's --{option} choice of the fit does not fit {data}: "
            "{detail} Choose the columns with --columns / --drop.",
        )
    return table


def _select_by_name(table, names, saved, given, data, reopen) -> Table:
    """The model's named columns of a table with a header, in the model's order
    (``reopen(columns=..., drop=None)`` opens DATA again with other columns)."""
    file_names = table.file_names
    if given:  # the columns chosen at predict
        candidates = list(table.columns)
    elif saved.get("columns") is not None:  # a subset chosen at the fit: the others ignored
        candidates = [j for j, n in enumerate(file_names) if n in set(names)]
    else:  # all columns but those the fit left out (a name left out twice: twice)
        left_out, candidates = list(saved.get("left_out") or ()), []
        for j, n in enumerate(file_names):
            if n in left_out:
                left_out.remove(n)
            else:
                candidates.append(j)
    have = [file_names[j] for j in candidates]
    if have == names:  # the model's columns in its order (a name held twice: by position)
        order = candidates
    elif len(set(names)) < len(names):  # the fit's header held a name twice
        doubled = sorted({n for n in names if names.count(n) > 1})
        raise click.UsageError(
            f"the model's columns hold {names_list(doubled)} more than once, so they "
            f"cannot be found by name, and the columns of {data} "
            f"({names_list(have)}) are not the model's ({names_list(names)}) in its "
            "order; choose them with --columns (by 0-based index)."
        )
    else:
        _check_names(names, have, data, candidates)
        order = [candidates[have.index(n)] for n in names]
    return table if order == table.columns else reopen(columns=order, drop=None)


def _check_names(names, have, data, candidates) -> None:
    """Refuse the columns ``have`` of DATA (at the 0-based ``candidates``) that are not
    the model's ``names``."""
    missing = [n for n in names if n not in have]
    extra = [n for n in have if n not in set(names)]
    # --drop by name, or by index where a name cannot be given (empty, or with a comma)
    drop = [n if n and "," not in n else str(j) for n, j in zip(have, candidates) if n in extra]
    parts = []
    if missing:
        parts.append(
            f"{data} lacks the column{'s' * (len(missing) != 1)} the model was fitted "
            f"on: {names_list(missing)}"
        )
    if extra:
        parts.append(
            f"{data} has the column{'s' * (len(extra) != 1)} the model was not fitted on: "
            f"{names_list(extra)} (leave {'it' if len(extra) == 1 else 'them'} "
            f"out with --drop {','.join(drop)})"
        )
    if parts:
        raise click.UsageError(
            "; ".join(parts) + f". The model expects {names_list(names)}, in any order."
        )
    doubled = sorted({n for n in have if have.count(n) > 1})
    if doubled:
        raise click.UsageError(
            f"the header of {data} holds {names_list(doubled)} more than "
            "once: the model's columns cannot be found by name; choose them "
            "with --columns (by 0-based index)."
        )


@contextmanager
def _progress(total, unit: str, desc: str, enabled: bool):
    """The progress of a pass on stderr (:class:`mbkkm._progress.Progress`): a tqdm bar
    on a terminal (after a second), else a line every few seconds with the time left
    (``MBKKM_PROGRESS_INTERVAL`` seconds, 5 by default) and one at the end with the
    rate. ``unit``: "rows" or "bytes". Yields its update (None when not enabled)."""
    if not enabled:
        yield None
        return
    with Progress(total, desc, unit=unit, stream=sys.stderr) as progress:
        yield progress.update


@contextmanager
def _reading(table, desc: str, quiet: bool):
    """How to read ``table``: ``table.read(**how)`` (``mbkkm fit``) or
    ``table.blocks(**how)`` (``mbkkm predict``) in ``with _reading(...) as how:``,
    with its progress (bytes of text, else rows; a bar on a terminal, else lines
    with the time left: :func:`_progress`) and the library's thread count
    of parsing threads. Reading errors become one-line CLI errors."""
    total, unit = (table.size_bytes, "bytes") if table.kind == "text" else (table.n_rows, "rows")
    with (
        _progress(total, unit, f"{desc} {table.path.name}", not quiet) as update,
        _fails(OSError, ValueError, ImportError),
    ):
        yield {"progress": update, "n_threads": _reading_threads()}


# ---------------------------------------------------------------------------
# Labels, distances, figures and the model out
# ---------------------------------------------------------------------------


@dataclass
class _Outputs:
    """The files a command writes (None: not asked for; "-": standard output)."""

    labels: str | None = None
    transform: str | None = None
    model: str | None = None
    plot: str | None = None
    gamma_plot: str | None = None
    checkpoint: str | None = None
    checkpoint_every: int | None = None

    #: The option and kind (:func:`_check_output`) of each output file, in the order
    #: they are checked.
    OPTIONS = {
        "labels": ("--labels-out", "stream"),
        "transform": ("--transform-out", "stream"),
        "model": ("--model-out", "table"),
        "plot": ("--plot", "image"),
        "gamma_plot": ("--gamma-plot", "image"),
        "checkpoint": ("--checkpoint", "checkpoint"),
    }

    def check(self, kernel=None, tau=None, inputs=None) -> None:
        """Refuse, before any work, outputs that cannot be written: the labels and the
        distances both to standard output, an output that is one of the ``inputs``
        (a dict: argument name -> path) or another output, then each in turn, then a
        checkpoint the fit (of ``kernel`` and ``tau``) cannot save."""
        if self.labels == "-" and self.transform == "-":
            raise click.UsageError(
                "--transform-out: standard output already takes the labels; "
                "write one of them to a file (--labels-out FILE)."
            )
        self._check_distinct(inputs or {})
        for name, (option, kind) in self.OPTIONS.items():
            _check_output(getattr(self, name), option, kind)
        if self.checkpoint is None:
            if self.checkpoint_every is not None:
                raise click.UsageError("--checkpoint-every needs --checkpoint FILE.")
            return
        from .kernels import GRAPH_KERNELS

        if kernel in GRAPH_KERNELS:
            raise click.UsageError(
                f"--checkpoint is not available with --kernel {kernel} (a graph "
                "kernel's graph and eigenpairs are not checkpointed)."
            )
        if tau is None:
            raise click.UsageError(
                "--checkpoint needs an integer --tau (the untruncated algorithm is not "
                "checkpointed)."
            )

    def draw(self, est, X, sample, labels, names) -> dict[str, bytes]:
        """The figures, drawn and rendered before any output is written (path -> the
        file's bytes): the plot of the sampled rows of X (``sample``) and their
        ``labels``, the gamma plot. A gamma plot of a width not chosen here is not
        drawn (and said so); a figure that cannot be drawn is the command's one-line
        failure (exit 1), with nothing written."""
        figures = {}
        if self.gamma_plot is not None and est.gamma_selection_ is None:
            click.echo(
                f"--gamma-plot: nothing written, the width was not chosen here "
                f"(gamma_ = {est.gamma_!r}; pass --gamma auto to choose it)",
                err=True,
            )
            self.gamma_plot = None
        elif self.gamma_plot is not None:
            with _drawing("--gamma-plot"):
                figures[self.gamma_plot] = _render(
                    gamma_figure(est.gamma_selection_), self.gamma_plot
                )
        if self.plot is not None:
            k, n, seed = est.n_clusters, X.shape[0], est.random_state
            with _drawing("--plot"):
                # the sampled rows: an array, or CSR rows (cluster_figure tells them apart)
                figure = cluster_figure(X[sample], labels, k, names=names, n_total=n, seed=seed)
                figures[self.plot] = _render(figure, self.plot)
        return figures

    def save(self, est, figures: dict[str, bytes]) -> None:
        """Write the model, then the ``figures`` drawn by :meth:`draw`."""
        if self.model is not None:
            from .cluster import save_model

            with _writing(self.model):
                save_model(est, self.model)
        for path, data in figures.items():
            with _writing(path), atomic_write(path, "wb") as fh:
                fh.write(data)

    def _check_distinct(self, inputs) -> None:
        """Refuse an output file that is one of the ``inputs`` (it would be
        overwritten) or that another output also names (only the last written would
        be left)."""
        seen = dict(inputs)  # option or argument -> path, of the files met so far
        for name, (option, _) in self.OPTIONS.items():
            path = getattr(self, name)
            if path is None or path == "-":  # standard output: checked above
                continue
            for other, other_path in seen.items():
                if _same_file(path, other_path):
                    what = "the input" if other in inputs else "the output"
                    raise click.UsageError(
                        f"{option} and {other} name the same file ({path}): {what} "
                        f"{other} would be overwritten; give {option} a file of its own."
                    )
            seen[option] = path


def _same_file(a, b) -> bool:
    """Whether paths ``a`` and ``b`` are one file: :func:`os.path.samefile` when both
    exist (links, other spellings), else their resolved paths are equal."""
    if Path(a).exists() and Path(b).exists():
        return os.path.samefile(a, b)
    return Path(a).resolve() == Path(b).resolve()


def _check_output(path, option: str, kind: str) -> None:
    """Refuse an output (a "table", "stream": a table or standard output, "image" or
    "checkpoint") that cannot be written: standard output, a missing folder, an
    image format matplotlib does not write, labels or distances to a suffix of a
    format not written (.npz, .gz: the text would be misnamed), Parquet without
    pyarrow."""
    if path is None or (path == "-" and kind == "stream"):
        return
    if path == "-":
        how = "be standard output" if kind == "checkpoint" else "write to standard output"
        raise click.UsageError(f"{option}: cannot {how}; give a file name.")
    path = Path(path)
    if not path.parent.is_dir():
        raise click.UsageError(f"{option}: the folder {str(path.parent)!r} does not exist.")
    if kind == "image":
        formats = _new_figure().canvas.get_supported_filetypes()
        fmt = path.suffix[1:].lower()
        if fmt not in formats:
            raise click.UsageError(
                f"{option}: cannot draw {fmt or 'a file without suffix'!r}; "
                f"use one of {', '.join(sorted(formats))}."
            )
    elif kind in ("table", "stream"):
        try:
            written = output_kind(path)
        except ValueError as exc:  # a suffix of a format not written (.npz, .gz)
            if kind == "stream":
                raise click.UsageError(f"{option}: {exc}") from None
            written = "text"  # (a model file: its own format, whatever the suffix)
        if written in ("parquet", "arrow"):
            try:
                import pyarrow  # noqa: F401
            except ImportError:
                raise click.UsageError(
                    f"{option}: writing {path.suffix} needs pyarrow (pip install 'mbkkm[parquet]')."
                ) from None


def _distances(est, blocks):
    """``est.transform`` of the rows of each block, a few at a time (:func:`_row_blocks`):
    their squared distances to the centers.

    For a model with feature names, dense blocks go in as DataFrames with those names
    (the columns have already been matched by name, and scikit-learn checks them
    once more); sparse (CSR) blocks go in as they are, without scikit-learn's
    warning that they have no names: the columns were matched (or a warning said
    they are taken by position) when DATA was opened.
    """
    names = getattr(est, "feature_names_in_", None)
    for block in blocks:
        for rows in _row_blocks(block, est.n_clusters):
            sparse = not isinstance(rows, np.ndarray)  # a CSR block (scipy.sparse DATA)
            if names is not None and not sparse:
                import pandas as pd

                rows = pd.DataFrame(rows, columns=names, copy=False)
            with (
                _fails(ValueError, MemoryError, RuntimeError, prefix="labelling failed: "),
                warnings.catch_warnings(),
            ):
                if names is not None and sparse:
                    warnings.filterwarnings("ignore", "X does not have valid feature names")
                D = np.asarray(est.transform(rows))
            yield D


def _row_blocks(X, k: int):
    """Consecutive row blocks of an array (views), sized for k distances per row."""
    rows = int(np.clip(LABEL_BLOCK_BYTES // (8 * k), 1024, 2**16))
    for start in range(0, X.shape[0], rows):
        yield X[start : start + rows]


@dataclass
class _Labelled:
    """What one labelling pass found: cluster sizes, inertia, rows."""

    sizes: np.ndarray
    inertia: float = 0.0
    n: int = 0


def _label_blocks(distances, k, outputs, n_rows, update=None, then=None):
    """One pass over blocks of squared distances to the k centers (rows, k): labels
    (argmin) and minimum distances, written block by block to ``outputs.labels`` /
    ``outputs.transform``; ``update(rows)`` after each block.

    ``then()`` runs after the last block, before the files written are put in place
    (each is written atomically): an error in it leaves them as they were.
    """
    out = _Labelled(np.zeros(k, dtype=np.int64))
    with ExitStack() as stack:

        def writer(path, names, dtype):  # "-": standard output
            if path == "-":
                sys.stdout.flush()  # the text written so far goes first
                path = sys.stdout.buffer
            if path is not None:
                return stack.enter_context(
                    open_writer(path, names=names, dtype=dtype, n_rows=n_rows)
                )

        lw = writer(outputs.labels, None, np.int32)
        tw = writer(outputs.transform, [f"distance_{j}" for j in range(k)], np.float32)
        for D in distances:
            labels = D.argmin(axis=1).astype(np.int32)
            out.inertia += float(D[np.arange(D.shape[0]), labels].sum(dtype=np.float64))
            out.sizes += np.bincount(labels, minlength=k)
            out.n += D.shape[0]
            if lw is not None:
                lw.write(labels)
            if tw is not None:
                tw.write(D.astype(np.float32, copy=False))
            if update is not None:
                update(D.shape[0])
        if then is not None:
            then()
    return out


def _summary(found, outputs, *first, fit=False) -> None:
    """A command's summary, on stderr when standard output takes the labels or
    distances: its own lines (``first``), then the inertia, the cluster sizes (a
    fit: and how many are empty), the files written (a fit: or that the labels were
    not)."""
    inertia = "objective inertia" if fit else "inertia"
    lines = list(first)
    lines.append(f"inertia: {found.inertia:.6g} ({inertia} / n = {found.inertia / found.n:.6g})")
    lines.append("cluster sizes: " + " ".join(map(str, found.sizes.tolist())))
    empty = int((found.sizes == 0).sum())
    if fit and empty:
        lines.append(f"note: {empty} of the {len(found.sizes)} clusters are empty")
    paths = (outputs.labels, outputs.transform, outputs.plot, outputs.gamma_plot, outputs.model)
    for path, what in zip(paths, ("labels", "distances", "plot", "gamma plot", "model")):
        if path not in (None, "-"):  # written to a file
            lines.append(f"{what} written to {path}")
    if fit and outputs.labels is None:
        lines.append("(labels not written: pass --labels-out FILE)")
    err = "-" in (outputs.labels, outputs.transform)  # the labels or distances take stdout
    for line in lines:
        click.echo(line, err=err)


def _new_figure(figsize=(6.4, 4.8)):
    from matplotlib.figure import Figure  # no pyplot: no global state, no GUI backend

    return Figure(figsize=figsize)


@contextmanager
def _writing(path):
    """An OSError of the block as the one-line failure 'cannot write PATH: why'."""
    try:
        yield
    except BrokenPipeError:
        raise  # standard output's reader has gone: the command stops quietly (main)
    except OSError as exc:
        raise click.ClickException(f"cannot write {path}: {exc.strerror or exc}") from None


def _render(fig, path) -> bytes:
    """The bytes of the image file ``path`` of ``fig`` (its format from the suffix)."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format=Path(path).suffix[1:].lower(), dpi=110, bbox_inches="tight")
    return buffer.getvalue()


@contextmanager
def _drawing(option: str):
    """An error of drawing the figure of ``option`` as the one-line failure 'cannot
    draw the OPTION figure (...)' (exit 1): nothing has been written yet."""
    with _fails(
        ValueError,
        RuntimeError,
        OverflowError,
        MemoryError,
        prefix=f"cannot draw the {option} figure (no output was written): ",
    ):
        yield


def _legend_outside(ax) -> None:
    """The legend to the right of the axes, where it cannot hide the data."""
    ax.legend(
        loc="upper left",
        bbox_to_anchor=(1.02, 1.0),
        borderaxespad=0.0,
        fontsize="small",
        frameon=False,
    )


def gamma_figure(selection):
    """The width selection's criterion against gamma, its legend beside the axes.

    Parameters
    ----------
    selection : GammaSelection
        ``gamma_selection_`` of a fitted estimator.

    Returns
    -------
    fig : matplotlib.figure.Figure
    """
    fig = _new_figure((5.0, 3.2))
    _legend_outside(selection.plot(ax=fig.subplots()))
    return fig


def cluster_figure(X, labels, n_clusters: int, *, names=None, n_total=None, seed=0):
    """A scatter plot of clustered points: the two columns when d = 2, the first
    two principal components (of these points) when d > 2, value against cluster
    when d = 1.

    Parameters
    ----------
    X : ndarray of shape (m, d)
        The points drawn (a sample of the data).
    labels : ndarray of shape (m,)
    n_clusters : int
    names : list of str, optional
        Column names (axis labels when d <= 2).
    n_total : int, optional
        Rows of the whole data (the title says how many are drawn).
    seed : int, default=0
        PCA's random state.

    Returns
    -------
    fig : matplotlib.figure.Figure

    Raises
    ------
    ValueError
        When ``d > 2`` and there are fewer than 2 points to project.
    """
    m, d = X.shape
    if d > 2 and m < 2:
        raise ValueError(
            f"a projection of {d} features on two components needs at least 2 points, got {m}"
        )
    sparse = not isinstance(X, np.ndarray)  # a CSR sample (scipy.sparse DATA)
    if sparse and d <= 2:
        X, sparse = X.toarray(), False
    fig = _new_figure()
    ax = fig.subplots()
    if d == 1:
        jitter = np.random.default_rng(seed).uniform(-0.3, 0.3, m)
        xy = np.column_stack([X[:, 0], labels + jitter])
        xlabel, ylabel = (names[0] if names else "column 0"), "cluster"
    elif d == 2:
        xy = np.asarray(X, dtype=np.float64)
        xlabel, ylabel = names if names else ("column 0", "column 1")
    else:  # sparse rows: a truncated SVD (no centring, which would densify them)
        from sklearn.decomposition import PCA, TruncatedSVD

        how = "SVD" if sparse else "PC"
        pca = (TruncatedSVD if sparse else PCA)(n_components=2, random_state=seed)
        xy = pca.fit_transform(X.astype(np.float64))
        r = pca.explained_variance_ratio_
        xlabel, ylabel = f"{how} 1 ({r[0]:.0%} of the variance)", f"{how} 2 ({r[1]:.0%})"
    points = {"s": 4, "linewidths": 0, "rasterized": True}
    if n_clusters <= 20:
        import matplotlib as mpl

        cmap = mpl.colormaps["tab10" if n_clusters <= 10 else "tab20"]
        for j in range(n_clusters):
            sel = labels == j
            ax.scatter(*xy[sel].T, color=cmap(j), label=f"{j} ({int(sel.sum())})", **points)
        _legend_outside(ax)
        ax.get_legend().set_title("cluster (points shown)", prop={"size": "small"})
        for h in ax.get_legend().legend_handles:
            h.set_sizes([20])
    else:
        sc = ax.scatter(*xy.T, c=labels, cmap="turbo", vmin=0, vmax=n_clusters - 1, **points)
        fig.colorbar(sc, ax=ax, label="cluster")
    ax.set(xlabel=xlabel, ylabel=ylabel)
    n_total = m if n_total is None else n_total
    shown = f", {m:,} drawn at random" if m < n_total else ""
    how = "" if d <= 2 else ("; truncated SVD projection" if sparse else "; PCA projection")
    ax.set_title(f"{n_clusters} clusters of {n_total:,} points{shown}{how}", fontsize="medium")
    return fig


# ---------------------------------------------------------------------------
# Commands
# ---------------------------------------------------------------------------


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """A warning as one line on stderr, ``warning: <message>`` (Python's own format
    names a line of click, the frame that called the command)."""
    click.echo(f"warning: {one_line(message)}", err=True)


class _Commands(click.Group):
    """mbkkm's group: warnings shown as ``warning: <message>`` lines, and a closed
    standard output (``mbkkm fit ... --labels-out - | head``) ends the command
    quietly with exit code 1, as Python's documentation advises, instead of a
    'Broken pipe' error. An interrupt (Ctrl-C) exits with 130, the shell's code for
    a command ended by SIGINT, so that a script can tell it from a failure (1)."""

    def invoke(self, ctx):
        try:
            with warnings.catch_warnings():
                warnings.showwarning = _show_warning
                return super().invoke(ctx)
        except BrokenPipeError:
            # what is still buffered for stdout goes nowhere (no second error at exit)
            with suppress(OSError, ValueError):
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            ctx.exit(1)
        except KeyboardInterrupt:
            click.echo("Aborted!", err=True)
            ctx.exit(130)


@click.group(
    cls=_Commands,
    context_settings={"help_option_names": ["-h", "--help"], "show_default": True},
)
@click.version_option(__version__, prog_name="mbkkm")
def main():
    """mbkkm: mini-batch kernel k-means (Jourdan & Schwartzman) from the command line.

    Cluster your own data (fit), see the paper's datasets (datasets), run the
    paper's experiment grids (experiment), draw their figures (plot) and compute
    the paper's gamma = max_x sqrt(K(x, x)) (kernel-scale; not the kernel width).
    Exit codes: 0 ok, 1 runtime failure, 2 usage error, 130 interrupted (Ctrl-C).
    """
    # Process-wide, so here in the command's own process and never in the library:
    # keep the text parser's per-block buffers instead of re-faulting them (glibc
    # only; MBKKM_NO_MALLOPT=1 or any MALLOC_* variable of the user's turns it off).
    tune_allocator()


@main.command()
@click.argument("data", type=_INPUT)
@click.option("-k", "--n-clusters", type=_POSITIVE, required=True, help="Number of clusters.")
@_model_options
@_data_options
@_fit_output_options
@click.option("-q", "--quiet", is_flag=True, help="No summary, notes or progress bars.")
@click.option(
    "-v",
    "--verbose",
    is_flag=True,
    help="Print how the width (and the heat kernel's time) was chosen as a table "
    "of the candidates and their scores (default: one line).",
)
def fit(data, n_clusters, params, source, outputs, quiet, verbose):
    """Cluster DATA with truncated mini-batch kernel k-means, and print a summary.

    DATA: delimited text (CSV, TSV; header detected), .npy (memory-mapped),
    .npz (array X, or a scipy.sparse matrix saved by scipy.sparse.save_npz),
    .parquet or .feather (needs pyarrow). Outputs are written
    atomically: a previous file is replaced only once the new one is complete;
    and all or none: the figures are drawn before any file is written, and the
    labels are put in place once the model and figures are.
    With --checkpoint, a fit killed part way resumes where it was saved when the
    same command runs again, and ends with the model of an uninterrupted run.
    """
    from sklearn import config_context

    from .backends import resolve_device
    from .cluster import MiniBatchKernelKMeans
    from .cluster._checkpoint import read_checkpoint

    outputs = _Outputs(gamma_plot=params.pop("gamma_plot"), **outputs)
    outputs.check(params["kernel"], params["tau"], inputs={"DATA": data})
    _check_device(params["device"], params["kernel"], params["tau"], outputs.model)
    heat_t = params.pop("heat_t")
    graph_params = _graph_params(params["kernel"], params.pop("n_neighbors"), heat_t)
    _check_width(params["kernel"], params["gamma"], outputs.gamma_plot)
    table = _open_data(data, **source)
    _check_unique_names(table, data)
    _check_named(table, data, source)
    _note_reading(table, quiet)
    with _reading(table, "reading", quiet) as how:
        X = table.read(**how)
    release_free_memory()  # the parsing threads' kept buffers, before the fit
    n, d = X.shape
    if table.sparse and graph_params is not None:
        raise click.UsageError(
            f"--kernel {params['kernel']} builds its graph from dense rows, and {data} holds "
            "a scipy.sparse matrix: use a kernel that takes sparse rows (cosine, linear, "
            "rbf, ...), or save the data dense."
        )
    if table.sparse and resolve_device(params["device"]) not in (None, "cpu"):
        raise click.UsageError(
            f"--device {params['device']} runs with PyTorch, which has no sparse path, and "
            f"{data} holds a scipy.sparse matrix: leave --device out (numpy on the CPU "
            "takes sparse rows), or save the data dense."
        )
    if n_clusters > n:
        raise click.UsageError(f"--n-clusters {n_clusters} is larger than the {n} rows of {data}.")
    if graph_params is not None and graph_params.get("n_neighbors", 0) >= n:
        k = graph_params["n_neighbors"]
        what = "is larger than" if k > n else "is all"
        raise click.UsageError(
            f"--n-neighbors {k} {what} the {n} rows of {data} (it counts the point itself): "
            "the k-NN graph would be complete, with no cluster structure; use fewer."
        )
    if params["batch_size"] > n and not quiet:
        click.echo(
            f"note: --batch-size {params['batch_size']} is larger than the {n} rows of "
            f"{data}: every batch is all {n} rows (batch_size is capped at n).",
            err=True,
        )
    est = MiniBatchKernelKMeans(
        n_clusters=n_clusters, kernel_params=graph_params, compute_labels=False, **params
    )
    if outputs.checkpoint is not None and not quiet and Path(outputs.checkpoint).exists():
        # the iteration the fit resumes at (an unreadable file: the fit says why)
        with suppress(ValueError, OSError, KeyError):
            done = int(read_checkpoint(outputs.checkpoint)["fit"]["n_iter"])
            click.echo(
                f"note: resuming the fit saved in {outputs.checkpoint} at iteration {done} of "
                f"{est.max_iter}",
                err=True,
            )
    start = time.perf_counter()
    # on stderr unless quiet: on a terminal a spinner, then a bar over the
    # iterations; else a line every few seconds with the time left
    with (
        _fails(ValueError, MemoryError, RuntimeError, OSError, prefix="fit failed: "),
        # X's blocks were checked finite as they were read: not a second pass over X
        config_context(assume_finite=True),
        ExitStack() as stack,
    ):
        if not quiet:
            message = f"fitting {n} x {d}, k={n_clusters}, {est.max_iter} iterations"
            stop = stack.enter_context(_spinner(message))
            waiting = f"preparing the fit of {n:,} x {d} (checks, width, initialisation)"
            stack.enter_context(reporting(sys.stderr, on_start=stop, waiting=waiting))
        if graph_params is None:
            try:
                est.fit(X, checkpoint=outputs.checkpoint, checkpoint_every=outputs.checkpoint_every)
            except KeyboardInterrupt:
                if outputs.checkpoint is not None and Path(outputs.checkpoint).exists():
                    click.echo(
                        f"\ninterrupted: {outputs.checkpoint} keeps the fit's last save; "
                        "run the same command again to resume from it",
                        err=True,
                    )
                raise
            fitted = None
        else:  # the fitted points' own kernel rows, not new points joining the graph
            fitted = est.fit_transform(X)
    fit_seconds = time.perf_counter() - start
    _record_columns(est, table, source["columns"], source["drop"])
    start = time.perf_counter()
    # All or nothing: the figures are drawn before any output is written, and the
    # model and figures are written before the labels and distances are put in place.
    sample = sample_labels = None  # the rows drawn for the plot, at most PLOT_POINTS
    if outputs.plot is not None:
        rng = np.random.default_rng(est.random_state)
        sample = np.sort(rng.choice(n, size=min(n, PLOT_POINTS), replace=False))
        if fitted is None:
            sample_labels = np.concatenate([D.argmin(axis=1) for D in _distances(est, [X[sample]])])
        else:
            sample_labels = fitted[sample].argmin(axis=1)
    tables = verbose or outputs.gamma_plot is not None  # before a gamma plot not drawn
    figures = outputs.draw(est, X, sample, sample_labels, table.names)
    distances = _distances(est, [X]) if fitted is None else _row_blocks(fitted, n_clusters)
    written = " and ".join(
        f"{what} ({'standard output' if path == '-' else path})"
        for what, path in (("the labels", outputs.labels), ("the distances", outputs.transform))
        if path is not None
    )
    with _writing(written or "the labels"), _progress(n, "rows", "labelling", not quiet) as update:
        found = _label_blocks(
            distances, n_clusters, outputs, n, update, then=partial(outputs.save, est, figures)
        )
    label_seconds = time.perf_counter() - start
    if outputs.checkpoint is not None:  # every output is written: the fit is not needed again
        Path(outputs.checkpoint).unlink(missing_ok=True)
    if quiet:
        return
    # the widths (and the heat kernel's time) chosen: one line each, or their tables
    t_selection = getattr(est, "t_selection_", None) if heat_t in (None, "auto") else None
    selections = [s for s in (est.gamma_selection_, t_selection) if s is not None]
    _summary(
        found,
        outputs,
        f"data: {data} ({found.n} points x {d} features)",
        f"kernel: {est.kernel_!r}; batch size {min(est.batch_size, n)}, tau {est.tau}, "
        f"{est.n_iter_} iterations, {est.learning_rate} rate, seed {est.random_state}"
        + ("" if est.device is None else f", device {est.device}"),
        f"time: fit {fit_seconds:.2f} s, labelling {label_seconds:.2f} s",
        *(s.table() if tables else s.summary() + " (--verbose: the table)" for s in selections),
        fit=True,
    )


def _graph_params(kernel, n_neighbors, heat_t):
    """The ``kernel_params`` of a graph kernel from --n-neighbors and --t (None for
    kernels on points, which take neither)."""
    from .kernels import GRAPH_KERNELS

    if kernel not in GRAPH_KERNELS:
        if n_neighbors is not None or heat_t is not None:
            raise click.UsageError(
                "--n-neighbors and --t are options of the graph kernels (--kernel heat or knn)."
            )
        return None
    if kernel == "knn" and n_neighbors is None:
        raise click.UsageError("--kernel knn needs --n-neighbors.")
    params = {} if n_neighbors is None else {"n_neighbors": n_neighbors}
    if kernel == "heat":
        params["t"] = "auto" if heat_t is None else heat_t
    return params


def _check_device(device, kernel, tau, model) -> None:
    """Refuse, before the data is read, a device this machine does not have, and with
    a torch device what runs with numpy only (graph kernels, chi2, --tau none) or
    --model-out (a model file holds numpy arrays)."""
    if device is None:
        return
    from .backends import resolve_device
    from .kernels import GRAPH_KERNELS
    from .kernels._kernel import check_torch_kernel

    try:
        resolved = resolve_device(device)
    except ValueError as exc:
        raise click.UsageError(f"--device: {exc}") from None
    if resolved == "cpu":
        return
    if kernel in GRAPH_KERNELS or tau is None:
        what = f"--kernel {kernel}" if tau is not None else "--tau none"
        raise click.UsageError(
            f"--device {device}: {what} runs with numpy only; leave --device out."
        )
    try:
        check_torch_kernel(kernel)
    except ValueError as exc:
        raise click.UsageError(f"--device {device}: {exc}") from None
    if model is not None:
        raise click.UsageError(
            f"--model-out: a model fitted with --device {device} (PyTorch) cannot be "
            "saved (a model file holds numpy arrays); fit on the CPU to save it."
        )


def _check_width(kernel, gamma, gamma_plot) -> None:
    """Refuse --gamma for a kernel without a gamma, --gamma auto / mean-distance (a
    width chosen from the data) for a kernel without a width, and --gamma-plot where no
    width is chosen (such a kernel, or a number given), before the data is read."""
    from ._core._width import AUTO_GAMMA_KERNELS
    from .kernels._kernel import KERNELS

    if gamma is not None and "gamma" not in KERNELS[kernel].params:
        raise click.UsageError(
            f"--gamma: --kernel {kernel} has no gamma (it would be ignored); leave --gamma out."
        )
    if gamma in ("auto", "mean-distance") and kernel not in AUTO_GAMMA_KERNELS:
        kernels = ", ".join(sorted(AUTO_GAMMA_KERNELS))
        raise click.UsageError(
            f"--gamma {gamma}: chooses the width of --kernel {kernels}; --kernel {kernel} "
            "has no width to choose (give --gamma as a number, or leave it out)."
        )
    given = gamma is not None and not isinstance(gamma, str)  # a number, not a method
    if gamma_plot is not None and (kernel not in AUTO_GAMMA_KERNELS or given):
        why = f"--gamma {gamma} gives it" if given else f"--kernel {kernel} has none"
        raise click.UsageError(
            f"--gamma-plot draws how the width was chosen, and none is chosen here ({why}); "
            "leave --gamma-plot out."
        )


@main.command()
@click.argument("model", type=_INPUT)
@click.argument("data", type=_INPUT)
@_data_options
@_file_option("--labels-out", "labels", default="-", help="Where the labels go: " + _LABEL_FILES)
@_file_option("--transform-out", "transform", help=_DISTANCE_FILES + ", with --labels-out FILE).")
@click.option("-q", "--quiet", is_flag=True, help="No summary or progress bar.")
def predict(model, data, source, labels, transform, quiet):
    """Label DATA with a MODEL saved by 'mbkkm fit --model-out'.

    A model fitted on a file with a header finds its columns in DATA by name, in
    any order, leaving out those the fit's --columns / --drop left out (saved with
    the model; --columns / --drop here replace them); a column missing, or one the
    model was not fitted on, is refused (exit 2) with its name. Column names on
    one side only: a warning, and the columns are taken by position.

    DATA is read and labelled block by block (text, Parquet, Arrow) or through a
    memory map (.npy), so files larger than the memory are labelled as they are
    read; the outputs are written as the blocks are done, atomically.
    """
    outputs = _Outputs(labels, transform)
    outputs.check(inputs={"MODEL": model, "DATA": data})
    try:
        est = load_model(model)
    except (ValueError, OSError, ImportError) as exc:  # says what the file is
        raise click.ClickException(f"cannot load the model: {one_line(exc)}") from None
    except Exception as exc:  # pragma: no cover - skops' own errors on a damaged file
        raise click.ClickException(
            f"cannot load the model {model}: {one_line(exc, with_type=True)}"
        ) from None
    if not hasattr(est, "transform") or not hasattr(est, "n_features_in_"):
        raise click.ClickException(f"{model} does not hold a fitted mbkkm clustering model.")
    table = _predict_table(est, data, source)
    _note_reading(table, quiet)
    if table.n_columns != est.n_features_in_:
        raise click.UsageError(
            f"{data} has {table.n_columns} columns to use, the model expects "
            f"{est.n_features_in_}; choose them with --columns / --drop as for the fit."
        )
    start = time.perf_counter()
    # a stream left part way is closed, so no parsing thread outlives the command
    with _reading(table, "labelling", quiet) as how:
        # rows are counted once labelled (the reader runs a block ahead); text, whose
        # unit is bytes, as it is read
        counted = how["progress"] if table.kind != "text" else None
        reader = {**how, "progress": None} if counted is not None else how
        with closing(table.blocks(**reader)) as stream:
            found = _label_blocks(
                _distances(est, stream), est.n_clusters, outputs, table.n_rows, update=counted
            )
    if not quiet:
        seconds = time.perf_counter() - start
        what = f"{found.n} points x {table.n_columns} features of {data}"
        _summary(found, outputs, f"labelled {what} in {seconds:.2f} s")


@main.command()
@click.option("--data-home", type=_FOLDER, help="A folder searched first.")
def datasets(data_home):
    """The paper's datasets: sizes, kernel parameters, and where they are found locally."""
    from .datasets import ENV_VAR, get_data_dirs, list_datasets

    with _fails(OSError, ValueError, TypeError, usage=True):
        infos = list_datasets(data_home=data_home)
        dirs = get_data_dirs(data_home)
    if data_home is not None and not Path(data_home).is_dir():
        # accepted, as the other commands' --data-home (a download may create it)
        click.echo(f"note: --data-home {data_home}: the folder does not exist.", err=True)
    click.echo(
        f"{'name':10} {'size':>12} {'classes':>7} {'sigma':>7} {'k-NN':>5} {'heat':>5}  local file"
    )
    for info in infos:
        s = info.spec
        where = str(info.path) if info.available else "not found"
        click.echo(
            f"{s.name:10} {s.n_samples:>6}x{s.n_features:<5} {s.n_classes:>7} "
            f"{s.sigma:>7.4g} {s.knn_neighbors:>5} {s.heat_neighbors:>5}  {where}"
        )
        if not info.available and s.offline_note:
            click.echo(f"{'':10} note: {s.offline_note}")
    click.echo(f"searched (in order; set ${ENV_VAR} or --data-home to add folders):")
    for d in dirs:
        click.echo(f"  {d}" + ("" if d.is_dir() else " (folder does not exist)"))


def _comma(ctx, param, value):
    """The items of a comma-separated option (its callback); None when not given."""
    return None if value is None else [s.strip() for s in value.split(",")]


@main.command()
@click.argument("grid")
@_out_option("Folder of the result table (<grid name>.csv).")
@click.option(
    "--budget",
    "budget_seconds",
    type=_POSITIVE_FLOAT,
    help="Stop cleanly between runs after this many seconds.",
)
@_options(
    click.option(
        "--datasets", callback=_comma, help="Comma-separated datasets replacing the grid's."
    ),
    click.option(
        "--algorithms", callback=_comma, help="Comma-separated algorithms replacing the grid's."
    ),
    click.option("--seeds", type=_POSITIVE, help="Number of seeds (0..N-1) replacing the grid's."),
    click.option("--max-iter", type=_POSITIVE, help="Iterations per run replacing the grid's."),
    into="changes",
)
@click.option(
    "--memory-budget",
    type=_POSITIVE_FLOAT,
    help="GB a kernel matrix may take (default: 70% of the available RAM).",
)
@click.option("--data-home", type=_FOLDER, help="A folder searched first for the datasets.")
@click.option("--download", is_flag=True, help="Fetch missing datasets from OpenML.")
@click.option(
    "--jobs",
    type=_POSITIVE,
    default=1,
    help="Runs side by side in this many processes, each with one BLAS thread.",
)
@click.option(
    "--kernel-cache",
    type=_FOLDER,
    help="Folder where kernel matrices are built once and shared by all "
    "processes and resumes (memory-mapped).",
)
@click.option(
    "--dry-run",
    is_flag=True,
    help="List the runs without running them, marking those already in OUT.",
)
@click.option("--no-progress", is_flag=True, help="No progress bar.")
def experiment(grid, out_dir, changes, memory_budget, dry_run, no_progress, **run):
    """Run GRID (a preset: gaussian, knn, heat, quick; or a TOML grid file) and
    append one row per run to OUT/<grid name>.csv. Re-running skips finished runs
    and runs failed ones again (a dataset not found is a failure); the exit code
    is 1 when a run failed."""
    from dataclasses import replace

    from .experiments import GridError, done_run_ids, expand, resolve_grid, run_grid

    with _fails(GridError, ValueError, usage=True):
        algorithms = changes.pop("algorithms")
        g = resolve_grid(grid).with_options(**changes)
        if algorithms is not None:
            g = replace(g, algorithms=tuple(algorithms))
        runs = expand(g)
    out = Path(out_dir) / f"{g.name}.csv"
    if not dry_run:
        memory_budget = -1 if memory_budget is None else int(memory_budget * 1e9)
        try:
            with _fails(OSError, ValueError):
                summary = run_grid(
                    runs, out, memory_budget=memory_budget, progress=not no_progress, **run
                )
        except KeyboardInterrupt:
            click.echo(
                f"\ninterrupted: {out} keeps every finished run; run the same command "
                "again to run the others",
                err=True,
            )
            raise
        click.echo(str(summary))
        for msg in summary.errors[:5]:
            click.echo(f"  error: {msg}", err=True)
        if summary.error:  # a script sees that runs are missing (a re-run retries them)
            raise click.ClickException(
                f"{summary.error} of the {summary.total} runs failed (status error in {out}; "
                "the same command runs them again)"
            )
        return
    with _fails(OSError, ValueError):
        done = done_run_ids(out)
    for r in runs:
        click.echo(
            f"{r.run_id} {r.dataset} {r.algorithm} {r.kernel} "
            f"b={r.batch_size} tau={r.tau} seed={r.seed}" + (" (done)" if r.run_id in done else "")
        )
    n_done = sum(r.run_id in done for r in runs)
    click.echo(f"{len(runs)} runs -> {out}: {n_done} already in it, {len(runs) - n_done} to run")


@main.command()
@click.argument("results", nargs=-1, required=True, type=click.Path(exists=True))
@_out_option("Folder of the figures.")
@click.option(
    "--tau", type=_POSITIVE, help="tau of the truncated algorithms in the panels (default 200)."
)
@click.option(
    "--format",
    "formats",
    multiple=True,
    type=click.Choice(["png", "svg", "pdf"]),
    default=("png", "svg"),
    help="Figure formats.",
)
def plot(results, out_dir, tau, formats):
    """Draw the paper's figures from RESULTS (result tables or folders of them)."""
    from .experiments import plot_results

    with _fails(OSError, ValueError):
        paths = plot_results(list(results), out_dir, tau=tau, formats=formats)
    for p in paths:
        click.echo(str(p))


def _check_scale_options(kernel, **given) -> None:
    """Refuse (a usage error, as ``fit`` does) the options of ``kernel-scale`` that
    ``kernel`` does not take: they would be ignored."""
    takes = {"rbf": {"gamma"}, "gaussian": {"gamma"}, "knn": {"n_neighbors"}}
    takes["heat"] = {"n_neighbors", "t"}
    what = {"gamma": "no gamma", "n_neighbors": "no neighbours", "t": "no diffusion time"}
    for name, value in given.items():
        if value is not None and name not in takes[kernel]:
            option = "--" + name.replace("_", "-")
            raise click.UsageError(
                f"{option}: --kernel {kernel} has {what[name]} (it would be ignored); "
                f"leave {option} out."
            )


@main.command("kernel-scale")
@click.argument("dataset")
@click.option(
    "--kernel",
    type=click.Choice(["rbf", "gaussian", "knn", "heat"]),
    default="rbf",
    help="Kernel.",
)
@click.option(
    "--n-neighbors",
    type=_POSITIVE,
    help="Neighbours of the k-NN / heat graph (default: the paper's, per dataset).",
)
@click.option("--t", type=_POSITIVE_FLOAT, help="Heat kernel diffusion time (default 1).")
@click.option(
    "--gamma",
    "rbf_gamma",
    type=_POSITIVE_FLOAT,
    help="rbf width (default: 1 / (2 sigma^2) with the paper's sigma).",
)
@click.option("--data-home", type=_FOLDER, help="A folder searched first for the dataset.")
def kernel_scale(dataset, kernel, n_neighbors, t, rbf_gamma, data_home):
    """Print the paper's gamma = max_x sqrt(K(x, x)) of DATASET (Table 1).

    This "gamma" is a property of kernel and data (the bound in the paper's
    analysis), not the width of the rbf kernel (``fit --gamma``).
    """
    from .datasets import get_spec, load_dataset
    from .kernels import kernel_gamma

    _check_scale_options(kernel, n_neighbors=n_neighbors, t=t, gamma=rbf_gamma)
    with _fails(ValueError, usage=True):
        spec = get_spec(dataset)
    with _fails(OSError, ValueError):
        X, _ = load_dataset(spec.name, data_home=data_home, download=False)
    if kernel in ("rbf", "gaussian"):
        params = {"gamma": rbf_gamma if rbf_gamma is not None else spec.rbf_gamma}
    else:
        k = n_neighbors or (spec.knn_neighbors if kernel == "knn" else spec.heat_neighbors)
        params = {"n_neighbors": k} if kernel == "knn" else {"n_neighbors": k, "t": t or 1.0}
    start = time.perf_counter()
    # the heat kernel's eigensolver starts from a seeded vector: the same value each run
    seed = {"random_state": 0} if kernel == "heat" else {}
    with _fails(ValueError, MemoryError):
        value = kernel_gamma(X, kernel, **params, **seed)
    desc = ", ".join(
        f"{a}={b:.6g}" if isinstance(b, float) else f"{a}={b}" for a, b in params.items()
    )
    click.echo(
        f"{spec.name} {kernel} ({desc}): gamma = {value:.6g} ({time.perf_counter() - start:.1f} s)"
    )


if __name__ == "__main__":  # pragma: no cover
    main()

"""The ``mbkkm`` command line (needs the ``cli`` extra: click, tqdm, skops, matplotlib).

Commands::

    mbkkm fit DATA --n-clusters K [options]   cluster your own data (CSV, .npy, .npz)
    mbkkm datasets                            the paper's datasets: known and local
    mbkkm experiment PRESET|FILE --out DIR    run an experiment grid (resumable)
    mbkkm plot RESULTS... --out DIR           figures from saved result tables
    mbkkm kernel-scale DATASET --kernel rbf|knn|heat  the paper's gamma = max_x sqrt(K(x, x))
                                              (``mbkkm gamma``: deprecated spelling)

Exit codes: 0 success; 1 a runtime failure (unreadable or non-numeric data, a
failed fit, no results to plot); 2 a usage error (unknown option, preset,
dataset, algorithm or kernel; a missing file). Errors are printed as one line
(``Error: ...``), without a traceback.
"""

from __future__ import annotations

import csv
import io
import sys
import threading
import time
from pathlib import Path

import click
import numpy as np

from . import __version__

#: Prefix of the types a saved model may contain that mbkkm trusts when loading.
TRUSTED_PREFIX = "mbkkm."


# ---------------------------------------------------------------------------
# Reading user data
# ---------------------------------------------------------------------------


def _is_number(s: str) -> bool:
    try:
        float(s)
    except ValueError:
        return False
    return True


def read_data(path: str | Path, *, header: bool | None = None, key: str = "X") -> np.ndarray:
    """Read a numeric 2-d array from a CSV (or other delimited text), .npy or .npz file.

    Parameters
    ----------
    path : path
        ``.npy``: the array; ``.npz``: the array under ``key``; anything else:
        delimited text (delimiter sniffed among ``,``, tab, ``;`` and space).
    header : bool, optional
        Whether the first text line is a header; None: a header when some field
        of the first line is not a number.
    key : str, default="X"
        The array of an ``.npz`` file.

    Returns
    -------
    X : ndarray of shape (n_samples, n_features), float64

    Raises
    ------
    OSError
        If the file cannot be read.
    ValueError
        If the content is not a numeric 2-d table; the message names the first
        offending column and row.
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix in (".npy", ".npz"):
        try:
            loaded = np.load(path, allow_pickle=False)
        except ValueError as exc:
            raise ValueError(f"{path}: cannot read as a numpy file ({exc}).") from exc
        if suffix == ".npz":
            with loaded:
                if key not in loaded.files:
                    raise ValueError(f"{path} has no array {key!r} (arrays: "
                                     f"{', '.join(loaded.files) or 'none'}).")
                X = loaded[key]
        else:
            X = loaded
        X = np.asarray(X)
        if not np.issubdtype(X.dtype, np.number) or np.iscomplexobj(X):
            raise ValueError(f"{path}: the array has dtype {X.dtype}; expected real numbers.")
        return _check_table(X.astype(np.float64, copy=False), path)

    text = path.read_text()
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        raise ValueError(f"{path} is empty.")
    try:
        dialect = csv.Sniffer().sniff(lines[0], delimiters=",\t; ")
        delim = dialect.delimiter
    except csv.Error:
        delim = ","
    rows = list(csv.reader(io.StringIO("\n".join(lines)), delimiter=delim,
                           skipinitialspace=True))
    rows = [[c for c in r if c != ""] if delim == " " else r for r in rows]
    if header is None:
        header = not all(_is_number(c) for c in rows[0])
    names = rows[0] if header else [f"column {j + 1}" for j in range(len(rows[0]))]
    body = rows[1:] if header else rows
    if not body:
        raise ValueError(f"{path} has a header but no data rows.")
    width = len(names)
    X = np.empty((len(body), width), dtype=np.float64)
    for i, r in enumerate(body):
        line_no = i + (2 if header else 1)
        if len(r) != width:
            raise ValueError(f"{path}, line {line_no}: {len(r)} fields, expected {width}.")
        for j, c in enumerate(r):
            try:
                X[i, j] = float(c)
            except ValueError:
                raise ValueError(
                    f"{path}: column {names[j]!r} is not numeric (line {line_no} holds "
                    f"{c!r}); remove or encode non-numeric columns."
                ) from None
    return _check_table(X, path)


def _check_table(X: np.ndarray, path: Path) -> np.ndarray:
    if X.ndim == 1:
        X = X[:, None]
    if X.ndim != 2:
        raise ValueError(f"{path}: expected a 2-d table, got an array of shape {X.shape}.")
    if X.shape[0] == 0 or X.shape[1] == 0:
        raise ValueError(f"{path}: the table is empty (shape {X.shape}).")
    if not np.all(np.isfinite(X)):
        bad = np.argwhere(~np.isfinite(X))[0]
        raise ValueError(f"{path}: non-finite value (NaN or inf) at row {bad[0] + 1}, "
                         f"column {bad[1] + 1}.")
    return X


def load_model(path: str | Path):
    """Load a model saved by ``mbkkm fit --model-out`` (skops format).

    mbkkm's own types (``mbkkm.*``) are trusted; any other type that skops does
    not trust by default is refused with a message naming it.
    """
    import skops.io as sio

    untrusted = sio.get_untrusted_types(file=path)
    foreign = [t for t in untrusted if not t.startswith(TRUSTED_PREFIX)]
    if foreign:
        raise ValueError(f"{path} holds types mbkkm does not trust: {', '.join(foreign)}.")
    return sio.load(path, trusted=untrusted)


class _Spinner:
    """Elapsed time on stderr while a fit runs (only on a terminal)."""

    def __init__(self, message: str):
        self.message = message
        self._stop = threading.Event()
        self._thread = None

    def __enter__(self):
        if sys.stderr.isatty():
            self._thread = threading.Thread(target=self._spin, daemon=True)
            self._thread.start()
        return self

    def _spin(self):
        start = time.perf_counter()
        marks = "|/-\\"
        i = 0
        while not self._stop.wait(0.2):
            sys.stderr.write(f"\r{marks[i % 4]} {self.message} {time.perf_counter() - start:.1f} s")
            sys.stderr.flush()
            i += 1

    def __exit__(self, *exc):
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            sys.stderr.write("\r" + " " * (len(self.message) + 16) + "\r")
            sys.stderr.flush()


# ---------------------------------------------------------------------------
# Commands
# ---------------------------------------------------------------------------


class _TauType(click.ParamType):
    """A positive integer, or 'none' (tau=None: no truncation)."""

    name = "INTEGER|none"

    def convert(self, value, param, ctx):
        if value is None or (isinstance(value, str) and value.strip().lower() == "none"):
            return None
        try:
            tau = int(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a positive integer or 'none'", param, ctx)
        if tau < 1:
            self.fail(f"{tau} is not >= 1", param, ctx)
        return tau


_TAU = _TauType()


class _GammaType(click.ParamType):
    """A positive number, 'auto' (mbkkm.cluster.select_gamma) or 'mean-distance'."""

    name = "FLOAT|auto|mean-distance"

    def convert(self, value, param, ctx):
        if value is None:
            return None
        if isinstance(value, str) and value.strip().lower() in ("auto", "mean-distance"):
            return value.strip().lower()
        try:
            gamma = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a positive number, 'auto' or 'mean-distance'",
                      param, ctx)
        if not (np.isfinite(gamma) and gamma > 0):
            self.fail(f"{value!r} is not a positive number", param, ctx)
        return gamma


_GAMMA = _GammaType()


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="mbkkm")
def main():
    """mbkkm: mini-batch kernel k-means (Jourdan & Schwartzman) from the command line.

    Cluster your own data (fit), see the paper's datasets (datasets), run the
    paper's experiment grids (experiment), draw their figures (plot) and compute
    the paper's gamma = max_x sqrt(K(x, x)) (kernel-scale; not the kernel width).
    Exit codes: 0 ok, 1 runtime failure, 2 usage error.
    """


def _kernel_choice():
    from .kernels import kernel_names

    return click.Choice(kernel_names(transductive=False))


@main.command()
@click.argument("data", type=click.Path(exists=True, dir_okay=False))
@click.option("-k", "--n-clusters", type=click.IntRange(1), required=True,
              help="Number of clusters.")
@click.option("--kernel", type=_kernel_choice(), default="rbf", show_default=True,
              help="Kernel (k-NN and heat kernels are transductive and not offered here).")
@click.option("--gamma", type=_GAMMA, default=None,
              help="Kernel width (rbf: exp(-gamma ||x-y||^2)): a number; 'auto' to "
                   "choose it without labels (prints the candidates); 'mean-distance' for "
                   "1 / (2 sum of feature variances). Default: rbf and laplacian as "
                   "'auto' when the 1000-point sample has >= 10 points per cluster "
                   "(k <= 100), else 'mean-distance'; other kernels their own default.")
@click.option("--gamma-plot", type=click.Path(dir_okay=False, writable=True), default=None,
              help="When the width is chosen (--gamma auto or the default): save the "
                   "criterion against gamma to this image.")
@click.option("--batch-size", type=click.IntRange(1), default=1024, show_default=True,
              help="Points per mini-batch.")
@click.option("--tau", type=_TAU, default="200", show_default=True,
              help="Window length (points kept per center); 'none' for the untruncated "
                   "algorithm (a table over all points).")
@click.option("--max-iter", type=click.IntRange(1), default=200, show_default=True,
              help="Number of mini-batch iterations.")
@click.option("--learning-rate", type=click.Choice(["adaptive", "classic"]),
              default="adaptive", show_default=True, help="Learning rate.")
@click.option("--seed", type=int, default=0, show_default=True, help="Random seed.")
@click.option("--header/--no-header", default=None,
              help="Whether a CSV has a header line (default: detected).")
@click.option("--key", default="X", show_default=True, help="Array name in an .npz file.")
@click.option("--labels-out", type=click.Path(dir_okay=False, writable=True), default=None,
              help="Write one label per line to this file ('-' for stdout).")
@click.option("--model-out", type=click.Path(dir_okay=False, writable=True), default=None,
              help="Save the fitted model (skops format; load with mbkkm.cli.load_model).")
@click.option("-q", "--quiet", is_flag=True, help="No summary.")
def fit(data, n_clusters, kernel, gamma, gamma_plot, batch_size, tau, max_iter, learning_rate,
        seed, header, key, labels_out, model_out, quiet):
    """Cluster DATA (CSV with or without header, .npy, or .npz with array X)
    with truncated mini-batch kernel k-means, and print a summary."""
    from .cluster import MiniBatchKernelKMeans

    try:
        X = read_data(data, header=header, key=key)
    except (OSError, ValueError) as exc:
        raise click.ClickException(" ".join(str(exc).split())) from None
    n, d = X.shape
    if n_clusters > n:
        raise click.UsageError(f"--n-clusters {n_clusters} is larger than the {n} rows of {data}.")
    est = MiniBatchKernelKMeans(n_clusters=n_clusters, kernel=kernel, gamma=gamma,
                                batch_size=batch_size, tau=tau, max_iter=max_iter,
                                learning_rate=learning_rate, random_state=seed)
    start = time.perf_counter()
    try:
        with _Spinner(f"fitting {n} x {d}, k={n_clusters}, {max_iter} iterations"):
            est.fit(X)
    except (ValueError, MemoryError, RuntimeError) as exc:
        raise click.ClickException(f"fit failed: {' '.join(str(exc).split())}") from None
    seconds = time.perf_counter() - start
    labels = est.labels_
    if labels_out is not None:
        text = "\n".join(map(str, labels.tolist())) + "\n"
        try:
            if labels_out == "-":
                click.echo(text, nl=False)
            else:
                Path(labels_out).write_text(text)
        except OSError as exc:
            raise click.ClickException(f"cannot write {labels_out}: {exc.strerror}") from None
    if gamma_plot is not None and est.gamma_selection_ is None:
        click.echo(f"--gamma-plot: nothing written, the width was not chosen here "
                   f"(gamma_ = {est.gamma_!r}; pass --gamma auto to choose it)", err=True)
    if gamma_plot is not None and est.gamma_selection_ is not None:
        import matplotlib

        matplotlib.use("Agg")
        ax = est.gamma_selection_.plot()
        try:
            ax.figure.savefig(gamma_plot, dpi=110, bbox_inches="tight")
        except OSError as exc:
            raise click.ClickException(f"cannot write {gamma_plot}: {exc.strerror}") from None
    if model_out is not None:
        import skops.io as sio

        try:
            sio.dump(est, model_out)
        except OSError as exc:
            raise click.ClickException(f"cannot write {model_out}: {exc.strerror}") from None
    if not quiet:
        sizes = np.bincount(labels, minlength=n_clusters)
        err = labels_out == "-"
        click.echo(f"data: {data} ({n} points x {d} features)", err=err)
        click.echo(f"kernel: {est.kernel_!r}; batch size {batch_size}, tau {tau}, "
                   f"{est.n_iter_} iterations, {learning_rate} rate, seed {seed}", err=err)
        click.echo(f"time: {seconds:.2f} s", err=err)
        if est.gamma_selection_ is not None:
            click.echo(est.gamma_selection_.table(), err=err)
        click.echo(f"inertia: {est.inertia_:.6g} (objective inertia / n = "
                   f"{est.inertia_ / n:.6g})", err=err)
        click.echo("cluster sizes: " + " ".join(map(str, sizes.tolist())), err=err)
        if labels_out not in (None, "-"):
            click.echo(f"labels written to {labels_out}", err=err)
        if labels_out is None:
            click.echo("(labels not written: pass --labels-out FILE)", err=err)
        if model_out is not None:
            click.echo(f"model written to {model_out}", err=err)


@main.command()
@click.option("--data-home", type=click.Path(file_okay=False), default=None,
              help="A folder searched first.")
def datasets(data_home):
    """The paper's datasets: sizes, kernel parameters, and where they are found locally."""
    from .datasets import ENV_VAR, get_data_dirs, list_datasets

    try:
        infos = list_datasets(data_home=data_home)
        dirs = get_data_dirs(data_home)
    except (OSError, ValueError, TypeError) as exc:
        raise click.UsageError(str(exc)) from None
    click.echo(f"{'name':10} {'size':>12} {'classes':>7} {'sigma':>7} {'k-NN':>5} {'heat':>5}  "
               "local file")
    for info in infos:
        s = info.spec
        where = str(info.path) if info.available else "not found"
        click.echo(f"{s.name:10} {s.n_samples:>6}x{s.n_features:<5} {s.n_classes:>7} "
                   f"{s.sigma:>7.4g} {s.knn_neighbors:>5} {s.heat_neighbors:>5}  {where}")
        if not info.available and info.spec.offline_note:
            click.echo(f"{'':10} note: {info.spec.offline_note}")
    click.echo(f"searched (in order; set ${ENV_VAR} or --data-home to add folders):")
    for d in dirs:
        click.echo(f"  {d}")


@main.command()
@click.argument("grid")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), required=True,
              help="Folder of the result table (<grid name>.csv).")
@click.option("--budget", type=click.FloatRange(0, min_open=True), default=None,
              help="Stop cleanly between runs after this many seconds.")
@click.option("--datasets", "datasets_", default=None,
              help="Comma-separated datasets replacing the grid's.")
@click.option("--algorithms", default=None, help="Comma-separated algorithms replacing the grid's.")
@click.option("--seeds", type=click.IntRange(1), default=None,
              help="Number of seeds (0..N-1) replacing the grid's.")
@click.option("--max-iter", type=click.IntRange(1), default=None,
              help="Iterations per run replacing the grid's.")
@click.option("--memory-budget", type=click.FloatRange(0, min_open=True), default=None,
              help="GB a kernel matrix may take (default: 70% of the available RAM).")
@click.option("--data-home", type=click.Path(file_okay=False), default=None,
              help="A folder searched first for the datasets.")
@click.option("--download", is_flag=True, help="Fetch missing datasets from OpenML.")
@click.option("--jobs", type=click.IntRange(1), default=1, show_default=True,
              help="Runs side by side in this many processes, each with one BLAS thread.")
@click.option("--kernel-cache", type=click.Path(file_okay=False), default=None,
              help="Folder where kernel matrices are built once and shared by all "
                   "processes and resumes (memory-mapped).")
@click.option("--dry-run", is_flag=True, help="List the runs without running them.")
@click.option("--no-progress", is_flag=True, help="No progress bar.")
def experiment(grid, out_dir, budget, datasets_, algorithms, seeds, max_iter, memory_budget,
               data_home, download, jobs, kernel_cache, dry_run, no_progress):
    """Run GRID (a preset: gaussian, knn, heat, quick; or a TOML grid file) and
    append one row per run to OUT/<grid name>.csv. Re-running skips finished runs."""
    from dataclasses import replace

    from .experiments import GridError, expand, resolve_grid, run_grid

    try:
        g = resolve_grid(grid)
        g = g.with_options(
            datasets=None if datasets_ is None else [s.strip() for s in datasets_.split(",")],
            seeds=seeds, max_iter=max_iter)
        if algorithms is not None:
            g = replace(g, algorithms=tuple(s.strip() for s in algorithms.split(",")))
        runs = expand(g)
    except (GridError, ValueError) as exc:
        raise click.UsageError(str(exc)) from None
    out = Path(out_dir) / f"{g.name}.csv"
    if dry_run:
        for r in runs:
            click.echo(f"{r.run_id} {r.dataset} {r.algorithm} {r.kernel} "
                       f"b={r.batch_size} tau={r.tau} seed={r.seed}")
        click.echo(f"{len(runs)} runs -> {out}")
        return
    try:
        summary = run_grid(runs, out, data_home=data_home, download=download,
                           budget_seconds=budget,
                           memory_budget=-1 if memory_budget is None
                           else int(memory_budget * 1e9),
                           progress=not no_progress, jobs=jobs, kernel_cache=kernel_cache)
    except (OSError, ValueError) as exc:
        raise click.ClickException(" ".join(str(exc).split())) from None
    click.echo(str(summary))
    for msg in summary.errors[:5]:
        click.echo(f"  error: {msg}", err=True)


@main.command()
@click.argument("results", nargs=-1, required=True, type=click.Path(exists=True))
@click.option("--out", "out_dir", type=click.Path(file_okay=False), required=True,
              help="Folder of the figures.")
@click.option("--tau", type=click.IntRange(1), default=None,
              help="tau of the truncated algorithms in the panels (default 200).")
@click.option("--format", "formats", multiple=True, type=click.Choice(["png", "svg", "pdf"]),
              default=("png", "svg"), show_default=True, help="Figure formats.")
def plot(results, out_dir, tau, formats):
    """Draw the paper's figures from RESULTS (result tables or folders of them)."""
    from .experiments import plot_results

    try:
        paths = plot_results(list(results), out_dir, tau=tau, formats=formats)
    except (OSError, ValueError) as exc:
        raise click.ClickException(" ".join(str(exc).split())) from None
    for p in paths:
        click.echo(str(p))


def _kernel_scale_options(command):
    """The arguments of ``kernel-scale`` (and of its deprecated spelling ``gamma``)."""
    for option in reversed([
        click.argument("dataset"),
        click.option("--kernel", type=click.Choice(["rbf", "gaussian", "knn", "heat"]),
                     default="rbf", show_default=True, help="Kernel."),
        click.option("--n-neighbors", type=click.IntRange(1), default=None,
                     help="Neighbours of the k-NN / heat graph (default: the paper's, per "
                          "dataset)."),
        click.option("--t", "t", type=click.FloatRange(0, min_open=True), default=1.0,
                     show_default=True, help="Heat kernel diffusion time."),
        click.option("--gamma", "rbf_gamma", type=click.FloatRange(0, min_open=True),
                     default=None,
                     help="rbf width (default: 1 / (2 sigma^2) with the paper's sigma)."),
        click.option("--data-home", type=click.Path(file_okay=False), default=None,
                     help="A folder searched first for the dataset."),
    ]):
        command = option(command)
    return command


@main.command("kernel-scale")
@_kernel_scale_options
def kernel_scale(dataset, kernel, n_neighbors, t, rbf_gamma, data_home):
    """Print the paper's gamma = max_x sqrt(K(x, x)) of DATASET (Table 1).

    This "gamma" is a property of kernel and data (the bound in the paper's
    analysis), not the width of the rbf kernel (``fit --gamma``).
    """
    _kernel_scale(dataset, kernel, n_neighbors, t, rbf_gamma, data_home)


@main.command("gamma", deprecated=True)
@_kernel_scale_options
def gamma(dataset, kernel, n_neighbors, t, rbf_gamma, data_home):
    """Deprecated spelling of ``kernel-scale`` (the paper's gamma, not the kernel width)."""
    click.echo("Warning: 'mbkkm gamma' is deprecated and will be removed; use "
               "'mbkkm kernel-scale' (the paper's gamma = max_x sqrt(K(x, x)), not the "
               "kernel width).", err=True)
    _kernel_scale(dataset, kernel, n_neighbors, t, rbf_gamma, data_home)


def _kernel_scale(dataset, kernel, n_neighbors, t, rbf_gamma, data_home):
    from .datasets import get_spec, load_dataset
    from .kernels import kernel_gamma

    try:
        spec = get_spec(dataset)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    try:
        X, _ = load_dataset(spec.name, data_home=data_home, download=False)
    except (OSError, ValueError) as exc:
        raise click.ClickException(" ".join(str(exc).split())) from None
    if kernel in ("rbf", "gaussian"):
        params = {"gamma": rbf_gamma if rbf_gamma is not None else spec.rbf_gamma}
    else:
        k = n_neighbors or (spec.knn_neighbors if kernel == "knn" else spec.heat_neighbors)
        params = {"n_neighbors": k} if kernel == "knn" else {"n_neighbors": k, "t": t}
    start = time.perf_counter()
    try:
        value = kernel_gamma(X, kernel, **params)
    except (ValueError, MemoryError) as exc:
        raise click.ClickException(" ".join(str(exc).split())) from None
    desc = ", ".join(f"{a}={b:.6g}" if isinstance(b, float) else f"{a}={b}"
                     for a, b in params.items())
    click.echo(f"{spec.name} {kernel} ({desc}): gamma = {value:.6g} "
               f"({time.perf_counter() - start:.1f} s)")


if __name__ == "__main__":  # pragma: no cover
    main()

"""The heat kernel's diffusion time t that meets the paper's Table 1 gamma.

The paper's heat kernel exp(-t L), L = I - D^-1/2 A D^-1/2, on the symmetrised
k-NN graph with self-loops (the runner's graph: the data set's ``heat_neighbors``,
exact neighbours on the loader's features). The paper does not state t; this finds
the t at which max_x sqrt(K(x, x)) equals its Table 1 gamma
(:func:`mbkkm.kernels._gamma.heat_time_for_gamma`: a certified bracket from the top
eigenpairs and a few exact diagonal entries).

``--dense DIR`` (Letter: 20,000 points) instead takes every eigenpair of a dense
decomposition saved in DIR (``lam.npy``, ``V.npy``; written by ``--save-dense DIR``,
peak about 3 x 8 n^2 bytes) and gives t exactly, the bracket the top
``--n-components`` pairs give on their own, and the error of the runner's low-rank
heat kernel (``heat_kernel``'s chosen rank) against the exact kernel.

    .venv/bin/python benchmarks/bench_heat_t.py pendigits
    .venv/bin/python benchmarks/bench_heat_t.py letter --save-dense /tmp/letter-eig
    .venv/bin/python benchmarks/bench_heat_t.py letter --dense /tmp/letter-eig
    .venv/bin/python benchmarks/bench_heat_t.py mnist --n-components 64

``--fill-cache GRID --dense DIR`` writes the exact kernel of a heat grid (its t and
data set) into the runner's kernel cache (``--kernel-cache``, default
``~/.cache/mbkkm/kernels``) from the saved decomposition, K = (V sqrt w)(V sqrt w)^T,
as ``heat_kernel``'s exact path computes it: one product instead of the decomposition
(the cache key names the mbkkm commit, so run it from the commit that runs the grid).
The entry's build time is the graph and decomposition time saved with DIR plus the
product's.

    .venv/bin/python benchmarks/bench_heat_t.py letter --dense /tmp/letter-eig \
        --fill-cache docs/results/grids/heat-letter.toml
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time

import numpy as np

#: The paper's Table 1 gamma of the heat kernel.
PAPER_GAMMA = {"pendigits": 0.0477, "letter": 0.0399, "mnist": 0.0612}


def _peak_gb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6


def _fill_cache(args):
    """The exact heat kernel of a grid, into the runner's cache, from a saved decomposition."""
    from mbkkm.experiments import expand, load_grid
    from mbkkm.experiments._algorithms import get_algorithm
    from mbkkm.experiments._kernel_cache import cache_key, cached_matrix
    from mbkkm.experiments._runner import environment, load_data
    from mbkkm.kernels import GRAPH_KERNELS

    def needs_matrix(run):  # as the runner decides it: full batch, or a graph kernel
        algo = get_algorithm(run.algorithm)
        return algo.needs_kernel_matrix or (algo.uses_kernel and run.kernel in GRAPH_KERNELS)

    run = next(
        r
        for r in expand(load_grid(args.fill_cache))
        if r.dataset == args.dataset and needs_matrix(r)
    )
    params = dict(run.kernel_params)
    X, _ = load_data(run, data_home=args.data_home)
    env = environment()
    if env["commit"].endswith("+dirty"):
        raise SystemExit("the package has uncommitted changes: the runner's key would differ")
    key = cache_key(
        n_samples=X.shape[0],
        kernel=run.kernel,
        params=params,
        dataset=run.dataset,
        synthetic_samples=run.synthetic_samples,
        source=env["commit"] or env["mbkkm"],
    )
    with open(os.path.join(args.dense, "times.json")) as f:
        saved = json.load(f)

    def build():
        from mbkkm.kernels._spectral import heat_weights

        start, cpu = time.perf_counter(), time.process_time()
        lam = np.load(os.path.join(args.dense, "lam.npy"))
        F = np.load(os.path.join(args.dense, "V.npy"))
        F *= np.sqrt(heat_weights(lam, params["t"]))
        K = F @ F.T
        del F
        seconds = time.perf_counter() - start
        cpu_seconds = time.process_time() - cpu
        print(
            f"product: {seconds:.0f} s ({cpu_seconds:.0f} CPU s), peak {_peak_gb():.1f} GB",
            flush=True,
        )
        return (
            K,
            saved["graph_s"] + saved["eigh_s"] + seconds,
            saved["graph_cpu"] + saved["eigh_cpu"] + cpu_seconds,
        )

    K, seconds, cpu_seconds = cached_matrix(args.kernel_cache, key, build)
    print(
        f"{args.kernel_cache}/{key}: {run.dataset} heat {params}, build {seconds:.0f} s "
        f"({cpu_seconds:.0f} CPU s); gamma = {np.sqrt(np.diagonal(K).max()):.5f}",
        flush=True,
    )
    return 0


def _graph(name, data_home):
    from mbkkm.datasets import get_spec, load_dataset
    from mbkkm.kernels._graph import KNNGraph

    X, _ = load_dataset(name, data_home=data_home)
    k = get_spec(name).heat_neighbors
    start, cpu = time.perf_counter(), time.process_time()
    graph = KNNGraph(k).fit(X)
    graph.times_ = {"graph_s": time.perf_counter() - start, "graph_cpu": time.process_time() - cpu}
    print(
        f"{name}: n = {X.shape[0]}, {k} neighbours, {graph.adjacency_.nnz} links, graph "
        f"{graph.times_['graph_s']:.1f} s ({graph.times_['graph_cpu']:.1f} CPU s)",
        flush=True,
    )
    return graph


def _low_rank_errors(lam, V, t):
    """Errors of the runner's low-rank heat kernel (heat_kernel's chosen rank) at t."""
    from mbkkm.kernels._spectral import (
        DEFAULT_MAX_COMPONENTS,
        DEFAULT_RANK_TOL,
        choose_rank,
        heat_weights,
    )

    order = np.argsort(lam)[::-1]
    w = heat_weights(lam[order], t)
    r, bound = choose_rank(
        w[: DEFAULT_MAX_COMPONENTS + 1], DEFAULT_RANK_TOL, DEFAULT_MAX_COMPONENTS
    )
    frob = np.sqrt(np.sum(w[r:] ** 2) / np.sum(w**2))
    kept = np.zeros(V.shape[0])
    full = np.zeros(V.shape[0])
    for s in range(0, V.shape[0], 2000):  # row chunks: V**2 whole would double the memory
        rows = V[s : s + 2000][:, order] ** 2
        kept[s : s + 2000] = rows[:, :r] @ w[:r]
        full[s : s + 2000] = rows @ w
    return {
        "rank": r,
        "spectral": bound,
        "relative spectral": bound / w[0],
        "relative Frobenius": frob,
        "max diagonal error": float((full - kept).max()),
        "exact gamma": float(np.sqrt(full.max())),
        "low-rank gamma": float(np.sqrt(kept.max())),
    }


def main(argv=None):
    from mbkkm.kernels._gamma import heat_time_for_gamma, top_heat_eigenpairs

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("dataset", choices=sorted(PAPER_GAMMA))
    p.add_argument("--data-home", default=os.path.join("..", "shared", "datasets"))
    p.add_argument("--n-components", type=int, default=64)
    p.add_argument("--n-exact", type=int, default=64)
    p.add_argument("--gamma", type=float, default=None, help="target (default: the paper's)")
    p.add_argument("--save-dense", metavar="DIR", help="decompose N densely, save, stop")
    p.add_argument("--dense", metavar="DIR", help="use a saved dense decomposition")
    p.add_argument("--fill-cache", metavar="GRID", help="write GRID's exact kernel (--dense)")
    p.add_argument("--kernel-cache", default=os.path.expanduser("~/.cache/mbkkm/kernels"))
    args = p.parse_args(argv)
    if args.fill_cache:
        if not args.dense:
            p.error("--fill-cache needs --dense DIR")
        return _fill_cache(args)
    gamma = args.gamma or PAPER_GAMMA[args.dataset]
    graph = _graph(args.dataset, args.data_home)
    A = graph.adjacency_
    if args.save_dense:
        import scipy.linalg as sla

        from mbkkm.kernels._spectral import normalized_adjacency

        os.makedirs(args.save_dense, exist_ok=True)
        start, cpu = time.perf_counter(), time.process_time()
        lam, V = sla.eigh(normalized_adjacency(A, graph.degrees_).toarray(), overwrite_a=True)
        times = {
            **graph.times_,
            "eigh_s": time.perf_counter() - start,
            "eigh_cpu": time.process_time() - cpu,
            "peak_gb": _peak_gb(),
        }
        print(
            f"dense eigh: {times['eigh_s']:.0f} s ({times['eigh_cpu']:.0f} CPU s), peak "
            f"{times['peak_gb']:.1f} GB",
            flush=True,
        )
        np.save(os.path.join(args.save_dense, "lam.npy"), lam)
        np.save(os.path.join(args.save_dense, "V.npy"), V)
        with open(os.path.join(args.save_dense, "times.json"), "w") as f:
            json.dump(times, f)
        return 0
    if args.dense:
        lam = np.load(os.path.join(args.dense, "lam.npy"))
        V = np.load(os.path.join(args.dense, "V.npy"), mmap_mode="r")
        start = time.perf_counter()
        exact = heat_time_for_gamma(A, gamma, eigenpairs=(lam, V), n_exact=0, xtol=1e-6)
        print(
            f"exact (every eigenpair): t = {exact.t:.5f} ({time.perf_counter() - start:.0f} s)",
            flush=True,
        )
        for t in (exact.t, round(exact.t, 2)):
            print(f"  at t = {t:.5g}:", _low_rank_errors(lam, np.asarray(V), t), flush=True)
        top = np.argsort(lam)[::-1][: args.n_components]
        eigenpairs = (lam[top], np.ascontiguousarray(V[:, top]))
        del V
    else:
        start, cpu = time.perf_counter(), time.process_time()
        eigenpairs = top_heat_eigenpairs(A, args.n_components, random_state=0)
        print(
            f"eigsh, {args.n_components} pairs: {time.perf_counter() - start:.0f} s "
            f"({time.process_time() - cpu:.0f} CPU s); smallest {eigenpairs[0].min():.4f}",
            flush=True,
        )
    for n_exact in sorted({0, args.n_exact}):
        start, cpu = time.perf_counter(), time.process_time()
        res = heat_time_for_gamma(A, gamma, eigenpairs=eigenpairs, n_exact=n_exact)
        print(
            f"{args.n_components} pairs, {n_exact} exact points: t = {res.t:.4f} in "
            f"[{res.t_low:.4f}, {res.t_high:.4f}] (bounds alone "
            f"[{res.bounds_bracket[0]:.4f}, {res.bounds_bracket[1]:.4f}]), argmax "
            f"{res.argmax}; {time.perf_counter() - start:.0f} s "
            f"({time.process_time() - cpu:.0f} CPU s), peak {_peak_gb():.1f} GB",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Sparse X (issue 13, part 1): kernel tiles and fit + labels on a synthetic text corpus.

Data: ``mbkkm.datasets.make_topic_corpus`` (default 200,000 documents x 50,000
terms, density 0.001, 20 topics, float32 L2-normalised TF-IDF rows, CSR).

Part ``tiles`` (runs today): the kernel work of one iteration, K(support, batch)
for b = 1024 batch rows and m = 3000 support rows drawn from the corpus, with
the linear, cosine, rbf and laplacian kernels, on CSR rows and on the dense
copies of the same rows (only those 4024 rows are densified: 800 MB in float32),
plus the sparse row gathers (take b rows, stack the support) and the diagonal.
Best of ``--repeats`` (laplacian: one run, it is slow).

Part ``fit`` (runs once the estimators accept sparse X): for the cosine and the
rbf kernel, ``MiniBatchKernelKMeans(...).fit(X)`` with ``compute_labels=True``
in a fresh subprocess each, on

- the CSR corpus (all documents), and on
- the first ``--dense-docs`` documents (default 20,000) as CSR and densified
  (20,000 x 50,000 float32 = 4.0 GB; the full dense corpus, 40 GB, does not fit),

reporting time, ARI against the topics and the peak RSS (VmHWM, reset after the
data are made when the kernel allows it) above the import baseline. Target
(issue 13): peak < 2 x (the CSR arrays' bytes) + the model's bytes (the pickled
estimator without its labels). Until the estimators accept sparse X the part
prints what it would run and exits 0.

Usage::

    .venv/bin/python benchmarks/bench_sparse.py                    # tiles, then fit if possible
    .venv/bin/python benchmarks/bench_sparse.py --part tiles --n-docs 50000
    .venv/bin/python benchmarks/bench_sparse.py --part fit --dense-docs 0   # no dense run
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
MB = 1e6

import numpy as np
from _rss import reset_peak, status_kb


def _csr_bytes(X):
    """Bytes a CSR matrix holds: data, indices and indptr."""
    return X.data.nbytes + X.indices.nbytes + X.indptr.nbytes


def _best(f, repeats):
    best = np.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        f()
        best = min(best, time.perf_counter() - t0)
    return best


def _corpus(args, n_docs=None):
    from mbkkm.datasets import make_topic_corpus

    return make_topic_corpus(
        n_docs or args.n_docs,
        args.n_terms,
        n_topics=args.n_topics,
        density=args.density,
        random_state=args.seed,
    )


# ----------------------------------------------------------------------------- tiles
def tiles(args):
    from mbkkm.backends._numpy import take_rows, vstack_rows

    t0 = time.perf_counter()
    X, _ = _corpus(args)
    t_data = time.perf_counter() - t0
    density = X.nnz / np.prod(X.shape)
    print(
        f"corpus: {X.shape[0]} x {X.shape[1]}, nnz {X.nnz} (density {density:.5f}),"
        f" CSR {_csr_bytes(X) / MB:.0f} MB, made in {t_data:.1f} s"
    )
    rng = np.random.default_rng(args.seed)
    b, m = args.batch_size, args.n_support
    bidx = rng.integers(0, X.shape[0], b)
    sidx = rng.integers(0, X.shape[0], m)
    t_take = _best(lambda: take_rows(X, bidx), args.repeats)
    parts = [take_rows(X, s) for s in np.array_split(sidx, 20)]  # 20 windows
    t_stack = _best(lambda: vstack_rows(parts), args.repeats)
    B, S = take_rows(X, bidx), vstack_rows(parts)
    print(
        f"gathers: take {b} rows {t_take * 1e3:.2f} ms; stack {m} support rows from 20 "
        f"parts {t_stack * 1e3:.2f} ms"
    )
    Bd, Sd = B.toarray(), S.toarray()
    print(
        f"tile K(support, batch), m = {m}, b = {b}, float32; dense copies of these rows "
        f"{(Bd.nbytes + Sd.nbytes) / MB:.0f} MB (laplacian: one run, dense only with "
        "--dense-laplacian)"
    )
    print(
        f"{'kernel':<10} {'sparse ms':>10} {'dense ms':>10} {'dense/sparse':>13} "
        f"{'max |diff|':>11} {'diag ms':>8}"
    )
    rows = []
    for name in args.kernels:
        rows.append(_tile_row(name, X, B, S, Bd, Sd, args))
    P = B @ S.T
    print(f"the tile's product <x, y> has {P.nnz / (b * m):.0%} non-zeros (frequent terms)")
    return rows


def _tile_row(name, X, B, S, Bd, Sd, args):
    from mbkkm.kernels import resolve_kernel

    kernel = resolve_kernel(name, X=X) if name in ("rbf", "laplacian") else resolve_kernel(name)
    slow = name == "laplacian"  # O(b m (nnz_x + nnz_y)) merges; dense: O(b m d)
    reps = 1 if slow else args.repeats
    # K(S, B) (m, b) with the support as the left operand, as the core computes it
    # (the labelling pass prepares the left operand once: kernel.prepare(S)).
    out = np.empty((S.shape[0], B.shape[0]), dtype=np.float32)
    cache_s = kernel.prepare(S)
    t_s = _best(lambda: kernel(S, B, out=out, **cache_s), reps)
    Ks = out.copy()
    t_d, diff = np.nan, np.nan
    if not slow or args.dense_laplacian:
        cache_d = kernel.prepare(Sd)
        t_d = _best(lambda: kernel(Sd, Bd, out=out, **cache_d), max(1, reps // 2))
        diff = float(np.max(np.abs(Ks - out)))
    t_diag = _best(lambda: kernel.diag(B), args.repeats)
    print(
        f"{name:<10} {t_s * 1e3:>10.1f} {t_d * 1e3:>10.1f} {t_d / t_s:>13.1f} "
        f"{diff:>11.2e} {t_diag * 1e3:>8.2f}"
    )
    return {"kernel": name, "sparse_s": t_s, "dense_s": t_d, "max_diff": diff}


# ------------------------------------------------------------------------------- fit
def _estimator(args, kernel):
    from mbkkm import MiniBatchKernelKMeans

    return MiniBatchKernelKMeans(
        n_clusters=args.n_topics,
        kernel=kernel,
        batch_size=args.batch_size,
        tau=args.tau,
        max_iter=args.max_iter,
        compute_labels=True,
        random_state=args.seed,
        # rbf: the fixed width the recorded numbers were measured with (None = "auto")
        **({"gamma": "mean-distance"} if kernel == "rbf" else {}),
    )


def sparse_supported():
    """Whether MiniBatchKernelKMeans.fit accepts a CSR matrix today."""
    import scipy.sparse as sp

    X = sp.random(64, 10, density=0.3, format="csr", random_state=0, dtype=np.float32)
    try:
        _estimator(
            argparse.Namespace(n_topics=2, batch_size=16, tau=10, max_iter=2, seed=0), "cosine"
        ).fit(X)
    except (TypeError, ValueError) as exc:
        if "parse" in str(exc).lower() or "sparse" in str(exc).lower():
            return False, str(exc)
        raise
    return True, ""


def child(args):
    rss_start = status_kb("VmRSS")
    from sklearn.metrics import adjusted_rand_score

    rss_imports = status_kb("VmRSS")
    t0 = time.perf_counter()
    X, y = _corpus(args, args.child_docs)
    if args.child_dense:
        X = X.toarray()
    t_data = time.perf_counter() - t0
    rss_data = status_kb("VmRSS")
    reset = reset_peak()
    km = _estimator(args, args.child_kernel)
    t0 = time.perf_counter()
    km.fit(X)
    t_fit = time.perf_counter() - t0
    hwm = status_kb("VmHWM")
    labels = km.labels_
    model = len(pickle.dumps(km, protocol=pickle.HIGHEST_PROTOCOL)) - labels.nbytes
    print(
        json.dumps(
            {
                "kernel": args.child_kernel,
                "dense": bool(args.child_dense),
                "n_docs": int(X.shape[0]),
                "data_mb": _csr_bytes(X) / MB,
                "model_mb": model / MB,
                "n_support": int(getattr(km, "support_vectors_", np.empty((0,))).shape[0]),
                "rss_start_mb": rss_start * 1e3 / MB,
                "rss_imports_mb": rss_imports * 1e3 / MB,
                "rss_data_mb": rss_data * 1e3 / MB,
                "hwm_mb": hwm * 1e3 / MB,
                "peak_reset": reset,
                "t_data": t_data,
                "t_fit_labels": t_fit,
                "ari": float(adjusted_rand_score(y, labels)),
            }
        )
    )


def fit(args):
    runs = [(k, args.n_docs, False) for k in args.fit_kernels]
    if args.dense_docs and args.dense_docs != args.n_docs:
        runs += [(k, args.dense_docs, False) for k in args.fit_kernels]
    if args.dense_docs:
        runs += [(k, args.dense_docs, True) for k in args.fit_kernels]
    print(
        f"fit + labels: MiniBatchKernelKMeans(n_clusters={args.n_topics}, kernel=..., "
        f"batch_size={args.batch_size}, tau={args.tau}, max_iter={args.max_iter}, "
        f"compute_labels=True, random_state={args.seed}) on"
    )
    for k, n, dense in runs:
        print(f"  {k:<7} {n} documents, {'dense (densified CSR)' if dense else 'CSR'}")
    ok, why = sparse_supported()
    if not ok:
        print(f"not run: the estimator does not accept sparse X yet ({why})")
        return []
    results = []
    for k, n, dense in runs:
        cmd = [
            sys.executable,
            os.path.abspath(__file__),
            *sys.argv[1:],
            "--child",
            "--child-kernel",
            k,
            "--child-docs",
            str(n),
        ] + (["--child-dense"] if dense else [])
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            print(proc.stdout, proc.stderr, file=sys.stderr)
            continue
        r = json.loads(proc.stdout.strip().splitlines()[-1])
        over = r["hwm_mb"] - r["rss_imports_mb"]
        limit = 2 * r["data_mb"] + r["model_mb"]
        verdict = (
            ""
            if r["dense"]
            else f" target {over:.0f} <= 2 x {r['data_mb']:.0f} + {r['model_mb']:.0f} MB: "
            f"{'PASS' if over <= limit else 'FAIL'}"
        )
        print(
            f"{k:<7} n={r['n_docs']:>7} {'dense ' if r['dense'] else 'sparse'}: "
            f"fit+labels {r['t_fit_labels']:.1f} s, ARI {r['ari']:.3f}, m={r['n_support']},"
            f" data {r['data_mb']:.0f} MB, peak above imports {over:.0f} MB"
            f" (reset={r['peak_reset']}){verdict}"
        )
        results.append(r)
    return results


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=["tiles", "fit", "all"], default="all")
    parser.add_argument("--n-docs", type=int, default=200_000)
    parser.add_argument("--n-terms", type=int, default=50_000)
    parser.add_argument("--n-topics", type=int, default=20)
    parser.add_argument("--density", type=float, default=0.001)
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--n-support", type=int, default=3000, help="m of the tile part")
    parser.add_argument("--tau", type=int, default=100)
    parser.add_argument("--max-iter", type=int, default=100)
    parser.add_argument(
        "--dense-docs",
        type=int,
        default=20_000,
        help="documents of the dense comparison of the fit part (0: none)",
    )
    parser.add_argument("--kernels", nargs="+", default=["linear", "cosine", "rbf", "laplacian"])
    parser.add_argument("--fit-kernels", nargs="+", default=["cosine", "rbf"])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--dense-laplacian",
        action="store_true",
        help="also time the dense laplacian tile (minutes at d = 50,000)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--child-kernel", help=argparse.SUPPRESS)
    parser.add_argument("--child-docs", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--child-dense", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args)
        return 0
    print("bench_sparse: " + " ".join(sys.argv[1:] if argv is None else argv))
    print(time.strftime("%Y-%m-%d %H:%M:%S %Z"))
    if args.part in ("tiles", "all"):
        tiles(args)
    if args.part in ("fit", "all"):
        fit(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())

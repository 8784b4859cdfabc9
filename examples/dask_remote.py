"""
Dask on a remote cluster
========================

Fit MiniBatchKernelKMeans on a Dask array, locally or on a remote scheduler::

    python examples/dask_remote.py                              # local 2-worker cluster
    python examples/dask_remote.py --scheduler tcp://host:8786  # an existing cluster

The data (concentric shells) is generated per chunk on the workers, so it is never
held in one process; only the batch rows and the model travel.
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def shells_block(block_id, rows, d, k, seed):
    rng = np.random.default_rng([seed, block_id])
    u = rng.standard_normal((rows, d))
    u /= np.linalg.norm(u, axis=1, keepdims=True)
    r = rng.integers(1, k + 1, rows)
    return u * r[:, None] + 0.05 * rng.standard_normal((rows, d)), r - 1


def main():
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--scheduler", default=None, help="address of a running scheduler, e.g. tcp://host:8786"
    )
    ap.add_argument("--n", type=int, default=200_000)
    ap.add_argument("--chunk", type=int, default=25_000)
    args = ap.parse_args()

    import dask.array as da
    from distributed import Client, LocalCluster
    from sklearn.metrics import adjusted_rand_score

    from mbkkm import MiniBatchKernelKMeans

    if args.scheduler:
        client = Client(args.scheduler)
    else:
        client = Client(LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=":0"))
    print(client)
    d, k, seed = 3, 2, 0
    sizes = (args.chunk,) * (args.n // args.chunk)

    def make(block_info=None):
        info = block_info[None]
        return shells_block(info["chunk-location"][0], info["chunk-shape"][0], d, k, seed)[0]

    def truth(block_info=None):
        info = block_info[None]
        return shells_block(info["chunk-location"][0], info["chunk-shape"][0], d, k, seed)[1]

    X = da.map_blocks(make, chunks=(sizes, (d,)), dtype=np.float64)
    y = da.map_blocks(truth, chunks=(sizes,), dtype=np.int64)

    t0 = time.perf_counter()
    km = MiniBatchKernelKMeans(
        n_clusters=k, batch_size=1024, tau=200, max_iter=100, random_state=seed
    ).fit(X)
    print(
        f"fit + labels on {X.shape} in {X.numblocks[0]} chunks: "
        f"{time.perf_counter() - t0:.2f}s, inertia {km.inertia_:.6g}, "
        f"width chosen gamma_ = {km.gamma_:.3g}"
    )
    labels, y = da.compute(km.labels_, y)
    print(f"ARI against the shells: {adjusted_rand_score(y, labels):.3f}")
    new = km.predict(X[: 2 * args.chunk])  # lazy: a Dask array
    print("predict on the first two chunks:", np.bincount(new.compute(), minlength=k))
    client.close()


if __name__ == "__main__":
    main()

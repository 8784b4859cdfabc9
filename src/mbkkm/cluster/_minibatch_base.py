"""What the mini-batch estimators share: sizes, the choice among n_init
initialisations, and the iteration loop with its early stopping rule."""

from __future__ import annotations

import time

import numpy as np

from .._warn import warn
from ._params import check_n_clusters_vs_samples


class MiniBatchMixin:
    """Shared steps of :class:`MiniBatchKernelKMeans` and :class:`MiniBatchKMeans`.

    A subclass provides ``_initial_centers(X, sample_weight, rng)`` (one
    initialisation, in the form ``fit`` iterates on) and
    ``_init_inertia(Xv, wv, candidate)`` (its inertia on a validation subsample),
    and may override ``_take_rows(X, idx)`` (rows of its data).
    """

    def _resolve_sizes(self, n):
        """Batch and init sizes for n samples (``_batch_size``, ``_init_size``)."""
        check_n_clusters_vs_samples(self.n_clusters, n)
        self._batch_size = min(self.batch_size, n)
        init_size = self.init_size
        if init_size is None:
            init_size = 3 * self._batch_size
            if init_size < self.n_clusters:
                init_size = 3 * self.n_clusters
        elif init_size < self.n_clusters:
            raise ValueError(f"init_size={init_size} should be >= n_clusters={self.n_clusters}")
        self._init_size = min(init_size, n)

    def _take_rows(self, X, idx):
        return X[idx]

    def _best_init(self, X, sample_weight, rng, start=None):
        """The initialisation with the lowest inertia on a validation subsample.

        As scikit-learn's MiniBatchKMeans: ``n_init`` candidates are scored on
        ``init_size`` points drawn with replacement; an explicit init runs once.
        ``start`` (a width selection's partition) is the first candidate.
        """
        n_init = self.n_init
        if not isinstance(self._init, str) and n_init != 1:
            warn(
                f"Explicit initial center position passed: performing only one init in "
                f"{type(self).__name__} instead of n_init={n_init}.",
                RuntimeWarning,
            )
            n_init = 1
        if n_init == 1:
            return start if start is not None else self._initial_centers(X, sample_weight, rng)
        val_idx = rng.randint(0, X.shape[0], self._init_size)
        Xv = self._take_rows(X, val_idx)
        wv = None if sample_weight is None else sample_weight[val_idx]
        best, best_inertia = None, np.inf
        for i in range(n_init):
            centers = start if i == 0 and start is not None else None
            if centers is None:
                centers = self._initial_centers(X, sample_weight, rng)
            inertia = self._init_inertia(Xv, wv, centers)
            if self.verbose:
                print(f"Init inertia on the validation subsample: {inertia:.6g}")
            if inertia < best_inertia:
                best, best_inertia = centers, inertia
        return best

    def _iterate(self, loop):
        """Run the iterations of ``loop`` (a :class:`mbkkm._core._loop.Loop`) up to
        ``max_iter``, or until early stopping meets its rule.

        With ``verbose``, it stops at every ``max(1, max_iter // 10)``-th iteration for a
        progress line (``loop.describe()`` adds to it). Returns the batch objectives and
        the number of iterations run.
        """
        every = max(1, self.max_iter // 10)
        t0 = time.perf_counter()
        while loop.n_iter < self.max_iter and not loop.converged:
            until = self.max_iter
            if self.verbose:  # up to the next progress line
                until = min(-(-loop.n_iter // every) * every, self.max_iter - 1) + 1
            loop.run_until(until)
            it = loop.n_iter - 1
            if self.verbose and (it % every == 0 or it == self.max_iter - 1):
                described = loop.describe()
                extra = f", {described}" if described else ""
                print(
                    f"Iteration {it + 1}/{self.max_iter}: batch objective "
                    f"{loop.objectives[it]:.6g}{extra}, {time.perf_counter() - t0:.2f}s"
                )
            if loop.converged and self.verbose:
                gain = loop.objectives[it] - loop.objectives_after[it]
                print(f"Converged at iteration {it + 1}: improvement {gain:.3g} < tol={self.tol}")
        return np.asarray(loop.objectives, dtype=np.float64), loop.n_iter

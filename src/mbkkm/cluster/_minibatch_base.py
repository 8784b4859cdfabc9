"""What the mini-batch estimators share: sizes, the choice among n_init
initialisations, and the iteration loop with its early stopping rule."""

from __future__ import annotations

import time
import warnings

import numpy as np

from ._common import check_n_clusters_vs_samples


class MiniBatchMixin:
    """Shared steps of :class:`MiniBatchKernelKMeans` and :class:`MiniBatchKMeans`.

    A subclass provides ``_initial_centers(X, sample_weight, rng)`` (one
    initialisation; ``_init_candidate`` wraps it into the form ``fit`` uses) and
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
            raise ValueError(
                f"init_size={init_size} should be >= n_clusters={self.n_clusters}"
            )
        self._init_size = min(init_size, n)

    def _take_rows(self, X, idx):
        return X[idx]

    def _init_candidate(self, X, sample_weight, rng):
        return self._initial_centers(X, sample_weight, rng)

    def _best_init(self, X, sample_weight, rng):
        """The initialisation with the lowest inertia on a validation subsample.

        As scikit-learn's MiniBatchKMeans: ``n_init`` candidates are scored on
        ``init_size`` points drawn with replacement; an explicit init runs once.
        """
        n_init = self.n_init
        if not isinstance(self._init, str) and n_init != 1:
            warnings.warn(
                f"Explicit initial center position passed: performing only one init in "
                f"{type(self).__name__} instead of n_init={n_init}.",
                RuntimeWarning, stacklevel=3,
            )
            n_init = 1
        if n_init == 1:
            return self._init_candidate(X, sample_weight, rng)
        val_idx = rng.randint(0, X.shape[0], self._init_size)
        Xv = self._take_rows(X, val_idx)
        wv = None if sample_weight is None else sample_weight[val_idx]
        best, best_inertia = None, np.inf
        for _ in range(n_init):
            centers = self._init_candidate(X, sample_weight, rng)
            inertia = self._init_inertia(Xv, wv, centers)
            if self.verbose:
                print(f"Init inertia on the validation subsample: {inertia:.6g}")
            if inertia < best_inertia:
                best, best_inertia = centers, inertia
        return best

    def _iterate(self, step, describe=None):
        """Run ``step(it) -> (f_B(C_i), f_B(C_{i+1}) or None)`` up to ``max_iter`` times.

        Stops early when ``tol`` is set and f_B(C_i) - f_B(C_{i+1}) < tol (the
        paper's rule, on the same batch). Returns the batch objectives and the
        number of iterations run. ``describe()`` adds to the verbose lines.
        """
        objectives = []
        every = max(1, self.max_iter // 10)
        t0 = time.perf_counter()
        for it in range(self.max_iter):
            objective, after = step(it)
            objectives.append(objective)
            if self.verbose and (it % every == 0 or it == self.max_iter - 1):
                extra = f", {describe()}" if describe is not None else ""
                print(f"Iteration {it + 1}/{self.max_iter}: batch objective "
                      f"{objective:.6g}{extra}, {time.perf_counter() - t0:.2f}s")
            if self.tol is not None and objective - after < self.tol:
                if self.verbose:
                    print(f"Converged at iteration {it + 1}: improvement "
                          f"{objective - after:.3g} < tol={self.tol}")
                break
        return np.asarray(objectives), len(objectives)

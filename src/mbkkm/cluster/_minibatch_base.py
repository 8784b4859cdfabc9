"""What the mini-batch estimators share: sizes, the choice among n_init
initialisations, and the iteration loop with its early stopping rule."""

from __future__ import annotations

import numpy as np

from .._progress import progress_for
from ._fitting import n_init_for
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
        n_init = n_init_for(self._init, self.n_init, self)
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

        With ``verbose`` (or inside :func:`mbkkm._progress.reporting`: the command
        line), a progress line after the first iteration, then at most one every
        few seconds (iterations done, elapsed time, time left, batch objective) and
        one at the end, from the loop's ``on_progress`` hook: the loop runs in its
        own blocks, with no read-back of its own for the lines. Returns the batch
        objectives and the number of iterations run.
        """
        progress = progress_for(
            self.verbose,
            self.max_iter,
            "fit",
            unit="iterations",
            first=True,
            initial=loop.n_iter,
            follow=True,
        )
        if progress is None:
            loop.run_until(self.max_iter)
        else:
            with progress:

                def report(iteration, max_iter, objective):
                    progress.update(iteration - progress.done, f"batch objective {objective:.6g}")

                loop.on_progress.append(report)
                try:
                    loop.run_until(self.max_iter)
                finally:
                    loop.on_progress.remove(report)
                if loop.converged:
                    it = loop.n_iter - 1
                    gain = loop.objectives[it] - loop.objectives_after[it]
                    progress.write(
                        f"Converged at iteration {it + 1}: improvement {gain:.3g} < tol={self.tol}"
                    )
                if loop.objectives:
                    described = loop.describe()
                    progress.close(
                        f"batch objective {loop.objectives[-1]:.6g}"
                        + (f", {described}" if described else "")
                    )
        return np.asarray(loop.objectives, dtype=np.float64), loop.n_iter

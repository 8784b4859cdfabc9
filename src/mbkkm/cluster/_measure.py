"""What a fit's memory plan expected, next to what the fit really used.

:func:`measure_memory` fits an estimator while measuring its peaks -- on the host
with :mod:`tracemalloc` (which sees every NumPy and SciPy allocation), on a CUDA
device with ``torch.cuda.max_memory_allocated`` -- and returns the fit's memory plan
(``memory_plan_``) with the measured peaks filled in, phase by phase.
"""

from __future__ import annotations

import tracemalloc

from sklearn.utils.validation import check_is_fitted

from ..backends import get_backend, resolve_device
from ._base import kernel_kind


def measure_memory(estimator, X, sample_weight=None):
    """Fit ``estimator`` on X and return its memory plan with the measured peaks.

    The fit runs with ``compute_labels=False`` (the "fit" phase: setup and
    iterations), then the fitted points are labelled as ``fit`` does (the labelling
    phase); ``labels_``
    and ``inertia_`` are set as by a fit with ``compute_labels=True``.

    Parameters
    ----------
    estimator : MiniBatchKernelKMeans
        Fitted in place.
    X : array-like or tensor of shape (n_samples, n_features)
        The data (allocated before the measurement starts, so not counted).
    sample_weight : array-like of shape (n_samples,), default=None

    Returns
    -------
    plan : mbkkm.MemoryPlan
        ``estimator.memory_plan_``, with ``measured["fit"]`` and
        ``measured["labelling"]`` in bytes; ``plan.report()`` prints both.

    Raises
    ------
    TypeError
        When ``estimator`` is not a :class:`~mbkkm.MiniBatchKernelKMeans`.
    ValueError
        When the fit runs with torch on the CPU (``device="torch"``, ``"torch-cpu"``
        or a CPU tensor): neither tracemalloc nor torch counts its allocations. A fit
        on a CUDA device (``device="cuda"``, or X a CUDA tensor) is measured there.

    Examples
    --------
    >>> import numpy as np
    >>> from mbkkm import MiniBatchKernelKMeans, measure_memory
    >>> X = np.random.RandomState(0).rand(5000, 8).astype(np.float32)
    >>> plan = measure_memory(MiniBatchKernelKMeans(4, batch_size=256, tau=50,
    ...                                             max_iter=10, random_state=0), X)
    >>> sorted(plan.measured)
    ['fit', 'labelling']
    """
    from ._minibatch_kernel import MiniBatchKernelKMeans

    if not isinstance(estimator, MiniBatchKernelKMeans):
        raise TypeError(
            "measure_memory: estimator must be a MiniBatchKernelKMeans (whose fit and "
            f"labelling phases it measures), got {type(estimator).__name__}; the other "
            "estimators' plan is their memory_plan_ after a fit"
        )
    # where the fit runs: the estimator's device, else where X lives (None: numpy)
    device = resolve_device(estimator.device)
    if device is None:
        device = get_backend(X).device
    if getattr(device, "type", None) == "cpu":
        raise ValueError(
            "measure_memory: a fit with torch on the CPU (device="
            f"{estimator.device!r}, or a CPU tensor) cannot be measured: torch's CPU "
            "allocations are not counted by tracemalloc, and torch keeps no CPU peak. "
            "Measure the same fit with numpy (device=None on a numpy array), or on a "
            "CUDA device"
        )
    device = device if getattr(device, "type", None) == "cuda" else None
    compute_labels = estimator.get_params()["compute_labels"]
    estimator.set_params(compute_labels=False)
    try:
        if device is None:
            measured = _measure_host(estimator, X, sample_weight)
        else:
            measured = _measure_cuda(estimator, X, sample_weight, device)
    finally:
        estimator.set_params(compute_labels=compute_labels)
    check_is_fitted(estimator)
    plan = estimator.memory_plan_
    plan.measured.update(measured)
    return plan


def _peaks(estimator, X, sample_weight, reset, peak):
    """The peaks of the fit and of its labelling pass (``labels_`` and ``inertia_`` set
    as ``fit`` sets them): ``reset()`` before each, ``peak()`` (bytes above the start)
    after."""
    reset()
    estimator.fit(X, sample_weight=sample_weight)
    fit = peak()
    reset()
    items = kernel_kind(estimator.kernel).training_items(estimator._validate_X(X))
    estimator.labels_, estimator.inertia_ = estimator._labels_inertia(items, sample_weight)
    return {"fit": fit, "labelling": peak()}


def _measure_host(estimator, X, sample_weight):
    was_tracing = tracemalloc.is_tracing()
    if not was_tracing:
        tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]

        def peak():
            return tracemalloc.get_traced_memory()[1] - base

        return _peaks(estimator, X, sample_weight, tracemalloc.reset_peak, peak)
    finally:
        if not was_tracing:
            tracemalloc.stop()


def _measure_cuda(estimator, X, sample_weight, device):
    import torch

    torch.cuda.synchronize(device)
    base = torch.cuda.memory_allocated(device)

    def peak():
        torch.cuda.synchronize(device)
        return torch.cuda.max_memory_allocated(device) - base

    return _peaks(
        estimator, X, sample_weight, lambda: torch.cuda.reset_peak_memory_stats(device), peak
    )

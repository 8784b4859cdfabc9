"""Estimators with a scikit-learn API."""

from ._minibatch_kernel import MiniBatchKernelKMeans

__all__ = ["MiniBatchKernelKMeans"]

"""The scikit-learn checks an estimator is known to fail, each with its reason.

scikit-learn (>= 1.6) takes this mapping from the caller: ``check_estimator(est,
expected_failed_checks=...)`` and ``parametrize_with_checks(...,
expected_failed_checks=...)``; estimators have no tag for it.
"""

from __future__ import annotations

from ._kernel_kmeans import KernelKMeans
from ._minibatch_kernel import MiniBatchKernelKMeans
from ._minibatch_kmeans import MiniBatchKMeans

__all__ = ["expected_failed_checks"]

_RANDOM_BATCHES = (
    "sample_weight is not equivalent to repeating samples: batches are drawn at "
    "random with probability proportional to the weights, so weights and repeated "
    "rows give the same distribution of batches, not the same batches "
    "(scikit-learn declares the same failure for its MiniBatchKMeans)"
)
_RANDOM_SEEDING = (
    "sample_weight is not equivalent to repeating samples: k-means++ draws its "
    "initial centers at random with probabilities proportional to the weights, so "
    "weights and repeated rows (which the check also shuffles) give the same "
    "distribution of initial centers, not the same draws; with a fixed init array "
    "the two fits agree (scikit-learn declares the same failure for its KMeans)"
)

_BY_NAME = (
    "a DataFrame with the fitted columns in another order is matched by name and "
    "reordered, not refused (scikit-learn refuses it); missing and unseen names are "
    "refused with scikit-learn's messages and names on one side only warn as in "
    "scikit-learn (tests/test_column_identity.py)"
)

_REASONS = {
    KernelKMeans: _RANDOM_SEEDING,
    MiniBatchKernelKMeans: _RANDOM_BATCHES,
    MiniBatchKMeans: _RANDOM_BATCHES,
}


def expected_failed_checks(estimator):
    """The scikit-learn checks that ``estimator`` fails by design, with the reason.

    Pass it to scikit-learn's conformance checks::

        from sklearn.utils.estimator_checks import check_estimator
        from mbkkm.cluster import expected_failed_checks

        check_estimator(est, expected_failed_checks=expected_failed_checks(est))

    or, in a test suite, ``parametrize_with_checks([est],
    expected_failed_checks=expected_failed_checks)``. Every other check passes.

    Parameters
    ----------
    estimator : MiniBatchKernelKMeans, KernelKMeans or MiniBatchKMeans
        An instance (its parameters matter: a kernel without sparse input does not
        run the sparse check).

    Returns
    -------
    checks : dict of str to str
        Check name -> why it cannot hold. Columns are matched by name (a
        DataFrame's columns may come in any order). The two
        ``check_sample_weight_equivalence_on_*_data`` checks compare a fit with
        integer weights to a fit on the rows repeated that many times (and shuffled),
        with the same seed. The estimators draw at random with probabilities
        proportional to the weights (mini-batches; k-means++ seeding), which gives
        the same distribution as the repeated rows but not the same draws.
        :class:`KernelKMeans` with a fixed ``init`` array gives the same model for
        weights and repetitions (tested).

    Examples
    --------
    >>> from mbkkm import KernelKMeans
    >>> from mbkkm.cluster import expected_failed_checks
    >>> sorted(expected_failed_checks(KernelKMeans()))  # doctest: +NORMALIZE_WHITESPACE
    ['check_dataframe_column_names_consistency',
     'check_sample_weight_equivalence_on_dense_data',
     'check_sample_weight_equivalence_on_sparse_data']
    """
    # The reason of the estimator's class or of the nearest of its bases.
    reason = next((_REASONS[cls] for cls in type(estimator).__mro__ if cls in _REASONS), None)
    if reason is None:
        raise TypeError(
            "expected_failed_checks: expected a MiniBatchKernelKMeans, KernelKMeans or "
            f"MiniBatchKMeans instance, got {type(estimator).__name__}"
        )
    checks = {
        "check_sample_weight_equivalence_on_dense_data": reason,
        "check_dataframe_column_names_consistency": _BY_NAME,
    }
    if estimator.__sklearn_tags__().input_tags.sparse:
        checks["check_sample_weight_equivalence_on_sparse_data"] = reason
    return checks

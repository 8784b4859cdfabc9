"""Pure math of mini-batch kernel k-means: no estimator code, no input checks.

Functions here take ready arrays and resolved kernels: the estimators validate
once at the boundary (``mbkkm.cluster``) and the core never checks again.
"""

from ._init import BatchPlan, draw_batch_plan, kernel_kmeans_plusplus, random_init
from ._rates import LEARNING_RATES, batch_rates
from ._state import StepConfig, WindowState, init_state, labelling_state
from ._windows import assign, minibatch_step

__all__ = [
    "LEARNING_RATES",
    "BatchPlan",
    "StepConfig",
    "WindowState",
    "assign",
    "batch_rates",
    "draw_batch_plan",
    "init_state",
    "kernel_kmeans_plusplus",
    "labelling_state",
    "minibatch_step",
    "random_init",
]

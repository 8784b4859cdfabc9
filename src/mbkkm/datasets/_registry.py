"""The registry of the paper's datasets.

One :class:`DatasetSpec` per dataset used in the experiments of "Mini-batch
kernel k-means" (Jourdan & Schwartzman): where to get it (OpenML name and
version), its size, the preprocessing the authors applied and the kernel
parameters they used. Experiment presets read these numbers from
:data:`DATASETS` rather than repeating them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

#: Preprocessing steps :func:`mbkkm.datasets.load_dataset` knows, with a one-line description.
PREPROCESSING: dict[str, str] = {
    "standardize": "standardised per feature (zero mean, unit variance; constant features centred)",
    "divide_255": "divided by 255 (pixel intensities to [0, 1])",
    "none": "left raw",
}


@dataclass(frozen=True)
class DatasetSpec:
    """Description of one of the paper's datasets.

    Attributes
    ----------
    name : str
        Registry name, also the stem of the data file (``<name>.npz``).
    openml_name : str
        Name of the dataset on OpenML.
    openml_version : int
        Version of the dataset on OpenML.
    n_samples : int
        Number of rows of the full dataset.
    n_features : int
        Number of features.
    n_classes : int
        Number of ground-truth classes.
    preprocessing : {"standardize", "divide_255", "none"}
        The preprocessing the paper's authors applied (see :data:`PREPROCESSING`).
    sigma : float
        The paper's Gaussian kernel width for this dataset. The kernel is
        ``exp(-||x - y||^2 / kappa)``; the paper does not state how ``kappa``
        follows from ``sigma``; ``kappa = 2 sigma^2`` is the usual reading
        (see :attr:`rbf_gamma`).
    knn_neighbors : int
        Number of neighbours of the paper's k-nearest-neighbour kernel.
    heat_neighbors : int
        Number of neighbours of the graph of the paper's heat kernel.
    x_dtype : str
        The dtype the features are stored with (``"uint8"`` for MNIST pixels,
        ``"float32"`` otherwise).
    title : str
        Human-readable name of the source dataset.
    source : str
        Where the data comes from originally.
    offline_note : str
        Empty, or a note shown when the file is missing (e.g. that no offline
        copy is shipped beside the project).
    """

    name: str
    openml_name: str
    openml_version: int
    n_samples: int
    n_features: int
    n_classes: int
    preprocessing: str
    sigma: float
    knn_neighbors: int
    heat_neighbors: int
    x_dtype: str = "float32"
    title: str = ""
    source: str = ""
    offline_note: str = ""

    def __post_init__(self) -> None:
        if self.preprocessing not in PREPROCESSING:
            raise ValueError(
                f"preprocessing must be one of {sorted(PREPROCESSING)}, "
                f"got {self.preprocessing!r} for dataset {self.name!r}."
            )

    @property
    def filename(self) -> str:
        """File name of the dataset in a data folder: ``<name>.npz``."""
        return f"{self.name}.npz"

    @property
    def rbf_gamma(self) -> float:
        """``1 / (2 sigma^2)``: the paper's sigma under the usual reading ``kappa = 2 sigma^2``."""
        return 1.0 / (2.0 * self.sigma**2)

    @property
    def shape(self) -> tuple[int, int]:
        """``(n_samples, n_features)``."""
        return (self.n_samples, self.n_features)


_HAR_NOTE = (
    "HAR is not available offline: mbkkm ships no copy. Load it once with network "
    "access (OpenML 'har', version 1, kept in the cache) or place a converted "
    "har.npz in a data folder."
)

#: The paper's numbers of each dataset (in the order of the paper's tables): name,
#: OpenML name and version, n_samples, n_features, n_classes, preprocessing, sigma,
#: knn_neighbors and heat_neighbors.
_NUMBERS = (
    ("pendigits", "pendigits", 1, 10992, 16, 10, "standardize", math.sqrt(5.0), 1000, 500),
    ("har", "har", 1, 10299, 561, 6, "none", 4.25, 2000, 500),
    ("mnist", "mnist_784", 1, 70000, 784, 10, "divide_255", 5.8301, 2000, 200),
    ("letter", "letter", 1, 20000, 16, 26, "standardize", 3.0, 1000, 500),
)
#: The other fields of each dataset.
_MORE: dict[str, dict[str, Any]] = {
    "pendigits": dict(
        title="Pen-Based Recognition of Handwritten Digits",
        source="UCI Machine Learning Repository (Alpaydin, Alimoglu)",
    ),
    "har": dict(
        title="Human Activity Recognition Using Smartphones",
        source="UCI Machine Learning Repository (Anguita et al.)",
        offline_note=_HAR_NOTE,
    ),
    "mnist": dict(
        x_dtype="uint8", title="MNIST handwritten digits", source="LeCun, Cortes, Burges"
    ),
    "letter": dict(title="Letter Recognition", source="UCI Machine Learning Repository (Slate)"),
}

#: The paper's datasets, by name (in the order of the paper's tables).
DATASETS: dict[str, DatasetSpec] = {row[0]: DatasetSpec(*row, **_MORE[row[0]]) for row in _NUMBERS}


def dataset_names() -> list[str]:
    """Names of the registered datasets, in registry order.

    Returns
    -------
    names : list of str
    """
    return list(DATASETS)


def get_spec(name: str) -> DatasetSpec:
    """The :class:`DatasetSpec` of a registered dataset.

    Parameters
    ----------
    name : str
        A name from :func:`dataset_names` (case-insensitive).

    Returns
    -------
    spec : DatasetSpec

    Raises
    ------
    TypeError
        If ``name`` is not a string.
    ValueError
        If ``name`` is not a registered dataset; the message lists the known names.
    """
    if not isinstance(name, str):
        raise TypeError(
            f"name must be a str (one of {dataset_names()}), got {type(name).__name__}."
        )
    key = name.strip().lower()
    if key not in DATASETS:
        raise ValueError(f"Unknown dataset {name!r}; known datasets: {', '.join(DATASETS)}.")
    return DATASETS[key]

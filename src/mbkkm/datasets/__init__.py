"""Datasets: the paper's four datasets and synthetic sets for demos and tests.

The registry :data:`DATASETS` describes pendigits, har, mnist and letter (sizes,
the paper's preprocessing, Gaussian ``sigma``, k-NN and heat-kernel neighbours).
:func:`load_dataset` reads ``<name>.npz`` from, in order, ``data_home``, the
folder(s) of the environment variable ``MBKKM_DATA``, and the cache folder
(``$XDG_CACHE_HOME/mbkkm`` or ``~/.cache/mbkkm``), and fetches a missing dataset
from OpenML into the cache folder when ``download=True``.
:func:`list_datasets` and :func:`dataset_info` say which are available locally.

Synthetic generators: :func:`make_circles`, :func:`make_moons`,
:func:`make_blobs`, :func:`make_shells` (concentric shells in d dimensions,
chunked, for up to tens of millions of points) and :func:`make_topic_corpus`
(a sparse TF-IDF document-term matrix of documents on topics, chunked).
"""

from ._loaders import (
    ENV_VAR,
    DatasetFormatError,
    DatasetInfo,
    DatasetNotFoundError,
    dataset_info,
    find_dataset_file,
    get_cache_dir,
    get_data_dirs,
    list_datasets,
    load_dataset,
    preprocess_features,
    read_dataset_file,
    write_dataset_file,
)
from ._registry import DATASETS, PREPROCESSING, DatasetSpec, dataset_names, get_spec
from ._synthetic import (
    SYNTHETIC,
    make_blobs,
    make_circles,
    make_moons,
    make_shells,
    make_topic_corpus,
)

__all__ = [
    "DATASETS",
    "ENV_VAR",
    "PREPROCESSING",
    "SYNTHETIC",
    "DatasetFormatError",
    "DatasetInfo",
    "DatasetNotFoundError",
    "DatasetSpec",
    "dataset_info",
    "dataset_names",
    "find_dataset_file",
    "get_cache_dir",
    "get_data_dirs",
    "get_spec",
    "list_datasets",
    "load_dataset",
    "make_blobs",
    "make_circles",
    "make_moons",
    "make_shells",
    "make_topic_corpus",
    "preprocess_features",
    "read_dataset_file",
    "write_dataset_file",
]

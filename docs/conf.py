"""Sphinx configuration of the mbkkm documentation (``make docs``).

The site is built from this folder: the reStructuredText pages here, the
Markdown pages beside them (``dask.md``, ``reliability.md``, ``results/README.md``,
read by myst-parser), the API reference generated from the docstrings
(autosummary + numpydoc), the command line reference (sphinx-click) and the
gallery of ``../examples`` (sphinx-gallery). The site works offline: MathJax is
served from the build (``_sphinxext/offline_assets.py``), and a page that loads a
script or stylesheet from another host fails the build.

Gallery execution: by default only ``examples/plot_*.py`` run (a few seconds
each, what CI can afford); the other examples are shown with their code but not
executed. ``MBKKM_GALLERY=all`` runs ``mnist_at_scale.py`` too (it needs
``../shared/datasets/mnist.npz`` or ``$MBKKM_DATA``), and ``gpu_torch.py`` when
PyTorch sees a CUDA device. ``dask_remote.py`` is a command-line script and never runs.
"""

from __future__ import annotations

import os
import sys
import warnings
from pathlib import Path

import mbkkm

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "_sphinxext"))

project = "mbkkm"
author = "mbkkm developers"
copyright = "2024-2026, mbkkm developers"
release = mbkkm.__version__
version = ".".join(release.split(".")[:2])

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "offline_assets",  # MathJax served from the build (_sphinxext/offline_assets.py)
    "sphinx.ext.viewcode",
    "numpydoc",
    "myst_parser",
    "sphinx_click",
    "sphinx_gallery.gen_gallery",
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = [
    "_build",
    "_templates",
    "_sphinxext",
    "auto_examples/*.ipynb",
    "auto_examples/*.py",
    "auto_examples/*.zip",
    "results/grids",
    "sg_execution_times.rst",
]
templates_path = ["_templates"]

# -- API reference -----------------------------------------------------------
autosummary_generate = True
autodoc_default_options = {"inherited-members": False}
autodoc_typehints = "none"
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_attributes_as_param_list = True
numpydoc_validation_checks: set[str] = set()

# -- Markdown pages ------------------------------------------------------------
myst_enable_extensions = ["dollarmath", "amsmath", "deflist"]
myst_heading_anchors = 3

# -- HTML ----------------------------------------------------------------------
html_theme = "pydata_sphinx_theme"
html_title = f"mbkkm {release}"
html_static_path: list[str] = []
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
    "header_links_before_dropdown": 7,
    "icon_links": [
        {
            "name": "GitHub",
            "url": "https://github.com/mbkkm/mbkkm",
            "icon": "fa-brands fa-github",
        }
    ],
}
html_context = {"default_mode": "light"}
html_show_sourcelink = False

# -- Gallery -------------------------------------------------------------------
_gallery = os.environ.get("MBKKM_GALLERY", "ci")
if _gallery not in ("ci", "all"):
    raise ValueError(f"MBKKM_GALLERY={_gallery!r}: expected 'ci' (the default) or 'all'")
_executed = ["plot_"]
if _gallery == "all":
    _executed.append("mnist_")
    from mbkkm.backends import cuda_available

    if cuda_available():
        _executed.append("gpu_")

sphinx_gallery_conf = {
    "examples_dirs": str(HERE.parent / "examples"),
    "gallery_dirs": "auto_examples",
    "filename_pattern": "/(" + "|".join(_executed) + ")",
    "within_subsection_order": "gallery_order.GalleryOrder",
    # "Examples using X" on the API pages (the minigallery directive of the templates)
    "backreferences_dir": "api/generated/backreferences",
    "doc_module": ("mbkkm",),
    "reference_url": {"mbkkm": None},
    "download_all_examples": False,
    "remove_config_comments": True,
    "abort_on_example_error": True,
    "only_warn_on_example_error": False,
    "plot_gallery": "True",
    "min_reported_time": 1,
    "matplotlib_animations": False,
    "show_memory": False,
    "reset_modules": ("matplotlib",),
    # no sg_execution_times page: it loads its table scripts from CDNs
    "write_computation_times": False,
}

# Matplotlib without a display; the gallery scripts' own warnings are theirs.
os.environ.setdefault("MPLBACKEND", "agg")
warnings.filterwarnings("ignore", message="Matplotlib is currently using agg")

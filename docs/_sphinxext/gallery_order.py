"""Order of the gallery examples: from first steps to scale, then the paper."""

ORDER = [
    "plot_rings_and_moons.py",
    "plot_digits.py",
    "plot_choosing_gamma.py",
    "mnist_at_scale.py",
    "plot_dask.py",
    "dask_remote.py",
    "gpu_torch.py",
    "plot_paper_figures.py",
]


class GalleryOrder:
    """Sort key of sphinx-gallery's ``within_subsection_order``: the list above,
    unknown files last by name."""

    def __init__(self, src_dir):
        self.src_dir = src_dir

    def __call__(self, filename):
        if filename in ORDER:
            return f"{ORDER.index(filename):03d}"
        return f"999{filename}"

    def __repr__(self):
        return "GalleryOrder"

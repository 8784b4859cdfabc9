"""What a new user meets first (issue 40): the README's examples as written, the
installation page, warnings that point at the user's line, the width choice in
one line, and the device messages."""

from __future__ import annotations

import doctest
import re
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from mbkkm import KernelKMeans, MiniBatchKernelKMeans, MiniBatchKMeans
from mbkkm.cluster import EmptyClusterWarning, GraphSplitWarning, select_gamma

ROOT = Path(__file__).resolve().parents[1]
README_BLOCKS = re.findall(
    r"```python\n(.*?)```", (ROOT / "README.md").read_text("utf-8"), flags=re.S
)


# ------------------------------------------------------------------ README
def test_every_python_block_of_the_readme_is_a_doctest():
    # pytest's --doctest-glob=README.md runs the lines that start with >>>: a block
    # written as plain code would not run at all
    assert len(README_BLOCKS) >= 2
    for block in README_BLOCKS:
        assert block.lstrip().startswith(">>> "), block[:200]


@pytest.mark.parametrize("index", range(len(README_BLOCKS)))
def test_readme_blocks_run_as_written_without_warnings(index):
    """Each block alone (its own imports, its own data), every warning an error."""
    test = doctest.DocTestParser().get_doctest(
        README_BLOCKS[index], {}, f"README[{index}]", "README.md", 0
    )
    out = []
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = runner.run(test, out=out.append)
    assert result.attempted > 0
    assert result.failed == 0, "".join(out)


# ------------------------------------------------------------------ installation
def test_installation_page_gives_commands_that_work_today():
    text = (ROOT / "docs" / "install.rst").read_text("utf-8")
    blocks = re.findall(r"\.\. code-block:: console\n\n((?:   .*\n|\n)+)", text)
    first = blocks[0]
    assert "pip install -e ." in first and "git clone" in first, first
    # an index command only where it says it needs the package to be published
    commands = [line for block in blocks for line in block.splitlines()]
    index = [line for line in commands if re.search(r"pip install \"?mbkkm\b", line)]
    assert index and all("once published" in line for line in index), index
    make = (ROOT / "Makefile").read_text("utf-8")
    assert re.search(r"^dist:", make, re.M) and "make dist" in text
    assert "pip install dist/mbkkm-*.whl" in text


# ------------------------------------------------------------------ stacklevel
def _blobs(seed=0):
    return np.random.default_rng(seed).normal(size=(60, 2))


def _three_far_blobs():
    rng = np.random.default_rng(0)
    return np.concatenate([rng.normal(size=(40, 2)) + c for c in ([0, 0], [50, 0], [0, 50])])


@pytest.mark.parametrize(
    ("category", "fit"),
    [
        (
            EmptyClusterWarning,
            lambda: MiniBatchKernelKMeans(
                n_clusters=4, gamma=1.0, random_state=0, max_iter=5, batch_size=16
            ).fit(np.repeat([[0.0, 0.0], [1.0, 1.0]], 20, axis=0)),
        ),
        (
            EmptyClusterWarning,
            lambda: KernelKMeans(n_clusters=4, gamma=1.0, random_state=0).fit(
                np.repeat([[0.0, 0.0], [1.0, 1.0]], 20, axis=0)
            ),
        ),
        (
            RuntimeWarning,
            lambda: KernelKMeans(n_clusters=2, gamma=1.0, init=_blobs()[:2], n_init=3).fit(
                _blobs()
            ),
        ),
        (
            RuntimeWarning,
            lambda: MiniBatchKMeans(n_clusters=2, init=_blobs()[:2], n_init=3, max_iter=3).fit(
                _blobs()
            ),
        ),
        (
            GraphSplitWarning,
            lambda: KernelKMeans(
                n_clusters=2, kernel="heat", kernel_params={"n_neighbors": 5}, random_state=0
            ).fit(_three_far_blobs()),
        ),
        (
            GraphSplitWarning,
            lambda: MiniBatchKernelKMeans(
                n_clusters=2,
                kernel="heat",
                kernel_params={"n_neighbors": 5},
                max_iter=5,
                random_state=0,
            ).fit(_three_far_blobs()),
        ),
    ],
    ids=[
        "empty-minibatch",
        "empty-full",
        "n_init-full",
        "n_init-minibatch-kmeans",
        "graph-split-full",
        "graph-split-minibatch",
    ],
)
def test_warnings_point_at_the_users_line(category, fit):
    with pytest.warns(category) as record:
        fit()
    ours = [w for w in record if issubclass(w.category, category)]
    assert ours and all(w.filename == __file__ for w in ours), [
        (w.filename, w.lineno) for w in ours
    ]


def test_a_warning_points_at_the_users_line():
    X = _blobs()
    est = MiniBatchKernelKMeans(2, gamma=1.0, init=X[:2], n_init=3, batch_size=8, max_iter=2)
    with pytest.warns(RuntimeWarning, match="Explicit initial center position") as record:
        est.fit(X)
    assert record[0].filename == __file__


# ------------------------------------------------------------------ width in one line
def test_the_width_choice_in_one_line_says_when_all_candidates_tie():
    rng = np.random.default_rng(0)
    far = np.concatenate([rng.normal(c, 0.3, size=(100, 2)) for c in (0.0, 30.0, 60.0)])
    sel = select_gamma(far, n_clusters=3, random_state=0)
    assert np.ptp(sel.scores) == 0  # well-separated: every width cuts them alike
    line = sel.summary()
    assert "\n" not in line
    assert line.startswith(f"gamma=auto: all {sel.candidates.size} widths tried tie")
    assert "no width separates the clusters better than another" in line
    assert f"gamma = {sel.gamma:.4g}" in line


def test_the_width_choice_in_one_line_names_the_chosen_width():
    from sklearn.datasets import make_circles

    X, _ = make_circles(n_samples=1000, factor=0.3, noise=0.05, random_state=0)
    sel = select_gamma(X, n_clusters=2, random_state=0)
    line = sel.summary()
    assert "\n" not in line and "tie (" not in line
    assert line.startswith(f"gamma=auto chose gamma = {sel.gamma:.4g}, ")
    assert f"{sel.gamma / sel.base_gamma:.3g} x the mean-distance width" in line


# ------------------------------------------------------------------ devices
@pytest.mark.parametrize("device", ["torch", "torch-cpu", "cuda"])
def test_a_torch_device_without_torch_says_so(device):
    hide_torch = (
        "import sys\n"
        "class _NoTorch:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.partition('.')[0] == 'torch':\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
        "sys.meta_path.insert(0, _NoTorch())\n"
        "import numpy as np\n"
        "from mbkkm import MiniBatchKernelKMeans\n"
        "try:\n"
        f"    MiniBatchKernelKMeans(n_clusters=2, gamma=1.0, device={device!r}).fit("
        "np.zeros((10, 2)))\n"
        "except ValueError as exc:\n"
        "    print(exc)\n"
    )
    env = {"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"}
    r = subprocess.run(
        [sys.executable, "-c", hide_torch], capture_output=True, text=True, env=env, timeout=300
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"device={device!r} needs PyTorch, which is not installed"), r.stdout
    assert "pip install -e '.[torch]'" in r.stdout and "device=None or 'cpu'" in r.stdout

"""The kernel registry: one KernelSpec per kernel, and everything that lists kernels
derives from it."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mbkkm.cluster import KernelKMeans, MiniBatchKernelKMeans
from mbkkm.cluster._params import KERNEL_CONSTRAINTS
from mbkkm.kernels import (
    ALIASES,
    GRAPH_KERNELS,
    KERNELS,
    KernelSpec,
    Tiles,
    _kernel,
    check_backend_kernel,
    check_torch_kernel,
    describe_kernels,
    get_spec,
    graph_kernel_matrix,
    kernel_names,
    register,
    resolve_kernel,
)

ROOT = Path(__file__).resolve().parents[2]
PAIRWISE = kernel_names(include_aliases=False, transductive=False)


@pytest.fixture
def scratch_registry():
    """The registry, restored after the test (for tests that register kernels)."""
    kernels, aliases = dict(KERNELS), dict(ALIASES)
    yield _kernel
    KERNELS.clear()
    KERNELS.update(kernels)
    ALIASES.clear()
    ALIASES.update(aliases)


def test_every_spec_is_pairwise_or_transductive():
    for name, spec in KERNELS.items():
        assert spec.name == name
        if spec.transductive:
            assert spec.builder is not None and spec.tiles == {}
        else:
            assert spec.builder is None and "numpy" in spec.tiles
            impl = spec.implementation("numpy")
            assert callable(impl.tile) and callable(impl.diag)
            assert spec.func is impl.tile and spec.diag is impl.diag


def test_names_and_aliases():
    assert set(kernel_names(include_aliases=False)) == set(KERNELS)
    assert set(kernel_names()) == set(KERNELS) | set(ALIASES)
    assert set(kernel_names(include_aliases=False, transductive=True)) == set(GRAPH_KERNELS)
    for alias, name in ALIASES.items():
        assert get_spec(alias) is KERNELS[name]
        assert alias in KERNELS[name].aliases
    assert get_spec("nope") is None and get_spec(len) is None
    assert "knn" in GRAPH_KERNELS and "rbf" not in GRAPH_KERNELS and len not in GRAPH_KERNELS


def test_torch_kernels_are_those_with_torch_tiles():
    torch_names = kernel_names(include_aliases=False, backend="torch")
    assert torch_names == sorted(n for n, s in KERNELS.items() if "torch" in s.tiles)
    assert "chi2" not in torch_names and "rbf" in torch_names


@pytest.mark.parametrize("name", [n for n in kernel_names() if "torch" not in get_spec(n).tiles])
def test_missing_backend_error_comes_from_the_registry(name):
    spec = get_spec(name)
    with pytest.raises(ValueError, match=f"kernel={spec.name!r}") as info:
        check_torch_kernel(name)
    with pytest.raises(ValueError) as info2:
        spec.implementation("torch")
    assert str(info.value) == str(info2.value)
    if not spec.transductive:
        assert "not available on the torch backend" in str(info.value)
        for other in kernel_names(include_aliases=False, backend="torch"):
            assert repr(other) in str(info.value)
        with pytest.raises(ValueError, match="not available on the torch backend"):
            check_torch_kernel(resolve_kernel(name, X=np.ones((3, 2))))


def test_torch_check_accepts_supported_kernels_and_callables():
    for name in kernel_names(backend="torch"):
        check_torch_kernel(name)
    check_torch_kernel(lambda X, Y: X @ Y.T)
    check_torch_kernel(resolve_kernel(lambda X, Y: X @ Y.T))
    check_torch_kernel("not-a-kernel")  # left to the parameter validation
    check_backend_kernel("rbf", "numpy")


def test_prepare_hook():
    X = np.random.RandomState(0).rand(7, 3)
    for name in PAIRWISE:
        kernel = resolve_kernel(name, X=X)
        cache = kernel.prepare(X)
        prepare = KERNELS[name].implementation("numpy").prepare
        assert (cache != {}) == (prepare is not None)
        np.testing.assert_allclose(kernel(X, X, **cache), kernel(X, X), rtol=1e-12)
    assert resolve_kernel("rbf", gamma=1.0).prepare(np.ones((2, 2), dtype=int)) == {}


def test_prepare_right_gives_the_same_tiles_exactly():
    rng = np.random.RandomState(0)
    X, Y = rng.rand(300, 5).astype(np.float32), rng.rand(2000, 5).astype(np.float32)
    for name in PAIRWISE:
        kernel = resolve_kernel(name, X=Y)
        cache = kernel.prepare_right(Y)
        assert (cache != {}) == (name == "rbf")
        # Exact: the cache holds the very array each call computes for itself, so both
        # calls run the same GEMM on the same shapes in the same row parts (one
        # process, one thread count), which is the point of the reuse.
        np.testing.assert_array_equal(kernel(X, Y, **cache), kernel(X, Y))
        # the threaded row parts (a large tile) reuse it too
        np.testing.assert_array_equal(kernel(Y, Y, **cache), kernel(Y, Y))
    assert resolve_kernel("rbf", gamma=1.0).prepare_right(np.ones((2, 2), dtype=int)) == {}


def test_graph_kernel_parameters_come_from_the_builder():
    for name in GRAPH_KERNELS:
        spec = KERNELS[name]
        assert spec.params[0] == "n_neighbors"
    # the k-NN kernel (the paper's) needs its neighbours; the heat kernel has defaults
    assert KERNELS["knn"].required_params == ("n_neighbors",)
    assert KERNELS["heat"].required_params == ()


def test_register_a_kernel(scratch_registry):
    spec = KernelSpec(
        "mylinear",
        (),
        None,
        aliases=("mine",),
        formula="<x, y>",
        tiles={"numpy": Tiles("._pairwise", "linear", "diag_linear")},
    )
    scratch_registry.register(spec)
    assert "mylinear" in scratch_registry.kernel_names(backend="numpy")
    assert "mine" in scratch_registry.kernel_names()
    X = np.random.RandomState(1).randn(5, 3)
    kernel = resolve_kernel("mine", X=X)
    assert kernel.name == "mylinear"
    np.testing.assert_allclose(kernel(X, X), X @ X.T)
    with pytest.raises(ValueError, match="not available on the torch backend"):
        check_torch_kernel("mine")


def test_register_a_graph_kernel(scratch_registry):
    def identity_kernel(X, n_neighbors, scale=1.0):
        return scale * np.eye(len(X))

    scratch_registry.register(
        KernelSpec("ident", transductive=True, builder=identity_kernel, formula="I")
    )
    assert "ident" in GRAPH_KERNELS
    assert scratch_registry.get_spec("ident").params == ("n_neighbors", "scale")
    np.testing.assert_array_equal(
        graph_kernel_matrix("ident", np.ones((3, 1)), n_neighbors=1, scale=2.0), 2 * np.eye(3)
    )
    with pytest.raises(ValueError, match="needs the parameter 'n_neighbors'"):
        graph_kernel_matrix("ident", np.ones((3, 1)))


def test_register_refuses_taken_names(scratch_registry):
    tiles = {"numpy": Tiles("._pairwise", "linear", "diag_linear")}
    with pytest.raises(ValueError, match="'gaussian' is already registered for 'rbf'"):
        register(KernelSpec("other", tiles=tiles, aliases=("gaussian",)))
    with pytest.raises(ValueError, match="'linear' is already registered for 'linear'"):
        register(KernelSpec("polynomial", tiles=tiles, aliases=("linear",)))


def test_spec_checks():
    tiles = {"numpy": Tiles("._pairwise", "linear", "diag_linear")}
    with pytest.raises(ValueError, match="default_gamma"):
        KernelSpec("x", default_gamma="median", tiles=tiles)
    with pytest.raises(ValueError, match="unknown parameters"):
        KernelSpec("x", ("bandwidth",), tiles=tiles)
    with pytest.raises(ValueError, match="pairwise kernel has numpy tiles"):
        KernelSpec("x", tiles={"torch": tiles["numpy"]})
    with pytest.raises(ValueError, match="transductive kernel has a builder"):
        KernelSpec("x", transductive=True)


# --- everything that lists kernels ----------------------------------------------------


def test_estimator_constraints_come_from_the_registry():
    allowed = KERNEL_CONSTRAINTS["kernel"][0].options
    assert allowed == set(kernel_names()) | {"precomputed"}


def test_cli_choices_come_from_the_registry():
    pytest.importorskip("click")
    from mbkkm.cli import _KernelChoice

    assert list(_KernelChoice().choices) == kernel_names(transductive=False)


def _param_doc(doc, param):
    m = re.search(rf"^    {param} : .*?\n(.*?)(?=^    \w+ : |\Z)", doc, re.S | re.M)
    return m.group(1)


@pytest.mark.parametrize("estimator", [MiniBatchKernelKMeans, KernelKMeans])
def test_estimator_docs_name_every_kernel(estimator):
    text = _param_doc(estimator.__doc__, "kernel")
    for name in kernel_names():
        assert f'"{name}"' in text, f"{estimator.__name__}: kernel {name!r} is not documented"


def test_readme_names_every_kernel():
    row = next(
        line
        for line in (ROOT / "README.md").read_text().splitlines()
        if line.startswith("| `kernel` |")
    )
    for name in kernel_names(include_aliases=False):
        assert f"`{name}`" in row, f"README: kernel {name!r} is not listed"


def test_package_docstring_is_generated_from_the_registry():
    import mbkkm.kernels

    assert describe_kernels() in mbkkm.kernels.__doc__
    for name in KERNELS:
        assert f"``{name}``" in describe_kernels()


def test_registry_does_not_import_torch():
    code = (
        "import sys, numpy as np\n"
        "from mbkkm.kernels import KERNELS, check_torch_kernel, kernel_names, resolve_kernel\n"
        "X = np.random.RandomState(0).rand(5, 2)\n"
        "for name in kernel_names(transductive=False):\n"
        "    resolve_kernel(name, X=X)(X, X)\n"
        "    check_torch_kernel(name) if name in kernel_names(backend='torch') else None\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr


def test_device_docs_name_the_torch_kernels():
    text = _param_doc(MiniBatchKernelKMeans.__doc__, "device")
    available, _, refused = text.partition("are available")
    for name in kernel_names(include_aliases=False, backend="torch"):
        assert re.search(rf"\b{name}\b", available), f"torch kernel {name!r} not documented"
    for name in kernel_names(include_aliases=False, transductive=False):
        if name not in kernel_names(backend="torch"):
            assert re.search(rf"\b{name}\b", refused), f"{name!r} not documented as numpy-only"

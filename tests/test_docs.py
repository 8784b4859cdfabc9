"""The documentation tells one story: examples use the defaults, versions agree."""

import io
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# The examples a user copies first. The gallery examples about widths
# (plot_choosing_gamma.py) and the paper's own settings (plot_paper_figures.py)
# set gamma on purpose; every other example uses the default width.
FIRST_EXAMPLES = [
    "README.md",
    "docs/index.rst",
    "docs/quickstart.rst",
    "src/mbkkm/demo.py",
    "src/mbkkm/cluster/_minibatch_kernel.py",
    "src/mbkkm/cluster/_kernel_kmeans.py",
    *(
        p.relative_to(ROOT).as_posix()
        for p in sorted((ROOT / "examples").glob("*.py"))
        if p.name not in ("plot_choosing_gamma.py", "plot_paper_figures.py")
    ),
]
FIXED_WIDTH = re.compile(r"gamma\s*=\s*(?:[0-9.]+\b|gamma\b)")


@pytest.mark.parametrize("path", FIRST_EXAMPLES)
def test_examples_use_the_default_width(path):
    text = (ROOT / path).read_text(encoding="utf-8")
    lines = text.splitlines()
    if path.startswith("src/mbkkm/cluster/"):  # the estimators: their Examples only
        lines = [line for line in lines if line.lstrip().startswith((">>>", "..."))]
    elif path.endswith(".py"):  # code, not the comments that explain a width
        lines = [line for line in lines if not line.lstrip().startswith("#")]
    text = "\n".join(lines)
    assert not FIXED_WIDTH.findall(text), f"{path} fixes the kernel width by hand"


# ------------------------------------------------------------- math offline
def _build_site(tmp_path, conf="", page=""):
    """A two-line Sphinx site with the docs' offline_assets extension, built."""
    application = pytest.importorskip("sphinx.application")
    pytest.importorskip("sphinx.ext.mathjax")
    src, out = tmp_path / "src", tmp_path / "html"
    src.mkdir()
    (src / "conf.py").write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(ROOT / 'docs' / '_sphinxext')!r})\n"
        "extensions = ['offline_assets', 'myst_parser']\n"
        "myst_enable_extensions = ['dollarmath', 'amsmath']\n" + conf
    )
    (src / "index.rst").write_text(
        "Title\n=====\n\nInline :math:`\\|x\\|^2` and\n\n.. math::\n\n   \\sum_i x_i\n\n"
        ".. toctree::\n\n   page\n"
    )
    (src / "page.md").write_text("# Page\n\n$a + b$ and\n\n$$\\frac{1}{n}$$\n" + page)
    warnings = io.StringIO()
    app = application.Sphinx(
        str(src),
        str(src),
        str(out),
        str(out / ".doctrees"),
        "html",
        status=None,
        warning=warnings,
        freshenv=True,
    )
    app.build()
    return out, warnings.getvalue()


def _scripts(html):
    return re.findall(r'<script[^>]*\bsrc="([^"]+)"', html)


def test_math_is_rendered_by_mathjax_from_the_build(tmp_path):
    pytest.importorskip("myst_parser")
    out, warnings = _build_site(tmp_path)
    assert warnings == ""
    from offline_assets import remote_assets

    for name in ("index.html", "page.html"):
        html = (out / name).read_text(encoding="utf-8")
        assert "_static/mathjax/tex-chtml.js" in _scripts(html)
        assert remote_assets(html) == []
        assert r"\(" in html or r"\[" in html  # the math MathJax will typeset
    mathjax = out / "_static" / "mathjax"
    assert (mathjax / "tex-chtml.js").stat().st_size > 500_000
    assert len(list((mathjax / "output" / "chtml" / "fonts" / "woff-v2").glob("*.woff"))) > 10
    assert (mathjax / "input" / "tex" / "extensions" / "ams.js").is_file()
    # what tex-chtml.js does not use stays out of the site
    assert not (mathjax / "tex-svg.js").exists()


def test_a_remote_script_fails_the_build(tmp_path):
    pytest.importorskip("myst_parser")
    _, warnings = _build_site(
        tmp_path,
        conf="html_js_files = ['https://cdn.example.org/x.js']\n"
        "html_css_files = ['//cdn.example.org/x.css']\n",
    )
    assert "index.html loads https://cdn.example.org/x.js from another host" in warnings
    assert "page.html loads //cdn.example.org/x.css from another host" in warnings


def test_remote_assets_reads_scripts_and_stylesheets():
    sys.path.insert(0, str(ROOT / "docs" / "_sphinxext"))
    from offline_assets import remote_assets

    html = (
        '<script src="_static/a.js"></script><script defer src="https://x.org/m.js">'
        '</script><link rel="stylesheet" href="http://x.org/s.css">'
        '<link rel="icon" href="https://x.org/i.png"><a href="https://x.org">x</a>'
    )
    assert remote_assets(html) == ["https://x.org/m.js", "http://x.org/s.css"]


# ---------------------------------------------------------- the API reference
API = ROOT / "docs" / "api"
SECTIONS = ["estimators", "kernels", "datasets", "experiments", "utilities"]


def _documented():
    """Names in the API pages: autosummary entries and ``py:data`` directives."""
    names = set()
    for page in API.glob("*.rst"):
        text = page.read_text(encoding="utf-8")
        names |= set(re.findall(r"^   ([A-Za-z_][\w.]*)$", text, flags=re.M))
        names |= set(re.findall(r"^\.\. py:data:: (\w+)$", text, flags=re.M))
    return names


def test_api_reference_is_in_sections():
    index = (API / "index.rst").read_text(encoding="utf-8")
    toctree = index.split(".. toctree::")[1]
    assert re.findall(r"^   (\w+)$", toctree, flags=re.M) == SECTIONS
    assert ":toctree:" not in index  # the index lists sections, not ~60 names


@pytest.mark.parametrize(
    "module",
    [
        "mbkkm",
        "mbkkm.cluster",
        "mbkkm.kernels",
        "mbkkm.datasets",
        "mbkkm.experiments",
        "mbkkm.backends",
    ],
)
def test_every_public_name_is_in_the_api_reference(module):
    import importlib

    mod = importlib.import_module(module)
    documented = _documented()
    missing = [
        n
        for n in mod.__all__
        if n != "__version__" and n not in documented and f"cluster.{n}" not in documented
    ]
    assert not missing, f"{module}: {missing} are public but not in docs/api/"


def _public_objects():
    import importlib
    import inspect

    for module in (
        "mbkkm",
        "mbkkm.cluster",
        "mbkkm.kernels",
        "mbkkm.datasets",
        "mbkkm.experiments",
        "mbkkm.backends",
    ):
        mod = importlib.import_module(module)
        for name in mod.__all__:
            obj = getattr(mod, name)
            if inspect.isfunction(obj) or inspect.isclass(obj):
                yield f"{module}.{name}", obj


def test_public_functions_show_their_parameters():
    import inspect

    hidden = []
    for name, obj in _public_objects():
        if not inspect.isfunction(obj):
            continue
        kinds = [p.kind for p in inspect.signature(obj).parameters.values()]
        if kinds == [inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD]:
            hidden.append(name)
    assert not hidden, f"signatures (*args, **kwargs) hide the parameters of {hidden}"
    from mbkkm.experiments import plot_results, summarize

    assert list(inspect.signature(summarize).parameters) == ["results"]
    assert list(inspect.signature(plot_results).parameters) == ["results", "out", "tau", "formats"]


def test_docstrings_link_the_docs_pages():
    # A docstring names a page of the site with :doc:, not with its path in the
    # repository, which the rendered API page would show as plain text.
    import inspect

    paths = []
    for name, obj in _public_objects():
        docs = [obj.__doc__ or ""]
        if inspect.isclass(obj):
            docs += [m.__doc__ or "" for m in vars(obj).values() if callable(m)]
        if any(re.search(r"\bdocs/[\w/.-]+\.(?:md|rst)\b", d) for d in docs):
            paths.append(name)
    assert not paths, f"docstrings cite docs/... as a path: {paths}"


# ------------------------------------------------------------------ versions
def test_versions_agree():
    # __version__ is the next release's development number (0.2.0.dev0); the
    # changelog lists the changes since the last release under that release,
    # marked unreleased, at the top, and nowhere else ("## Unreleased" sections
    # added on other branches are folded into it).
    import mbkkm

    match = re.fullmatch(r"(\d+\.\d+\.\d+)(?:\.dev\d+)?", mbkkm.__version__)
    assert match, mbkkm.__version__
    text = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    sections = re.findall(r"^## (.*)$", text, flags=re.M)
    unreleased = [s for s in sections if "unreleased" in s.lower()]
    if mbkkm.__version__ != match[1]:  # a development version
        assert sections[0] == f"[{match[1]}] - unreleased", sections
        assert unreleased == sections[:1], unreleased
    else:
        assert sections[0].startswith(f"[{match[1]}] - 2"), sections[0]  # with its date
        assert not unreleased
    numbers = [tuple(map(int, re.match(r"\[(\d+)\.(\d+)\.(\d+)\]", s).groups())) for s in sections]
    assert numbers == sorted(numbers, reverse=True) and len(set(numbers)) == len(numbers)

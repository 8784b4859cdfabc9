"""The package as a user gets it: sdist and wheel, metadata, a fresh install.

``python -m build`` makes the sdist and, from it, the wheel (so a file missing
from the sdist breaks the wheel too); ``twine check --strict`` validates the
metadata and that the README renders on a package index. The wheel is then
installed into a fresh virtual environment and the README example runs there,
which catches files missing from the package.

The fresh environment must work offline and quickly: it is created without pip
and without the project's dependencies, the wheel is installed into it with
``--no-deps`` by the outer pip (``pip --python``), and a ``.pth`` line appends
the outer environment's site-packages *after* its own. A ``.pth`` line only adds
a directory to ``sys.path``; the ``.pth`` files inside that directory (among them
the editable install of mbkkm, which points at ``src/``) are not processed, so
numpy, scipy and scikit-learn come from the outer environment and mbkkm only from
the wheel, which the test checks.
"""

from __future__ import annotations

import os
import re
import shutil
import site
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

import mbkkm

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow


def _run(cmd, **kw):
    proc = subprocess.run(cmd, capture_output=True, text=True, **kw)
    assert proc.returncode == 0, (
        f"{cmd} failed with {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    )
    return proc.stdout


@pytest.fixture(scope="module")
def dist(tmp_path_factory):
    """sdist and wheel of the working tree (hatchling leaves out what .gitignore lists)."""
    out = tmp_path_factory.mktemp("dist")
    # --no-isolation: hatchling from the dev extra, no download
    _run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(REPO)])
    wheels, sdists = sorted(out.glob("*.whl")), sorted(out.glob("*.tar.gz"))
    assert len(wheels) == 1 and len(sdists) == 1, sorted(out.iterdir())
    return wheels[0], sdists[0]


def test_twine_check(dist):
    out = _run([sys.executable, "-m", "twine", "check", "--strict", *map(str, dist)])
    assert out.count("PASSED") == 2, out


def test_wheel_contents_and_metadata(dist):
    wheel, sdist = dist
    assert wheel.name == f"mbkkm-{mbkkm.__version__}-py3-none-any.whl"
    assert sdist.name == f"mbkkm-{mbkkm.__version__}.tar.gz"
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        meta = zf.read(f"mbkkm-{mbkkm.__version__}.dist-info/METADATA").decode()
    # every module of the source tree is in the wheel, and the typing marker
    sources = {
        p.relative_to(REPO / "src").as_posix() for p in (REPO / "src" / "mbkkm").rglob("*.py")
    }
    assert sources <= names, sorted(sources - names)
    assert "mbkkm/py.typed" in names
    assert not any(n.startswith(("tests/", "docs/", "benchmarks/")) for n in names)
    # one version string: the metadata's is __version__
    assert re.search(rf"^Version: {re.escape(mbkkm.__version__)}$", meta, re.M)
    assert "Description-Content-Type: text/markdown" in meta
    assert re.search(r"^Project-URL: Documentation, ", meta, re.M)
    assert "Classifier: Typing :: Typed" in meta


def test_changelog_has_this_version():
    release = re.sub(r"\.dev\d+$", "", mbkkm.__version__)  # 0.2.0.dev0: the 0.2.0 section
    text = (REPO / "CHANGELOG.md").read_text()
    assert re.search(rf"^## \[?{re.escape(release)}\]?", text, re.M), (
        f"CHANGELOG.md has no section for {release}"
    )


def test_wheel_installs_and_runs_the_readme(dist, tmp_path):
    wheel, _ = dist
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=False, symlinks=os.name != "nt")
    py = env_dir / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    purelib = Path(
        _run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).strip()
    )
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(py),
            "install",
            "--no-deps",
            "--no-index",
            "--quiet",
            str(wheel),
        ]
    )
    # the outer environment's packages, after the fresh one's own
    outer = [sysconfig.get_paths()["purelib"], *site.getsitepackages()]
    (purelib / "_outer_env.pth").write_text("\n".join(dict.fromkeys(outer)) + "\n")

    readme = tmp_path / "README.md"
    shutil.copy(REPO / "README.md", readme)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    check = (
        "import importlib.metadata as md, importlib.resources as res, sys\n"
        "import mbkkm\n"
        f"assert mbkkm.__file__.startswith({str(purelib)!r}), mbkkm.__file__\n"
        f"assert mbkkm.__version__ == md.version('mbkkm') == {mbkkm.__version__!r}\n"
        "assert res.files('mbkkm').joinpath('py.typed').is_file()\n"
        "print(mbkkm.__file__)\n"
    )
    # -I: no current directory, PYTHONPATH or user site on sys.path
    _run([str(py), "-I", "-c", check], cwd=tmp_path, env=env)
    out = _run([str(py), "-I", "-m", "doctest", "-v", str(readme)], cwd=tmp_path, env=env)
    assert re.search(r"[1-9]\d* passed and 0 failed", out), out[-2000:]
    # the console script of the wheel
    script = env_dir / ("Scripts/mbkkm.exe" if os.name == "nt" else "bin/mbkkm")
    out = _run([str(script), "--version"], cwd=tmp_path, env=env)
    assert mbkkm.__version__ in out


def test_make_dist_installs_only_the_build_tools():
    # `make dist` builds in build's own isolated environment (hatchling only): it
    # must not install the project or an extra (the dev set is torch, Dask, Sphinx).
    make = shutil.which("make")
    if make is None:
        pytest.skip("no make")
    plan = _run([make, "-n", "-B", "dist"], cwd=REPO)
    installs = [line for line in plan.splitlines() if " install " in line]
    assert installs and all(".[" not in line and "torch" not in line for line in installs), plan
    assert re.search(r"-m build --outdir dist$", plan, re.M), plan
    assert "--no-isolation" not in plan
    assert re.search(r"-m twine check --strict dist/\*$", plan, re.M), plan

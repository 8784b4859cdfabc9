"""What the command line imports before it answers (issue 40), and its entry point
without the ``cli`` extra. Checked on ``sys.modules`` in fresh interpreters, not timed
(the times are in benchmarks/bench_startup.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("click")

SRC = Path(__file__).resolve().parents[1] / "src"
HEAVY = ("sklearn", "scipy", "pandas", "torch", "dask", "pytest", "skops", "matplotlib")
# the console script, reporting at exit which heavy packages the process imported
ENTRY = (
    "import atexit, sys\n"
    "atexit.register(lambda: print('IMPORTED', *sorted(m for m in {heavy!r} "
    "if m in sys.modules), file=sys.stderr))\n"
    "from mbkkm.__main__ import main\n"
    "sys.exit(main())\n"
)


def _mbkkm(*args, prelude=""):
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    code = prelude + ENTRY.format(heavy=HEAVY)
    r = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, timeout=300
    )
    imported = [line.split()[1:] for line in r.stderr.splitlines() if line.startswith("IMPORTED")]
    return r, (imported[-1] if imported else None)


# (click's own wording differs between versions: only the names are checked)
@pytest.mark.parametrize(
    ("args", "code", "says"),
    [
        (["--help"], 0, "Commands:"),
        (["--version"], 0, "mbkkm, version"),
        (["fit", "--no-such-option"], 2, "--no-such-option"),
        (["fitt"], 2, "'fitt'"),
        (["fit", "{data}"], 2, "'--n-clusters'"),
        (["fit", "{data}", "-k", "0"], 2, "x>=1"),
        (["fit", "{data}", "-k", "2", "--gamma", "-1"], 2, "'-1' is not a positive number"),
        (["predict", "{data}"], 2, "'DATA'"),
    ],
    ids=[
        "help",
        "version",
        "unknown-option",
        "unknown-command",
        "missing-k",
        "bad-k",
        "bad-gamma",
        "missing-argument",
    ],
)
def test_help_and_option_errors_do_not_import_scikit_learn(tmp_path, args, code, says):
    data = tmp_path / "d.csv"
    data.write_text("x,y\n1,2\n3,4\n")
    r, imported = _mbkkm(*[a.format(data=data) for a in args])
    assert r.returncode == code, r.stdout + r.stderr
    assert says in r.stdout + r.stderr
    assert imported == [], imported  # not even numpy's neighbours: scipy, pandas


def test_a_fit_still_imports_what_it_needs(tmp_path):
    # the check above can fail: the same interpreter and report see scikit-learn here
    data = tmp_path / "d.csv"
    data.write_text("x,y\n" + "".join(f"{i % 7},{i % 5}\n" for i in range(40)))
    r, imported = _mbkkm(
        "fit", str(data), "-k", "2", "--gamma", "0.5", "--max-iter", "3", "--batch-size", "8", "-q"
    )
    assert r.returncode == 0, r.stderr
    assert "sklearn" in imported and "torch" not in imported


def test_the_entry_point_without_the_cli_extra_says_which_extra_to_install():
    hide_click = (
        "import sys\n"
        "class _NoClick:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.partition('.')[0] == 'click':\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
        "sys.meta_path.insert(0, _NoClick())\n"
    )
    r, _ = _mbkkm("--help", prelude=hide_click)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "Traceback" not in r.stderr, r.stderr
    assert "the mbkkm command needs the 'cli' extra (missing: click)" in r.stderr
    assert 'pip install "mbkkm[cli]"' in r.stderr and 'pip install -e ".[cli]"' in r.stderr
    # importing the module itself says it too
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    r = subprocess.run(
        [sys.executable, "-c", hide_click + "import mbkkm.cli"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert r.returncode == 1 and "needs the 'cli' extra: pip install \"mbkkm[cli]\"" in r.stderr


def test_the_console_script_is_the_entry_point():
    text = (SRC.parent / "pyproject.toml").read_text(encoding="utf-8")
    assert '\nmbkkm = "mbkkm.__main__:main"\n' in text

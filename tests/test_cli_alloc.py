"""The ``mbkkm`` command's glibc allocator settings (``mbkkm._files._alloc``): applied
once by the command before it reads, never by the library, skipped when opted out,
when the user tunes malloc, and off glibc Linux."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from click.testing import CliRunner

from mbkkm import cli
from mbkkm._files import _alloc

MIB = 2**20
CHOSEN = {"M_MMAP_THRESHOLD": 32 * MIB, "M_TRIM_THRESHOLD": 32 * MIB}


class FakeMallopt:
    """A stand-in for glibc's ``mallopt``: records its calls, accepts all but ``refuse``."""

    def __init__(self, refuse=()):
        self.calls = []
        self.refuse = set(refuse)
        self.argtypes = self.restype = None

    def __call__(self, param, value):
        self.calls.append((param, value))
        return 0 if param in self.refuse else 1


class FakeLibc:
    def __init__(self, mallopt=None):
        if mallopt is not None:
            self.mallopt = mallopt


class FakeTrim:
    def __init__(self):
        self.calls = []

    def __call__(self, pad):
        self.calls.append(pad)
        return 1


@pytest.fixture
def fake(monkeypatch):
    """glibc Linux with a recording mallopt and malloc_trim (``fake.trim``), and an
    environment without MALLOC_*."""
    mallopt = FakeMallopt()
    mallopt.trim = FakeTrim()
    monkeypatch.setattr(_alloc, "_glibc", {"mallopt": mallopt, "malloc_trim": mallopt.trim}.get)
    for name in [n for n in _alloc.os.environ if n.startswith("MALLOC_")]:
        monkeypatch.delenv(name)
    monkeypatch.delenv(_alloc.OPT_OUT, raising=False)
    monkeypatch.delenv("GLIBC_TUNABLES", raising=False)
    return mallopt


def test_sets_both_thresholds_on_glibc(fake):
    assert _alloc.tune_allocator() == CHOSEN
    assert fake.calls == [(-3, 32 * MIB), (-1, 32 * MIB)]  # M_MMAP_THRESHOLD, M_TRIM_THRESHOLD


def test_release_free_memory_trims_all_arenas(fake, monkeypatch):
    assert _alloc.release_free_memory() is True
    assert fake.trim.calls == [0]
    monkeypatch.setenv("MBKKM_NO_MALLOPT", "1")
    assert _alloc.release_free_memory() is False
    monkeypatch.delenv("MBKKM_NO_MALLOPT")
    monkeypatch.setenv("MALLOC_ARENA_MAX", "2")
    assert _alloc.release_free_memory() is False
    assert fake.trim.calls == [0]
    monkeypatch.setattr(_alloc, "_glibc", lambda name: None)  # not glibc
    assert _alloc.release_free_memory(environ={}) is False


def test_a_refused_setting_is_not_reported(monkeypatch):
    mallopt = FakeMallopt(refuse={-3})
    monkeypatch.setattr(_alloc, "_glibc", {"mallopt": mallopt}.get)
    assert _alloc.tune_allocator(environ={}) == {"M_TRIM_THRESHOLD": 32 * MIB}
    assert len(mallopt.calls) == 2


@pytest.mark.parametrize(
    "environ, applied",
    [
        ({"MBKKM_NO_MALLOPT": "1"}, False),
        ({"MBKKM_NO_MALLOPT": "yes"}, False),
        ({"MBKKM_NO_MALLOPT": "0"}, True),
        ({"MBKKM_NO_MALLOPT": ""}, True),
        ({"MALLOC_ARENA_MAX": "2"}, False),
        ({"MALLOC_TRIM_THRESHOLD_": "0"}, False),
        ({"GLIBC_TUNABLES": "glibc.malloc.mmap_threshold=65536"}, False),
        ({"GLIBC_TUNABLES": "glibc.pthread.rseq=0"}, True),
        ({"MBKKM_DATA": "/data"}, True),
    ],
)
def test_opt_out_and_the_users_own_settings(environ, applied):
    mallopt = FakeMallopt()
    original = _alloc._glibc
    _alloc._glibc = {"mallopt": mallopt}.get
    try:
        result = _alloc.tune_allocator(environ=environ)
    finally:
        _alloc._glibc = original
    assert (result == CHOSEN) is applied
    assert bool(mallopt.calls) is applied


def test_the_environment_variable_opts_out(fake, monkeypatch):
    monkeypatch.setenv("MBKKM_NO_MALLOPT", "1")
    assert _alloc.tune_allocator() == {} and fake.calls == []
    monkeypatch.delenv("MBKKM_NO_MALLOPT")
    monkeypatch.setenv("MALLOC_TOP_PAD_", str(2**20))
    assert _alloc.tune_allocator() == {} and fake.calls == []


def test_no_op_off_glibc_linux(monkeypatch):
    libc = FakeLibc(FakeMallopt())
    monkeypatch.setattr("ctypes.CDLL", lambda name: libc)
    monkeypatch.setattr(_alloc.sys, "platform", "linux")
    monkeypatch.setattr(_alloc.platform, "libc_ver", lambda: ("glibc", "2.36"))
    assert _alloc._glibc("mallopt") is libc.mallopt  # the fake, argument types set
    assert libc.mallopt.argtypes is not None and libc.mallopt.restype is not None
    for system, libc_ver in [
        ("darwin", ("", "")),
        ("win32", ("", "")),
        ("linux", ("", "")),
        ("linux", ("libc", "1.2")),
    ]:
        monkeypatch.setattr(_alloc.sys, "platform", system)
        monkeypatch.setattr(_alloc.platform, "libc_ver", lambda v=libc_ver: v)
        assert _alloc._glibc("mallopt") is None
        assert _alloc.tune_allocator(environ={}) == {}
    assert libc.mallopt.calls == []


def test_no_op_without_mallopt_or_libc(monkeypatch):
    monkeypatch.setattr(_alloc.sys, "platform", "linux")
    monkeypatch.setattr(_alloc.platform, "libc_ver", lambda: ("glibc", "2.36"))
    monkeypatch.setattr("ctypes.CDLL", lambda name: FakeLibc())  # no mallopt symbol
    assert _alloc.tune_allocator(environ={}) == {}
    assert _alloc.release_free_memory(environ={}) is False

    def unloadable(name):
        raise OSError("no C library")

    monkeypatch.setattr("ctypes.CDLL", unloadable)
    assert _alloc.tune_allocator(environ={}) == {}


def test_the_command_tunes_before_it_reads(fake, monkeypatch, tmp_path):
    events = []
    fake_call = fake.__call__
    monkeypatch.setattr(
        FakeMallopt, "__call__", lambda self, p, v: (events.append("mallopt"), fake_call(p, v))[1]
    )
    fake_trim = fake.trim.__call__
    monkeypatch.setattr(
        FakeTrim, "__call__", lambda self, pad: (events.append("trim"), fake_trim(pad))[1]
    )
    opened = cli.open_table
    monkeypatch.setattr(
        cli, "open_table", lambda *a, **k: (events.append("read"), opened(*a, **k))[1]
    )
    rng = np.random.default_rng(0)
    path = tmp_path / "d.csv"
    np.savetxt(path, np.concatenate([rng.normal(c, 0.3, (30, 2)) for c in (0, 5)]), delimiter=",")
    r = CliRunner().invoke(
        cli.main,
        [
            "fit",
            str(path),
            "-k",
            "2",
            "--batch-size",
            "16",
            "--tau",
            "10",
            "--max-iter",
            "5",
            "--gamma",
            "1",
            "--labels-out",
            str(tmp_path / "l.txt"),
            "-q",
        ],
    )
    assert r.exit_code == 0, r.output
    assert events == ["mallopt", "mallopt", "read", "trim"], events  # trimmed once read
    assert fake.calls == [(-3, 32 * MIB), (-1, 32 * MIB)] and fake.trim.calls == [0]


def test_the_library_never_tunes(fake, tmp_path):
    from mbkkm import MiniBatchKernelKMeans

    path = tmp_path / "d.csv"
    X = np.random.default_rng(0).normal(size=(60, 3))
    np.savetxt(path, X, delimiter=",")
    Y = cli.read_data(path)  # the library's reader, even where the CLI module defines it
    MiniBatchKernelKMeans(n_clusters=2, batch_size=16, max_iter=3, gamma=1.0, random_state=0).fit(Y)
    assert fake.calls == [] and fake.trim.calls == []


def test_import_mbkkm_does_not_load_it():
    code = (
        "import sys, mbkkm, mbkkm.cluster, mbkkm.datasets; "
        "assert 'mbkkm._files._alloc' not in sys.modules, 'allocator module imported'; "
        "assert 'mbkkm.cli' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.skipif(
    not sys.platform.startswith("linux") or _alloc.platform.libc_ver()[0] != "glibc",
    reason="glibc Linux only",
)
def test_glibc_accepts_the_settings():
    # in a child process: the settings are process-wide
    code = (
        "from mbkkm._files._alloc import release_free_memory, tune_allocator; "
        "print(sorted(tune_allocator(environ={}).items())); "
        "print(release_free_memory(environ={}) in (True, False))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True
    ).stdout
    assert out.split("\n")[:2] == [str(sorted(CHOSEN.items())), "True"]

"""glibc's allocator settings for the ``mbkkm`` command (a process the command owns).

Why: the text reader parses its file in blocks of a few MiB, and pandas' C
parser allocates its token buffers (the text, a pointer and an offset per
field: tens of MiB per block) for every block and frees them after it. With
glibc's defaults a fresh process starts with a 128 KiB mmap threshold and a
128 KiB trim threshold, which glibc raises only after the first large frees;
until then (and in every new thread's arena) the freed buffers go back to the
operating system between blocks and the next block faults the same amount of
memory in again, page by page: about twice the page faults of a reader that
keeps its memory, measured on the text reader.

So the command, before it reads anything, fixes both thresholds at 32 MiB,
the ceiling of glibc's own adaptive mmap threshold on 64-bit Linux
(``DEFAULT_MMAP_THRESHOLD_MAX``; the adaptive trim threshold would go to twice
that): buffers of up to 32 MiB come from the heap, and an arena keeps at most
32 MiB of free memory at its top for the next block. Larger allocations (the
data array itself) are still mapped and unmapped on their own. Each parsing
thread has its own arena, whose kept memory the fit (on the main thread)
cannot reuse, so once the whole table is read the command hands the free
pages back (``malloc_trim(0)``, :func:`release_free_memory`).

Only the command does this: the settings are process-wide, so the library's
functions never touch them (``import mbkkm`` does not import this module).
It is a silent no-op

* off glibc Linux (macOS, Windows, musl: no ``mallopt`` of this meaning);
* when the user has tuned malloc already (any ``MALLOC_*`` environment
  variable, or ``glibc.malloc.*`` in ``GLIBC_TUNABLES``): theirs win;
* when ``MBKKM_NO_MALLOPT`` is set to anything but ``""`` or ``"0"`` (the
  opt-out).
"""

from __future__ import annotations

import os
import platform
import sys

#: The environment variable that turns the tuning off (``MBKKM_NO_MALLOPT=1``).
OPT_OUT = "MBKKM_NO_MALLOPT"

#: The settings applied, in order: (name, mallopt's parameter number in glibc's
#: <malloc.h>, value in bytes).
SETTINGS = (("M_MMAP_THRESHOLD", -3, 32 * 2**20), ("M_TRIM_THRESHOLD", -1, 32 * 2**20))


def _allowed(environ) -> bool:
    """Neither opted out nor tuned by the user (the environment, default
    ``os.environ``, already tunes glibc's malloc)."""
    environ = os.environ if environ is None else environ
    user_tuned = any(name.startswith("MALLOC_") for name in environ)
    user_tuned |= "glibc.malloc." in environ.get("GLIBC_TUNABLES", "")
    return environ.get(OPT_OUT, "") in ("", "0") and not user_tuned


def _glibc(name: str):
    """glibc's function ``name`` (``mallopt``, ``malloc_trim``) through ctypes, taking
    and returning C ints, or None off glibc Linux or where it is missing."""
    if not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc":
        return None
    try:
        import ctypes

        function = getattr(ctypes.CDLL(None), name)
    except (ImportError, OSError, AttributeError):
        return None
    function.argtypes = (ctypes.c_int, ctypes.c_int) if name == "mallopt" else (ctypes.c_size_t,)
    function.restype = ctypes.c_int
    return function


def tune_allocator(environ=None) -> dict[str, int]:
    """Apply :data:`SETTINGS` with glibc's ``mallopt`` for this process, if allowed.

    Parameters
    ----------
    environ : mapping, optional
        The environment to consult (default ``os.environ``).

    Returns
    -------
    applied : dict of str to int
        The settings glibc accepted, by name; empty when nothing was done (opted
        out, the user's own ``MALLOC_*`` settings, not glibc Linux).
    """
    mallopt = _glibc("mallopt") if _allowed(environ) else None
    if mallopt is None:
        return {}
    # mallopt returns 1 where it accepted a setting, 0 where it refused it (left as it was)
    return {name: value for name, param, value in SETTINGS if mallopt(param, value) == 1}


def release_free_memory(environ=None) -> bool:
    """Give free heap memory back to the system (``malloc_trim(0)``), where
    :func:`tune_allocator` would have tuned the allocator.

    The command calls it once a whole table is read, before the fit: glibc then
    releases the free pages inside every arena's free chunks and the top of the
    main arena (the parsing threads' arenas keep at most the trim threshold at
    their tops), memory the parser kept for its next block.

    Returns
    -------
    released : bool
        Whether glibc gave memory back (False also when nothing was tried).
    """
    malloc_trim = _glibc("malloc_trim") if _allowed(environ) else None
    return malloc_trim is not None and malloc_trim(0) == 1

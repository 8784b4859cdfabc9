"""Atomic output files: the target is always the old file or the new one.

Every file the library writes (models, labels, transforms, figures, dataset
caches, the demo's outputs) goes through :func:`atomic_write`: the content is
written to a temporary file in the target's folder, flushed and fsynced, then
renamed onto the target with :func:`os.replace` (atomic on POSIX and Windows
within one file system), and the folder is fsynced so the rename itself
survives a power cut. A process killed at any moment leaves the previous
target untouched (and, at worst, a hidden ``.<name>.<pid>.<random>.tmp`` file
beside it, which the next write of the same target removes once its process
has gone: a checkpoint killed again and again leaves no snapshots behind).
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import IO, Any


@contextmanager
def atomic_write(
    path: str | os.PathLike,
    mode: str = "wb",
    *,
    newline: str | None = None,
) -> Iterator[IO[Any]]:
    """Open a temporary file that replaces ``path`` when the block ends without error.

    Parameters
    ----------
    path : path
        The target. A symbolic link is followed (the file it points to is
        replaced); a device or a pipe (``/dev/stdout``) is written directly,
        as a rename cannot replace it.
    mode : {"wb", "w"}, default="wb"
        Binary or text.
    newline : str, optional
        As for :func:`open`, in text mode (which writes UTF-8).

    Yields
    ------
    file : file object
        Write the whole content to it. When the block raises, the temporary
        file is removed and the target is left as it was.
    """
    if mode not in ("wb", "w"):
        raise ValueError(f"mode must be 'wb' or 'w', got {mode!r}.")
    kw: dict[str, Any] = {"encoding": "utf-8", "newline": newline} if mode == "w" else {}
    target = Path(os.path.realpath(path))
    if not target.parent.is_dir():  # said so, not as the temporary file's name
        raise FileNotFoundError(f"the folder of {str(path)!r} does not exist ({target.parent})")
    if target.exists() and not (target.is_file() or target.is_dir()):  # a device, a pipe
        with open(target, mode, **kw) as fh:
            yield fh
        return
    tmp = target.with_name(f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    # O_EXCL: never write through a file that someone else created under this name;
    # mode 0o666 less the umask, as open() would give the target.
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
    try:
        with os.fdopen(fd, mode, **kw) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        with suppress(OSError):  # keep the permissions of the file being replaced, if any
            shutil.copymode(target, tmp)
        os.replace(tmp, target)
    except BaseException:
        with suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    _remove_stale(target)
    # the folder fsynced, so that the rename survives a power cut (Windows does not
    # open folders this way; some file systems refuse fsync on one)
    with suppress(OSError):
        fd = os.open(target.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _remove_stale(target: Path) -> None:
    """Remove the temporary files of ``target`` left by writers that were killed: those
    whose process no longer runs (POSIX; elsewhere they are left).

    Only names of the exact form :func:`atomic_write` gives them,
    ``.<name>.<pid>.<8 hex digits>.tmp``, are ``target``'s: the temporary file of
    another target whose name starts with this one's (``labels.99999`` beside
    ``labels``) is never taken for one, nor its process id read from a part of its
    name.
    """
    if os.name != "posix":
        return
    own = re.compile(rf"\.{re.escape(target.name)}\.([0-9]+)\.[0-9a-f]{{8}}\.tmp")
    with suppress(OSError):
        for tmp in target.parent.iterdir():
            match = own.fullmatch(tmp.name)
            if match is None:
                continue
            try:
                os.kill(int(match.group(1)), 0)  # signal 0: is it alive (ours or another user's)?
            except ProcessLookupError:
                with suppress(OSError):
                    tmp.unlink()
            except (PermissionError, OverflowError):
                pass


def save_figure(fig, path: str | os.PathLike, **kwargs) -> Path:
    """``fig.savefig(path, **kwargs)`` through :func:`atomic_write`.

    The format is the one the suffix names (``.png``, ``.svg``, ``.pdf``, ...),
    as :meth:`matplotlib.figure.Figure.savefig` chooses it from a file name;
    ``kwargs`` may give ``format`` to override it.
    """
    path = Path(path)
    kwargs.setdefault("format", path.suffix[1:].lower() or None)
    with atomic_write(path, "wb") as fh:
        fig.savefig(fh, **kwargs)
    return path

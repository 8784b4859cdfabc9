"""Arrays written block by block (labels, distances): text, .npy, Parquet, Arrow.

:func:`open_writer` picks the format from the output's suffix; every file is
written through :func:`~mbkkm._files.atomic_write`, so a kill or a full disk
leaves the previous file in place. Blocks are written as they come: the output
never has to be held whole.
"""

from __future__ import annotations

import os
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import IO

import numpy as np

from ._atomic import atomic_write
from ._read import ARROW, KINDS, NPY, NPZ, PARQUET, TEXT, needs_pyarrow


class _TextWriter:
    """One row per line: a label, or the row's values separated by ``delimiter``."""

    def __init__(self, fh: IO[bytes], delimiter: str):
        self.fh, self.delimiter = fh, delimiter

    def write(self, block: np.ndarray) -> None:
        if block.shape[0] == 0:
            return
        if block.ndim == 1 and block.dtype.kind in "iub":
            self.fh.write(("\n".join(map(str, block.tolist())) + "\n").encode())
            return
        import pandas as pd

        # pandas' writer prints each float with the shortest repr of its dtype,
        # so a float32 value reads back exactly.
        pd.DataFrame(block.reshape(block.shape[0], -1)).to_csv(
            self.fh, header=False, index=False, sep=self.delimiter, lineterminator="\n"
        )

    def close(self) -> None:
        pass


class _NpyWriter:
    """A ``.npy`` file: the header, then each block's bytes. Where the number of
    rows is not known in advance, the header is written for an upper bound and
    rewritten in place at the end (both headers are padded to 128 bytes)."""

    def __init__(self, fh: IO[bytes], names, dtype, n_rows):
        self.fh, self.dtype, self.n_rows, self.rows = fh, np.dtype(dtype), n_rows, 0
        self.width = () if names is None else (len(names),)  # the shape after the rows
        self.start = fh.tell()
        self._header(n_rows if n_rows is not None else 2**62)
        self.header_bytes = fh.tell() - self.start

    def _header(self, n: int) -> None:
        descr = np.lib.format.dtype_to_descr(self.dtype)
        header = {"descr": descr, "fortran_order": False, "shape": (n, *self.width)}
        np.lib.format.write_array_header_1_0(self.fh, header)

    def write(self, block: np.ndarray) -> None:
        block = np.ascontiguousarray(block, dtype=self.dtype)
        self.fh.write(block.data)
        self.rows += block.shape[0]

    def close(self) -> None:
        if self.n_rows is not None:
            if self.rows != self.n_rows:
                raise ValueError(f"{self.rows} rows were written, {self.n_rows} announced.")
            return
        end = self.fh.tell()
        self.fh.seek(self.start)
        self._header(self.rows)
        if self.fh.tell() - self.start != self.header_bytes:  # pragma: no cover - 19 digits
            raise RuntimeError("the .npy header changed length; cannot finish the file.")
        self.fh.seek(end)


class _ArrowWriter:
    """Parquet (one row group per block) or an Arrow IPC (Feather v2) file."""

    def __init__(self, fh: IO[bytes], names, dtype, *, parquet: bool):
        import pyarrow as pa

        self.pa = pa
        self.names = names or ["label"]
        self.schema = pa.schema([(n, pa.from_numpy_dtype(np.dtype(dtype))) for n in self.names])
        if parquet:
            import pyarrow.parquet as pq

            self.writer = pq.ParquetWriter(fh, self.schema)
        else:
            self.writer = pa.ipc.new_file(fh, self.schema)

    def write(self, block: np.ndarray) -> None:
        cols = [block] if block.ndim == 1 else block.T
        arrays = [self.pa.array(np.ascontiguousarray(c)) for c in cols]
        self.writer.write_batch(self.pa.record_batch(arrays, schema=self.schema))

    def close(self) -> None:
        self.writer.close()


#: Suffixes of binary formats that no writer writes: a file so named would hold text
#: (that the reader refuses, or reads as something else). Suffix -> what it names.
UNWRITTEN = {
    ".npz": "an .npz archive",
    ".gz": "a gzip-compressed file",
    ".bz2": "a bzip2-compressed file",
    ".xz": "an xz-compressed file",
    ".zst": "a zstd-compressed file",
    ".zip": "a zip archive",
}
#: The outputs written, as a sentence's end (error messages).
WRITTEN = (
    ".npy, .parquet (or .pq), .feather (or .arrow, .ipc), or text with any other "
    "suffix (.csv, .txt; tab-separated for .tsv)"
)


def output_kind(path: str | os.PathLike) -> str:
    """ "npy", "parquet", "arrow" or "text", from the suffix, as the reader reads them.

    Raises
    ------
    ValueError
        For a suffix of a format that is not written (``.npz``, a compressed file:
        :data:`UNWRITTEN`); the message lists those that are.
    """
    suffix = Path(path).suffix.lower()
    if suffix in UNWRITTEN:
        raise ValueError(
            f"cannot write {UNWRITTEN[suffix]} ({Path(path).name}): the formats written "
            f"are {WRITTEN}; give the file one of these suffixes."
        )
    kind = KINDS.get(suffix, TEXT)
    assert kind != NPZ
    return kind


@contextmanager
def open_writer(path, *, names: list[str] | None, dtype, n_rows: int | None = None):
    """A writer of blocks of rows; ``writer.write(block)`` for each block in order.

    Parameters
    ----------
    path : path or binary file object
        By suffix: ``.npy``; ``.parquet`` / ``.pq``; ``.feather`` / ``.arrow`` /
        ``.ipc`` (Arrow IPC); anything else is text, one row per line
        (tab-separated for ``.tsv`` / ``.tab``, else comma-separated, no header),
        except ``.npz`` and compressed suffixes (``.gz``, ...), which are refused.
        A file object (standard output) receives text, not atomically.
    names : list of str or None
        Column names of 2-d blocks (Parquet/Arrow column names; the width of a
        ``.npy``); None for 1-d blocks (labels), named ``label``.
    dtype : numpy dtype
        Of the values written (.npy, Parquet, Arrow).
    n_rows : int, optional
        The number of rows, when known (a ``.npy`` header is then written once).

    Raises
    ------
    ImportError
        Parquet or Arrow output without pyarrow.
    ValueError
        A suffix of a format not written (``.npz``, ``.gz``, ...).
    """
    to_file = isinstance(path, (str, os.PathLike))
    kind = output_kind(path) if to_file else TEXT
    if kind in (PARQUET, ARROW):
        needs_pyarrow(Path(path), "writing")
    delimiter = "\t" if to_file and Path(path).suffix.lower() in (".tsv", ".tab") else ","
    with atomic_write(path, "wb") if to_file else nullcontext(path) as fh:
        writer: _NpyWriter | _TextWriter | _ArrowWriter
        if kind == NPY:
            writer = _NpyWriter(fh, names, dtype, n_rows)
        elif kind == TEXT:
            writer = _TextWriter(fh, delimiter)
        else:
            writer = _ArrowWriter(fh, names, dtype, parquet=kind == PARQUET)
        yield writer
        writer.close()

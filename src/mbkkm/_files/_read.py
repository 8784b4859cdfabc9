"""Numeric tables from files: delimited text, .npy, .npz, Parquet, Feather/Arrow.

:func:`open_table` looks at a file (its kind from the suffix, the header, the
columns) without reading its data, and returns a :class:`Table` that reads it
whole (:meth:`Table.read`) or block by block (:meth:`Table.blocks`), straight
into the requested dtype (float32 unless asked otherwise):

* delimited text: blocks of about :data:`BLOCK_BYTES` cut at line ends, each
  parsed by pandas' C parser into float32 and copied into one growing array, so
  the peak is the array plus a few blocks, never a float64 or object copy; with
  ``n_threads`` > 1 worker threads parse the blocks, a few ahead of the one
  copied (pandas' own ``read_csv`` of a path is threaded too). A block
  the parser refuses (or that holds a non-finite value) is read again line by
  line with Python's ``csv`` and ``float``, which names the line and column of
  the first bad cell, or accepts what Python accepts and the fast parser did
  not;
* ``.npy``: memory-mapped, dtype kept (float32 and float64); no copy unless a
  column choice or a dtype conversion asks for one;
* ``.npz``: the array ``key``, or a scipy.sparse matrix saved by
  ``scipy.sparse.save_npz``, read as a CSR matrix (blocks of CSR rows);
* Parquet and Feather/Arrow (pyarrow): record batches copied into the array.
"""

from __future__ import annotations

import codecs
import csv
import functools
import io
import math
import os
import re
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

#: Bytes of text per parsed block (also the granularity of the progress): the
#: reader's memory beyond the array is a few times this.
BLOCK_BYTES = 8 * 2**20
#: Rows per block of binary inputs (.npy, .npz, Parquet, Arrow).
BLOCK_ROWS = 2**18
#: Longest first line (the header) read before refusing the file.
MAX_FIRST_LINE = 64 * 2**20

TEXT, NPY, NPZ, PARQUET, ARROW = "text", "npy", "npz", "parquet", "arrow"
KINDS = {
    ".npy": NPY,
    ".npz": NPZ,
    ".parquet": PARQUET,
    ".pq": PARQUET,
    ".feather": ARROW,
    ".arrow": ARROW,
    ".ipc": ARROW,
}
_DELIMITERS = ",\t; "

Progress = Callable[[int], object]


class OptionError(ValueError):
    """An argument of :func:`open_table` (``option``) that does not fit the file:
    a usage error of the caller, not a fault of the data."""

    def __init__(self, option: str, message: str):
        super().__init__(f"{option}: {message}")
        self.option = option
        self.detail = message


class ColumnSelectionError(OptionError):
    """``columns`` / ``drop`` name a column that is not there (or select none)."""


def _is_number(s: str) -> bool:
    try:
        float(s)
    except ValueError:
        return False
    return True


def _label(names: Sequence[str] | None, j: int) -> str:
    """How messages name column j: its header name, else its 0-based index."""
    return repr(names[j]) if names is not None else f"{j} (0-based)"


def select_columns(
    names: Sequence[str] | None, n_columns: int, columns=None, drop=None
) -> list[int]:
    """Indices of the columns to read, in file order for ``drop``, in the given
    order for ``columns``.

    Parameters
    ----------
    names : sequence of str or None
        Header names, None when the file has none.
    n_columns : int
    columns, drop : sequence of (str or int), optional
        Header names or 0-based indices (negative from the end); a string of
        digits that is not a header name is an index.

    Raises
    ------
    ColumnSelectionError
        Naming the option, the unknown column and the columns there are.
    """

    def resolve(option: str, items) -> list[int]:
        out = []
        for item in items:
            key = item.strip() if isinstance(item, str) else item
            if isinstance(key, str) and names is not None and key in names:
                if list(names).count(key) > 1:
                    raise ColumnSelectionError(
                        option, f"the header holds {key!r} more than once; select it by index"
                    )
                out.append(list(names).index(key))
                continue
            try:
                j = int(key)
            except (TypeError, ValueError):
                where = (
                    f"the columns are {names_list(names, limit=12)}"
                    if names is not None
                    else "the file has no header: select columns by 0-based index"
                )
                raise ColumnSelectionError(option, f"no column named {key!r}; {where}.") from None
            if not -n_columns <= j < n_columns:
                raise ColumnSelectionError(
                    option,
                    f"column index {j} is out of range: the table has {n_columns} "
                    f"column{'s' * (n_columns != 1)} (indices 0..{n_columns - 1}).",
                )
            out.append(j % n_columns)
        return out

    keep = list(range(n_columns))
    if columns is not None:
        keep = resolve("columns", columns)
        dup = sorted({j for j in keep if keep.count(j) > 1})
        if dup:
            raise ColumnSelectionError(
                "columns", f"column {_label(names, dup[0])} is selected more than once."
            )
    if drop is not None:
        gone = set(resolve("drop", drop))
        keep = [j for j in keep if j not in gone]
    if not keep:
        raise ColumnSelectionError(
            "drop" if drop is not None else "columns", "no column is left to read."
        )
    return keep


def names_list(names: Sequence[str], limit: int = 8) -> str:
    """Names quoted and comma-separated, the first ``limit`` of them."""
    names = list(names)
    shown = ", ".join(map(repr, names[:limit]))
    return shown + (f", ... ({len(names)} in all)" if len(names) > limit else "")


def _default_dtype(dtype, file_dtype: np.dtype | None = None) -> np.dtype:
    if dtype is not None:
        dtype = np.dtype(dtype)
        if dtype.kind != "f":
            raise ValueError(f"dtype must be a floating-point type, got {dtype}.")
        return dtype
    if file_dtype is not None and file_dtype in (np.float32, np.float64):
        return np.dtype(file_dtype)  # .npy/.npz: kept, so a memory map is used as it is
    return np.dtype(np.float32)


@dataclass
class Table:
    """A numeric table on disk, opened by :func:`open_table`.

    Attributes
    ----------
    path : pathlib.Path
    kind : {"text", "npy", "npz", "parquet", "arrow"}
    file_names : list of str or None
        Header names of all the file's columns, selected or not (None: the file
        has no header).
    columns : list of int
        0-based indices of the selected columns in the file.
    n_rows : int or None
        Known before reading (binary kinds), else None.
    dtype : numpy.dtype
        The dtype of the arrays returned.
    n_file_columns : int
        Columns in the file, selected or not.
    index_header : bool
        Whether the header was detected although all its fields are numbers: the
        column indices 0, 1, ..., d-1 in order (pandas' names of unnamed columns).
    one_dimensional : bool
        Whether the file's array is 1-d (.npy, .npz), read as one column.
    sparse : bool
        Whether the file holds a scipy.sparse matrix (.npz): :meth:`read` and
        :meth:`blocks` give CSR matrices.
    """

    path: Path
    kind: str
    file_names: list[str] | None
    columns: list[int]
    n_rows: int | None
    dtype: np.dtype
    n_file_columns: int
    _opts: dict[str, Any] = field(default_factory=dict, repr=False)
    index_header: bool = False
    one_dimensional: bool = False
    sparse: bool = False

    @property
    def n_columns(self) -> int:
        return len(self.columns)

    @property
    def names(self) -> list[str] | None:
        """Header names of the selected columns (None: the file has no header)."""
        return None if self.file_names is None else [self.file_names[j] for j in self.columns]

    @property
    def _all_columns(self) -> bool:
        """Whether all the file's columns are read, in file order."""
        return self.columns == list(range(self.n_file_columns))

    @property
    def size_bytes(self) -> int:
        """Bytes of the file (the unit of the text reader's progress)."""
        return self.path.stat().st_size

    def column_label(self, j: int) -> str:
        """How messages name the j-th selected column."""
        return _label(self.file_names, self.columns[j])

    # ------------------------------------------------------------------ reading
    def read(self, progress: Progress | None = None, n_threads: int = 1):
        """The whole table, shape (n_rows, n_columns), in ``dtype``: an ndarray, or a
        CSR matrix for a sparse table.

        A ``.npy`` file of the right dtype, read whole, is returned memory-mapped
        (read-only, never copied). ``progress(k)`` is called as the reading goes,
        with bytes (text) or rows (other kinds) done since the last call.
        ``n_threads``: threads that parse text (other kinds: unused).
        """
        X = self._opts.get("array")  # .npy, .npz
        if X is not None and self._all_columns and X.dtype == self.dtype:
            for _ in self.blocks(progress):  # views, each checked (finite): nothing copied
                pass
            return X
        if self.sparse:
            import scipy.sparse

            return scipy.sparse.vstack(list(self.blocks(progress)), format="csr")
        n = self.n_rows
        if n is not None:
            X = np.empty((n, self.n_columns), dtype=self.dtype)
            i = 0
            for block in self.blocks(progress, n_threads):
                X[i : i + block.shape[0]] = block
                i += block.shape[0]
            return X
        return self._read_text_growing(progress, n_threads)

    def blocks(self, progress: Progress | None = None, n_threads: int = 1) -> Iterator[np.ndarray]:
        """The table as consecutive blocks of rows, each (rows, n_columns) in ``dtype``,
        C-contiguous (CSR for a sparse table), checked (numeric, finite) before it is
        yielded.

        ``n_threads``: threads that parse text, a few blocks ahead of the one
        yielded (other kinds: unused).
        """
        if self.kind == TEXT:
            for _, block in self._text_blocks(progress, n_threads):
                yield block
        elif self.kind in (NPY, NPZ):
            X = self._opts["array"]
            for start in range(0, X.shape[0], BLOCK_ROWS):
                part = X[start : start + BLOCK_ROWS]
                part = part if self._all_columns else part[:, self.columns]
                if self.sparse:
                    part = part.astype(self.dtype, copy=False)
                else:
                    part = np.asarray(part, dtype=self.dtype)
                yield _checked(part, self, start, progress)
        else:
            yield from _arrow_blocks(self, progress)

    def _read_text_growing(self, progress: Progress | None, n_threads: int) -> np.ndarray:
        # The number of rows is unknown: allocate for the rows the file's size
        # suggests (from the first block's bytes per row), grow by resizing in
        # place (realloc, no second copy) when needed, and trim at the end.
        size = max(self.size_bytes - self._opts["data_offset"], 1)
        X: np.ndarray | None = None
        n = 0
        for nbytes, block in self._text_blocks(progress, n_threads):
            m = block.shape[0]
            if X is None:
                per_row = nbytes / max(m, 1)
                guess = math.ceil(size / max(per_row, 1.0) * 1.02) + 16
                X = np.empty((max(guess, m), self.n_columns), dtype=self.dtype)
            if n + m > X.shape[0]:
                X.resize((max(n + m, int(X.shape[0] * 1.25) + 16), self.n_columns), refcheck=False)
            X[n : n + m] = block
            n += m
        assert X is not None  # _text_blocks refuses a table without rows
        if n != X.shape[0]:
            X.resize((n, self.n_columns), refcheck=False)
        return X

    def _text_pieces(self, free: list[bytearray]) -> Iterator[_Piece]:
        """Consecutive pieces of whole lines of a text table, about
        :data:`BLOCK_BYTES` each (a line longer than that is one piece).

        Each piece is read into a buffer taken from ``free`` (a new one when it is
        empty); the caller puts ``piece.buf`` back once it is done with the piece.
        Reusing a few buffers, rather than a new ``bytes`` for every read, spares
        the copy that joins the end of one read to the next, and bounds the
        reader's own memory to the buffers in flight.
        """
        offset = self._opts["data_offset"]
        with open(self.path, "rb") as fh:
            fh.seek(offset)
            size = os.fstat(fh.fileno()).st_size
            carry = b""  # the bytes after the last line end read: the start of a line
            while True:
                # room for the carried bytes and the next read (a small file: its
                # end, so a small table never costs a full block)
                room = len(carry) + min(BLOCK_BYTES, max(size - fh.tell(), 0))
                buf = free.pop() if free else None
                if buf is None or len(buf) < room:
                    buf = bytearray(room + _SLACK)
                need = min(len(buf), len(carry) + BLOCK_BYTES)
                buf[: len(carry)] = carry
                # a buffered file reads on until the slice is full or the file ends
                n = len(carry) + fh.readinto(memoryview(buf)[len(carry) : need])
                if n == len(carry):  # end of the file
                    if carry:
                        yield _Piece(offset, buf, n)
                    return
                cut = buf.rfind(b"\n", 0, n) + 1
                if n < need:  # end of the file: the rest is the last piece
                    cut = n
                elif cut == 0:  # no line end in this read: read on
                    carry = bytes(buf[:n])
                    free.append(buf)
                    continue
                carry = bytes(buf[cut:n])
                yield _Piece(offset, buf, cut)
                offset += cut

    def _text_blocks(
        self, progress: Progress | None, n_threads: int = 1
    ) -> Iterator[tuple[int, np.ndarray]]:
        """(bytes, parsed block) for each piece of whole lines of a text table, in
        file order; the blocks are C-contiguous.

        With ``n_threads`` > 1 the pieces are parsed by that many worker threads
        (pandas' C parser releases the GIL while it tokenizes and converts), at most
        ``n_threads + 1`` pieces ahead of the one yielded, so the memory beyond the
        array stays a few pieces; errors come out in file order (the first bad line
        of the file is the one named).
        """
        free: list[bytearray] = []  # at most n_threads + 2 buffers: those in flight
        rows = 0
        for piece, X in self._parsed(self._text_pieces(free), n_threads):
            free.append(piece.buf)  # parsed: its buffer can take a next piece
            if progress is not None:
                progress(piece.n)
            if X.shape[0]:
                rows += X.shape[0]
                yield piece.n, X
        if rows == 0:
            raise ValueError(
                f"{self.path} has a header but no data rows."
                if self.file_names is not None
                else f"{self.path} is empty."
            )

    def _parsed(
        self, pieces: Iterator[_Piece], n_threads: int
    ) -> Iterator[tuple[_Piece, np.ndarray]]:
        """(piece, parsed block) of each piece, in order: parsed here, or in ``n_threads``
        > 1 threads."""
        if n_threads <= 1:
            for piece in pieces:
                yield piece, _parse_text_block(piece, self)
            return
        from concurrent.futures import ThreadPoolExecutor

        pool = ThreadPoolExecutor(n_threads, thread_name_prefix="mbkkm-read")
        pending: deque = deque()
        try:
            for piece in pieces:
                pending.append((piece, pool.submit(_parse_text_block, piece, self)))
                if len(pending) > n_threads:
                    piece, future = pending.popleft()
                    yield piece, future.result()
            while pending:
                piece, future = pending.popleft()
                yield piece, future.result()
        finally:  # an error, or the caller stopped reading: drop the pieces not started
            pool.shutdown(wait=True, cancel_futures=True)


#: Letters of which every spelling of true and false holds one ("u" and "l" in
#: either case), and no number that the C parser reads does.
_BOOLEAN_LETTERS = (b"u", b"U", b"l", b"L")


def _maybe_booleans(piece: _Piece, X: np.ndarray, table: Table) -> bool:
    """Whether a block that pandas read may hold a column of true/false words.

    pandas' C parser reads a column of only such words (any case) as 1 and 0,
    and refuses them beside numbers, so whether a file read depended on how its
    blocks fell. A text table holds numbers: such a block is read line by line,
    which refuses a true/false cell as it does any other word. Only a column of
    0s and 1s can have been one, and then all of its cells in the block were words
    (pandas refuses words beside numbers): its field in the block's first line
    holds one of their letters. The columns left out (of names, say) are not read.
    """
    if not X.shape[0]:
        return False
    maybe = (X[0] == 0) | (X[0] == 1)  # the first row rules out most columns at once
    if not maybe.any():
        return False
    zero_one = np.flatnonzero(maybe)[((X[:, maybe] == 0) | (X[:, maybe] == 1)).all(axis=0)]
    if not zero_one.size:
        return False
    start, first = 0, b""
    while start < piece.n and not first.strip():  # the first line that is not blank
        end = piece.buf.find(b"\n", start, piece.n)
        end = piece.n if end < 0 else end
        first, start = bytes(piece.buf[start:end]), end + 1
    sep = table._opts["sep"]
    fields = first.split() if sep == r"\s+" else first.split(sep.encode())
    positions = zero_one if table._all_columns else np.asarray(table.columns)[zero_one]
    if len(fields) <= int(positions.max()):
        return True  # a line not of the table's width: the exact reading decides
    return any(c in fields[p] for p in positions for c in _BOOLEAN_LETTERS)


#: Room in each text buffer beyond :data:`BLOCK_BYTES` for the start of a line
#: carried over from the previous read.
_SLACK = 2**16


@dataclass
class _Piece:
    """Whole lines of a text table: ``buf[:n]``, from byte ``offset`` of the file."""

    offset: int
    buf: bytearray
    n: int


class _PieceReader(io.RawIOBase):
    """A piece as a binary file for pandas' parser, which reads it a chunk at a time
    with ``read`` (each chunk copied out; the piece itself is never copied whole)."""

    def __init__(self, piece: _Piece):
        super().__init__()
        self._view = memoryview(piece.buf)[: piece.n]
        self._pos = 0

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        stop = None if size is None or size < 0 else self._pos + size
        chunk = bytes(self._view[self._pos : stop])
        self._pos += len(chunk)
        return chunk

    def close(self) -> None:
        self._view.release()
        super().close()


def _line_at(table: Table, offset: int) -> tuple[int, int]:
    """The physical line number at byte ``offset`` (the start of a line) of a text
    table, and the data rows (non-blank lines) before it; counted only when a
    message needs them."""
    opts = table._opts
    line, pos = opts["data_line"], opts["data_offset"]
    rows, carry = 0, b""
    with open(table.path, "rb") as fh:
        fh.seek(pos)
        while pos < offset:
            piece = fh.read(min(BLOCK_BYTES, offset - pos))
            if not piece:
                break
            lines = (carry + piece).split(b"\n")
            carry = lines.pop()  # a line cut by the read: counted with the next piece
            line += len(lines)
            rows += sum(1 for raw in lines if raw.strip())
            pos += len(piece)
    return line, rows


def _parse_text_block(piece: _Piece, table: Table) -> np.ndarray:
    """Rows of one piece of whole lines: pandas' C parser, else the line-by-line
    reading that names the first bad cell (or accepts the piece)."""
    import pandas as pd

    opts = table._opts
    width = table.n_file_columns
    # Spaces around numbers need no option (the float parser skips them, and a
    # field it refuses goes to the exact reading); skipinitialspace would cost a
    # quarter of the parse. With a subset of the columns the parser ignores
    # surplus fields, so rows are then checked by counting delimiters (a
    # whitespace-delimited file is parsed whole: its delimiters cannot be counted).
    subset = not table._all_columns and opts["sep"] != r"\s+"
    try:
        with np.errstate(over="ignore"), _PieceReader(piece) as source:
            df = pd.read_csv(
                source,
                sep=opts["sep"],
                header=None,
                names=range(width),
                usecols=table.columns if subset else None,
                dtype=table.dtype,
                engine="c",
                skip_blank_lines=True,
                na_filter=False,
                comment=None,
            )
    except (ValueError, pd.errors.ParserError):
        return _parse_lines(piece, table)
    if not isinstance(df.index, pd.RangeIndex):
        # Every row had more fields than the table's columns: pandas then takes
        # the surplus leading fields as the row index and drops them (neither an
        # error nor a warning). The line-by-line reading refuses such rows, naming
        # the first one.
        return _parse_lines(piece, table)
    if subset and piece.buf.count(opts["sep"].encode(), 0, piece.n) != (width - 1) * len(df):
        return _parse_lines(piece, table)  # ragged, or quoted delimiters
    if not table._all_columns:
        df = df[table.columns]  # in the order asked for (usecols keeps the file's)
    X = df.to_numpy(dtype=table.dtype)  # Fortran order
    if not np.isfinite(X).all():  # a short row (filled with NaN) or nan/inf cells
        return _parse_lines(piece, table)
    if _maybe_booleans(piece, X, table):
        return _parse_lines(piece, table)
    # C order here, in the parsing thread, so that the copy into the array is a
    # plain memory copy
    return np.ascontiguousarray(X)


def _parse_lines(piece: _Piece, table: Table) -> np.ndarray:
    """The slow, exact reading of a piece: Python's csv and float, line by line (the
    first bad cell raises, naming its line)."""
    # (line, rows) at the piece's start, counted only when a message needs them
    first = functools.cache(lambda: _line_at(table, piece.offset))

    def line_of(k):  # physical line number of the piece's k-th line
        return first()[0] + k

    def where(k):  # "row r (line l)" of the piece's k-th line, the next row to parse
        return f"row {first()[1] + len(rows) + 1} (line {line_of(k)})"

    opts = table._opts
    path, names, width = table.path, table.file_names, table.n_file_columns
    rows, line_nos = [], []
    for k, raw in enumerate(piece.buf[: piece.n].split(b"\n")):
        line = raw.decode("utf-8", errors="replace").rstrip("\r")
        if not line.strip():
            continue
        cells = _split(line, opts["delimiter"])
        if len(cells) != width:
            raise ValueError(
                f"{path}, line {line_of(k)}: {len(cells)} fields, expected {width} "
                "(every row needs the same number of fields)."
            )
        row = []
        for j in table.columns:
            c = cells[j]
            try:
                v = float(c)
            except ValueError:
                if c.strip() not in MISSING_CELLS:
                    fix = "remove or encode non-numeric columns, or leave them out"
                    if c.strip().lower() in ("true", "false"):
                        fix = (
                            "a text table holds numbers: save the booleans as 1 and 0 "
                            "(pandas: df[name] = df[name].astype(int)), or leave the "
                            "column out"
                        )
                    elif _THOUSANDS.match(c.strip()):
                        fix = (
                            "it looks like a number with thousands separators: save the "
                            "table without them (pandas: to_csv of the numbers read with "
                            "read_csv(..., thousands=','))"
                        )
                    raise ValueError(
                        f"{path}: column {_label(names, j)} is not numeric (line {line_of(k)} "
                        f"holds {c!r}); {fix}."
                    ) from None
                v = math.nan  # a missing cell
            if not math.isfinite(v):
                message = _missing if math.isnan(v) else _infinite
                raise ValueError(message(path, f"{c!r} at {where(k)}", _label(names, j)))
            row.append(v)
        rows.append(row)
        line_nos.append(k)
    with np.errstate(over="ignore"):
        X = np.array(rows, dtype=np.float64).reshape(-1, table.n_columns).astype(table.dtype)
    if not np.isfinite(X).all():  # finite in float64, too large for float32 (1e39)
        i, j = np.argwhere(~np.isfinite(X))[0]
        raise ValueError(
            f"{path}: line {line_of(line_nos[i])}, column {table.column_label(j)}: "
            f"{rows[i][j]:g} is too large for {table.dtype}; read the data as "
            "float64."
        )
    return X


def _split(line: str, delimiter: str) -> list[str]:
    cells = next(csv.reader([line], delimiter=delimiter, skipinitialspace=True), [])
    return [c for c in cells if c != ""] if delimiter == " " else cells


#: Cells of a text table read as a missing value (pandas' default ``na_values``;
#: "nan" and its spellings Python's ``float`` reads as NaN).
MISSING_CELLS = frozenset(
    [
        "",
        "#N/A N/A",  # the one marker with a space
        *"#N/A #NA -1.#IND -1.#QNAN -NaN -nan 1.#IND 1.#QNAN <NA> N/A NA NULL NaN None".split(),
        *"n/a nan null".split(),
    ]
)


def _missing(path, where: str, column: str) -> str:
    """The message of a missing value (an empty cell, NA, NaN, a null): where, and
    how to mend the table."""
    return (
        f"{path}: missing value {where}, column {column}. mbkkm needs a number in "
        "every cell: drop the rows with missing values or impute them (e.g. pandas' "
        "DataFrame.dropna(), or sklearn.impute.SimpleImputer) and save the table "
        "again, or leave the column out."
    )


def _infinite(path, where: str, column: str) -> str:
    return (
        f"{path}: infinite value {where}, column {column}; replace it by a finite "
        "number or drop the row."
    )


def _checked(block: Any, table: Table, start: int, progress: Progress | None):
    """``block`` (rows from ``start``), once found finite and counted in ``progress``."""
    values = block.data if table.sparse else block  # a CSR block: its stored values
    if not np.isfinite(values).all():
        if table.sparse:
            first = int(np.flatnonzero(~np.isfinite(values))[0])
            i = int(np.searchsorted(block.indptr, first, side="right")) - 1
            j, value = block.indices[first], values[first]
        else:
            i, j = np.argwhere(~np.isfinite(block))[0]
            value = block[i, j]
        message = _missing if np.isnan(value) else _infinite
        raise ValueError(message(table.path, f"at row {start + i + 1}", table.column_label(j)))
    if progress is not None:
        progress(block.shape[0])
    return block


# --------------------------------------------------------------------- opening
def open_table(
    path: str | os.PathLike,
    *,
    header: bool | None = None,
    key: str = "X",
    columns=None,
    drop=None,
    dtype=None,
) -> Table:
    """Look at a table file (kind, header, columns, rows when known) without reading it.

    Parameters
    ----------
    path : path
        ``.npy`` (memory-mapped), ``.npz`` (the array ``key``, or a
        ``scipy.sparse.save_npz`` matrix, loaded here whole as CSR), ``.parquet`` /
        ``.pq``, ``.feather`` / ``.arrow`` / ``.ipc``; anything else is delimited
        text (the delimiter sniffed among ``,``, tab, ``;`` and space from the
        first line, or, where the next lines do not fit that, the one under which
        they are numbers as many as the first line's fields).
    header : bool, optional
        Text only: whether the first non-blank line is a header; None: a header
        when some field of that line is not a number, or when it is the column
        indices 0, 1, ..., d-1 in order (the header pandas writes for unnamed
        columns; ``Table.index_header`` then says so).
    key : str, default="X"
        The array of an ``.npz`` file.
    columns, drop : sequence of (str or int), optional
        The columns to read / to leave out, by header name or 0-based index.
    dtype : floating dtype, optional
        Of the arrays read. Default: float32, except that a float32 or float64
        ``.npy`` / ``.npz`` array keeps its dtype.

    Returns
    -------
    table : Table

    Raises
    ------
    OSError
        If the file cannot be read.
    ValueError
        If it is not a numeric 2-d table (the message names the file and, where it
        can, the line and column); :class:`OptionError` for ``key`` and its
        subclass :class:`ColumnSelectionError` for ``columns`` / ``drop``.
    ImportError
        For Parquet and Arrow files without pyarrow.
    """
    path = Path(path)
    kind = KINDS.get(path.suffix.lower(), TEXT)
    if kind in (NPY, NPZ):
        return _open_numpy(path, kind, key, columns, drop, dtype)
    if kind in (PARQUET, ARROW):
        return _open_arrow(path, kind, columns, drop, dtype)
    return _open_text(path, header, columns, drop, dtype)


def _is_index_header(cells: Sequence[str]) -> bool:
    """Whether a line of at least two fields is the integers 0, 1, ..., d-1 in order:
    the names pandas gives unnamed columns (``DataFrame(X).to_csv(index=False)``
    writes them as the header). One column's first value 0 stays data."""
    return len(cells) >= 2 and [c.strip() for c in cells] == [str(j) for j in range(len(cells))]


#: A cell that a number with thousands separators would be: "1,000", "-12,345.5".
_THOUSANDS = re.compile(r"^[+-]?\d{1,3}([,' ]\d{3})+(\.\d*)?$")
#: The first bytes of compressed files, which the text reader cannot cut into blocks.
_COMPRESSED = {
    b"\x1f\x8b": "gzip",
    b"BZh": "bzip2",
    b"\xfd7zXZ\x00": "xz",
    b"\x28\xb5\x2f\xfd": "zstd",
    b"PK\x03\x04": "zip",
}


def _check_text_encoding(path, start: bytes) -> None:
    """Refuse, by what they are, files that are not UTF-8 text: compressed files and
    UTF-16 text (read as bytes, they gave errors about fields and columns)."""
    for magic, kind in _COMPRESSED.items():
        if start.startswith(magic):
            raise ValueError(
                f"{path} is a {kind}-compressed file; decompress it first (the text "
                "reader cuts a table into blocks that it parses in parallel, which a "
                "compressed stream cannot be cut into), or save it as .npy or Parquet."
            )
    if start.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)) or b"\x00" in start:
        raise ValueError(
            f"{path} is not UTF-8 text (UTF-16, by its byte order mark or its zero "
            "bytes); save it as UTF-8 (e.g. iconv -f utf-16 -t utf-8), the encoding "
            "mbkkm reads."
        )


#: Non-blank lines after the first that the delimiter is guessed from, and the
#: most bytes read for them.
SAMPLE_LINES, SAMPLE_BYTES = 10, 2**20


def _next_lines(fh) -> list[str]:
    """Up to :data:`SAMPLE_LINES` non-blank whole lines from ``fh``'s position,
    within about :data:`SAMPLE_BYTES` (a line cut by that limit is left out)."""
    lines: list[str] = []
    budget = SAMPLE_BYTES
    while len(lines) < SAMPLE_LINES and budget > 0:
        raw = fh.readline(budget)
        if not raw:
            break
        budget -= len(raw)
        if not raw.endswith(b"\n") and budget <= 0:
            break  # cut by the limit: not a whole line
        if raw.strip():
            lines.append(raw.decode("utf-8", errors="replace").rstrip("\r\n"))
    return lines


def _guess_delimiter(first: str, sample: Sequence[str], header: bool | None) -> str:
    """The delimiter of a text table, from its first non-blank line and the lines
    after it (``sample``); ``header`` as given to :func:`open_table`.

    The first line alone decides (Python's csv.Sniffer, else a comma) when the
    sample lines have as many fields as it under that delimiter. Otherwise (a
    header "sepal length" over one column of numbers, which the first line alone
    says is two space-separated fields) the delimiter is the one under which every
    sample line has the first line's number of fields, all of them numbers or
    missing values (the first line too, unless it is a header: given, or by its
    fields under the first guess), the most fields first; none such: the first
    line's guess, which the reading then refuses naming the first line that does
    not fit.
    """
    try:
        guess = csv.Sniffer().sniff(first, delimiters=_DELIMITERS).delimiter
    except csv.Error:
        guess = ","

    def width(delimiter: str, line: str) -> int:
        return len(_split(line, delimiter))

    if all(width(guess, line) == width(guess, first) for line in sample):
        return guess
    if header is None:  # as _open_text decides, under the first guess
        cells = _split(first, guess)
        named = cells[:-1] if len(cells) > 1 and not cells[-1].strip() else cells
        header = _is_index_header(cells) or not all(_is_number(c) for c in named)
    data = [*sample] if header else [first, *sample]
    fits = [
        d
        for d in _DELIMITERS
        if all(
            len(cells) == width(d, first)
            and all(_is_number(c) or c.strip() in MISSING_CELLS for c in cells)
            for cells in (_split(line, d) for line in data)
        )
    ]
    # the most fields; of as many, the first in _DELIMITERS (max keeps the first)
    return max(fits, key=lambda d: width(d, first), default=guess)


def _open_text(path, header, columns, drop, dtype) -> Table:
    line_no = 1
    with open(path, "rb") as fh:
        start = fh.read(64)
        _check_text_encoding(path, start)
        # a UTF-8 byte order mark is skipped, not read as text
        fh.seek(len(codecs.BOM_UTF8) if start.startswith(codecs.BOM_UTF8) else 0)
        offset = fh.tell()
        while True:  # the first non-blank line
            raw = fh.readline(MAX_FIRST_LINE + 1)
            if not raw:
                raise ValueError(f"{path} is empty.")
            if len(raw) > MAX_FIRST_LINE:
                raise ValueError(
                    f"{path}: the first line is longer than "
                    f"{MAX_FIRST_LINE // 2**20} MiB; not a delimited table."
                )
            if raw.strip():
                break
            offset += len(raw)
            line_no += 1
        sample = _next_lines(fh)
    first = raw.decode("utf-8", errors="replace").rstrip("\r\n")
    delimiter = _guess_delimiter(first, sample, header)
    cells = _split(first, delimiter)
    index_header = False
    if header is None:
        index_header = _is_index_header(cells)
        # an empty last cell says nothing (a delimiter at the end of every line); an
        # empty first one is pandas' index's name in its header (",0,1")
        named = cells[:-1] if len(cells) > 1 and not cells[-1].strip() else cells
        header = index_header or not all(_is_number(c) for c in named)
    names = list(cells) if header else None
    width = len(cells)
    keep = select_columns(names, width, columns, drop)
    opts = {
        "delimiter": delimiter,
        "sep": r"\s+" if delimiter == " " else delimiter,
        "data_offset": offset + len(raw) if header else offset,
        "data_line": line_no + bool(header),
    }
    dtype = _default_dtype(dtype)
    return Table(path, TEXT, names, keep, None, dtype, width, opts, index_header=index_header)


def _open_numpy(path, kind, key, columns, drop, dtype) -> Table:
    """A ``.npy`` array (memory-mapped), an ``.npz`` array ``key``, or a scipy.sparse
    matrix saved by ``scipy.sparse.save_npz`` (read whole, as CSR)."""
    sparse = False
    try:
        if kind == NPY:
            X = np.load(path, mmap_mode="r", allow_pickle=False)
        else:
            import scipy.sparse

            with np.load(path, allow_pickle=False) as f:
                sparse = key not in f.files and {"format", "shape", "data"} <= set(f.files)
                if key not in f.files and not sparse:
                    arrays = ", ".join(f.files) or "none"
                    raise OptionError(
                        "key", f"{path} has no array {key!r} (arrays: {arrays}); choose one."
                    )
                X = scipy.sparse.load_npz(path).tocsr() if sparse else f[key]
    except ValueError as exc:
        if isinstance(exc, OptionError):
            raise
        raise ValueError(f"{path}: cannot read as a numpy file ({exc}).") from exc
    if sparse and X.dtype.kind not in "biuf":
        raise ValueError(f"{path}: the sparse matrix has dtype {X.dtype}; expected real numbers.")
    if not sparse and (not np.issubdtype(X.dtype, np.number) or np.iscomplexobj(X)):
        raise ValueError(f"{path}: the array has dtype {X.dtype}; expected real numbers.")
    one_dimensional = X.ndim == 1 and not sparse  # (a 1-d sparse array is refused)
    if one_dimensional:
        X = X[:, None]
    if X.ndim != 2:
        raise ValueError(f"{path}: expected a 2-d table, got an array of shape {X.shape}.")
    if X.shape[0] == 0 or X.shape[1] == 0:
        raise ValueError(f"{path}: the table is empty (shape {X.shape}).")
    keep = select_columns(None, X.shape[1], columns, drop)
    n, d = X.shape
    opts = {"array": X}
    dtype = _default_dtype(dtype, X.dtype)
    return Table(
        path, kind, None, keep, n, dtype, d, opts, one_dimensional=one_dimensional, sparse=sparse
    )


def needs_pyarrow(path: Path, doing: str = "reading"):
    """pyarrow, or an ImportError saying that ``doing`` ``path`` needs it."""
    try:
        import pyarrow
    except ImportError:
        raise ImportError(
            f"{doing} {path.suffix} files needs pyarrow: pip install 'mbkkm[parquet]' (or pyarrow)."
        ) from None
    return pyarrow


def _open_arrow(path, kind, columns, drop, dtype) -> Table:
    pa = needs_pyarrow(path)
    try:
        if kind == PARQUET:
            import pyarrow.parquet as pq

            source = pq.ParquetFile(path)
            schema, n = source.schema_arrow, source.metadata.num_rows
        else:
            source = pa.ipc.open_file(pa.memory_map(str(path), "r"))
            schema = source.schema
            n = sum(source.get_batch(i).num_rows for i in range(source.num_record_batches))
    except pa.ArrowException as exc:
        raise ValueError(f"{path}: cannot read as a {kind} file ({exc}).") from None
    names = list(schema.names)
    if columns is None:  # pandas' index is not data (pandas reads it back as the index)
        drop = [*(drop or ()), *_pandas_index_columns(schema, names)]
    keep = select_columns(names, len(names), columns, drop or None)
    numeric = (pa.types.is_integer, pa.types.is_floating, pa.types.is_boolean, pa.types.is_decimal)
    for j in keep:
        t = schema.field(j).type
        if not any(is_numeric(t) for is_numeric in numeric):
            raise ValueError(
                f"{path}: column {names[j]!r} is not numeric (type {t}); "
                "remove or encode non-numeric columns, or leave them out."
            )
    if n == 0:
        raise ValueError(f"{path}: the table is empty (0 rows).")
    return Table(path, kind, names, keep, n, _default_dtype(dtype), len(names), {"source": source})


def _pandas_index_columns(schema, names) -> list[str]:
    """The columns in which pandas stored a data frame's index (``df.to_parquet``,
    ``write_feather``: ``__index_level_0__`` for a filtered or shuffled frame, or the
    index's own name), from the file's pandas metadata; none without it."""
    try:
        index = (schema.pandas_metadata or {}).get("index_columns", [])
    except ValueError:  # metadata that is not pandas' JSON
        return []
    # a RangeIndex is stored as a description (a dict), not as a column
    return [name for name in index if isinstance(name, str) and name in names]


def _arrow_blocks(table: Table, progress: Progress | None) -> Iterator[np.ndarray]:
    source = table._opts["source"]
    if table.kind == PARQUET:
        batches = _parquet_batches(table, source)
    else:
        batches = (
            source.get_batch(i).select(table.columns) for i in range(source.num_record_batches)
        )
    start = 0
    for batch in batches:
        m = batch.num_rows
        block = np.empty((m, table.n_columns), dtype=table.dtype)
        for j in range(table.n_columns):
            col = batch.column(j)
            if col.null_count:
                i = int(np.flatnonzero(np.asarray(col.is_null()))[0])
                raise ValueError(
                    _missing(table.path, f"(null) at row {start + i + 1}", table.column_label(j))
                )
            block[:, j] = col.to_numpy(zero_copy_only=False)
        yield _checked(block, table, start, progress)
        start += m


def _parquet_batches(table: Table, source) -> Iterator[Any]:
    """Record batches of a Parquet file holding the selected columns, in the order
    selected, chosen by position.

    pyarrow fetches Parquet columns by name, and a name that several columns share
    fetches all of them (in file order): a file column is then found as the k-th
    column of its name in the batch, as it is the k-th of its name in the file.
    """
    names = table.file_names
    assert names is not None  # Parquet columns always have names
    wanted = list(dict.fromkeys(names[j] for j in table.columns))  # each name once
    at: list[int] | None = None
    for batch in source.iter_batches(batch_size=BLOCK_ROWS, columns=wanted):
        if at is None:
            got = batch.schema.names
            at = []
            for j in table.columns:
                same = [i for i, name in enumerate(got) if name == names[j]]
                k = names[:j].count(names[j])
                if len(same) != names.count(names[j]):  # (not pyarrow's behaviour today)
                    raise ValueError(
                        f"{table.path}: pyarrow returned {len(same)} columns named "
                        f"{names[j]!r} where the file has {names.count(names[j])}, so "
                        "they cannot be told apart; give the columns distinct names."
                    )
                at.append(same[k])
        yield batch.select(at)

"""mbkkm._files: atomic outputs, tables read in blocks, outputs written in blocks.

Oracles: numpy.loadtxt and pandas for the text reader (with blocks of a few bytes,
so that every row crosses a block boundary somewhere), numpy.load and pyarrow for
the writers.
"""

from __future__ import annotations

import os
import stat
import threading

import numpy as np
import pandas as pd
import pytest

from mbkkm._files import (
    ColumnSelectionError,
    OptionError,
    _read,
    atomic_write,
    open_table,
    open_writer,
    save_figure,
    select_columns,
)


@pytest.fixture(params=[32 * 2**20, 64], ids=["one-block", "64-byte-blocks"])
def block_bytes(request, monkeypatch):
    monkeypatch.setattr(_read, "BLOCK_BYTES", request.param)
    monkeypatch.setattr(_read, "BLOCK_ROWS", 7 if request.param == 64 else 2**18)
    return request.param


# ------------------------------------------------------------------ atomic write
def test_atomic_write_into_a_missing_folder_names_the_folder(tmp_path):
    target = tmp_path / "no" / "model.skops"
    with pytest.raises(FileNotFoundError, match=r"the folder of .*model.skops' does not exist"):
        with atomic_write(target) as fh:
            fh.write(b"x")
    assert not (tmp_path / "no").exists()


@pytest.mark.skipif(os.name != "posix", reason="stale files are found by their process")
def test_atomic_write_removes_what_killed_writers_of_the_same_target_left(tmp_path):
    import subprocess
    import sys

    child = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    dead = int(child.stdout)  # a process that has ended
    target = tmp_path / "fit.ckpt"
    stale = tmp_path / f".fit.ckpt.{dead}.1c643e5e.tmp"
    alive = tmp_path / f".fit.ckpt.{os.getpid()}.00000000.tmp"  # a writer still running
    other = tmp_path / f".other.ckpt.{dead}.1c643e5e.tmp"  # another target's
    for p in (stale, alive, other):
        p.write_bytes(b"partial")
    with atomic_write(target) as fh:
        fh.write(b"new")
    assert target.read_bytes() == b"new"
    assert not stale.exists() and alive.exists() and other.exists()


@pytest.mark.skipif(os.name != "posix", reason="stale files are found by their process")
def test_atomic_write_leaves_the_live_temporary_file_of_a_longer_name(tmp_path):
    """The writer of ``labels.99999`` (a live process) has its temporary file
    ``.labels.99999.<pid>.<hex>.tmp`` beside ``labels``. Before, the clean-up after
    a write of ``labels`` read ``99999`` as the process id of a writer of
    ``labels``, found no such process and deleted the other writer's live file."""
    import subprocess
    import sys

    child = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    dead = int(child.stdout)  # a process that has ended: its number, a part of a name
    live = tmp_path / f".labels.{dead}.{os.getpid()}.abcd1234.tmp"
    live.write_bytes(b"partial")
    odd = [tmp_path / f".labels.{dead}.tmp", tmp_path / f".labels.{dead}.xyz.tmp"]
    for p in odd:  # not of the writer's form: never removed
        p.write_bytes(b"x")
    with atomic_write(tmp_path / "labels") as fh:
        fh.write(b"new")
    assert live.exists() and all(p.exists() for p in odd)


def test_atomic_write_replaces_whole_file(tmp_path):
    p = tmp_path / "out.txt"
    p.write_text("old")
    os.chmod(p, 0o640)
    with atomic_write(p, "w") as fh:
        fh.write("new")
        assert p.read_text() == "old"  # not touched until the block ends
    assert p.read_text() == "new"
    assert stat.S_IMODE(p.stat().st_mode) == 0o640  # permissions kept
    assert os.listdir(tmp_path) == ["out.txt"]


def test_atomic_write_error_keeps_old_file(tmp_path):
    p = tmp_path / "out.bin"
    p.write_bytes(b"old")
    with pytest.raises(RuntimeError, match="boom"), atomic_write(p) as fh:
        fh.write(b"half")
        raise RuntimeError("boom")
    assert p.read_bytes() == b"old" and os.listdir(tmp_path) == ["out.bin"]
    with pytest.raises(KeyboardInterrupt), atomic_write(tmp_path / "new.bin") as fh:
        raise KeyboardInterrupt
    assert os.listdir(tmp_path) == ["out.bin"]


def test_atomic_write_follows_links_and_writes_devices(tmp_path):
    real = tmp_path / "real.txt"
    real.write_text("old")
    link = tmp_path / "link.txt"
    link.symlink_to(real)
    with atomic_write(link, "w") as fh:
        fh.write("new")
    assert link.is_symlink() and real.read_text() == "new"
    with atomic_write(os.devnull, "w") as fh:  # cannot be renamed over: written directly
        fh.write("x")
    with pytest.raises(ValueError, match="mode"), atomic_write(real, "a"):
        pass


def test_save_figure_format_from_suffix(tmp_path):
    from matplotlib.figure import Figure

    fig = Figure()
    fig.subplots().plot([0, 1], [1, 0])
    assert save_figure(fig, tmp_path / "f.png").read_bytes()[:4] == b"\x89PNG"
    assert b"<svg" in save_figure(fig, tmp_path / "f.svg").read_bytes()[:400]
    assert save_figure(fig, tmp_path / "f.pdf").read_bytes()[:4] == b"%PDF"


# ------------------------------------------------------------------------ reading
def _data(n=57, d=4, seed=0):
    return np.random.default_rng(seed).normal(size=(n, d)) * 10.0


@pytest.mark.parametrize("delimiter", [",", "\t", ";", " "])
@pytest.mark.parametrize("header", [True, False])
def test_text_equals_loadtxt(tmp_path, block_bytes, delimiter, header):
    X = _data()
    p = tmp_path / "d.csv"
    names = delimiter.join(f"c{j}" for j in range(X.shape[1]))
    np.savetxt(p, X, fmt="%.9g", delimiter=delimiter, header=names if header else "", comments="")
    want = np.loadtxt(p, delimiter=None if delimiter == " " else delimiter, skiprows=int(header))
    t = open_table(p)
    assert (t.names is not None) == header and t.n_rows is None
    got = t.read()
    assert got.dtype == np.float32 and got.flags.c_contiguous
    np.testing.assert_array_equal(got, want.astype(np.float32))
    np.testing.assert_array_equal(open_table(p, dtype="float64").read(), want)
    np.testing.assert_array_equal(np.concatenate(list(t.blocks())), want.astype(np.float32))


def test_blank_lines_crlf_and_spaces(tmp_path, block_bytes):
    p = tmp_path / "d.csv"
    p.write_bytes(b"\n\nx, y\r\n1, 2\r\n\r\n 3 ,4\r\n\n5,6")
    t = open_table(p)
    assert t.names == ["x", "y"]
    np.testing.assert_array_equal(t.read(), [[1, 2], [3, 4], [5, 6]])


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("a,b\n1,2\n3\n", r"line 3: 1 fields, expected 2"),
        ("a,b\n1,2\n3,4,5\n", r"line 3: 3 fields, expected 2"),
        ("a,name\n1,x\n", r"column 'name' is not numeric \(line 2 holds 'x'\)"),
        (
            "1,2\n3,\n",
            r"missing value '' at row 2 \(line 2\), column 1 \(0-based\)\. .*"
            r"dropna\(\).*SimpleImputer",
        ),
        ("a,b\n\n1,2\n\n3,NA\n", r"missing value 'NA' at row 2 \(line 5\), column 'b'"),
        ("1,2\nnan,3\n", r"missing value 'nan' at row 2 \(line 2\), column 0 \(0-based\)"),
        ("1,2\n3,-inf\n", r"infinite value '-inf' at row 2 \(line 2\), column 1 \(0-based\)"),
        ("1,1e39\n", r"too large for float32"),
        ("", r"is empty"),
        ("\n \n", r"is empty"),
        ("a,b\n\n", r"header but no data rows"),
        # Rows that all had more fields than the header (in one parsed block) were read
        # with their first field silently dropped: pandas took it as the row index (a
        # header a,b,c over 1,2,3,4 gave [2, 3, 4]), where the line-by-line reading
        # refuses the same rows. Refused now, with the same message.
        ("a,b,c\n1,2,3,4\n5,6,7,8\n", r"line 2: 4 fields, expected 3"),
        ("a,b,c\n1,2,3,4,5\n5,6,7,8,9\n", r"line 2: 5 fields, expected 3"),
        ("a b c\n1 2 3 4\n5 6 7 8\n", r"line 2: 4 fields, expected 3"),
        ("1,2,3\n" * 10 + "9,1,2,3\n" * 20, r"line 11: 4 fields, expected 3"),
    ],
)
@pytest.mark.parametrize("n_threads", [1, 3])
def test_text_errors_name_line_and_column(tmp_path, block_bytes, text, match, n_threads):
    p = tmp_path / "d.csv"
    p.write_text(text)
    with pytest.raises(ValueError, match=match):
        open_table(p).read(n_threads=n_threads)
    with pytest.raises(ValueError, match=match):
        list(open_table(p).blocks(n_threads=n_threads))


@pytest.mark.parametrize(
    "text",
    [
        "a,b\n1,True\n2,False\n",  # the fast parser read this as 1 and 0
        "a,b\n1,2\n3,4\n1,True\n",  # and refused this
        "a,b\n1,true\n2,FALSE\n",
        "a b\n1 TrUe\n2 false\n",
        "a,b\n" + "1,0\n" * 20 + "1,True\n" * 20,  # numbers, then a block of words
    ],
)
@pytest.mark.parametrize("n_threads", [1, 3])
def test_true_and_false_cells_are_refused(tmp_path, block_bytes, text, n_threads):
    """A column of only True/False cells was read as 1 and 0 by pandas' parser,
    while a block mixing numbers and True was refused by the line-by-line reading:
    whether a file read (and which of its values were words) depended on how its
    blocks fell. A text table holds numbers: such cells are refused everywhere,
    naming the column and line, and saying how to store booleans."""
    p = tmp_path / "d.csv"
    p.write_text(text)
    match = r"column 'b' is not numeric \(line \d+ holds '(?i:true|false)'\); .*as 1 and 0"
    with pytest.raises(ValueError, match=match):
        open_table(p).read(n_threads=n_threads)
    with pytest.raises(ValueError, match=match):
        list(open_table(p, columns=["b"]).blocks(n_threads=n_threads))
    # the column left out: the file reads
    got = open_table(p, drop=["b"]).read(n_threads=n_threads)
    assert got.shape == (text.count("\n") - 1, 1)


def test_zero_one_columns_beside_words_left_out_read(tmp_path, block_bytes, monkeypatch):
    """A column of 0s and 1s beside a column left out whose words hold the letters of
    true/false reads to the same values, by pandas: the check for true/false words
    read the whole block, the column left out included, and sent such files line by
    line (16 times slower; a regression review)."""
    rng = np.random.default_rng(0)
    X = np.column_stack([rng.integers(0, 2, 60), rng.normal(size=60)])
    p = tmp_path / "d.csv"
    words = ["setosa", "versicolor", "virginica", "blue", "Null"]
    lines = [f"{words[i % 5]},{int(a)},{b!r}" for i, (a, b) in enumerate(X.tolist())]
    p.write_text("species,flag,x\n" + "\n".join(lines) + "\n")

    def line_by_line(*args):
        raise AssertionError("read line by line")

    monkeypatch.setattr(_read, "_parse_lines", line_by_line)
    for n_threads in (1, 3):
        got = open_table(p, drop=["species"], dtype="float64").read(n_threads=n_threads)
        np.testing.assert_array_equal(got, X)


@pytest.mark.parametrize("columns", [None, [3, 0]])
def test_threads_give_the_serial_arrays(tmp_path, block_bytes, columns):
    # oracle: the same reader on one thread (itself checked against numpy.loadtxt)
    X = _data(300, 5)
    p = tmp_path / "d.csv"
    np.savetxt(p, X, fmt="%.9g", delimiter=",")
    with open(p, "a") as fh:
        fh.write(" 1_0 , 2,3,4,5\n")  # a block that only the exact reading accepts
    one = open_table(p, columns=columns).read(n_threads=1)
    assert one.shape == (301, 5 if columns is None else 2)
    for n in (2, 4):
        got = open_table(p, columns=columns).read(n_threads=n)
        assert got.dtype == one.dtype and got.flags.c_contiguous
        np.testing.assert_array_equal(got, one)
        blocks = list(open_table(p, columns=columns).blocks(n_threads=n))
        assert all(b.flags.c_contiguous for b in blocks)
        np.testing.assert_array_equal(np.concatenate(blocks), one)


@pytest.mark.parametrize("ending", [b"\n", b"\r\n", b""])
def test_pieces_cut_anywhere(tmp_path, monkeypatch, ending):
    # oracle: numpy.loadtxt of the same file; pieces of 1 to 257 bytes put a cut
    # at every place in a line (lines of 9 to 40 bytes: some longer than a piece),
    # the last line with or without its line end
    X = _data(40, 3) * np.array([1.0, 1e-3, 1e3])
    lines = [",".join(f"{v:.{k % 7 + 1}f}" for v in row) for k, row in enumerate(X)]
    p = tmp_path / "d.csv"
    p.write_bytes(
        b"a,b,c\r\n" + "\n".join(lines).replace("\n", ending.decode() or "\n").encode() + ending
    )
    want = np.loadtxt(p, delimiter=",", skiprows=1).astype(np.float32)
    for block_bytes in (1, 2, 3, 7, 16, 39, 64, 100, 257):
        monkeypatch.setattr(_read, "BLOCK_BYTES", block_bytes)
        for n in (1, 3):
            np.testing.assert_array_equal(open_table(p).read(n_threads=n), want)
            got = np.concatenate(list(open_table(p, columns=["c", "a"]).blocks(n_threads=n)))
            np.testing.assert_array_equal(got, want[:, [2, 0]])


@pytest.mark.parametrize("n_threads", [1, 2, 4])
def test_text_buffers_are_reused(tmp_path, monkeypatch, n_threads):
    # the memory beyond the array: at most n_threads + 2 buffers however many
    # pieces the file has
    monkeypatch.setattr(_read, "BLOCK_BYTES", 256)
    p = tmp_path / "d.csv"
    np.savetxt(p, _data(2000, 4), fmt="%.6f", delimiter=",")
    seen = {}  # the buffers themselves are kept, so that no id is reused
    parse = _read._parse_text_block

    def spy(piece, table):
        seen[id(piece.buf)] = piece.buf
        return parse(piece, table)

    monkeypatch.setattr(_read, "_parse_text_block", spy)
    X = open_table(p).read(n_threads=n_threads)
    assert X.shape == (2000, 4) and p.stat().st_size > 200 * 256
    assert 1 <= len(seen) <= n_threads + 2
    # a file smaller than a block: a buffer of its size, not of a block
    monkeypatch.setattr(_read, "BLOCK_BYTES", 2**23)
    seen.clear()
    open_table(p).read(n_threads=n_threads)
    assert [len(b) for b in seen.values()] == [p.stat().st_size + _read._SLACK]


def test_threads_name_the_first_bad_line_of_the_file(tmp_path, block_bytes):
    lines = [f"{i},{i + 1}" for i in range(400)]
    lines[350] = "1,late"  # a later block fails too, and may be parsed first
    lines[120] = "early,1"
    p = tmp_path / "d.csv"
    p.write_text("\n".join(lines) + "\n")
    first = r"column 0 \(0-based\) is not numeric \(line 121 holds 'early'\)"
    for n in (1, 2, 4):
        with pytest.raises(ValueError, match=first):
            # header=False: the first line, 0,1, would be detected as pandas' header
            open_table(p, header=False).read(n_threads=n)
    # a caller that stops early leaves no worker behind
    p.write_text("\n".join(f"{i},{i + 1}" for i in range(400)) + "\n")
    gen = open_table(p, header=False).blocks(n_threads=2)
    np.testing.assert_array_equal(next(gen)[0], [0, 1])
    gen.close()
    assert not [t for t in threading.enumerate() if t.name.startswith("mbkkm-read")]


def test_error_line_numbers_across_blocks(tmp_path, block_bytes):
    X = _data(200, 3)
    lines = [",".join(f"{v:.6f}" for v in row) for row in X]
    cells = lines[150].split(",")
    lines[150] = ",".join([cells[0], "oops", cells[2]])
    p = tmp_path / "d.csv"
    p.write_text("a,b,c\n\n" + "\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=r"column 'b' is not numeric \(line 153 holds 'oops'\)"):
        open_table(p).read()
    # the same column left out: the file reads
    got = open_table(p, drop=["b"]).read()
    np.testing.assert_allclose(got, X[:, [0, 2]], rtol=1e-6, atol=1e-6)


def test_python_float_syntax_still_accepted(tmp_path, block_bytes):
    p = tmp_path / "d.csv"
    p.write_text("1_000,2\n 3 , 4 \n")  # the C parser refuses these; Python's float does not
    np.testing.assert_array_equal(open_table(p).read(), [[1000, 2], [3, 4]])


def test_huge_header_and_one_column(tmp_path, block_bytes):
    names = [f"feature_{j:05d}" for j in range(20_000)]
    p = tmp_path / "wide.csv"
    X = _data(3, len(names))
    np.savetxt(p, X, fmt="%.9g", delimiter=",", header=",".join(names), comments="")
    t = open_table(p, columns=["feature_19999", "feature_00000"])
    np.testing.assert_array_equal(t.read(), X[:, [19999, 0]].astype(np.float32))
    one = tmp_path / "one.csv"
    one.write_text("x\n1\n2\n3\n")
    assert open_table(one).read().shape == (3, 1)


@pytest.mark.parametrize(
    ("text", "names", "want"),
    [
        ("sepal length\n5.1\n4.9\n", ["sepal length"], [[5.1], [4.9]]),
        ("sepal length (cm)\r\n\r\n5.1\r\n-4e1\r\n", ["sepal length (cm)"], [[5.1], [-40]]),
        ("a b\tc d\n1\t2\n3\t4\n", ["a b", "c d"], [[1, 2], [3, 4]]),
        ("sepal length;petal width\n5.1;3\n4.9;1\n", ["sepal length", "petal width"], None),
        ("sepal length,petal width\n5.1,3\n4.9,1\n", ["sepal length", "petal width"], None),
        ("a b c\n1 2 3\n4 5 6\n", ["a", "b", "c"], [[1, 2, 3], [4, 5, 6]]),
    ],
)
def test_delimiter_is_guessed_from_the_data_lines_too(tmp_path, block_bytes, text, names, want):
    """The delimiter was guessed from the first line alone: a one-column CSV whose
    header holds a space ("sepal length") was taken as two space-separated columns
    and refused ("line 2: 1 fields, expected 2"). Now the data lines have a say."""
    p = tmp_path / "d.csv"
    p.write_text(text)
    t = open_table(p)
    assert t.names == names
    want = [[5.1, 3], [4.9, 1]] if want is None else want
    np.testing.assert_array_equal(t.read(), np.array(want, dtype=np.float32))


def test_delimiter_guess_keeps_the_errors_of_the_first_line(tmp_path):
    # a row of the wrong width or a decimal comma is still named as such (no other
    # delimiter makes the data lines numbers of the first line's width); a missing
    # value under "sepal length" is named as one (before: "line 2: 1 fields, ...")
    for text, match in (
        ("a,b\n1,2\n3\n", r"line 3: 1 fields, expected 2"),
        ("1,2\n3\n", r"line 2: 1 fields, expected 2"),  # not one column named "1,2"
        ("a b\n1 2\n3\n", r"line 3: 1 fields, expected 2"),
        (
            "sepal length\n5.1\nNA\n",
            r"missing value 'NA' at row 2 \(line 3\), column 'sepal length'",
        ),
        ("a;b\n1,5;2\n", r"column 'a' is not numeric \(line 2 holds '1,5'\)"),
        ("x y\n1\n2 3\n", r"line 2: 1 fields, expected 2"),
    ):
        p = tmp_path / "d.csv"
        p.write_text(text)
        with pytest.raises(ValueError, match=match):
            open_table(p).read()


def test_first_line_too_long(tmp_path, monkeypatch):
    monkeypatch.setattr(_read, "MAX_FIRST_LINE", 100)
    p = tmp_path / "d.csv"
    p.write_text("a" * 200 + "\n1\n")
    with pytest.raises(ValueError, match="first line is longer"):
        open_table(p)


def test_select_columns():
    names = ["id", "x", "y", "7"]
    assert select_columns(names, 4, ["y", "x"]) == [2, 1]
    assert select_columns(names, 4, ["0", 2, -1]) == [0, 2, 3]
    assert select_columns(names, 4, ["7"]) == [3]  # a header name wins over an index
    assert select_columns(names, 4, drop=["id"]) == [1, 2, 3]
    assert select_columns(None, 3, ["2", "0"], drop=[2]) == [0]
    for kw, match in [
        (
            {"columns": ["z"]},
            r"columns: no column named 'z'; the columns are "
            r"'id', 'x'",
        ),
        (
            {"columns": [4]},
            r"columns: column index 4 is out of range: the table "
            r"has 4 columns",
        ),
        ({"columns": ["x", 1]}, r"column 'x' is selected more than once"),
        ({"drop": ["id", "x", "y", "7"]}, r"drop: no column is left"),
        ({"drop": ["nope"]}, r"drop: no column named 'nope'"),
    ]:
        with pytest.raises(ColumnSelectionError, match=match):
            select_columns(names, 4, **kw)
    with pytest.raises(ColumnSelectionError, match="no header: select columns by 0-based"):
        select_columns(None, 3, ["x"])
    with pytest.raises(ColumnSelectionError, match="more than once; select it by index"):
        select_columns(["a", "a"], 2, ["a"])


def test_npy_is_memory_mapped_with_its_dtype(tmp_path):
    for dtype in (np.float32, np.float64):
        X = _data(50, 3).astype(dtype)
        p = tmp_path / f"{np.dtype(dtype).name}.npy"
        np.save(p, X)
        got = open_table(p).read()
        assert isinstance(got, np.memmap) and got.dtype == dtype
        np.testing.assert_array_equal(got, X)
    got = open_table(p, dtype="float32").read()  # asked: converted (a copy)
    assert not isinstance(got, np.memmap) and got.dtype == np.float32
    np.testing.assert_array_equal(open_table(p, columns=[2, 0]).read(), X[:, [2, 0]])
    ints = tmp_path / "ints.npy"
    np.save(ints, np.arange(12).reshape(6, 2))
    assert open_table(ints).read().dtype == np.float32
    vec = tmp_path / "vec.npy"
    np.save(vec, np.arange(5.0))
    assert open_table(vec).read().shape == (5, 1)
    bad = tmp_path / "nan.npy"
    np.save(bad, np.array([[1.0, 2.0], [3.0, np.nan]]))
    with pytest.raises(
        ValueError,
        match=r"missing value at row 2, column 1 \(0-based\)\. "
        r".*impute",
    ):
        open_table(bad).read()


def test_npz(tmp_path):
    X = _data(10, 2)
    p = tmp_path / "d.npz"
    np.savez(p, X=X, other=X[:, :1])
    np.testing.assert_array_equal(open_table(p).read(), X)
    np.testing.assert_array_equal(open_table(p, key="other").read(), X[:, :1])
    with pytest.raises(OptionError, match="has no array 'Y'") as info:
        open_table(p, key="Y")
    assert info.value.option == "key" and isinstance(info.value, ValueError)


@pytest.mark.parametrize("fmt", ["csr", "csc", "coo"])
def test_scipy_sparse_npz(tmp_path, fmt, monkeypatch):
    """A scipy.sparse.save_npz file is read as CSR, in blocks of rows, its columns
    chosen and its dtype converted as a dense table's; a NaN is named by its row
    (1-based) and column (0-based) as in a dense table."""
    import scipy.sparse as sp

    dense = np.where(_data(23, 5) > 0.5, _data(23, 5), 0.0)
    p = tmp_path / "s.npz"
    sp.save_npz(p, sp.coo_matrix(dense).asformat(fmt))
    monkeypatch.setattr(_read, "BLOCK_ROWS", 4)  # several blocks
    table = open_table(p)
    assert table.sparse and table.n_rows == 23 and table.dtype == np.float64
    got = table.read()
    assert sp.issparse(got) and got.format == "csr"
    np.testing.assert_array_equal(got.toarray(), dense)
    blocks = list(table.blocks())
    assert [b.shape[0] for b in blocks] == [4, 4, 4, 4, 4, 3]
    assert all(b.format == "csr" for b in blocks)
    np.testing.assert_array_equal(sp.vstack(blocks).toarray(), dense)
    chosen = open_table(p, columns=[3, 0], dtype="float32").read()
    assert chosen.dtype == np.float32
    np.testing.assert_array_equal(chosen.toarray(), dense[:, [3, 0]].astype(np.float32))
    ints = tmp_path / "ints.npz"
    sp.save_npz(ints, sp.csr_matrix(np.arange(12).reshape(6, 2)))
    assert open_table(ints).read().dtype == np.float32
    bad = dense.copy()
    bad[9, 2] = np.nan  # row 10, in the third block
    sp.save_npz(p, sp.csr_matrix(bad))
    with pytest.raises(ValueError, match=r"missing value at row 10, column 2 \(0-based\)"):
        open_table(p).read()


@pytest.mark.parametrize("suffix", [".parquet", ".feather"])
def test_arrow_files(tmp_path, suffix, block_bytes):
    pytest.importorskip("pyarrow")
    X = _data(40, 3)
    df = pd.DataFrame(X, columns=["a", "b", "c"])
    df.insert(0, "name", [f"n{i}" for i in range(40)])
    df["i"] = np.arange(40)
    p = tmp_path / f"d{suffix}"
    (df.to_parquet if suffix == ".parquet" else df.to_feather)(p)
    with pytest.raises(ValueError, match=r"column 'name' is not numeric \(type (large_)?string\)"):
        open_table(p)
    t = open_table(p, drop=["name"])
    assert t.names == ["a", "b", "c", "i"] and t.n_rows == 40
    want = np.column_stack([X, np.arange(40)]).astype(np.float32)
    np.testing.assert_array_equal(t.read(), want)
    np.testing.assert_array_equal(
        open_table(p, columns=["c", "a"], dtype="float64").read(), X[:, [2, 0]]
    )
    df.loc[17, "b"] = None
    (df.to_parquet if suffix == ".parquet" else df.to_feather)(p)
    with pytest.raises(
        ValueError,
        match=r"missing value \(null\) at row 18, column 'b'\. "
        r".*SimpleImputer",
    ):
        open_table(p, drop=["name"]).read()


@pytest.mark.parametrize("suffix", [".parquet", ".feather"])
def test_arrow_columns_sharing_a_name_are_chosen_by_position(tmp_path, suffix, block_bytes):
    """Parquet columns were fetched by name, so with a name held twice (a, b, a, c)
    the columns chosen by index got another column's values: drop=[2] (what mbkkm
    fit tells the user to do) read column 'b' from the second 'a'. Now the columns
    are chosen by position, in Parquet as in Feather."""
    pa = pytest.importorskip("pyarrow")
    X = _data(20, 4)
    tb = pa.table([pa.array(X[:, j]) for j in range(4)], names=["a", "b", "a", "c"])
    p = tmp_path / f"d{suffix}"
    if suffix == ".parquet":
        import pyarrow.parquet as pq

        pq.write_table(tb, p)
    else:
        import pyarrow.feather as feather

        feather.write_feather(tb, p)
    for columns, drop, want in (
        (None, [2], [0, 1, 3]),
        (None, [0], [1, 2, 3]),
        ([2, 1], None, [2, 1]),
        ([3, 2, 0], None, [3, 2, 0]),
        ([2], None, [2]),
        (["c", 0], None, [3, 0]),
        (None, None, [0, 1, 2, 3]),
    ):
        t = open_table(p, columns=columns, drop=drop, dtype="float64")
        assert t.names == [["a", "b", "a", "c"][j] for j in want]
        np.testing.assert_array_equal(t.read(), X[:, want])
        np.testing.assert_array_equal(np.concatenate(list(t.blocks())), X[:, want])


# ------------------------------------------------------------------------ writing
@pytest.mark.parametrize("suffix", [".txt", ".csv", ".tsv", ".npy", ".parquet", ".feather"])
@pytest.mark.parametrize("known", [True, False])
def test_writers_round_trip(tmp_path, suffix, known):
    if suffix in (".parquet", ".feather"):
        pytest.importorskip("pyarrow")
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 7, 1000).astype(np.int32)
    D = rng.random((1000, 3)).astype(np.float32)
    lp, dp = tmp_path / f"l{suffix}", tmp_path / f"d{suffix}"
    n = 1000 if known else None
    with (
        open_writer(lp, names=None, dtype=np.int32, n_rows=n) as lw,
        open_writer(dp, names=["d0", "d1", "d2"], dtype=np.float32, n_rows=n) as dw,
    ):
        for s in range(0, 1000, 300):
            lw.write(labels[s : s + 300])
            dw.write(D[s : s + 300])
    if suffix == ".npy":
        got_l, got_d = np.load(lp), np.load(dp)
    elif suffix == ".parquet":
        got_l, got_d = pd.read_parquet(lp)["label"], pd.read_parquet(dp).to_numpy()
    elif suffix == ".feather":
        got_l, got_d = pd.read_feather(lp)["label"], pd.read_feather(dp).to_numpy()
    else:
        sep = "\t" if suffix == ".tsv" else ","
        got_l = np.loadtxt(lp, dtype=np.int32)
        got_d = pd.read_csv(dp, sep=sep, header=None, dtype=np.float32).to_numpy()
    np.testing.assert_array_equal(got_l, labels)
    np.testing.assert_array_equal(got_d, D)  # float32 values read back exactly
    assert sorted(os.listdir(tmp_path)) == sorted([lp.name, dp.name])


@pytest.mark.parametrize("name", ["labels.npz", "d.NPZ", "labels.csv.gz", "d.zip"])
def test_writer_refuses_suffixes_of_formats_not_written(tmp_path, name):
    """Before, a .npz (or .gz) output received plain text under a binary format's
    name, which the reader then refused or misread; such a suffix is refused, the
    message listing the formats written, and no file is created."""
    with pytest.raises(ValueError, match=r"cannot write .*: the formats written are \.npy"):
        with open_writer(tmp_path / name, names=None, dtype=np.int32) as w:
            w.write(np.arange(3, dtype=np.int32))
    assert list(tmp_path.iterdir()) == []


def test_writer_error_keeps_the_old_file(tmp_path):
    p = tmp_path / "l.npy"
    np.save(p, np.arange(3))
    with (
        pytest.raises(ValueError, match="4 rows were written, 5 announced"),
        open_writer(p, names=None, dtype=np.int32, n_rows=5) as w,
    ):
        w.write(np.arange(4, dtype=np.int32))
    np.testing.assert_array_equal(np.load(p), np.arange(3))
    assert os.listdir(tmp_path) == ["l.npy"]


@pytest.mark.parametrize("d", [2, 3])
def test_pandas_index_header_is_a_header(tmp_path, d):
    X = _data(n=5, d=d)
    p = tmp_path / "b.csv"
    pd.DataFrame(X).to_csv(p, index=False)  # the header 0,1,...,d-1
    t = open_table(p)
    assert t.index_header and t.names == [str(j) for j in range(d)]
    np.testing.assert_allclose(t.read(), X.astype(np.float32), rtol=1e-6)
    t = open_table(p, header=False)  # read as data when asked
    assert not t.index_header and t.names is None and t.read().shape == (6, d)
    q = tmp_path / "c.csv"
    q.write_text("1,0\n0,1\n")  # numbers, but not the indices in order: data
    assert open_table(q).names is None and not open_table(q).index_header
    assert not open_table(tmp_path / "b.csv", header=True).index_header
    one = tmp_path / "one.csv"
    one.write_text("0\n1.5\n2\n")  # one column: its first value 0 is data
    assert open_table(one).names is None and open_table(one).read().shape == (3, 1)


@pytest.mark.parametrize("header", [True, False])
def test_utf8_byte_order_mark_is_skipped(tmp_path, block_bytes, header):
    X = _data(n=20, d=2)
    p = tmp_path / "bom.csv"
    rows = "".join(f"{a!r},{b!r}\n" for a, b in X.tolist())
    p.write_text(("a,b\n" if header else "") + rows, encoding="utf-8-sig")
    t = open_table(p)
    assert t.names == (["a", "b"] if header else None)
    np.testing.assert_array_equal(t.read(), X.astype(np.float32))


def test_compressed_and_utf16_text_are_refused_by_what_they_are(tmp_path):
    import bz2
    import gzip

    text = b"a,b,c\n1,2,3\n4,5,6\n"
    for name, data, kind in (
        ("d.csv.gz", gzip.compress(text), "gzip"),
        ("d.csv.bz2", bz2.compress(text), "bzip2"),
    ):
        (tmp_path / name).write_bytes(data)
        with pytest.raises(ValueError, match=f"is a {kind}-compressed file; decompress it"):
            open_table(tmp_path / name)
    (tmp_path / "u16.csv").write_bytes(text.decode().encode("utf-16"))
    with pytest.raises(ValueError, match=r"is not UTF-8 text \(UTF-16"):
        open_table(tmp_path / "u16.csv")


def test_thousands_separators_and_a_trailing_delimiter(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text('a,b\n"1,000",2\n"3,500",4e1\n')
    with pytest.raises(ValueError, match="looks like a number with thousands separators"):
        open_table(p).read()
    q = tmp_path / "q.csv"
    q.write_text("1,2,\n3,4,\n")  # no header: an empty last cell is no name
    table = open_table(q)
    assert table.file_names is None and table.n_file_columns == 3
    np.testing.assert_array_equal(open_table(q, drop=[2]).read(), [[1, 2], [3, 4]])
    r = tmp_path / "r.csv"
    r.write_text(",0,1\n0,5,6\n")  # pandas' index: its empty name first, still a header
    assert open_table(r).file_names == ["", "0", "1"]

"""A line longer than the reader's limit (a file without line ends, a binary file) is refused when the
reading reaches it — one line naming the file and the line, before a parser tries to hold it."""

import gzip
import io
import subprocess
import sys
import time

import pytest

from bnsl_cli.errors import InputDataError
from bnsl_cli.io import csv_source
from bnsl_cli.io.csv_reader import read_table
from bnsl_cli.io.csv_source import MAX_LINE_BYTES, may_hold_long_lines


@pytest.fixture
def small_limit(monkeypatch):
    monkeypatch.setattr(csv_source, "MAX_LINE_BYTES", 4096)
    return 4096


def _rows(k):
    return b"".join(b"%d,%d\n" % (i, 2 * i + (i % 3)) for i in range(k))


@pytest.mark.parametrize("where", ["first", "middle", "last"])
def test_a_long_line_is_refused_with_its_number(tmp_path, small_limit, where):
    long = b"1," * (small_limit // 2 + 10) + b"1\n"
    before = {"first": 0, "middle": 5000, "last": 20000}[where]
    body = b"a,b\n" + _rows(before) + long + (b"" if where == "last" else _rows(3000))
    path = tmp_path / "long.csv"
    path.write_bytes(body)
    assert may_hold_long_lines(path)  # a line of the limit's length holds a probe's stretch
    with pytest.raises(InputDataError) as exc:
        read_table(path)
    assert str(exc.value) == (f"{path}: line {before + 2} is longer than 4096 bytes "
                              "(a file without line ends, or not a CSV file)")


def test_lines_at_the_limit_are_read(tmp_path, small_limit):
    # "1,000…0": two cells, exactly the limit's bytes before its line end; one more byte is refused
    at = b"1," + b"0" * (small_limit - 2)
    for extra, ok in ((b"", True), (b"0", False)):
        path = tmp_path / f"wide{len(extra)}.csv"
        path.write_bytes(b"a,b\n" + _rows(100) + at + extra + b"\n" + _rows(100))
        if ok:
            assert read_table(path).X.shape == (201, 2)
        else:
            with pytest.raises(InputDataError, match="line 102 is longer than 4096 bytes"):
                read_table(path)
    header = ",".join(f"c{k}" for k in range(small_limit)).encode()
    (tmp_path / "header.csv").write_bytes(header + b"\n" + _rows(3))
    with pytest.raises(InputDataError, match="line 1 is longer than"):
        read_table(tmp_path / "header.csv")


def test_gzip_and_stdin_streams_are_checked_too(tmp_path, small_limit, monkeypatch):
    body = b"a,b\n" + _rows(50) + b"9," * small_limit + b"9\n" + _rows(10)
    gz = tmp_path / "long.csv.gz"
    gz.write_bytes(gzip.compress(body))
    with pytest.raises(InputDataError, match=r"long\.csv\.gz: line 52 is longer than"):
        read_table(gz)
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(body)))
    with pytest.raises(InputDataError, match="line 52 is longer than"):
        read_table("-")


def test_a_file_without_line_ends_exits_3_at_once_with_nothing_written(tmp_path):
    # the real limit: 80 MB of cells and no line end after the header
    path = tmp_path / "one-line.csv"
    with open(path, "wb") as fh:
        fh.write(b"a,b\n1,2\n")
        chunk = b"5," * (1 << 20)
        for _ in range((MAX_LINE_BYTES + (16 << 20)) // len(chunk)):
            fh.write(chunk)
        fh.write(b"6\n")
    assert may_hold_long_lines(path)
    out = tmp_path / "out"
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "bnsl_cli", "learn", str(path), "--out", str(out)],
                          capture_output=True, text=True)
    took = time.perf_counter() - t0
    assert proc.returncode == 3, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert lines == [f"error: {path}: line 3 is longer than 64 MB (a file without line ends, or not a CSV file)"]
    assert "Traceback" not in proc.stderr and not out.exists()
    assert took < 30, took  # (seen: 2 s; the parser used to hold the line: minutes, then MemoryError)

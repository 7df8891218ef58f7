"""Tests of the data reader (bnsl_cli.io.csv_reader, bnsl_cli.io.shards): every bad input gives an
InputDataError naming file, row and column."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bnsl_cli.errors import InputDataError, ShardMismatchError, SmallSampleWarning
from bnsl_cli.io.csv_reader import read_table
from bnsl_cli.io.shards import read_shards

#: these tests read files of a few rows on purpose: the small-sample warning they give is true, and is
#: asserted where it is the subject (tests/io/test_columns.py)
pytestmark = pytest.mark.filterwarnings("ignore::bnsl_cli.errors.SmallSampleWarning")


def write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


def test_reads_numbers_with_header(tmp_path):
    p = write(tmp_path, "ok.csv", "a,b,c\n1,2,3\n4,5.5,-6e-1\n")
    t = read_table(p)
    assert t.names == ("a", "b", "c") and (t.n, t.d) == (2, 3)
    np.testing.assert_array_equal(t.X, [[1, 2, 3], [4, 5.5, -0.6]])


@pytest.mark.parametrize(
    "text",
    [
        "\ufeffa,b\n1,2\n3,5\n",  # BOM
        "a,b\r\n1,2\r\n3,5\r\n",  # CRLF
        "a , b\n 1, 2\n3 ,5 \n",  # spaces around names and values
        '"a","b"\n"1",2\n3,"5"\n',  # quoted
        "\n\na,b\n1,2\n\n3,5\n",  # blank lines
    ],
)
def test_tolerated_variants(tmp_path, text):
    t = read_table(write(tmp_path, "v.csv", text))
    assert t.names == ("a", "b")
    np.testing.assert_array_equal(t.X, [[1, 2], [3, 5]])


BAD = {
    "empty": ("", "file is empty"),
    "whitespace": ("\n  \n", "file is empty"),
    "no_header": ("1,2\n3,4\n5,6\n", "no header row"),
    "text_cell": ("a,b\n1,2\n3,x\n", r"row 3, column 'b': 'x' is not a number"),
    "bool_cell": ("a,b\n1,True\n3,4\n", r"row 2, column 'b': 'True' is not a number"),
    "underscore": ("a,b\n1,2\n3,1_000\n", r"row 3, column 'b': '1_000' is not a number"),
    "comma_decimal": ('a,b\n1,"2,5"\n3,4\n', r"row 2, column 'b': '2,5' is not a number"),
    "nan": ("a,b\n1,2\nnan,4\n", r"row 3, column 'a': 'nan' is not a finite number"),
    "NA": ("a,b\n1,2\nNA,4\n", r"row 3, column 'a': missing value \('NA'\); pass --na drop-rows"),
    "inf": ("a,b\n1,-inf\n3,4\n", r"row 2, column 'b': '-inf' is not a finite number"),
    "overflow": ("a,b\n1,1e400\n3,4\n", r"row 2, column 'b': '1e400' is not a finite number"),
    "missing_value": ("a,b\n1,\n3,4\n", r"row 2, column 'b': missing value"),
    "short_row": ("a,b,c\n1,2,3\n4,5\n", "row 3 has 2 fields, the header has 3"),
    "long_row": ("a,b\n1,2\n3,4,5\n", "row 3 has 3 fields, the header has 2"),
    "duplicate": ("a,b,a\n1,2,3\n4,5,6\n", r"duplicate column name 'a' \(columns 1 and 3\)"),
    "empty_name": ("a,,c\n1,2,3\n4,5,6\n", "column 2 has an empty name"),
    "trailing_comma": ("a,b,\n1,2,\n3,4,\n", "column 3 has an empty name"),
    "constant": ("a,b\n1,7\n2,7\n3,7\n", r"column 'b' is constant \(7 in every row\)"),
    "one_row": ("a,b\n1,2\n", r"1 data row\(s\); at least 2"),
    "header_only": ("a,b\n", r"0 data row\(s\)"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input_names_file_row_and_column(tmp_path, case):
    text, message = BAD[case]
    p = write(tmp_path, f"{case}.csv", text)
    with pytest.raises(InputDataError, match=message) as info:
        read_table(p)
    assert str(info.value).startswith(str(p))


def test_row_numbers_count_leading_blank_lines(tmp_path):
    p = write(tmp_path, "b.csv", "\n\na,b\n1,2\n3,x\n")
    with pytest.raises(InputDataError, match="row 5, column 'b'"):
        read_table(p)


def test_missing_file_directory_binary(tmp_path):
    with pytest.raises(InputDataError, match="file not found"):
        read_table(tmp_path / "nope.csv")
    with pytest.raises(InputDataError, match="is a directory"):
        read_table(tmp_path)
    p = tmp_path / "bin.csv"
    p.write_bytes(b"a,b\n\xff\xfe,\x81\n")
    with pytest.raises(InputDataError, match="not a text file"):
        read_table(p)


def test_constant_check_and_min_rows_can_be_relaxed(tmp_path):
    p = write(tmp_path, "c.csv", "a,b\n1,7\n")
    t = read_table(p, min_rows=1, check_constant=False)
    assert t.X.tolist() == [[1.0, 7.0]]


def test_keep_reads_text_column(tmp_path):
    p = write(tmp_path, "k.csv", "site,a,b\nTrue,1,2\nx,3,5\n")
    t = read_table(p, keep=["site"])
    assert t.names == ("a", "b") and t.extra["site"].tolist() == ["True", "x"]
    with pytest.raises(InputDataError, match="no column named 'zz'"):
        read_table(p, keep=["zz"])


# ---------------------------------------------------------------------------------------------
# shards


def test_shards_with_permuted_columns_are_reordered(tmp_path):
    p1 = write(tmp_path, "s1.csv", "a,b,c\n1,2,3\n4,5,7\n")
    p2 = write(tmp_path, "s2.csv", "c,a,b\n30,10,20\n70,40,50\n")
    t1, t2 = read_shards([p1, p2])
    assert t1.names == t2.names == ("a", "b", "c")
    np.testing.assert_array_equal(t2.X, [[10, 20, 30], [40, 50, 70]])
    assert t2.path == p2


def test_shards_whose_columns_differ(tmp_path):
    p1 = write(tmp_path, "s1.csv", "a,b,c\n1,2,3\n4,5,7\n")
    p2 = write(tmp_path, "s2.csv", "a,b,d\n1,2,3\n4,5,7\n")
    with pytest.raises(ShardMismatchError, match=r"s2\.csv: columns differ from .*s1\.csv.*lacks 'c'.*extra 'd'"):
        read_shards([p1, p2])
    p3 = write(tmp_path, "s3.csv", "a,b\n1,2\n4,5\n")
    with pytest.raises(InputDataError, match=r"s3\.csv.*lacks 'c'"):
        read_shards([p1, p3])


def test_shards_validate_every_file(tmp_path):
    p1 = write(tmp_path, "s1.csv", "a,b\n1,2\n4,5\n")
    p2 = write(tmp_path, "s2.csv", "a,b\n1,2\n4,oops\n")
    with pytest.raises(InputDataError, match=r"s2\.csv: row 3, column 'b'"):
        read_shards([p1, p2])
    with pytest.raises(InputDataError, match="no data files"):
        read_shards([])


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(perm_seed=st.integers(0, 10_000), n=st.integers(2, 6), d=st.integers(1, 5))
def test_permuting_a_shard_columns_gives_the_same_table(tmp_path, perm_seed, n, d):
    rng = np.random.default_rng(perm_seed)
    X = rng.normal(size=(n, d)).round(6)
    X[0] += 1.0  # never constant
    names = [f"v{k}" for k in range(d)]
    perm = rng.permutation(d)

    def csv_text(cols):
        rows = [",".join(names[c] for c in cols)]
        rows += [",".join(repr(float(X[i, c])) for c in cols) for i in range(n)]
        return "\n".join(rows) + "\n"

    p1 = write(tmp_path, "ref.csv", csv_text(range(d)))
    p2 = write(tmp_path, "perm.csv", csv_text(perm))
    a, b = read_shards([p1, p2], min_columns=1)
    np.testing.assert_array_equal(a.X, X)
    np.testing.assert_array_equal(b.X, X)


# ---------------------------------------------------------------------------------------------
# separators, formats, standard input, hashing, progress (issue 12.10, 13.1)

import gzip  # noqa: E402
import hashlib  # noqa: E402
import io  # noqa: E402
import warnings  # noqa: E402

from bnsl_cli.errors import ConstantColumnWarning  # noqa: E402
from bnsl_cli.io.table import resolve_sep  # noqa: E402


def test_header_with_fewer_names_than_fields_is_an_error(tmp_path):
    # pandas would take the first column as the index and shift every name
    p = write(tmp_path, "idx.csv", "a,b\n0,1.5,2\n1,3.5,4\n2,5,7\n")
    with pytest.raises(InputDataError, match=r"idx\.csv: line 2 has 3 fields but the header \(line 1\) names 2"):
        read_table(p)


@pytest.mark.parametrize(
    "text, message",
    [
        ("a;b;c\n1.5;2;3\n2;3;4\n", r"line 1 \(header\) is one name 'a;b;c' holding ';'.*--sep ';'"),
        ("a;b\n1,5;2,25\n2,5;3\n", r"line 1 \(header\) .*--sep ';'"),
        ("a\tb\n1\t2\n3\t4\n", r"looks tab-separated; pass --sep tab"),
    ],
)
def test_other_separators_are_named(tmp_path, text, message):
    # with --sep forcing ',' (without it the separator is detected: tests/io/test_real_csvs.py)
    p = write(tmp_path, "s.csv", text)
    with pytest.raises(InputDataError, match=message) as info:
        read_table(p, sep=",")
    assert str(info.value).startswith(str(p)) and "\n" not in str(info.value)


def test_decimal_comma_with_sep_is_named(tmp_path):
    p = write(tmp_path, "dc.csv", "a;b\n1,5;2\n2;3\n")
    with pytest.raises(InputDataError, match=r"row 2, column 'a': '1,5' is not a number \(a decimal comma"):
        read_table(p, sep=";")
    # comma-separated with unquoted decimal commas: more fields than names on a later row
    p2 = write(tmp_path, "dc2.csv", "a,b\n1,2\n3,5,2,5\n")
    with pytest.raises(InputDataError, match=r"row 3 has 4 fields, the header has 2 \(a decimal comma"):
        read_table(p2)


def test_sep_option_tsv_and_gzip(tmp_path):
    want = [[1.0, 2.5], [3.0, -4.0]]
    assert read_table(write(tmp_path, "s.csv", "a;b\n1;2.5\n3;-4\n"), sep=";").X.tolist() == want
    assert read_table(write(tmp_path, "t.tsv", "a\tb\n1\t2.5\n3\t-4\n")).X.tolist() == want
    assert read_table(write(tmp_path, "t.txt", "a\tb\n1\t2.5\n3\t-4\n"), sep="tab").X.tolist() == want
    gz = tmp_path / "g.csv.gz"
    gz.write_bytes(gzip.compress(b"a,b\n1,2.5\n3,-4\n"))
    t = read_table(gz)
    assert t.X.tolist() == want and t.names == ("a", "b")
    assert t.sha256 == hashlib.sha256(gz.read_bytes()).hexdigest()  # the stored bytes
    tgz = tmp_path / "g.tsv.gz"
    tgz.write_bytes(gzip.compress(b"a\tb\n1\t2.5\n3\t-4\n"))
    assert read_table(tgz).X.tolist() == want
    bad = tmp_path / "bad.csv.gz"
    bad.write_bytes(b"not gzip at all\n")
    with pytest.raises(InputDataError, match=r"bad\.csv\.gz: not a valid gzip file"):
        read_table(bad)
    for s in ("", ";;", '"', "1", "."):
        with pytest.raises(ValueError, match="--sep"):
            resolve_sep("x.csv", s)


def test_stdin(tmp_path, monkeypatch):
    data = b"a,b\n1,2\n3,5\n"
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(data)))
    t = read_table("-")
    assert t.X.tolist() == [[1, 2], [3, 5]] and t.sha256 == hashlib.sha256(data).hexdigest()
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(gzip.compress(data))))
    assert read_table("-").X.tolist() == [[1, 2], [3, 5]]  # gzip on stdin: by its magic number
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"a,b\n1,2\n3,x\n")))
    with pytest.raises(InputDataError, match=r"^<stdin>: row 3, column 'b': 'x' is not a number"):
        read_table("-")


def test_sha256_and_progress_cover_every_byte(tmp_path):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60_000, 6))
    text = "a,b,c,d,e,f\n" + "".join(",".join(map(repr, r)) + "\n" for r in X.tolist())
    p = write(tmp_path, "big.csv", text)
    seen = []
    t = read_table(p, progress=lambda done, total: seen.append((done, total)))
    np.testing.assert_array_equal(t.X, X)  # exact round trip of repr floats, over many chunks
    assert t.sha256 == hashlib.sha256(p.read_bytes()).hexdigest()
    size = p.stat().st_size
    assert seen[-1] == (size, size) and len(seen) > 2
    assert all(a[0] <= b[0] for a, b in zip(seen, seen[1:]))


def test_bad_cell_far_into_a_big_file_names_its_line(tmp_path):
    lines = ["a,b"] + [f"{k},{k % 7}.5" for k in range(200_000)]
    lines[150_001] = "150000,oops"
    p = write(tmp_path, "far.csv", "\n".join(lines) + "\n")
    with pytest.raises(InputDataError, match=r"row 150002, column 'b': 'oops' is not a number"):
        read_table(p)


def test_header_words_do_not_trigger_false_alarms(tmp_path):
    p = write(tmp_path, "w.csv", "pressure,True_rate\n1,2\n3,5\n")
    assert read_table(p).names == ("pressure", "True_rate")


def test_column_order_is_applied_while_reading(tmp_path):
    p = write(tmp_path, "o.csv", "c,a,b\n3,1,2\n6,4,5\n")
    t = read_table(p, columns=("a", "b", "c"))
    assert t.names == ("a", "b", "c") and t.X.tolist() == [[1, 2, 3], [4, 5, 6]]
    assert t.X.flags.c_contiguous and t.X.flags.owndata


def test_constant_in_one_shard_warns_naming_file_and_column(tmp_path):
    p1 = write(tmp_path, "s1.csv", "a,b\n1,2\n4,2\n5,2\n")
    p2 = write(tmp_path, "s2.csv", "a,b\n1,2\n4,5\n5,7\n")
    with pytest.warns(ConstantColumnWarning, match=r"column 'b' is constant in .*s1\.csv \(1 of 2 shards\)"):
        t1, t2 = read_shards([p1, p2])
    assert t1.X[:, 1].tolist() == [2, 2, 2]
    p3 = write(tmp_path, "s3.csv", "a,b\n1,3\n4,3\n")
    with pytest.raises(InputDataError, match=r"column 'b' is constant in every shard"):
        read_shards([p1, p3])
    with pytest.raises(InputDataError, match=r"s1\.csv: column 'b' is constant in every row"):
        read_shards([p1])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.simplefilter("ignore", SmallSampleWarning)  # 5 rows: the small-sample warning is true
        read_shards([p2, write(tmp_path, "s4.csv", "b,a\n1,2\n4,5\n")])


def test_read_shards_progress_is_cumulative(tmp_path):
    p1 = write(tmp_path, "s1.csv", "a,b\n1,2\n4,5\n")
    p2 = write(tmp_path, "s2.csv", "a,b\n1,2\n4,7\n")
    seen = []
    read_shards([p1, p2], progress=lambda done, total: seen.append((done, total)))
    total = p1.stat().st_size + p2.stat().st_size
    assert seen[-1] == (total, total)


def test_many_chunks_and_a_growing_buffer_give_the_exact_table(tmp_path, monkeypatch):
    from bnsl_cli.io import csv_reader

    monkeypatch.setattr(csv_reader, "CHUNK_BYTES", 4096)  # 1024-row chunks
    rng = np.random.default_rng(1)
    X = rng.normal(size=(5_000, 3))
    text = "a,b,c\n" + "".join(",".join(map(repr, r)) + "\n" for r in X.tolist())
    gz = tmp_path / "g.csv.gz"
    gz.write_bytes(gzip.compress(text.encode()))  # unknown size: the buffer grows
    plain = write(tmp_path, "p.csv", text)
    for p in (gz, plain):
        t = read_table(p)
        np.testing.assert_array_equal(t.X, X)
        assert t.X.shape == (5_000, 3) and t.X.flags.owndata
    bad = write(tmp_path, "bad.csv", text.replace(repr(float(X[4321, 1])), "nan", 1))
    with pytest.raises(InputDataError, match=r"row 4323, column 'b': 'nan' is not a finite number"):
        read_table(bad)

"""Tests of bnsl_cli.io.data: every bad input gives an InputDataError naming file, row and column."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bnsl_cli.errors import InputDataError, ShardMismatchError
from bnsl_cli.io.data import read_shards, read_table


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
    "NA": ("a,b\n1,2\nNA,4\n", r"row 3, column 'a': 'NA' is not a number"),
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
    a, b = read_shards([p1, p2])
    np.testing.assert_array_equal(a.X, X)
    np.testing.assert_array_equal(b.X, X)

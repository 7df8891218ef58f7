"""Choosing columns and rows, reading other encodings and numeric headers, and the warnings about
identifier-like columns and small samples (issue 21 item 1)."""

from __future__ import annotations

import gzip
import hashlib
import warnings

import numpy as np
import pytest

from bnsl_cli.errors import (
    IdentifierColumnWarning,
    InputDataError,
    MissingRowsWarning,
    OptionError,
    ShardMismatchError,
    SmallSampleWarning,
)
from bnsl_cli.io.csv_reader import read_table
from bnsl_cli.io.shards import identifier_columns, read_shards, sample_warnings
from bnsl_cli.io.table import ReadOptions


def write(tmp_path, name, text, encoding="utf-8"):
    p = tmp_path / name
    p.write_bytes(text.encode(encoding))
    return p


def rows_text(header, X, fmt="{:.6f}"):
    lines = [",".join(header)]
    lines += [",".join(fmt.format(v) for v in row) for row in X]
    return "\n".join(lines) + "\n"


@pytest.fixture()
def quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SmallSampleWarning)
        yield


# --- columns ----------------------------------------------------------------------------------


def test_columns_select_and_order_and_ignore_text(tmp_path, quiet):
    p = write(tmp_path, "a.csv", "id,a,site,b,c\nP1,1,Zürich,2,3.5\nP2,4,Bern,5,6\nP3,7,Genf,8.5,9\n")
    t = read_table(p, options=ReadOptions(columns=("c", "a")))
    assert t.names == ("c", "a")
    assert t.X.tolist() == [[3.5, 1], [6, 4], [9, 7]]
    t = read_table(p, options=ReadOptions(drop=("site",), index_col="id"))
    assert t.names == ("a", "b", "c")
    assert t.X[:, 1].tolist() == [2, 5, 8.5]
    # without leaving the text columns out the file is refused, naming the column and the fix
    with pytest.raises(InputDataError, match=r"column 'id': 'P1' is not a number \(a text column\? .*--drop id"):
        read_table(p)


def test_columns_across_shards_other_columns_may_differ(tmp_path, quiet):
    p1 = write(tmp_path, "s1.csv", "a,b,c,x\n1,2,3,9\n4,5,7,9.5\n")
    p2 = write(tmp_path, "s2.csv", "c,a,b\n3,1,2\n6,4,5.5\n")  # no x, another order
    t1, t2 = read_shards([p1, p2], options=ReadOptions(columns=("a", "b", "c")))
    assert t1.names == t2.names == ("a", "b", "c")
    assert t2.X.tolist() == [[1, 2, 3], [4, 5.5, 6]]
    with pytest.raises(ShardMismatchError, match=r"s2\.csv: columns differ from .*s1\.csv \(lacks 'x'\)"):
        read_shards([p1, p2])
    p3 = write(tmp_path, "s3.csv", "a,b\n1,2\n3,5\n")
    with pytest.raises(InputDataError, match=r"s3\.csv: --columns names 'c', which is not a column"):
        read_shards([p1, p3], options=ReadOptions(columns=("a", "b", "c")))


def test_unknown_names_and_contradictions(tmp_path):
    p = write(tmp_path, "a.csv", "a,b,c\n1,2,3\n4,5,7\n")
    for opts, msg in (
        (ReadOptions(drop=("zz",)), r"--drop names 'zz', which is not a column \(columns: 'a', 'b', 'c'\)"),
        (ReadOptions(index_col="id"), r"--index-col names 'id'"),
    ):
        with pytest.raises(InputDataError, match=msg):
            read_table(p, options=opts)
    for opts, msg in (
        (ReadOptions(columns=("a", "b"), drop=("a",)), "both in --columns and in --drop"),
        (ReadOptions(columns=("a", "b"), index_col="a"), "--index-col 'a' is also in --columns"),
        (ReadOptions(columns=("a",)), "at least two columns"),
        (ReadOptions(columns=("a", "a")), "names 'a' twice"),
        (ReadOptions(na="skip"), "--na must be one of"),
        (ReadOptions(header="maybe"), "--header must be one of"),
        (ReadOptions(encoding="klingon"), "unknown encoding"),
    ):
        with pytest.raises(OptionError, match=msg):
            opts.check()


def test_too_few_columns_after_selection_and_a_single_column_file(tmp_path):
    p = write(tmp_path, "a.csv", "a,b,c\n1,2,3\n4,5,7\n")
    with pytest.raises(InputDataError, match=r"1 column\(s\) left \('c'\) after --columns/--drop/--index-col"):
        read_shards([p], options=ReadOptions(drop=("a", "b")))
    one = write(tmp_path, "one.csv", "a\n1\n2\n3\n")
    with pytest.raises(InputDataError, match=r"one\.csv: one column \('a'\); a graph needs at least two variables"):
        read_shards([one])
    assert read_table(one).d == 1  # a single table may have one column (split reads any file)


# --- missing values ---------------------------------------------------------------------------


def test_na_drop_rows_drops_rows_with_a_missing_value_in_used_columns_only(tmp_path, quiet):
    p = write(tmp_path, "m.csv", "a,b,note,c\n1,2,,3\n,5,x,6\n7,NA,y,9\n10,11,z,12.5\n13,nan,w,14\n16,17,,18\n")
    with pytest.raises(InputDataError, match=r"row 3, column 'a': missing value; pass --na drop-rows"):
        read_table(p, options=ReadOptions(drop=("note",)))
    with pytest.warns(MissingRowsWarning, match=r"m\.csv: dropped 3 of 6 rows that hold a missing value"):
        t = read_table(p, options=ReadOptions(drop=("note",), na="drop-rows"))
    assert t.X.tolist() == [[1, 2, 3], [10, 11, 12.5], [16, 17, 18]]
    assert t.dropped_rows == 3
    # a missing value in a column that is not used drops nothing
    q = write(tmp_path, "q.csv", "a,b,note\n1,2,\n3,5,x\n4,7,NA\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error", MissingRowsWarning)
        t = read_table(q, options=ReadOptions(drop=("note",), na="drop-rows"))
    assert t.n == 3 and t.dropped_rows == 0


def test_na_drop_rows_keeps_other_errors_and_counts_rows_left(tmp_path):
    p = write(tmp_path, "m.csv", "a,b\n1,2\n3,inf\n4,\n")
    with pytest.raises(InputDataError, match=r"row 3, column 'b': 'inf' is not a finite number"):
        read_table(p, options=ReadOptions(na="drop-rows"))
    q = write(tmp_path, "q.csv", "a,b\n1,\n,4\nNA,5\n7,8\n")
    with pytest.raises(InputDataError, match=r"1 data row\(s\) left after --na drop-rows dropped 3; at least 2"):
        read_table(q, options=ReadOptions(na="drop-rows"))
    r = write(tmp_path, "r.csv", "a,b\n1,2\n3,hello\n")
    with pytest.raises(InputDataError, match=r"row 3, column 'b': 'hello' is not a number"):
        read_table(r, options=ReadOptions(na="drop-rows"))


def test_na_drop_rows_large_file_pandas_path(tmp_path, quiet):
    rng = np.random.default_rng(1)
    X = rng.normal(size=(3000, 3))
    lines = ["a,b,c"] + [",".join(f"{v:.6f}" for v in row) for row in X]
    holes = [10, 999, 2500]
    for k in holes:
        lines[k + 1] = "," + lines[k + 1].split(",", 1)[1]  # column a empty
    p = write(tmp_path, "big.csv", "\n".join(lines) + "\n")
    with pytest.warns(MissingRowsWarning, match="dropped 3 of 3000"):
        t = read_table(p, options=ReadOptions(na="drop-rows"))
    np.testing.assert_allclose(t.X, np.delete(X, holes, axis=0).round(6), atol=1e-9)


# --- header and encoding ----------------------------------------------------------------------


def test_numeric_header_auto_yes_no(tmp_path, quiet):
    X = np.array([[1.5, 2.25, 3.0], [0.5, 1.0, 7.75], [2.5, 3.5, 1.25]])
    genes = write(tmp_path, "genes.csv", rows_text(["4", "8", "13"], X, "{:.2f}"))
    t = read_table(genes)  # integers over decimals: names
    assert t.names == ("4", "8", "13") and t.X.tolist() == X.tolist()
    ints = write(tmp_path, "ints.csv", "4,8,13\n1,2,3\n5,6,8\n2,9,1\n")
    with pytest.raises(InputDataError, match=r"no header row .*--header yes .*--header no"):
        read_table(ints)
    t = read_table(ints, options=ReadOptions(header="yes"))
    assert t.names == ("4", "8", "13") and t.n == 3
    t = read_table(ints, options=ReadOptions(header="no"))
    assert t.names == ("V1", "V2", "V3") and t.n == 4 and t.X[0].tolist() == [4, 8, 13]
    bad = write(tmp_path, "bad.csv", "1,2\n3,4\n5,x\n")
    with pytest.raises(InputDataError, match=r"row 3, column 'V2': 'x' is not a number"):
        read_table(bad, options=ReadOptions(header="no"))
    # words in the header: --header no reads them as data, and says where
    words = write(tmp_path, "words.csv", "a,b\n1,2\n3,4\n")
    with pytest.raises(InputDataError, match=r"row 1, column 'V1': 'a' is not a number"):
        read_table(words, options=ReadOptions(header="no"))


def test_latin1_file_message_and_encoding_option(tmp_path, quiet):
    text = "a,Größe,c\n1.5,2,3\n2,3.5,1\n3,1,2.5\n"
    p = write(tmp_path, "lat.csv", text, "latin-1")
    with pytest.raises(InputDataError) as info:
        read_table(p)
    assert str(info.value) == (
        f"{p}: not UTF-8 (line 1); it looks like Latin-1 — re-save it as UTF-8 or pass --encoding latin-1"
    )
    t = read_table(p, options=ReadOptions(encoding="latin-1"))
    assert t.names == ("a", "Größe", "c") and t.n == 3
    assert t.sha256 == hashlib.sha256(p.read_bytes()).hexdigest()  # of the bytes as stored
    w = write(tmp_path, "win.csv", "a,b“q”\n1.5,2\n2,3.5\n", "cp1252")
    with pytest.raises(InputDataError, match=r"looks like Windows-1252 .* --encoding cp1252"):
        read_table(w)
    u = write(tmp_path, "u16.csv", text, "utf-16")
    with pytest.raises(InputDataError, match=r"looks like UTF-16 .* --encoding utf-16"):
        read_table(u)
    assert read_table(u, options=ReadOptions(encoding="utf-16")).names == ("a", "Größe", "c")
    gz = tmp_path / "lat.csv.gz"
    gz.write_bytes(gzip.compress(text.encode("latin-1")))
    assert read_table(gz, options=ReadOptions(encoding="latin-1")).X.tolist() == t.X.tolist()
    binary = tmp_path / "bin.csv"
    binary.write_bytes(b"a,b\n\x00\x81,\x02\n")
    with pytest.raises(InputDataError, match="not a text file"):
        read_table(binary)


# --- warnings ---------------------------------------------------------------------------------


def _noise(n, d, seed=0):
    return np.random.default_rng(seed).normal(size=(n, d))


def test_identifier_like_columns(tmp_path):
    n = 60
    X = _noise(n, 3)
    ids = np.arange(1, n + 1)
    counts = np.random.default_rng(2).choice(10_000, size=n, replace=False)  # distinct integers, no order
    shuffled = np.random.default_rng(3).permutation(ids)  # a run of consecutive integers
    text = "id,a,b,c,count,rid\n" + "".join(
        f"{ids[i]},{X[i, 0]:.5f},{X[i, 1]:.5f},{X[i, 2]:.5f},{counts[i]},{shuffled[i]}\n" for i in range(n)
    )
    p = write(tmp_path, "d.csv", text)
    with pytest.warns(IdentifierColumnWarning) as rec:
        (t,) = read_shards([p])
    messages = [str(w.message) for w in rec if w.category is IdentifierColumnWarning]
    assert len(messages) == 2
    assert "column 'id' looks like a row identifier" in messages[0] and "--index-col id" in messages[0]
    assert "'rid'" in messages[1]
    assert identifier_columns([t]) == ["id", "rid"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        read_shards([p], options=ReadOptions(index_col="id", drop=("rid",)))
    # a short designed series (doses 1..5 in order) is no identifier
    short = write(tmp_path, "s.csv", "dose,y\n1,0.5\n2,1.7\n3,2.2\n4,3.9\n5,4.1\n")
    assert identifier_columns([read_table(short)]) == []


def test_identifier_is_checked_in_every_shard(tmp_path):
    n = 40
    X = _noise(2 * n, 2)
    p1 = write(tmp_path, "s1.csv", "k,a,b\n" + "".join(f"{i},{X[i, 0]:.5f},{X[i, 1]:.5f}\n" for i in range(n)))
    p2 = write(tmp_path, "s2.csv", "k,a,b\n" + "".join(
        f"{(7 * i) % 13 + 0.5},{X[n + i, 0]:.5f},{X[n + i, 1]:.5f}\n" for i in range(n)))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tables = read_shards([p1, p2])
    assert identifier_columns(tables) == []
    assert identifier_columns(tables[:1]) == ["k"]


def test_small_sample_warnings(tmp_path):
    d = 6
    few = write(tmp_path, "few.csv", rows_text([f"v{k}" for k in range(d)], _noise(4, d)))
    with pytest.warns(SmallSampleWarning, match=r"few\.csv: 4 rows in all for 6 variables \(fewer rows than variables\)"):
        read_shards([few])
    tiny = write(tmp_path, "tiny.csv", rows_text(["a", "b"], _noise(20, 2)))
    with pytest.warns(SmallSampleWarning, match=r"only 20 rows in all: below 50 rows .*0\.45"):
        read_shards([tiny])
    shards = [write(tmp_path, f"p{k}.csv", rows_text([f"v{j}" for j in range(d)], _noise(n, d, k)))
              for k, n in enumerate((100, 3))]
    with pytest.warns(SmallSampleWarning, match=r"p1\.csv: 3 rows for 6 variables .*1 of 2 shards"):
        read_shards(shards)
    # one site of a larger run (bnsl join): its total is unknown, only rows < variables is named
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sample_warnings([read_table(tiny)], whole=False)
    with pytest.warns(SmallSampleWarning, match=r"few\.csv: 4 rows for 6 variables .*this site"):
        sample_warnings([read_table(few)], whole=False)
    ok = write(tmp_path, "ok.csv", rows_text(["a", "b"], _noise(50, 2)))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        read_shards([ok])
        sample_warnings([])

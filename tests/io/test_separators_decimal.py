"""Real CSVs as sites write them (issue 29, item 5): each file's field separator detected on its own
(a ``;`` site and ``,`` sites read together; ``--sep`` still forces one), the decimal comma
(``--decimal ,``), what a read records of both (``ReadOptions.used``), and the reader that parses a
large local file by its path (pandas' parallel reader) judging every file exactly as before.
"""

from __future__ import annotations

import gzip
import io
import warnings

import numpy as np
import pytest

from bnsl_cli.errors import DataWarning, InputDataError, OptionError
from bnsl_cli.io import csv_reader
from bnsl_cli.io.columns import detect_separator
from bnsl_cli.io.csv_reader import file_separator, read_table
from bnsl_cli.io.shards import read_shards
from bnsl_cli.io.table import ReadOptions
from tests._shards import SMALL_COLUMNS, write_small_shards
from tests.io.test_data_small import CASES as SMALL_CASES

COMMA = ReadOptions(decimal=",")


def write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return p


def rewrite(src, dst, sep=",", decimal="."):
    """``src`` (a comma-separated file with '.' decimals) written with ``sep`` and ``decimal``."""
    text = src.read_text()
    if decimal != ".":
        text = text.replace(".", decimal.replace(",", "\0"))
    text = text.replace(",", sep).replace("\0", ",")
    dst.write_text(text)
    return dst


# ---------------------------------------------------------------------------------------------
# 1. each file's separator, detected


def test_a_semicolon_a_tab_and_a_pipe_site_read_with_comma_sites(tmp_path):
    plain = sorted(write_small_shards(tmp_path / "plain", participants=5).glob("*.csv"))
    mixed = [plain[0], rewrite(plain[1], tmp_path / "semi.csv", ";"), rewrite(plain[2], tmp_path / "tab.csv", "\t"),
             rewrite(plain[3], tmp_path / "pipe.txt", "|"), plain[4]]
    tables = read_shards(mixed)
    refs = read_shards(plain)
    assert [t.sep for t in tables] == [",", ";", "\t", "|", ","]
    for t, r in zip(tables, refs):
        assert t.names == r.names == SMALL_COLUMNS and np.array_equal(t.X, r.X)
    # what a report records: the separator of each shard, in order
    assert ReadOptions().used(tables).separators == (",", ";", "\t", "|", ",")
    # files read the way their extension says record nothing (the options stay the defaults)
    assert ReadOptions().used(refs) == ReadOptions()


@pytest.mark.parametrize(
    "name, text, sep, names, X",
    [
        # quoted names holding another separator
        ("q.csv", '"a;1","b"\n1,2\n3,4\n', ",", ("a;1", "b"), [[1, 2], [3, 4]]),
        ("q2.csv", '"x,y";"z"\n1;2\n3;4\n', ";", ("x,y", "z"), [[1, 2], [3, 4]]),
        # a one-column file: no separator splits anything, the extension's default stands
        ("one.csv", "a\n1\n2\n", ",", ("a",), [[1], [2]]),
        ("one.tsv", "a\n1\n2\n", "\t", ("a",), [[1], [2]]),
        # a tab-separated file named .csv, a ';' file with CRLF and blank lines before its header
        ("t.csv", "a\tb\n1\t2.5\n3\t-4\n", "\t", ("a", "b"), [[1, 2.5], [3, -4]]),
        ("crlf.csv", "\r\n\r\na;b\r\n1;2\r\n\r\n3;4\r\n", ";", ("a", "b"), [[1, 2], [3, 4]]),
        # pandas' to_csv(sep=";"): an unnamed first column of row labels
        ("labels.csv", ";a;b\n0;1;2\n1;3;4\n", ";", ("a", "b"), [[1, 2], [3, 4]]),
        # a header of numbers over decimals (gene ids), ';'-separated
        ("genes.csv", "101;102\n1.5;2.5\n3.5;4.5\n", ";", ("101", "102"), [[1.5, 2.5], [3.5, 4.5]]),
        # a text column holding commas does not make the file comma-separated
        ("text.csv", "site;a;b\nBasel, CH;1;2\nBern, CH;3;4\n", ";", None, [[1, 2], [3, 4]]),
        # no final newline, one data row
        ("short.csv", "a|b\n1|2", "|", ("a", "b"), [[1, 2]]),
    ],
)
def test_the_separator_is_detected(tmp_path, name, text, sep, names, X):
    p = write(tmp_path, name, text)
    opts = ReadOptions(drop=("site",)) if "site" in text else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DataWarning)
        t = read_table(p, min_rows=1, options=opts, check_constant=False)
    assert t.sep == sep and file_separator(p) == sep
    assert t.names == (names or ("a", "b")) and t.X.tolist() == X


def test_header_no_gzip_and_standard_input_are_detected_too(tmp_path, monkeypatch):
    p = write(tmp_path, "h.csv", "1;2\n3;4.5\n")
    t = read_table(p, options=ReadOptions(header="no"))
    assert t.sep == ";" and t.names == ("V1", "V2") and t.X.tolist() == [[1, 2], [3, 4.5]]
    gz = tmp_path / "g.csv.gz"
    gz.write_bytes(gzip.compress(b"a;b\n1;2\n3;5\n"))
    assert read_table(gz).sep == ";" and read_table(gz).X.tolist() == [[1, 2], [3, 5]]
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"a\tb\n1\t2\n3\t5\n")))
    t = read_table("-")
    assert t.sep == "\t" and t.X.tolist() == [[1, 2], [3, 5]]


def test_a_separator_given_is_not_second_guessed(tmp_path):
    p = write(tmp_path, "s.csv", "a;b\n1;2\n3;4\n")
    with pytest.raises(InputDataError, match=r"s\.csv: line 1 \(header\) .*pass --sep ';'"):
        read_table(p, sep=",")
    with pytest.raises(InputDataError, match=r"s\.csv: line 1 \(header\) .*pass --sep ';'"):
        read_table(p, options=ReadOptions(sep=","))
    with pytest.raises(InputDataError, match="--sep must be one character"):
        read_table(p, sep=";;")
    with pytest.raises(OptionError, match="--sep must be one character"):
        ReadOptions(sep="ab").check()


@pytest.mark.parametrize(
    "text, candidates, settle, X",
    [
        # two fields and one number per line either way
        ("a,b;c\n1,2;3\n4,5;6\n", "',' and ';'", {"sep": ";", "options": COMMA}, [[1.2, 3], [4.5, 6]]),
        ("a|b\tc\n1|2\t3\n4|5\t6\n", "tab and '|'", {"sep": "tab", "options": ReadOptions(drop=("a|b",))}, [[3], [6]]),
    ],
)
def test_a_file_that_splits_as_well_on_two_separators_is_an_error_naming_it(tmp_path, text, candidates, settle, X):
    p = write(tmp_path, "amb.csv", text)
    with pytest.raises(InputDataError) as info:
        read_table(p)
    msg = str(info.value)
    assert msg.startswith(f"{p}: cannot tell the field separator") and candidates in msg and "pass --sep" in msg
    assert "\n" not in msg
    with pytest.raises(InputDataError, match="cannot tell"):
        read_shards([p, p])
    assert read_table(p, **settle).X.tolist() == X  # --sep settles it


def test_a_row_that_breaks_the_pattern_is_named_by_the_reader(tmp_path):
    # the header and the first rows agree on ','; a later row has one field too many
    p = write(tmp_path, "r.csv", "a,b\n1,2\n3,4\n5,6,7\n")
    with pytest.raises(InputDataError, match=r"r\.csv: row 4 has 3 fields, the header has 2"):
        read_table(p)
    # an index column without a name: still the header's error, not a guess
    p = write(tmp_path, "i.csv", "a,b\n0,1.5,2\n1,3.5,4\n")
    with pytest.raises(InputDataError, match=r"i\.csv: line 2 has 3 fields but the header \(line 1\) names 2"):
        read_table(p)


def test_detection_looks_at_the_first_lines_only():
    line = "a;b"
    rest = b"".join(b"%d;%d\n" % (k, k) for k in range(5000))
    assert detect_separator("x.csv", line, rest) == ";"
    # a partial last line in the sample is not held against a separator
    assert detect_separator("x.csv", line, rest[:70000]) == ";"
    # a file whose first row is longer than the sample: the header decides (the most fields)
    wide = b";".join(b"1.5" for _ in range(400_000))
    assert detect_separator("x.csv", "g;1,g;2,h,k", wide) == ","
    assert detect_separator("x.csv", "g;1;g,2;h;k", wide) == ";"
    with pytest.raises(InputDataError, match="cannot tell the field separator"):
        detect_separator("x.csv", "g;1,g;2,h", wide)


# ---------------------------------------------------------------------------------------------
# 2. the decimal comma


def test_decimal_comma_with_semicolons_reads_beside_comma_sites(tmp_path):
    plain = sorted(write_small_shards(tmp_path / "plain", participants=3).glob("*.csv"))
    mixed = [plain[0], rewrite(plain[1], tmp_path / "de.csv", ";", ","),
             rewrite(plain[2], tmp_path / "tab.csv", "\t", ",")]
    assert "1," in mixed[1].read_text() and "." not in mixed[1].read_text()
    refs = read_shards(plain)
    tables = read_shards(mixed, options=COMMA)
    for t, r in zip(tables, refs):
        assert np.array_equal(t.X, r.X) and t.names == r.names
    assert [(t.sep, t.decimal) for t in tables] == [(",", "."), (";", ","), ("\t", ",")]
    # without --decimal , the decimal comma is named, with the option to use
    with pytest.raises(InputDataError, match=r"de\.csv: row 2, column 'a': '[-0-9,]+' is not a number \(a decimal comma\? "
                       r"pass --decimal ,\)"):
        read_shards(mixed)


@pytest.mark.parametrize("small", [True, False])
def test_decimal_comma_reads_the_same_on_both_parsers(tmp_path, monkeypatch, small):
    if not small:
        monkeypatch.setattr(csv_reader, "SMALL_INPUT_BYTES", -1)
    plain = write_small_shards(tmp_path / "plain", participants=1) / "participant-01.csv"
    de = rewrite(plain, tmp_path / "de.csv", ";", ",")
    assert read_table(de, options=COMMA).X.tobytes() == read_table(plain).X.tobytes()
    # a '.' beside decimal commas is no number (a thousands separator, most likely)
    bad = write(tmp_path, "bad.csv", "a;b\n1,5;2\n1.500,25;3\n")
    with pytest.raises(InputDataError, match=r"bad\.csv: row 3, column 'a': '1\.500,25' is not a number \(with --decimal , "
                       r"a '\.' is no decimal mark"):
        read_table(bad, options=COMMA)
    # missing values and --na drop-rows work as with '.'
    na = write(tmp_path, "na.csv", "a;b\n1,5;2\nNA;3\n4;5,25\n")
    with pytest.warns(UserWarning, match="dropped 1 of 3 rows"):
        assert read_table(na, options=ReadOptions(decimal=",", na="drop-rows")).X.tolist() == [[1.5, 2], [4, 5.25]]
    inf = write(tmp_path, "inf.csv", "a;b\n1,5;2\ninf;3\n")
    with pytest.raises(InputDataError, match=r"row 3, column 'a': 'inf' is not a finite number"):
        read_table(inf, options=COMMA)


def test_decimal_comma_options(tmp_path):
    with pytest.raises(OptionError, match=r"--decimal must be \. or ,"):
        ReadOptions(decimal=";").check()
    with pytest.raises(OptionError, match=r"--sep ',' and --decimal , cannot be the same character"):
        ReadOptions(sep=",", decimal=",").check()
    p = write(tmp_path, "c.csv", "a,b\n1.5,2\n3,4\n")
    with pytest.raises(OptionError, match="cannot be the same character"):
        read_table(p, sep=",", options=COMMA)
    # a comma-separated file keeps '.' under --decimal , (its numbers cannot hold an unquoted comma)
    t = read_table(p, options=COMMA)
    assert (t.sep, t.decimal) == (",", ".") and t.X.tolist() == [[1.5, 2], [3, 4]]
    # a headerless decimal-comma file: its first line holds numbers, not names
    h = write(tmp_path, "h.csv", "1,5;2,5\n3,5;4\n")
    with pytest.raises(InputDataError, match=r"h\.csv: no header row \(the first line holds numbers\)"):
        read_table(h, options=COMMA)
    t = read_table(h, options=ReadOptions(decimal=",", header="no"))
    assert t.names == ("V1", "V2") and t.X.tolist() == [[1.5, 2.5], [3.5, 4]]


def test_read_options_round_trip_through_a_report_entry():
    opts = ReadOptions(drop=("site",), index_col="id", decimal=",", separators=(",", ";")).check()
    entry = {**opts.to_dict(), "dropped_rows": [0, 0]}
    assert ReadOptions.from_dict(entry) == opts
    # an entry written before decimal and sep existed reads as their defaults; an earlier report's
    # keys are unchanged for options that do not use them
    old = {"columns": None, "drop": ["x"], "index_col": None, "na": "error", "header": "auto", "encoding": "utf-8"}
    assert ReadOptions.from_dict(old) == ReadOptions(drop=("x",))
    assert ReadOptions(drop=("x",)).to_dict() == old


# ---------------------------------------------------------------------------------------------
# 3. a large local file is parsed by its path: the same table, the same errors


def big_text(rows: int = 60_000, sep: str = ",", seed: int = 0) -> str:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(rows, 6)) * 1e3
    return sep.join(f"x{j}" for j in range(6)) + "\n" + "".join(sep.join(map(repr, r)) + "\n" for r in X.tolist())


def both_routes(p, **kw):
    """The outcome of reading ``p`` by its path and from its bytes in hand (the chunked parser)."""
    out = []
    for data in (None, p.read_bytes()):
        try:
            t = read_table(p, data=data, **kw)
            out.append(("ok", t.names, t.X.tobytes(), t.X.flags.c_contiguous, t.X.flags.owndata, t.sha256, t.sep))
        except InputDataError as exc:
            out.append(("error", str(exc)))
    return out


@pytest.mark.parametrize(
    "case",
    ["clean", "text_cell_late", "nan_late", "inf_late", "long_row_late", "missing_late", "drop_rows", "underscore",
     "semicolon_decimal_comma", "quoted_newline"],
)
def test_a_large_file_reads_the_same_by_path_and_from_bytes(tmp_path, case):
    text = big_text()
    assert len(text) > 6 << 20  # pandas reads a file of more than 5 MB in parallel
    lines = text.split("\n")
    opts = None
    if case == "text_cell_late":
        lines[-30] = "oops," + lines[-30].split(",", 1)[1]
    elif case == "nan_late":
        lines[-30] = "nan," + lines[-30].split(",", 1)[1]
    elif case == "inf_late":
        lines[-30] = "-inf," + lines[-30].split(",", 1)[1]
    elif case == "long_row_late":
        lines[-30] += ",1"
    elif case == "missing_late":
        lines[-30] = "," + lines[-30].split(",", 1)[1]
    elif case == "drop_rows":
        lines[-30] = "NA," + lines[-30].split(",", 1)[1]
        opts = ReadOptions(na="drop-rows")
    elif case == "underscore":
        lines[-30] = "1_000," + lines[-30].split(",", 1)[1]
    elif case == "semicolon_decimal_comma":
        lines = [ln.replace(",", ";").replace(".", ",") for ln in lines]
        opts = COMMA
    elif case == "quoted_newline":
        lines[40_000] = '"1\n2",' + lines[40_000].split(",", 1)[1]
    p = write(tmp_path, "big.csv", "\n".join(lines))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        by_path, in_hand = both_routes(p, options=opts)
    assert by_path == in_hand
    if case in ("clean", "drop_rows", "semicolon_decimal_comma"):
        assert by_path[0] == "ok"
        if case == "clean":
            ref = np.array([[float(c) for c in ln.split(",")] for ln in lines[1:] if ln])
            assert by_path[2] == ref.tobytes()
    else:
        assert by_path[0] == "error" and by_path[1].startswith(f"{p}: ") and "\n" not in by_path[1]
        if case != "quoted_newline":
            assert f"row {len(lines) - 29}" in by_path[1], by_path[1]


@pytest.mark.parametrize("name", sorted(SMALL_CASES))
@pytest.mark.parametrize("header", ["auto", "no"])
def test_every_small_case_reads_the_same_by_path_and_from_bytes(tmp_path, monkeypatch, name, header):
    monkeypatch.setattr(csv_reader, "SMALL_INPUT_BYTES", -1)  # the pandas way, not numpy's
    p = tmp_path / f"{name}.csv"
    p.write_bytes(SMALL_CASES[name].encode("utf-8"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        by_path, in_hand = both_routes(p, options=ReadOptions(header=header), min_rows=1, check_constant=False)
    assert by_path == in_hand


def test_an_error_reading_the_bytes_for_the_hash_is_raised_by_the_reader(tmp_path, monkeypatch):
    from bnsl_cli.io.csv_source import Source

    monkeypatch.setattr(csv_reader, "SMALL_INPUT_BYTES", -1)
    p = write(tmp_path, "h.csv", "a,b\n1,2\n3,5\n")

    def failing(self):
        raise InputDataError(f"{self.path}: cannot read (Input/output error)")

    monkeypatch.setattr(Source, "consume", failing)
    with pytest.raises(InputDataError, match=r"h\.csv: cannot read \(Input/output error\)"):
        read_table(p)

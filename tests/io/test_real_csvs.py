"""CSV files as other tools write them: the unnamed first column of row labels that R's ``write.csv(df)``
and pandas' ``df.to_csv()`` write (read as row labels and left out, with one note), ``--drop`` of a
column only some shards have, and ``--out -`` (refused: a folder is needed, stdout has its own options).
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

from bnsl_cli.errors import DataWarning, InputDataError
from bnsl_cli.io.csv_reader import read_table
from bnsl_cli.io.shards import read_shards
from bnsl_cli.io.table import ReadOptions
from tests._cli import run
from tests._shards import SMALL_COLUMNS, write_small_shards

FAST = ("--rounds", "20", "--no-polish", "--seed", "1", "-q")
NOTE = "the unnamed first column is read as row labels"


def with_row_labels(src: Path, dst: Path, style: str) -> Path:
    """``src`` rewritten with a first column of row labels as R (``"",…``; 1..n) or pandas (``,…``; 0..n-1)
    write it, or with arbitrary integer labels (``labels``)."""
    lines = src.read_text().splitlines()
    if style == "r":
        head = '"",' + ",".join(f'"{h}"' for h in lines[0].split(","))
        labels = [str(k + 1) for k in range(len(lines) - 1)]
    elif style == "pandas":
        head = "," + lines[0]
        labels = [str(k) for k in range(len(lines) - 1)]
    else:
        head = "," + lines[0]
        labels = [str(1000 - 7 * k) for k in range(len(lines) - 1)]
    dst.write_text("\n".join([head] + [f"{lab},{ln}" for lab, ln in zip(labels, lines[1:])]) + "\n")
    return dst


def notes(record) -> list[str]:
    return [str(w.message) for w in record if issubclass(w.category, DataWarning) and NOTE in str(w.message)]


# ---------------------------------------------------------------------------------------------
# 1. the unnamed first column of row labels


@pytest.mark.parametrize("style", ["r", "pandas", "labels"])
def test_unnamed_first_column_is_read_as_row_labels_with_one_note(tmp_path, style):
    plain = write_small_shards(tmp_path / "plain", participants=1) / "participant-01.csv"
    p = with_row_labels(plain, tmp_path / "site1.csv", style)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        t = read_table(p)
    ref = read_table(plain)
    assert t.names == SMALL_COLUMNS and np.array_equal(t.X, ref.X)
    (note,) = notes(rec)
    assert note.startswith(f"{p}: {NOTE}")


def test_row_labels_across_shards_give_one_note_naming_the_files(tmp_path):
    plain = write_small_shards(tmp_path / "plain", participants=3)
    files = sorted(plain.glob("*.csv"))
    mixed = [with_row_labels(files[0], tmp_path / "s1.csv", "r"), with_row_labels(files[1], tmp_path / "s2.csv", "pandas"),
             files[2]]
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        tables = read_shards(mixed)
    refs = read_shards(files)
    assert all(np.array_equal(a.X, b.X) and a.names == b.names for a, b in zip(tables, refs))
    (note,) = notes(rec)
    assert note.startswith(f"{mixed[0]}, {mixed[1]} (2 of 3 shards): {NOTE}")


def test_index_col_empty_chooses_the_row_labels_without_a_note(tmp_path):
    plain = write_small_shards(tmp_path / "plain", participants=1) / "participant-01.csv"
    p = with_row_labels(plain, tmp_path / "site1.csv", "pandas")
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        t = read_table(p, options=ReadOptions(index_col=""))
    assert t.names == SMALL_COLUMNS and not notes(rec)


def test_index_col_keeps_working_beside_row_labels(tmp_path):
    p = tmp_path / "site1.csv"
    p.write_text(",id,a,b\n0,x1,1.5,2\n1,x2,3.5,4\n2,x3,0.5,9\n")
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        t = read_table(p, options=ReadOptions(index_col="id"))
    assert len(notes(rec)) == 1
    assert t.names == ("a", "b") and t.X.tolist() == [[1.5, 2], [3.5, 4], [0.5, 9]]


def test_text_row_labels_are_left_out_too(tmp_path):
    p = tmp_path / "mtcars.csv"
    p.write_text('"","mpg","cyl"\n"Mazda RX4",21,6\n"Datsun 710",22.8,4\n"Valiant",18.1,6\n')
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t = read_table(p)
    assert t.names == ("mpg", "cyl") and t.X[:, 0].tolist() == [21, 22.8, 18.1]


@pytest.mark.parametrize(
    "text, message",
    [
        ("a,,c\n1,2,3\n4,5,6\n", "column 2 has an empty name"),
        (",a,\n1,2,3\n4,5,6\n", "column 3 has an empty name"),
    ],
)
def test_an_empty_name_elsewhere_is_still_an_error(tmp_path, text, message):
    p = tmp_path / "bad.csv"
    p.write_text(text)
    with pytest.raises(InputDataError, match=message) as info:
        read_table(p)
    assert str(info.value).startswith(str(p))


def test_learn_reads_r_and_pandas_files_like_plain_ones(tmp_path):
    plain = write_small_shards(tmp_path / "plain", participants=3)
    files = sorted(plain.glob("*.csv"))
    labelled = [with_row_labels(f, tmp_path / f"s{k}.csv", "r" if k % 2 else "pandas") for k, f in enumerate(files)]
    ref = run("learn", *files, *FAST)
    res = run("learn", *labelled, *FAST)
    assert ref.exit_code == 0 and res.exit_code == 0, res.stderr
    assert res.stdout == ref.stdout
    lines = [ln for ln in res.stderr.splitlines() if NOTE in ln]
    assert len(lines) == 1 and "(3 of 3 shards)" in lines[0] and "Traceback" not in res.stderr


# ---------------------------------------------------------------------------------------------
# 2. --drop of a column only some shards have


def _with_site_column(src: Path, dst: Path) -> Path:
    lines = src.read_text().splitlines()
    dst.write_text("\n".join([lines[0] + ",site"] + [ln + ",north" for ln in lines[1:]]) + "\n")
    return dst


def test_drop_a_column_some_shards_lack(tmp_path):
    files = sorted(write_small_shards(tmp_path / "plain", participants=3).glob("*.csv"))
    mixed = sorted(write_small_shards(tmp_path / "mixed", participants=3).glob("*.csv"))
    _with_site_column(files[1], mixed[1])
    tables = read_shards(mixed, options=ReadOptions(drop=("site",)))
    refs = read_shards(files)
    assert all(np.array_equal(a.X, b.X) and a.names == b.names for a, b in zip(tables, refs))
    res = run("learn", *mixed, "--drop", "site", *FAST)
    ref = run("learn", *files, *FAST)
    assert res.exit_code == 0 and ref.exit_code == 0 and res.stdout == ref.stdout


def test_drop_a_column_no_shard_has_is_an_error_naming_it(tmp_path):
    files = sorted(write_small_shards(tmp_path / "plain", participants=3).glob("*.csv"))
    with pytest.raises(InputDataError, match=r"--drop names 'site', which is not a column of any of them"):
        read_shards(files, options=ReadOptions(drop=("site",)))
    res = run("learn", *files, "--drop", "site", *FAST)
    assert res.exit_code == 3 and res.stdout == ""
    (line,) = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert line.startswith(f"error: {files[0]} and the 2 other shard(s): --drop names 'site'")


def test_drop_on_one_file_still_names_a_missing_column(tmp_path):
    (f,) = sorted(write_small_shards(tmp_path / "plain", participants=1).glob("*.csv"))
    with pytest.raises(InputDataError, match=r"--drop names 'site', which is not a column \(columns: 'a'"):
        read_shards([f], options=ReadOptions(drop=("site",)))


# ---------------------------------------------------------------------------------------------
# 3. --out - is refused: a folder is needed


@pytest.mark.parametrize("command", ["learn", "refit", "split"])
def test_out_dash_is_a_usage_error_and_makes_no_folder(tmp_path, monkeypatch, command):
    files = sorted(write_small_shards(tmp_path / "plain", participants=2).glob("*.csv"))
    monkeypatch.chdir(tmp_path)
    args = {
        "learn": ("learn", *files, *FAST),
        "refit": ("refit", files[0], *files),
        "split": ("split", files[0], "--participants", "2"),
    }[command]
    res = run(*args, "--out", "-")
    assert res.exit_code == 2 and res.stdout == "" and "Traceback" not in res.stderr
    (line,) = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert line.startswith("error: --out takes a folder") and "not - (standard output)" in line
    assert not (tmp_path / "-").exists()


def test_a_value_whose_square_overflows_is_bad_input(tmp_path):
    # 1e308 used to reach the sites' arithmetic in a non-private run: exit 6 "participant 1 sent a value …" and a numpy
    # overflow warning on the terminal; it is bad input, named by file, column and row (exit 3)
    import subprocess
    import sys

    f = tmp_path / "big.csv"
    rows = [f"{(7 * i) % 5},{'1e308' if i == 3 else 2 * i + (i % 3)},{i % 4}\n" for i in range(1, 61)]
    f.write_text("a,b,c\n" + "".join(rows))
    proc = subprocess.run([sys.executable, "-m", "bnsl_cli", "learn", str(f), str(f), "--out", str(tmp_path / "o")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 3, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "column 'b', data row 3: 1e+308 is too large" in lines[0]
    assert "Traceback" not in proc.stderr and "RuntimeWarning" not in proc.stderr
    assert not (tmp_path / "o").exists()

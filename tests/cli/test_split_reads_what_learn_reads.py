"""`bnsl split` reads what `bnsl learn` reads (issue 46, item 3): text columns are copied as text,
--drop / --columns / --index-col / --na / --sep / --decimal apply as in learn, and --by takes a text
column — a real export (penguins by island) splits without editing it first."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from bnsl_cli.cli.app import app

runner = CliRunner()

PENGUINS = (
    "rowid,species,island,bill_length_mm,bill_depth_mm,flipper_length_mm,body_mass_g,sex,year\n"
    "1,Adelie,Torgersen,39.1,18.7,181,3750,male,2007\n"
    "2,Adelie,Torgersen,39.5,17.4,186,3800,female,2007\n"
    "3,Adelie,Torgersen,40.3,18,195,3250,female,2007\n"
    "4,Adelie,Torgersen,NA,NA,NA,NA,NA,2007\n"
    "5,Adelie,Biscoe,36.7,19.3,193,3450,female,2008\n"
    "6,Gentoo,Biscoe,46.1,13.2,211,4500,female,2007\n"
    "7,Gentoo,Biscoe,50,16.3,230,5700,male,2007\n"
    "8,Gentoo,Biscoe,48.7,14.1,210,4450,NA,2007\n"
    "9,Chinstrap,Dream,46.5,17.9,192,3500,female,2007\n"
    "10,Chinstrap,Dream,50,19.5,196,3900,male,2007\n"
    "11,Adelie,Dream,37.2,18.1,178,3900,male,2008\n"
    "12,Chinstrap,Dream,51.3,19.2,193,3650,male,2007\n"
)


def _split(src, out, *args):
    res = runner.invoke(app, ["split", str(src), "--out", str(out), "-q", *args])
    return res


def _rows(path):
    return path.read_text().splitlines()


def test_penguins_by_island_with_text_columns_and_missing_values(tmp_path):
    src = tmp_path / "penguins.csv"
    src.write_text(PENGUINS)
    out = tmp_path / "sites"
    res = _split(src, out, "--by", "island", "--na", "drop-rows", "--index-col", "rowid")
    assert res.exit_code == 0, res.output
    man = json.loads((out / "manifest.json").read_text())
    assert man["groups"] == {"Biscoe": "participant-01.csv", "Dream": "participant-02.csv",
                             "Torgersen": "participant-03.csv"}
    assert man["text_columns"] == ["species", "sex"] and man["dropped_rows"] == 1
    files = sorted(out.glob("participant-*.csv"))
    header = "rowid,species,bill_length_mm,bill_depth_mm,flipper_length_mm,body_mass_g,sex,year"
    assert all(_rows(f)[0] == header for f in files)
    got = sorted(line for f in files for line in _rows(f)[1:])
    want = sorted(",".join(c for k, c in enumerate(line.split(",")) if k != 2)
                  for line in PENGUINS.splitlines()[1:] if ",NA,NA," not in line)
    assert got == want  # every kept row once, its cells as written (the text ones and the NA of a text cell too)
    # the shards read back with learn's options
    res = runner.invoke(app, ["learn", *map(str, files), "--drop", "species,sex", "--index-col", "rowid", "-q"])
    assert res.exit_code in (0, 4), res.output  # read fine (a tiny set may give no DAG, never a read error)
    assert "not a number" not in res.output


def test_columns_and_drop_choose_the_shards_columns(tmp_path):
    src = tmp_path / "penguins.csv"
    src.write_text(PENGUINS)
    res = _split(src, tmp_path / "a", "-p", "2", "--seed", "1", "--columns", "bill_length_mm,sex,body_mass_g",
                 "--na", "drop-rows")
    assert res.exit_code == 0, res.output
    first = _rows(tmp_path / "a" / "participant-01.csv")
    assert first[0] == "bill_length_mm,body_mass_g,sex"  # the file's order
    res = _split(src, tmp_path / "b", "-p", "2", "--seed", "1", "--drop", "species,island,sex,rowid",
                 "--na", "drop-rows")
    assert res.exit_code == 0, res.output
    assert _rows(tmp_path / "b" / "participant-01.csv")[0] == "bill_length_mm,bill_depth_mm,flipper_length_mm,body_mass_g,year"


def test_missing_numbers_are_refused_as_learn_refuses_them(tmp_path):
    src = tmp_path / "penguins.csv"
    src.write_text(PENGUINS)
    out = tmp_path / "never"
    res = _split(src, out, "-p", "2")
    assert res.exit_code == 3, res.output
    line = [ln for ln in res.stderr.splitlines() if ln.startswith("error:")]
    assert len(line) == 1 and "--na drop-rows" in line[0]
    assert not out.exists()


def test_a_number_column_with_a_stray_word_is_still_an_error(tmp_path):
    src = tmp_path / "bad.csv"
    src.write_text("a,b,kind\n1,2,x\n3,oops,y\n4,5,x\n6,7,y\n")
    res = _split(src, tmp_path / "never", "-p", "2")
    assert res.exit_code == 3 and "'oops' is not a number" in res.stderr, res.output


def test_a_semicolon_export_with_decimal_commas_and_text(tmp_path):
    src = tmp_path / "export.csv"
    src.write_text("a;b;grp;c\n1,5;2;north;3,25\n2,5;3;south;4\n3,5;1;north;5,5\n4,5;0;south;6\n")
    out = tmp_path / "s"
    res = _split(src, out, "--by", "grp", "--decimal", ",")
    assert res.exit_code == 0, res.output
    assert _rows(out / "participant-01.csv") == ["a,b,c", "1.5,2,3.25", "3.5,1,5.5"]
    assert _rows(out / "participant-02.csv") == ["a,b,c", "2.5,3,4", "4.5,0,6"]


def test_a_numeric_file_splits_exactly_as_before(tmp_path):
    src = tmp_path / "n.csv"
    src.write_text("a,b\n1e3,0.10\n-2,7\n3.0,1E-2\n0.1,5\n")
    res = _split(src, tmp_path / "o", "-p", "2", "--mode", "contiguous")
    assert res.exit_code == 0, res.output
    assert (tmp_path / "o" / "participant-01.csv").read_text() == "a,b\n1e3,0.10\n-2,7\n"
    man = json.loads((tmp_path / "o" / "manifest.json").read_text())
    assert man["text_columns"] == [] and man["dropped_rows"] == 0

"""The numpy parse of small inputs (bnsl_cli.io.csv_reader.parse_small) stands for the pandas path only
where both agree: the same table or the same error, byte for byte, on every input."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bnsl_cli.errors import InputDataError
from bnsl_cli.io import csv_reader
from bnsl_cli.io.csv_reader import read_table
from bnsl_cli.io.shards import read_shards

#: these tests read files of a few rows on purpose: the small-sample warning they give is true, and is
#: asserted where it is the subject (tests/io/test_columns.py)
pytestmark = pytest.mark.filterwarnings("ignore::bnsl_cli.errors.SmallSampleWarning")

ROOT = Path(__file__).resolve().parents[2]


def outcome(path, monkeypatch, small: bool, **kw):
    """``("ok", names, X bytes, shape)`` or ``("error", type, message)`` of one read."""
    with monkeypatch.context() as m:
        if not small:
            m.setattr(csv_reader, "SMALL_INPUT_BYTES", -1)  # every input goes the pandas way
        try:
            t = read_table(path, **kw)
        except InputDataError as exc:
            return ("error", type(exc).__name__, str(exc))
    return ("ok", t.names, t.X.tobytes(), t.X.shape, t.X.flags.c_contiguous, t.X.flags.owndata, t.sha256)


CASES = {
    "plain": "a,b,c\n1,2,3\n4,5.5,-6e-1\n",
    "crlf": "a,b\r\n1,2\r\n3,5\r\n",
    "spaces": "a , b\n 1, 2\n3 ,5 \n",
    "quoted": '"a","b"\n"1",2\n3,"5"\n',
    "blank_lines": "\n\na,b\n1,2\n\n3,5\n\n\n",
    "line_of_spaces": "a,b\n1,2\n   \n3,5\n",
    "line_of_tab": "a,b\n1,2\n\t\n3,5\n",
    "trailing_spaces_line": "a,b\n1,2\n3,5\n  ",
    "nbsp": "a,b\n1,2\xa0\n3,4\n",
    "unicode_digit": "a,b\n\u0661,2\n3,4\n",
    "nan": "a,b\n1,2\nnan,4\n",
    "inf": "a,b\n1,-inf\n3,4\n",
    "overflow": "a,b\n1,1e400\n3,4\n",
    "text": "a,b\n1,2\n3,x\n",
    "hash": "a,b\n1,2\n#3,5\n",
    "missing": "a,b\n1,\n3,4\n",
    "short_row": "a,b,c\n1,2,3\n4,5\n",
    "long_row": "a,b\n1,2\n3,4,5\n",
    "one_column": "a\n1\n2\n3\n",
    "one_row": "a,b\n1,2\n",
    "header_only": "a,b\n",
    "no_final_newline": "a,b\n1,2\n3,5",
    "quoted_comma": 'a,b\n1,"2,5"\n3,4\n',
    "underscore": "a,b\n1,2\n3,1_000\n",
    "bool": "a,b\n1,True\n3,4\n",
    "plus_dot": "a,b\n+1,.5\n5.,1E3\n",
    "vt_ff": "a,b\n1,2\x0b\n3\x0c,4\n",
    "nul": "a,b\n1,2\n3,4\x00\n",
    "constant": "a,b\n1,7\n2,7\n3,7\n",
    "index_column": "a,b\n0,1.5,2\n1,3.5,4\n",
    "bom": "\ufeffa,b\n1,2\n3,5\n",
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_small_inputs_read_exactly_as_the_pandas_path(tmp_path, monkeypatch, name):
    p = tmp_path / f"{name}.csv"
    p.write_bytes(CASES[name].encode("utf-8"))
    assert outcome(p, monkeypatch, True) == outcome(p, monkeypatch, False)


def test_columns_reordered_and_other_separators(tmp_path, monkeypatch):
    p = tmp_path / "o.csv"
    p.write_text("c,a,b\n3,1,2\n6,4,5\n")
    got = outcome(p, monkeypatch, True, columns=("a", "b", "c"))
    assert got == outcome(p, monkeypatch, False, columns=("a", "b", "c"))
    assert got[0] == "ok" and got[4] and got[5]  # C-contiguous, owns its data
    q = tmp_path / "s.csv"
    q.write_text("a;b\n1;2\n3;4.5\n")
    assert outcome(q, monkeypatch, True, sep=";") == outcome(q, monkeypatch, False, sep=";")


TOKENS = ["1", "-2.5", "1e3", " 3", "4 ", '"5"', "", "x", "nan", "inf", "1_0", "True", " ", "1\xa0", "+.5",
          "5.", "1e", "#7", "0.1000000000000000055511151231257827", "2.2250738585072014e-308", "\u0661"]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    rows=st.lists(st.lists(st.sampled_from(TOKENS), min_size=1, max_size=4), min_size=0, max_size=6),
    ends=st.lists(st.sampled_from(["\n", "\r\n", "\r", "\n  \n", "\n\n"]), min_size=6, max_size=6),
    sep=st.sampled_from([",", ";"]),
)
def test_fuzzed_small_inputs_read_exactly_as_the_pandas_path(tmp_path, monkeypatch, rows, ends, sep):
    text = sep.join("abc") + "\n" + "".join(sep.join(r) + ends[k] for k, r in enumerate(rows))
    p = tmp_path / "f.csv"
    p.write_bytes(text.encode("utf-8"))
    assert outcome(p, monkeypatch, True, sep=sep, min_rows=1, check_constant=False) == outcome(
        p, monkeypatch, False, sep=sep, min_rows=1, check_constant=False
    )


def test_random_floats_parse_to_the_same_bits(tmp_path, monkeypatch):
    rng = np.random.default_rng(3)
    X = rng.standard_normal((3000, 4)) * np.array([1e-300, 1e-7, 1.0, 1e300])
    text = "a,b,c,d\n" + "".join(f"{r[0]!r},{r[1]:.17g},{r[2]:.6f},{r[3]!r}\n" for r in X.tolist())
    p = tmp_path / "r.csv"
    p.write_text(text)
    fast, slow = outcome(p, monkeypatch, True), outcome(p, monkeypatch, False)
    assert fast == slow and fast[0] == "ok"


def test_small_inputs_do_not_import_pandas_large_ones_do(tmp_path):
    rng = np.random.default_rng(0)
    paths = []
    for k in range(3):
        p = tmp_path / f"s{k}.csv"
        p.write_text("a,b,c\n" + "".join(",".join(map(repr, r)) + "\n" for r in rng.normal(size=(200, 3)).tolist()))
        paths.append(str(p))
    code = (
        "import sys, bnsl_cli.io.csv_reader as r, bnsl_cli.io.shards as s\n"
        "if sys.argv[1] == 'large': r.SMALL_INPUT_BYTES = 100\n"
        "t = s.read_shards(sys.argv[2:])\n"
        "print(sum(x.n for x in t), 'pandas' in sys.modules)\n"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    for mode, expect in (("small", "600 False"), ("large", "600 True")):
        out = subprocess.run([sys.executable, "-c", code, mode, *paths], capture_output=True, text=True, env=env, check=True)
        assert out.stdout.strip() == expect, (mode, out.stdout, out.stderr)


def test_read_shards_decides_on_the_total_size(tmp_path, monkeypatch):
    calls = []
    real = csv_reader.parse_small
    monkeypatch.setattr(csv_reader, "parse_small", lambda *a: calls.append(1) or real(*a))
    p1, p2 = tmp_path / "a.csv", tmp_path / "b.csv"
    p1.write_text("a,b\n1,2\n3,4\n")
    p2.write_text("a,b\n5,6\n7,9\n")
    read_shards([p1, p2])
    assert len(calls) == 2
    monkeypatch.setattr(csv_reader, "SMALL_INPUT_BYTES", p1.stat().st_size + 1)  # each file fits, the two do not
    calls.clear()
    a, b = read_shards([p1, p2])
    assert calls == [] and b.X.tolist() == [[5, 6], [7, 9]]


@pytest.mark.parametrize("text", ["a,b\r1,2\r3,5\r", "a,b\n1\r1,2\n3,5\n"])
def test_a_lone_carriage_return_is_one_clear_error(tmp_path, monkeypatch, text):
    p = tmp_path / "cr.csv"
    p.write_bytes(text.encode())
    for small in (True, False):
        got = outcome(p, monkeypatch, small)
        assert got[0] == "error" and "carriage return" in got[2] and got[2].startswith(str(p)), got


@pytest.mark.parametrize("text, line, quote", [
    ("a,b\n1,2\n3,{long}\n5,6\n", 3, False),  # a data field
    ("\n\na,b\n1,2\n3,{long}\n5,6\n", 5, False),  # leading blank lines keep their numbers
    ("a,{long}\n1,2\n3,4\n", 1, False),  # a column name
    ('a,b\n1,2\n3,"4\n5,6\n' + "7,8\n" * 40000, 3, True),  # a quote never closed: the field runs on
])
def test_a_field_beyond_the_csv_field_size_limit_is_named(tmp_path, monkeypatch, text, line, quote):
    import csv

    limit = csv.field_size_limit()
    p = tmp_path / "long.csv"
    p.write_text(text.replace("{long}", "4" * (limit + 10)))
    for small in (True, False):
        got = outcome(p, monkeypatch, small)
        assert got[0] == "error", got
        msg = got[2]
        assert msg.startswith(f"{p}: line {line}: a field is longer than {limit:,} characters"), msg
        assert "csv reader" in msg and "carriage return" not in msg and "\n" not in msg, msg
        assert ("a quote (\") left open" in msg) == quote, msg

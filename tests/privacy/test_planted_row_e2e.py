"""A planted extreme row end to end (issue 20 item 1): ``bnsl learn --dp`` on D and on D′ — D′ with one
row of one shard replaced by finite extremes (1e160, −float64 max, 1e39, a subnormal) — must not be told
apart by anything but the noisy outputs: the same exit code, the same warnings (numbers masked, since
they are post-processing of noisy values), the same report keys and the same stderr shape. Before the
rows were clamped, fed-moments exited 1 on D′ ("Eigenvalues did not converge") and fed-sparse reported
``polish.applied: false`` on D′ only. Small runs (d = 4, 3 rounds of 5 steps) keep this quick.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from typer.testing import CliRunner

from bnsl_cli.cli.app import app
from bnsl_cli.federated.methods.registry import default_method, method_spec

#: heavy end-to-end private runs through the CLI (the bounded contributions of each release are
#: tested fast, release by release, in test_bounded_contributions.py and test_suffstats_bounded.py)
pytestmark = pytest.mark.slow

PLANTED = [1e160, -1.7976931348623157e308, 1e39, 5e-324]


def _write(path, X):
    path.write_text("a,b,c,e\n" + "".join(",".join(repr(float(v)) for v in r) + "\n" for r in X))


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    base = tmp_path_factory.mktemp("planted")
    rng = np.random.default_rng(0)
    for p in range(2):
        X = rng.normal(size=(1000, 4))
        X[:, 1] += 0.8 * X[:, 0]
        X[:, 2] += 0.5 * X[:, 1]
        X[:, 3] -= 0.7 * X[:, 2]
        for name in ("D", "Dprime"):
            Y = X.copy()
            if name == "Dprime" and p == 0:
                Y[7] = PLANTED
            (base / name).mkdir(exist_ok=True)
            _write(base / name / f"site{p}.csv", Y)
    return base


def _shape(obj):
    """The report's structure: every key path (list elements merged), no values."""
    out = set()

    def walk(o, path):
        if isinstance(o, dict):
            for k, v in o.items():
                out.add(path + "/" + k)
                walk(v, path + "/" + k)
        elif isinstance(o, list):
            for v in o:
                walk(v, path + "[]")

    walk(obj, "")
    return out


def _masked(text):
    """Numbers masked, and without the local diagnostic ``bnsl learn --dp`` prints from the exact rows it
    holds (the scale check "checked on the rows here": shown on the holder's console, in no report and
    sent nowhere, so not a release)."""
    lines = [ln for ln in text.splitlines() if "checked on the rows here" not in ln]
    return re.sub(r"[-+]?\d+(\.\d+)?(e[-+]?\d+)?", "#", "\n".join(lines))


def _run(base, name, extra):
    out = base / f"out-{name}-{'_'.join(extra) or 'default'}"
    method = extra[extra.index("-m") + 1] if "-m" in extra else default_method(True)
    takes = method_spec(method).options  # a short run where the method has rounds and steps
    short = [*(["--rounds", "3"] if "--rounds" in takes else []), *(["--steps", "5"] if "--steps" in takes else [])]
    res = CliRunner().invoke(
        app, ["learn", str(base / name), "--dp", "--epsilon", "10", "--seed", "1", *short,
              "--out", str(out), "-q", "--force", *extra],
    )
    report = json.loads((out / "report.json").read_text()) if (out / "report.json").exists() else None
    return res, report


CASES = {
    "fed-sparse": ["-m", "fed-sparse"],
    "fed-sparse --public-means": ["-m", "fed-sparse", "--public-means"],
    "fed-sparse --standardize": ["-m", "fed-sparse", "--standardize"],
    "fed-sparse --value-bound --clip-levels static": ["-m", "fed-sparse", "--value-bound", "10", "--clip-levels", "static"],
    "fed-moments": ["-m", "fed-moments"],
    "fed-moments --public-means --standardize": ["-m", "fed-moments", "--public-means", "--standardize"],
    "fed-bnsl": ["-m", "fed-bnsl"],
    "fed-bnsl --standardize": ["-m", "fed-bnsl", "--standardize"],
    "fed-suffstats": ["-m", "fed-suffstats"],
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_planted_extreme_row_changes_nothing_but_noisy_values(pair, case):
    (r0, rep0), (r1, rep1) = (_run(pair, name, CASES[case]) for name in ("D", "Dprime"))
    assert r0.exit_code == r1.exit_code == 0, (r0.exit_code, r1.exit_code, r1.stderr)
    assert _masked(r0.stderr) == _masked(r1.stderr)
    assert [_masked(w) for w in rep0["warnings"]] == [_masked(w) for w in rep1["warnings"]]
    assert _shape(rep0) == _shape(rep1)
    if rep0.get("polish"):
        assert rep0["polish"].get("applied") == rep1["polish"].get("applied")
    assert all(np.isfinite(e["weight"]) for e in rep1["graph"]["edges"]) if rep1.get("graph") else True


# ---------------------------------------------------------------------------------------------
# issue 20 item 7: whether a column is constant is a function of the rows; a private run must not
# depend on it (a non-private run still refuses a column constant in every shard, and warns for some)


@pytest.mark.parametrize("where", ["every shard", "one shard"])
def test_a_private_run_does_not_depend_on_a_constant_column(tmp_path, where):
    rng = np.random.default_rng(1)
    shards = [rng.normal(size=(1000, 4)) for _ in range(2)]
    for X in shards:  # a → b → c, and the column e that will be constant
        X[:, 1] += 0.8 * X[:, 0]
        X[:, 2] += 0.7 * X[:, 1]
    for X in shards[: 2 if where == "every shard" else 1]:
        X[:, 3] = 0.25
    for name in ("D", "Dprime"):
        (tmp_path / name).mkdir()
        for p, X in enumerate(shards):
            Y = X.copy()
            if name == "Dprime" and p == 0:
                Y[5, 3] = 7.0  # the neighbour: one row differs, the column is no longer constant there
            _write(tmp_path / name / f"site{p}.csv", Y)
    for extra in ([], ["-m", "fed-sparse"], ["-m", "fed-moments"]):  # [] is the --dp default, fed-suffstats
        (r0, rep0), (r1, rep1) = (_run(tmp_path, name, extra) for name in ("D", "Dprime"))
        assert r0.exit_code == r1.exit_code == 0, (r0.stderr, r1.stderr)
        assert "constant" not in r0.stderr + r1.stderr
        assert _masked(r0.stderr) == _masked(r1.stderr)
        assert [_masked(w) for w in rep0["warnings"]] == [_masked(w) for w in rep1["warnings"]]
        assert _shape(rep0) == _shape(rep1)
    if where == "every shard":  # without --dp the data-dependent check stays: a clear error
        res = CliRunner().invoke(app, ["learn", str(tmp_path / "D"), "--out", str(tmp_path / "plain"), "-q"])
        assert res.exit_code == 3 and "constant in every shard" in res.stderr

"""Categorical columns over the network (issue 42): each site declares its categorical columns and their
levels in its HELLO (non-private runs only), the coordinator puts the union in the plan, every site
expands its rows against it, and the run gives the bytes of ``bnsl learn`` on the same files. What does
not fit is refused with one line: a column categorical at one site and numeric at another, a site that
takes private runs only, a plan whose levels lack one a site holds, a plan that learns them under --dp."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bnsl_cli.column_kinds import ColumnKinds, combine_site_levels, site_specific_levels
from bnsl_cli.errors import InputDataError, OptionError, ShardMismatchError
from bnsl_cli.io.kinds import encode, expand_for_plan, site_table
from bnsl_cli.io.table import Table
from bnsl_cli.net.common import FederationError
from bnsl_cli.net.session import hello_levels
from tests._cli import run


def _raw(levels_col, x, name="site.csv"):
    return Table(np.asarray(x, float)[:, None], ("x",), name, extra={"g": np.asarray(levels_col, dtype=str)})


# ---------------------------------------------------------------------------------------------
# the pieces, in process
# ---------------------------------------------------------------------------------------------

def test_the_union_of_the_sites_levels_is_the_plans_and_expanding_against_it_is_learns_encoding():
    a = _raw(["u", "v", "u", "v"], [1, 2, 3, 4], "a.csv")
    b = _raw(["w", "u", "w", "u"], [5, 6, 7, 8], "b.csv")
    sa, va, la = site_table(a, ["g"], order=["g", "x"])
    sb, vb, lb = site_table(b, ["g"], order=["g", "x"])
    assert va == vb == ("g", "x") and la == {"g": ["u", "v"]} and lb == {"g": ["u", "w"]}
    kinds = combine_site_levels(va, [("a", la), ("b", lb)], 20)
    assert kinds == ColumnKinds(("g", "x"), (("g", ("u", "v", "w")),))
    # each site's expansion against the union equals in-process learn's encoding of both files
    pooled, pooled_kinds = encode([a, b], ["g"], order=["g", "x"])
    assert pooled_kinds == kinds
    for site, ref in zip((sa, sb), pooled):
        got = expand_for_plan(site, kinds)
        assert got.names == ref.names and np.array_equal(got.X, ref.X)


def test_a_site_refuses_a_plan_whose_levels_lack_its_own_or_that_reads_a_column_another_way():
    site, _, _ = site_table(_raw(["u", "v", "z"], [1, 2, 3]), ["g"])
    with pytest.raises(ShardMismatchError, match="the plan's levels of column 'g' lack 'z'"):
        expand_for_plan(site, ColumnKinds(("g", "x"), (("g", ("u", "v")),)))
    with pytest.raises(ShardMismatchError, match="takes column 'x' as categorical; this site holds it as numbers"):
        expand_for_plan(site, ColumnKinds(("g", "x"), (("g", ("u", "v", "z")), ("x", ("1", "2")))))
    with pytest.raises(ShardMismatchError, match="takes column 'g' as continuous; this site holds it as categorical"):
        expand_for_plan(site, ColumnKinds(("g", "x"), (("x", ("1", "2", "3")),)))


def test_a_site_checks_its_own_levels_before_any_leaves():
    ids = _raw([f"patient-{k}" for k in range(30)], np.arange(30.0))
    with pytest.raises(OptionError, match="30 levels, more than --max-levels 20.*would be sent to the coordinator"):
        site_table(ids, ["g"])
    holes = _raw(["u", "", "v"], [1, 2, 3])
    with pytest.raises(InputDataError, match="column 'g' \\(categorical\\) has a missing cell in data row 2"):
        site_table(holes, ["g"])
    kept, _, levels = site_table(holes, ["g"], na_drop=True)
    assert kept.n == 2 and kept.dropped_rows == 1 and levels == {"g": ["u", "v"]}


def test_the_coordinator_refuses_what_the_sites_do_not_agree_on():
    with pytest.raises(InputDataError, match="'g' is categorical at site 'a' but numeric at site 'b'"):
        combine_site_levels(["g", "x"], [("a", {"g": ["u", "v"]}), ("b", {})], 20)
    with pytest.raises(OptionError, match="3 levels over the sites, more than --max-levels 2"):
        combine_site_levels(["g", "x"], [("a", {"g": ["u", "v"]}), ("b", {"g": ["w"]})], 2)
    with pytest.raises(InputDataError, match="one level \\('u'\\) at every site"):
        combine_site_levels(["g", "x"], [("a", {"g": ["u"]}), ("b", {"g": ["u"]})], 20)
    assert combine_site_levels(["x"], [("a", {"g": ["u", "v"]})], 20) is None  # dropped by the coordinator
    k = combine_site_levels(["g"], [("a", {"g": ["u"]}), ("b", {"g": ["v"]})], 20)
    assert site_specific_levels(k, [("a", {"g": ["u"]}), ("b", {"g": ["v"]})]) == [("g", 2)]


@pytest.mark.parametrize("levels", [
    "u", {"g": "u"}, {"g": ["u", "u"]}, {"other": ["u"]}, {"g": [1, 2]}, {"g": ["x" * 201]},
])
def test_a_malformed_hello_is_refused_naming_the_site(levels):
    with pytest.raises(FederationError, match="site 's1' declared malformed categorical levels"):
        hello_levels({"site": "s1", "columns": ["g", "x"], "levels": levels})


# ---------------------------------------------------------------------------------------------
# bnsl serve / bnsl join on loopback with mutual TLS
# ---------------------------------------------------------------------------------------------

pytest.importorskip("grpc")
pytest.importorskip("cryptography")

from tests.net.conftest import all_ok, join, serve  # noqa: E402


@pytest.fixture(scope="module")
def mixed_sites(tmp_path_factory):
    root = tmp_path_factory.mktemp("mixed")
    res = run("simulate", "-d", 6, "-e", 6, "-p", 3, "-n", 1200, "--categorical", 0.5, "--seed", 3, "--out", root / "sim", "-q")
    assert res.exit_code == 0, res.output
    return sorted((root / "sim" / "shards").glob("*.csv"))


def test_served_categorical_run_gives_the_bytes_of_learn(certs, mixed_sites, tmp_path):
    learned = tmp_path / "learned"
    res = run("learn", *mixed_sites, "--seed", 1, "--out", learned, "-q")
    assert res.exit_code == 0, res.output
    served = tmp_path / "served"
    coord, port = serve(certs, served, "--seed", "1")  # no --method: the sites' categorical columns choose it
    sites = [join(certs, port, p, f"site{k + 1}", "--allow-non-private", "--allow-tables")
             for k, p in enumerate(mixed_sites)]
    all_ok(coord, sites)
    for name in ("adjacency.csv", "edges.csv", "graph.dot", "cpdag.csv"):
        assert (served / name).read_bytes() == (learned / name).read_bytes(), name
    a, b = (json.loads((f / "report.json").read_text()) for f in (served, learned))
    assert a["method"] == b["method"] == "fed-suffstats"
    assert a["columns"] == b["columns"] and "categorical" in a["columns"]["kinds"]


def test_without_every_sites_consent_no_table_is_asked_for(certs, mixed_sites, tmp_path):
    """One site without --allow-tables: the plan says so, the run learns from the moments only (the first
    phase), and no site is asked for a table."""
    served = tmp_path / "served"
    coord, port = serve(certs, served, "--seed", "1")
    sites = [join(certs, port, p, f"site{k + 1}", "--allow-non-private", *(["--allow-tables"] if k else []),
                  "--transcript", str(tmp_path / f"t{k + 1}.jsonl"))
             for k, p in enumerate(mixed_sites)]
    all_ok(coord, sites)
    plans = [json.loads(line) for line in (tmp_path / "t2.jsonl").read_text().splitlines()]
    assert [r["tables"] for r in plans if r["event"] == "plan"] == [False]
    assert "no second phase: a site did not allow contingency tables" in (served / "report.json").read_text()


def test_a_site_that_takes_private_runs_only_does_not_send_its_levels(certs, mixed_sites, tmp_path):
    res = run("join", "127.0.0.1:9", mixed_sites[0], "--max-epsilon", 5, "--insecure")
    assert res.exit_code == 2, res.output
    assert "networked runs learn categorical columns without --dp only" in res.stderr and "--allow-non-private" in res.stderr


def test_a_column_numeric_at_one_site_is_refused_naming_both_sites(certs, mixed_sites, tmp_path):
    header, *rows = mixed_sites[2].read_text().splitlines()
    names = header.split(",")
    cat = [j for j, v in enumerate(rows[0].split(",")) if v.startswith("L")]
    # site3 codes the levels as numbers, so it reads that column as numeric
    coded = [",".join(v[1:] if j in cat else v for j, v in enumerate(r.split(","))) for r in rows]
    third = tmp_path / "site3.csv"
    third.write_text("\n".join([header, *coded]) + "\n")
    served = tmp_path / "served"
    coord, port = serve(certs, served, "--seed", "1")
    sites = [join(certs, port, p, f"site{k + 1}", "--allow-non-private")
             for k, p in enumerate([*mixed_sites[:2], third])]
    code, _, err = coord.done()
    for s in sites:
        s.done()
    assert code == 3, err
    assert f"column {names[cat[0]]!r} is categorical at site 'site1' but numeric at site 'site3'" in err
    assert not (served / "report.json").exists()


def test_a_site_checks_the_plans_categorical_columns_on_public_values_first():
    from dataclasses import replace

    from bnsl_cli.errors import RefusedError
    from bnsl_cli.net.policy import SiteLimits, check_plan
    from bnsl_cli.plan.options import LearnConfig
    from bnsl_cli.plan.run_plan import RunPlan
    from bnsl_cli.plan.shapes import Shapes

    a = _raw(["u", "v", "w", "u"] * 10, np.arange(40.0), "a.csv")
    b = _raw(["w", "u", "v", "v"] * 10, np.arange(40.0) ** 0.5, "b.csv")
    enc, kinds = encode([a, b], ["g"], order=["g", "x"])
    plan = RunPlan.resolve(LearnConfig(method="fed-suffstats"), Shapes.of_tables(enc))
    site, _, _ = site_table(a, ["g"], order=["g", "x"])
    ok = SiteLimits(allow_non_private=True, allow_tables=True)
    body = {"plan": replace(plan, participants=(replace(plan.participants[0], label="s"), plan.participants[1])).to_dict(),
            "index": 0}
    acc = check_plan(body, site, ok, "s")
    assert np.array_equal(acc.X, enc[0].X)  # the site's expansion is learn's
    for limits, why in ((SiteLimits(allow_non_private=True, allow_tables=True, max_levels=2), "3 levels, more than"),
                        (SiteLimits(allow_non_private=True), "did not allow \\(--allow-tables"),
                        (SiteLimits(max_epsilon=5.0, allow_tables=True), "accepts private runs only")):
        with pytest.raises(RefusedError, match=why):
            check_plan(body, site, limits, "s")

"""Categorical columns in the Flower app (issue 42): a SuperNode declares them as ``bnsl join`` does (node config
``categorical``, ``max-levels``, ``allow-tables``; columns of text anyway), its HELLO carries its levels, and the
run through the ServerApp gives the bytes of ``bnsl learn`` on the same files."""

from __future__ import annotations

import pytest

pytest.importorskip("flwr")

from bnsl_cli.errors import OptionError  # noqa: E402
from bnsl_cli.net.flower.site import SiteConfig  # noqa: E402
from tests._cli import run  # noqa: E402
from tests.flower.conftest import OUTPUTS, flower_run, learn_cli, node_configs, records, report  # noqa: E402


@pytest.fixture(scope="module")
def mixed_csvs(tmp_path_factory):
    root = tmp_path_factory.mktemp("flower-mixed")
    res = run("simulate", "-d", 6, "-e", 6, "-p", 3, "-n", 1200, "--categorical", 0.5, "--seed", 3, "--out", root / "sim", "-q")
    assert res.exit_code == 0, res.output
    return sorted((root / "sim" / "shards").glob("*.csv"))


def test_flower_categorical_run_equals_learn(mixed_csvs, tmp_path):
    result, _, out = flower_run(mixed_csvs, tmp_path, "--seed 1", nodes=node_configs(mixed_csvs, tmp_path, allow_tables=True))
    assert not isinstance(result, Exception), result
    learned = learn_cli(mixed_csvs, tmp_path / "learned", "--seed 1")
    for name in OUTPUTS:
        assert (out / name).read_bytes() == (learned / name).read_bytes(), name
    a, b = report(out), report(learned)
    assert a["method"] == b["method"] == "fed-suffstats" and a["columns"] == b["columns"]
    hello = next(r for r in records(tmp_path / "site1.transcript.jsonl") if r["event"] == "sent" and r["frame"] == "HELLO")
    assert set(hello["body"]["levels"]) == {n for n, k in zip(a["columns"]["names"], a["columns"]["kinds"])
                                            if k == "categorical"}


def test_a_node_that_takes_private_runs_only_reads_no_categorical_column(mixed_csvs):
    cfg = SiteConfig.from_node_config({"csv": str(mixed_csvs[0]), "max-epsilon": 5.0})
    with pytest.raises(OptionError, match="is categorical: networked runs learn categorical columns without --dp only"):
        cfg.read()
    ok = SiteConfig.from_node_config({"csv": str(mixed_csvs[0]), "allow-non-private": True, "max-levels": 3})
    with pytest.raises(OptionError, match="more than --max-levels 3"):  # the simulated columns have 4 levels
        ok.read()

"""Byte identity: for every federated method, private or not, a run of the Flower app (its ServerApp
and ClientApps, the messages serialised as Flower carries them, a fresh ClientApp context per
message) writes the same adjacency.csv, edges.csv and graph.dot as ``bnsl learn`` with the same
options and seed, and the same report figures (rounds, bytes, privacy). Under ``--secure-sum``
with a method whose ``bnsl learn`` run has no secure sum (only fed-suffstats' distributed noise is
masked in process too), the Flower run equals ``bnsl serve``/``join``'s networked run weight for
weight and ``bnsl learn``'s graph (the weights then carry the fixed-point rounding of the sums).
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("flwr")

from bnsl_cli.federated.methods.registry import METHODS, method_spec
from tests.flower.conftest import OUTPUTS, flower_run, learn_cli, records, report

#: the methods a networked run can use (as bnsl serve: federated, not pooled)
NETWORKED = [m for m in METHODS if method_spec(m).federated and not method_spec(m).pooled]


ADMM_ROUNDS = {"fed-bnsl": 30}


def _options(method: str, private: bool) -> str:
    spec = method_spec(method)
    opts = f"-m {method} --seed 3"
    if spec.rounds.name == "ADMM":  # enough rounds for a graph on these data, few for the time
        opts += f" --rounds {ADMM_ROUNDS.get(method, 12)}"
    if private:
        opts += " --dp --epsilon 8"
        if spec.distributed_noise:
            opts += " --noise per-site"
    return opts


CASES = [(m, p) for m in NETWORKED for p in (False, True)]


def _same_figures(a: dict, b: dict) -> None:
    assert a["method"] == b["method"]
    assert a["rounds"] == b["rounds"]
    assert a["communication"] == b["communication"]  # every byte count
    assert a["graph"] == b["graph"]
    assert (a.get("privacy") is None) == (b.get("privacy") is None)
    if a.get("privacy") is not None:
        pa, pb = dict(a["privacy"]), dict(b["privacy"])
        parts_a, parts_b = pa.pop("participants"), pb.pop("participants")
        assert pa == pb
        drop = ("file", "compute_s")
        assert [{k: v for k, v in p.items() if k not in drop} for p in parts_a] == [
            {k: v for k, v in p.items() if k not in drop} for p in parts_b]


@pytest.mark.parametrize("method, private", CASES, ids=[f"{m}-{'dp' if p else 'exact'}" for m, p in CASES])
def test_flower_run_equals_learn(site_csvs, tmp_path, method, private):
    opts = _options(method, private)
    result, grid, out = flower_run(site_csvs, tmp_path, opts)
    assert not isinstance(result, Exception), result
    learned = learn_cli(site_csvs, tmp_path / "learned", opts)
    for name in OUTPUTS:
        assert (out / name).read_bytes() == (learned / name).read_bytes(), name
    assert np.count_nonzero(result.W) >= 2  # a graph worth comparing
    a, b = report(out), report(learned)
    _same_figures(a, b)
    assert a["network"]["secure_sum"] is False
    # every message reached a fresh ClientApp context; the sites' transcripts saw every frame
    sent = [r for r in records(tmp_path / "site1.transcript.jsonl") if r["event"] == "sent"]
    assert [r["frame"] for r in sent][:2] == ["HELLO", "ACCEPT"] and sent[-1]["frame"] == "SUMMARY"
    assert grid.calls == 3 * (len(sent) + 1 - (1 if _stop_broadcast(sent) else 0))


def _stop_broadcast(sent) -> bool:
    """Whether the SUMMARY came with the reply to the stop broadcast (no FINISH message)."""
    return sent[-2]["frame"] in ("EMPTY",)


def test_secure_sum_default_equals_learns_distributed_noise(site_csvs, tmp_path):
    """fed-suffstats --dp over three sites: the secure sum and distributed noise by default, as ``bnsl
    learn --dp``: the same bytes, and no summable reply left a site in the clear."""
    opts = "--dp --epsilon 8 --seed 3"
    result, _, out = flower_run(site_csvs, tmp_path, opts)
    assert not isinstance(result, Exception), result
    learned = learn_cli(site_csvs, tmp_path / "learned", opts)
    for name in OUTPUTS:
        assert (out / name).read_bytes() == (learned / name).read_bytes(), name
    a, b = report(out), report(learned)
    _same_figures(a, b)
    assert a["network"]["secure_sum"] is True and a["privacy"]["noise"]["mode"] == "distributed"
    for k in range(3):
        frames = [r["frame"] for r in records(tmp_path / f"site{k + 1}.transcript.jsonl") if r["event"] == "sent"]
        assert frames.count("MASKED") >= 3 and "DATA" not in frames, frames


SECURE = [m for m in NETWORKED if not method_spec(m).distributed_noise]


@pytest.mark.parametrize("method", SECURE)
def test_secure_sum_equals_the_networked_run(site_csvs, tmp_path, method):
    """``secure-sum = on`` (bnsl's own masks) with a method ``bnsl learn`` runs without a secure sum:
    the Flower run equals ``bnsl serve``/``join``'s networked run with the same plan weight for
    weight, and ``bnsl learn``'s graph."""
    pytest.importorskip("grpc")
    from bnsl_cli.io.csv_reader import read_table
    from bnsl_cli.plan.run_plan import RunPlan
    from tests.net.conftest import networked, quiet

    opts = _options(method, True)
    result, grid, out = flower_run(site_csvs, tmp_path, opts, **{"secure-sum": "on"})
    assert not isinstance(result, Exception), result
    assert report(out)["network"]["secure_sum"] is True
    tables = [read_table(p) for p in site_csvs]
    plan = RunPlan.from_dict(grid.fleet.plan.to_dict())
    served, _, errors = quiet(networked, plan, tables, secure=True)
    assert not errors and not isinstance(served, Exception), (errors, served)
    assert np.array_equal(result.W, served.W) and np.array_equal(result.W_raw, served.W_raw)
    learned = learn_cli(site_csvs, tmp_path / "learned", opts)
    W_learn = np.loadtxt(learned / "adjacency.csv", delimiter=",", skiprows=1, usecols=range(1, 9))
    assert np.array_equal(W_learn != 0, result.W != 0)
    np.testing.assert_allclose(result.W, W_learn, atol=1e-2, rtol=0)
    frames = [r["frame"] for r in records(tmp_path / "site1.transcript.jsonl") if r["event"] == "sent"]
    assert "MASKED" in frames

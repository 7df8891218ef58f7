"""fed-suffstats over the network (loopback gRPC, sites in threads): distributed noise under the
secure sum, and per-site noise without it; the same releases and cost either way."""

import warnings

import numpy as np
import pytest

pytest.importorskip("grpc")
pytest.importorskip("cryptography")

from bnsl_cli.io.table import Table  # noqa: E402
from bnsl_cli.plan.options import DPConfig, LearnConfig  # noqa: E402
from bnsl_cli.plan.run_plan import RunPlan  # noqa: E402
from bnsl_cli.plan.shapes import Shapes  # noqa: E402
from tests._sim import simulated_tables  # noqa: E402
from tests.net.conftest import networked  # noqa: E402

P = 3


@pytest.fixture(scope="module")
def tables():
    _, t = simulated_tables(5, P, 400, 6)
    return [Table(x.X, x.names, f"site{k}") for k, x in enumerate(t)]


def _plan(tables, noise):
    cfg = LearnConfig(method="fed-suffstats", dp=DPConfig(epsilon=5, noise=noise), seed=2)
    return RunPlan.resolve(cfg, Shapes.of_tables(tables))


def test_distributed_and_per_site_noise_over_the_network(tables):
    from bnsl_cli.federated.methods.suffstats import STAGES

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dist, spy, e1 = networked(_plan(tables, "distributed"), tables)
        own, _, e2 = networked(_plan(tables, "per-site"), tables, secure=False)
    assert not e1 and not e2 and not isinstance(dist, Exception) and not isinstance(own, Exception), (e1, e2, dist, own)
    assert len(spy.masked) == (2 + STAGES) * P  # every share travelled masked (scale, centre histograms, stages)
    assert dist.report["privacy"]["noise"]["mode"] == "distributed"
    assert own.report["privacy"]["noise"]["mode"] == "per-site"
    assert dist.report["privacy"]["epsilon"] == pytest.approx(own.report["privacy"]["epsilon"], rel=1e-12)
    for part in dist.report["privacy"]["participants"]:
        assert part["events"][0]["split"] == P
    assert np.all(np.isfinite(dist.W))


def test_sites_release_again_on_a_repeated_basis_and_the_coordinator_pools_them():
    # d = 12, 3 × 1,500 rows, ε = 5: the model whitening settles after stage 2, so stages 3 and 4 are sent stage
    # 2's basis again; every site, behind its guard, releases each stage once at that stage's own ρ (the ledger),
    # and the last stage pools the three releases
    _, t = simulated_tables(12, P, 1500, 2)
    tabs = [Table(x.X, x.names, f"site{k}") for k, x in enumerate(t)]
    plan = _plan(tabs, "distributed")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res, _, errors = networked(plan, tabs)
    assert not errors and not isinstance(res, Exception), (errors, res)
    history = res.report["history"]
    assert history[-1].get("pooled") == [2, 3, 4], history
    for part in res.report["privacy"]["participants"]:
        stages = [ev for ev in part["events"] if ev["release"] == "whitened-moments"]
        assert sum(ev.get("count", 1) for ev in stages) == 4

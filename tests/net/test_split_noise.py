"""Split DP noise over a secure sum (serve --split-noise, join --accept-split-noise): networked on
loopback (sites in threads; the helpers of tests/net/test_secure_methods.py) and the site-side
checks (serve's option checks: tests/cli/test_secure_options.py)."""

import warnings

import numpy as np
import pytest

pytest.importorskip("grpc")
pytest.importorskip("cryptography")

from bnsl_cli.errors import RefusedError  # noqa: E402
from bnsl_cli.io.table import Table  # noqa: E402
from bnsl_cli.plan.options import DPConfig, LearnConfig  # noqa: E402
from bnsl_cli.plan.run_plan import RunPlan  # noqa: E402
from bnsl_cli.plan.shapes import Shapes  # noqa: E402
from bnsl_cli.privacy.split_noise import split_noise_plan  # noqa: E402
from bnsl_cli.net.policy import SiteLimits, check_plan  # noqa: E402
from tests._sim import simulated_tables  # noqa: E402
from tests.net.conftest import networked  # noqa: E402

P = 3


@pytest.fixture(scope="module")
def tables():
    _, t = simulated_tables(6, P, 600, 4)
    return [Table(x.X, x.names, f"site{k}") for k, x in enumerate(t)]


def _plan(tables):
    cfg = LearnConfig(method="fed-moments", dp=DPConfig(epsilon=6, value_bound=10.0), seed=3)
    return RunPlan.resolve(cfg, Shapes.of_tables(tables))


@pytest.mark.slow  # a heavy end-to-end networked run
def test_split_run_records_the_sum_noise_and_the_assumption(tables):
    plan = _plan(tables)
    sp = split_noise_plan(plan)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        own, _, e1 = networked(plan, tables)
        got, spy, e2 = networked(sp, tables)
    assert not e1 and not e2 and not isinstance(got, Exception), (e1, e2, got)
    # the mean shares, the variance shares (post-processing of the one-off releases: the common
    # public scale), the moment shares; the scale broadcast needs no reply
    assert len(spy.masked) == 3 * P and got.report["communication"]["exchanges"] == 4
    pv, pv0 = got.report["privacy"], own.report["privacy"]
    assert pv["epsilon"] == pytest.approx(pv0["epsilon"], rel=1e-12)  # same cost: the sum carries σ
    mult = sp.privacy.multiplier(sp.privacy.releases[-1].kind)
    for part, part0 in zip(pv["participants"], pv0["participants"]):
        mm = [e for e in part["events"] if e["release"] == "moment-matrix"]
        assert len(mm) == 1 and mm[0]["split"] == P and "colludes" in mm[0]["assumption"]
        assert mm[0]["noise_scale"] == pytest.approx(mult * mm[0]["sensitivity"], rel=1e-12)
        assert [e["release"] for e in part["events"]] == [e["release"] for e in part0["events"]]
        assert part["rho"] == pytest.approx(part0["rho"], rel=1e-12)
    assert any(r.get("split") == P for r in pv["plan"]["releases"])
    assert np.count_nonzero(got.W) >= 1


def _limits(**kw):
    base = {"max_epsilon": 10.0, "max_delta": 1.0, "allow_non_private": False, "max_rounds": None, "methods": None,
            "releases": None, "accept_seeded_noise": True, "accept_split_noise": False}
    base.update(kw)
    return SiteLimits(**base)


def test_a_site_refuses_split_noise_unless_it_opted_in_and_the_sum_is_secure(tables):
    sp = split_noise_plan(_plan(tables))
    spec = {"public_keys": ["00" * 32] * P, "run_id": "00" * 16, "scale_bits": 32}
    body = {"plan": sp.to_dict(), "index": 0, "secure_sum": spec}
    with pytest.raises(RefusedError, match="--accept-split-noise"):
        check_plan(body, tables[0], _limits(), "site0")
    with pytest.raises(RefusedError, match="without a secure sum"):
        check_plan({**body, "secure_sum": None}, tables[0], _limits(accept_split_noise=True), "site0")
    acc = check_plan(body, tables[0], _limits(accept_split_noise=True), "site0")
    assert acc.index == 0 and acc.plan == sp

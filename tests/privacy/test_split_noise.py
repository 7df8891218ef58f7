"""Split DP noise: the release list and the ledger mark it, its cost equals the unsplit release's,
only fed-moments' moment matrix can be split, and an in-process run refuses it."""

import numpy as np
import pytest

from bnsl_cli.errors import OptionError
from bnsl_cli.plan.options import DPConfig, LearnConfig
from bnsl_cli.plan.run_plan import RunPlan
from bnsl_cli.plan.shapes import Shapes
from bnsl_cli.privacy.ledger import SPLIT_ASSUMPTION, PrivacyEvent
from bnsl_cli.privacy.release_plan import ledger_of
from bnsl_cli.privacy.releases import PlannedRelease, ReleaseKind
from bnsl_cli.privacy.split_noise import check_split_allowed, split_noise_plan, split_of
from bnsl_cli.learn import learn
from tests._sim import simulated_tables


@pytest.fixture(scope="module")
def tables():
    return simulated_tables(6, 3, 400, 2)[1]


def _plan(tables, **kw):
    return RunPlan.resolve(LearnConfig(**kw), Shapes.of_tables(tables))


def test_marks_round_trip_and_cost_is_unchanged():
    r = PlannedRelease(ReleaseKind.MOMENT_MATRIX, "gaussian", 1.3, 1, split=4)
    assert PlannedRelease.from_dict(r.to_dict()) == r and r.to_dict()["split"] == 4
    assert "split" not in PlannedRelease(ReleaseKind.MOMENT_MATRIX, "gaussian", 1.3).to_dict()
    ev = PrivacyEvent(ReleaseKind.MOMENT_MATRIX, "gaussian", 2.0, 2.6, 1, split=4)
    d = ev.to_dict()
    assert d["split"] == 4 and d["assumption"] == SPLIT_ASSUMPTION
    assert PrivacyEvent.from_dict(d) == ev
    # the cost is read from the noise of the sum: the same as the unsplit release with that noise
    assert ev.rho == PrivacyEvent(ReleaseKind.MOMENT_MATRIX, "gaussian", 2.0, 2.6, 1).rho
    assert ledger_of([r]).max_rho() == ledger_of([PlannedRelease(ReleaseKind.MOMENT_MATRIX, "gaussian", 1.3)]).max_rho()
    with pytest.raises(ValueError):
        PlannedRelease(ReleaseKind.MOMENT_MATRIX, "gaussian", 1.3, 1, split=0)


def test_only_fed_moments_moment_matrix_is_split(tables):
    plan = _plan(tables, method="fed-moments", dp=DPConfig(epsilon=5, value_bound=10.0))
    sp = split_noise_plan(plan)
    assert split_of(plan) == 1 and split_of(sp) == 3
    assert [r.split for r in sp.privacy.releases if r.kind == ReleaseKind.MOMENT_MATRIX] == [3]
    assert all(r.split == 1 for r in sp.privacy.releases if r.kind != ReleaseKind.MOMENT_MATRIX)
    assert sp.privacy.spend() == plan.privacy.spend()  # ε and ρ unchanged
    assert RunPlan.from_dict(sp.to_dict()) == sp  # what the sites receive
    for kw in ({"method": "fed-sparse", "dp": DPConfig(epsilon=5)}, {"method": "fed-bnsl", "dp": DPConfig(epsilon=5)},
               {"method": "fed-moments"}):
        with pytest.raises(OptionError, match="--split-noise"):
            split_noise_plan(_plan(tables, **kw))
    with pytest.raises(OptionError, match="two sites"):
        split_noise_plan(_plan(tables[:1], method="fed-moments", dp=DPConfig(epsilon=5, value_bound=10.0)))


def test_in_process_run_refuses_split_noise(tables):
    sp = split_noise_plan(_plan(tables, method="fed-moments", dp=DPConfig(epsilon=5, value_bound=10.0), seed=1))
    with pytest.raises(OptionError, match="bnsl learn cannot use it"):
        learn(tables, sp)
    check_split_allowed(sp, secure_sum=True)  # fine under a secure sum


def test_each_site_draws_its_share_of_the_noise():
    from bnsl_cli.federated.methods.moments import private_moment_matrix
    from bnsl_cli.stats import upper_triangle

    d = 60
    Z = np.zeros((5, d))
    full, ev1 = private_moment_matrix(Z, 1.5, 1.0, np.random.default_rng(0))
    part, ev4 = private_moment_matrix(Z, 1.5, 1.0, np.random.default_rng(0), split=4)
    assert ev1.noise_scale == ev4.noise_scale and ev4.split == 4  # the ledger records the sum's noise
    s1, s4 = np.std(upper_triangle(full)), np.std(upper_triangle(part))
    assert s1 == pytest.approx(ev1.noise_scale, rel=0.1)
    assert s4 == pytest.approx(ev1.noise_scale / 2, rel=0.1)  # each of 4 sites adds N(0, σ²/4)

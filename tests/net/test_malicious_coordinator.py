"""A malicious coordinator against a site's guard (:mod:`bnsl_cli.net.policy`).

Each attack drives a guarded participant with crafted protocol messages (or sends a tampered plan)
and checks that the site refuses (a GuardRefusedError / RefusedError, exit 5) and that its ledger
never spends more than the zCDP ρ it accepted. The end-to-end tests run ``bnsl join`` against a
coordinator in this process that sends more rounds than its plan, a replayed round and a second plan.
"""

from __future__ import annotations

import threading
from dataclasses import replace

import numpy as np
import pytest

pytest.importorskip("grpc")
pytest.importorskip("cryptography")

from bnsl_cli.errors import GuardRefusedError, RefusedError  # noqa: E402
from bnsl_cli.federated.messages import (  # noqa: E402
    CentreBroadcast,
    ConsensusBroadcast,
    GramRequest,
    StandardizeBroadcast,
    StatsRequest,
)
from bnsl_cli.federated.methods.suffstats.messages import BasisBroadcast, FirstRequest  # noqa: E402
from bnsl_cli.federated.methods.registry import method_spec  # noqa: E402
from bnsl_cli.net.policy import SiteGuard, SiteLimits, SpendGuard, check_plan, guarded_participant  # noqa: E402
from bnsl_cli.plan.options import DPConfig, LearnConfig  # noqa: E402
from bnsl_cli.plan.run_plan import RunPlan  # noqa: E402
from bnsl_cli.plan.shapes import Shapes  # noqa: E402
from bnsl_cli.privacy.releases import ReleaseKind  # noqa: E402

LIMITS = SiteLimits(max_epsilon=8.0, max_delta=1.0)
ROUNDS, STEPS = 5, 20


def _plan(tables, **kw):
    opts = dict(method="fed-sparse", rounds=ROUNDS, steps=STEPS, dp=DPConfig(epsilon=5.0, value_bound=10.0))
    opts.update(kw)
    takes = method_spec(opts["method"]).options  # the defaults above only where the method takes them
    for attr, flag in (("rounds", "--rounds"), ("steps", "--steps")):
        if flag not in takes and attr not in kw:
            opts.pop(attr)
    if "dp" not in kw and "--value-bound" not in takes:
        opts["dp"] = DPConfig(epsilon=5.0)
    return RunPlan.resolve(LearnConfig(**opts), Shapes.of_tables(tables))


def _body(plan, index=0):
    return {"plan": plan.to_dict(), "index": index, "secure_sum": None}


def _guard(tables, **kw):
    acc = check_plan(_body(_plan(tables, **kw)), tables[0], LIMITS, "site0")
    return acc, guarded_participant(acc)


def _rho2(r):
    """ρ₂ of round ``r`` on the default schedule (a participant refuses any other)."""
    c = LearnConfig()
    v = float(c.rho2)
    for _ in range(r - 1):
        v = min(v * float(c.rho2_growth), float(c.rho_max))
    return v


def _round(r, d, stop=False):
    return ConsensusBroadcast(r, d, np.zeros((d, d)), _rho2(r), stop=stop).encode()


def _within(guard: SpendGuard, rho: float) -> None:
    """The site's ledger spent at most the ρ it accepted."""
    assert guard.rho_spent <= rho * (1 + 1e-9), (guard.rho_spent, rho)


def _refused(guard, msg, says):
    before = guard.spent()
    with pytest.raises(GuardRefusedError, match=says) as info:
        guard.handle(msg)
    assert info.value.exit_code == 5 and "\n" not in str(info.value)
    assert guard.spent() == before  # nothing released for the refused message
    # and the guard stays closed: even an in-plan message is refused from now on
    with pytest.raises(GuardRefusedError, match="stopped earlier"):
        guard.handle(_round(guard.last_round + 1, guard.plan.d))


# -- driven directly -----------------------------------------------------------------------------


def test_more_rounds_than_planned_are_refused(tables):
    acc, g = _guard(tables)
    d = acc.plan.d
    for r in range(1, ROUNDS + 1):
        assert g.handle(_round(r, d)) is not None
    # the plan's whole iterative budget was spent on exactly its rounds
    assert g.spent()[0][ReleaseKind.SELECTION] == ROUNDS * STEPS
    _refused(g, _round(ROUNDS + 1, d), "beyond the plan's 5 rounds")
    _within(g, acc.rho)


def test_a_replayed_round_is_refused(tables):
    acc, g = _guard(tables)
    d = acc.plan.d
    for r in range(1, 5):
        g.handle(_round(r, d))
    _refused(g, _round(2, d), "numbered 2 after round 4")
    _within(g, acc.rho)


@pytest.mark.parametrize("order", [(2,), (1, 3), (1, 2, 2), (1, 1)], ids=["starts-at-2", "skips-2", "repeats-2", "repeats-1"])
def test_reordered_rounds_are_refused(tables, order):
    acc, g = _guard(tables)
    d = acc.plan.d
    for r in order[:-1]:
        g.handle(_round(r, d))
    _refused(g, _round(order[-1], d), "replayed, skipped or reordered")
    _within(g, acc.rho)


def test_a_plan_whose_steps_do_not_match_its_release_list_is_refused(tables):
    """``steps`` 200 with a release list calibrated for 20 steps per round: the participant would
    run 10× the planned DP-PGCD releases (10× the planned selections and updates)."""
    plan = _plan(tables)
    bad = plan.to_dict()
    bad["steps"] = 200
    with pytest.raises(RefusedError, match="release list is not the one its public quantities give") as info:
        check_plan({"plan": bad, "index": 0, "secure_sum": None}, tables[0], LIMITS, "site0")
    assert info.value.exit_code == 5
    # and the run-time guard alone (had the plan check been skipped) refuses the first round: its
    # 200 steps exceed the 5 × 20 selections the release list allows
    tampered = RunPlan.from_dict(bad)
    from bnsl_cli.federated.methods.registry import make_participant
    from bnsl_cli.run import participant_rngs

    g = SpendGuard(make_participant(tampered, 0, tables[0].X, participant_rngs(tampered)[0]), tampered)
    _refused(g, _round(1, plan.d), "beyond the plan's 100")
    _within(g, plan.privacy.spend()[1])


def _divided(plan, factor, counts_divisor):
    """The plan with every noise multiplier ÷ ``factor`` and every count ÷ ``counts_divisor`` (at
    least 1): the release list's own ε stays small while the participant would release as often as
    its rounds and steps say, with ``factor``× less noise."""
    pv = plan.privacy
    rel = tuple(replace(r, multiplier=r.multiplier / factor, count=max(1, r.count // counts_divisor)) for r in pv.releases)
    return replace(plan, privacy=replace(pv, releases=rel))


@pytest.mark.parametrize("counts_divisor", [1, 100], ids=["same-counts", "matching-counts"])
def test_divided_multipliers_are_refused(tables, counts_divisor):
    """Multipliers ÷ 10: with the same counts the list's own ε is ~100× the plan's; with the counts
    ÷ 100 as well it stays near the plan's while the participant would still release as often as
    its rounds and steps say. Either way the list is not what the plan's public quantities give."""
    plan = _plan(tables)
    bad = _divided(plan, 10.0, counts_divisor)
    with pytest.raises(RefusedError, match="release list is not the one its public quantities give"):
        check_plan(_body(bad), tables[0], SiteLimits(max_epsilon=1e6, max_delta=1.0), "site0")


def test_matching_counts_are_caught_by_the_run_time_count_too(tables):
    """Had the plan check been skipped and the tampered list's own ρ accepted, the guard still
    refuses the first round: its 20 selections exceed the list's count of 1."""
    from bnsl_cli.federated.methods.registry import make_participant
    from bnsl_cli.run import participant_rngs

    bad = _divided(_plan(tables), 10.0, 100)
    claimed = bad.privacy.spend()[1]
    g = SpendGuard(make_participant(bad, 0, tables[0].X, participant_rngs(bad)[0]), bad, rho=claimed)
    _refused(g, _round(1, bad.d), "beyond the plan's 1")
    _within(g, claimed)


def test_divided_multipliers_spend_beyond_the_accepted_budget_is_refused_at_build_time(tables):
    """A participant built from a list with less noise than the accepted one: its one-off releases
    already exceed the accepted ρ, so the guard refuses before anything is answered."""
    plan = _plan(tables)
    bad = _divided(plan, 10.0, 1)
    from bnsl_cli.federated.methods.registry import make_participant
    from bnsl_cli.run import participant_rngs

    with pytest.raises(GuardRefusedError, match="more than the accepted"):
        SpendGuard(make_participant(bad, 0, tables[0].X, participant_rngs(bad)[0]), bad, rho=plan.privacy.spend()[1])


def test_a_second_polish_request_is_refused(tables):
    acc, g = _guard(tables)
    d = acc.plan.d
    assert acc.plan.polish
    for r in (1, 2):
        g.handle(_round(r, d))
    pairs = np.array([0 * d + 1, 1 * d + 2], dtype=np.int64)
    assert g.handle(GramRequest(3, d, pairs).encode()) is not None
    _refused(g, GramRequest(3, d, pairs).encode(), "a second polish request")
    _within(g, acc.rho)


def test_a_polish_request_in_a_plan_without_the_polish_is_refused(tables):
    acc, g = _guard(tables, polish=False)
    d = acc.plan.d
    g.handle(_round(1, d))
    _refused(g, GramRequest(2, d, np.array([1], dtype=np.int64)).encode(), "without the polish")


def test_a_round_after_the_polish_or_the_stop_is_refused(tables):
    acc, g = _guard(tables)
    d = acc.plan.d
    g.handle(_round(1, d))
    g.handle(GramRequest(2, d, np.array([1], dtype=np.int64)).encode())
    _refused(g, _round(2, d), "after the polish request")
    acc, g = _guard(tables)
    g.handle(_round(1, d))
    assert g.handle(_round(2, d, stop=True)) is None
    with pytest.raises(GuardRefusedError, match="after the stop broadcast"):
        g.handle(_round(3, d))
    _within(g, acc.rho)


def test_a_second_plan_is_refused(tables):
    plan = _plan(tables)
    site = SiteGuard(tables[0], LIMITS, "site0")
    g = site.on_plan(_body(plan))
    g.handle(_round(1, plan.d))
    with pytest.raises(GuardRefusedError, match="second plan"):
        site.on_plan(_body(_plan(tables, rounds=50)))
    _within(g, site.accepted.rho)


def test_second_statistics_and_standardisation_requests_are_refused(tables):
    acc, g = _guard(tables, standardize=True)
    d = acc.plan.d
    g.handle(StatsRequest(0, d).encode())
    _refused(g, StatsRequest(0, d).encode(), "a second column-statistics request")
    acc, g = _guard(tables, standardize=True)
    g.handle(StatsRequest(0, d).encode())
    g.handle(CentreBroadcast(1, d, np.zeros(d)).encode())
    assert g.handle(StandardizeBroadcast(0, d, np.zeros(d), np.ones(d)).encode()) is None
    _refused(g, StandardizeBroadcast(0, d, np.zeros(d), np.ones(d)).encode(), "a second standardisation broadcast")
    _within(g, acc.rho)


def test_an_honest_sequence_passes_the_guard_and_spends_the_plan(tables):
    """The guard refuses nothing an honest coordinator sends: the whole schedule, polish and stop."""
    acc, g = _guard(tables, standardize=True)
    d = acc.plan.d
    g.handle(StatsRequest(0, d).encode())
    g.handle(CentreBroadcast(1, d, np.zeros(d)).encode())
    g.handle(StandardizeBroadcast(0, d, np.zeros(d), np.ones(d)).encode())
    for r in range(1, ROUNDS + 1):
        g.handle(_round(r, d))
    g.handle(GramRequest(ROUNDS + 1, d, np.array([1, 2], dtype=np.int64)).encode())
    assert g.handle(_round(ROUNDS + 1, d, stop=True)) is None
    assert g.rho_spent == pytest.approx(acc.rho, rel=1e-9)
    _within(g, acc.rho)


def _suffstats_guard(tables, **dp):
    from bnsl_cli.federated.methods.suffstats import pair_bins, value_bins

    plan = _plan(tables, method="fed-suffstats", dp=DPConfig(epsilon=5.0, noise="per-site", **dp))
    acc = check_plan(_body(plan), tables[0], LIMITS, "site0")
    d = plan.d
    first = FirstRequest(0, d, d * (value_bins() + pair_bins())).encode()
    return acc, guarded_participant(acc), first


def _centre(d, rnd=None):
    from bnsl_cli.federated.methods.suffstats.messages import CENTRE_ROUND, CentreRequest
    from bnsl_cli.federated.methods.suffstats import CENTRE_BINS

    return CentreRequest(CENTRE_ROUND if rnd is None else rnd, d, d * CENTRE_BINS, np.zeros(d), np.ones(d)).encode()


def _basis(k, d):
    return BasisBroadcast(k, d, np.zeros(d), np.ones(d), np.eye(d)).encode()


def test_fed_suffstats_stages_beyond_the_plan_are_refused(tables):
    """fed-suffstats: the first request once (one scale-histogram release), the centre request once
    (one centre-histogram release), then one basis broadcast per planned stage (one whitened-moment
    release each); a fifth stage after a 4-stage plan, a replayed stage, a second first or centre
    request, a centre request out of its place or with another number are refused, and the ledger
    stays within ρ."""
    from bnsl_cli.federated.methods.suffstats import STAGES
    from bnsl_cli.federated.methods.suffstats.sequence import planned_stages

    acc, g, first = _suffstats_guard(tables)
    d = acc.plan.d
    assert STAGES == 4 and planned_stages(acc.plan) == STAGES
    assert g.handle(first) is not None
    assert g.spent()[0] == {ReleaseKind.SCALE_HISTOGRAM: 1}
    assert g.handle(_centre(d)) is not None
    assert g.spent()[0] == {ReleaseKind.SCALE_HISTOGRAM: 1, ReleaseKind.CENTRE_HISTOGRAM: 1}
    _refused_suffstats(g, _centre(d), "second fed-suffstats centre request")
    acc, g, first = _suffstats_guard(tables)
    g.handle(first)
    g.handle(_centre(d))
    for k in range(1, STAGES + 1):
        assert g.handle(_basis(k, d)) is not None
    assert g.spent()[0][ReleaseKind.WHITENED_MOMENTS] == STAGES
    assert g.rho_spent == pytest.approx(acc.rho, rel=1e-9)  # the honest sequence spends the plan
    _refused_suffstats(g, _basis(STAGES + 1, d), "stage 5, beyond the plan's 4 stages")
    _within(g, acc.rho)

    acc, g, first = _suffstats_guard(tables)
    g.handle(first)
    g.handle(_basis(1, d))
    g.handle(_basis(2, d))
    _refused_suffstats(g, _basis(2, d), "stage 2 after stage 2")
    acc, g, first = _suffstats_guard(tables)
    g.handle(first)
    _refused_suffstats(g, first, "second fed-suffstats first request")
    acc, g, first = _suffstats_guard(tables)
    _refused_suffstats(g, _basis(1, d), "before the first request")
    acc, g, first = _suffstats_guard(tables)
    _refused_suffstats(g, _centre(d), "centre request before the first request")
    acc, g, first = _suffstats_guard(tables)
    g.handle(first)
    g.handle(_basis(1, d))
    _refused_suffstats(g, _centre(d), "centre request after the stages began")
    acc, g, first = _suffstats_guard(tables)
    g.handle(first)
    _refused_suffstats(g, _centre(d, rnd=0), "centre request numbered 0")


def _refused_suffstats(guard, msg, says):
    before = guard.spent()
    with pytest.raises(GuardRefusedError, match=says) as info:
        guard.handle(msg)
    assert info.value.exit_code == 5
    assert guard.spent() == before
    with pytest.raises(GuardRefusedError, match="stopped earlier"):
        guard.handle(_basis(guard.stages_done + 1, guard.plan.d))


def test_fed_suffstats_messages_are_refused_in_other_plans(tables):
    acc, g = _guard(tables)
    _refused(g, _basis(1, acc.plan.d), "kind 40, which a fed-sparse site does not take")


def test_a_round_broadcast_to_a_fed_suffstats_site_is_refused_before_the_participant_sees_it(tables):
    # (the guard used to admit a consensus round for any method: the fed-suffstats site then failed
    # with an internal ValueError)
    acc, g = _guard(tables, method="fed-suffstats", dp=DPConfig(epsilon=5.0, noise="per-site"))
    seen = []
    inner = g.inner.handle
    g.inner.handle = lambda data: seen.append(data) or inner(data)
    _refused(g, _round(1, acc.plan.d), "kind 1, which a fed-suffstats site does not take")
    assert seen == []


def test_a_non_private_plan_is_held_to_its_rounds_too(tables):
    acc = check_plan(_body(_plan(tables, dp=None)), tables[0], SiteLimits(allow_non_private=True), "site0")
    g = guarded_participant(acc)
    for r in range(1, ROUNDS + 1):
        g.handle(_round(r, acc.plan.d))
    _refused(g, _round(ROUNDS + 1, acc.plan.d), "beyond the plan's 5 rounds")


# -- end to end: bnsl join against a malicious coordinator over loopback gRPC ----------------------


def _malicious(csv, tmp_path, attack):
    """``bnsl join --insecure`` of ``csv`` against a coordinator in this process that resolves an
    honest private plan (5 rounds) and then runs ``attack(fleet, plan)``. Returns (what the
    attack raised, the site's exit code and stderr, its transcript records)."""
    from tests.net.conftest import join_against

    def plan_for(shapes):
        return RunPlan.resolve(LearnConfig(method="fed-sparse", rounds=ROUNDS, steps=STEPS,
                                           dp=DPConfig(epsilon=5.0, value_bound=10.0)), shapes)

    _, raised, code, err, records = join_against(csv, tmp_path, ["--max-epsilon", "8"], plan_for, attack)
    return raised, code, err, records


def _site_spend(records):
    accepted = next(r for r in records if r["event"] == "plan" and r["decision"] == "accepted")
    spent = sum(r["rho"] for r in records if r["event"] == "release")
    return accepted["rho"], spent


@pytest.mark.slow  # a heavy end-to-end networked run
def test_join_refuses_rounds_beyond_the_plan_over_grpc(world, tmp_path):
    """15 rounds after a 5-round plan: the site answers 5 and refuses the 6th (exit 5), records the
    refusal, and its transcript's spend stays within the plan it accepted."""
    _, csvs = world
    answered = []

    def attack(fleet, plan):
        for r in range(1, 16):
            fleet.exchange(_round(r, plan.d))
            answered.append(r)

    raised, code, err, records = _malicious(csvs[0], tmp_path, attack)
    assert answered == [1, 2, 3, 4, 5]
    assert type(raised).__name__ == "SiteRefusedError" and "beyond the plan's 5 rounds" in str(raised)
    assert code == 5, err
    assert "beyond the plan's 5 rounds" in err
    refusals = [r for r in records if r["event"] == "refused"]
    assert len(refusals) == 1 and refusals[0]["round"] == 6
    assert not any(r["event"] == "sent" and r.get("round") == 6 and r["frame"] == "DATA" for r in records)
    rho, spent = _site_spend(records)
    assert spent <= rho * (1 + 1e-9)


@pytest.mark.slow  # a heavy end-to-end networked run
def test_join_refuses_a_replayed_round_and_a_second_plan_over_grpc(world, tmp_path):
    _, csvs = world

    def replay(fleet, plan):
        for r in (1, 2, 3, 4, 2):
            fleet.exchange(_round(r, plan.d))

    raised, code, err, records = _malicious(csvs[1], tmp_path / "replay", replay)
    assert "numbered 2 after round 4" in str(raised) and code == 5, err
    rho, spent = _site_spend(records)
    assert spent <= rho * (1 + 1e-9)

    def second_plan(fleet, plan):
        from bnsl_cli.net import frames as F

        fleet.exchange(_round(1, plan.d))
        wider = replace(plan, rounds=50)
        for s in fleet.sites:
            s.send(F.control(F.PLAN, {"plan": wider.to_dict(), "index": 0, "secure_sum": None}))
        fleet.exchange(_round(2, plan.d))

    raised, code, err, records = _malicious(csvs[1], tmp_path / "plan", second_plan)
    assert "second plan" in str(raised) and code == 5, err
    assert any(r["event"] == "refused" and "second plan" in r["reason"] for r in records)


HONEST = [
    dict(),
    dict(polish=False),
    dict(standardize=True),
    dict(method="fed-sparse", dp=DPConfig(epsilon=3.0, public_means=True, clip_levels="static", conversion="simple", delta=1e-4)),
    dict(method="fed-sparse", dp=DPConfig(epsilon=4.0, polish_share=0.3, selection_share=0.3)),
    dict(method="fed-bnsl", rounds=30),
    dict(method="fed-moments"),
    dict(method="fed-moments", dp=DPConfig(epsilon=5.0)),
    dict(method="fed-sparse", dp=DPConfig(epsilon=5.0, accountant="zcdp")),
    dict(method="fed-moments", dp=DPConfig(epsilon=5.0, accountant="zcdp")),
    dict(method="fed-suffstats", dp=DPConfig(epsilon=5.0, noise="per-site")),
    dict(method="fed-suffstats", dp=DPConfig(epsilon=5.0, noise="per-site", accountant="zcdp")),
]


@pytest.mark.parametrize("opts", HONEST, ids=[",".join(f"{k}" for k in o) or "default" for o in HONEST])
def test_honest_plans_pass_the_recomputation(tables, opts):
    """Every plan an honest coordinator resolves is exactly what its public quantities give."""
    acc = check_plan(_body(_plan(tables, **opts)), tables[0], SiteLimits(max_epsilon=10.0, max_delta=1.0), "site0")
    assert acc.rho == pytest.approx(acc.plan.privacy.spend()[1], rel=1e-15)
    assert acc.epsilon <= acc.plan.privacy.epsilon


@pytest.mark.parametrize("tolerance", [0, 1])
@pytest.mark.parametrize("accountant", ["pld", "zcdp"])
def test_honest_distributed_noise_plans_pass_the_recomputation(tables, tolerance, accountant):
    """fed-suffstats' distributed noise (split P − T) under either accountant is recomputed exactly;
    a split the options cannot give is refused."""
    dp = DPConfig(epsilon=5.0, noise="distributed", collusion_tolerance=tolerance, accountant=accountant)
    plan = _plan(tables, method="fed-suffstats", dp=dp)
    assert max(r.split for r in plan.privacy.releases) == len(tables) - tolerance
    limits = SiteLimits(max_epsilon=10.0, max_delta=1.0, accept_split_noise=True)
    body = {"plan": plan.to_dict(), "index": 0, "secure_sum": {"scale_bits": 32}}
    acc = check_plan(body, tables[0], limits, "site0")
    assert acc.rho == pytest.approx(plan.privacy.spend()[1], rel=1e-15)
    bad = plan.to_dict()
    bad["privacy"]["releases"][-1]["split"] = len(tables) + 1
    with pytest.raises(RefusedError):
        check_plan({**body, "plan": bad}, tables[0], limits, "site0")


def test_the_recomputation_tolerates_last_bit_rounding_only(tables):
    """Another machine's libm may round the calibration in the last bits: a relative 1e-12 passes
    (ε and ρ then read from the larger of the two lists), 1e-6 is refused."""
    plan = _plan(tables)
    close = _divided(plan, 1 + 1e-12, 1)
    acc = check_plan(_body(close), tables[0], LIMITS, "site0")
    assert acc.rho >= plan.privacy.spend()[1]
    with pytest.raises(RefusedError, match="release list is not the one"):
        check_plan(_body(_divided(plan, 1 + 1e-6, 1)), tables[0], LIMITS, "site0")


def test_a_python_site_with_its_own_participant_factory_is_guarded(tables):
    """A site run from Python (run_site with ``SiteGuard(...).on_plan`` and its own participant
    factory) is held to its plan like ``bnsl join``."""
    from bnsl_cli.errors import BnslError
    from bnsl_cli.federated.methods.registry import make_participant
    from bnsl_cli.net.fleet import NetworkFleet
    from bnsl_cli.net.site import run_site

    plan = _plan(tables[:1], dp=None)
    t = tables[0]
    fleet = NetworkFleet("127.0.0.1:0", 1, timeout=20)
    built, errors = [], []

    def make(plan, index, X, rng):
        built.append(index)
        return make_participant(plan, index, X, rng)

    site_guard = SiteGuard(t, SiteLimits(allow_non_private=True), t.path, make=make)

    def site():
        try:
            run_site(f"127.0.0.1:{fleet.port}", {"site": t.path, "columns": list(t.names), "rows": t.n},
                     site_guard.on_plan, connect_timeout=5, timeout=20)
        except BnslError as exc:
            errors.append(exc)

    th = threading.Thread(target=site)
    th.start()
    answered = []
    try:
        fleet.gather(20)
        fleet.start(lambda i: _body(plan, i))
        with pytest.raises(RefusedError, match="beyond the plan's 5 rounds"):
            for r in range(1, 10):
                fleet.exchange(_round(r, plan.d))
                answered.append(r)
    finally:
        fleet.close()
        th.join(20)
    assert built == [0] and answered == [1, 2, 3, 4, 5]
    assert len(errors) == 1 and isinstance(errors[0], GuardRefusedError) and errors[0].exit_code == 5

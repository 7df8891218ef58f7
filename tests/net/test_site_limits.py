"""What a site accepts, what it says when it refuses, and what it sends and records: join's limits
(every refusal a RefusedError, exit 5), the transcript's control-frame bodies, the private SUMMARY
(public or ledgered values only, events packed), and the coordinator ending every connection."""

import json
import threading
import time

import numpy as np
import pytest

pytest.importorskip("grpc")
pytest.importorskip("cryptography")

from bnsl_cli.errors import RefusedError, ShardMismatchError  # noqa: E402
from bnsl_cli.federated.messages import CentreBroadcast, ShareReply, StatsRequest  # noqa: E402
from bnsl_cli.net import frames as F  # noqa: E402
from bnsl_cli.net.common import FederationError, SiteRefusedError, pack_events, unpack_events  # noqa: E402
from bnsl_cli.net.fleet import NetworkFleet  # noqa: E402
from bnsl_cli.federated.methods.registry import make_participant  # noqa: E402
from bnsl_cli.net.policy import SiteLimits, admm_rounds, check_plan  # noqa: E402
from bnsl_cli.io.table import Table  # noqa: E402
from bnsl_cli.plan.options import DPConfig, LearnConfig  # noqa: E402
from bnsl_cli.plan.run_plan import RunPlan  # noqa: E402
from bnsl_cli.plan.shapes import Shapes  # noqa: E402
from bnsl_cli.learn import learn  # noqa: E402
from bnsl_cli.run import participant_rngs  # noqa: E402
from tests._sim import simulated_tables  # noqa: E402
from tests.net.conftest import D, P, networked, quiet  # noqa: E402


def _limits(**kw):
    base = {"max_epsilon": 10.0, "max_delta": 1.0, "allow_non_private": True, "max_rounds": None, "methods": None,
            "releases": None, "accept_seeded_noise": False, "accept_split_noise": False,
            "refuse_standardize": False, "require_secure_sum": False}
    base.update(kw)
    return SiteLimits(**base)


def _body(tables, cfg, secure=False):
    plan = RunPlan.resolve(cfg, Shapes.of_tables(tables))
    spec = {"public_keys": ["00" * 32] * P, "run_id": "00" * 16, "scale_bits": 32} if secure else None
    return {"plan": plan.to_dict(), "index": 0, "secure_sum": spec}


REFUSALS = [
    # (plan options, secure sum, limits, what the refusal says)
    (dict(method="fed-bnsl"), False, dict(methods=["fed-sparse"]), "not among --methods fed-sparse"),
    (dict(rounds=7), False, dict(max_rounds=5), "up to 7 ADMM rounds, more than --max-rounds 5"),
    (dict(standardize=True), False, dict(refuse_standardize=True), "--refuse-standardize"),
    (dict(), False, dict(require_secure_sum=True), "--require-secure-sum"),
    (dict(), False, dict(allow_non_private=False), "--allow-non-private"),
    (dict(method="fed-sparse", dp=DPConfig(epsilon=8)), False, dict(max_epsilon=5.0), "more than this site's --max-epsilon 5"),
    (dict(method="fed-sparse", dp=DPConfig(epsilon=8)), False, dict(max_epsilon=None), "set no --max-epsilon"),
    (dict(method="fed-sparse", dp=DPConfig(epsilon=5, delta=1e-3)), False, dict(max_delta=1e-6), "exceeds this site's --max-delta"),
    (dict(method="fed-sparse", dp=DPConfig(epsilon=5)), False, dict(releases=["pgcd-update"]), "not among --releases"),
    (dict(method="fed-sparse", dp=DPConfig(epsilon=5), seed=3), False, dict(), "--accept-seeded-noise"),
]


@pytest.mark.parametrize("opts, secure, limits, says", REFUSALS, ids=[r[3][:30] for r in REFUSALS])
def test_every_refusal_is_a_refused_error_with_exit_code_5(tables, opts, secure, limits, says):
    with pytest.raises(RefusedError, match=None) as info:
        check_plan(_body(tables, LearnConfig(**opts), secure), tables[0], _limits(**limits), "site0")
    assert says in str(info.value) and info.value.exit_code == 5 and "\n" not in str(info.value)


def test_the_same_plans_pass_within_the_limits(tables):
    ok = _limits(max_rounds=80, refuse_standardize=True, require_secure_sum=True)
    acc = check_plan(_body(tables, LearnConfig(rounds=80), secure=True), tables[0], ok, "site0")
    assert acc.plan.rounds == 80 and acc.index == 0 and np.array_equal(acc.X, tables[0].X) and acc.secure_sum
    check_plan(_body(tables, LearnConfig(standardize=True)), tables[0], _limits(), "site0")
    check_plan(_body(tables, LearnConfig(method="fed-sparse", dp=DPConfig(epsilon=5), seed=3)), tables[0],
                _limits(accept_seeded_noise=True), "site0")


def _sized(rows, d=4):
    """One table per entry of ``rows`` (that many rows, ``d`` columns; table k named site{k})."""
    rng = np.random.default_rng(0)
    return [Table(rng.normal(size=(n, d)), tuple(f"x{i}" for i in range(d)), f"site{k}") for k, n in enumerate(rows)]


def test_the_default_max_delta_is_a_fixed_public_bound():
    """Without --max-delta a site accepts δ ≤ DEFAULT_MAX_DELTA = 1e-5, whatever its rows (before:
    1 / its rows, so a 2,000-row site accepted δ = 5e-4); the default δ of learn/serve --dp (at most
    1/n_min²) is within it whenever every site has at least 317 rows."""
    from bnsl_cli.net.policy import DEFAULT_MAX_DELTA

    assert DEFAULT_MAX_DELTA == 1e-5 and SiteLimits().max_delta == DEFAULT_MAX_DELTA
    assert SiteLimits(max_epsilon=5.0).to_dict()["max_delta"] == 1e-5  # the HELLO and transcript show it
    assert SiteLimits(max_delta=1e-3).max_delta == 1e-3
    limits = SiteLimits(max_epsilon=5.0)
    private = dict(method="fed-sparse", rounds=5, steps=5)  # (the default δ does not depend on the method)
    big = _sized([2000, 2000, 2000])
    with pytest.raises(RefusedError, match=r"the plan's δ = 0\.0005 exceeds this site's --max-delta 1e-05"):
        check_plan(_body(big, LearnConfig(**private, dp=DPConfig(epsilon=5.0, delta=5e-4, accountant="zcdp"))), big[0], limits, "site0")
    for rows in ([317, 400, 5000], [500, 500, 500], [100_000, 1000, 2000]):
        tabs = _sized(rows)
        body = _body(tabs, LearnConfig(**private, dp=DPConfig(epsilon=5.0, accountant="zcdp")))
        # learn's default: min(1/n_min², 0.01/n_max), never above 1/n_min²
        assert body["plan"]["privacy"]["delta"] == min(1.0 / min(rows) ** 2, 0.01 / max(rows))
        assert check_plan(body, tabs[0], limits, "site0").epsilon <= 5.0 * (1 + 1e-9)
    small = _sized([900, 300, 900])  # min(1/300², 0.01/900) = 1.1e-5 > 1e-5: a fleet with a site this small states its δ
    with pytest.raises(RefusedError, match="exceeds this site's --max-delta 1e-05"):
        check_plan(_body(small, LearnConfig(**private, dp=DPConfig(epsilon=5.0, accountant="zcdp"))), small[0], limits, "site0")


def test_max_rounds_counts_admm_rounds_only(tables):
    """fed-moments has no ADMM rounds (two exchanges in all; it takes no --rounds): a site's
    --max-rounds does not count its plan's rounds field (80, the default)."""
    body = _body(tables, LearnConfig(method="fed-moments"))
    assert body["plan"]["rounds"] == 80
    assert admm_rounds(check_plan(body, tables[0], _limits(max_rounds=1), "site0").plan) == 0
    assert admm_rounds(RunPlan.from_dict(_body(tables, LearnConfig(method="fed-bnsl", rounds=9))["plan"])) == 9


def test_a_plan_that_does_not_describe_this_site_is_a_federation_error(tables):
    body = _body(tables, LearnConfig())
    with pytest.raises(FederationError, match="this site is 'elsewhere'"):
        check_plan(body, tables[0], _limits(), "elsewhere")
    with pytest.raises(FederationError, match="malformed"):
        check_plan({"plan": {"version": 1}, "index": 0}, tables[0], _limits(), "site0")


def test_a_site_that_aborts_for_another_reason_is_not_a_refusal(tables):
    """Only a refusal (the plan beyond the site's limits) is exit 5 on the coordinator; a site that
    stops at the plan for another reason is a federation failure (6), naming it."""
    plan = RunPlan.resolve(LearnConfig(rounds=5), Shapes.of_tables(tables))

    def broken(plan, k, X, rng):
        if k == 1:
            raise ShardMismatchError("site1.csv: the plan's columns differ from this site's")
        return make_participant(plan, k, X, rng)

    got, _, errors = networked(plan, tables, secure=False, part_for=broken)
    assert type(got) is FederationError and got.exit_code == 6
    # the coordinator hears a fixed reason: the site's file name and path stay at the site
    assert "site 2 (site1) aborted the run: the site's columns differ from the plan's" in str(got)
    assert "site1.csv" not in str(got)
    assert isinstance(errors[1], ShardMismatchError) and all(isinstance(errors[k], FederationError) for k in (0, 2))

    def refusing(plan, k, X, rng):
        if k == 1:
            raise RefusedError("the plan runs up to 5 ADMM rounds, more than --max-rounds 4")
        return make_participant(plan, k, X, rng)

    got, _, errors = networked(plan, tables, secure=False, part_for=refusing)
    assert type(got) is SiteRefusedError and got.exit_code == 5 and "site 2 (site1) refused the run" in str(got)
    assert errors[1].exit_code == 5 and all(errors[k].exit_code == 6 for k in (0, 2))


# -- the transcript and the SUMMARY ---------------------------------------------------------------


def _recs(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.slow  # a heavy end-to-end networked run
def test_private_run_transcripts_hold_every_body_and_match_the_ledger(tables, tmp_path):
    """--dp --standardize with secure sums: every control frame's body is in the transcript; the
    releases a site recorded are the report's ledger for it; its SUMMARY carried only public or
    ledgered values (no timing) and packed events."""
    cfg = LearnConfig(method="fed-sparse", rounds=6, standardize=True, trace=True,
                      dp=DPConfig(epsilon=8, value_bound=20.0), seed=4)
    plan = RunPlan.resolve(cfg, Shapes.of_tables(tables))
    paths = [tmp_path / f"t{k}.jsonl" for k in range(P)]
    got, _, errors = networked(plan, tables, transcripts=paths)
    assert not errors and not isinstance(got, Exception), (errors, got)
    local = quiet(learn, tables, plan)
    for k, path in enumerate(paths):
        recs = _recs(path)
        sent = [r for r in recs if r["event"] == "sent"]
        controls = [r for r in sent if r["frame"] not in ("DATA", "MASKED", "EMPTY")]
        assert [r["frame"] for r in controls] == ["HELLO", "ACCEPT", "SUMMARY"]
        assert all("body" in r for r in controls) and not any("body" in r for r in sent if r not in controls)
        hello, accept, summary = (r["body"] for r in controls)
        assert hello["site"] == f"site{k}" and hello["rows"] == tables[k].n and accept == {}
        assert set(summary) <= {"participant", "rows", "steps_taken", "events", "notes", "B"}
        assert "compute_s" not in summary and set(summary["events"]) == {"kinds", "rows"}
        # the transcript's releases = the SUMMARY's events = the report's ledger = the in-process ledger
        listed = {}
        for r in recs:
            if r["event"] == "release":
                key = (r["release"], r["mechanism"], r["sensitivity"], r["noise_scale"])
                listed[key] = listed.get(key, 0) + r["count"]
        key = lambda e: (e["release"], e["mechanism"], e["sensitivity"], e["noise_scale"])  # noqa: E731
        reported = {key(e): e["count"] for e in got.report["privacy"]["participants"][k]["events"]}
        summed = {key(e): e["count"] for e in unpack_events(summary["events"])}
        in_process = {key(e): e["count"] for e in local.report["privacy"]["participants"][k]["events"]}
        assert listed == reported == summed
        assert set(in_process) == set(reported) or len(in_process) == len(reported)
        assert len(listed) >= 4  # the one-off releases and the DP-PGCD steps
    # the coordinator's report still has a timing per site: the reply times it observed
    assert len(got.report["timing"]["participants_s"]) == P and all(t >= 0 for t in got.report["timing"]["participants_s"])


def test_non_private_summary_keeps_the_timings(tables, tmp_path):
    plan = RunPlan.resolve(LearnConfig(rounds=4), Shapes.of_tables(tables))
    path = tmp_path / "t.jsonl"
    got, _, errors = networked(plan, tables[:1] + tables[1:], secure=False, transcripts=[path, tmp_path / "b", tmp_path / "c"])
    assert not errors
    summary = [r for r in _recs(path) if r["event"] == "sent" and r["frame"] == "SUMMARY"][0]["body"]
    assert "compute_s" in summary and summary["events"] == {"kinds": [], "rows": []}


@pytest.mark.slow  # a heavy end-to-end networked run
def test_packed_events_round_trip_and_are_compact(tables):
    """The DP-PGCD ledger of one site (adaptive clip levels: one event per round and step kind)
    packs to a fraction of its JSON size and unpacks to the same events."""
    from bnsl_cli.federated.fleet import LocalFleet
    from bnsl_cli.run import run

    _, tabs = simulated_tables(20, 3, 600, 7)
    plan = RunPlan.resolve(LearnConfig(method="fed-sparse", dp=DPConfig(epsilon=5)), Shapes.of_tables(tabs))
    rngs = participant_rngs(plan)
    parts = [make_participant(plan, k, t.X, rngs[k]) for k, t in enumerate(tabs)]
    quiet(run, plan, LocalFleet(parts))
    events = parts[0].summary()["events"]
    packed = pack_events(events)
    assert unpack_events(json.loads(json.dumps(packed))) == events
    full, small = len(json.dumps(events, separators=(",", ":"))), len(json.dumps(packed, separators=(",", ":")))
    print(f"{len(events)} events: {full} bytes as dicts, {small} packed")
    assert len(events) > 100 and small < 0.4 * full
    for bad in ({"kinds": [], "rows": [[0, 1.0, 1.0, 1]]}, {"kinds": [["x", "gaussian", 1]], "rows": [[0, 1, 1, 1]]},
                {"rows": []}, {"kinds": [["column-means", "gaussian", 1]], "rows": [[-1, 1.0, 1.0, 1]]}):
        with pytest.raises(ValueError, match="malformed privacy events"):
            unpack_events(bad)


def test_private_statistics_shares_depend_on_the_rows_only_through_the_releases(tables, monkeypatch):
    """Under --dp the column-statistics shares (means, then variances about the pooled mean) are
    post-processing of the site's released means and second moments: with the releases held fixed,
    two different data sets of the same size send the same bytes."""
    import bnsl_cli.privacy.one_off as dpp

    real = dpp.private_preprocessing
    fixed = {}

    def released_fixed(X, *a, **kw):
        centre, v_hat, events, notes = real(X, *a, **kw)  # the real mechanism's ledger events
        fixed.setdefault("values", (np.asarray(centre) * 0 + 0.25, np.asarray(v_hat) * 0 + 2.0))
        return (*fixed["values"], events, notes)

    monkeypatch.setattr(dpp, "private_preprocessing", released_fixed)
    plan = RunPlan.resolve(LearnConfig(method="fed-sparse", standardize=True, dp=DPConfig(epsilon=5, value_bound=20.0)),
                           Shapes.of_tables(tables))
    sent = []
    for X in (tables[0].X, np.random.default_rng(1).normal(size=tables[0].X.shape) * 3 + 7):
        site = make_participant(plan, 0, X, participant_rngs(plan)[0])
        means = site.handle(StatsRequest(0, D).encode())
        variances = site.handle(CentreBroadcast(1, D, np.full(D, 0.1), full=False).encode())
        sent.append((means, variances))
        assert len(site.events()) >= 2  # the releases are in the ledger
    assert sent[0] == sent[1]
    assert np.allclose(ShareReply.decode(sent[0][0]).values, tables[0].n * 0.25 / plan.n_total)


def test_range_error_tells_the_coordinator_the_range_not_the_value(tables):
    """Under secure sums a site's own values are hidden from the coordinator: an out-of-range value
    stops the run with the public range; its magnitude stays in the site's own error."""
    from bnsl_cli.federated.secure_sum import SecureSumRangeError

    big = [Table(t.X * np.array([1.0] * (D - 1) + [1e5]), t.names, t.path) for t in tables]
    plan = RunPlan.resolve(LearnConfig(method="fed-moments", standardize=True), Shapes.of_tables(big))
    got, _, errors = networked(plan, big)
    assert isinstance(got, FederationError) and "fixed-point range" in str(got) and "magnitude" not in str(got)
    assert any(isinstance(e, SecureSumRangeError) and "magnitude" in str(e) for e in errors.values())


# -- the coordinator ends every connection ---------------------------------------------------------


def test_close_ends_a_connection_that_never_said_hello():
    """A connection still waiting to be admitted gets ABORT from close() at once (it is not left to
    its own --timeout, and no server thread stays blocked on it)."""
    import grpc

    from bnsl_cli.net.common import CHANNEL_OPTIONS, METHOD

    fleet = NetworkFleet("127.0.0.1:0", 2, timeout=30)
    channel = grpc.insecure_channel(f"127.0.0.1:{fleet.port}", options=CHANNEL_OPTIONS)
    stop = threading.Event()

    def silence():
        stop.wait(20)
        return
        yield  # noqa: unreachable - a request stream that sends nothing

    got = {}

    def listen():
        try:
            got["frames"] = [F.decode(raw) for raw in channel.stream_stream(METHOD)(silence())]
        except grpc.RpcError as exc:
            got["error"] = exc.code()

    th = threading.Thread(target=listen)
    th.start()
    for _ in range(200):
        if fleet.connections:
            break
        time.sleep(0.02)
    assert fleet.connections == 1, "the connection never reached the coordinator"
    # gather takes it in as a connection whose HELLO is due, then gives up on the run (as on Ctrl-C)
    with pytest.raises(FederationError, match="only 0 of 2 sites joined"):
        fleet.gather(0.5)
    t0 = time.monotonic()
    fleet.close()
    th.join(10)
    stop.set()
    channel.close()
    assert "frames" in got, got
    assert [f.name for f in got["frames"]] == ["ABORT"] and got["frames"][0].body["reason"] == "the coordinator stopped"
    assert time.monotonic() - t0 < 10

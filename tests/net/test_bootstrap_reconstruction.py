"""Rows stay home under ``serve --bootstrap``: the reconstruction attack of issue 43.

A coordinator that knows a bootstrap's resampling weights solves every row from the sum-shaped replies
(``S_b = Σ_i w_bi x_i``): 3 sites × 30 rows, d = 4, 36 sessions were enough, with or without a secure
sum. The tests here run that attack against what a site now does: the weights come from the site's own
stream (the coordinator's best guess, the stream it used to send, solves nothing), and a plan asking
for that many sessions is refused before any session is answered — in the library and over gRPC
against a real ``bnsl join``."""

from __future__ import annotations


import numpy as np
import pytest

from bnsl_cli.confidence import resample_rows
from bnsl_cli.errors import RefusedError
from bnsl_cli.io.table import Table
from bnsl_cli.net.policy import SiteGuard, SiteLimits
from bnsl_cli.net.site_sessions import BootstrapSessions, Resampling, sessions_bound
from bnsl_cli.plan.options import LearnConfig
from bnsl_cli.plan.run_plan import RunPlan
from bnsl_cli.plan.shapes import ParticipantShape, Shapes

N, D, SITES, B = 30, 4, 3, 35  # 36 sessions: B replicates and the run
SEED = 5  # the coordinator's --seed: before the fix, the stream every site resampled from


def _sites():
    rng = np.random.default_rng(2026)
    return [Table(rng.normal(size=(N, D)) * (1 + k), tuple(f"x{j}" for j in range(D)), f"site{k}") for k in range(SITES)]


def _plan(tables, **changes) -> RunPlan:
    from dataclasses import replace

    shapes = Shapes(tables[0].names, tuple(ParticipantShape(t.path, t.n) for t in tables))
    plan = RunPlan.resolve(LearnConfig(method="fed-moments", bootstrap=B, seed=SEED), shapes)
    return replace(plan, **changes)


def _weights(entropy, b, k) -> np.ndarray:
    """The multinomial counts replicate ``b`` gives participant ``k``'s rows under stream ``entropy``."""
    picks = resample_rows(np.arange(N, dtype=float)[:, None], entropy, b, k)[:, 0].astype(int)
    return np.bincount(picks, minlength=N).astype(float)


def _solve(replies, entropy, k) -> np.ndarray:
    """The attacker: least squares of the rows from B replicate sums and the run's plain sum, with the
    weights it believes the site used."""
    W = np.vstack([_weights(entropy, b, k) for b in range(B)] + [np.ones(N)])
    return np.linalg.lstsq(W, np.asarray(replies), rcond=None)[0]


def _replies(table, k, sessions) -> list:
    """What site ``k`` sums in each session (its column sums: the first, sum-shaped reply), on the rows
    its sessions give each replicate (the data path, without the session cap)."""
    tables = _sites()
    out = [sessions.rows(table.X, _plan(tables, replicate=b), k).sum(axis=0) for b in range(B)]
    return out + [table.X.sum(axis=0)]


def test_known_weights_solve_every_row_so_the_attack_is_real():
    # the control: weights the attacker knows (a site that chose --resample-seed 5, the old protocol's stream)
    for k, t in enumerate(_sites()):
        rows = _solve(_replies(t, k, BootstrapSessions(10_000, Resampling.of(SEED))), SEED, k)
        assert np.max(np.abs(rows - t.X)) < 1e-8


def test_secret_weights_leave_the_rows_unsolved():
    for k, t in enumerate(_sites()):
        replies = _replies(t, k, BootstrapSessions(10_000))  # fresh entropy, never sent
        for guess in (SEED, 0, k):  # the plan's seed, and other streams a coordinator might try
            rows = _solve(replies, guess, k)
            err = np.abs(rows - t.X)
            # not one row recovered: every row is off by a sizeable share of the columns' spread
            assert np.median(err) > 0.2 * np.std(t.X), (k, guess, np.median(err))
            assert not np.any(np.all(err < 1e-3 * np.std(t.X), axis=1))


def test_two_sites_with_the_same_rows_and_plan_resample_differently():
    t = _sites()[0]
    plan = _plan(_sites(), replicate=0)
    a = BootstrapSessions(21).rows(t.X, plan, 0)
    b = BootstrapSessions(21).rows(t.X, plan, 0)
    assert not np.array_equal(a, b)
    assert not np.array_equal(a, resample_rows(t.X, SEED, 0, 0))


def test_the_attack_plan_is_refused_before_any_session():
    tables = _sites()
    assert sessions_bound(N, D) == 8  # 30 rows over 4 columns: 8 sessions' sums stay below 120 unknowns
    guard = SiteGuard(tables[0], SiteLimits(allow_non_private=True, max_sessions=1000), "site0")
    with pytest.raises(RefusedError, match="36 sessions.*at most 8"):
        guard.on_plan({"plan": _plan(tables, replicate=0).to_dict(), "index": 0})
    assert guard.accepted is None and guard.guard is None  # no participant was built, nothing answered
    # and with the default cap the site says so before the row bound
    guard = SiteGuard(tables[0], SiteLimits(allow_non_private=True), "site0")
    with pytest.raises(RefusedError, match="at most 8"):
        guard.on_plan({"plan": _plan(tables, replicate=0).to_dict(), "index": 0})


def test_the_coordinator_refuses_a_bootstrap_beyond_a_sites_cap_before_the_first_session():
    from bnsl_cli.net.site_sessions import check_session_caps

    tables = _sites()
    hellos = [{"site": t.path, "rows": t.n, "limits": SiteLimits(allow_non_private=True).to_dict()} for t in tables]
    with pytest.raises(RefusedError, match="site 'site0' answers at most 8.*--bootstrap 7 or fewer"):
        check_session_caps(_plan(tables), hellos)
    check_session_caps(_plan(tables, bootstrap=7), hellos)  # 8 sessions: within every site's limit
    hellos[1]["limits"]["max_sessions"] = 3
    with pytest.raises(RefusedError, match="site 'site1' answers at most 3"):
        check_session_caps(_plan(tables, bootstrap=7), hellos)


# -- over gRPC: a real bnsl join against a coordinator in this process -----------------------------


def _against_join(csv, tmp_path, first_plan):
    """``bnsl join --insecure --allow-non-private`` of ``csv`` against a coordinator that sends
    ``first_plan(plan)`` and then asks for the column statistics (:func:`tests.net.conftest.join_against`)."""
    pytest.importorskip("grpc")
    from bnsl_cli.federated.messages import StatsRequest
    from tests.net.conftest import join_against

    def plan_for(shapes):
        return first_plan(RunPlan.resolve(LearnConfig(method="fed-moments", bootstrap=B, seed=SEED), shapes))

    return join_against(csv, tmp_path, ["--allow-non-private"], plan_for,
                        lambda fleet, plan: fleet.exchange(StatsRequest(0, plan.d).encode()))


@pytest.mark.slow  # two bnsl join processes
@pytest.mark.parametrize("first, says", [
    (lambda plan: plan.__class__.from_dict({**plan.to_dict(), "replicate": 0}), "answers at most"),
    (lambda plan: plan.__class__.from_dict({**plan.to_dict(), "bootstrap": 3, "replicate": 3}), "began a bootstrap with replicate 4"),
], ids=["36-sessions", "replicate-4-first"])
def test_join_refuses_before_sending_any_data_frame(tmp_path, first, says):
    rng = np.random.default_rng(7)
    csv = tmp_path / "site.csv"
    csv.write_text("a,b,c,d\n" + "".join(",".join(f"{v:.6f}" for v in row) + "\n" for row in rng.normal(size=(30, 4))))
    hello, raised, code, err, records = _against_join(csv, tmp_path, first)
    assert hello["limits"]["max_sessions"] == 21  # the cap is in the HELLO
    assert raised is not None and says in str(raised)
    assert code == 5, err
    assert not any(r.get("event") == "sent" and r.get("frame") == "DATA" for r in records)
    assert any(r.get("event") == "plan" and says in r.get("decision", "") for r in records)

"""No message can make a site leak (issue 28): for every message kind a private site answers, random
and crafted messages — tiny and huge diagonals, ``inf − inf`` constructions, subnormals,
±float64-max, NaN where a field must not carry it, bytes flipped in a valid message — are sent to the
real site code on adversarial neighbouring data sets D, D′ (one row replaced by an extreme but finite
row, :func:`tests.privacy.test_bounded_contributions.neighbours`). The observable outcome must be the
same for D and D′: a refusal with the same message (checked on the message alone, before the rows are
touched), or replies that are finite and, with the noise switched off, differ by at most the
sensitivity their ledger event states.

The crafted basis of the issue (L₁₁ = 4 / float64-max, L₂₁ = L₃₁ = L₃₂ = 1: y₁ = ±inf exactly when
|z₁| > 4, y₃ = inf − inf = NaN) is one named case.
"""

from __future__ import annotations

import numpy as np
import pytest

import bnsl_cli.federated.methods.admm.dp_site as dpp
import bnsl_cli.federated.methods.suffstats.releases as ss_releases
from bnsl_cli.federated.methods.suffstats.messages import CENTRE_ROUND
from bnsl_cli.errors import BnslError, GuardRefusedError, UnsafeMessageError
from bnsl_cli.federated.messages import ConsensusBroadcast, GramReply, GramRequest, ShareReply, SparseUpdate, StandardizeBroadcast, StatsRequest
from bnsl_cli.federated.methods.suffstats.messages import BasisBroadcast, CentreRequest, FirstRequest
from bnsl_cli.federated.methods.registry import make_participant
from bnsl_cli.federated.methods.suffstats import CENTRE_BINS, pair_bins, value_bins
from bnsl_cli.federated.methods.suffstats.site import SuffstatsSite
from bnsl_cli.plan.options import DPConfig, LearnConfig
from bnsl_cli.plan.run_plan import RunPlan
from bnsl_cli.plan.shapes import ParticipantShape, Shapes
from bnsl_cli.stats import from_upper_triangle
from tests.privacy.test_bounded_contributions import neighbours, within

FMAX = float(np.finfo(np.float64).max)
#: values a crafted field takes (NaN and ±inf only where noted)
EXTREME = np.array([0.0, 5e-324, -5e-324, 2.2250738585072014e-308, 1e-300, -1e-300, 1e-30, 1e30, 1e300, -1e300,
                    FMAX, -FMAX, 4.0 / FMAX, 1.0, -1.0])
NONFINITE = np.array([np.nan, np.inf, -np.inf])
D = 5
N = 40


def _shapes(d, n, P=2):
    return Shapes(tuple(f"x{j}" for j in range(d)), tuple(ParticipantShape(f"site-{k}.csv", n, None) for k in range(P)))


def _plan(method, d=D, n=N, **kw):
    dp = kw.pop("dp", DPConfig(epsilon=5))
    return RunPlan.resolve(LearnConfig(method=method, dp=dp, **kw), _shapes(d, n))


def _sprinkle(rng, base: np.ndarray, share: float, nonfinite: bool = False) -> np.ndarray:
    """``base`` with about ``share`` of its entries replaced by extreme values."""
    out = np.array(base, dtype=float, copy=True)
    pool = np.concatenate([EXTREME, NONFINITE]) if nonfinite else EXTREME
    hit = rng.random(out.shape) < share
    out[hit] = rng.choice(pool, size=int(hit.sum()))
    return out


def _outcome(call):
    """``("refused", class, message)`` or ``("reply", bytes)`` — what the coordinator observes."""
    try:
        return ("reply", call())
    except (BnslError, ValueError) as exc:
        return ("refused", type(exc).__name__, str(exc))


def _same_refusal_or_replies(a, b):
    assert a[0] == b[0], (a[:3], b[:3])
    if a[0] == "refused":
        assert a == b  # the same class and message: the refusal is data-independent
    return a[0] == "reply"


@pytest.fixture
def no_noise(monkeypatch):
    monkeypatch.setattr(ss_releases, "gaussian_noise", lambda size, std, rng: np.zeros(size))
    monkeypatch.setattr(ss_releases, "isometric_gaussian_matrix", lambda d, std, rng: np.zeros((d, d)))
    monkeypatch.setattr(dpp, "gaussian_noise", lambda size, std, rng: np.zeros(size))


# ---------------------------------------------------------------------------------------------
# fed-suffstats (the --dp default): first request, centre request, basis broadcasts


def _suffstats_site(plan, X):
    site = SuffstatsSite(0, X, privacy=plan.privacy, rng=np.random.default_rng(0), n_total=plan.n_total)
    return site


def _first_bytes(d):
    return FirstRequest(0, d, d * (value_bins() + pair_bins())).encode()


def _stage_outcome(plan, X, msg: bytes):
    site = _suffstats_site(plan, X)
    site.handle(_first_bytes(X.shape[1]))
    out = _outcome(lambda: site.handle(msg))
    if out[0] == "reply":
        return out, site.ledger.events(0)[-1]
    return out, None


def _check_stage(plan, D_, Dp, msg: bytes):
    (a, ev), (b, _) = _stage_outcome(plan, D_, msg), _stage_outcome(plan, Dp, msg)
    if _same_refusal_or_replies(a, b):
        d = D_.shape[1]
        A = from_upper_triangle(ShareReply.decode(a[1]).values * plan.n_total, d + 1)
        B = from_upper_triangle(ShareReply.decode(b[1]).values * plan.n_total, d + 1)
        assert np.all(np.isfinite(A)) and np.all(np.isfinite(B))
        within(float(np.linalg.norm(A - B)), ev.sensitivity)
        return True
    return False


def crafted_basis(d: int) -> tuple:
    """The issue's basis: ``L₁₁ = 4 / float64-max``, ``L₂₁ = L₃₁ = L₃₂ = 1``, the rest the identity."""
    L = np.eye(d)
    L[0, 0] = 4.0 / FMAX
    L[1, 0] = L[2, 0] = L[2, 1] = 1.0
    return np.zeros(d), np.ones(d), L


def test_the_crafted_basis_is_refused_the_same_on_both_neighbours(no_noise):
    plan = _plan("fed-suffstats")
    rng = np.random.default_rng(28)
    X = rng.normal(size=(N, D))
    X[0, 0] = 3.5
    Xp = X.copy()
    Xp[0, 0] = 6.0  # one row moved from 3.5 to 6 standard deviations
    centre, scale, L = crafted_basis(D)
    msg = BasisBroadcast(1, D, centre, scale, L).encode()
    (a, _), (b, _) = _stage_outcome(plan, X, msg), _stage_outcome(plan, Xp, msg)
    assert a == b
    assert a[0] == "refused" and a[1] == UnsafeMessageError.__name__ and "whitening" in a[2]


def _random_basis(rng, d):
    """A basis with extreme finite values sprinkled in (or, one time in five, NaN / inf too)."""
    kind = rng.integers(6)
    L = np.tril(rng.normal(size=(d, d)), -1) + np.diag(rng.uniform(0.3, 2.0, d))
    centre = rng.normal(size=d)
    scale = rng.uniform(0.5, 2.0, d)
    nonfinite = rng.random() < 0.2
    if kind == 0:  # extremes anywhere in L's lower triangle and diagonal
        L = np.tril(_sprinkle(rng, L, 0.3, nonfinite))
    elif kind == 1:  # a tiny diagonal entry against ordinary off-diagonals: inf − inf below it
        i = int(rng.integers(d - 1))
        L[i, i] = rng.choice([5e-324, 4.0 / FMAX, 1e-300, 1e-200])
    elif kind == 2:  # huge off-diagonals
        L = L + np.tril(_sprinkle(rng, np.zeros((d, d)), 0.3), -1)
    elif kind == 3:  # the centre and the scale
        centre = _sprinkle(rng, centre, 0.4, nonfinite)
        scale = np.abs(_sprinkle(rng, scale, 0.4, nonfinite))
    elif kind == 4:  # an entry above the diagonal
        L[0, d - 1] = rng.choice(EXTREME)
    else:  # a negative or zero diagonal entry
        L[int(rng.integers(d)), int(rng.integers(d))] = 0.0
        np.fill_diagonal(L, np.diag(L) * rng.choice([-1.0, 1.0], d))
    return centre, scale, L


@pytest.mark.parametrize("stage", [1, 4])
def test_random_extreme_bases_give_the_same_outcome_on_neighbours(no_noise, stage):
    plan = _plan("fed-suffstats")
    rng = np.random.default_rng(100 + stage)
    replies = refusals = 0
    for k, (_r, D_, Dp, _scale) in enumerate(neighbours(2800 + stage, n=N, d=D)):
        for _ in range(4):
            centre, scale, L = _random_basis(rng, D)
            msg = BasisBroadcast(stage, D, centre, scale, L).encode()
            if _check_stage(plan, D_, Dp, msg):
                replies += 1
            else:
                refusals += 1
    assert replies > 0 and refusals > 0  # both paths were exercised


def test_honest_bases_pass_and_their_replies_are_bounded(no_noise):
    # the bounds are far outside an honest basis: a whitening of an ordinary covariance is answered
    plan = _plan("fed-suffstats")
    for _r, D_, Dp, scale in neighbours(2900, n=N, d=D):
        honest = D_[np.all(D_ == Dp, axis=1)]  # the rows both neighbours share
        C = np.cov(honest, rowvar=False) / np.outer(scale, scale) + 1e-3 * np.eye(D)
        L = np.linalg.cholesky(C)
        msg = BasisBroadcast(2, D, honest.mean(axis=0), scale, L).encode()
        assert _check_stage(plan, D_, Dp, msg)


def _centre_outcome(plan, X, msg):
    site = _suffstats_site(plan, X)
    site.handle(_first_bytes(X.shape[1]))
    out = _outcome(lambda: site.handle(msg))
    return out, (site.ledger.events(0)[-1] if out[0] == "reply" else None)


def test_crafted_centre_requests_give_the_same_outcome_on_neighbours(no_noise):
    plan = _plan("fed-suffstats")
    rng = np.random.default_rng(7)
    replies = 0
    for _r, D_, Dp, scale in neighbours(2950, n=N, d=D):
        for _ in range(4):
            lo = _sprinkle(rng, -4.0 * scale, 0.4, rng.random() < 0.2)
            width = _sprinkle(rng, scale / 16.0, 0.4, rng.random() < 0.2)
            count = D * CENTRE_BINS if rng.random() < 0.9 else int(rng.integers(0, 10**6))
            msg = CentreRequest(CENTRE_ROUND, D, count, lo, width).encode()
            (a, ev), (b, _) = _centre_outcome(plan, D_, msg), _centre_outcome(plan, Dp, msg)
            if _same_refusal_or_replies(a, b):
                A, B = (ShareReply.decode(x[1]).values * plan.n_total for x in (a, b))
                assert np.all(np.isfinite(A)) and np.all(np.isfinite(B))
                within(float(np.linalg.norm(A - B)), ev.sensitivity)
                replies += 1
    assert replies > 0


def test_crafted_first_requests_give_the_same_outcome_on_neighbours(no_noise):
    plan = _plan("fed-suffstats")
    rng = np.random.default_rng(8)
    for _r, D_, Dp, _scale in neighbours(2960, n=N, d=D):
        good = D * (value_bins() + pair_bins())
        for count, d, rnd in ((good, D, 0), (int(rng.integers(0, 10**7)), D, 0), (good, D + 1, 0), (good, D, 3)):
            msg = FirstRequest(rnd, d, count).encode()
            a = _outcome(lambda: _suffstats_site(plan, D_).handle(msg))
            b = _outcome(lambda: _suffstats_site(plan, Dp).handle(msg))
            if _same_refusal_or_replies(a, b):
                assert (count, d, rnd) == (good, D, 0)
                A, B = (ShareReply.decode(x[1]).values for x in (a, b))
                assert np.all(np.isfinite(A)) and np.all(np.isfinite(B))
            else:
                assert (count, d, rnd) != (good, D, 0)


# ---------------------------------------------------------------------------------------------
# DP-Fed-Sparse-BNSL: consensus broadcasts (W, ρ₂), the polish's request, the standardisation


def _rho2(plan, r):
    v = plan.penalty.rho2
    for _ in range(r - 1):
        v = min(v * plan.penalty.growth2, plan.penalty.cap)
    return v


def _sparse_plan(**kw):
    return _plan("fed-sparse", rounds=6, steps=4, dp=DPConfig(epsilon=5, value_bound=10.0), **kw)


def _run_rounds(plan, X, messages, seed=5):
    """The participant's outcomes of ``messages`` in order (stops at the first refusal)."""
    p = make_participant(plan, 0, X, np.random.default_rng(seed))
    outs = []
    for m in messages:
        o = _outcome(lambda: p.handle(m))
        outs.append(o)
        if o[0] == "refused":
            break
    return outs, p


def _reply_values(o):
    if o[1] is None:
        return np.zeros(0)
    return SparseUpdate.decode(o[1]).entries.values


def test_consensus_broadcasts_with_extreme_weights_give_the_same_outcome_on_neighbours():
    plan = _sparse_plan()
    rng = np.random.default_rng(9)
    refused = answered = 0
    for _r, D_, Dp, scale in neighbours(3000, n=N, d=D):
        msgs = []
        for r in range(1, 5):
            W = np.zeros((D, D))
            if rng.random() < 0.7:
                W = _sprinkle(rng, rng.normal(size=(D, D)), 0.3, rng.random() < 0.15)
            rho2 = _rho2(plan, r) if rng.random() < 0.8 else float(rng.choice(np.concatenate([EXTREME, NONFINITE])))
            msgs.append(ConsensusBroadcast(r, D, W, rho2).encode())
        a, pa = _run_rounds(plan, D_, msgs)
        b, pb = _run_rounds(plan, Dp, msgs)
        assert [o[0] for o in a] == [o[0] for o in b]
        for x, y in zip(a, b):
            if _same_refusal_or_replies(x, y):
                assert np.all(np.isfinite(_reply_values(x))) and np.all(np.isfinite(_reply_values(y)))
                answered += 1
            else:
                refused += 1
        for p in (pa.inner, pb.inner):  # the site's state stays finite whatever it was sent
            assert np.all(np.isfinite(p.B)) and np.all(np.isfinite(p.beta))
        # the spend does not depend on the rows (which rows' coordinates were updated is the
        # selections' output, public in the replies; each update costs the same ρ)
        assert sum(e.rho for e in pa.events()) == pytest.approx(sum(e.rho for e in pb.events()), rel=1e-9)
    assert refused > 0 and answered > 0


def test_weights_and_rho2_beyond_the_public_bounds_are_refused_before_the_rows_are_used():
    plan = _sparse_plan()
    X = np.random.default_rng(1).normal(size=(N, D))
    for W, rho2, says in (
        (np.full((D, D), 1e300), _rho2(plan, 1), "weight of 1e\\+300"),
        (np.zeros((D, D)), 1e300, "schedule gives"),
        (np.where(np.eye(D) > 0, 0.0, np.nan), _rho2(plan, 1), "not a finite"),
    ):
        outs, p = _run_rounds(plan, X, [ConsensusBroadcast(1, D, W, rho2).encode()])
        assert outs[0][0] == "refused" and outs[0][1] == UnsafeMessageError.__name__, outs
        assert __import__("re").search(says, outs[0][2]), outs[0][2]
        assert p.inner.steps_taken == 0


def test_weights_at_the_bound_keep_the_state_finite_over_many_rounds():
    # W alternating between ±2^64 (the largest accepted) with the schedule's ρ₂: β grows by
    # ρ₂·(B − W) each round; the weights stop at ±STATE_MAX and every value stays finite
    plan = _plan("fed-sparse", rounds=30, steps=4, dp=DPConfig(epsilon=5, value_bound=10.0))
    for _r, D_, Dp, _scale in neighbours(3100, n=N, d=D):
        msgs = []
        for r in range(1, 31):
            W = np.full((D, D), (-1.0) ** r * 2.0**64)
            np.fill_diagonal(W, 0.0)
            msgs.append(ConsensusBroadcast(r, D, W, _rho2(plan, r)).encode())
        for X in (D_, Dp):
            outs, p = _run_rounds(plan, X, msgs)
            assert all(o[0] == "reply" for o in outs), outs[-1][:3]
            assert np.all(np.isfinite(p.inner.B)) and np.all(np.isfinite(p.inner.beta))
            assert all(np.all(np.isfinite(_reply_values(o))) for o in outs)


def _polish_outcome(plan, X, msg):
    p = make_participant(plan, 0, X, np.random.default_rng(3))
    p.handle(ConsensusBroadcast(1, D, np.zeros((D, D)), _rho2(plan, 1)).encode())
    out = _outcome(lambda: p.handle(msg))
    return out, (p.events()[-1] if out[0] == "reply" else None)


def test_crafted_polish_requests_give_the_same_outcome_on_neighbours(no_noise):
    plan = _sparse_plan(polish=True)
    rng = np.random.default_rng(11)
    answered = 0
    for _r, D_, Dp, _scale in neighbours(3200, n=N, d=D):
        good = np.array([a * D + b for a in range(D) for b in range(a, D)], dtype=np.int64)
        for pairs in (good, good[::2], np.concatenate([good, good[:1]]), np.array([-1, 3]), np.array([D * D]),
                      rng.integers(-2**31, 2**31 - 1, size=int(rng.integers(1, 40)))):
            msg = GramRequest(2, D, np.asarray(pairs, dtype=np.int64)).encode()
            (a, _), (b, _) = _polish_outcome(plan, D_, msg), _polish_outcome(plan, Dp, msg)
            if _same_refusal_or_replies(a, b):
                A, B = (GramReply.decode(x[1]).values for x in (a, b))
                assert np.all(np.isfinite(A)) and np.all(np.isfinite(B))
                answered += 1
    assert answered > 0


def _standardize_outcome(plan, X, mean, sd, seed=4):
    p = make_participant(plan, 0, X, np.random.default_rng(seed))
    p.handle(StatsRequest(0, D).encode())
    out = _outcome(lambda: p.handle(StandardizeBroadcast(0, D, mean, sd).encode()))
    if out[0] == "refused":
        return out, p
    # the participant built on the standardised rows answers a round with finite values
    return _outcome(lambda: p.handle(ConsensusBroadcast(1, D, np.zeros((D, D)), _rho2(plan, 1)).encode())), p


def test_crafted_standardisation_broadcasts_give_the_same_outcome_on_neighbours():
    plan = _sparse_plan(standardize=True)
    rng = np.random.default_rng(12)
    refused = answered = 0
    for _r, D_, Dp, scale in neighbours(3300, n=N, d=D):
        for _ in range(3):
            mean = _sprinkle(rng, rng.normal(size=D) * scale, 0.4)
            sd = np.abs(_sprinkle(rng, scale, 0.4))
            (a, _), (b, _) = _standardize_outcome(plan, D_, mean, sd), _standardize_outcome(plan, Dp, mean, sd)
            if _same_refusal_or_replies(a, b):
                assert np.all(np.isfinite(_reply_values(a))) and np.all(np.isfinite(_reply_values(b)))
                answered += 1
            else:
                refused += 1
    assert refused > 0 and answered > 0


# ---------------------------------------------------------------------------------------------
# any message kind: bytes flipped in a valid message


@pytest.mark.parametrize("method", ["fed-suffstats", "fed-sparse"])
def test_flipped_bytes_give_the_same_outcome_on_neighbours(no_noise, method):
    rng = np.random.default_rng(13)
    if method == "fed-suffstats":
        plan = _plan(method)
        L = np.linalg.cholesky(np.eye(D) + 0.3)
        valid = BasisBroadcast(1, D, np.zeros(D), np.ones(D), L).encode()

        def outcome(X, msg):
            site = _suffstats_site(plan, X)
            site.handle(_first_bytes(D))
            return _outcome(lambda: site.handle(msg))
    else:
        plan = _sparse_plan()
        W = np.zeros((D, D))
        W[0, 1] = 0.5
        valid = ConsensusBroadcast(1, D, W, _rho2(plan, 1)).encode()

        def outcome(X, msg):
            return _run_rounds(plan, X, [msg])[0][0]
    for _r, D_, Dp, _scale in neighbours(3400, n=N, d=D):
        for _ in range(6):
            msg = bytearray(valid)
            for _k in range(int(rng.integers(1, 4))):
                msg[int(rng.integers(len(msg)))] = int(rng.integers(256))
            if rng.random() < 0.2:
                msg = msg[: int(rng.integers(len(msg)))]
            a, b = outcome(D_, bytes(msg)), outcome(Dp, bytes(msg))
            if _same_refusal_or_replies(a, b) and a[1] is not None:
                if method == "fed-suffstats":
                    vals = [ShareReply.decode(x[1]).values for x in (a, b)]
                else:
                    vals = [_reply_values(x) for x in (a, b)]
                assert all(np.all(np.isfinite(v)) for v in vals)


def test_refusals_are_guard_refusals():
    # a content refusal is a refusal of the site (exit 5), not a federation failure or a crash
    assert issubclass(UnsafeMessageError, GuardRefusedError)

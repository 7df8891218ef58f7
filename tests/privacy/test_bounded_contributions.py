"""Bounded per-row contributions (issue 20 item 1): for every private release, with the noise switched
off, neighbouring data sets D, D′ — one row replaced by an adversarial but finite row (±1e39, ±1e160,
±float64 max, ±float32 max, subnormals, mixed signs, 0, in any column) — give finite statistics that
differ by at most the sensitivity the release states (its ledger event).

The later releases are computed, as in a run, at fixed released values (centre ĉ, second moments v̂,
clip levels, the current B): the analysis conditions on earlier releases (adaptive composition), so a
release's sensitivity is a statement about its own statistic with those values held fixed. Each
release is checked on ``PAIRS`` seeded random pairs. The only slack is floating-point rounding of the
sums (relative 1e-9, see docs/privacy.md, floating-point caveat).
"""

from __future__ import annotations

import numpy as np
import pytest

import bnsl_cli.federated.methods.admm.dp_site as dpp
import bnsl_cli.privacy.one_off as one_off
from bnsl_cli.federated.methods.admm.dp_site import DPDenseParticipant, DPSparseParticipant, clip_levels, dp_pgcd
from bnsl_cli.federated.messages import (
    CentreBroadcast,
    GramReply,
    GramRequest,
    MomentRequest,
    ShareReply,
    StandardizeBroadcast,
)
from bnsl_cli.federated.methods.moments.site import MomentSite
from bnsl_cli.solvers.pgcd import soft_threshold
from bnsl_cli.federated.standardize import StatsSite
from bnsl_cli.privacy.one_off import range_counts, release_means, release_range, release_second_moments
from bnsl_cli.privacy.releases import ReleaseKind
from bnsl_cli.stats import from_upper_triangle

PAIRS = 200
RTOL = 1e-9
F64 = float(np.finfo(np.float64).max)
F32 = float(np.finfo(np.float32).max)
EXTREMES = np.array([
    1e39, -1e39, 1e160, -1e160, F64, -F64, F32 * 1.0001, -F32 * 1.0001, 5e-324, -5e-324,
    2.2250738585072014e-308, -1e-300, 0.0, 1e300, -3e307,
])


def adversarial_row(rng, scale):
    """A finite row: each column an extreme value with probability 0.7, else an ordinary one."""
    d = scale.size
    row = rng.normal(size=d) * scale
    mask = rng.random(d) < 0.7
    if not mask.any():
        mask[rng.integers(d)] = True
    row[mask] = rng.choice(EXTREMES, int(mask.sum()))
    if rng.random() < 0.2:  # sometimes the same extreme value in every column
        row[:] = rng.choice(EXTREMES)
    return row


def neighbours(seed, n=40, d=4):
    """``PAIRS`` pairs ``(D, D′, scale)``: honest rows on column scales over 12 decades, row ``k``
    replaced in D′ by an adversarial row (and in D, half the time, by another one)."""
    rng = np.random.default_rng(seed)
    for _ in range(PAIRS):
        scale = 10.0 ** rng.uniform(-6, 6, d)
        X = (rng.normal(size=(n, d)) @ (np.eye(d) + np.triu(rng.normal(scale=0.5, size=(d, d)), 1))) * scale
        X += rng.normal(size=d) * scale
        k = int(rng.integers(n))
        D, Dp = X.copy(), X.copy()
        if rng.random() < 0.5:
            D[k] = adversarial_row(rng, scale)
        Dp[k] = adversarial_row(rng, scale)
        yield rng, D, Dp, scale


def released(rng, D, scale, public_means=False):
    """Plausible released values, fixed for both neighbours: the centre and the second moments."""
    d = D.shape[1]
    centre = np.zeros(d) if public_means else rng.normal(size=d) * scale
    v_hat = (scale * rng.uniform(0.3, 3.0, d)) ** 2
    return centre, v_hat


def within(diff_norm, sensitivity, scale_of_sums=0.0):
    assert np.isfinite(diff_norm), diff_norm
    assert diff_norm <= sensitivity * (1 + RTOL) + RTOL * scale_of_sums, (diff_norm, sensitivity)


# ---------------------------------------------------------------------------------------------
# the one-off releases


def test_value_range_histograms_are_bounded():
    for rng, D, Dp, scale in neighbours(1):
        centre = rng.normal(size=D.shape[1]) * scale
        for c in (np.zeros(D.shape[1]), centre):  # the raw and the centred histogram
            a, b = range_counts(D, c), range_counts(Dp, c)
            _, ev = release_range(Dp, c, 0.0, rng, quantile=1e-3, release=ReleaseKind.RANGE_RAW)
            within(np.linalg.norm(a - b), ev.sensitivity)


@pytest.mark.parametrize("given", [False, True], ids=["released bound", "--value-bound"])
def test_column_means_and_second_moments_are_bounded(given):
    for rng, D, Dp, scale in neighbours(2):
        n, d = D.shape
        bound = np.full(d, 10.0) if given else scale * rng.uniform(0.5, 4.0, d)
        m1, ev = release_means(D, bound, 0.0, rng)
        m2, _ = release_means(Dp, bound, 0.0, rng)
        within(np.linalg.norm((m1 - m2) * n / bound), ev.sensitivity, n)
        centre = m1
        v1, ev = release_second_moments(D - centre, bound, 0.0, rng)
        v2, _ = release_second_moments(Dp - centre, bound, 0.0, rng)
        within(np.linalg.norm((v1 - v2) * n / bound**2), ev.sensitivity, n)


# ---------------------------------------------------------------------------------------------
# DP-PGCD: the clipped gradient sums behind every score and every noisy update


def _sparse(D, centre, v_hat, n_total, precision="single", polish=None):
    return DPSparseParticipant(
        0, D, n_total, 0.05, 3, one_offs={}, value_bound=None, gumbel_multiplier=0.0, sigma_multiplier=0.0,
        rng=np.random.default_rng(0), precision=precision, polish_multiplier=polish, preprocessed=(centre, v_hat, [], {}),
    )


@pytest.mark.parametrize("precision", ["single", "double"])
@pytest.mark.parametrize("public_means", [False, True], ids=["released means", "--public-means"])
def test_dp_pgcd_scores_and_updates_are_bounded(precision, public_means):
    for rng, D, Dp, scale in neighbours(3 + public_means):
        n, d = D.shape
        n_total = 3 * n
        centre, v_hat = released(rng, D, scale, public_means)
        m_hat = v_hat * n / n_total
        rho2 = float(rng.uniform(0.1, 2.0)) * float(np.mean(m_hat))
        levels = clip_levels(v_hat, m_hat, rho2, 1.5, "adaptive")
        # a public state of the run: the current B, the duals, the consensus
        B = np.triu(rng.normal(scale=0.5, size=(d, d)) * (rng.random((d, d)) < 0.6), 1) * (scale[:, None] ** -1 * scale[None, :])
        beta = rng.normal(size=(d, d)) * levels[:, None] / n_total  # duals on the gradients' scale
        W = B * rng.uniform(0.5, 1.5, (d, d))
        G, S, stated = [], [], None
        for X in (D, Dp):
            p = _sparse(X, centre, v_hat, n_total, precision)
            p.grads.set_B(B)
            p.grads.set_levels(levels)
            G.append(p.grads.sums / n_total)  # the row-dependent part of Ĝ (the rest is public)
            g = G[-1] + beta + rho2 * (B - W)  # Ĝ without noise
            M = m_hat + rho2
            s = np.abs(soft_threshold(B - g / M[:, None], (0.05 / M)[:, None]) - B) * np.sqrt(M)[:, None]
            np.fill_diagonal(s, 0.0)
            S.append(s)
            # the same participant runs noisy DP-PGCD steps: the stated sensitivities, and a finite B
            newB, events = dp_pgcd(p.grads, levels, B, beta, W, rho2, 0.05, m_hat, 4, n_total, 2.0, 2.0, rng)
            assert np.all(np.isfinite(newB))
            stated = events
        sel = [e for e in stated if e.release == ReleaseKind.SELECTION][0].sensitivity
        delta_row = 2.0 * levels / n_total  # the coordinate-update sensitivity of row i (its events state it)
        for e in stated:
            if e.release == ReleaseKind.UPDATE:
                assert any(np.isclose(e.sensitivity, delta_row, rtol=1e-15))
        diff = np.abs(G[0] - G[1])
        assert np.all(np.isfinite(diff))
        assert np.all(diff <= delta_row[:, None] * (1 + RTOL)), (diff / delta_row[:, None]).max()
        # the scores add public terms to Ĝ: their float64 rounding is the only slack beyond RTOL
        within(float(np.max(np.abs(S[0] - S[1]))), sel, 1e3 * max(np.abs(S[0]).max(), np.abs(S[1]).max()))


# ---------------------------------------------------------------------------------------------
# the polish's second moments, DP-Fed-BNSL's covariance, fed-moments' moment matrix


def _polish_sums(p, pairs, v_hat, n_total):
    d = v_hat.size
    reply = GramReply.decode(p.handle(GramRequest(1, d, pairs).encode()))  # the polish's request, as sent
    assert reply.sender == 0 and reply.values.shape == pairs.shape
    vals = reply.values
    ev = p.events()[-1]
    assert ev.release == ReleaseKind.POLISH
    scale = np.sqrt(v_hat[pairs // d] * v_hat[pairs % d])
    return vals * n_total / scale, ev.sensitivity


@pytest.mark.parametrize("public_means", [False, True], ids=["released means", "--public-means"])
def test_polish_second_moments_are_bounded(public_means):
    for rng, D, Dp, scale in neighbours(5 + public_means):
        n, d = D.shape
        n_total = 2 * n
        centre, v_hat = released(rng, D, scale, public_means)
        off = np.flatnonzero(~np.eye(d, dtype=bool).ravel())
        pairs = np.sort(rng.choice(off, 6, replace=False))
        a, sens = _polish_sums(_sparse(D, centre, v_hat, n_total, polish=0.0), pairs, v_hat, n_total)
        b, _ = _polish_sums(_sparse(Dp, centre, v_hat, n_total, polish=0.0), pairs, v_hat, n_total)
        within(np.linalg.norm(a - b), sens, n * sens)


def test_fed_bnsl_covariance_is_bounded(monkeypatch):
    released_S = []  # what the participant's covariance release returned (before its ledger event)
    real = dpp.private_covariance
    monkeypatch.setattr(dpp, "private_covariance", lambda *a, **k: released_S.append(real(*a, **k)) or released_S[-1])
    for rng, D, Dp, scale in neighbours(7):
        n, d = D.shape
        centre, v_hat = released(rng, D, scale)
        out = []
        for X in (D, Dp):
            before = len(released_S)
            p = DPDenseParticipant(0, X, n, one_offs={}, value_bound=None, sigma_multiplier=0.0,
                                   rng=np.random.default_rng(0), preprocessed=(centre, v_hat, [], {}))
            assert len(released_S) == before + 1  # one covariance release per participant
            S, ev = released_S[-1]
            assert p.events()[-1] is ev
            out.append(S)  # the released matrix, PSD-projected (non-expansive: the bound holds)
            sens = p.events()[-1].sensitivity
        within(np.linalg.norm(out[0] - out[1]), sens, n * sens)


class _Privacy:
    """The parts of a run plan's privacy block a fed-moments site reads, with the noise switched off."""

    value_bound = None
    clip = 1.5

    def __init__(self, split=1):
        self.releases = () if split == 1 else (type("R", (), {"kind": ReleaseKind.MOMENT_MATRIX, "split": split})(),)

    def multiplier(self, kind):
        return 0.0 if kind == ReleaseKind.MOMENT_MATRIX else None


@pytest.mark.parametrize("split", [1, 3], ids=["own spreads", "split noise: pooled spreads"])
@pytest.mark.parametrize("public_means", [False, True], ids=["released means", "--public-means"])
def test_fed_moments_moment_matrix_is_bounded(public_means, split, monkeypatch):
    fixed = {}
    monkeypatch.setattr(one_off, "private_preprocessing", lambda X, *a, **k: (fixed["c"], fixed["v"], [], {}))
    for rng, D, Dp, scale in neighbours(8 + public_means + 2 * split):
        fixed["c"], fixed["v"] = released(rng, D, scale, public_means)
        # the scale of the rows: the site's own √v̂, or (split noise) the pooled σ̄ the coordinator broadcasts
        s = np.sqrt(fixed["v"]) * (1.0 if split == 1 else rng.uniform(0.7, 3.0, D.shape[1]))
        out = []
        d = D.shape[1]
        for X in (D, Dp):
            site = MomentSite(0, X, privacy=_Privacy(split), rng=np.random.default_rng(0))
            # the run's messages: the mean request; with split noise the variance request and the
            # scale broadcast (which triggers the release); then the centre broadcast, here at the
            # site's own released centre, so that its share is the released matrix itself
            site.handle(MomentRequest(0, d).encode())
            if split > 1:
                site.handle(CentreBroadcast(1, d, fixed["c"], full=False).encode())
                assert site.handle(StandardizeBroadcast(2, d, fixed["c"], s).encode()) is None
            reply = ShareReply.decode(site.handle(CentreBroadcast(3, d, fixed["c"], full=True).encode()))
            M = from_upper_triangle(reply.values * float(X.shape[0]), d)
            out.append(M / np.outer(s, s))  # Σ z̄z̄ᵀ (noise 0)
            sens = site.ledger.events(0)[-1].sensitivity
        within(np.linalg.norm(out[0] - out[1]), sens, D.shape[0] * sens)


# ---------------------------------------------------------------------------------------------
# --standardize under --dp: the rows are re-expressed with the pooled (μ, σ) before the releases


class _Plan:
    private = True
    standardize = True

    def __init__(self, n_total):
        self.n_total = n_total
        self.privacy = type("P", (), {"value_bound": None, "multiplier": lambda self, k: None})()
        self.participants = [type("S", (), {"label": "site"})()]


def test_standardize_then_polish_is_bounded(monkeypatch):
    fixed = {}
    monkeypatch.setattr(one_off, "private_preprocessing", lambda X, *a, **k: (fixed["c"], fixed["v"], [], {}))

    def build(plan, pid, X, rng, pre):
        return DPSparseParticipant(0, X, plan.n_total, 0.05, 3, one_offs={}, value_bound=None, gumbel_multiplier=0.0,
                                   sigma_multiplier=0.0, rng=rng, polish_multiplier=0.0, preprocessed=pre)

    for rng, D, Dp, scale in neighbours(10):
        n, d = D.shape
        fixed["c"], fixed["v"] = released(rng, D, scale)
        mu = fixed["c"] + rng.normal(size=d) * scale * 0.1
        sd = np.sqrt(fixed["v"]) * rng.uniform(0.8, 1.2, d)
        off = np.flatnonzero(~np.eye(d, dtype=bool).ravel())
        pairs = np.sort(rng.choice(off, 6, replace=False))
        out = []
        for X in (D, Dp):
            site = StatsSite(_Plan(2 * n), 0, X, np.random.default_rng(0), build)
            assert site.handle(StandardizeBroadcast(0, d, mu, sd).encode()) is None
            v_std = site.inner.v_hat
            sums, sens = _polish_sums(site.inner, pairs, v_std, 2 * n)
            out.append(sums)
        within(np.linalg.norm(out[0] - out[1]), sens, n * sens)

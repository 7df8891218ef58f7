"""Bounded per-row contributions of fed-suffstats' releases (issue 20 item 1 for the releases of
issue 19): the scale histograms, the centre histograms and the whitened second moments, computed by the real site code with
the noise switched off, on ``PAIRS`` neighbouring data sets D, D′ (one row replaced by an adversarial
but finite row), are finite and differ by at most the sensitivity their ledger event states.

The bins of the centre histograms and the basis of a stage (centre, scale, L) are released/broadcast values, held fixed for both neighbours
(adaptive composition conditions on it), as in ``test_bounded_contributions.py``.
"""

from __future__ import annotations

import numpy as np
import pytest

import bnsl_cli.federated.methods.suffstats.releases as ss_releases
from bnsl_cli.federated.methods.suffstats.messages import CENTRE_ROUND
from bnsl_cli.privacy.releases import ReleaseKind
from bnsl_cli.federated.messages import ShareReply
from bnsl_cli.federated.methods.suffstats.messages import BasisBroadcast, CentreRequest, FirstRequest
from bnsl_cli.federated.methods.suffstats import CENTRE_BINS, STAGES, pair_bins, value_bins
from bnsl_cli.federated.methods.suffstats.site import SuffstatsSite
from bnsl_cli.plan.options import DPConfig, LearnConfig
from bnsl_cli.plan.run_plan import RunPlan
from bnsl_cli.plan.shapes import ParticipantShape, Shapes
from bnsl_cli.stats import from_upper_triangle
from tests.privacy.test_bounded_contributions import neighbours, within


def _plan(d: int, n: int):
    shapes = Shapes(tuple(f"x{j}" for j in range(d)), tuple(ParticipantShape(f"site-{k}.csv", n, None) for k in range(2)))
    return RunPlan.resolve(LearnConfig(method="fed-suffstats", dp=DPConfig(epsilon=5)), shapes)


@pytest.fixture
def no_noise(monkeypatch):
    monkeypatch.setattr(ss_releases, "gaussian_noise", lambda size, std, rng: np.zeros(size))
    monkeypatch.setattr(ss_releases, "isometric_gaussian_matrix", lambda d, std, rng: np.zeros((d, d)))


def _site(plan, X):
    return SuffstatsSite(0, X, privacy=plan.privacy, rng=np.random.default_rng(0), n_total=plan.n_total)


def _first(plan, X):
    d = X.shape[1]
    site = _site(plan, X)
    reply = ShareReply.decode(site.handle(FirstRequest(0, d, d * (value_bins() + pair_bins())).encode()))
    (event,) = site.ledger.events(0)
    return reply.values * plan.n_total, event


def _stage(plan, X, basis, stage):
    d = X.shape[1]
    site = _site(plan, X)
    site.handle(FirstRequest(0, d, d * (value_bins() + pair_bins())).encode())
    centre, scale, L = basis
    reply = ShareReply.decode(site.handle(BasisBroadcast(stage, d, centre, scale, L).encode()))
    event = site.ledger.events(0)[-1]
    return from_upper_triangle(reply.values * plan.n_total, d + 1), event


def test_scale_histograms_are_bounded(no_noise):
    worst = 0.0
    for _, D, Dp, _scale in neighbours(301, n=40, d=4):
        plan = _plan(4, 40)
        a, ev = _first(plan, D)
        b, _ = _first(plan, Dp)
        assert np.all(np.isfinite(a)) and np.all(np.isfinite(b))
        diff = float(np.linalg.norm(a - b))
        within(diff, ev.sensitivity)
        worst = max(worst, diff / ev.sensitivity)
    assert worst > 0  # the pairs do move the histograms


@pytest.mark.parametrize("stage", [1, STAGES])
def test_whitened_moments_are_bounded(no_noise, stage):
    worst = 0.0
    for rng, D, Dp, scale in neighbours(302 + stage, n=40, d=4):
        plan = _plan(4, 40)
        centre = rng.normal(size=4) * scale
        s = scale * rng.uniform(0.3, 3.0, 4)
        L = np.tril(rng.normal(scale=0.3, size=(4, 4)), -1) + np.diag(rng.uniform(0.5, 2.0, 4))
        a, ev = _stage(plan, D, (centre, s, L), stage)
        b, _ = _stage(plan, Dp, (centre, s, L), stage)
        assert np.all(np.isfinite(a)) and np.all(np.isfinite(b))
        diff = float(np.linalg.norm(a - b))  # Frobenius norm of the symmetric difference
        within(diff, ev.sensitivity, float(np.abs(a).max()))
        worst = max(worst, diff / ev.sensitivity)
    assert worst > 0.5  # adversarial rows reach the clip: the bound is not vacuous


def _centre(plan, X, lo, width):
    d = X.shape[1]
    site = _site(plan, X)
    site.handle(FirstRequest(0, d, d * (value_bins() + pair_bins())).encode())
    reply = ShareReply.decode(site.handle(CentreRequest(CENTRE_ROUND, d, d * CENTRE_BINS, lo, width).encode()))
    event = site.ledger.events(0)[-1]
    return reply.values * plan.n_total, event


def test_centre_histograms_are_bounded(no_noise):
    worst = 0.0
    for rng, D, Dp, scale in neighbours(304, n=40, d=4):
        plan = _plan(4, 40)
        width = scale * rng.uniform(0.005, 0.1, 4)
        lo = rng.normal(size=4) * scale - 0.5 * CENTRE_BINS * width
        a, ev = _centre(plan, D, lo, width)
        b, _ = _centre(plan, Dp, lo, width)
        assert ev.release == ReleaseKind.CENTRE_HISTOGRAM
        assert np.all(np.isfinite(a)) and np.all(np.isfinite(b))
        assert a.sum() == b.sum() == 40 * 4  # every row counts once per column, whatever its values
        diff = float(np.linalg.norm(a - b))
        within(diff, ev.sensitivity)
        worst = max(worst, diff / ev.sensitivity)
    assert worst > 0.5  # the replaced row moves bins in most columns: the bound is not vacuous

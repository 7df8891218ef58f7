"""fed-suffstats' message sequence as both ends check it: what a site accepts (each request's
contents against public bounds, before any row is touched) and what the coordinator accepts of a
site's shares (:mod:`bnsl_cli.federated.reply_limits`)."""

from __future__ import annotations

import math
from typing import Optional

import numpy as np

from bnsl_cli.federated.messages import MessageKind, read_header
from bnsl_cli.federated.methods.suffstats.messages import (
    CENTRE_ROUND,
    TABLE_ROUND,
    BasisBroadcast,
    CentreRequest,
    FirstRequest,
    TableRequest,
)
from bnsl_cli.federated.methods.suffstats.bins import CENTRE_BINS, pair_bins, value_bins
from bnsl_cli.federated.methods.suffstats.releases import CLIP, STAGE_Z, release_sensitivity, stage_releases
from bnsl_cli.federated.site_sequence import Step
from bnsl_cli.federated.reply_limits import NOISE_TAIL, ROUNDING, ROW_VALUE_LIMIT, MeanShares, Rule, psd_message
from bnsl_cli.privacy.bounding import ABS_MAX, triangular_solve_bound
from bnsl_cli.privacy.releases import ReleaseKind


# ----------------------------------------------------------------------------------------------
# what a site accepts: checks of a broadcast's contents on public values, before any row is touched
# ----------------------------------------------------------------------------------------------

#: A private site answers a basis broadcast only when its scales lie in this range, its centres and its
#: ``L``'s entries are at most :data:`BASIS_CENTRE_MAX` / :data:`BASIS_ENTRY_MAX` in magnitude, and no
#: finite row can make a whitened value larger than :data:`WHITENED_MAX` (:func:`basis_problem`). The
#: honest coordinator's bases lie far inside: their scales and centres come from the histograms'
#: range ``2^±RANGE`` and the released means, their ``L`` from a model covariance with residual
#: variances floored at the stage's noise.
BASIS_SCALE_RANGE = (2.0**-500, 2.0**500)
BASIS_CENTRE_MAX = 2.0**500
BASIS_ENTRY_MAX = 2.0**400
WHITENED_MAX = 2.0**500


def whitening_bound(centre: np.ndarray, scale: np.ndarray, L: np.ndarray) -> float:
    """The largest ``|y|`` a stage's whitening (:func:`whitened_moments_release`) can produce from any
    finite row, from the broadcast alone (:func:`bnsl_cli.privacy.bounding.triangular_solve_bound`):
    every value is first clamped to ``m̃_j ± min(STAGE_Z·s̃_j, ABS_MAX)``, so ``|z_j| = |x_j − m̃_j| / s̃_j``
    is at most that half-width over ``s̃_j`` plus the rounding of ``m̃_j ± …`` (half an ulp of ``m̃_j``)."""
    centre, scale = np.asarray(centre, float), np.asarray(scale, float)
    with np.errstate(over="ignore", invalid="ignore"):
        half = np.minimum(STAGE_Z * scale, ABS_MAX) * (1.0 + 2.0**-40)
        zeta = (half + 2.0**-51 * np.abs(centre)) / scale * (1.0 + 2.0**-40)
    return triangular_solve_bound(zeta, L)


def basis_problem(msg: BasisBroadcast, d: int, private: bool) -> Optional[str]:
    """Why a site with ``d`` columns must not answer the basis broadcast ``msg`` (``None``: it may),
    read from the message alone. Every run: ``d`` matches, centre, scale and ``L`` are finite, the
    scales positive, ``L`` lower triangular with a positive diagonal. Private runs also: the ranges of
    :data:`BASIS_SCALE_RANGE`, :data:`BASIS_CENTRE_MAX`, :data:`BASIS_ENTRY_MAX`, and
    :func:`whitening_bound` at most :data:`WHITENED_MAX` — so the whitening, the clip and the moments
    are finite for every data set and the release's sensitivity is what the plan says."""
    if msg.d != d:
        return f"a basis broadcast for d = {msg.d}, this site has {d} columns"
    if not all(np.all(np.isfinite(v)) for v in (msg.centre, msg.scale, msg.L)):
        return "a basis broadcast with a value that is not finite"
    if not np.all(msg.scale > 0):
        return "a basis broadcast with a scale that is not positive"
    if np.any(np.triu(msg.L, 1) != 0):
        return "a basis broadcast whose L is not lower triangular"
    diag = np.diag(msg.L)
    if not np.all(diag > 0):
        return "a basis broadcast whose L has a diagonal entry that is not positive"
    if not private:
        return None
    lo, hi = BASIS_SCALE_RANGE
    if not (np.all(msg.scale >= lo) and np.all(msg.scale <= hi)):
        return f"a basis broadcast with a scale outside [2^-500, 2^500] (smallest {msg.scale.min():.3g}, largest {msg.scale.max():.3g})"
    if np.max(np.abs(msg.centre), initial=0.0) > BASIS_CENTRE_MAX:
        return f"a basis broadcast with a centre beyond ±2^500 ({np.max(np.abs(msg.centre)):.3g})"
    if np.max(np.abs(msg.L), initial=0.0) > BASIS_ENTRY_MAX:
        return f"a basis broadcast whose L has an entry beyond ±2^400 ({np.max(np.abs(msg.L)):.3g})"
    bound = whitening_bound(msg.centre, msg.scale, msg.L)
    if not bound <= WHITENED_MAX:
        return (f"a basis broadcast whose whitening could reach {bound:.3g} on a finite row (at most 2^500 = "
                f"{WHITENED_MAX:.3g} is accepted): its L is too close to singular against its off-diagonal entries")
    return None


def centre_request_problem(req: CentreRequest, d: int) -> Optional[str]:
    """Why a private site with ``d`` columns must not answer the centre request ``req`` (``None``: it
    may), read from the message alone: its shape, and bins ``lo_j + k·w_j`` that are finite with
    ``w_j > 0`` (any finite row then lands in exactly one bin per column)."""
    if req.d != d or req.count != d * CENTRE_BINS or req.round != CENTRE_ROUND:
        return f"a centre request that is not for {d} columns of {CENTRE_BINS} bins"
    with np.errstate(over="ignore", invalid="ignore"):
        top = req.lo + CENTRE_BINS * req.width
    if not (np.all(np.isfinite(req.lo)) and np.all(np.isfinite(req.width)) and np.all(req.width > 0)
            and np.all(np.isfinite(top))):
        return "a centre request whose bins are not finite with a positive width"
    return None


def first_request_problem(req: FirstRequest, d: int, private: bool) -> Optional[str]:
    """Why a site with ``d`` columns must not answer the first request ``req`` (its shape)."""
    want = d * (value_bins() + pair_bins()) if private else d
    if req.d != d or req.count != want or req.round != 0:
        return f"a first request for d = {req.d}, {req.count} values, round {req.round} (this site: d = {d}, {want} values, round 0)"
    return None

#: A table request asks at most this many cells per table (a categorical node and its candidate parents'
#: levels multiplied) and in all: public bounds a site checks before counting anything.
MAX_TABLE_CELLS = 1 << 16
MAX_TABLE_VALUES = 1 << 22
#: the most variables in one table
MAX_TABLE_VARIABLES = 10


def table_request_problem(req: TableRequest, plan) -> Optional[str]:
    """Why a site must not answer ``req`` (public values only, before any row is touched): a
    non-private plan with categorical columns, ``d`` and round as planned, groups of 2 to
    :data:`MAX_TABLE_VARIABLES` distinct categorical variables, each table and all of them within
    :data:`MAX_TABLE_CELLS` and :data:`MAX_TABLE_VALUES` cells, ``count`` their cells."""
    cols = plan.columns
    if plan.private or cols is None:
        return "a table request in a plan without categorical columns (or a private one)"
    if not plan.tables:
        return "a table request in a plan without tables (the sites did not allow them: bnsl join --allow-tables)"
    if req.d != plan.d or req.round != TABLE_ROUND:
        return f"a table request for d = {req.d}, round {req.round} (this site: d = {plan.d}, round {TABLE_ROUND})"
    if not req.groups or len(req.groups) > len(cols.names):
        return f"a table request of {len(req.groups)} tables (at most {len(cols.names)})"
    K = cols.level_counts()
    total = 0
    for g in req.groups:
        if not 2 <= len(g) <= MAX_TABLE_VARIABLES or len(set(g)) != len(g):
            return f"a table of {len(g)} variables (2 to {MAX_TABLE_VARIABLES} distinct ones)"
        if any(v >= len(cols.names) or K[v] < 2 or cols.kind(cols.names[v]) != "categorical" for v in g):
            return "a table over a variable that is not one of the plan's categorical columns"
        cells = 1
        for v in g:
            cells *= K[v]
        if cells > MAX_TABLE_CELLS:
            return f"a table of {cells} cells (at most {MAX_TABLE_CELLS})"
        total += cells
    if total != req.count or total > MAX_TABLE_VALUES:
        return f"a table request of {req.count} values for {total} cells (at most {MAX_TABLE_VALUES})"
    return None


# -- what a site's shares may hold (bnsl_cli.federated.reply_limits) -------------------------------


class HistogramShares(Rule):
    """The limits of a private share of histograms (``(counts + noise) / n``): the scale histograms
    (the answer to the first request: per column :func:`value_bins` counts of the ``n_p`` rows and
    :func:`pair_bins` counts of its ``n_p // 2`` row pairs) or the centre histograms (per column
    :data:`CENTRE_BINS` counts of the rows). A count lies in ``[0, n_p]``, so a value is at most
    ``(n_p + NOISE_TAIL σ) / n`` (σ: the site's noise std of that release); and every row lands in exactly one
    bin of each of its column's histograms, so in the clear each histogram adds up to its rows (or
    pairs) within ``NOISE_TAIL σ √bins``."""

    def __init__(self, kind: ReleaseKind):
        self.kind = kind
        self.what = "scale histograms" if kind == ReleaseKind.SCALE_HISTOGRAM else "centre histograms"

    def _sigma(self, lim) -> Optional[float]:
        rel = lim.release(self.kind)
        return None if rel is None else lim.site_noise(rel, release_sensitivity(self.kind, lim.d))

    def _blocks(self, lim, index) -> list:
        """``(bins per column, what each column's histogram adds up to)`` of each block of the values."""
        n_p = lim.rows[index]
        if self.kind == ReleaseKind.SCALE_HISTOGRAM:
            return [(value_bins(), n_p, "rows"), (pair_bins(), n_p // 2, "row pairs")]
        return [(CENTRE_BINS, n_p, "rows")]

    def limit(self, lim, request, index):
        sigma = self._sigma(lim)
        if sigma is None:
            return None
        return ((lim.rows[index] + NOISE_TAIL * sigma) / lim.n * (1.0 + ROUNDING),
                f"counts of n_p rows plus {NOISE_TAIL:g} noise stds ({sigma:.3g}), over n")

    def consistent(self, lim, request, index, values):
        sigma = self._sigma(lim)
        if sigma is None:
            return None
        off = 0
        for bins, total, of in self._blocks(lim, index):
            block = values[off : off + lim.d * bins].reshape(lim.d, bins) * lim.n
            off += lim.d * bins
            gap = np.abs(block.sum(axis=1) - total)
            tol = NOISE_TAIL * sigma * math.sqrt(bins) * (1.0 + ROUNDING) + ROUNDING * max(total, 1)
            if (gap > tol).any():
                j = int(np.argmax(gap))
                return (f"sent {self.what} whose column {j + 1} adds up to {block[j].sum():.6g} {of}, not its {total} "
                        f"(within {tol:.3g}: the noise of {bins} bins)")
        return None


class WhitenedShares(Rule):
    """The limits of a share of the augmented second moments in a broadcast basis (the answer to a
    :class:`BasisBroadcast`, ``Σ_rows a aᵀ / n`` with ``a = [1; L⁻¹ (x − m̃)/s̃]``, upper triangle).

    Private: each ``a`` clipped to ``C = CLIP·√(d + 1)``, so an entry is at most
    ``(n_p C² + NOISE_TAIL σ) / n`` with σ that stage's noise std. Non-private: values below
    ``ROW_VALUE_LIMIT`` give ``|a_i| ≤ Σ_j |L⁻¹|_ij (ROW_VALUE_LIMIT + |m̃_j|)/s̃_j``; in the clear the
    site's matrix is positive semi-definite, its rows' weight (entry ``(0, 0)``) is exactly ``n_p / n``
    and its first row is ``n_p/n · L⁻¹ (x̄_p − m̃)/s̃`` for its own mean share ``x̄_p``."""

    what = "share of the whitened moments"

    @staticmethod
    def _basis(request):
        msg = BasisBroadcast.decode(request)
        Linv = np.linalg.inv(msg.L)
        return msg, Linv

    def limit(self, lim, request, index):
        n_p = lim.rows[index]
        a, b = np.triu_indices(lim.d + 1)
        if lim.privacy is None:
            msg, Linv = self._basis(request)
            with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
                z = (ROW_VALUE_LIMIT + np.abs(msg.centre)) / msg.scale
                top = np.concatenate([[1.0], np.abs(Linv) @ z])
            top = np.where(np.isfinite(top), top, np.inf)
            return (n_p / lim.n * top[a] * top[b] * (1.0 + ROUNDING),
                    f"n_p/n times products of whitened values below {ROW_VALUE_LIMIT:.0e}")
        stages = stage_releases(lim.privacy)
        k = read_header(request).round
        if not 1 <= k <= len(stages):
            return None
        c2 = CLIP**2 * (lim.d + 1)
        sigma = lim.site_noise(stages[k - 1], release_sensitivity(ReleaseKind.WHITENED_MOMENTS, lim.d))
        return ((n_p * c2 + NOISE_TAIL * sigma) / lim.n * (1.0 + ROUNDING),
                f"n_p rows clipped to C² = {c2:.3g} plus {NOISE_TAIL:g} noise stds ({sigma:.3g}) of stage {k}, over n")

    def consistent(self, lim, request, index, values):
        if lim.privacy is not None:
            return None  # noisy moments
        d1 = lim.d + 1
        a, b = np.triu_indices(d1)
        n_p = lim.rows[index]
        w = values[0]
        if abs(w * lim.n - n_p) > 1e-9 * n_p:
            return (f"sent a share of the whitened moments whose rows' weight (Σ 1 / n) is {w * lim.n:.6g} rows, "
                    f"not its {n_p}")
        diag = {j: float(values[k]) for k, j in enumerate(a) if a[k] == b[k]}
        neg = [j for j, v in diag.items() if v < 0]
        if neg:
            return f"sent a share of the whitened moments with a negative square sum ({diag[neg[0]]:.3g})"
        if lim.site_means is not None:
            msg, Linv = self._basis(request)
            xbar = lim.site_means[index]
            want = n_p / lim.n * (Linv @ ((xbar - msg.centre) / msg.scale))
            got = values[1:d1]  # entries (0, 1 … d)
            tol = ROUNDING * (n_p / lim.n * (np.abs(Linv) @ ((np.abs(xbar) + np.abs(msg.centre)) / msg.scale))
                              + np.sqrt(np.maximum(w * np.array([diag[j] for j in range(1, d1)]), 0.0)))
            off = np.abs(got - want) > tol
            if off.any():
                j = int(np.argmax(np.abs(got - want) - tol))
                return (f"sent a share of the whitened moments whose mean entry {j + 1} ({got[j]:.6g}) contradicts its "
                        f"own share of the column means (which gives {want[j]:.6g})")
        return psd_message(values, a, b, diag, "a share of the whitened moments")


class TableShares(Rule):
    """A share of contingency tables (counts of the site's rows over n): every value in ``[0, n_p/n]``,
    and each table adds up to the site's rows."""

    what = "share of the contingency tables"

    def __init__(self, levels: Optional[list]):
        self.levels = levels  # per variable, its levels (the plan's columns)

    def limit(self, lim, request, index):
        return lim.rows[index] / lim.n * (1.0 + ROUNDING), "counts of n_p rows, over n"

    def consistent(self, lim, request, index, values):
        req = TableRequest.decode(request)
        K = self.levels
        if K is None:
            return None
        n_p, off = lim.rows[index], 0
        for g in req.groups:
            cells = int(np.prod([K[v] for v in g]))
            got = float(values[off : off + cells].sum()) * lim.n
            off += cells
            if abs(got - n_p) > ROUNDING * max(n_p, 1) * cells:
                return f"sent a contingency table that adds up to {got:.6g} rows, not its {n_p}"
            if float(values[off - cells : off].min(initial=0.0)) < 0:
                return "sent a contingency table with a negative count"
        return None


def reply_rules(plan) -> dict:
    """What fed-suffstats' replies may hold (:mod:`bnsl_cli.federated.reply_limits`): private, the scale
    and the centre histograms (:class:`HistogramShares`), non-private the column-mean shares
    (:class:`~bnsl_cli.federated.reply_limits.MeanShares`); the whitened moments of every stage
    (:class:`WhitenedShares`)."""
    first = HistogramShares(ReleaseKind.SCALE_HISTOGRAM) if plan.private else MeanShares()
    return {MessageKind.FIRST_REQUEST: first, MessageKind.CENTRE_REQUEST: HistogramShares(ReleaseKind.CENTRE_HISTOGRAM),
            MessageKind.BASIS_BROADCAST: WhitenedShares(),
            MessageKind.TABLE_REQUEST: TableShares(None if plan.columns is None else plan.columns.level_counts())}


# -- the order a site answers the requests in (bnsl_cli.federated.site_sequence) --------------------

#: how the sequence names the first request and the centre request among the once-only requests
FIRST = "fed-suffstats first request"
CENTRE = "fed-suffstats centre request"
TABLES = "fed-suffstats table request"


def planned_stages(plan) -> int:
    """The basis broadcasts (whitened-moment stages) ``plan`` makes a site answer: one per
    whitened-moment release of a private plan; one without privacy."""
    if not plan.private:
        return 1
    return sum(1 for r in plan.privacy.releases if r.kind == ReleaseKind.WHITENED_MOMENTS)


class FirstRequestStep(Step):
    """The first request: once, before the stages (private: one scale-histogram release)."""

    kinds = frozenset({MessageKind.FIRST_REQUEST})

    def admit(self, plan, state, kind, rnd, data):
        if FIRST in state.seen:
            return "a second fed-suffstats first request"
        if state.stages_done:
            return "a fed-suffstats first request after the stages began"
        return None

    def releases(self, plan, kind, rnd, data):
        return {ReleaseKind.SCALE_HISTOGRAM: (1, None)}

    def commit(self, plan, state, kind, rnd, data):
        state.seen.add(FIRST)


class CentreRequestStep(Step):
    """The centre request, private plans only: once, after the first request and before the stages,
    numbered :data:`~bnsl_cli.federated.messages.CENTRE_ROUND` (one centre-histogram release)."""

    kinds = frozenset({MessageKind.CENTRE_REQUEST})

    def admit(self, plan, state, kind, rnd, data):
        if not plan.private:
            return "a fed-suffstats centre request in a non-private plan"
        if FIRST not in state.seen:
            return "a fed-suffstats centre request before the first request"
        if CENTRE in state.seen:
            return "a second fed-suffstats centre request"
        if rnd != CENTRE_ROUND:
            return f"a fed-suffstats centre request numbered {rnd}"
        if state.stages_done:
            return "a fed-suffstats centre request after the stages began"
        return None

    def releases(self, plan, kind, rnd, data):
        return {ReleaseKind.CENTRE_HISTOGRAM: (1, None)}

    def commit(self, plan, state, kind, rnd, data):
        state.seen.add(CENTRE)


class BasisStep(Step):
    """The basis broadcasts: after the first request, numbered 1, 2, … up to the plan's stages, no
    replay, gap or reordering (private: one whitened-moment release each, at that stage's ρ)."""

    kinds = frozenset({MessageKind.BASIS_BROADCAST})

    def admit(self, plan, state, kind, rnd, data):
        if FIRST not in state.seen:
            return "a fed-suffstats basis broadcast before the first request"
        if rnd != state.stages_done + 1:
            return (f"a basis broadcast for stage {rnd} after stage {state.stages_done} (stages must follow one "
                    "another: a replayed, skipped or reordered stage)")
        stages = planned_stages(plan)
        if rnd > stages:
            return f"a basis broadcast for stage {rnd}, beyond the plan's {stages} stages"
        return None

    def releases(self, plan, kind, rnd, data):
        rho = None
        if plan.private:
            each = [float(r.rho_each) for r in plan.privacy.releases if r.kind == ReleaseKind.WHITENED_MOMENTS]
            if 1 <= rnd <= len(each):
                rho = each[rnd - 1]  # this stage's own share
        return {ReleaseKind.WHITENED_MOMENTS: (1, rho)}

    def commit(self, plan, state, kind, rnd, data):
        state.stages_done = rnd


class TableStep(Step):
    """The table request (non-private plans with categorical columns): once, after the stages."""

    kinds = frozenset({MessageKind.TABLE_REQUEST})

    def admit(self, plan, state, kind, rnd, data):
        if plan.private or plan.columns is None:
            return "a fed-suffstats table request in a plan without categorical columns (or a private one)"
        if state.stages_done < planned_stages(plan):
            return "a fed-suffstats table request before the stages"
        if TABLES in state.seen:
            return "a second fed-suffstats table request"
        return None

    def commit(self, plan, state, kind, rnd, data):
        state.seen.add(TABLES)


def site_sequence(plan) -> tuple:
    """fed-suffstats' message sequence at a site: the first request, the centre request, the stages, the
    table request."""
    return (FirstRequestStep(), CentreRequestStep(), BasisStep(), TableStep())

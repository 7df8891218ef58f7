"""What a participant's reply may hold: limits on its values derived from the protocol and the run
plan's public facts (issue 28, "Byzantine sites").

The blanket check of :func:`~bnsl_cli.federated.messages.validate_reply` (every value finite and
below :data:`~bnsl_cli.federated.messages.REPLY_VALUE_LIMIT`) only says that a value is a number. A
:class:`ReplyLimits`, built by ``run`` from the plan and handed to the fleet (``fleet.limits``), says
what a site's rows can give. For each request kind a :class:`Rule` declared by whoever sends that
request — the column-statistics exchange (:func:`bnsl_cli.federated.standardize.reply_rules`), the
polish (:func:`bnsl_cli.federated.polish.reply_rules`), a method's own exchanges (its registry entry's
``reply_rules``) — bounds every value of one site's reply from public facts only: the site's declared
row count ``n_p``, the public total ``n``, the plan's release list (noise multipliers, splits), clips
and public value bound, and what the coordinator already accepted or broadcast (the pooled means and
variances, the standardisation, and each site's own earlier shares when they arrived in the clear).

- **Private plans**: a value is at most what ``n_p`` rows clipped at the release's clip can
  contribute plus :data:`NOISE_TAIL` standard deviations of that site's noise (multiplier ·
  sensitivity / √split). An honest site goes beyond it with probability below 1e-300.
- **Non-private plans** have no clip: every value is read as coming from rows whose values are below
  :data:`ROW_VALUE_LIMIT` in magnitude — the largest for which every second moment the protocol
  forms about a pooled centre, ``(x − μ)²  ≤ (2·ROW_VALUE_LIMIT)²``, stays far below
  ``REPLY_VALUE_LIMIT``. A share of the column means is ``n_p/n`` times a mean of such values; a
  share of second moments about a broadcast centre ``μ`` is at most ``n_p/n · (ROW_VALUE_LIMIT +
  |μ|)²``. So a poisoned mean share is refused at its sender, and whatever centre the accepted shares
  make, the honest sites' second moments about it stay inside their own limits (never blamed).
  Shares in the clear are also checked against the same site's earlier shares: a share of squares
  about ``μ`` is at least ``n_p (x̄_p − μ)² / n`` for the site's own mean ``x̄_p``; a site's own
  second moments satisfy ``|S_ab| ≤ √(S_aa S_bb)`` and ``S_aa`` is at most its share of the pooled
  variances (in the units it works in).

A value beyond its limit stops the run naming the site that sent it (``InvalidReplyError`` in
process, ``FederationError`` over the network; exit 6). Under a secure sum (masked replies) one
site's values are never seen: the sum is checked against the sum of the sites' limits (pooled
statistics standing in for per-site ones), and a sum beyond it stops the run without naming a site —
a secure sum cannot tell which site sent it.

What no limit here catches: a site sending wrong but plausible values within them (nothing checks
that a site's values come from its rows), or lying about its row count (the limits take the declared
counts as the public facts). The ADMM updates, whose range depends on the rounds' state, are
checked by the coordinator (:mod:`bnsl_cli.federated.methods.admm.update_guard`).
"""

from __future__ import annotations

import math
from typing import Mapping, Optional, Sequence

import numpy as np

from bnsl_cli.federated.messages import (
    CentreBroadcast,
    MessageKind,
    ShareReply,
    StandardizeBroadcast,
    read_header,
    summable_span,
)
from bnsl_cli.privacy.one_off import RANGE_BOUND_MAX, means_sensitivity, second_moments_sensitivity
from bnsl_cli.privacy.releases import ReleaseKind
from bnsl_cli.stats import QUANTUM_BITS, sum_shares

__all__ = [
    "NOISE_TAIL",
    "ROW_VALUE_LIMIT",
    "ROUNDING",
    "Rule",
    "MeanShares",
    "CentreShares",
    "ReplyLimits",
    "exceeds",
    "SPREAD_FACTOR",
    "psd_violation",
    "psd_message",
    "own_mean_floor",
]

#: A private value may exceed what its clipped rows contribute by this many standard deviations of the
#: site's noise in that release (an honest site does so with probability below 1e-300 per value).
NOISE_TAIL = 40.0
#: Non-private plans: the largest magnitude of a row value the limits assume. Every second moment about
#: a pooled centre is then below ``(2e48)² = 4e96``, far below the blanket ``REPLY_VALUE_LIMIT`` (1e100);
#: data beyond it could not run through the protocol anyway.
ROW_VALUE_LIMIT = 1e48
#: Relative slack for floating-point rounding in the derived limits and the consistency checks.
ROUNDING = 1e-9
#: Standardised rows are rounded to multiples of this (:func:`bnsl_cli.stats.quantise`): a value moves
#: by at most half of it.
_QUANTUM = 2.0 ** -QUANTUM_BITS
#: :meth:`ReplyLimits.outlying_spreads`: a site whose rows spread about the pooled mean more than this
#: many times the other sites' median spread (in a column) is named in a warning.
SPREAD_FACTOR = 1e3
#: The sender field of a securely summed reply (:data:`bnsl_cli.federated.secure_sum.ALL_SITES`).
_ALL_SITES = 0xFFFFFFFF


def exceeds(values: np.ndarray, limit) -> Optional[tuple[int, float, float]]:
    """``(index, |value|, limit there)`` of the value that exceeds ``limit`` (a number or an array of
    the values' shape) by the largest factor, or ``None`` when none does."""
    values = np.abs(np.asarray(values, dtype=float))
    lim = np.broadcast_to(np.asarray(limit, dtype=float), values.shape)
    over = values > lim
    if not over.any():
        return None
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(over, values / np.maximum(lim, 1e-300), -np.inf)
    k = int(np.argmax(ratio))
    return k, float(values[k]), float(lim[k])


class Rule:
    """How the replies to one request kind are bounded. A subclass overrides :meth:`limit` (and, for
    checks against the site's own earlier shares, :meth:`consistent`); ``what`` names the reply in
    messages."""

    what = "reply"

    def limit(self, lim: "ReplyLimits", request: bytes, index: int) -> Optional[tuple[object, str]]:
        """``(limit, basis)``: the largest magnitude each value of participant ``index``'s reply may
        have (a number, or an array the size of the reply's values) and one phrase saying where it
        comes from; ``None`` when the protocol gives none beyond the blanket limit. With per-site
        statistics unknown (a secure sum) the pooled or public ones stand in."""
        return None

    def consistent(self, lim: "ReplyLimits", request: bytes, index: int, values: np.ndarray) -> Optional[str]:
        """Why ``values`` (participant ``index``'s reply, in the clear) contradict the protocol or the
        same site's earlier shares (``None``: they do not)."""
        return None

    def name(self, request: bytes) -> str:
        """The reply to ``request`` as messages name it (``what``)."""
        return self.what

    def records(self, request: bytes) -> Optional[str]:
        """What the coordinator keeps from the accepted replies to ``request``: ``"means"`` (shares of
        the column means), ``"variances"`` (shares of the pooled variances), or ``None``."""
        return None


class ReplyLimits:
    """The limits of one run's replies: the plan's public facts, the rules of its request kinds
    (``{MessageKind of the request: Rule}``), and what the coordinator accepted so far.

    A fleet calls :meth:`check` for every reply in the clear (through
    :func:`~bnsl_cli.federated.messages.validate_reply`), :meth:`check_sum` for a securely summed one,
    and :meth:`seen` once an exchange's replies are accepted."""

    def __init__(self, plan, rules: Optional[Mapping[int, Rule]] = None):
        self.rules = {int(k): r for k, r in (rules or {}).items()}
        self.d = int(plan.d)
        self.n = float(plan.n_total)
        self.rows = [int(p.rows) for p in plan.participants]
        #: the plan's privacy part (``None``: a non-private run)
        self.privacy = plan.privacy if plan.private else None
        #: each site's per-row column means (its clear mean share · n / n_p), the pooled means
        self.site_means: Optional[list] = None
        self.mean: Optional[np.ndarray] = None
        #: each site's share of the pooled variances (clear), the pooled variances (their sum)
        self.site_variances: Optional[list] = None
        self.variance: Optional[np.ndarray] = None
        #: the standard deviations of the last standardisation broadcast (the sites' working units)
        self.scale: Optional[np.ndarray] = None

    @property
    def P(self) -> int:
        return len(self.rows)

    # -- the checks -----------------------------------------------------------------------------
    def _rule(self, request: Optional[bytes]) -> Optional[Rule]:
        return self.rules.get(request[0]) if request else None

    def check(self, request: bytes, values: np.ndarray, index: int) -> Optional[str]:
        """Why participant ``index``'s reply values to ``request`` are beyond what its rows can give
        (``None``: they are not), as ``validate_reply`` words it ("sent …")."""
        rule = self._rule(request)
        if rule is None or values.size == 0:
            return None
        got = rule.limit(self, request, index)
        if got is not None:
            limit, basis = got
            bad = exceeds(values, limit)
            if bad is not None:
                k, big, at = bad
                return (f"sent a value of magnitude {big:.3g} in its {rule.name(request)} (value {k + 1} of {values.size}), "
                        f"more than its {self.rows[index]} rows can give: at most {at:.3g} ({basis})")
        return rule.consistent(self, request, index, values)

    def check_sum(self, request: bytes, reply: bytes) -> Optional[str]:
        """Why a securely summed reply to ``request`` (the sum of every site's values) is beyond the
        sum of the sites' limits (``None``: it is not). The sum cannot be attributed to one site."""
        rule = self._rule(request)
        span = summable_span(reply)
        if rule is None or span is None:
            return None
        values = np.frombuffer(reply, dtype="<f8", count=span[1], offset=span[0])
        parts = [rule.limit(self, request, p) for p in range(self.P)]
        if not values.size or any(p is None for p in parts):
            return None
        total = sum_shares(np.broadcast_to(np.asarray(p[0], float), values.shape) for p in parts)
        bad = exceeds(values, total)
        if bad is None:
            return None
        k, big, at = bad
        return (f"the sites' securely summed {rule.name(request)} holds a value of magnitude {big:.3g} (value {k + 1} of "
                f"{values.size}), more than the {self.P} sites' {int(self.n)} rows can give: at most {at:.3g} (the sum "
                f"of the sites' limits; {parts[0][1]}); a secure sum cannot tell which site sent it")

    def seen(self, request: Optional[bytes], replies: Sequence[Optional[bytes]]) -> None:
        """Keep what the accepted replies to ``request`` tell later limits (post-processing of what the
        coordinator received anyway): the pooled means and variances and, from replies in the clear,
        each site's own; the standardisation's spreads from its broadcast."""
        if not request:
            return
        if request[0] == MessageKind.STANDARDIZE:
            msg = StandardizeBroadcast.decode(request)
            if msg.sd is not None:
                self.scale = np.asarray(msg.sd, dtype=float)
            return
        rule = self._rule(request)
        what = None if rule is None else rule.records(request)
        if what is None or not replies or any(r is None for r in replies):
            return
        values = [ShareReply.decode(r).values for r in replies]
        summed = read_header(replies[0]).sender == _ALL_SITES
        total = sum_shares(values)
        if what == "means":
            self.mean = total
            self.site_means = None if summed else [v * self.n / float(k) for v, k in zip(values, self.rows)]
        elif what == "variances":
            self.variance = total
            self.site_variances = None if summed else [np.asarray(v, float) for v in values]

    def outlying_spreads(self, names: Sequence[str]) -> list[str]:
        """One line per site whose rows spread about the pooled mean (``√(share · n / n_p)`` of its clear
        share of the pooled variances) more than :data:`SPREAD_FACTOR` times the other sites' median
        spread in some column (at least 3 sites, shares in the clear): such a share passes its limits
        but makes the pooled spreads (the scale check, ``--standardize``) that site's. Its worst column
        is named."""
        if self.site_variances is None or self.P < 3:
            return []
        spread = np.sqrt(np.maximum(np.array([v * self.n / k for v, k in zip(self.site_variances, self.rows)]), 0.0))
        out = []
        for p in range(self.P):
            others = np.median(np.delete(spread, p, axis=0), axis=0)
            with np.errstate(divide="ignore", invalid="ignore"):
                ratio = np.where(others > 0, spread[p] / others, 0.0)
            j = int(np.argmax(ratio))
            if ratio[j] > SPREAD_FACTOR:
                out.append(
                    f"participant {p + 1}'s rows spread {ratio[j]:.3g} times more about the pooled mean than the other "
                    f"sites' in column {names[j]!s} (sd {spread[p][j]:.3g} against {others[j]:.3g}); the pooled spreads "
                    "(the scale check, --standardize) are then that site's — check it"
                )
        return out

    # -- public facts for the rules --------------------------------------------------------------
    def release(self, kind: ReleaseKind):
        """The plan's planned release of ``kind`` (``None``: not planned, or not a private run)."""
        if self.privacy is None:
            return None
        return next((r for r in self.privacy.releases if r.kind == kind), None)

    def site_noise(self, rel, sensitivity: float) -> float:
        """One site's noise standard deviation in release ``rel`` of that ``sensitivity``:
        multiplier · sensitivity / √split."""
        return float(rel.multiplier) * float(sensitivity) / math.sqrt(int(rel.split))

    def value_bound(self) -> float:
        """The clip of a private plan's one-off releases: the public ``--value-bound``, else the largest
        bound a value-range release can return (:data:`~bnsl_cli.privacy.one_off.RANGE_BOUND_MAX`)."""
        vb = None if self.privacy is None else self.privacy.value_bound
        return float(vb) if vb is not None else RANGE_BOUND_MAX

    def centre_offsets(self, index: int, mu: np.ndarray) -> np.ndarray:
        """Per column a bound on ``|x̄_p − μ|`` for site ``index``'s centre (private: its released
        ``ĉ_p``; non-private: its column means): exact from its clear mean share, else from the
        protocol (private: the clipped column-means release and its noise tail; non-private:
        :data:`ROW_VALUE_LIMIT`)."""
        mu = np.asarray(mu, dtype=float)
        if self.site_means is not None:
            xbar = self.site_means[index]
            return np.abs(xbar - mu) * (1.0 + ROUNDING) + ROUNDING * (np.abs(xbar) + np.abs(mu))
        if self.privacy is None:
            return ROW_VALUE_LIMIT + np.abs(mu)
        rel = self.release(ReleaseKind.COLUMN_MEANS)
        if rel is None:  # public means: the centre is the declared 0
            return np.abs(mu)
        n_p = self.rows[index]
        sigma = self.site_noise(rel, means_sensitivity(self.d))
        return self.value_bound() * (n_p + NOISE_TAIL * sigma) / n_p * (1.0 + ROUNDING) + np.abs(mu)

    def second_moment_bound(self, index: int) -> np.ndarray:
        """Private plans: per column a bound on ``n_p·v̂_p`` (the site's released second moments times
        its rows, raw units): the clipped release and its noise tail, ``B²(n_p + tail)``; tighter from
        the site's clear share of the pooled variances (``n · share ≥ n_p v̂_p``), or from the pooled
        variances (every share is a sum of squares, so none exceeds their sum)."""
        n_p = self.rows[index]
        rel = self.release(ReleaseKind.SECOND_MOMENTS)
        bound = np.full(self.d, np.inf)
        if rel is not None:
            sigma = self.site_noise(rel, second_moments_sensitivity(self.d))
            bound = np.full(self.d, self.value_bound() ** 2 * (n_p + NOISE_TAIL * sigma))
        if self.site_variances is not None:
            bound = np.minimum(bound, self.n * self.site_variances[index])
        elif self.variance is not None:
            bound = np.minimum(bound, self.n * np.maximum(self.variance, 0.0))
        return bound * (1.0 + ROUNDING)

    def v_hat(self, index: int, working_units: bool = True) -> np.ndarray:
        """Private plans: per column a bound on site ``index``'s released second moments ``v̂_p``, in the
        units it works in after the statistics exchange (``working_units``: divided by the broadcast
        standard deviations², as ``--standardize`` rescales them), else raw."""
        v = self.second_moment_bound(index) / self.rows[index]
        if working_units and self.scale is not None:
            v = v / self.scale**2
        return v

    def within_moments(self, index: int) -> Optional[np.ndarray]:
        """Non-private plans: per column a bound on site ``index``'s own centred second moments
        ``Σ_rows (x − x̄_p)² / n`` in the units it works in (standardised when the statistics were
        broadcast, with the quantisation's half quantum per value): at most its share of the pooled
        variances (``[m2_p + n_p (x̄_p − μ)²] / n``), or, unseen, the pooled variances. ``None`` for a
        private plan or before the statistics exchange."""
        if self.privacy is not None:
            return None
        if self.site_variances is not None:
            v = np.maximum(self.site_variances[index], 0.0)
        elif self.variance is not None:
            v = np.maximum(self.variance, 0.0)
        else:
            return None
        n_p = float(self.rows[index])
        if self.scale is None:
            return v * (1.0 + ROUNDING)
        with np.errstate(divide="ignore", invalid="ignore"):
            root = np.sqrt(self.n * v) / self.scale
        root = np.where(np.isfinite(root), root, np.inf)
        return (root + math.sqrt(n_p) * _QUANTUM) ** 2 / self.n * (1.0 + ROUNDING)


# ----------------------------------------------------------------------------------------------
# the rules of the column statistics (the statistics exchange and the pooled-statistics methods)
# ----------------------------------------------------------------------------------------------


class MeanShares(Rule):
    """A share of the column means, ``Σ_rows x / n`` (non-private) or ``n_p ĉ_p / n`` (private: the
    column-means release ``B·(clipped sum + noise)/n``, 0 with public means)."""

    what = "share of the column means"

    def limit(self, lim, request, index):
        n_p = lim.rows[index]
        if lim.privacy is None:
            return (n_p / lim.n * ROW_VALUE_LIMIT,
                    f"n_p/n times a mean of values below {ROW_VALUE_LIMIT:.0e} in magnitude")
        rel = lim.release(ReleaseKind.COLUMN_MEANS)
        if rel is None:
            return 0.0, "the means are declared public (--public-means): the share is 0"
        sigma = lim.site_noise(rel, means_sensitivity(lim.d))
        B = lim.value_bound()
        return (B * (n_p + NOISE_TAIL * sigma) / lim.n * (1.0 + ROUNDING),
                f"n_p values clipped at {B:.3g} plus {NOISE_TAIL:g} noise stds ({sigma:.3g}) of the column-means release, over n")

    def records(self, request):
        return "means"


class CentreShares(Rule):
    """The answer to a :class:`~bnsl_cli.federated.messages.CentreBroadcast`: with count 1 a share of
    the pooled variances about the broadcast ``μ``, ``[m2_p + n_p (x̄_p − μ)²] / n`` (private: ``v̂_p``
    and ``ĉ_p`` in place of the exact ones); with count 2 the full centred moments, bounded by ``full``
    (the method's rule; none: the blanket limit only)."""

    what = "share of the pooled variances"

    def __init__(self, full: Optional[Rule] = None):
        self.full = full

    def _full(self, request) -> bool:
        return read_header(request).count == 2

    def name(self, request):
        if self._full(request):
            return "share of the pooled moments" if self.full is None else self.full.name(request)
        return self.what

    def limit(self, lim, request, index):
        if self._full(request):
            return None if self.full is None else self.full.limit(lim, request, index)
        mu = CentreBroadcast.decode(request).mean
        n_p = lim.rows[index]
        off = lim.centre_offsets(index, mu)
        if lim.privacy is None:
            top = n_p / lim.n * (ROW_VALUE_LIMIT + np.abs(mu)) ** 2
            if lim.site_means is not None:
                top = np.minimum(top, n_p / lim.n * (4.0 * ROW_VALUE_LIMIT**2 + off**2))
            return top * (1.0 + ROUNDING), f"n_p/n times squares about μ of values below {ROW_VALUE_LIMIT:.0e}"
        return ((lim.second_moment_bound(index) + n_p * off**2) / lim.n * (1.0 + ROUNDING),
                "its released second moments (clipped, with their noise tail) and its centre's distance to μ, over n")

    def consistent(self, lim, request, index, values):
        if self._full(request):
            return None if self.full is None else self.full.consistent(lim, request, index, values)
        if lim.site_means is None:
            return None
        low = own_mean_floor(lim, index, CentreBroadcast.decode(request).mean)
        short = values < low
        if short.any():
            j = int(np.argmax(np.where(short, low - values, -np.inf)))
            return (f"sent a share of the pooled variances ({values[j]:.3g} in column {j + 1}) below what its own "
                    f"column means imply: a sum of squares about the broadcast centre is at least "
                    f"n_p (x̄_p − μ)² / n = {low[j]:.3g}")
        return None

    def records(self, request):
        return None if self._full(request) else "variances"


def psd_violation(values: np.ndarray, a: np.ndarray, b: np.ndarray, diag: dict) -> Optional[tuple[int, float, float]]:
    """``(k, |S_ab|, √(S_aa S_bb))`` of a value ``S_ab`` (at ``a[k], b[k]``) above what a positive
    semi-definite matrix allows, ``|S_ab| ≤ √(S_aa S_bb)`` (with rounding slack), among the pairs whose
    two diagonal entries are in ``diag`` (``{column: S_aa}``); ``None`` when every such pair complies.
    A sum of squares and cross-products of one site's own rows is such a matrix."""
    keys = np.array(sorted(diag))
    if keys.size == 0:
        return None
    dv = np.full(int(max(keys.max(), a.max(initial=0), b.max(initial=0))) + 1, np.nan)
    dv[keys] = [diag[k] for k in keys]
    sa, sb = dv[a], dv[b]
    ok = np.isfinite(sa) & np.isfinite(sb) & (a != b)
    if not ok.any():
        return None
    with np.errstate(invalid="ignore"):
        cap = np.sqrt(np.maximum(sa, 0.0) * np.maximum(sb, 0.0)) * (1.0 + ROUNDING) + 1e-300
    over = ok & (np.abs(values) > cap)
    if not over.any():
        return None
    k = int(np.argmax(np.where(over, np.abs(values) - cap, -np.inf)))
    return k, float(abs(values[k])), float(cap[k])


def psd_message(values: np.ndarray, a: np.ndarray, b: np.ndarray, diag: dict, what: str) -> Optional[str]:
    """Why ``values`` (the pairs ``a``, ``b``) cannot be ``what`` of one site's rows
    (:func:`psd_violation`), or ``None``."""
    bad = psd_violation(values, a, b, diag)
    if bad is None:
        return None
    k, got, cap = bad
    return (f"sent {what} that no rows can have: |S_ab| = {got:.3g} > √(S_aa S_bb) = {cap:.3g} "
            f"for columns {int(a[k]) + 1} and {int(b[k]) + 1}")


def own_mean_floor(lim: "ReplyLimits", index: int, mu: np.ndarray) -> np.ndarray:
    """Per column the least share of squares about ``mu`` site ``index`` can send given the share of the
    column means it sent (``n_p (x̄_p − μ)² / n``, rounding slack off); requires ``lim.site_means``."""
    xbar = lim.site_means[index]
    gap = np.maximum(np.abs(xbar - mu) - ROUNDING * (np.abs(xbar) + np.abs(mu)), 0.0)
    return lim.rows[index] / lim.n * gap**2 * (1.0 - ROUNDING)

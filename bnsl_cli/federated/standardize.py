"""``--standardize`` and the column-scale check: two sum-shaped exchanges of column statistics before the rounds.

Before round 1 every federated participant (fed-sparse, fed-bnsl) sends its share of the column
means, ``Σ x_j / n`` (``n`` the public total row count;
:class:`~bnsl_cli.federated.messages.ShareReply` answering
:class:`~bnsl_cli.federated.messages.StatsRequest`). The coordinator sums them into the pooled mean
``μ`` and broadcasts it (:class:`~bnsl_cli.federated.messages.CentreBroadcast`); every participant
answers with its share of the pooled variances about ``μ``, ``[m2_p + n_p (x̄_p − μ)²] / n`` per column
(``m2_p`` its sum of squares about its own mean: the parallel-variance formula, no cancellation on
columns far from 0). The sum is the pooled variance. Both replies are plain sums over the
participants, so ``bnsl serve --secure-sum`` can hide the terms. With ``--standardize`` the
coordinator broadcasts ``(μ, σ)``
(:class:`~bnsl_cli.federated.messages.StandardizeBroadcast`); every participant then learns on
``(x − μ) / σ``. Without ``--standardize`` the same statistics only feed the column-scale check: when
the pooled standard deviations differ by more than :data:`SCALE_WARN_RATIO`, ``learn`` warns once,
naming the option. The coordinator sees these statistics only, never rows.

Under ``--dp`` no extra budget is spent: the statistics are post-processing of the one-off releases
every private participant already makes (column means ``ĉ_p`` and centred second moments ``v̂_p``,
:func:`~bnsl_cli.federated.methods.admm.dp_site.private_preprocessing`): ``sums = n_p ĉ_p``,
``m2 = n_p v̂_p``, and the broadcast ``μ`` is post-processing of the released shares. The participant then keeps those releases in standardised units
(``(ĉ_p − μ)/σ``, ``v̂_p/σ²``), so nothing is released twice. (With ``--public-means`` the centre is
the declared 0.)

``notears`` / ``local-notears`` standardise locally (the site's own rows, no message);
``fed-moments`` standardises the pooled moment matrix at the coordinator (no extra message; under
DP from the already released matrix).

Weights are learned and thresholded on the standardised scale (so the edge set does not depend on
the units) and reported in original units: ``W_orig[i, j] = W_std[i, j] · σ_j / σ_i`` (edge i → j).
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np

from bnsl_cli.errors import (
    ByzantineWarning,
    NoDagError,
    NoisyReleaseWarning,
    ScaleWarning,
    warn,
)
from bnsl_cli.federated.messages import (
    CentreBroadcast,
    MessageKind,
    ShareReply,
    StandardizeBroadcast,
    StatsRequest,
    message_kind,
)
from bnsl_cli.federated.method_spec import Statistics
from bnsl_cli.federated.reply_limits import CentreShares, MeanShares
from bnsl_cli.federated.site_sequence import refuse_unsafe, stretch_problem
from bnsl_cli.federated.traffic import STANDARDIZE
from bnsl_cli.privacy import one_off
from bnsl_cli.privacy.bounding import clamp_rows
from bnsl_cli.stats import (
    check_scales,
    column_stats,
    quantise,
    scale_warning,
    sum_shares,
    to_original_units,
    variance_share,
)

__all__ = [
    "ColumnStats",
    "StatsSite",
    "with_stats",
    "standardize_stage",
    "reply_rules",
    "after_rounds",
    "UnitsRecord",
    "floating_point_trap",
]


# ----------------------------------------------------------------------------------------------
# the site side
# ----------------------------------------------------------------------------------------------


class StatsSite:
    """A federated participant wrapped for the column-statistics exchange.

    Answers :class:`StatsRequest` with its statistics and :class:`StandardizeBroadcast` by building
    the method's participant on its standardised rows; every other message goes to that participant.
    Without ``--standardize`` the participant is built at once on the raw rows (identical to an
    unwrapped one). ``build(plan, pid, X, rng, preprocessed)`` is the method's factory."""

    def __init__(self, plan, pid: int, X: np.ndarray, rng, build: Callable):
        self.pid = int(pid)
        self._plan = plan
        self._rng = rng
        self._build = build
        self.inner = None
        self._asked: set = set()
        X = np.asarray(X, dtype=float)
        n = X.shape[0]
        self._pre = None
        if plan.private:
            pv = plan.privacy
            self._pre = one_off.private_preprocessing(X, one_off.one_off_multipliers(pv), pv.value_bound, rng, plan.participants[pid].label)
            centre, v_hat = self._pre[0], self._pre[1]
            self._stats = (n, n * np.asarray(centre, float), n * np.asarray(v_hat, float))
            X = clamp_rows(X, centre, v_hat)  # (x − μ)/σ below cannot overflow (bounding)
        else:
            self._stats = column_stats(X)
        if plan.standardize:
            self._X = X
        else:
            self._X = None
            self._make(X, self._pre)

    def _make(self, X: np.ndarray, pre) -> None:
        self.inner = self._build(self._plan, self.pid, X, self._rng, pre)

    def handle(self, data: bytes) -> Optional[bytes]:
        kind = message_kind(data)
        if kind == StatsRequest.kind:
            req = StatsRequest.decode(data)
            n, sums, _ = self._stats
            self._asked.add("mean")
            return ShareReply(req.round, self.pid, len(sums), np.asarray(sums, float) / float(self._plan.n_total)).encode()
        if kind == CentreBroadcast.kind:
            msg = CentreBroadcast.decode(data)
            n, sums, m2 = self._stats
            if "mean" not in self._asked or "centre" in self._asked:
                raise ValueError(f"participant {self.pid + 1}: a centre broadcast out of order (before the means, or twice)")
            self._asked.add("centre")
            if msg.full or msg.mean.size != len(sums) or not np.all(np.isfinite(msg.mean)):
                raise ValueError(f"participant {self.pid + 1}: the centre broadcast is not usable")
            return ShareReply(msg.round, self.pid, len(sums), variance_share(n, sums, m2, msg.mean, self._plan.n_total)).encode()
        if kind == StandardizeBroadcast.kind:
            msg = StandardizeBroadcast.decode(data)
            if self.inner is not None:
                raise ValueError(f"participant {self.pid + 1}: a standardisation broadcast after the rounds began")
            if msg.mean is None or not (np.all(np.isfinite(msg.mean)) and np.all(msg.sd > 0) and np.all(np.isfinite(msg.sd))):
                raise ValueError(f"participant {self.pid + 1}: the standardisation broadcast is not usable")
            if self._pre is not None:
                # private: (x − μ)/σ of the clamped rows must stay finite, whatever the rows (checked on
                # the released centre and spread and the broadcast alone, before the rows are used)
                refuse_unsafe(f"participant {self.pid + 1}",
                              stretch_problem("standardisation broadcast", self._pre[0], self._pre[1], msg.mean, msg.sd))
            X = quantise((self._X - msg.mean[None, :]) / msg.sd[None, :])
            pre = self._pre
            if pre is not None:
                centre, v_hat, events, notes = pre
                notes = dict(notes)
                notes["centring"] = str(notes.get("centring", "")) + "; standardised with the pooled statistics"
                with np.errstate(over="ignore"):  # a huge public σ: σ² = inf and v̂/σ² = 0
                    v_std = np.asarray(v_hat) / msg.sd**2
                pre = ((np.asarray(centre) - msg.mean) / msg.sd, v_std, events, notes)
            self._X = None
            self._make(X, pre)
            return None
        if self.inner is None:
            raise ValueError(f"participant {self.pid + 1}: a round message before the standardisation broadcast")
        return self.inner.handle(data)

    def events(self) -> list:
        """The privacy events so far: the participant's (whose ledger starts with the one-off
        releases this wrapper made), or those one-off releases before it is built."""
        if self.inner is not None and callable(getattr(self.inner, "events", None)):
            return self.inner.events()
        return [] if self._pre is None else list(self._pre[2])

    def summary(self) -> dict:
        if self.inner is None:
            raise ValueError(f"participant {self.pid + 1}: never standardised")
        return self.inner.summary()


def with_stats(build: Callable) -> Callable:
    """The method's participant factory ``build(plan, pid, X, rng, preprocessed)`` wrapped in :class:`StatsSite`."""

    def make(plan, pid: int, X: np.ndarray, rng):
        return StatsSite(plan, pid, X, rng, build)

    make.__doc__ = build.__doc__
    return make


# ----------------------------------------------------------------------------------------------
# the coordinator side
# ----------------------------------------------------------------------------------------------


@dataclass
class ColumnStats:
    """The record of the column-statistics exchange: whether ``--standardize`` applied them, where
    they came from, the pooled means and standard deviations, and the warnings about a site's shares
    (:meth:`~bnsl_cli.federated.reply_limits.ReplyLimits.outlying_spreads`, warned after the rounds).
    (Its bytes are the fleet's, under the stage :data:`~bnsl_cli.federated.traffic.STANDARDIZE`; the
    report builder adds them.)"""

    applied: bool
    source: str
    mean: list
    sd: list
    warnings: list = field(default_factory=list)


def reply_rules(plan) -> dict:
    """The limits of this exchange's replies (:mod:`bnsl_cli.federated.reply_limits`): a share of the
    column means answers a :class:`StatsRequest`, a share of the pooled variances about the broadcast
    mean a :class:`CentreBroadcast`."""
    return {MessageKind.STATS_REQUEST: MeanShares(), MessageKind.CENTRE: CentreShares()}


def standardize_stage(spec, plan, fleet) -> Optional[ColumnStats]:
    """Before the rounds (methods whose participants answer the exchange): collect the statistics,
    pool them, broadcast them with ``--standardize``, else check the scales. Returns the stage's
    record (``None`` for a method without the exchange)."""
    if spec.statistics is not Statistics.EXCHANGE:
        return None
    fleet.traffic.enter(STANDARDIZE)
    mean = sum_shares(ShareReply.decode(r).values for r in fleet.exchange(StatsRequest(0, plan.d).encode()))
    raw2 = fleet.exchange(CentreBroadcast(1, plan.d, mean, full=False).encode())
    var = sum_shares(ShareReply.decode(r).values for r in raw2)
    sd = np.sqrt(np.maximum(var, 0.0))
    rec = ColumnStats(
        applied=bool(plan.standardize),
        source=(
            "post-processing of the released column means and second moments (no extra privacy cost)"
            if plan.private else "exact pooled column statistics"
        ),
        mean=mean.tolist(),
        sd=sd.tolist(),
    )
    limits = getattr(fleet, "limits", None)
    if limits is not None:
        rec.warnings = limits.outlying_spreads(plan.names)
    if plan.standardize:
        check_scales(mean, sd, plan.names)
        fleet.exchange(StandardizeBroadcast(0, plan.d, mean, sd).encode())
    return rec


@contextmanager
def floating_point_trap():
    """Count numpy floating-point overflows / invalid operations instead of letting numpy warn
    (the count is in the yielded dict's ``"count"``). Code that expects them (``h(W)`` of a huge
    ``W``) keeps its own ``errstate``."""
    rec = {"count": 0, "kinds": set()}

    def call(kind, flag):  # noqa: ARG001
        rec["count"] += 1
        rec["kinds"].add(str(kind))

    with np.errstate(over="call", invalid="call", divide="call", call=call):
        yield rec


@dataclass(frozen=True)
class UnitsRecord:
    """What :func:`after_rounds` did, for the report builder: the warnings it emitted (in order: the
    sites whose shares stood out, then the scale warning), whether the weights were mapped back to
    original units (``rescaled``) and then the standard deviations that did it (one list; one per
    participant for local-notears)."""

    warnings: tuple = ()
    rescaled: bool = False
    sd: Optional[list] = None


def after_rounds(spec, plan, outcome, rec: Optional[ColumnStats], fp_events: int = 0) -> UnitsRecord:
    """After the driver: weights back in original units (with ``--standardize``), the scale warning
    (without). ``rec`` is the stage's record (``None`` for methods without the exchange;
    ``notears``/``local-notears`` sites put their own ``sd`` in their summaries, the pooled-statistics
    methods theirs in the outcome's ``standardize``). A site whose shares stood out
    (``rec.warnings``) is warned about first. The outcome's graphs are changed in place; what was
    done is returned (:class:`UnitsRecord`)."""
    warned: list = []
    if rec is not None and rec.warnings:
        warn(rec.warnings, ByzantineWarning, warned, stacklevel=3)
    sds = _sources(spec, outcome, rec)
    if not sds:
        return UnitsRecord(tuple(warned))
    if plan.standardize:
        if outcome.local is not None:
            outcome.local = [to_original_units(W, sd) for W, sd in zip(outcome.local, sds)]
            return UnitsRecord(tuple(warned), rescaled=True, sd=[list(map(float, sd)) for sd in sds])
        outcome.W = to_original_units(outcome.W, sds[0])
        if outcome.W_raw is not None:
            outcome.W_raw = to_original_units(outcome.W_raw, sds[0])
        return UnitsRecord(tuple(warned), rescaled=True, sd=list(map(float, sds[0])))
    msgs = sorted({m for m in (scale_warning(sd, plan.names) for sd in sds) if m})
    graphs = outcome.local if outcome.local is not None else [outcome.W]
    noisy = bool(getattr(plan, "private", False))  # the spreads come from the noisy released statistics
    if noisy and not fp_events and all(not np.any(G) for G in graphs):
        # no edge stood out of the release noise: the empty graph is the answer the released statistics
        # support (a ratio of noisy spreads says nothing about the data's units: no error from it)
        warn(["no edge stood out of the release noise: the graph is empty; a larger --epsilon or more rows per "
              "site would resolve more (bnsl privacy-budget --samples n1,n2,... --nodes d says how much)"],
             NoisyReleaseWarning, warned, stacklevel=3)
        return UnitsRecord(tuple(warned))
    if msgs and (fp_events or all(not np.any(G) for G in graphs)):
        what = "the optimisation overflowed" if fp_events else "no edge survived"
        source = " (estimated from the noisy released statistics)" if noisy else ""
        raise NoDagError(
            f"{msgs[0].split('; ')[0]}{source} and {what}, so the graph is not meaningful; rerun with --standardize"
        )
    if noisy:
        # a ratio of noisy spreads can be far off the data's (158-fold for a real 16-fold): no warning
        # from it. Whoever holds the rows checks their exact spreads (bnsl learn and bnsl join do:
        # exact_scale_warning), which releases nothing.
        return UnitsRecord(tuple(warned))
    if msgs:  # once
        warn(msgs[:1], ScaleWarning, warned, stacklevel=3)
    return UnitsRecord(tuple(warned))


def _sources(spec, outcome, rec: Optional[ColumnStats]) -> list:
    if rec is not None:
        return [np.asarray(rec.sd, float)]
    if spec.statistics is Statistics.POOLED_MOMENTS:
        pooled = getattr(outcome, "standardize", None)
        return [] if pooled is None else [np.asarray(pooled.sd, float)]
    out = [s.get("sd") for s in outcome.summaries]
    if not out or any(sd is None for sd in out):
        return []
    return [np.asarray(sd, float) for sd in out]

"""A site's guard: what it accepts (:class:`SiteLimits`, :func:`check_plan`) and what it lets its
participant release while the run goes on (:class:`SpendGuard`).

The coordinator is not trusted with the site's budget. Before anything data-dependent is computed,
:func:`check_plan` recomputes the plan's privacy part from its public quantities alone (ε, δ, the
conversion, the accountant, the budget shares, the clip, the clip levels, the value bound, the rounds and steps the
participant will run, whether it polishes) with the same builder the coordinator used
(:func:`bnsl_cli.plan.privacy_plan.resolve_privacy`, i.e. :mod:`bnsl_cli.privacy.release_plan`), and refuses a plan
whose release list (kinds, mechanisms, noise multipliers, counts, split) is not exactly that list, or
whose ε recomputed from it exceeds the site's ``max_epsilon``. The participant is then built from
the plan, so it uses the multipliers and step counts the site checked.

At run time :class:`SpendGuard` wraps the participant. Before it hands a message on it checks the
message against the accepted plan through the message sequence the plan's method declares
(``MethodSpec.site_sequence``, :mod:`bnsl_cli.federated.site_sequence`; the guard names no method and
no message kind): a kind no step of the sequence handles is refused; the step of the message's kind
says whether it may come now (e.g. consensus rounds numbered 1, 2, 3, … with no gap, replay or
reordering and no more than the plan's rounds; once-only requests once; nothing after the stop
broadcast) and which releases answering it makes, and the guard refuses when they would exceed
the planned count of their kind or the remaining ρ. After the participant answered, it reads the
participant's ledger again and withholds the answer if any release exceeded the plan (a count, a
per-release cost, the total ρ). A refusal is a :class:`~bnsl_cli.errors.GuardRefusedError` (exit 5):
the site sends no answer, tells the coordinator why, and stops; the guard stays closed.

A site run from Python gets the same guard: :class:`SiteGuard` (``on_plan`` for
:func:`~bnsl_cli.net.site.run_site`) or :func:`guarded_participant`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, replace
from typing import Callable, Optional

import numpy as np

from bnsl_cli.errors import (
    BnslError,
    GuardRefusedError,
    OptionError,
    RefusedError,
    ShardMismatchError,
)
from bnsl_cli.federated.messages import read_header
from bnsl_cli.federated.methods.registry import Rounds, make_participant
from bnsl_cli.federated.site_sequence import SequenceState, steps_by_kind
from bnsl_cli.io.kinds import MAX_LEVELS
from bnsl_cli.net.common import FederationError
from bnsl_cli.net.site_budget import SiteBudget
from bnsl_cli.net.site_sessions import DEFAULT_MAX_SESSIONS, BootstrapSessions
from bnsl_cli.plan.options import CLIP_LEVELS, DPConfig
from bnsl_cli.plan.privacy_plan import PrivacyPlan, resolve_privacy
from bnsl_cli.plan.run_plan import RunPlan
from bnsl_cli.privacy.split_noise import distribute_noise, split_noise_plan
from bnsl_cli.run import participant_rngs

__all__ = [
    "SiteLimits",
    "AcceptedPlan",
    "admm_rounds",
    "check_plan",
    "expected_privacy",
    "plan_record",
    "SpendGuard",
    "SiteGuard",
    "guarded_participant",
]

#: Relative slack on ρ comparisons: a run's ledger recomputes each release's ρ from its actual
#: sensitivity and noise, a few ulps apart from the plan's.
RHO_SLACK = 1e-9


#: The δ a site accepts when it states none (``bnsl join --max-delta``; ``SiteLimits.max_delta``
#: ``None``): a fixed public bound, the same for every site, that the coordinator cannot move by
#: choosing the plan. ``bnsl learn --dp`` and ``bnsl serve --dp`` make δ = 1/n_min² by default (the
#: smallest site's rows, :func:`~bnsl_cli.plan.run_plan.default_delta`), which is at most 1e-5
#: whenever every site has at least 317 rows (1/317² = 9.95e-6): the sizes private runs need to learn
#: anything (the README's measurements use 500 to 5,000 rows per site). 1e-5 is also the customary
#: bound for δ, far below 1/n for any site of fewer than 100,000 rows (n·δ ≤ 0.01 up to 1,000 rows,
#: ``bnsl learn``'s own threshold for a weak δ). A fleet with a smaller site needs an explicit
#: ``serve --delta`` (≤ 1e-5) or a higher ``--max-delta`` at every site.
DEFAULT_MAX_DELTA = 1e-5


@dataclass(frozen=True)
class SiteLimits:
    """What a site accepts (``bnsl join``'s options). ``None`` means "no limit" except for
    ``max_epsilon`` (``None``: no private run) and ``max_delta`` (``None``: the fixed public bound
    :data:`DEFAULT_MAX_DELTA`, 1e-5, set in its place so that the HELLO and the transcript show the
    bound in force; before it was 1 / this site's rows, which let a 2,000-row site accept δ = 5e-4)."""

    max_epsilon: Optional[float] = None
    max_delta: Optional[float] = None
    allow_non_private: bool = False
    max_rounds: Optional[int] = None
    methods: Optional[tuple] = None
    releases: Optional[tuple] = None
    accept_seeded_noise: bool = False
    accept_split_noise: bool = False
    refuse_standardize: bool = False
    require_secure_sum: bool = False
    #: answer the contingency tables of a non-private plan with categorical columns (``--allow-tables``)
    allow_tables: bool = False
    #: the most levels a categorical column of a plan may have (``--max-levels``): a plan with more is refused
    #: before this site expands its rows (each level is a column of its expanded data)
    max_levels: int = MAX_LEVELS
    #: sessions answered in one join (``serve --bootstrap B``: B replicates and the run); also bounded
    #: by the site's rows (:mod:`bnsl_cli.net.site_sessions`)
    max_sessions: int = DEFAULT_MAX_SESSIONS
    #: the ε this site spends over all runs on its budget ledger (:mod:`bnsl_cli.net.site_budget`);
    #: ``None``: ``max_epsilon`` (a second full-budget run is refused)
    max_total_epsilon: Optional[float] = None

    def __post_init__(self) -> None:
        if self.max_delta is None:
            object.__setattr__(self, "max_delta", DEFAULT_MAX_DELTA)
        if self.max_epsilon is not None and not (isinstance(self.max_epsilon, (int, float)) and self.max_epsilon > 0):
            raise OptionError(f"max_epsilon must be > 0, got {self.max_epsilon!r}")
        if self.max_delta is not None and not (isinstance(self.max_delta, (int, float)) and self.max_delta > 0):
            raise OptionError(f"max_delta must be > 0, got {self.max_delta!r}")
        if self.max_rounds is not None and not (isinstance(self.max_rounds, int) and self.max_rounds >= 1):
            raise OptionError(f"max_rounds must be at least 1, got {self.max_rounds!r}")
        if not (isinstance(self.max_levels, int) and self.max_levels >= 2):
            raise OptionError(f"max_levels must be at least 2, got {self.max_levels!r}")
        if not (isinstance(self.max_sessions, int) and self.max_sessions >= 1):
            raise OptionError(f"max_sessions must be at least 1, got {self.max_sessions!r}")
        if self.max_total_epsilon is None:
            object.__setattr__(self, "max_total_epsilon", self.max_epsilon)
        elif not (isinstance(self.max_total_epsilon, (int, float)) and 0 < self.max_total_epsilon < math.inf):
            raise OptionError(f"max_total_epsilon must be a finite number > 0, got {self.max_total_epsilon!r}")
        for name in ("methods", "releases"):
            v = getattr(self, name)
            if v is not None:
                object.__setattr__(self, name, tuple(str(x) for x in v))

    def to_dict(self) -> dict:
        """JSON-able (the HELLO and the transcript carry it)."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        for name in ("methods", "releases"):
            if out[name] is not None:
                out[name] = list(out[name])
        return out

    @classmethod
    def from_dict(cls, d: dict) -> "SiteLimits":
        return cls(**{f.name: d[f.name] for f in fields(cls) if f.name in d})


@dataclass(frozen=True)
class AcceptedPlan:
    """A plan this site accepted: the plan, its participant index, its rows in the plan's column
    order, whether the plan has a secure sum, and the zCDP ρ and ε the site accepted (0 and 0 for
    a non-private plan), recomputed here."""

    plan: RunPlan
    index: int
    X: np.ndarray
    secure_sum: bool
    rho: float
    epsilon: float
    #: the site's running total after this plan (its budget ledger; empty without one)
    total: dict = field(default_factory=dict)


def admm_rounds(plan) -> int:
    """The most ADMM rounds ``plan`` can run (what ``max_rounds`` compares): the plan's ``rounds``
    when they are ADMM rounds (one exchange with every site per round); 0 when they are the
    coordinator's NOTEARS steps (fed-moments: no exchange)."""
    return int(plan.rounds) if plan.spec.rounds is Rounds.ADMM else 0


def expected_privacy(plan: RunPlan) -> PrivacyPlan:
    """The privacy part ``plan`` must have: recomputed from its public quantities (target, shares,
    clip, clip levels, value bound, the rounds and steps the participant will run, the polish) by
    the builder the coordinator uses, by the plan's accountant, with the plan's split noise applied
    the way ``serve --split-noise`` (fed-moments) or ``--noise distributed``/``--collusion-tolerance``
    (a method whose summed releases can carry distributed noise) applies it. Raises :class:`RefusedError` when they cannot make a plan."""
    pv = plan.privacy
    try:
        dp = DPConfig(
            epsilon=pv.epsilon, delta=pv.delta if pv.delta_given else None, clip=pv.clip,
            selection_share=pv.selection_share, conversion=pv.conversion, public_means=pv.public_means,
            value_bound=pv.value_bound, clip_levels=pv.clip_levels if pv.clip_levels in CLIP_LEVELS else "auto",
            polish_share=pv.polish_share, accountant=pv.accountant,
        )
        want = resolve_privacy(
            plan.method, dp, delta=pv.delta, rounds=plan.rounds, steps=plan.steps, polish=plan.polish, d=plan.d,
            mean_share=pv.mean_share, moment_share=pv.moment_share,
        )
        split = max((int(r.split) for r in pv.releases), default=1)
        if split > 1:
            if plan.spec.distributed_noise:
                # --noise distributed over P sites with collusion tolerance t = P − split

                want = distribute_noise(want, plan.method, True, plan.P, "distributed", max(plan.P - split, 0))
            else:  # serve --split-noise (fed-moments): split over every site

                want = split_noise_plan(replace(plan, privacy=want)).privacy
    except BnslError as exc:
        raise RefusedError(f"the plan's privacy part cannot be recomputed from its public quantities ({exc})") from None
    except (TypeError, ValueError, ArithmeticError) as exc:
        raise RefusedError(f"the plan's privacy part is malformed ({type(exc).__name__}: {exc})") from None
    return want


#: Relative tolerance when the site compares the plan's numbers with its own recomputation: the same
#: code on another machine (another libm) may round the calibration differently in the last bits.
#: Kinds, mechanisms, counts, split and every option are compared exactly.
RECOMPUTE_RTOL = 1e-9


def _same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float) and not isinstance(a, bool):
        return math.isclose(a, b, rel_tol=RECOMPUTE_RTOL, abs_tol=0.0)
    return a == b


def _release_mismatch(got: PrivacyPlan, want: PrivacyPlan) -> Optional[str]:
    """What differs between the plan's privacy part and the recomputed one (``None``: nothing)."""
    for f in fields(PrivacyPlan):
        if f.name != "releases" and not _same(getattr(got, f.name), getattr(want, f.name)):
            return f"its {f.name} is {getattr(got, f.name)!r}, its public quantities give {getattr(want, f.name)!r}"
    if len(got.releases) != len(want.releases):
        return f"it lists {len(got.releases)} releases, its public quantities give {len(want.releases)}"
    for a, b in zip(got.releases, want.releases):
        if (a.kind, a.mechanism, a.count, a.split) != (b.kind, b.mechanism, b.count, b.split) or not _same(
            float(a.multiplier), float(b.multiplier)
        ):
            return (
                f"its {a.kind} release is {a.count} × noise multiplier {a.multiplier:.6g}"
                f"{f' split {a.split}' if a.split > 1 else ''}; its public quantities give {b.kind}: {b.count} × "
                f"{b.multiplier:.6g}{f' split {b.split}' if b.split > 1 else ''}"
            )
    return None


def check_plan(body: dict, table, limits: SiteLimits, name: str,
               sessions: Optional[BootstrapSessions] = None, budget: Optional[SiteBudget] = None) -> AcceptedPlan:
    """The plan in ``body`` (a PLAN frame's body: ``plan``, ``index``, ``secure_sum``) checked
    against this site (``table``: its rows, ``name``: its declared name) and its ``limits``;
    ``sessions``: this site's bootstrap sessions with the coordinator so far (a fresh
    :class:`~bnsl_cli.net.site_sessions.BootstrapSessions` when ``None``: a first session), which
    admit the plan (order, caps) and resample the rows of a replicate from the site's own stream;
    ``budget``: the site's ledger across runs (:class:`~bnsl_cli.net.site_budget.SiteBudget`), which
    refuses a private plan beyond the site's total limit and records it once every other check passed.

    Raises :class:`~bnsl_cli.errors.RefusedError` (exit 5) when the plan is beyond the limits or
    its release list is not the one its public quantities give,
    :class:`~bnsl_cli.net.common.FederationError` when it is malformed or does not
    describe this site, :class:`~bnsl_cli.errors.ShardMismatchError` when its columns differ."""
    try:
        plan = RunPlan.from_dict(body["plan"])
        index = int(body["index"])
    except BnslError:
        raise
    except Exception as exc:
        raise FederationError(f"the coordinator's plan is malformed ({type(exc).__name__}: {exc})") from None
    if not 0 <= index < plan.P:
        raise FederationError(f"the coordinator gave this site index {index + 1} of {plan.P}")
    me = plan.participants[index]
    if me.label != name or me.rows != table.n:
        raise FederationError(
            f"the plan lists participant {index + 1} as {me.label!r} with {me.rows} rows; this site is {name!r} with {table.n}"
        )
    if plan.columns is not None:  # categorical columns: this site's rows against the plan's levels
        from bnsl_cli.io.kinds import expand_for_plan

        # decided on public values before the rows are looked at (a refusal that depends on them is a release)
        if plan.private:
            raise RefusedError("the plan learns categorical columns under --dp, which this version does not (their "
                               "levels would need a public schema); refused")
        if not limits.allow_non_private:
            raise RefusedError("the coordinator asks for a non-private run with categorical columns; this site accepts "
                               "private runs only (--allow-non-private to accept)")
        wide = [(n, len(lv)) for n, lv in plan.columns.levels if len(lv) > limits.max_levels]
        if wide:
            raise RefusedError(f"the plan's column {wide[0][0]!r} has {wide[0][1]} levels, more than this site's "
                               f"--max-levels {limits.max_levels}")
        if plan.tables and not limits.allow_tables:
            raise RefusedError("the plan asks for contingency tables of the categorical columns, which this site did "
                               "not allow (--allow-tables to accept)")

        table = expand_for_plan(table, plan.columns)
    if not set(plan.names) <= set(table.names) or len(set(plan.names)) != len(plan.names):
        raise ShardMismatchError(f"{table.path}: the plan's columns differ from this site's")
    # serve --bootstrap: the session must be the one due, within the caps, before the rows are touched
    if sessions is None:
        sessions = BootstrapSessions(limits.max_sessions)
    sessions.admit(plan, table.n)
    # the coordinator may choose fewer columns (serve --columns/--drop): this site uses those
    idx = [table.names.index(n) for n in plan.names]
    # C order, as bnsl learn holds a reordered shard (a column-major slice changes the last digits)
    X = np.ascontiguousarray(table.X[:, idx]) if idx != list(range(table.d)) else table.X
    # a replicate runs on this site's rows resampled from its own secret stream
    X = sessions.rows(X, plan, index)
    secure = bool(body.get("secure_sum"))
    if limits.methods is not None and plan.method not in limits.methods:
        raise RefusedError(f"method {plan.method} is not among --methods {','.join(limits.methods)}")
    if limits.max_rounds is not None and admm_rounds(plan) > limits.max_rounds:
        raise RefusedError(
            f"the plan runs up to {admm_rounds(plan)} ADMM rounds, more than --max-rounds {limits.max_rounds}"
        )
    if limits.refuse_standardize and plan.standardize:
        raise RefusedError(
            "the plan standardises the rows with the pooled column statistics (--standardize); refused "
            "(--refuse-standardize)"
        )
    if limits.require_secure_sum and not secure:
        raise RefusedError(
            "the plan has no secure aggregation: the coordinator would see this site's summable replies "
            "(column statistics, moments); refused (--require-secure-sum; the coordinator adds serve --secure-sum)"
        )
    if not plan.private:
        if not limits.allow_non_private:
            raise RefusedError(
                "the coordinator asks for a non-private run (exact updates would leave this site); "
                f"this site accepts private runs with ε ≤ {limits.max_epsilon:g} only (--allow-non-private to accept)"
            )
        return AcceptedPlan(plan, index, X, secure, 0.0, 0.0)
    pv = plan.privacy
    if limits.max_epsilon is None:
        raise RefusedError("the coordinator asks for a private run but this site set no --max-epsilon")
    want = expected_privacy(plan)
    why = _release_mismatch(pv, want)
    if why is not None:
        raise RefusedError(
            f"the plan's release list is not the one its public quantities give (rounds {plan.rounds}, steps "
            f"{plan.steps}, ε {pv.epsilon:g}): {why}; refused"
        )
    # the participant uses the plan's own list; it matches the recomputed one up to RECOMPUTE_RTOL
    (eps_want, rho_want), (eps_got, rho_got) = want.spend(), pv.spend()
    eps, rho = max(eps_want, eps_got), max(rho_want, rho_got)
    worst = max(eps, pv.epsilon)
    if not worst <= limits.max_epsilon * (1 + 1e-12):
        raise RefusedError(
            f"the plan spends ε = {worst:.4g} (recomputed here from its release list), more than this site's "
            f"--max-epsilon {limits.max_epsilon:g}"
        )
    max_delta = limits.max_delta if limits.max_delta is not None else DEFAULT_MAX_DELTA
    if not pv.delta <= max_delta * (1 + 1e-12):
        raise RefusedError(f"the plan's δ = {pv.delta:.3g} exceeds this site's --max-delta {max_delta:.3g}")
    if limits.releases is not None:
        kinds = sorted({getattr(r.kind, "value", str(r.kind)) for r in pv.releases})
        bad = [k for k in kinds if k not in limits.releases]
        if bad:
            raise RefusedError(f"the plan releases {', '.join(bad)}, not among --releases {','.join(limits.releases)}")
    split = max(int(getattr(r, "split", 1)) for r in pv.releases)
    if split > 1:
        if not limits.accept_split_noise:
            raise RefusedError(
                "the plan splits DP noise across the sites (this site would add only 1/P of it; the guarantee "
                "would rest on the secure sum and on no site colluding); refused (--accept-split-noise to accept)"
            )
        if not secure or split > plan.P:
            raise RefusedError(
                "the plan splits DP noise " + ("without a secure sum" if not secure
                                               else f"over {split} sites but has {plan.P}") + "; refused"
            )
    if plan.seed is not None and not limits.accept_seeded_noise:
        raise RefusedError(
            "the plan seeds the DP noise (--seed): the coordinator could reproduce and remove this site's noise; "
            "refused (--accept-seeded-noise for tests)"
        )
    # last: the site's spend over runs (its own ledger), recorded before any release
    total = budget.admit(plan, name) if budget is not None else {}
    return AcceptedPlan(plan, index, X, secure, float(rho), float(eps), total)


def plan_record(plan) -> dict:
    """The public part of ``plan`` a transcript records."""
    rec = {"method": plan.method, "rounds": plan.rounds, "steps": plan.steps, "participants": plan.P,
           "n_total": plan.n_total, "private": plan.private}
    if plan.private:
        eps, rho = plan.privacy.spend()
        rec.update(epsilon=plan.privacy.epsilon, epsilon_recomputed=eps, rho=rho, delta=plan.privacy.delta,
                   releases=[r.to_dict() for r in plan.privacy.releases])
    if plan.knowledge is not None:  # the prior knowledge the site's participant enforces (public)
        rec["knowledge"] = plan.knowledge.to_dict()
    if plan.columns is not None:  # categorical columns: their levels, and whether tables may be asked for
        rec["columns"] = plan.columns.to_dict()
        rec["tables"] = plan.tables
    return rec


# ----------------------------------------------------------------------------------------------
# at run time
# ----------------------------------------------------------------------------------------------


def _events(participant) -> list:
    """A participant's privacy events so far (its ``events()``, or its ledger's)."""
    if callable(getattr(participant, "events", None)):
        return list(participant.events())
    ledger = getattr(participant, "ledger", None)
    return [] if ledger is None else list(ledger.events(participant.pid))


class SpendGuard:
    """``participant`` held to the accepted ``plan`` (see the module docstring). ``rho`` is the zCDP
    budget the site accepted (default: the plan's release list's spend). A refusal raises
    :class:`~bnsl_cli.errors.GuardRefusedError`; after one, every message is refused."""

    def __init__(self, participant, plan: RunPlan, rho: Optional[float] = None):
        self.inner = participant
        self.plan = plan
        self.pid = int(getattr(participant, "pid", 0))
        self.planned_count: dict = {}
        self.planned_rho_each: dict = {}
        #: the steps of the message sequence this plan's method declares, by the kinds they handle
        #: (:mod:`bnsl_cli.federated.site_sequence`); every other kind is refused
        self.steps = steps_by_kind(plan.spec.site_sequence(plan))
        self.state = SequenceState()
        if plan.private:
            for r in plan.privacy.releases:
                self.planned_count[r.kind] = self.planned_count.get(r.kind, 0) + int(r.count)
                self.planned_rho_each[r.kind] = max(self.planned_rho_each.get(r.kind, 0.0), float(r.rho_each))
            self.rho_accepted = float(plan.privacy.spend()[1] if rho is None else rho)
        else:
            self.rho_accepted = 0.0
        self.refused: Optional[str] = None
        self.messages = 0
        self._check_ledger("when the participant was built")

    # -- what the site spent -----------------------------------------------------------------------
    def spent(self) -> tuple[dict, float]:
        """``({release kind: count}, ρ)`` of the participant's ledger so far."""
        counts: dict = {}
        rho = 0.0
        for ev in _events(self.inner):
            counts[ev.release] = counts.get(ev.release, 0) + int(ev.count)
            rho += float(ev.rho)
        return counts, rho

    @property
    def rho_spent(self) -> float:
        return self.spent()[1]

    def _refuse(self, why: str):
        self.refused = why
        return GuardRefusedError(f"participant {self.pid + 1} refused a message beyond the accepted plan: {why}")

    def _check_ledger(self, when: str) -> None:
        if not self.plan.private:
            if _events(self.inner):
                raise self._refuse(f"a privacy release {when} in a non-private plan")
            return
        counts, rho = self.spent()
        for ev in _events(self.inner):
            allowed = self.planned_rho_each.get(ev.release)
            if allowed is None:
                raise self._refuse(f"a {ev.release} release {when}, which the plan does not list")
            if not ev.rho_each <= allowed * (1 + RHO_SLACK):
                raise self._refuse(
                    f"a {ev.release} release {when} with less noise than planned (ρ {ev.rho_each:.4g} each, "
                    f"planned {allowed:.4g})"
                )
        for kind, n in counts.items():
            if n > self.planned_count.get(kind, 0):
                raise self._refuse(f"{n} {kind} releases {when}, more than the plan's {self.planned_count.get(kind, 0)}")
        if not rho <= self.rho_accepted * (1 + RHO_SLACK):
            raise self._refuse(f"zCDP ρ {rho:.6g} spent {when}, more than the accepted {self.rho_accepted:.6g}")

    @property
    def last_round(self) -> int:
        """The last consensus round answered (0 before the rounds)."""
        return self.state.last_round

    @property
    def stages_done(self) -> int:
        """The last stage answered (a staged method's stage broadcasts; 0 before the stages)."""
        return self.state.stages_done

    # -- before a message --------------------------------------------------------------------------
    def _admit(self, data: bytes) -> None:
        """Refuse ``data`` when it is beyond the accepted plan (sequence, count or budget): the
        method's declared step for its kind says whether it may come now and which releases answering
        it makes."""
        try:
            head = read_header(data)
        except ValueError as exc:
            raise FederationError(f"the coordinator sent a malformed protocol message ({exc})") from None
        kind, rnd = head.kind, head.round
        step = self.steps.get(kind)
        if step is None:
            raise self._refuse(f"a message of kind {kind}, which a {self.plan.method} site does not take")
        if self.state.stopped:
            raise self._refuse(f"a kind-{kind} message after the stop broadcast")
        try:
            why = step.admit(self.plan, self.state, kind, rnd, data)
            made = step.releases(self.plan, kind, rnd, data) if why is None else {}
        except ValueError as exc:
            raise FederationError(f"the coordinator sent a malformed protocol message ({exc})") from None
        if why is not None:
            raise self._refuse(why)
        predicted = {k: v for k, v in made.items() if k in self.planned_count}
        if predicted:
            counts, rho = self.spent()
            extra = 0.0
            for k, (n, rho_each) in predicted.items():
                if counts.get(k, 0) + n > self.planned_count[k]:
                    raise self._refuse(
                        f"{n} more {k} releases after {counts.get(k, 0)}, beyond the plan's {self.planned_count[k]}"
                    )
                extra += n * (self.planned_rho_each[k] if rho_each is None else rho_each)
            if not rho + extra <= self.rho_accepted * (1 + RHO_SLACK):
                raise self._refuse(
                    f"releases costing ρ {extra:.4g} with {self.rho_accepted - rho:.4g} of the accepted "
                    f"{self.rho_accepted:.4g} left"
                )

    def _commit(self, data: bytes) -> None:
        """Record that ``data`` was answered (the sequence moves on)."""
        head = read_header(data)
        self.steps[head.kind].commit(self.plan, self.state, head.kind, head.round, data)

    # -- the participant's interface ---------------------------------------------------------------
    def handle(self, data: bytes) -> Optional[bytes]:
        """The participant's answer to ``data``, or :class:`GuardRefusedError` (nothing answered)."""
        if self.refused is not None:
            raise GuardRefusedError(f"participant {self.pid + 1} stopped earlier: {self.refused}")
        self._admit(data)
        reply = self.inner.handle(data)
        self._commit(data)
        self.messages += 1
        self._check_ledger(f"answering message {self.messages}")
        return reply

    def events(self) -> list:
        return _events(self.inner)

    def summary(self) -> dict:
        return self.inner.summary()


def guarded_participant(accepted: AcceptedPlan, rng: Optional[np.random.Generator] = None,
                        make: Optional[Callable] = None) -> SpendGuard:
    """The site's participant for an accepted plan, wrapped in its :class:`SpendGuard`. ``rng``:
    its noise source (default: the run's, from the plan); ``make(plan, index, X, rng)``: the
    participant factory (default: the method's)."""

    plan = accepted.plan
    if rng is None and plan.private:
        rng = participant_rngs(plan)[accepted.index]
    build = make or make_participant
    guard = SpendGuard(build(plan, accepted.index, accepted.X, rng), plan, accepted.rho if plan.private else None)
    guard.noise = rng  # the participant's noise source (a site that keeps state re-keys it per message)
    return guard


class SiteGuard:
    """A site's policy for one run, for :func:`~bnsl_cli.net.site.run_site`: ``on_plan``
    checks the (first and only) plan with :func:`check_plan` and returns the guarded participant;
    a second plan is refused. ``on_accept(accepted)`` is called once a plan is accepted (e.g. to
    record it in the transcript)."""

    def __init__(self, table, limits: SiteLimits, name: str, *, make: Optional[Callable] = None,
                 on_accept: Optional[Callable[[AcceptedPlan], None]] = None,
                 sessions: Optional[BootstrapSessions] = None, budget: Optional[SiteBudget] = None):
        self.table = table
        self.sessions = sessions
        self.budget = budget
        self.limits = limits
        self.name = name
        self.make = make
        self.on_accept = on_accept
        self.accepted: Optional[AcceptedPlan] = None
        self.guard: Optional[SpendGuard] = None

    def on_plan(self, body: dict) -> SpendGuard:
        if self.accepted is not None:
            raise GuardRefusedError("the coordinator sent a second plan; a site accepts one plan per run")
        accepted = check_plan(body, self.table, self.limits, self.name, self.sessions, self.budget)
        self.accepted = accepted
        if self.on_accept is not None:
            self.on_accept(accepted)
        self.guard = guarded_participant(accepted, make=self.make)
        return self.guard

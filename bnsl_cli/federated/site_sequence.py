"""The message sequence a site answers, as each method declares it (``MethodSpec.site_sequence``).

A site's guard (:class:`bnsl_cli.net.policy.SpendGuard`) holds its participant to the plan it accepted.
It does not know any method's messages: it asks the steps the method declares. A :class:`Step`
handles some message kinds and says, from the message's header and the plan alone (before the
participant sees the message), whether the message may come now (:meth:`Step.admit`: ``None`` or
why not), which releases answering it makes (:meth:`Step.releases`, checked by the guard against the
plan's counts and the remaining budget), and how the sequence moves on once it was answered
(:meth:`Step.commit`). The steps share one :class:`SequenceState` (rounds so far, stages so far, the
once-only requests seen, the stop, the polish).

Shared steps live with what they belong to: the ADMM rounds in
:mod:`bnsl_cli.federated.methods.admm.sequence`, the column-statistics exchange in
:mod:`bnsl_cli.federated.standardize`, the polish in :mod:`bnsl_cli.federated.polish`, each method package's own
requests in its ``sequence`` module. A new method declares its own.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Optional

from bnsl_cli.errors import UnsafeMessageError
from bnsl_cli.federated.messages import CentreBroadcast, MessageKind
from bnsl_cli.privacy.bounding import STANDARDISED_MAX, standardised_bound
from bnsl_cli.privacy.releases import ReleaseKind

__all__ = ["SequenceState", "Step", "OnceBeforeRounds", "centre_name", "STATS_EXCHANGE", "PolishRequest", "POLISH_REQUEST", "steps_by_kind",
           "refuse_unsafe", "stretch_problem"]


@dataclass
class SequenceState:
    """Where a site's run stands: the last consensus round answered, the last stage answered, the
    once-only requests answered (by name), whether the stop broadcast came, whether the polish did."""

    last_round: int = 0
    stages_done: int = 0
    stopped: bool = False
    polished: bool = False
    seen: set = field(default_factory=set)


class Step:
    """One part of a method's message sequence (see the module docstring). ``kinds``: the message
    kinds it handles."""

    kinds: frozenset = frozenset()

    def admit(self, plan, state: SequenceState, kind: int, rnd: int, data: bytes) -> Optional[str]:
        """Why the message may not come now (``None``: it may). Reads the header's ``kind`` and
        ``rnd``, the plan and the state only; a malformed message raises ``ValueError``."""
        return None

    def releases(self, plan, kind: int, rnd: int, data: bytes) -> Mapping:
        """``{release kind: (count, ρ each or None)}``: the releases answering the message makes by the
        plan (``None``: the plan's ρ of one release of that kind)."""
        return {}

    def commit(self, plan, state: SequenceState, kind: int, rnd: int, data: bytes) -> None:
        """The sequence after the message was answered."""


class OnceBeforeRounds(Step):
    """Requests a site answers at most once each, before the consensus rounds begin: ``names`` maps
    each kind to ``name(data) -> str`` (how refusals name it; two messages of one kind may count as
    different requests), ``made`` each kind to the releases answering it makes."""

    def __init__(self, names: Mapping, made: Optional[Mapping] = None):
        self.names = dict(names)
        self.made = dict(made or {})
        self.kinds = frozenset(self.names)

    def admit(self, plan, state, kind, rnd, data):
        what = self.names[kind](data)
        if what in state.seen:
            return f"a second {what}"
        if state.last_round > 0:
            return f"a {what} after the rounds began"
        return None

    def releases(self, plan, kind, rnd, data):
        return {k: (n, None) for k, n in self.made.get(kind, {}).items()}

    def commit(self, plan, state, kind, rnd, data):
        state.seen.add(self.names[kind](data))


def centre_name(data: bytes) -> str:
    """How refusals name a centre broadcast: the full matrix's and the variances' are two requests."""
    return "centre broadcast (full)" if CentreBroadcast.decode(data).full else "centre broadcast"


#: The column-statistics exchange before the rounds (:mod:`bnsl_cli.federated.standardize`): the
#: statistics request, the centre broadcast (the variances about the pooled mean) and the
#: standardisation broadcast, once each.
STATS_EXCHANGE = OnceBeforeRounds(
    {
        MessageKind.STATS_REQUEST: lambda data: "column-statistics request",
        MessageKind.CENTRE: centre_name,
        MessageKind.STANDARDIZE: lambda data: "standardisation broadcast",
    },
    made={MessageKind.STANDARDIZE: {ReleaseKind.MOMENT_MATRIX: 1}},
)


class PolishRequest(Step):
    """The polish's second-moment request (:mod:`bnsl_cli.federated.polish`): once, right after a
    consensus round, only when the plan polishes; a private site makes one polish release."""

    kinds = frozenset({MessageKind.GRAM_REQUEST})

    def admit(self, plan, state, kind, rnd, data):
        if state.polished:
            return "a second polish request"
        if not plan.polish:
            return "a polish request in a plan without the polish"
        if state.last_round == 0 or rnd != state.last_round + 1:
            return f"a polish request numbered {rnd} after round {state.last_round}"
        return None

    def releases(self, plan, kind, rnd, data):
        return {ReleaseKind.POLISH: (1, None)}

    def commit(self, plan, state, kind, rnd, data):
        state.polished = True


POLISH_REQUEST = PolishRequest()


def steps_by_kind(steps) -> dict:
    """``{message kind: step}`` of a method's steps (a kind handled twice is a declaration error)."""
    out: dict = {}
    for step in steps:
        for k in step.kinds:
            if k in out:
                raise ValueError(f"message kind {k} is handled by two steps of one sequence")
            out[k] = step
    return out


# -- a message's contents, checked before any row is touched (docs/privacy.md) ----------------------


def refuse_unsafe(who: str, why: Optional[str]) -> None:
    """Refuse a message whose contents failed a check made on the message alone (``why``; ``None``:
    nothing to refuse): the refusal is the same on every data set."""
    if why is not None:
        raise UnsafeMessageError(f"{who} refused {why}")


def stretch_problem(what: str, centre, v_hat, mean, sd) -> Optional[str]:
    """Why ``(x − μ)/σ`` of rows clamped about the released ``centre``, ``v_hat`` could leave the finite
    range for a broadcast ``mean``, ``sd`` (:func:`~bnsl_cli.privacy.bounding.standardised_bound`), or
    ``None``; ``what`` names the broadcast."""
    b = standardised_bound(centre, v_hat, mean, sd)
    if b <= STANDARDISED_MAX:
        return None
    return f"a {what} that would stretch its clamped rows to {b:.3g} (at most 2^400 is accepted)"

"""The ADMM methods' consensus rounds as a site answers them (:mod:`bnsl_cli.federated.site_sequence`):
rounds numbered 1, 2, 3, … with no gap, replay or reordering, at most the plan's rounds, none after
the polish request or the stop broadcast; a private fed-sparse round makes the plan's DP-PGCD steps
(one selection and one update each)."""

from __future__ import annotations

from bnsl_cli.federated.messages import MessageKind, is_stop
from bnsl_cli.federated.site_sequence import Step
from bnsl_cli.privacy.releases import ReleaseKind

__all__ = ["ConsensusRounds", "CONSENSUS_ROUNDS", "next_penalty"]


def next_penalty(value: float, growth: float, cap: float) -> float:
    """A penalty (ρ₁, ρ₂) after a round: ``min(value·growth, cap)`` — the coordinator's schedule, which a
    participant holds every broadcast's ρ₂ to (:func:`~bnsl_cli.federated.methods.admm.site.consensus_problem`)."""
    return min(value * growth, cap)


class ConsensusRounds(Step):
    """The consensus broadcasts, the stop broadcast among them."""

    kinds = frozenset({MessageKind.BROADCAST})

    def admit(self, plan, state, kind, rnd, data):
        stop = is_stop(data)
        if rnd != state.last_round + 1:
            return (
                f"a {'stop broadcast' if stop else 'round'} numbered {rnd} after round {state.last_round} (rounds "
                "must follow one another: a replayed, skipped or reordered round)"
            )
        if stop:
            state.stopped = True
            return None
        if state.polished:
            return f"round {rnd} after the polish request"
        if rnd > plan.rounds:
            return f"round {rnd}, beyond the plan's {plan.rounds} rounds"
        return None

    def releases(self, plan, kind, rnd, data):
        if is_stop(data):
            return {}
        return {ReleaseKind.SELECTION: (int(plan.steps), None), ReleaseKind.UPDATE: (int(plan.steps), None)}

    def commit(self, plan, state, kind, rnd, data):
        if not is_stop(data):
            state.last_round = rnd


CONSENSUS_ROUNDS = ConsensusRounds()

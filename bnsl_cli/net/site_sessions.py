"""A site's bootstrap sessions (``bnsl serve --bootstrap B`` without ``--dp``): B sessions of the
protocol on rows the site resamples, then the run itself on its rows as they are.

Why the coordinator never learns the resampling weights. Many replies are sums over the rows,
``S = Σ_i f(x_i)`` (the column statistics every non-private method sends first, fed-moments' moments,
fed-suffstats' shares). A replicate replaces them by ``S_b = Σ_i w_bi f(x_i)`` with ``w_b`` the
multinomial counts of the resample. If the coordinator knows the ``w_b`` (it once chose the stream),
``n`` sessions with independent weight vectors are a linear system with a unique solution: every
``f(x_i)``, i.e. every row (measured: 3 sites × 30 rows, d = 4, rows solved to 1e-14 from 36 sessions,
and up to each site's mean under a secure sum). So each site draws its streams from fresh entropy
that it never sends (:class:`Resampling`); byte identity with ``bnsl learn --bootstrap --seed N`` is a
site's own opt-in for testing (``bnsl join --resample-seed N``), which the coordinator cannot ask for.

Why the number of sessions is capped even so (docs/federation.md derives it in full):

* **Unboundedly many sessions reveal the rows whatever the secrecy.** The ``S_b`` are independent
  draws of ``Σ_i w_i f(x_i)`` with ``w ~ Multinomial(n, 1/n)``, whose moment generating function is
  ``(n⁻¹ Σ_i e^{t·f(x_i)})^n``: it determines the empirical distribution of the ``f(x_i)``, i.e. the
  multiset of rows, and B draws estimate it ever better (its covariance, ``Σ_i f_i f_iᵀ − n f̄ f̄ᵀ``,
  already gives the rows' higher moments).
* **A count bound.** With the weights secret, each session adds at most ``m`` equations (the length
  of a sum-shaped reply; the largest is fed-moments' ``m = d + d(d+1)/2``) and the rows have ``n·d``
  unknowns. While ``(B + 1)·m < n·d`` the replies of all sessions are fewer equations than the rows'
  unknowns, so for every choice of weights a continuum of row sets gives the same replies: no
  coordinator, however it computes, can solve for the rows from them. A site refuses a bootstrap
  whose sessions reach :func:`sessions_bound` (``⌈n·d/m⌉ − 1``) or its own cap (``--max-sessions``,
  default :data:`DEFAULT_MAX_SESSIONS`), before any session is answered.

The bound is about the sum-shaped replies; the ADMM methods' later replies are iterates of a local
optimisation, which the bound does not cover. The only guarantee that holds against any computation
on any number of replies is differential privacy: ``serve --dp --bootstrap`` resamples the releases at
the coordinator instead (post-processing, no extra session).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Optional

import numpy as np

from bnsl_cli.confidence import resample_rows
from bnsl_cli.errors import GuardRefusedError, RefusedError
from bnsl_cli.plan.run_plan import RunPlan

__all__ = [
    "DEFAULT_MAX_SESSIONS", "Resampling", "BootstrapSessions", "sessions_bound", "session_limit",
    "check_session_caps",
]

#: The sessions a site answers in one ``bnsl join`` when it states no ``--max-sessions``: a bootstrap
#: of up to 20 replicates and the run itself.
DEFAULT_MAX_SESSIONS = 21

#: plan fields a bootstrap's sessions may differ in: the replicate, and the per-round records kept
_SESSION_FIELDS = ("replicate", "trace")


def sum_reply_length(d: int) -> int:
    """The longest sum-shaped reply over d columns (fed-moments' first and second moments)."""
    return int(d) + int(d) * (int(d) + 1) // 2


def sessions_bound(rows: int, d: int) -> int:
    """The most sessions whose sum-shaped replies stay fewer equations than the rows' unknowns:
    the largest ``s`` with ``s · m < rows · d`` (module docstring), at least 1 (the run itself)."""
    m = sum_reply_length(d)
    return max(1, (int(rows) * int(d) - 1) // m)


def session_limit(rows: int, d: int, max_sessions: int) -> int:
    """The sessions a site with ``rows`` rows answers for a plan over ``d`` columns: its own cap and
    the count bound, whichever is smaller."""
    return min(int(max_sessions), sessions_bound(rows, d))


def _bootstrap_sessions(plan: RunPlan) -> int:
    """The sessions ``plan`` makes a site answer: B replicates and the run (1 without a row bootstrap)."""
    return int(plan.bootstrap) + 1 if (plan.bootstrap and not plan.private) else 1


@dataclass(frozen=True)
class Resampling:
    """Where a site's resampling streams come from: ``entropy`` (secret: never sent, never in a
    transcript) and whether it is the site's own ``--resample-seed`` (tests) rather than fresh."""

    entropy: int
    seeded: bool = False

    @classmethod
    def fresh(cls) -> "Resampling":
        return cls(secrets.randbits(128), False)

    @classmethod
    def of(cls, seed: Optional[int]) -> "Resampling":
        return cls.fresh() if seed is None else cls(int(seed), True)

    def describe(self) -> str:
        return ("this site's --resample-seed (tests: anyone who knows it knows the weights)" if self.seeded
                else "fresh entropy drawn at this site, never sent")


class BootstrapSessions:
    """One site's sessions with a coordinator in one ``bnsl join``: :meth:`admit` checks each plan
    before the site's rows are touched (order, sameness, the caps), :meth:`rows` resamples them for a
    replicate, :meth:`more` says whether another session is due."""

    def __init__(self, max_sessions: int, resampling: Optional[Resampling] = None):
        if not (isinstance(max_sessions, int) and max_sessions >= 1):
            raise ValueError(f"max_sessions must be at least 1, got {max_sessions!r}")
        self.max_sessions = int(max_sessions)
        self.resampling = resampling if resampling is not None else Resampling.fresh()
        self.answered = 0  # plans admitted so far
        self._first: Optional[dict] = None
        self._total = 1
        self._next: Optional[int] = None  # the replicate due next (None: the run itself)

    def limit(self, rows: int, d: int) -> int:
        return session_limit(rows, d, self.max_sessions)

    def admit(self, plan: RunPlan, rows: int) -> None:
        """Refuse ``plan`` unless it is the session due now (called before the rows are touched)."""
        if self.answered == 0:
            total = _bootstrap_sessions(plan)
            if plan.replicate is not None and (plan.private or not plan.bootstrap):
                raise RefusedError(
                    "the plan resamples this site's rows (a bootstrap replicate) in a private run: every replicate "
                    "would release them again; refused" if plan.private else
                    "the coordinator's bootstrap replicate is malformed (a replicate without a bootstrap)"
                )
            if total > 1:
                want = self.limit(rows, len(plan.names))
                if total > want:
                    raise RefusedError(
                        f"the plan asks this site for {total} sessions (a bootstrap of {total - 1} replicates and the "
                        f"run); it answers at most {want} ({self._why(rows, len(plan.names))}); refused before any "
                        "session"
                    )
                if plan.replicate != 0:
                    got = "the run itself" if plan.replicate is None else f"replicate {plan.replicate + 1}"
                    raise GuardRefusedError(f"the coordinator began a bootstrap with {got}, not replicate 1")
            self._first = _same_part(plan)
            self._total = total
            self._next = 1 if total > 2 else None
            self.answered = 1
            return
        if not self.more():
            raise GuardRefusedError("the coordinator asks for a session after the last one this site agreed to")
        if plan.replicate != self._next:
            want = "the run itself" if self._next is None else f"bootstrap replicate {self._next + 1}"
            raise GuardRefusedError(f"the coordinator sent a plan out of the bootstrap's order ({want} was due)")
        if _same_part(plan) != self._first:
            raise GuardRefusedError("the coordinator changed the plan between the bootstrap's sessions")
        self.answered += 1
        if self._next is not None:
            self._next = self._next + 1 if self._next + 1 < self._total - 1 else None

    def _why(self, rows: int, d: int) -> str:
        bound = sessions_bound(rows, d)
        if self.max_sessions <= bound:
            return f"its --max-sessions {self.max_sessions}"
        return (f"with {rows} rows and {d} columns, more sessions' sums would outnumber its rows' unknowns "
                f"(at most {bound}; docs/federation.md)")

    @property
    def total(self) -> int:
        """The sessions agreed to with the first plan (1 until then, and for a run without a row bootstrap)."""
        return self._total

    def more(self) -> bool:
        """Whether a further session is due (after at least one was admitted)."""
        return 0 < self.answered < self._total

    def rows(self, X: np.ndarray, plan: RunPlan, index: int) -> np.ndarray:
        """``X`` resampled for the plan's replicate from this site's own stream (``X`` for the run)."""
        if plan.replicate is None:
            return X
        return resample_rows(X, self.resampling.entropy, plan.replicate, index)

    def record(self, plan: RunPlan) -> dict:
        """The transcript's part of a plan record: which session this was, of how many, the cap and
        the resampling source (never its entropy)."""
        if self._total <= 1:
            return {}
        return {"session": self.answered, "sessions": self._total, "max_sessions": self.max_sessions,
                "replicate": None if plan.replicate is None else plan.replicate + 1,
                "bootstrap": int(plan.bootstrap), "resampling": self.resampling.describe()}


def _same_part(plan: RunPlan) -> dict:
    d = plan.to_dict()
    for key in _SESSION_FIELDS:
        d.pop(key, None)
    return d


def check_session_caps(plan: RunPlan, hellos) -> None:
    """The coordinator's check before the first session: a plan that asks some site for more sessions
    than its HELLO's limits allow is refused here, naming the site, before any site answers. A HELLO
    without limits (a library site) is left to its own check, as in ``serve``'s consent check."""
    total = _bootstrap_sessions(plan)
    if total <= 1:
        return
    for h in hellos:
        limits = h.get("limits")
        if not isinstance(limits, dict):  # a library site states no limits: it checks the plan itself
            continue
        cap = limits.get("max_sessions")
        if not isinstance(cap, int):
            raise RefusedError(
                f"site {h.get('site')!r} states no session cap (an older bnsl join?): it cannot take part in a "
                "networked bootstrap; drop --bootstrap or update the site"
            )
        rows = int(h.get("rows", 0))
        want = session_limit(rows, len(plan.names), cap)
        if total > want:
            raise RefusedError(
                f"--bootstrap {total - 1} needs {total} sessions, but site {h.get('site')!r} answers at most {want} "
                f"(its --max-sessions {cap}; {rows} rows over {len(plan.names)} columns allow "
                f"{sessions_bound(rows, len(plan.names))}): use --bootstrap {max(want - 1, 0)} or fewer"
            )

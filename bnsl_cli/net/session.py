"""The coordinator's session with its sites, up to the plan they are sent: one library function that
``bnsl serve`` (gRPC) and the Flower ServerApp both call, so that the checks made before any site is
asked — the plan from the HELLOs, the split-noise consent, every site's session cap, the secure sum's
keys — live in one place and cannot drift between the two transports.

:func:`session_plan` takes the resolved run options (``LearnConfig``), the sites' HELLOs and the
transport's choices; it returns the plan and the secure-sum part of the PLAN frame, or raises a
:class:`~bnsl_cli.errors.BnslError` naming what is wrong and, for a site, which one.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass, replace
from typing import Optional

from bnsl_cli.column_kinds import combine_site_levels, site_specific_levels
from bnsl_cli.errors import FederationError, IdentifierColumnWarning, OptionError, RefusedError
from bnsl_cli.federated.method_spec import Rounds
from bnsl_cli.federated.methods.registry import default_method, methods_where
from bnsl_cli.io.kinds import MAX_LEVELS
from bnsl_cli.io.table import split_names
from bnsl_cli.net.site_sessions import check_session_caps
from bnsl_cli.plan.run_plan import RunPlan, check_verdict
from bnsl_cli.plan.shapes import ParticipantShape, Shapes
from bnsl_cli.privacy.split_noise import split_noise_plan, split_of

__all__ = ["SessionChoices", "check_choices", "session_plan", "hello_levels", "plan_columns", "check_consent", "plan_summary",
           "ExchangeProgress"]


@dataclass(frozen=True)
class SessionChoices:
    """What the transport's options decided: the secure sum (and its fixed-point bits), split noise
    (``serve --split-noise``), and the columns chosen by name (``--columns``/``--drop``)."""

    #: ``None``: not decided yet (the Flower app decides it once it knows the sites' number)
    secure_sum: Optional[bool] = False
    scale_bits: int = 32
    split_noise: bool = False
    columns: Optional[str] = None
    drop: Optional[str] = None
    #: whether the run's method was given: when not, sites that declare categorical columns get the
    #: registry's default for them (as ``bnsl learn`` chooses it)
    method_given: bool = True
    #: the most levels a categorical column may have over all sites (``serve --max-levels``)
    max_levels: int = MAX_LEVELS


def check_choices(cfg, choices: SessionChoices) -> None:
    """The checks that need no site: a method that can run over the network, split noise only under a
    secure sum and for a method with a release that can be split, no ``--personal`` under a secure sum.
    Called by each transport before it waits for the sites, and again by :func:`session_plan`."""
    spec = cfg.spec
    if not spec.federated or spec.pooled:
        raise OptionError(f"--method {cfg.method} runs on pooled or local rows only; it cannot run over the network")
    if choices.split_noise and choices.secure_sum is False:
        raise OptionError("--split-noise needs --secure-sum (split noise is private only under a secure sum)")
    if choices.split_noise and (cfg.dp is None or not spec.split_noise):
        able = " or ".join(methods_where(lambda s: s.split_noise))
        raise OptionError(f"--split-noise: only --method {able} --dp has a release that can be split")
    if choices.secure_sum and cfg.personal:
        raise OptionError(
            "--personal asks every site for its own B_p at the end, which --secure-sum hides from the coordinator; "
            "drop one of the two"
        )


def session_plan(cfg, hellos, choices: SessionChoices) -> tuple[RunPlan, Optional[dict]]:
    """The plan the sites are sent, and the PLAN frame's secure-sum part (``None`` without one),
    after every check the coordinator makes before asking any site."""
    check_choices(cfg, choices)
    names = plan_columns(hellos[0]["columns"], choices.columns, choices.drop)
    sites = [(str(h["site"]), hello_levels(h)) for h in hellos]
    kinds = combine_site_levels(names, sites, choices.max_levels)
    if kinds is not None:
        for v, k in site_specific_levels(kinds, sites):
            warnings.warn(
                f"column {v!r} has no level in common between the sites (each of its {k} levels occurs at one site "
                f"only): it names the site rather than measuring a variable; pass --drop {v} to leave it out",
                IdentifierColumnWarning, stacklevel=2,
            )
        if not choices.method_given:  # the default for categorical columns, as learn chooses it
            cfg = replace(cfg, method=default_method(cfg.dp is not None, categorical=True))
    shapes = Shapes(
        names=names if kinds is None else kinds.expanded_names(),
        participants=tuple(ParticipantShape(str(h["site"]), int(h["rows"])) for h in hellos),
        columns=kinds,
    )
    plan = RunPlan.resolve(cfg, shapes)
    if kinds is not None and not all(_allows_tables(h) for h in hellos):
        plan = replace(plan, tables=False)  # the first phase only: a site did not allow the finer release
    if choices.split_noise:
        plan = split_noise_plan(plan)
    check_verdict(plan)  # a plan expected to be lost in its noise is never sent
    check_consent(plan, hellos)
    check_session_caps(plan, hellos)  # every site's session cap, before any session is answered
    spec = None
    if choices.secure_sum:
        keys = [h.get("x25519") for h in hellos]
        if not all(isinstance(k, str) and len(k) == 64 for k in keys):
            raise FederationError("--secure-sum: a site sent no X25519 key in its HELLO (older bnsl?)")
        spec = {"public_keys": keys, "run_id": os.urandom(16).hex(), "scale_bits": int(choices.scale_bits)}
    return plan, spec


#: the longest level text a HELLO may declare (a level is a category's name, not a free text)
MAX_LEVEL_CHARS = 200


def hello_levels(hello: dict) -> dict:
    """The categorical columns a site's HELLO declares with its levels (``{}`` when none), checked: a
    mapping of its own column names to lists of distinct level texts of at most :data:`MAX_LEVEL_CHARS`
    characters. A :class:`~bnsl_cli.net.common.FederationError` naming the site otherwise."""
    levels = hello.get("levels")
    if levels is None:
        return {}
    site, columns = hello.get("site"), hello.get("columns") or ()
    ok = isinstance(levels, dict) and all(
        isinstance(k, str) and k in columns and isinstance(v, list) and len(set(v)) == len(v)
        and all(isinstance(x, str) and len(x) <= MAX_LEVEL_CHARS for x in v)
        for k, v in levels.items())
    if not ok:
        raise FederationError(f"site {site!r} declared malformed categorical levels in its HELLO")
    return levels


def _allows_tables(hello: dict) -> bool:
    """Whether a site's HELLO allows the second phase's contingency tables (``bnsl join --allow-tables``); a
    HELLO without limits (a library site) answers by its own guard."""
    limits = hello.get("limits")
    return not isinstance(limits, dict) or bool(limits.get("allow_tables"))


def plan_columns(names, columns: Optional[str] = None, drop: Optional[str] = None) -> tuple:
    """The plan's column names: the sites' ``names`` chosen by ``--columns`` (in its order) and
    ``--drop`` (comma-separated). Raises :class:`~bnsl_cli.errors.OptionError` for a name the sites
    do not hold or fewer than two columns left."""
    names = list(names)
    chosen, gone = split_names(columns), split_names(drop) or ()
    for opt, given in (("--columns", chosen or ()), ("--drop", gone)):
        for n in given:
            if n not in names:
                raise OptionError(f"{opt} names {n!r}, which the sites do not hold (their columns: {', '.join(names[:8])})")
    out = [n for n in (chosen if chosen is not None else names) if n not in gone]
    if len(out) < 2:
        raise OptionError("--columns/--drop leave fewer than two columns; a graph needs two variables")
    return tuple(out)


def check_consent(plan, hellos) -> None:
    """Before the plan is sent: a :class:`~bnsl_cli.errors.RefusedError` (exit 5) naming every site
    whose HELLO says it does not accept split noise (``bnsl join`` without ``--accept-split-noise``,
    a Flower node without ``accept-split-noise``) when ``plan`` splits its noise (distributed noise,
    ``--split-noise``), with both ways out. The sites check the plan themselves anyway
    (:func:`~bnsl_cli.net.policy.check_plan`); this tells the coordinator's operator at once, for
    every such site, what to change. A HELLO without limits (a library site) is left to its own check."""
    if split_of(plan) <= 1:
        return
    no = [f"site {k + 1} ({h.get('site')})" for k, h in enumerate(hellos)
          if isinstance(h.get("limits"), dict) and not h["limits"].get("accept_split_noise")]
    if not no:
        return
    distributed = plan.spec.distributed_noise
    other = "serve --no-secure-sum for per-site noise (√P times the noise)" if distributed else "drop serve --split-noise"
    raise RefusedError(
        f"{', '.join(no)} did not accept {'distributed' if distributed else 'split'} noise (each site adds a share of "
        f"the noise; its guarantee then rests on the secure sum): every site joins with --accept-split-noise, or {other}"
    )


def plan_summary(plan) -> str:
    """What the sites accepted, for the coordinator's log: the method and what its plan runs (ADMM rounds,
    or what the method declares, ``MethodSpec.plan_exchanges``)."""
    spec = plan.spec
    if spec.rounds is Rounds.ADMM:
        return f"{plan.method}, at most {plan.rounds} rounds"
    if spec.plan_exchanges is not None:
        return f"{plan.method}, {spec.plan_exchanges(plan)}"
    return f"{plan.method}, a fixed sequence of exchanges"


class ExchangeProgress:
    """A ``progress(info)`` callback for a coordinator's log: one line per exchange of the run (the
    first, every ``every``-th and any that took more than ``slow_s``), with its time."""

    def __init__(self, log, every: int = 10, slow_s: float = 30.0):
        import time

        self.log, self.every, self.slow_s = log, int(every), float(slow_s)
        self._clock = time.monotonic
        self._last = self._clock()

    def __call__(self, info: dict) -> None:
        now = self._clock()
        took, self._last = now - self._last, now
        r = int(info.get("round", 0))
        if r == 1 or r % self.every == 0 or took > self.slow_s:
            extra = f", {info['edges']} edges" if "edges" in info else ""
            self.log(f"exchange {r}: {took:.1f} s{extra}")



#: the report's ``confidence.source`` of a networked ``--bootstrap`` without --dp
NETWORK_BOOTSTRAP_SOURCE = (
    "each site resampled its own rows (with replacement, as many as it has) for every replicate, from a stream "
    "the coordinator never learns, one session of the protocol per replicate before the run itself"
)


def coordinate(cfg, choices: SessionChoices, open_fleet, *, join_timeout: float, network_of, finish,
               log=lambda message: None, progress=None, on_listening=None):
    """The coordinator's sessions with its sites, start to finish (``bnsl serve``): without --dp and with
    ``--bootstrap B``, ``B`` replicate sessions (each site resamples its own rows from a stream it never
    sends; the sites rejoin for each and must be those of the first) and then the run itself; otherwise
    the run alone. ``open_fleet()`` listens for one session's sites (the later sessions on the first
    one's address), ``network_of(fleet, spec)`` is the report's network entry,
    ``finish(result, plan)`` writes the outputs while the sites are still connected (an error there
    stops them as any other fault does), ``on_listening(fleet)`` is called once, when the first session
    listens. Returns the run's :class:`~bnsl_cli.run.LearnResult`. Every fault stops the sites with
    its public reason and closes the fleet before it propagates."""
    import time
    import warnings
    from dataclasses import replace

    from bnsl_cli.confidence import EdgeCounts, Replicates
    from bnsl_cli.net.fleet import stopped_because
    from bnsl_cli.run import run

    boot = int(cfg.bootstrap) if cfg.dp is None else 0
    plan = started = None  # the first session's plan; report.json's timing.wall_s covers every session
    graphs: list = []
    for session in range(boot + 1):
        last = session == boot
        fleet = open_fleet()
        ok = False
        try:
            if session == 0 and on_listening is not None:
                on_listening(fleet)
            hellos = fleet.gather(join_timeout)
            this, spec = session_plan(cfg, hellos, choices)
            if plan is None:
                plan, started = this, time.perf_counter()
            elif this != plan:
                raise FederationError(
                    f"the sites that rejoined for bootstrap session {session + 1} are not those of the first session "
                    "(names, rows or columns differ)"
                )
            if not last:
                this = replace(plan, replicate=session, trace=False)  # each site resamples from its own stream
            body = this.to_dict()
            fleet.start(lambda i: {"plan": body, "index": i, "secure_sum": spec})
            if not last:
                with warnings.catch_warnings():  # a replicate's own warnings: the run's are reported once
                    warnings.simplefilter("ignore")
                    graphs.append(run(this, fleet).W)
                log(f"bootstrap replicate {session + 1}/{boot}: {int((graphs[-1] != 0).sum())} edges")
                ok = True
                continue
            log(f"all {len(hellos)} sites accepted the plan ({plan_summary(plan)})")
            replicates = Replicates(EdgeCounts.of(graphs), boot, (), NETWORK_BOOTSTRAP_SOURCE) if boot else None
            result = run(plan, fleet, progress, network=network_of(fleet, spec), replicates=replicates,
                         started=started if boot else None)
            finish(result, plan)
            ok = True
        except (KeyboardInterrupt, Exception) as exc:  # Ctrl-C, SIGTERM, a fault, a bug
            fleet.abort(stopped_because(exc))  # sites a fault already stopped are not told twice
            raise
        finally:
            fleet.close(ok=ok)
    return result

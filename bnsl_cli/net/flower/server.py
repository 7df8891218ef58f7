"""The ServerApp's run: ``bnsl serve`` over a Flower federation.

The run configuration (``[tool.flwr.app.config]`` of the app, ``flwr run --run-config``) holds:

============== ======== ==========================================================================
key            default  meaning
============== ======== ==========================================================================
options        ``""``   ``bnsl learn``'s run options as on its command line, e.g.
                        ``"--dp --epsilon 5 --noise per-site --seed 1"`` (:func:`learn_config`)
participants   ``0``    sites to wait for (``0``: every SuperNode connected at the start)
out            ``""``   the run folder to write (on the ServerApp's machine; ``""``: none)
force          false    replace a folder that is not a bnsl run folder
secure-sum     ``auto`` ``auto`` | ``on`` | ``off``: ``bnsl serve``'s ``--secure-sum`` default and flags
secure-sum-bits ``32``  ``--secure-sum-bits``
split-noise    false    ``--split-noise`` (fed-moments)
timeout        ``300``  seconds for each batch of replies
join-timeout   ``120``  seconds to wait for the SuperNodes
============== ======== ==========================================================================

What it does is ``bnsl serve``'s: the sites' HELLOs (through :class:`~.fleet.FlowerFleet`), the plan
resolved from their public shapes (:meth:`RunPlan.resolve`), the secure sum's default from the same
rule (``bnsl learn``'s layout: on for a private run whose method distributes its noise over two or
more sites), the PLAN to every site, ``run(plan, fleet)``, the run folder. Nothing here reads a row.
The sites check the plan against their own node configuration (:mod:`.site`).
"""

from __future__ import annotations

import shlex
import typing
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path

from bnsl_cli.errors import OptionError
from bnsl_cli.net import layout
from bnsl_cli.net.session import ExchangeProgress, SessionChoices, check_choices, plan_summary, session_plan

__all__ = ["NOT_ON_FLOWER", "RUN_OPTION_FIELDS", "RunConfig", "coordinate", "learn_config"]

#: LearnConfig fields that are not ``bnsl learn`` run options on a networked run (set by the
#: pipeline, or not offered by ``bnsl serve``)
_NOT_OPTIONS = frozenset({"workers", "dp", "knowledge", "rho_max", "tol", "h_tol", "gap_tol", "server_ftol"})
#: ``bnsl serve`` run options this app does not offer yet (refused with a reason, never ignored):
#: edge confidence repeats the run (``serve --bootstrap``'s sessions)
NOT_ON_FLOWER = frozenset({"bootstrap", "min_strength"})
#: flags whose name is not the field's
_ALIASES = {"--lambda": "lam", "-m": "method"}
#: the prior-knowledge options (repeatable) and the KnowledgeSource.from_options argument each fills
_KNOWLEDGE = {"--require": "require", "--forbid": "forbid", "--knowledge": "files",
              "--require-file": "require_files", "--forbid-file": "forbid_files"}


def _option_fields() -> dict:
    from bnsl_cli.plan.options import DPConfig, LearnConfig

    out = {}
    for cls in (LearnConfig, DPConfig):
        hints = typing.get_type_hints(cls)
        for f in fields(cls):
            if cls is LearnConfig and f.name in _NOT_OPTIONS:
                continue
            typ = hints[f.name]
            args = [a for a in typing.get_args(typ) if a is not type(None)]
            out[f.name] = (cls, args[0] if args else typ)
    return out


#: ``bnsl learn``'s run options this app takes (``bnsl serve``'s ``RUN_OPTIONS`` but :data:`NOT_ON_FLOWER`;
#: a test keeps them so)
RUN_OPTION_FIELDS = frozenset(_option_fields()) - NOT_ON_FLOWER | {"dp"} | {f.lstrip("-").replace("-", "_") for f in _KNOWLEDGE} - {"knowledge"} | {"knowledge_file"}


def learn_config(options: str):
    """A checked :class:`~bnsl_cli.plan.options.LearnConfig` from ``bnsl learn``'s run options as one
    string (``--name value``, ``--flag``/``--no-flag``, ``--lambda``, ``-m``, the prior-knowledge
    options, repeatable), with ``bnsl serve``'s rules: the registry's default method (the ``--dp``
    default under ``--dp``), ``--dp`` needs ``--epsilon``, ``--epsilon`` needs ``--dp``. Raises
    :class:`~bnsl_cli.errors.OptionError`."""
    from bnsl_cli.federated.methods.registry import default_method
    from bnsl_cli.io.graph_text_formats import graph_arcs
    from bnsl_cli.knowledge import KnowledgeSource
    from bnsl_cli.plan.options import DPConfig, LearnConfig

    known = _option_fields()
    try:
        tokens = shlex.split(options or "")
    except ValueError as exc:
        raise OptionError(f"run config options: {exc}") from None
    given: dict = {}
    knowledge: dict = {v: [] for v in _KNOWLEDGE.values()}
    dp = False
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        i += 1
        flag, eq, inline = tok.partition("=")
        if not flag.startswith("-"):
            raise OptionError(f"run config options: unexpected {tok!r} (shards are the sites' own; give options only)")

        def value(flag=flag, eq=eq, inline=inline):
            nonlocal i
            if eq:
                return inline
            if i >= len(tokens):
                raise OptionError(f"run config options: {flag} needs a value")
            i += 1
            return tokens[i - 1]

        if flag == "--dp":
            dp = True
            continue
        if flag in _KNOWLEDGE:
            knowledge[_KNOWLEDGE[flag]].append(value() if _KNOWLEDGE[flag] in ("require", "forbid") else Path(value()))
            continue
        name = _ALIASES.get(flag) or flag.lstrip("-").replace("-", "_")
        negated = name.startswith("no_") and known.get(name[3:], (None, None))[1] is bool
        if negated:
            name = name[3:]
        if name not in known:
            raise OptionError(f"run config options: no such option {flag} (bnsl learn's run options only; "
                              "shards, columns and outputs are not run options here)")
        typ = known[name][1]
        if typ is bool:
            if eq:
                raise OptionError(f"run config options: {flag} takes no value")
            given[name] = not negated
            continue
        text = value()
        try:
            given[name] = typ(text) if typ in (int, float) else text
        except ValueError:
            raise OptionError(f"run config options: {flag} {text!r} is not a valid {typ.__name__}") from None
    for name in NOT_ON_FLOWER & set(given):
        raise OptionError(f"--{name.replace('_', '-')} is not offered by the Flower app (edge confidence repeats the "
                          "run: use bnsl serve/join or bnsl learn)")
    learn_kw = {k: v for k, v in given.items() if known[k][0] is LearnConfig}
    dp_kw = {k: v for k, v in given.items() if known[k][0] is DPConfig}
    if learn_kw.get("method") is None:
        learn_kw["method"] = default_method(dp)
    dpc = None
    if dp:
        if dp_kw.get("epsilon") is None:
            raise OptionError("--dp needs --epsilon (e.g. --epsilon 5)")
        dpc = DPConfig(**dp_kw)
    elif dp_kw.get("epsilon") is not None:
        raise OptionError("--epsilon given without --dp; add --dp for a private run")
    elif dp_kw:
        raise OptionError(f"{', '.join('--' + k.replace('_', '-') for k in dp_kw)} given without --dp")
    src = KnowledgeSource.from_options(knowledge["require"], knowledge["forbid"], knowledge["files"],
                                       knowledge["require_files"], knowledge["forbid_files"], graph_arcs=graph_arcs)
    cfg = LearnConfig(**learn_kw, dp=dpc, knowledge=src, workers=1)
    cfg.check()
    return cfg


@dataclass(frozen=True)
class RunConfig:
    """The ServerApp's run configuration (see the module docstring)."""

    options: str = ""
    participants: int = 0
    out: str = ""
    force: bool = False
    secure_sum: str = "auto"
    secure_sum_bits: int = 32
    split_noise: bool = False
    timeout: float = 300.0
    join_timeout: float = 120.0

    @classmethod
    def from_run_config(cls, run_config) -> RunConfig:
        kw = {}
        hints = typing.get_type_hints(cls)
        for key, value in dict(run_config or {}).items():
            name = key.replace("-", "_")
            if name not in hints:
                continue  # another app's keys
            typ = hints[name]
            if typ is float and isinstance(value, int) and not isinstance(value, bool):
                value = float(value)
            if not isinstance(value, typ) or (typ is not bool and isinstance(value, bool)):
                raise OptionError(f"run config {key} = {value!r}: expected a {typ.__name__}")
            kw[name] = value
        rc = cls(**kw)
        if rc.secure_sum not in ("auto", "on", "off"):
            raise OptionError(f"run config secure-sum = {rc.secure_sum!r}: auto, on or off")
        if not 8 <= rc.secure_sum_bits <= 48:
            raise OptionError("run config secure-sum-bits: 8 to 48")
        if rc.participants < 0 or not rc.timeout > 0 or not rc.join_timeout > 0:
            raise OptionError("run config: participants ≥ 0, timeout > 0 and join-timeout > 0")
        return rc


def resolve_secure_sum(cfg, participants: int, choice: str) -> tuple:
    """Whether the run uses the secure sum and a warning (``None``: none): ``bnsl serve``'s rule
    (:func:`bnsl_cli.net.layout.resolve_secure_sum`), ``choice`` being ``auto`` (neither flag),
    ``on`` or ``off``."""
    return layout.resolve_secure_sum(cfg, cfg.spec, participants,
                                     {"auto": None, "on": True, "off": False}[choice],
                                     off="secure-sum = off", keep="use secure-sum = auto or on")


def _method_given(options: str) -> bool:
    """Whether the run config's options name the method (``-m``/``--method``): when not, sites with
    categorical columns get the registry's default for them, as with ``bnsl serve``."""
    tokens = shlex.split(options or "")
    return any(t in ("-m", "--method") or t.startswith("--method=") for t in tokens)


def _check_layout(cfg, rc: RunConfig) -> None:
    """The session's checks that need no site (:func:`bnsl_cli.net.session.check_choices`); with
    ``secure-sum = auto`` the secure sum is decided with the sites' number, and what depends on it is
    checked then (:func:`bnsl_cli.net.session.session_plan`)."""
    check_choices(cfg, SessionChoices(secure_sum={"on": True, "off": False}.get(rc.secure_sum),
                                      split_noise=bool(rc.split_noise)))


def _prepare_out(rc: RunConfig, personal_sites: int):
    """The run folder's pre-flight, as ``bnsl learn --out``'s (:func:`bnsl_cli.io.run_folder.prepare_run_folder`)."""
    if not rc.out:
        return None
    from bnsl_cli.io.run_folder import prepare_run_folder

    return prepare_run_folder(Path(rc.out), [], personal_sites, personal_sites > 0, rc.force, option="out")


def coordinate(grid, run_config, *, log: Callable[[str], None] | None = None, fleet_hook=None):
    """Run ``run_config`` (Flower's ``context.run_config``) through ``grid``: returns the
    :class:`~bnsl_cli.run.LearnResult` (and writes the run folder when ``out`` is set). Any failure
    raises (a :class:`~bnsl_cli.errors.BnslError` saying what happened); every site is told ABORT.
    ``fleet_hook(fleet)``: called with the fleet before the sites are asked (tests, measurements)."""
    from bnsl_cli.net.flower.fleet import FlowerFleet
    from bnsl_cli.report import NetworkRecord, SiteRecord
    from bnsl_cli.run import run

    log = log or (lambda _m: None)
    rc = RunConfig.from_run_config(run_config)
    cfg = learn_config(rc.options)
    _check_layout(cfg, rc)  # the checks that need no site, before waiting for them
    fleet = FlowerFleet(grid, rc.participants or None, timeout=rc.timeout, log=log, scale_bits=rc.secure_sum_bits)
    if fleet_hook is not None:
        fleet_hook(fleet)
    od = None
    ok = False
    try:
        hellos = fleet.gather(rc.join_timeout)
        P = len(hellos)
        secure, warning = resolve_secure_sum(cfg, P, rc.secure_sum)
        if warning:
            log(f"warning: {warning}")
        fleet.secure_sum = secure
        # the one coordinator session (bnsl serve's too): plan, split-noise consent, session caps, keys
        plan, spec = session_plan(cfg, hellos, SessionChoices(secure_sum=secure, scale_bits=rc.secure_sum_bits,
                                                               split_noise=bool(rc.split_noise),
                                                               method_given=_method_given(rc.options)))
        fleet.plan = plan  # the plan the sites are sent (tests and measurements read it)
        od = _prepare_out(rc, P if plan.personal else 0)
        body = plan.to_dict()
        fleet.start(lambda i: {"plan": body, "index": i, "secure_sum": spec})
        log(f"all {P} sites accepted the plan ({plan_summary(plan)})")
        network = NetworkRecord(
            listen=f"Flower run (SuperLink), run tag {fleet.run_tag}", mutual_tls=False,
            secure_sum_bits=rc.secure_sum_bits if spec is not None else None,
            coordinator_certificate_sha256=None, allow_sites=None,
            sites=tuple(SiteRecord(participant=s.index + 1, site=s.name, peer=s.peer, rows=s.hello["rows"],
                                   identity=None, certificate_sha256=None) for s in fleet.sites),
            # the transport is Flower's: its TLS and node authentication, not bnsl's
            carrier=("Flower (SuperLink ↔ SuperNodes; TLS and node authentication are Flower's)",
                     "Flower node ids (SuperNode authentication is the federation's setting)"),
        )
        result = run(plan, fleet, ExchangeProgress(log), network=network)  # a line per 10 exchanges, with its time
        if od is not None:
            from bnsl_cli.io.run_folder import write_run_folder

            write_run_folder(od, result, plan.method)
        ok = True
        return result
    except (KeyboardInterrupt, Exception) as exc:
        from bnsl_cli.net.fleet import stopped_because

        fleet.abort(stopped_because(exc))
        raise
    finally:
        if od is not None and not ok:
            od.abort()
        fleet.close(ok=ok)

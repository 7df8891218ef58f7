"""Which method-specific options a method takes, and the one check that refuses the others.

Every entry of the registry (:mod:`bnsl_cli.federated.methods.registry`) lists the options of this table it
takes (``MethodSpec.options`` for ``learn``/``serve``, ``MethodSpec.budget_options`` for
``privacy-budget``). An option of the table that a method does not take is an error naming the
option, the method and the methods that take it — never silently ignored. Options every method takes
(the data and output options, ``--seed``, ``--workers``, ``--trace``, prior knowledge, ``--epsilon``,
``--delta``, ``--conversion``, ``--accountant``) are not in the table.

An option counts as given when its value differs from its default (a default given explicitly
changes nothing, so it is accepted). A leaf module: it reads a config's dataclass fields and the
registry's facts, imports neither.
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, fields
from typing import Iterable, Optional

from bnsl_cli.errors import OptionError

__all__ = ["MethodOption", "LEARN_OPTIONS", "BUDGET_OPTIONS", "given_options", "refusal", "check_options"]


@dataclass(frozen=True)
class MethodOption:
    """One method-specific option: the flag the user types and the config field it sets."""

    flag: str
    #: the field of :class:`~bnsl_cli.plan.LearnConfig` (or of its ``dp``, a
    #: :class:`~bnsl_cli.plan.DPConfig`, when ``private``)
    attr: str
    private: bool = False
    #: the flag that turns a default-on option off (``--no-polish``): named in the refusal when given
    off_flag: Optional[str] = None
    #: what else gives what the option asks for, added to the refusal
    hint: Optional[str] = None


def _table(*options: MethodOption) -> dict:
    return {o.flag: o for o in options}


#: ``learn`` / ``serve`` options that only some methods take.
LEARN_OPTIONS = _table(
    MethodOption("--lambda", "lam"),
    MethodOption("--threshold", "threshold"),
    MethodOption("--rounds", "rounds"),
    MethodOption("--steps", "steps"),
    MethodOption("--rho1", "rho1"),
    MethodOption("--rho2", "rho2"),
    MethodOption("--rho1-growth", "rho1_growth"),
    MethodOption("--rho2-growth", "rho2_growth"),
    MethodOption("--snap", "snap"),
    MethodOption("--acyclicity", "acyclicity"),
    MethodOption("--polish", "polish", off_flag="--no-polish"),
    MethodOption("--standardize", "standardize"),
    MethodOption("--personal", "personal",
                 hint="every method: each site's own weights on the learned graph with bnsl refit OUT SHARDS"),
    MethodOption("--clip", "clip", private=True),
    MethodOption("--selection-share", "selection_share", private=True),
    MethodOption("--polish-share", "polish_share", private=True),
    MethodOption("--public-means", "public_means", private=True),
    MethodOption("--value-bound", "value_bound", private=True),
    MethodOption("--clip-levels", "clip_levels", private=True),
    MethodOption("--noise", "noise", private=True),
    MethodOption("--collusion-tolerance", "collusion_tolerance", private=True),
)

_SPEND = "the spend of any method's release list: --releases report.json"

#: ``privacy-budget`` options that only some methods take (the command's own parameter names); the
#: spend-mode multipliers first, so that a spend request names --releases first.
BUDGET_OPTIONS = _table(
    MethodOption("--gumbel-multiplier", "gumbel_multiplier", hint=_SPEND),
    MethodOption("--sigma-multiplier", "sigma_multiplier", hint=_SPEND),
    MethodOption("--moment-multiplier", "moment_multiplier", hint=_SPEND),
    MethodOption("--mean-multiplier", "mean_multiplier", hint=_SPEND),
    MethodOption("--polish-multiplier", "polish_multiplier", hint=_SPEND),
    MethodOption("--rounds", "rounds"),
    MethodOption("--steps", "steps"),
    MethodOption("--selection-share", "selection_share"),
    MethodOption("--moment-share", "moment_share"),
    MethodOption("--mean-share", "mean_share"),
    MethodOption("--polish-share", "polish_share"),
    MethodOption("--public-means", "public_means"),
    MethodOption("--value-bound", "value_bound"),
    MethodOption("--sites", "sites"),
    MethodOption("--collusion-tolerance", "collusion_tolerance"),
)


def _default(obj, name: str):
    for f in fields(obj):
        if f.name == name:
            if f.default is not MISSING:
                return f.default
            if f.default_factory is not MISSING:  # pragma: no cover - no such field today
                return f.default_factory()
    raise KeyError(name)


def given_options(config) -> list[MethodOption]:
    """The options of :data:`LEARN_OPTIONS` that ``config`` (a ``LearnConfig``) sets to something
    other than their default (its ``dp`` part only for a private run)."""
    out = []
    for opt in LEARN_OPTIONS.values():
        holder = config.dp if opt.private else config
        if holder is None:
            continue
        if getattr(holder, opt.attr) != _default(holder, opt.attr):
            out.append(opt)
    return out


def refusal(opt: MethodOption, method: str, takers: Iterable[str], value=None, dp_default: Optional[str] = None,
            private: bool = False) -> str:
    """The one line that refuses ``opt`` for ``method``: the option, the method, the methods that
    take it and what to do."""
    flag = opt.off_flag if (opt.off_flag is not None and value is False) else opt.flag
    takers = list(takers)
    if not takers:  # pragma: no cover - every option of the tables has a taker (a test checks)
        return f"{flag} applies to no method; drop the option"
    note = f" (the --dp default is {dp_default})" if (private and dp_default == method) else ""
    hint = f" ({opt.hint})" if opt.hint else ""
    return (f"{flag} does not apply to --method {method}: it applies to --method {', '.join(takers)}{note}; "
            f"add --method {takers[0]} or drop the option{hint}")


def check_options(config, spec, specs, dp_default: Optional[str]) -> None:
    """Refuse (:class:`OptionError`, exit 2) the first option of :data:`LEARN_OPTIONS` that
    ``config`` gives and ``spec``'s method does not take. ``specs``: every registry entry, in
    registry order (for the list of methods that take it); ``dp_default``: the name of the ``--dp``
    default method."""
    private = config.dp is not None
    for opt in given_options(config):
        if opt.flag in spec.options:
            continue
        takers = [s.name for s in specs if opt.flag in s.options and (s.private or not opt.private)]
        holder = config.dp if opt.private else config
        raise OptionError(refusal(opt, spec.name, takers, getattr(holder, opt.attr), dp_default, private))


def check_budget_options(given: dict, spec, specs, dp_default: Optional[str]) -> None:
    """``privacy-budget``: refuse the first of its options in ``given`` (flag -> whether the user set
    it) that ``spec``'s method does not take."""
    for flag, opt in BUDGET_OPTIONS.items():
        if not given.get(flag) or flag in spec.budget_options:
            continue
        takers = [s.name for s in specs if flag in s.budget_options]
        raise OptionError(refusal(opt, spec.name, takers, True, dp_default, True))

"""The exception hierarchy of the bnsl library.

The library never prints or exits; it raises these. The CLI maps them to exit codes:
``InputDataError`` / ``ShardMismatchError`` -> 3, ``NoDagError`` -> 4, ``PrivacyBudgetError`` and
``RefusedError`` -> 5, ``OptionError`` -> 2.
"""

from __future__ import annotations

__all__ = [
    "BnslError",
    "InputDataError",
    "ShardMismatchError",
    "NoDagError",
    "PrivacyBudgetError",
    "RefusedError",
    "OptionError",
    "ConvergenceWarning",
    "ReproducibleNoiseWarning",
    "PrivacyWarning",
    "Terminated",
    "interruption",
    "ScaleWarning",
    "DataWarning",
    "IdentifierColumnWarning",
    "SmallSampleWarning",
    "MissingRowsWarning",
]


class BnslError(Exception):
    """Base class of every error bnsl raises on purpose."""

    exit_code = 1


class InputDataError(BnslError):
    """A file the user gave is missing, unreadable or holds data bnsl cannot use."""

    exit_code = 3


class ShardMismatchError(InputDataError):
    """Participant shards disagree (e.g. different column names)."""

    exit_code = 3


class NoDagError(BnslError):
    """No acyclic graph could be produced."""

    exit_code = 4


class PrivacyBudgetError(BnslError):
    """The requested privacy budget is invalid or cannot be met."""

    exit_code = 5


class RefusedError(BnslError):
    """A party refused a run plan beyond the limits it declared (method, rounds, ε, δ, releases,
    seeded or split noise, standardisation, secure sums). Exit code 5, like a budget that cannot be met."""

    exit_code = 5


class ConvergenceWarning(UserWarning):
    """The optimiser stopped before meeting its tolerance; the message says what to change."""


class ReproducibleNoiseWarning(UserWarning):
    """DP noise was drawn from a user-given seed, so anyone knowing the seed can reproduce it."""


class OptionError(BnslError):
    """An option is out of range or does not fit the method (a usage error)."""

    exit_code = 2


class PrivacyWarning(UserWarning):
    """A private run's guarantee is weaker than it looks (e.g. a participant with very few rows),
    or a result derived from private output is not private itself."""


class Terminated(KeyboardInterrupt):
    """The process received SIGTERM (``kill``, Slurm, systemd). Raised by the CLI's signal handler
    in the main thread and handled like Ctrl-C — a :class:`KeyboardInterrupt`, so every cleanup
    that Ctrl-C runs (output folders aborted, the other parties told, the transcript closed) runs
    for it too — but with its own message and exit code 143 (128 + SIGTERM)."""

    exit_code = 143
    what = "terminated (SIGTERM)"


def interruption(exc: BaseException) -> tuple[str, int]:
    """What stopped the process, for messages, and its exit code: ``("interrupted (Ctrl-C)", 130)``
    for a :class:`KeyboardInterrupt`, ``("terminated (SIGTERM)", 143)`` for :class:`Terminated`."""
    if isinstance(exc, Terminated):
        return exc.what, exc.exit_code
    return "interrupted (Ctrl-C)", 130


class ScaleWarning(UserWarning):
    """The columns are on very different scales and ``--standardize`` was not given."""


class DataWarning(UserWarning):
    """The data read are legal but probably not what the user meant; the run goes on."""


class IdentifierColumnWarning(DataWarning):
    """A column looks like a row identifier (distinct integers in order, or a run of consecutive
    integers) and would be learned as a variable; ``--index-col``/``--drop`` leave it out."""


class SmallSampleWarning(DataWarning):
    """Fewer rows than variables, or too few rows for edges to stand out from chance correlations."""


class MissingRowsWarning(DataWarning):
    """``--na drop-rows`` dropped rows that held a missing value."""

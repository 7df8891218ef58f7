"""Every error and warning bnsl raises on purpose, and the exit code of each.

The library never prints or exits; it raises these. The command line (``bnsl_cli/cli/common.py``)
turns an error into one line on stderr and the process exit code of its class (``exit_code``):

====  =====================================================================================
code  meaning (classes)
====  =====================================================================================
0     ok
1     internal error (an unexpected exception; :class:`BnslError` itself)
2     usage: an option out of range or not fitting the method, an output folder that cannot be
      used, a certificate or key that cannot be used (:class:`OptionError`,
      :class:`OutputDirError`, :class:`TLSError`; the command line's own usage errors)
3     bad input data: a file missing, unreadable or unusable, shards that disagree, a value outside
      the secure sum's range (:class:`InputDataError`, :class:`ShardMismatchError`,
      :class:`ColumnMismatchError`, :class:`SecureSumRangeError`)
4     no DAG could be produced (:class:`NoDagError`)
5     the privacy budget is invalid or cannot be met, or a party refused a plan beyond its limits
      or a message beyond the plan it accepted (:class:`PrivacyBudgetError`, :class:`RefusedError`,
      :class:`SiteRefusedError`, :class:`GuardRefusedError`, :class:`UnsafeMessageError`)
6     a networked run failed: a party disconnected, timed out, sent malformed or out-of-order data,
      or could not be reached (:class:`FederationError`), or a participant's reply failed the
      coordinator's validation, in any run (:class:`InvalidReplyError`)
130   interrupted (Ctrl-C; :class:`KeyboardInterrupt`)
143   terminated by SIGTERM (``kill``, Slurm, systemd; :class:`Terminated`)
141   the reader of stdout went away (a broken pipe, ``bnsl learn … | head``), silently
====  =====================================================================================

Warnings (the run goes on; each is also listed in the report's ``warnings``):
:class:`ConvergenceWarning`, :class:`ReproducibleNoiseWarning`, :class:`PrivacyWarning`,
:class:`ScaleWarning`, :class:`ConstantColumnWarning`, :class:`RankDeficientWarning`.
:class:`Terminated` (SIGTERM) is a :class:`KeyboardInterrupt`, handled like Ctrl-C.
:class:`FrameError` is a :class:`ValueError` of the network frames, turned into a
:class:`FederationError` where a frame is read.
"""

from __future__ import annotations

import warnings

__all__ = [
    "EXIT_CODES",
    "warn",
    "public_reason",
    "BnslError",
    "InputDataError",
    "ShardMismatchError",
    "ColumnMismatchError",
    "SecureSumRangeError",
    "NoDagError",
    "PrivacyBudgetError",
    "RefusedError",
    "SiteRefusedError",
    "OptionError",
    "OutputDirError",
    "TLSError",
    "FederationError",
    "FrameError",
    "ConvergenceWarning",
    "ReproducibleNoiseWarning",
    "PrivacyWarning",
    "NoisyReleaseWarning",
    "ClippedRowsWarning",
    "Terminated",
    "interruption",
    "ScaleWarning",
    "DenseGraphWarning",
    "ConstantColumnWarning",
    "RankDeficientWarning",
    "DataWarning",
    "IdentifierColumnWarning",
    "SmallSampleWarning",
    "MissingRowsWarning",
    "GuardRefusedError",
    "UnsafeMessageError",
    "InvalidReplyError",
    "ByzantineWarning",
]

#: The process exit codes of the command line (the table above).
EXIT_CODES = {
    0: "ok",
    1: "internal error",
    2: "usage (options, output folder, certificates)",
    3: "bad input data",
    4: "no DAG could be produced",
    5: "privacy budget invalid or impossible, or a party refused the plan",
    6: "a networked run failed",
    130: "interrupted",
    141: "the reader of stdout went away",
    143: "terminated (SIGTERM)",
}


def warn(texts, category: type, into: list, stacklevel: int = 2) -> None:
    """The one way the library warns: each of ``texts`` is emitted as a ``category`` warning (the
    command line prints it as one ``warning:`` line) and listed in ``into`` (the report's
    ``warnings``). ``stacklevel`` counts from the caller, as for :func:`warnings.warn`."""
    for text in texts:
        warnings.warn(text, category, stacklevel=stacklevel + 1)
        into.append(text)


class BnslError(Exception):
    """Base class of every error bnsl raises on purpose."""

    exit_code = 1


class InputDataError(BnslError):
    """A file the user gave is missing, unreadable or holds data bnsl cannot use."""

    exit_code = 3


class ShardMismatchError(InputDataError):
    """Participant shards disagree (e.g. different column names)."""

    exit_code = 3


class ColumnMismatchError(ShardMismatchError):
    """The sites' CSVs do not have the same columns. Exit code 3."""


class SecureSumRangeError(InputDataError):
    """A value is outside the fixed-point range of the secure sum (or not finite): the site's data
    (in its units) does not fit; exit code 3."""


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


class SiteRefusedError(RefusedError):
    """A site refused the run plan (method, rounds, ε/δ, releases, seeded or split noise,
    standardisation or a missing secure sum: beyond its limits). Exit code 5 on the coordinator;
    the refusing site exits 5 too, every other site 6 (:class:`FederationError`)."""


class OptionError(BnslError):
    """An option is out of range or does not fit the method (a usage error)."""

    exit_code = 2


class OutputDirError(BnslError):
    """The output folder cannot be used (not a folder, not writable, locked, holds foreign files)."""

    exit_code = 2


class TLSError(BnslError):
    """A certificate or key is missing, malformed, expired or does not belong to the given CA."""

    exit_code = 2


class FederationError(BnslError):
    """A networked run failed: a party disconnected, timed out, sent malformed or out-of-order
    data, or could not be reached. Exit code 6."""

    exit_code = 6


class FrameError(ValueError):
    """Bytes that are not a valid frame (unknown kind or version, bad JSON, too large)."""


class ConvergenceWarning(UserWarning):
    """The optimiser stopped before meeting its tolerance; the message says what to change."""


class ReproducibleNoiseWarning(UserWarning):
    """DP noise was drawn from a user-given seed, so anyone knowing the seed can reproduce it."""


class PrivacyWarning(UserWarning):
    """A private run's guarantee is weaker than it looks (e.g. a participant with very few rows),
    or a result derived from private output is not private itself."""


class NoisyReleaseWarning(UserWarning):
    """A private run's released statistics carry more noise than its learner can see through: the
    graph is expected to be poor (the privacy guarantee is unaffected)."""


class ClippedRowsWarning(UserWarning):
    """A private run's clip kept much less of the rows' weight than it keeps of whitened Gaussian
    rows, and the noise left it no room to widen: the released moments stand for the rows' bulk (the
    privacy guarantee is unaffected)."""


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


class DenseGraphWarning(UserWarning):
    """The finished graph is denser than known networks of its size: many of its edges are likely
    spurious; the message says what to try (edge confidence, a threshold)."""


class ScaleWarning(UserWarning):
    """The columns are on very different scales and ``--standardize`` was not given."""


class ConstantColumnWarning(UserWarning):
    """A column is constant in some (not all) participant shards; the run goes on."""


class RankDeficientWarning(UserWarning):
    """A node's least-squares problem was singular; its minimum-norm solution was used."""


class DataWarning(UserWarning):
    """The data read are legal but probably not what the user meant; the run goes on."""


class IdentifierColumnWarning(DataWarning):
    """A column looks like a row identifier (distinct integers in order, or a run of consecutive
    integers) and would be learned as a variable; ``--index-col``/``--drop`` leave it out."""


class SmallSampleWarning(DataWarning):
    """Fewer rows than variables, or too few rows for edges to stand out from chance correlations."""


class MissingRowsWarning(DataWarning):
    """``--na drop-rows`` dropped rows that held a missing value."""


class GuardRefusedError(RefusedError):
    """A site's guard refused a message beyond the plan it accepted: a round beyond the plan's,
    a replayed or reordered round, a second polish, plan or statistics request, or a release the
    remaining budget does not cover. Nothing was sent for that message. Exit code 5."""


class UnsafeMessageError(GuardRefusedError):
    """A site refused a message whose contents are outside the bounds its plan makes public (a basis
    that is not lower triangular or whose whitening could overflow, a consensus ``W`` or ``ρ₂`` out of
    range, a malformed second-moment request, ...). The check reads only the message and public or
    already released values and runs before any row is touched, so the refusal is the same on every
    data set. Nothing was sent for that message. Exit code 5."""


class ByzantineWarning(UserWarning):
    """A participant's replies passed validation but moved the result more than its rows can
    (one site far outside the others); the warning names it."""


class InvalidReplyError(BnslError):
    """A participant's reply failed the coordinator's validation (a value that is not finite or
    out of the protocol's range, a wrong shape, an index outside the matrix); the message names the
    participant. Exit code 6, like every other federation failure."""

    exit_code = 6


def public_reason(exc: BaseException) -> str:
    """What a site tells the coordinator about why it stops: never a word about its data.

    A refusal of the plan or of a message, a malformed message and a privacy budget that cannot be met
    are about public values (the plan, the message, the HELLO) and are sent as they are, as is an
    error's own ``public_reason``. Anything else — a cell that does not parse, a changed or mismatched
    file, the site's configuration, a bug — is sent as a fixed, data-free text by its class; the full
    message stays in the site's own output and transcript (a cell's text, a path or a column's
    constancy would otherwise leave the site)."""
    own = getattr(exc, "public_reason", None)
    if own:
        return str(own)
    if isinstance(exc, (RefusedError, FederationError, PrivacyBudgetError)):
        return str(exc)
    if isinstance(exc, ShardMismatchError):
        return "the site's columns differ from the plan's (details in the site's own transcript)"
    if isinstance(exc, InputDataError):
        return "the site cannot use its data for this plan (details in the site's own transcript)"
    if isinstance(exc, (OptionError, TLSError)):
        return "the site's configuration is invalid (details in the site's own log)"
    if isinstance(exc, KeyboardInterrupt):
        return f"the site was {interruption(exc)[0]}"
    return "the site stopped on an error (details in the site's own log)"


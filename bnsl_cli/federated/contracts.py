"""The two contracts of a run, as :class:`typing.Protocol` classes (a leaf module: it imports only
the byte meter's type, itself a leaf).

- :class:`Participant` — the site side: it holds its rows and answers the coordinator's encoded
  messages (``handle``), and at the end hands back a JSON-able ``summary()``. Everything it needs
  (the plan's options, its noise source, whether to report its ``B_p``) is given to its constructor.
- :class:`Fleet` — how the coordinator reaches its participants: one encoded request to every
  participant, their validated replies in participant order (``exchange``), their summaries
  (``finish``), and ``close``. ``workers`` is how many processes host participants (the report's
  ``timing.workers``), ``secure_sum`` whether summable replies arrive securely aggregated (split
  noise is only allowed then), ``traffic`` the :class:`~bnsl_cli.federated.traffic.Traffic` meter
  that counts the bytes of every message it carries down and every reply it brings up (a driver
  only names the exchange it is in; the report reads the meter), ``limits`` the
  :class:`~bnsl_cli.federated.reply_limits.ReplyLimits` its replies' values are checked against
  (``None`` until ``run`` sets them from the plan: the blanket checks only). Every fleet sets all of
  these in its constructor:
  :class:`~bnsl_cli.federated.fleet.LocalFleet`, :class:`~bnsl_cli.federated.fleet.ProcessFleet`,
  :class:`~bnsl_cli.federated.secure_local.SecureLocalFleet`, :class:`~bnsl_cli.net.fleet.NetworkFleet`.
"""

from __future__ import annotations

from typing import Optional, Protocol, runtime_checkable

from bnsl_cli.federated.traffic import Traffic

__all__ = ["Participant", "Fleet"]


@runtime_checkable
class Participant(Protocol):
    """A participant as the fleets and the network site see it."""

    def handle(self, data: bytes) -> Optional[bytes]:
        """The encoded reply to the encoded message ``data`` (``None`` when it needs none)."""
        ...

    def summary(self) -> dict:
        """What the participant hands back at the end of the run, JSON-able."""
        ...


@runtime_checkable
class Fleet(Protocol):
    """The coordinator's link to its participants (see the module docstring)."""

    workers: int
    secure_sum: bool
    traffic: Traffic
    limits: object

    def __len__(self) -> int:
        """The number of participants."""
        ...

    def exchange(self, msg: bytes) -> list[Optional[bytes]]:
        """Send ``msg`` to every participant; their replies (validated), in participant order."""
        ...

    def finish(self) -> list[dict]:
        """Every participant's summary, in participant order (the exchanges are over)."""
        ...

    def close(self) -> None:
        """Release what the fleet holds (worker processes, connections); safe to call twice."""
        ...

"""Issue 44: "an undeclared message kind passes reply validation". Reply validation
(:func:`bnsl_cli.federated.messages.validate_reply`) reads only the message classes' declarations
(``wire.declare``: a request's ``ReplyShape``, a reply's payload reader); a kind nobody declares must
be refused, not waved through with its values unread:

- a reply to a request of a kind no class declares (a new method's request whose class was never
  declared: nothing says what may answer it);
- a reply to a request whose shape lists no answering kind;
- a reply of a kind no class declares a payload reader for (its values could not be checked).

Each is refused naming the sender, at the fleet seam too (``InvalidReplyError``).
"""

from __future__ import annotations

import numpy as np
import pytest

from bnsl_cli.errors import InvalidReplyError
from bnsl_cli.federated.fleet import LocalFleet
from bnsl_cli.federated.messages import (
    MessageKind,
    MomentRequest,
    ShareReply,
    validate_reply,
    validation,
)
from bnsl_cli.federated.messages.wire import ReplyShape, reply_reader, reply_shape

D = 4
#: kind numbers no message class declares (the wire format appends new kinds from 43 on)
UNDECLARED = [k for k in (0, 21, 24, 99, 200, 255) if reply_shape(k) is None and reply_reader(k) is None]


def _share(sender: int = 1) -> bytes:
    return ShareReply(0, sender, D, np.full(D, 0.25)).encode()


def _request(kind: int) -> bytes:
    """A header-only request of ``kind`` (a moment request's header with its kind byte replaced)."""
    return bytes([kind]) + MomentRequest(0, D).encode()[1:]


def test_the_kinds_used_are_undeclared():
    assert len(UNDECLARED) >= 4
    assert validate_reply(MomentRequest(0, D).encode(), _share(), 1) is None  # the declared exchange passes


@pytest.mark.parametrize("kind", UNDECLARED)
def test_a_reply_to_a_request_of_an_undeclared_kind_is_refused(kind):
    why = validate_reply(_request(kind), _share(), 1)
    assert why is not None and f"kind-{kind}" in why, why


def test_a_reply_to_an_undeclared_request_stops_the_run_naming_the_sender():
    fleet = LocalFleet([lambda m, k=k: ShareReply(0, k, D, np.zeros(D)).encode() for k in range(3)])
    with pytest.raises(InvalidReplyError, match=r"^participant 1 answered a kind-99 message"):
        fleet.exchange(_request(99))


def test_a_request_whose_shape_lists_no_answering_kind_accepts_none(monkeypatch):
    """A request class declaring a reply shape but no kind that answers it (``ReplyShape()``): before
    the fix any reply kind passed, its values unread."""
    declared = validation.reply_shape
    monkeypatch.setattr(validation, "reply_shape", lambda k: ReplyShape() if k == 99 else declared(k))
    why = validate_reply(_request(99), _share(), 1)
    assert why is not None and "answered a kind-99 message with a kind-25 message" in why, why


def test_a_reply_kind_without_a_declared_reader_is_refused(monkeypatch):
    """A request shape naming an answering kind no class declares a payload reader for: the reply's
    values could not be read, so it is refused rather than accepted unchecked."""
    declared = validation.reply_shape
    monkeypatch.setattr(validation, "reply_shape",
                        lambda k: ReplyShape((200,)) if k == MessageKind.MOMENT_REQUEST else declared(k))
    reply = bytes([200]) + _share()[1:]
    why = validate_reply(MomentRequest(0, D).encode(), reply, 1)
    assert why is not None and "kind-200" in why, why

"""How a bnsl frame rides in a Flower ``Message``.

A request (ServerApp → one site) is a ``Message`` of type :data:`MESSAGE_TYPE` whose content holds
one ``ConfigRecord`` named :data:`RECORD` with

- ``op``: :data:`HELLO` (introduce yourself: the site answers with its HELLO frame) or :data:`FRAME`;
- ``frame`` (``op`` = :data:`FRAME`): one bnsl frame (:mod:`bnsl_cli.net.frames`) exactly as ``bnsl
  serve`` would send it on its gRPC stream: a PLAN, a DATA frame holding one protocol message
  (:mod:`bnsl_cli.federated.messages`), FINISH, DONE or ABORT;
- ``run``: the run tag (the ServerApp's random hex for this run; the site refuses another once it
  holds a run for this Flower run);
- ``seq``: this site's message number in the run, 1 (the HELLO request), 2, 3, … with no gap: a
  replayed, repeated or skipped number is refused by the site (:mod:`.state`).

A reply holds ``frames``: the frames the site sent in answer, in order (the reply to a message,
then, after the stop broadcast, its SUMMARY; an empty list acknowledges DONE and ABORT). No field
is interpreted by Flower: the bytes are bnsl's.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "FRAME",
    "HELLO",
    "MESSAGE_TYPE",
    "RECORD",
    "Request",
    "read_reply",
    "read_request",
    "reply_content",
    "request_content",
]

#: Flower routes ``query.bnsl`` to the ClientApp's ``@app.query("bnsl")`` handler.
MESSAGE_TYPE = "query.bnsl"
RECORD = "bnsl"
HELLO, FRAME = "hello", "frame"


@dataclass(frozen=True)
class Request:
    op: str
    run: str
    seq: int
    frame: bytes | None


def request_content(op: str, run: str, seq: int, frame: bytes | None = None):
    """The ``RecordDict`` of a request."""
    from flwr.app import ConfigRecord, RecordDict

    rec = {"op": op, "run": run, "seq": int(seq)}
    if frame is not None:
        rec["frame"] = bytes(frame)
    return RecordDict({RECORD: ConfigRecord(rec)})


def read_request(content) -> Request:
    """The request in a message's content; ``ValueError`` for anything malformed."""
    try:
        rec = content.config_records[RECORD]
        op, run, seq = rec["op"], rec["run"], rec["seq"]
        frame = rec.get("frame")
    except (KeyError, AttributeError, TypeError) as exc:
        raise ValueError(f"not a bnsl request ({type(exc).__name__}: {exc})") from None
    if op not in (HELLO, FRAME) or not isinstance(run, str) or not isinstance(seq, int) or isinstance(seq, bool):
        raise ValueError("not a bnsl request (op, run or seq malformed)")
    if (op == FRAME) != isinstance(frame, bytes):
        raise ValueError("a bnsl frame request without its frame bytes (or a HELLO request with some)")
    if not 0 < len(run) <= 64:
        raise ValueError("a bnsl request with a malformed run tag")
    return Request(op, run, seq, frame)


def reply_content(frames: list):
    """The ``RecordDict`` of a reply carrying ``frames`` (raw bnsl frames, in order)."""
    from flwr.app import ConfigRecord, RecordDict

    return RecordDict({RECORD: ConfigRecord({"frames": [bytes(f) for f in frames]})})


def read_reply(content) -> list:
    """The raw frames of a reply; ``ValueError`` for anything malformed."""
    try:
        frames = content.config_records[RECORD]["frames"]
    except (KeyError, AttributeError, TypeError) as exc:
        raise ValueError(f"not a bnsl reply ({type(exc).__name__}: {exc})") from None
    if not isinstance(frames, list) or not all(isinstance(f, bytes) for f in frames):
        raise ValueError("a bnsl reply whose frames are not bytes")
    return list(frames)

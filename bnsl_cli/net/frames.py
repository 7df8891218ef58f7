"""Frames: the unit each gRPC stream message carries, with an explicit versioned encoding.

Layout: ``kind:u8, version:u8`` then a body. Control frames have a UTF-8 JSON object as body
(at most :data:`MAX_CONTROL_BYTES`); the ``DATA`` frame's body is one protocol message exactly as
:mod:`bnsl_cli.federated.messages` encodes it (the same bytes as an in-process run), and ``EMPTY``
stands for "no reply" (a participant's answer to the stop broadcast). Kinds:

====  =========  =========================  ====================================================
kind  name       direction                  body
====  =========  =========================  ====================================================
1     HELLO      site → coordinator         site name, columns, rows, limits, X25519 public key
2     PLAN       coordinator → site         the run plan, the site's index, everyone's rows/keys
3     ACCEPT     site → coordinator         ``{}``: the plan is within the site's limits
4     DATA       both                       one protocol message (bytes)
5     EMPTY      site → coordinator         no reply (answer to the stop broadcast)
6     SUMMARY    site → coordinator         the site's end-of-run summary (JSON; privacy events
                                            packed; under DP public or ledgered values only)
7     DONE       coordinator → site         ``{}``: the run finished, outputs written
8     MASKED     site → coordinator         a summable reply under secure aggregation: the
                                            message's clear prefix (header), then its values as
                                            masked fixed-point uint64 (:mod:`..secure_sum`)
9     FINISH     coordinator → site         ``{}``: the exchanges are over, send your SUMMARY
                                            (methods without a stop broadcast: fed-moments)
127   ABORT      both                       ``{"reason": "..."}``: the run stops (from a site
                                            refusing the plan also ``"refused": true``)
====  =========  =========================  ====================================================
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass

from bnsl_cli.errors import FrameError

__all__ = [
    "VERSION", "HELLO", "PLAN", "ACCEPT", "DATA", "EMPTY", "SUMMARY", "DONE", "MASKED", "FINISH", "ABORT", "KIND_NAMES",
    "MAX_CONTROL_BYTES", "MAX_DATA_BYTES", "FrameError", "Frame", "encode", "decode", "control", "data", "printable",
]

#: 2: a SUMMARY's privacy events are packed and a private site's SUMMARY has no ``compute_s``; an
#: ABORT may say ``"refused": true``. A party of another version is refused on its first frame.
VERSION = 2
HELLO, PLAN, ACCEPT, DATA, EMPTY, SUMMARY, DONE, MASKED, FINISH, ABORT = 1, 2, 3, 4, 5, 6, 7, 8, 9, 127
KIND_NAMES = {
    HELLO: "HELLO", PLAN: "PLAN", ACCEPT: "ACCEPT", DATA: "DATA", EMPTY: "EMPTY",
    SUMMARY: "SUMMARY", DONE: "DONE", MASKED: "MASKED", FINISH: "FINISH", ABORT: "ABORT",
}
_CONTROL = {HELLO, PLAN, ACCEPT, SUMMARY, DONE, FINISH, ABORT}
#: Largest JSON body of a control frame (a plan or a summary of d = 1000 stays far below).
MAX_CONTROL_BYTES = 4 * 1024 * 1024
#: Largest frame of any kind (also the gRPC message size limit): a dense d = 4000 matrix is 128 MB.
MAX_DATA_BYTES = 256 * 1024 * 1024
_HEAD = struct.Struct("<BB")


@dataclass(frozen=True)
class Frame:
    kind: int
    body: object  # dict for control frames, bytes for DATA, None for EMPTY

    @property
    def name(self) -> str:
        return KIND_NAMES.get(self.kind, f"kind {self.kind}")


def encode(frame: Frame) -> bytes:
    head = _HEAD.pack(frame.kind, VERSION)
    if frame.kind in (DATA, MASKED):
        body = bytes(frame.body)
    elif frame.kind == EMPTY:
        body = b""
    elif frame.kind in _CONTROL:
        body = json.dumps(frame.body, separators=(",", ":"), allow_nan=False).encode()
        if len(body) > MAX_CONTROL_BYTES:
            raise FrameError(f"{frame.name} frame too large ({len(body)} bytes > {MAX_CONTROL_BYTES})")
    else:
        raise FrameError(f"unknown frame kind {frame.kind}")
    return head + body


def decode(raw: bytes) -> Frame:
    """The frame in ``raw``; :class:`FrameError` for anything malformed."""
    if len(raw) < _HEAD.size:
        raise FrameError(f"frame of {len(raw)} bytes is shorter than its 2-byte header")
    if len(raw) > MAX_DATA_BYTES:
        raise FrameError(f"frame of {len(raw)} bytes exceeds the {MAX_DATA_BYTES}-byte limit")
    kind, version = _HEAD.unpack_from(raw, 0)
    if version != VERSION:
        raise FrameError(f"frame version {version} (this bnsl speaks version {VERSION})")
    body = raw[_HEAD.size:]
    if kind in (DATA, MASKED):
        if not body:
            raise FrameError(f"empty {KIND_NAMES[kind]} frame")
        return Frame(kind, bytes(body))
    if kind == EMPTY:
        if body:
            raise FrameError("EMPTY frame with a body")
        return Frame(kind, None)
    if kind not in _CONTROL:
        raise FrameError(f"unknown frame kind {kind}")
    if len(body) > MAX_CONTROL_BYTES:
        raise FrameError(f"{KIND_NAMES[kind]} frame too large ({len(body)} bytes)")
    try:
        obj = json.loads(bytes(body).decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise FrameError(f"{KIND_NAMES[kind]} frame body is not JSON ({exc})") from None
    if not isinstance(obj, dict):
        raise FrameError(f"{KIND_NAMES[kind]} frame body is not a JSON object")
    return Frame(kind, obj)


def printable(text, limit: int = 1000) -> str:
    """A peer's free text made safe to print: control characters replaced, at most ``limit`` characters."""
    out = "".join(ch if ch.isprintable() else "?" for ch in str(text))
    return out if len(out) <= limit else out[: limit - 1] + "…"


def control(kind: int, body: dict) -> bytes:
    return encode(Frame(kind, body))


def data(payload) -> bytes:
    """A DATA frame for a protocol message, or EMPTY for ``None``."""
    return encode(Frame(EMPTY, None) if payload is None else Frame(DATA, payload))

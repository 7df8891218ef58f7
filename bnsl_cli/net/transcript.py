"""A site's transcript: one JSON object per line, appended and flushed as the run goes, so the
site's data officer can audit everything that left the building (even after a crash).

Records (``event`` field):

- ``run``: a run starts (``site``, ``coordinator``, ``csv``, ``rows``, ``columns``, ``started`` UTC);
- ``plan``: the coordinator's plan as received (``method``, ``rounds``, ``epsilon``, ``delta``,
  ``releases``) and the site's ``decision`` (``accepted`` or ``refused: reason``);
- ``sent``: every frame the site sent — ``frame`` (HELLO, ACCEPT, DATA, MASKED, EMPTY, SUMMARY,
  ABORT), ``type`` (the protocol message type for DATA and MASKED), ``round``, ``bytes`` (the
  frame's size on the wire, excluding gRPC/TLS framing) and ``sha256`` (of those bytes); a control
  frame (HELLO, ACCEPT, SUMMARY, ABORT) also has its ``body``, the JSON object exactly as sent (its
  compact encoding hashes to ``sha256`` after the 2-byte frame header);
- ``release`` (private runs): every privacy release made while answering a message, written
  before the frame that carries the answer is sent (a crash between the two leaves the release
  recorded, never an unrecorded frame), with ``mechanism``, ``count``, ``sensitivity``, ``noise_scale`` and its zCDP cost ``rho``
  (``rho_total`` is the site's running total);
- ``refused``: a message beyond the plan the site accepted (the site's guard,
  :mod:`bnsl_cli.net.policy`): ``reason``, and the refused message's ``kind`` and ``round``;
  no answer was sent, the site stops;
- ``end``: ``status`` ``ok`` or the error that stopped the run, ``bytes_sent`` in all.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
from pathlib import Path
from typing import Optional

from bnsl_cli.errors import BnslError
from bnsl_cli.federated.messages import HEADER, MessageKind, read_header

__all__ = ["Transcript", "MESSAGE_TYPES"]

MESSAGE_TYPES = {
    MessageKind.BROADCAST: "consensus-broadcast",
    MessageKind.SPARSE_UPDATE: "sparse-update",
    MessageKind.DENSE_UPDATE: "dense-update",
    MessageKind.GRAM_REQUEST: "second-moment-request",
    MessageKind.GRAM_REPLY: "second-moment-reply",
}


def _utc() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class Transcript:
    """Appends records to ``path`` (created with mode 0600 if new)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        except OSError as exc:
            raise BnslError(f"--transcript {self.path}: cannot write ({exc.strerror or exc})") from None
        self._fh = os.fdopen(fd, "a", encoding="utf-8")
        self.bytes_sent = 0
        self.rho_total = 0.0
        self._seen: dict = {}

    def write(self, record: dict) -> None:
        record = {"t": _utc(), **record}
        self._fh.write(json.dumps(record, separators=(",", ":"), default=_default) + "\n")
        self._fh.flush()

    def sent(self, frame_name: str, raw: bytes, payload: Optional[bytes] = None, body: Optional[dict] = None) -> None:
        """Record one frame sent (``payload``: the protocol message inside a DATA frame; ``body``:
        a control frame's JSON body, recorded in full)."""
        rec = {"event": "sent", "frame": frame_name, "bytes": len(raw), "sha256": hashlib.sha256(raw).hexdigest()}
        if body is not None:
            rec["body"] = body
        if payload is not None and len(payload) >= HEADER.size:
            head = read_header(payload)
            rec["type"] = MESSAGE_TYPES.get(head.kind, f"kind-{head.kind}")
            rec["round"] = int(head.round)
        self.bytes_sent += len(raw)
        self.write(rec)

    def releases(self, events) -> None:
        """Record the releases among ``events`` (a participant's cumulative privacy events, each
        with ``key``, ``count``, ``rho_each`` and ``to_dict()``) not recorded before."""
        for ev in events:
            before = self._seen.get(ev.key, 0)
            new = int(ev.count) - before
            if new <= 0:
                continue
            self._seen[ev.key] = int(ev.count)
            rho = float(ev.rho_each) * new
            self.rho_total += rho
            info = ev.to_dict()
            info.pop("count", None)
            info.pop("rho", None)
            self.write({"event": "release", **info, "count": new, "rho": rho, "rho_total": self.rho_total})

    def close(self, status: str) -> None:
        if self._fh.closed:
            return
        self.write({"event": "end", "status": status, "bytes_sent": self.bytes_sent})
        self._fh.close()


def _default(o):
    import numpy as np

    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    return str(o)

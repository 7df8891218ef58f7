"""What both ends of the gRPC link share: the method name, channel options, errors."""

from __future__ import annotations

import math

from bnsl_cli.errors import (  # noqa: F401 - the network errors, importable from here too
    BnslError,
    ColumnMismatchError,
    FederationError,
    SiteRefusedError,
)
from bnsl_cli.net.frames import MAX_DATA_BYTES
from bnsl_cli.privacy.ledger import PrivacyEvent

__all__ = [
    "METHOD", "CHANNEL_OPTIONS", "SERVER_OPTIONS", "KEEPALIVE_S", "PING_TIMEOUT_S", "FROZEN_COORDINATOR_S",
    "FederationError", "SiteRefusedError", "ColumnMismatchError", "need_grpc",
    "pack_events", "unpack_events",
]

#: The one RPC: a bidirectional stream of frames, opened by the site, kept for the whole run.
METHOD = "/bnsl.federation.v1.Federation/Session"
SERVICE = "bnsl.federation.v1.Federation"

#: A site pings the coordinator (HTTP/2 PING) after this many seconds without a frame from it ...
KEEPALIVE_S = 4
#: ... and gives the connection up when a ping is not acknowledged within this many seconds.
PING_TIMEOUT_S = 4
#: So a coordinator whose process or machine stops (frozen, SIGSTOP, power loss, a cut cable) is
#: noticed by its sites within this many seconds (``bnsl join --help`` and docs/federation.md say
#: so): at most KEEPALIVE_S + PING_TIMEOUT_S, and a margin for the timers. Pings are acknowledged by
#: gRPC's own threads, which need no Python lock: a coordinator that computes for long between
#: rounds (even holding the GIL) still answers them, and sends no frame meanwhile, so the sites keep
#: waiting for its next message up to ``join --timeout``. (Recent gRPC releases, e.g. 1.85, wait
#: ``grpc.http2.ping_timeout_ms``, 60 s unless set, for a keep-alive ping's acknowledgement,
#: whatever ``grpc.keepalive_timeout_ms`` says: both are set.)
FROZEN_COORDINATOR_S = 10

_MESSAGE_SIZES = [
    ("grpc.max_send_message_length", MAX_DATA_BYTES),
    ("grpc.max_receive_message_length", MAX_DATA_BYTES),
]
#: the site's channel
CHANNEL_OPTIONS = _MESSAGE_SIZES + [
    # notice a coordinator that stopped answering without closing its TCP connection
    ("grpc.keepalive_time_ms", KEEPALIVE_S * 1000),
    ("grpc.keepalive_timeout_ms", PING_TIMEOUT_S * 1000),
    ("grpc.http2.ping_timeout_ms", PING_TIMEOUT_S * 1000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
]
#: the coordinator's server
SERVER_OPTIONS = _MESSAGE_SIZES + [
    # detect a site whose machine vanished without closing its TCP connection
    ("grpc.keepalive_time_ms", 20_000),
    ("grpc.keepalive_timeout_ms", 10_000),
    ("grpc.http2.ping_timeout_ms", 10_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
    # the sites ping every KEEPALIVE_S while the coordinator is silent: allowed (a peer that pings
    # more often than this is sent GOAWAY after two strikes)
    ("grpc.http2.min_ping_interval_without_data_ms", KEEPALIVE_S * 1000 // 2),
    ("grpc.so_reuseport", 0),  # a port in use must be an error, not a shared listener
]


def need_grpc():
    """Import grpc, or explain how to install the extra."""
    import os

    # gRPC's C core logs connection events (GOAWAY at shutdown, fork notices) to stderr; our own
    # errors say what happened in one line
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
    try:
        import cryptography  # noqa: F401
        import grpc  # noqa: F401
    except ImportError:
        raise BnslError(
            "networked runs need the optional extra: pip install 'bnsl-cli[net]' (grpcio)"
        ) from None
    return grpc


def pack_events(events: list) -> dict:
    """A participant's event dicts (``PrivacyEvent.to_dict()``) in the compact form a SUMMARY
    carries: ``{"kinds": [[release, mechanism, split], ...], "rows": [[kind, sensitivity,
    noise_scale, count], ...]}``, in the same order. Under adaptive clip levels a DP-PGCD run has one
    event per round and step kind (d = 20, 50 rounds: ~700), and the derived fields and the split
    assumption text repeated in each made most of their size."""
    kinds: list = []
    index: dict = {}
    rows = []
    for ev in events:
        k = (str(ev["release"]), str(ev["mechanism"]), int(ev.get("split", 1)))
        if k not in index:
            index[k] = len(kinds)
            kinds.append(list(k))
        rows.append([index[k], ev["sensitivity"], ev["noise_scale"], ev["count"]])
    return {"kinds": kinds, "rows": rows}


def unpack_events(packed) -> list:
    """The event dicts of :func:`pack_events` (as ``PrivacyEvent.to_dict()`` gives them);
    ``ValueError`` for anything malformed."""


    try:
        kinds, rows = packed["kinds"], packed["rows"]
        out = []
        for row in rows:
            kind, sensitivity, noise, count = row
            if not 0 <= int(kind) < len(kinds):
                raise IndexError(f"event kind {kind} of {len(kinds)}")
            release, mechanism, split = kinds[int(kind)]
            ev = PrivacyEvent(release, mechanism, float(sensitivity), math.inf if noise is None else float(noise),
                              int(count), int(split))
            out.append(ev.to_dict())
        return out
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        raise ValueError(f"malformed privacy events ({type(exc).__name__}: {exc})") from None

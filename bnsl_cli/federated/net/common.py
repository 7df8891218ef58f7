"""What both ends of the gRPC link share: the method name, channel options, errors."""

from __future__ import annotations

from bnsl_cli.errors import BnslError, RefusedError, ShardMismatchError
from bnsl_cli.federated.net.frames import MAX_DATA_BYTES

__all__ = ["METHOD", "CHANNEL_OPTIONS", "FederationError", "SiteRefusedError", "ColumnMismatchError", "need_grpc"]

#: The one RPC: a bidirectional stream of frames, opened by the site, kept for the whole run.
METHOD = "/bnsl.federation.v1.Federation/Session"
SERVICE = "bnsl.federation.v1.Federation"

CHANNEL_OPTIONS = [
    ("grpc.max_send_message_length", MAX_DATA_BYTES),
    ("grpc.max_receive_message_length", MAX_DATA_BYTES),
    # detect a peer whose machine vanished without closing its TCP connection
    ("grpc.keepalive_time_ms", 20_000),
    ("grpc.keepalive_timeout_ms", 10_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
]
SERVER_OPTIONS = CHANNEL_OPTIONS + [
    ("grpc.http2.min_ping_interval_without_data_ms", 10_000),
    ("grpc.so_reuseport", 0),  # a port in use must be an error, not a shared listener
]


class FederationError(BnslError):
    """A networked run failed: a party disconnected, timed out, sent malformed or out-of-order
    data, or could not be reached. Exit code 6."""

    exit_code = 6


class SiteRefusedError(RefusedError):
    """A site refused the run plan (method, rounds, ε/δ, releases, seeded or split noise,
    standardisation or a missing secure sum: beyond its limits). Exit code 5 on the coordinator;
    the refusing site exits 5 too, every other site 6 (:class:`FederationError`)."""


class ColumnMismatchError(ShardMismatchError):
    """The sites' CSVs do not have the same columns. Exit code 3."""


def need_grpc():
    """Import grpc, or explain how to install the extra."""
    import os

    # gRPC's C core logs connection events (GOAWAY at shutdown, fork notices) to stderr; our own
    # errors say what happened in one line
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
    try:
        import grpc  # noqa: F401
        import cryptography  # noqa: F401
    except ImportError:
        raise BnslError(
            "networked runs need the optional extra: pip install 'bnsl-cli[net]' (grpcio, cryptography)"
        ) from None
    return grpc

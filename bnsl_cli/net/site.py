"""A site's side of a networked run: dial out to the coordinator, introduce itself, check the plan
against its own limits, then answer protocol messages with its local participant.

:func:`run_site` is transport only: what the site accepts and how its participant is built are
the caller's ``on_plan`` callback (the CLI's ``bnsl join`` checks the plan and calls the run's
site-side participant factory). Nothing data-dependent is sent before ``on_plan`` returned: the
HELLO carries the column names, the public row count and the site's limits only.
"""

from __future__ import annotations

import queue
import socket
import threading
import time
from typing import Callable, Optional

import numpy as np

from bnsl_cli.errors import BnslError, GuardRefusedError, RefusedError, interruption, public_reason
from bnsl_cli.federated.messages import HEADER, is_stop, read_header, summable_span
from bnsl_cli.federated.secure_sum import SecureSum, SecureSumRangeError, describe
from bnsl_cli.net import frames as F
from bnsl_cli.net.common import (
    CHANNEL_OPTIONS,
    METHOD,
    PING_TIMEOUT_S,
    FederationError,
    need_grpc,
    pack_events,
)
from bnsl_cli.net.identity import probe_coordinator
from bnsl_cli.net.tls import split_hostport

__all__ = ["run_site", "default_summary", "wire_summary", "PRIVATE_SUMMARY_KEYS"]

#: What a private run's SUMMARY may carry, all public or accounted: the participant number and its
#: declared rows (both in the plan), ``steps_taken`` (rounds × the plan's steps under DP), the
#: privacy events (the ledger itself: mechanisms, sensitivities and noise scales fixed by the plan
#: and by earlier releases), ``notes`` (fixed texts: how the data were centred) and ``B`` when the
#: plan asks for it (``--personal``: built from this site's released noisy values only). Everything
#: else a participant reports is left out, e.g. ``compute_s`` (its timing depends on the rows and
#: is no release; the coordinator reports the reply times it observed instead).
PRIVATE_SUMMARY_KEYS = frozenset({"participant", "rows", "steps_taken", "events", "notes", "B"})


def wire_summary(summary: dict, private: bool) -> dict:
    """``summary`` as the SUMMARY frame carries it: under DP only :data:`PRIVATE_SUMMARY_KEYS`;
    the privacy events packed (:func:`~bnsl_cli.net.common.pack_events`)."""
    out = {k: v for k, v in summary.items() if not private or k in PRIVATE_SUMMARY_KEYS}
    if isinstance(out.get("events"), list):
        out["events"] = pack_events(out["events"])
    return out


def default_summary(participant) -> dict:
    """What a site reports at the end: the participant's own ``summary()`` (B_p when the plan asks
    for it, timings, privacy events; :class:`~bnsl_cli.federated.contracts.Participant`)."""
    return participant.summary()


def _events(participant) -> list:
    if callable(getattr(participant, "events", None)):
        return participant.events()
    ledger = getattr(participant, "ledger", None)
    return [] if ledger is None else ledger.events(participant.pid)


def _secure_sum(plan: dict, secure_key):
    """The site's :class:`~bnsl_cli.federated.secure_sum.SecureSum` when the plan asks for it."""
    spec = plan.get("secure_sum")
    if not spec:
        return None
    if secure_key is None:
        raise FederationError("the coordinator asks for secure aggregation, but this site made no key")

    try:
        keys = [bytes.fromhex(k) for k in spec["public_keys"]]
        return SecureSum(int(plan["index"]), secure_key, keys, bytes.fromhex(spec["run_id"]), int(spec["scale_bits"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise FederationError(f"the coordinator sent a malformed secure-aggregation plan ({exc})") from None


def _masked(masker, reply: bytes) -> bytes:
    """The reply's clear prefix (header, and the dense update's objective flag), then its float64
    values masked (tag: kind and round of the message). A value outside the fixed-point range is a
    :class:`~bnsl_cli.federated.secure_sum.SecureSumRangeError` naming what it was and what to do."""

    start, count = summable_span(reply)
    head = read_header(reply)
    kind, rnd = head.kind, head.round
    values = np.frombuffer(reply, dtype="<f8", count=count, offset=start)
    try:
        y = masker.mask(values, f"kind{kind}/round{rnd}".encode())
    except SecureSumRangeError as exc:
        advice = (
            f" in {describe(kind)} (message kind {kind}, round {rnd}); nothing was sent. Values this "
            "large come from columns in large raw units: rescale those columns at every site (or run with "
            f"--standardize), or ask the coordinator for a smaller --secure-sum-bits (now {masker.scale_bits}; "
            "each bit less doubles the range and halves the resolution)"
        )
        err = SecureSumRangeError(f"{exc}{advice}")
        # what the coordinator is told: the public range, not the offending value's magnitude (a
        # number from this site's rows that the secure sum exists to hide)
        limit = 2.0 ** (63 - masker.scale_bits) / max(int(masker.n), 1)
        err.public_reason = (
            f"secure sum: a value is not finite or exceeds the fixed-point range |v| < {limit:.3g}{advice}"
        )
        raise err from None
    return reply[:start] + y.astype("<u8").tobytes()


def _is_private(plan_body: dict, events: list) -> bool:
    """Whether the run is private: the plan says so (``plan.privacy``), or (a bare plan body, as
    in-process tests send) the participant already made releases."""
    inner = plan_body.get("plan")
    if isinstance(inner, dict) and "privacy" in inner:
        return inner["privacy"] is not None
    return bool(events)


def _record_refusal(transcript, exc: BaseException, request: Optional[bytes]) -> None:
    """The transcript's record of a message the site refused (it answers none)."""
    if transcript is None:
        return
    rec = {"event": "refused", "reason": str(exc)}
    if request is not None and len(request) >= HEADER.size:
        head = read_header(request)
        rec.update(kind=int(head.kind), round=int(head.round))
    transcript.write(rec)


def run_site(
    target: str,
    hello: dict,
    on_plan: Callable[[dict], object],
    *,
    secure_key=None,
    credentials=None,
    timeout: float = 600.0,
    connect_timeout: float = 10.0,
    transcript=None,
    summarize: Callable[[object], dict] = default_summary,
    log: Optional[Callable[[str], None]] = None,
) -> dict:
    """Join the run at ``target`` (``HOST:PORT``). ``on_plan(plan_body)`` returns the participant
    (an object with ``handle(bytes) -> bytes | None``) or raises a :class:`BnslError` to refuse
    (its message goes to the coordinator as the reason). ``policy.SiteGuard(...).on_plan``
    (:mod:`bnsl_cli.net.policy`) checks the plan and returns the participant behind the
    site's :class:`~bnsl_cli.net.policy.SpendGuard`: what ``bnsl join`` uses. ``secure_key``: this run's X25519 private
key (its public key is in the HELLO) for secure aggregation. ``credentials``: mutual TLS
    (:class:`~bnsl_cli.net.tls.PartyCredentials`) or ``None`` for plaintext. ``timeout``
    bounds the wait for each coordinator frame; a coordinator that stops answering the channel's
    keep-alive pings is given up sooner, within :data:`~bnsl_cli.net.common.FROZEN_COORDINATOR_S`
    (:class:`FederationError`). Returns the plan body and the site's summary."""
    grpc = need_grpc()
    log = log or (lambda _m: None)
    host, port = split_hostport(target, "coordinator address")
    started = time.monotonic()
    try:
        socket.create_connection((host.strip("[]"), port), timeout=connect_timeout).close()
    except OSError as exc:
        raise FederationError(
            f"cannot reach the coordinator at {target}: {exc.strerror or exc} (is bnsl serve running there?)"
        ) from None
    if credentials is not None:  # a server certificate for this address, before anything is sent

        coordinator = probe_coordinator(host, port, credentials, connect_timeout)
        log(f"coordinator certificate {coordinator.name!r} (sha256 {coordinator.sha256[:16]}…)")
        if transcript is not None:
            transcript.write({"event": "coordinator", "address": target, **coordinator.to_dict()})
    elif transcript is not None:
        transcript.write({"event": "coordinator", "address": target, "identity": None,
                          "note": "plaintext (--insecure): the coordinator is not authenticated"})
    if credentials is None:
        channel = grpc.insecure_channel(target, options=CHANNEL_OPTIONS)
    else:
        creds = grpc.ssl_channel_credentials(
            root_certificates=credentials.ca, private_key=credentials.key, certificate_chain=credentials.cert
        )
        channel = grpc.secure_channel(target, creds, options=CHANNEL_OPTIONS)
    try:
        try:
            grpc.channel_ready_future(channel).result(timeout=connect_timeout)
        except grpc.FutureTimeoutError:
            if credentials is None:
                raise FederationError(
                    f"cannot open a connection to the coordinator at {target} (it answers on the port but "
                    "not as a plaintext bnsl coordinator; does it expect TLS? drop --insecure)"
                ) from None
            raise FederationError(
                f"TLS handshake with the coordinator at {target} failed: its certificate is not from --ca, "
                "or it rejected ours (other CA, expired), or it runs --insecure"
            ) from None
        delay = 0.1
        while True:  # a busy coordinator (its admission full) is tried again within --connect-timeout
            try:
                return _session(grpc, channel, hello, on_plan, timeout, transcript, summarize, log, target, secure_key)
            except _Busy as exc:
                if time.monotonic() + delay > started + connect_timeout:
                    raise FederationError(
                        f"the coordinator at {target} stayed busy for {connect_timeout:g} s (--connect-timeout): {exc}"
                    ) from None
                log(f"the coordinator is busy ({exc}); trying again")
                time.sleep(delay)
                delay = min(2 * delay, 1.0)
    finally:
        channel.close()


def _unanswered_ping(detail) -> bool:
    """Whether a gRPC error's details say the transport was closed because the coordinator did not
    acknowledge a keep-alive ping (gRPC's "ping timeout" / "keepalive timeout")."""
    text = str(detail or "").lower()
    return "ping timeout" in text or "keepalive timeout" in text or "keepalive watchdog" in text


class _Busy(Exception):
    """The coordinator turned the call away before the plan because it was busy (gRPC
    RESOURCE_EXHAUSTED or UNAVAILABLE, or an ABORT that says ``"busy": true``): worth another try."""


def _session(grpc, channel, hello, on_plan, timeout, transcript, summarize, log, target, secure_key):
    outq: "queue.Queue[Optional[bytes]]" = queue.Queue()

    def requests():
        while True:
            item = outq.get()
            if item is None:
                return
            yield item

    def send(kind_name: str, raw: bytes, payload: Optional[bytes] = None) -> None:
        if transcript is not None:
            transcript.sent(kind_name, raw, payload)
        outq.put(raw)

    def send_control(kind: int, body: dict) -> None:
        """A control frame; the transcript records its body as sent."""
        raw = F.control(kind, body)
        if transcript is not None:
            transcript.sent(F.KIND_NAMES[kind], raw, body=body)
        outq.put(raw)

    def abort(exc: BaseException, refused: bool = False) -> None:
        """Tell the coordinator why this site stops (``refused``: the plan is beyond its limits),
        let the ABORT reach it (it ends our stream on receipt), and stop; the caller re-raises."""
        body = {"reason": public_reason(exc)}  # nothing about this site's data leaves with it
        if refused:
            body["refused"] = True
        send_control(F.ABORT, body)
        outq.put(None)
        try:
            for _ in frames:
                pass
        except grpc.RpcError:
            pass
        state["done"] = True

    stub = channel.stream_stream(METHOD)
    call = stub(requests())
    state = {"timed_out": False, "last": time.monotonic(), "done": False}

    def watchdog():
        while not state["done"]:
            time.sleep(0.2)
            if not state["done"] and time.monotonic() - state["last"] > timeout:
                state["timed_out"] = True
                call.cancel()
                return

    threading.Thread(target=watchdog, daemon=True, name="bnsl-site-watchdog").start()
    participant = None
    masker = None
    plan = None
    summary = None
    private = False
    frames = iter(call)

    def report():
        body = wire_summary(summarize(participant), private)
        send_control(F.SUMMARY, body)
        return body

    try:
        send_control(F.HELLO, hello)
        while True:
            try:
                raw = next(frames)
            except StopIteration:
                raise FederationError(
                    f"the coordinator at {target} closed the connection "
                    + ("before the run finished" if summary is None else "without confirming the outputs")
                ) from None
            state["last"] = time.monotonic()
            try:
                frame = F.decode(raw)
            except F.FrameError as exc:
                raise FederationError(f"the coordinator sent malformed bytes ({exc})") from None
            if frame.kind == F.ABORT:
                reason = F.printable(frame.body.get("reason", "no reason given"))
                if plan is None and frame.body.get("busy") is True:
                    raise _Busy(reason)
                raise FederationError(f"the coordinator stopped the run: {reason}")
            if plan is None:
                if frame.kind != F.PLAN:
                    raise FederationError(f"the coordinator sent {frame.name} before the plan (out of order)")
                plan = frame.body
                try:
                    participant = on_plan(plan)
                except BnslError as exc:
                    abort(exc, refused=isinstance(exc, RefusedError))
                    raise
                masker = _secure_sum(plan, secure_key)
                events = _events(participant)
                private = _is_private(plan, events)
                if transcript is not None:  # one-off releases made while the participant was built
                    transcript.releases(events)
                send_control(F.ACCEPT, {})
                log(f"plan accepted; running as participant {int(plan.get('index', 0)) + 1}")
                continue
            if frame.kind == F.PLAN:  # one plan per run: a second could widen what the site spends
                exc = GuardRefusedError("the coordinator sent a second plan; a site accepts one plan per run")
                _record_refusal(transcript, exc, None)
                abort(exc, refused=True)
                raise exc
            if summary is not None:
                if frame.kind == F.DONE:
                    state["done"] = True
                    outq.put(None)
                    return {"plan": plan, "summary": summary}
                raise FederationError(f"the coordinator sent {frame.name} after the run (out of order)")
            if frame.kind == F.FINISH:  # the exchanges are over without a stop broadcast (fed-moments)
                summary = report()
                continue
            if frame.kind != F.DATA:
                raise FederationError(f"the coordinator sent {frame.name} during the rounds (out of order)")
            try:
                reply = participant.handle(frame.body)
            except RefusedError as exc:  # the site's guard: beyond the accepted plan; nothing is sent
                _record_refusal(transcript, exc, frame.body)
                abort(exc, refused=True)
                raise
            except (ValueError, IndexError) as exc:
                raise FederationError(f"the coordinator sent a malformed protocol message ({exc})") from None
            if transcript is not None:  # the releases made for this reply, recorded before it leaves
                transcript.releases(_events(participant))
            if masker is not None and summable_span(reply) is not None:
                try:
                    masked = _masked(masker, reply)
                except BnslError as exc:  # out of range: tell the coordinator why, send nothing else
                    abort(exc)
                    raise
                out = F.encode(F.Frame(F.MASKED, masked))
                send("MASKED", out, reply[: HEADER.size])
            else:
                out = F.data(reply)
                send("DATA" if reply is not None else "EMPTY", out, reply)
            if reply is None and is_stop(frame.body):  # the stop broadcast: report and wait for DONE
                # (other requests that need no reply, e.g. the standardisation broadcast, get EMPTY only)
                summary = report()
    except grpc.RpcError as exc:
        if state["timed_out"]:
            raise FederationError(
                f"the coordinator at {target} sent nothing for {timeout:g} s (--timeout); gave up"
            ) from None
        code = exc.code() if hasattr(exc, "code") else None
        detail = exc.details() if hasattr(exc, "details") else str(exc)
        if _unanswered_ping(detail):  # a frozen coordinator, not a busy one: no point in trying again
            raise FederationError(
                f"the coordinator at {target} stopped answering: no reply to keep-alive pings within "
                f"{PING_TIMEOUT_S:g} s (its process is stopped, or its machine or the network is gone); gave up"
            ) from None
        if plan is None and code in (grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.UNAVAILABLE):
            raise _Busy(f"{code.name}: {detail}") from None
        raise FederationError(
            f"lost the connection to the coordinator at {target} ({getattr(code, 'name', code)}: {detail})"
        ) from None
    except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM

        try:
            send_control(F.ABORT, {"reason": f"site {hello.get('site')!r} was {interruption(exc)[0]}"})
            time.sleep(0.05)
        finally:
            call.cancel()
        raise
    except BaseException:
        if not state["done"]:
            call.cancel()
        raise
    finally:
        state["done"] = True
        outq.put(None)

"""The coordinator's side of a networked run: a gRPC server that the sites dial into.

:class:`NetworkFleet` is a fleet like :class:`~bnsl_cli.federated.fleet.LocalFleet`: ``exchange(msg)``
sends one encoded broadcast to every site and returns their encoded replies in site order. Before
that, :meth:`NetworkFleet.gather` waits for the sites' HELLOs and orders them by name (under mutual TLS
the name in each site's certificate, which its HELLO must declare), and
:meth:`NetworkFleet.start` sends each its PLAN and waits for every ACCEPT; :meth:`finish` collects the
sites' end-of-run SUMMARY frames and :meth:`close` ends the run (DONE on success, ABORT with a reason
otherwise). Any fault — a site that disconnects, times out, sends a malformed, out-of-order or
unexpected frame — raises :class:`FederationError` naming the site, and every other site receives
ABORT with the same reason.

Every reply is checked against the broadcast before the coordinator sees it
(:func:`~bnsl_cli.federated.messages.validate_reply`): its kind must answer the request's kind, its
header must carry the broadcast's round, the site's index and ``d``, its length must match its
declared entry count (so a truncated or padded message is refused here), its indices must lie in
the matrix, and its values (when not masked by a secure sum) must be finite and in range — within
what the site's rows can give by the run plan's public facts once ``run`` has set the fleet's
``limits`` (:mod:`bnsl_cli.federated.reply_limits`). A bad reply stops the run
(:class:`FederationError`, exit 6) naming the site. Masked replies are checked only as their sum
(against the sum of the sites' limits); a sum beyond it stops the run naming no site.
"""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

import numpy as np

from bnsl_cli.errors import BnslError, interruption
from bnsl_cli.federated.messages import (
    is_stop,
    same_but_sender,
    summable_span,
    validate_reply,
    with_sender,
)
from bnsl_cli.federated.secure_sum import ALL_SITES, unmask_sum
from bnsl_cli.federated.traffic import Traffic
from bnsl_cli.net import frames as F
from bnsl_cli.net.common import (
    METHOD,
    SERVER_OPTIONS,
    SERVICE,
    ColumnMismatchError,
    FederationError,
    SiteRefusedError,
    need_grpc,
    unpack_events,
)
from bnsl_cli.net.identity import CLIENT, SERVER, identity_of, peer_identity

__all__ = ["NetworkFleet", "SiteInfo", "unmask_replies"]

#: Under secure aggregation the sites send their summable replies (:func:`~bnsl_cli.federated.messages.summable_span`
#: says which bytes) masked, and the fleet hands the coordinator the sum as site 1's reply and zeros for
#: the others, every header's sender set to :data:`~bnsl_cli.federated.secure_sum.ALL_SITES`: the
#: coordinator never holds one site's values.

_CLOSE = object()
#: connections of one certificate identity that may wait for their HELLO at a time
PENDING_PER_IDENTITY = 2
#: gRPC calls admitted beyond the sites and the waiting connections (those being ended)
_MARGIN = 16
_HELLO_KEYS = {"site": str, "columns": list, "rows": int}


@dataclass
class SiteInfo:
    """One connected site: its HELLO and its link (inbox of decoded frames, outbox of raw frames)."""

    peer: str
    inbox: "queue.Queue" = field(default_factory=queue.Queue)
    outbox: "queue.Queue" = field(default_factory=queue.Queue)
    hello: Optional[dict] = None
    index: int = -1
    closed: bool = False
    #: the certificate identity of the connection (mutual TLS; ``None`` in plaintext) and when
    #: the connection arrived (monotonic clock): its HELLO is due within the handshake deadline
    identity: Optional[object] = None
    since: float = 0.0
    #: when the last frame from this site arrived (monotonic clock), and the seconds it took to
    #: answer the broadcasts so far as the coordinator saw them (network included)
    arrived: float = 0.0
    reply_s: float = 0.0

    @property
    def name(self) -> str:
        return (self.hello or {}).get("site") or self.peer

    @property
    def who(self) -> str:
        """The connection as the log names it: its certificate identity, else its address."""
        if self.identity is not None:
            return f"certificate {self.identity.name!r} ({self.peer})"
        return self.peer

    def label(self) -> str:
        return f"site {self.index + 1} ({self.name})" if self.index >= 0 else f"site {self.name}"

    def send(self, raw: bytes) -> None:
        if not self.closed:
            self.outbox.put(raw)

    def end(self, raw: Optional[bytes] = None) -> None:
        if not self.closed:
            if raw is not None:
                self.outbox.put(raw)
            self.outbox.put(_CLOSE)
            self.closed = True


class NetworkFleet:
    """A gRPC server on ``listen`` (``HOST:PORT``; port 0 picks a free one, see :attr:`port`) that
    hosts ``n_sites`` remote participants. ``credentials`` is a
    :class:`~bnsl_cli.net.tls.PartyCredentials` (mutual TLS: sites must present a
    certificate from the same CA) or ``None`` for plaintext (loopback only; the CLI enforces it).
    ``timeout`` bounds every wait for a site's frame (seconds). ``secure_sum``: the plan asks for
    secure aggregation, with the fixed-point scale ``scale_bits`` (the sites then mask their summable
    replies and this fleet hands the coordinator only their sums).

    Admission (so that idle or unauthenticated connections cannot keep the real sites out): a
    connection must send its HELLO within ``handshake_timeout`` seconds of arriving or it is
    dropped (and a TLS handshake not finished by then is dropped by gRPC); at most
    ``max_pending`` connections wait for their HELLO at a time — one more drops the oldest waiting
    (its site is told the coordinator is busy and retries) — and at most
    :data:`PENDING_PER_IDENTITY` of one certificate identity; the gRPC server admits ``n_sites +
    max_pending`` concurrent calls and a margin, so waiting connections never take a joined site's
    capacity. Under mutual TLS every connection is bound to its certificate identity
    (:mod:`.identity`): a site's name is its certificate's (a HELLO that declares another name is
    refused, so no certificate can take another site's name or place in the order), one identity
    holds at most one participant slot, the coordinator's own certificate and certificates without
    the client role are refused, and ``allow_sites`` (names) restricts who may join."""

    def __init__(self, listen: str, n_sites: int, credentials=None, timeout: float = 120.0,
                 log: Optional[Callable[[str], None]] = None, handshake_timeout: float = 10.0,
                 max_pending: int = 64, allow_sites: Optional[Sequence[str]] = None, *,
                 secure_sum: bool = False, scale_bits: int = 32):
        grpc = need_grpc()
        from concurrent.futures import ThreadPoolExecutor

        self.n = int(n_sites)
        self.handshake_timeout = float(handshake_timeout)
        self.max_pending = max(int(max_pending), 1)
        self.allow_sites = None if allow_sites is None else frozenset(allow_sites)
        self.tls = credentials is not None
        #: the coordinator's own certificate (its fingerprint goes into the report)
        self.identity = None
        if credentials is not None:

            self.identity = identity_of(credentials.cert)
        self.workers = self.n
        #: the bytes of every message sent to a site and of every reply (masked or not) it sent,
        #: as they crossed: the encoded messages the DATA frames carry
        self.traffic = Traffic(self.n)
        self.secure_sum = bool(secure_sum)
        self.scale_bits = int(scale_bits)
        #: the run's reply limits (:class:`~bnsl_cli.federated.reply_limits.ReplyLimits`; ``run`` sets
        #: them from the plan): the values of every reply in the clear, and the sums of masked ones
        self.limits = None
        #: ``observer(site_index, frame)`` for every frame a site sent that the coordinator reads (an audit
        #: log, a measurement, a test that records the MASKED bodies): called before the frame is used
        self.frame_observers: list = []
        self._stopped = False  # the last exchange was the stop broadcast (the sites then send SUMMARY)
        self.timeout = float(timeout)
        self.log = log or (lambda _msg: None)
        self.sites: list[SiteInfo] = []
        #: every connection that ever reached the handler (joined or not): :meth:`close` ends each,
        #: so no site waits for its --timeout and no handler thread outlives the fleet
        self._links: list[SiteInfo] = []
        self._arrivals: "queue.Queue[SiteInfo]" = queue.Queue()
        self._accepting = True
        self._closed = False
        self._lock = threading.Lock()
        # every call holds one handler thread for its life: room for the sites, the connections
        # waiting for their HELLO and those being ended
        capacity = self.n + self.max_pending + _MARGIN
        self._server = grpc.server(
            ThreadPoolExecutor(max_workers=capacity, thread_name_prefix="bnsl-net"),
            options=SERVER_OPTIONS + [("grpc.server_handshake_timeout_ms", max(int(self.handshake_timeout * 1000), 1))],
            maximum_concurrent_rpcs=capacity,
        )
        handler = grpc.stream_stream_rpc_method_handler(self._session)
        self._server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(SERVICE, {METHOD.rsplit("/", 1)[1]: handler}),)
        )
        try:
            if credentials is None:
                port = self._server.add_insecure_port(listen)
            else:
                creds = grpc.ssl_server_credentials(
                    [(credentials.key, credentials.cert)], root_certificates=credentials.ca,
                    require_client_auth=True,
                )
                port = self._server.add_secure_port(listen, creds)
        except RuntimeError:
            port = 0
        if not port:
            raise FederationError(f"--listen {listen}: cannot listen there (port in use or address not on this machine)")
        self.port = int(port)
        self._server.start()

    # ---- the gRPC handler: one call per site, kept for the whole run -------------------------
    def _session(self, request_iterator, context):
        site = SiteInfo(peer=context.peer(), since=time.monotonic())
        refused = None
        if self.tls:

            site.identity = peer_identity(context)
            refused = self._refuse_identity(site.identity)
        with self._lock:
            self._links.append(site)
            closing = self._closed  # close() has run: end at once
        if refused is not None:
            self.log(f"refused a connection from {site.who}: {refused}")
            yield F.control(F.ABORT, {"reason": refused})
            return

        def reader():
            try:
                for raw in request_iterator:
                    site.arrived = time.monotonic()
                    try:
                        site.inbox.put(F.decode(raw))
                    except F.FrameError as exc:
                        site.inbox.put(("bad", str(exc)))
                        return
                site.inbox.put(("closed", "closed its connection"))
            except Exception:  # grpc.RpcError when the call is cancelled or the peer vanished
                site.inbox.put(("closed", "disconnected"))

        context.add_callback(lambda: site.inbox.put(("closed", "disconnected")))
        threading.Thread(target=reader, daemon=True, name="bnsl-net-reader").start()
        with self._lock:
            accepting = self._accepting
        if closing:
            return
        if not accepting:
            yield F.control(F.ABORT, {"reason": "the coordinator is not accepting sites (run full or over)"})
            return
        self._arrivals.put(site)
        while True:
            item = site.outbox.get()
            if item is _CLOSE:
                return
            yield item

    def _refuse_identity(self, ident) -> Optional[str]:
        """Why a connection with certificate identity ``ident`` may not join (``None``: it may)."""

        if ident is None:
            return "no client certificate identity (mutual TLS needs a site certificate)"
        if self.identity is not None and (ident.sha256 == self.identity.sha256 or ident.name == self.identity.name):
            return f"the coordinator's own certificate ({ident.name!r}) cannot join as a site"
        if not ident.may(CLIENT) or (ident.roles is not None and SERVER in ident.roles and CLIENT not in ident.roles):
            return f"certificate {ident.name!r} is not a site certificate (no clientAuth role)"
        if self.allow_sites is not None and ident.name not in self.allow_sites:
            return f"certificate {ident.name!r} is not among --allow-sites ({', '.join(sorted(self.allow_sites))})"
        return None

    # ---- receiving --------------------------------------------------------------------------
    def _next(self, site: SiteInfo, deadline: float, waiting_for: str) -> F.Frame:
        left = deadline - time.monotonic()
        try:
            item = site.inbox.get(timeout=max(left, 0.0))
        except queue.Empty:
            raise self._fail(site, f"timed out after {self.timeout:g} s waiting for {waiting_for} (--timeout)")
        if isinstance(item, tuple):
            what, detail = item
            if what == "bad":
                raise self._fail(site, f"sent malformed bytes ({detail})")
            raise self._fail(site, f"{detail} while the coordinator waited for {waiting_for}")
        if item.kind == F.ABORT:
            reason = F.printable(item.body.get("reason", "no reason given"))
            if item.body.get("refused") is True:  # the plan is beyond the site's limits (exit 5)
                raise self._fail(site, f"refused the run: {reason}", tell_site=False, cls=SiteRefusedError)
            raise self._fail(site, f"aborted the run: {reason}", tell_site=False)
        for observe in self.frame_observers:
            observe(site.index, item)
        return item

    def _fail(self, site: Optional[SiteInfo], why: str, tell_site: bool = True, cls=FederationError):
        msg = f"{site.label()} {why}" if site is not None else why
        for s in self.sites:
            if s is site and not tell_site:
                s.end()
            else:
                s.end(F.control(F.ABORT, {"reason": msg}))
        if site is not None and site not in self.sites:
            site.end(F.control(F.ABORT, {"reason": msg}) if tell_site else None)
        return cls(msg)

    # ---- the run ----------------------------------------------------------------------------
    def gather(self, join_timeout: float = 600.0) -> list[dict]:
        """Wait for ``n_sites`` valid HELLOs; order the sites by declared name; check they have the
        same column names (any order: each site reorders its columns to the plan's, site 1's).
        Returns the HELLO bodies in site order."""
        deadline = time.monotonic() + join_timeout
        pending: list[tuple[SiteInfo, float]] = []  # connections whose HELLO is due, with their deadline
        while len(self.sites) < self.n:
            now = time.monotonic()
            if now >= deadline:
                raise self._fail(None, f"only {len(self.sites)} of {self.n} sites joined within {join_timeout:g} s")
            try:  # the new connections (a bounded batch: a flood of them cannot starve the HELLOs)
                for _ in range(self.max_pending + 1):
                    new = self._arrivals.get(timeout=0.02 if pending else min(0.2, deadline - now))
                    pending.append((new, new.since + self.handshake_timeout))
                    self._limit_pending(pending, new)
            except queue.Empty:
                pass
            still = []
            for i, (site, due) in enumerate(pending):
                # a bad first contact is not a run failure: that connection is dropped, the others wait
                try:
                    item = site.inbox.get_nowait()
                except queue.Empty:
                    if time.monotonic() < due:
                        still.append((site, due))
                        continue
                    item = ("closed", f"sent no HELLO within {self.handshake_timeout:g} s (handshake deadline)")
                self._admit(site, item)
                if len(self.sites) == self.n:
                    still += pending[i + 1:]
                    break
            pending = still
            self._drop_departed()
        for site, _ in pending:
            site.end(F.control(F.ABORT, {"reason": "the run is full"}))
        with self._lock:
            self._accepting = False
        return self._ordered_hellos()

    def _ordered_hellos(self) -> list[dict]:
        """The joined sites numbered in the order of their names, checked to hold the same column
        names (any order); their HELLO bodies in that order."""
        self.sites.sort(key=lambda s: s.name)
        for k, s in enumerate(self.sites):
            s.index = k
        first = self.sites[0].hello["columns"]
        for s in self.sites[1:]:
            if set(s.hello["columns"]) != set(first) or len(s.hello["columns"]) != len(first):
                raise self._fail(
                    s, f"has different columns from site 1 ({self.sites[0].name}): "
                    f"{_diff(first, s.hello['columns'])}", cls=ColumnMismatchError,
                )
        return [s.hello for s in self.sites]

    def _limit_pending(self, pending: list, new: SiteInfo) -> None:
        """Drop the oldest waiting connection of ``new``'s certificate identity beyond
        :data:`PENDING_PER_IDENTITY`, then the oldest of all beyond ``max_pending`` — in each case
        the oldest that has not said anything yet, if any: a flood of silent connections cannot
        crowd out a real site, which says HELLO as soon as it arrives (a site dropped this way is
        told the coordinator is busy, and retries)."""
        busy = {"reason": "the coordinator is busy (too many connections waiting); try again", "busy": True}

        def victim(among: list) -> int:  # the oldest that has said nothing yet, else the oldest
            return next((k for k in among if pending[k][0].inbox.empty()), among[0])

        if new.identity is not None:
            mine = [k for k, (s, _) in enumerate(pending) if s.identity is not None and s.identity.name == new.identity.name]
            if len(mine) > PENDING_PER_IDENTITY:
                old, _ = pending.pop(victim(mine))
                self.log(f"dropped a waiting connection from {old.who}: more than {PENDING_PER_IDENTITY} "
                         "connections of that certificate waiting")
                old.end(F.control(F.ABORT, busy))
        while len(pending) > self.max_pending:
            old, _ = pending.pop(victim(list(range(len(pending)))))
            old.end(F.control(F.ABORT, busy))

    def _drop_departed(self) -> None:
        """Before the plan goes out, a joined site that leaves (or says anything) is dropped and
        may join again; the run has not started, nothing is lost."""
        for site in list(self.sites):
            try:
                item = site.inbox.get_nowait()
            except queue.Empty:
                continue
            why = item[1] if isinstance(item, tuple) else (
                f"aborted: {F.printable(item.body.get('reason', ''))}" if item.kind == F.ABORT
                else f"sent {item.name} before the plan (out of order)"
            )
            self.sites.remove(site)
            site.end(F.control(F.ABORT, {"reason": f"dropped before the run started: {why}"}))
            self.log(f"site {site.name!r} left before the run started ({why}); waiting ({len(self.sites)}/{self.n})")

    def _admit(self, site: SiteInfo, item) -> None:
        """Add ``site`` if ``item`` (its first frame) is a valid HELLO; otherwise drop the connection."""
        if isinstance(item, tuple):
            self.log(f"ignored a connection from {site.who}: {item[1]}")
            site.end(F.control(F.ABORT, {"reason": str(item[1])}))
            return
        why = self._bad_hello(item)
        if why is None:
            site.hello = item.body
            if site.identity is not None and site.name != site.identity.name:
                # a site's name is its certificate's: it orders the sites and names them in the plan
                why = (f"this connection declares site name {site.name!r} but its certificate is {site.identity.name!r}; "
                       "a site's name must be its certificate's name; refused")
            elif site.identity is not None and any(
                s.identity is not None and s.identity.name == site.identity.name for s in self.sites
            ):
                holder = next(s for s in self.sites if s.identity is not None and s.identity.name == site.identity.name)
                why = (f"certificate {site.identity.name!r} already holds a participant slot (as site {holder.name!r}); "
                       "one certificate, one site")
            elif any(s.name == site.name for s in self.sites):
                why = f"a site named {site.name!r} already joined; give each site a distinct --site-id"
        if why is not None:
            site.hello = None
            self.log(f"refused a connection from {site.who}: {why}")
            site.end(F.control(F.ABORT, {"reason": why}))
            return
        self.sites.append(site)
        as_ = f" as certificate {site.identity.name!r}" if site.identity is not None else ""
        self.log(f"site {site.name!r} joined from {site.peer}{as_} ({len(self.sites)}/{self.n})")

    @staticmethod
    def _bad_hello(frame: F.Frame) -> Optional[str]:
        if frame.kind != F.HELLO:
            return f"expected HELLO as the first frame, got {frame.name}"
        for key, typ in _HELLO_KEYS.items():
            if not isinstance(frame.body.get(key), typ):
                return f"HELLO without a valid {key!r}"
        if not all(isinstance(c, str) for c in frame.body["columns"]) or not frame.body["columns"]:
            return "HELLO with invalid column names"
        name = frame.body["site"]
        if not name or len(name) > 200 or F.printable(name) != name:
            return "HELLO with an invalid site name (1–200 printable characters)"
        if frame.body["rows"] < 1:
            return "HELLO with no rows"
        return None

    def start(self, plan_for: Callable[[int], dict]) -> None:
        """Send each site its PLAN (``plan_for(index)``) and wait for every ACCEPT (a refusal
        raises :class:`SiteRefusedError` naming the site)."""
        for s in self.sites:
            s.send(F.control(F.PLAN, plan_for(s.index)))
        deadline = time.monotonic() + self.timeout
        for s in self.sites:
            frame = self._next(s, deadline, "its answer to the plan")
            if frame.kind != F.ACCEPT:
                raise self._fail(s, f"answered the plan with {frame.name} (out of order)")

    def __len__(self) -> int:
        return len(self.sites)

    @property
    def connections(self) -> int:
        """How many connections have reached the handler so far (joined, waiting for their HELLO or
        refused)."""
        with self._lock:
            return len(self._links)

    def exchange(self, msg: bytes) -> list[Optional[bytes]]:
        self._stopped = is_stop(msg)
        raw = F.data(msg)
        sent = time.monotonic()
        for s in self.sites:
            s.send(raw)
        deadline = sent + self.timeout
        out: list[Optional[bytes]] = []
        masked: list[bytes] = []
        for s in self.sites:
            frame = self._next(s, deadline, "its reply")
            if frame.kind not in (F.DATA, F.EMPTY, F.MASKED):
                raise self._fail(s, f"sent a {frame.name} frame where a reply was due (out of order)")
            if (frame.kind == F.MASKED) != (self.secure_sum and _summable(frame.body)):
                raise self._fail(
                    s, "sent a masked reply outside secure aggregation" if frame.kind == F.MASKED
                    else "sent a summable reply in the clear under secure aggregation"
                )
            s.reply_s += max(s.arrived - sent, 0.0)
            reply = frame.body
            # a masked reply's values are checked by the site (finite, in the fixed-point range) and,
            # once unmasked, as their sum against the sites' limits
            why = validate_reply(msg, reply, s.index, values=frame.kind != F.MASKED, limits=self.limits)
            if why is not None:
                raise self._fail(s, why)
            out.append(reply)
            if frame.kind == F.MASKED:
                masked.append(reply)
        self.traffic.count(msg, out)
        if masked:
            try:
                out = unmask_replies(out, self.scale_bits)
            except ValueError as exc:
                raise self._fail(None, f"the sites' masked replies do not add up ({exc})") from None
            if self.limits is not None:
                why = self.limits.check_sum(msg, out[0])
                if why is not None:
                    raise self._fail(None, why)
        if self.limits is not None:
            self.limits.seen(msg, out)
        return out

    def finish(self) -> list[dict]:
        """The sites' end-of-run summaries, in site order: SUMMARY frames sent after the stop
        broadcast, or asked for with FINISH when the method has none (fed-moments). Their packed
        privacy events are unpacked; a private site sends no ``compute_s`` (its timing is no
        release), so the summary gets the reply time this coordinator observed (network included)."""
        if not self._stopped:  # no stop broadcast (fed-moments): ask for the summaries
            for s in self.sites:
                s.send(F.control(F.FINISH, {}))
        deadline = time.monotonic() + self.timeout
        out = []
        for s in self.sites:
            frame = self._next(s, deadline, "its summary")
            if frame.kind != F.SUMMARY:
                raise self._fail(s, f"sent {frame.name} where its SUMMARY was due (out of order)")
            summary = dict(frame.body)
            if isinstance(summary.get("events"), dict):
                try:
                    summary["events"] = unpack_events(summary["events"])
                except ValueError as exc:
                    raise self._fail(s, f"sent a malformed SUMMARY ({exc})") from None
            if "compute_s" not in summary:
                summary["compute_s"] = s.reply_s
                summary["compute_s_observed"] = True
            out.append(summary)
        return out

    def abort(self, reason: str) -> None:
        """Tell every site the run stopped (``reason`` is shown to them)."""
        for s in self.sites:
            s.end(F.control(F.ABORT, {"reason": reason}))

    def close(self, ok: bool = False, grace: float = 2.0) -> None:
        """DONE (``ok``) or ABORT to every site still linked — joined sites and connections still
        waiting to be admitted alike — then stop the server."""
        for s in self.sites:
            s.end(F.control(F.DONE, {}) if ok else F.control(F.ABORT, {"reason": "the coordinator stopped"}))
        with self._lock:
            self._accepting = False
            self._closed = True
            links = list(self._links)
        for s in links:
            s.end(F.control(F.ABORT, {"reason": "the coordinator stopped"}))
        while True:
            try:
                self._arrivals.get_nowait().end(F.control(F.ABORT, {"reason": "the coordinator stopped"}))
            except queue.Empty:
                break
        self._server.stop(grace).wait(grace + 1.0)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close(ok=False)


def _summable(reply: Optional[bytes]) -> bool:
    return reply is not None and summable_span(reply) is not None


def stopped_because(exc: BaseException) -> str:
    """What the sites are told when the coordinator's run ends on ``exc`` (its ABORT's reason):
    an interruption (Ctrl-C, SIGTERM), a :class:`~bnsl_cli.errors.BnslError` with its message, or an
    internal error by its type alone."""
    if isinstance(exc, KeyboardInterrupt):
        return f"the coordinator was {interruption(exc)[0]}"
    if isinstance(exc, BnslError):
        return f"the coordinator stopped: {exc}"
    return f"the coordinator stopped on an internal error ({type(exc).__name__})"


def unmask_replies(replies: list[bytes], scale_bits: int = 32) -> list[bytes]:
    """Masked summable replies (the same clear prefix up to the sender) → the sum as the first
    site's reply and zeros for the others, every sender field :data:`ALL_SITES`: the coordinator
    sums them to the same total and never holds one site's values."""

    start = summable_span(replies[0])[0]
    first = replies[0]
    for r in replies[1:]:
        if len(r) != len(first) or not same_but_sender(r[:start], first[:start]):
            raise ValueError("masked replies of different shapes")
    vals = [np.frombuffer(r, dtype="<u8", offset=start) for r in replies]
    total = unmask_sum(vals, scale_bits)
    prefix = with_sender(first[:start], ALL_SITES)
    zeros = np.zeros_like(total).astype("<f8").tobytes()
    return [prefix + (total.astype("<f8").tobytes() if k == 0 else zeros) for k in range(len(replies))]


def _diff(a: list, b: list) -> str:
    missing = [x for x in a if x not in set(b)]
    extra = [x for x in b if x not in set(a)]
    what = []
    if missing:
        what.append("lacks " + ", ".join(map(repr, missing[:5])))
    if extra:
        what.append("has extra " + ", ".join(map(repr, extra[:5])))
    return "; ".join(what) or "repeated column names"


"""The coordinator's transport over Flower: :class:`FlowerFleet`.

A :class:`~bnsl_cli.net.fleet.NetworkFleet` whose frames travel through a Flower ``Grid`` (the
ServerApp's handle on the SuperLink) instead of bnsl's own gRPC service. Everything above the
transport is the network fleet's own code, unchanged: the HELLO checks and the order of the sites
(by declared name), the PLAN/ACCEPT handshake, ``exchange`` (every reply validated against the
broadcast and the run's reply limits before the coordinator sees it, masked replies only as their
unmasked sum, the traffic meter), ``finish`` (the sites' SUMMARY frames) and the ABORT on any fault.

Flower is request–reply: the ServerApp pushes messages and pulls their replies. A frame the network
fleet queues for a site (:meth:`SiteInfo.send`) waits in the site's outbox until the fleet next waits
for a frame (:meth:`_next`); then every queued frame goes out, one Flower message per site per batch
(:func:`~.envelope.request_content`, numbered 1, 2, 3, … per site), through
``grid.push_messages`` and ``grid.pull_messages`` (polled every ``poll_s``, bounded by the fleet's ``timeout``), and the frames of each reply land in the
site's inbox, where the network fleet reads them as if they had come on its stream. A site whose
ClientApp failed (Flower's error reply) or that sent no reply in time is reported as disconnected,
and the run stops naming it.
"""

from __future__ import annotations

import os
import queue
import time
from collections.abc import Callable
from dataclasses import dataclass

from bnsl_cli.federated.traffic import Traffic
from bnsl_cli.net import frames as F
from bnsl_cli.net.common import FederationError
from bnsl_cli.net.fleet import _CLOSE, NetworkFleet, SiteInfo
from bnsl_cli.net.flower import envelope as E

__all__ = ["FlowerFleet", "FlowerLink"]

#: the outbox item that asks a site for its HELLO (not a frame: a site speaks only when asked)
_HELLO = object()


@dataclass
class FlowerLink(SiteInfo):
    """One SuperNode as the fleet reaches it: its Flower node id, its message count and whether
    its link was ended (DONE or ABORT sent)."""

    node_id: int = 0
    seq: int = 0
    gone: bool = False


class FlowerFleet(NetworkFleet):
    """The sites of a Flower run, reached through ``grid`` (a Flower ``Grid``). ``n_sites``: the
    SuperNodes to wait for (``None``: every node connected when :meth:`gather` starts);
    ``timeout``: seconds for each batch of replies; ``secure_sum``/``scale_bits``: as
    :class:`~bnsl_cli.net.fleet.NetworkFleet`. ``run_tag``: this run's tag in every request (default:
    random)."""

    def __init__(self, grid, n_sites: int | None = None, *, timeout: float = 300.0,
                 log: Callable[[str], None] | None = None, secure_sum: bool = False, scale_bits: int = 32,
                 run_tag: str | None = None, poll_s: float = 0.1):
        # NetworkFleet's state without its gRPC server: the inherited methods read these
        self.grid = grid
        self.n = 0 if n_sites is None else int(n_sites)
        self.wanted = n_sites
        self.timeout = float(timeout)
        self.log = log or (lambda _msg: None)
        self.secure_sum = bool(secure_sum)
        self.scale_bits = int(scale_bits)
        self.limits = None
        self.frame_observers: list = []  # as NetworkFleet's: every frame a site sent, before it is used
        self.tls = False  # Flower's own TLS (SuperLink ↔ SuperNode) is the transport's, not bnsl's
        self.identity = None
        self.allow_sites = None
        self.handshake_timeout = self.timeout
        self.max_pending = 1
        self.workers = max(self.n, 1)
        self.traffic = Traffic(self.n)
        self.sites: list = []
        self._links: list = []
        self._arrivals: queue.Queue = queue.Queue()
        self._accepting = False
        self._closed = False
        self._stopped = False
        self.run_tag = run_tag or os.urandom(16).hex()
        self.poll_s = float(poll_s)
        #: Flower messages sent and their round trips (seconds), for the overhead measurements
        self.batches: list = []
        import threading

        self._lock = threading.Lock()

    # ---- the Flower side --------------------------------------------------------------------
    def _request(self, link: FlowerLink, item):
        from flwr.app import Message

        link.seq += 1
        if item is _HELLO:
            content = E.request_content(E.HELLO, self.run_tag, link.seq)
        else:
            content = E.request_content(E.FRAME, self.run_tag, link.seq, item)
        return Message(content=content, dst_node_id=int(link.node_id), message_type=E.MESSAGE_TYPE)

    def flush(self, deadline: float) -> None:
        """Send every queued frame (one message per site per batch, in order) and put the frames of
        the replies into the sites' inboxes."""
        while True:
            batch = []
            for link in self._links:
                if link.gone:
                    continue
                try:
                    item = link.outbox.get_nowait()
                except queue.Empty:
                    continue
                if item is _CLOSE:
                    link.gone = True
                    continue
                batch.append((link, item))
            if not batch:
                return
            by_node = {link.node_id: link for link, _ in batch}
            messages = [self._request(link, item) for link, item in batch]
            left = max(deadline - time.monotonic(), 0.5)
            t0 = time.monotonic()
            replies = self.round_trip(messages, left)
            now = time.monotonic()
            self.batches.append((len(messages), now - t0))
            answered = set()
            for reply in replies:
                link = by_node.get(int(reply.metadata.src_node_id))
                if link is None or link.node_id in answered:
                    continue  # not ours, or a second reply: ignored
                answered.add(link.node_id)
                link.arrived = now
                if reply.has_error():
                    link.inbox.put(("closed", f"failed in its ClientApp ({F.printable(reply.error.reason, 500)})"))
                    continue
                try:
                    raws = E.read_reply(reply.content)
                except ValueError as exc:
                    link.inbox.put(("bad", str(exc)))
                    continue
                for raw in raws:
                    try:
                        link.inbox.put(F.decode(raw))
                    except F.FrameError as exc:
                        link.inbox.put(("bad", str(exc)))
                        break
            for link, item in batch:
                if link.node_id not in answered:
                    link.inbox.put(("closed", f"sent no reply within {left:.0f} s (timeout)"))

    def round_trip(self, messages: list, timeout: float) -> list:
        """Push ``messages`` and pull their replies every ``poll_s`` seconds until all came or
        ``timeout`` passed (Flower's own ``send_and_receive`` pulls every 3 s: a second or more of
        waiting per exchange that bnsl's many-round methods would pay every round)."""
        ids = set(self.grid.push_messages(messages))
        end = time.monotonic() + timeout
        got: list = []
        while ids:
            for reply in self.grid.pull_messages(list(ids)):
                got.append(reply)
                ids.discard(reply.metadata.reply_to_message_id)
            if not ids or time.monotonic() >= end:
                break
            time.sleep(self.poll_s)
        return got

    def _next(self, site, deadline: float, waiting_for: str) -> F.Frame:
        if site.inbox.empty():
            self.flush(deadline)
        if site.inbox.empty():  # nothing was queued for it: nothing will come
            site.inbox.put(("closed", "has nothing to answer"))
        return super()._next(site, deadline, waiting_for)

    # ---- the run ----------------------------------------------------------------------------
    def gather(self, join_timeout: float = 600.0) -> list[dict]:
        """Wait for the SuperNodes (``n_sites`` of them, or those connected now), ask each for its
        HELLO, check them as :class:`~bnsl_cli.net.fleet.NetworkFleet` does, order the sites by
        declared name and check their columns. Returns the HELLO bodies in site order."""
        deadline = time.monotonic() + join_timeout
        while True:
            nodes = sorted(int(n) for n in self.grid.get_node_ids())
            if self.wanted is None and nodes:
                break
            if self.wanted is not None and len(nodes) >= self.wanted:
                break
            if time.monotonic() >= deadline:
                want = self.wanted if self.wanted is not None else 1
                raise FederationError(f"only {len(nodes)} of {want} SuperNodes connected within {join_timeout:g} s")
            time.sleep(1.0)
        if self.wanted is not None and len(nodes) > self.wanted:
            raise FederationError(
                f"{len(nodes)} SuperNodes are connected to the SuperLink but the run asks for {self.wanted} sites; "
                "every connected node takes part in a bnsl run (set participants to 0 for all of them)"
            )
        self.n = len(nodes)
        self.workers = self.n
        self.traffic = Traffic(self.n)
        self._links = [FlowerLink(peer=f"node {nid}", node_id=nid, since=time.monotonic()) for nid in nodes]
        for link in self._links:
            link.send(_HELLO)
        wait = time.monotonic() + self.timeout
        for link in self._links:
            frame = self._next(link, wait, "its HELLO")
            said: list = []
            log = self.log
            self.log = said.append
            try:
                self._admit(link, frame)
            finally:
                self.log = log
            for line in said:
                log(line)
            if link not in self.sites:
                raise self._fail(link, f"was not admitted: {said[-1] if said else 'invalid HELLO'}", tell_site=False)
        return self._ordered_hellos()

    def _flush_quietly(self) -> None:
        """Deliver the last frames (ABORT, DONE) while the run ends: a failure to reach a site then
        is logged, never raised over the error that ended the run."""
        try:
            self.flush(time.monotonic() + min(self.timeout, 30.0))
        except Exception as exc:  # noqa: BLE001 - the run is over either way
            self.log(f"could not tell every site that the run ended ({type(exc).__name__}: {exc})")

    def abort(self, reason: str) -> None:
        super().abort(reason)
        self._flush_quietly()

    def close(self, ok: bool = False, grace: float = 2.0) -> None:
        """DONE (``ok``) or ABORT to every site still linked, sent at once (no server to stop)."""
        if self._closed:
            return
        self._closed = True
        for s in self._links:
            s.end(F.control(F.DONE, {}) if ok else F.control(F.ABORT, {"reason": "the coordinator stopped"}))
        self._flush_quietly()

    def __len__(self) -> int:
        return len(self.sites)

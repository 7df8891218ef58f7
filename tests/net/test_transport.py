"""The gRPC transport in one process: sites in threads, the coordinator's fleet here (loopback)."""

import socket
import threading
import time

import numpy as np
import pytest

pytest.importorskip("grpc")
pytest.importorskip("cryptography")

from bnsl_cli.errors import RefusedError  # noqa: E402
from bnsl_cli.federated.methods.admm.coordinator import Coordinator, PenaltySchedule  # noqa: E402
from bnsl_cli.federated.fleet import LocalFleet  # noqa: E402
from bnsl_cli.federated.messages import SparseEntries, SparseUpdate  # noqa: E402
from bnsl_cli.net import frames as F  # noqa: E402
from bnsl_cli.net.common import ColumnMismatchError, FederationError, SiteRefusedError  # noqa: E402
from bnsl_cli.federated.messages import validate_reply as check_reply  # noqa: E402
from bnsl_cli.net.fleet import NetworkFleet  # noqa: E402
from bnsl_cli.net.site import run_site  # noqa: E402
from bnsl_cli.net.tls import TLSError, load_party, make_certs  # noqa: E402
from bnsl_cli.net.transcript import Transcript  # noqa: E402
from bnsl_cli.federated.methods.admm.site import SparseParticipant  # noqa: E402
from bnsl_cli.federated.methods.admm.protocol import run_admm  # noqa: E402
from tests._sim import simulated_tables  # noqa: E402

D, P, ROUNDS = 8, 3, 12


@pytest.fixture(scope="module")
def tables():
    return simulated_tables(D, P, 300, 3)[1]


def _parts(tables):
    n = sum(t.n for t in tables)
    return [SparseParticipant(k, t.X, n, 0.005, 20) for k, t in enumerate(tables)]


def _coord():
    return Coordinator(D, P, PenaltySchedule(1e-3, 1e-3, 1.75, 1.25, 1e16), snap=0.05)


class Sites:
    """Run one site per participant in threads; collect each site's result or exception."""

    def __init__(self, fleet_port, tables, parts, *, creds=None, names=None, columns=None, on_plan=None,
                 timeout=20.0, transcripts=None):
        self.results, self.errors, self.threads = {}, {}, []
        for k, t in enumerate(tables):
            name = (names or [f"site{i}" for i in range(len(tables))])[k]
            hello = {"site": name, "columns": list(columns[k] if columns else t.names), "rows": t.n}

            def plan_cb(plan, k=k):
                if on_plan is not None:
                    on_plan(k, plan)
                return parts[plan["index"]]

            th = threading.Thread(target=self._run, args=(k, fleet_port, hello, plan_cb, creds, timeout,
                                                          None if transcripts is None else transcripts[k]))
            th.start()
            self.threads.append(th)

    def _run(self, k, port, hello, cb, creds, timeout, tr):
        try:
            self.results[k] = run_site(f"127.0.0.1:{port}", hello, cb, credentials=creds, timeout=timeout,
                                       connect_timeout=5, transcript=tr)
        except BaseException as exc:  # noqa: BLE001 - the test inspects it
            self.errors[k] = exc

    def join(self):
        for th in self.threads:
            th.join(30)
            assert not th.is_alive()


def test_frames_round_trip_and_reject_garbage():
    for raw in (F.control(F.HELLO, {"site": "a", "columns": ["x"], "rows": 3}), F.data(b"\x01" * 20), F.data(None)):
        assert F.encode(F.decode(raw)) == raw
    v = bytes([F.VERSION])
    for bad in (b"", b"\x01", b"\x04" + bytes([F.VERSION + 1]) + b"abc", b"\x63" + v + b"{}", b"\x01" + v + b"not json",
                b"\x01" + v + b"[1]", b"\x05" + v + b"x"):
        with pytest.raises(F.FrameError):
            F.decode(bad)
    # a party of the previous release (version 1: unpacked SUMMARY events) is stopped on its first frame
    with pytest.raises(F.FrameError, match=f"frame version 1 \\(this bnsl speaks version {F.VERSION}\\)"):
        F.decode(b"\x01\x01" + F.control(F.HELLO, {"site": "a"})[2:])


def test_networked_rounds_equal_in_process(tables):
    c0 = _coord()
    local = LocalFleet(_parts(tables))
    log0 = run_admm(c0, local, ROUNDS)
    fleet = NetworkFleet("127.0.0.1:0", P, timeout=20)
    # sites join in a scrambled order; they are numbered by name
    sites = Sites(fleet.port, tables[::-1], _parts(tables), names=["site2", "site1", "site0"])
    try:
        hellos = fleet.gather(20)
        assert [h["site"] for h in hellos] == ["site0", "site1", "site2"]
        fleet.start(lambda i: {"index": i})
        c1 = _coord()
        run_admm(c1, fleet, ROUNDS)
        summaries = fleet.finish()
        fleet.close(ok=True)
    finally:
        fleet.close()
    sites.join()
    assert not sites.errors
    assert np.array_equal(c0.W, c1.W)
    # the same bytes per participant, exchange by exchange, in process and over the network
    assert local.traffic.crossings == fleet.traffic.crossings and len(fleet.traffic.crossings) == log0.rounds + 1
    assert len(summaries) == P and all("compute_s" in s for s in summaries)


def test_mutual_tls_and_wrong_ca(tmp_path, tables):
    make_certs(tmp_path / "a", ["coordinator", "site0", "site1", "site2"])
    make_certs(tmp_path / "b", ["site2"])  # another CA
    a = tmp_path / "a"
    coord = load_party(a / "ca.pem", a / "coordinator.pem", a / "coordinator.key")
    fleet = NetworkFleet("127.0.0.1:0", P, coord, timeout=20)
    try:
        # a site with a certificate from another CA cannot get in
        with pytest.raises(TLSError, match="not issued by"):
            load_party(a / "ca.pem", tmp_path / "b" / "site2.pem", tmp_path / "b" / "site2.key")
        b = tmp_path / "b"
        rogue = load_party(b / "ca.pem", b / "site2.pem", b / "site2.key")
        with pytest.raises(FederationError, match="TLS handshake"):
            run_site(f"127.0.0.1:{fleet.port}", {"site": "x", "columns": ["a"], "rows": 1}, lambda p: None,
                     credentials=rogue, connect_timeout=1.5)
        # the real sites run over mutual TLS
        creds = [load_party(a / "ca.pem", a / f"site{k}.pem", a / f"site{k}.key") for k in range(P)]
        parts = _parts(tables)
        threads, errors = [], []
        for k, t in enumerate(tables):
            def go(k=k, t=t):
                try:
                    run_site(f"127.0.0.1:{fleet.port}", {"site": f"site{k}", "columns": list(t.names), "rows": t.n},
                             lambda plan: parts[plan["index"]], credentials=creds[k], connect_timeout=5)
                except Exception as exc:  # noqa: BLE001
                    errors.append(exc)
            threads.append(threading.Thread(target=go))
            threads[-1].start()
        fleet.gather(20)
        fleet.start(lambda i: {"index": i})
        c1 = _coord()
        run_admm(c1, fleet, 4)
        fleet.finish()
        fleet.close(ok=True)
        for th in threads:
            th.join(20)
        assert not errors
    finally:
        fleet.close()


def test_expired_certificate_is_a_clear_error(tmp_path):
    import datetime as dt

    make_certs(tmp_path, ["site1"], days=1, not_before=dt.datetime.now(dt.timezone.utc) - dt.timedelta(days=3))
    with pytest.raises(TLSError, match="expired on"):
        load_party(tmp_path / "ca.pem", tmp_path / "site1.pem", tmp_path / "site1.key")


def test_expired_site_certificate_rejected_by_the_coordinator(tmp_path):
    """Even if a site skips its own checks, the server refuses an expired client certificate."""
    import datetime as dt

    from bnsl_cli.net.tls import PartyCredentials

    make_certs(tmp_path, ["coordinator"])
    fleet = NetworkFleet("127.0.0.1:0", 1, load_party(tmp_path / "ca.pem", tmp_path / "coordinator.pem",
                                                        tmp_path / "coordinator.key"), timeout=5)
    try:
        old = tmp_path / "old"
        make_certs(old, ["site1"], days=1, not_before=dt.datetime.now(dt.timezone.utc) - dt.timedelta(days=3))
        # an expired certificate from a different CA: presented without the local check
        expired = PartyCredentials((tmp_path / "ca.pem").read_bytes(), (old / "site1.pem").read_bytes(),
                                   (old / "site1.key").read_bytes(), "site1")
        with pytest.raises(FederationError, match="TLS handshake"):
            run_site(f"127.0.0.1:{fleet.port}", {"site": "x", "columns": ["a"], "rows": 1}, lambda p: None,
                     credentials=expired, connect_timeout=1.5)
    finally:
        fleet.close()


def test_port_in_use_and_unreachable():
    fleet = NetworkFleet("127.0.0.1:0", 1)
    try:
        with pytest.raises(FederationError, match="cannot listen"):
            NetworkFleet(f"127.0.0.1:{fleet.port}", 1)
    finally:
        fleet.close()
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    with pytest.raises(FederationError, match="cannot reach the coordinator"):
        run_site(f"127.0.0.1:{port}", {"site": "x", "columns": ["a"], "rows": 1}, lambda p: None, connect_timeout=2)


def test_garbage_on_the_port_does_not_disturb_the_run(tables):
    fleet = NetworkFleet("127.0.0.1:0", P, timeout=20)
    try:
        for junk in (b"GET / HTTP/1.1\r\n\r\n", bytes(range(256)) * 4):
            with socket.create_connection(("127.0.0.1", fleet.port)) as s:
                s.sendall(junk)
        sites = Sites(fleet.port, tables, _parts(tables))
        fleet.gather(20)
        fleet.start(lambda i: {"index": i})
        run_admm(_coord(), fleet, 3)
        fleet.finish()
        fleet.close(ok=True)
        sites.join()
        assert not sites.errors
    finally:
        fleet.close()


class _Evil:
    """Participant 2's stand-in: answers round ``bad_round`` with ``make(msg)``."""

    def __init__(self, inner, bad_round, make):
        self.inner, self.bad_round, self.make, self.calls = inner, bad_round, make, 0

    def handle(self, data):
        self.calls += 1
        reply = self.inner.handle(data)
        return self.make(reply) if self.calls == self.bad_round else reply


def _faulty_run(tables, evil_make, *, bad_round=3, timeout=20.0):
    parts = _parts(tables)
    parts[1] = _Evil(parts[1], bad_round, evil_make)
    fleet = NetworkFleet("127.0.0.1:0", P, timeout=timeout)
    sites = Sites(fleet.port, tables, parts, timeout=20)
    try:
        fleet.gather(20)
        fleet.start(lambda i: {"index": i})
        with pytest.raises(FederationError) as err:
            run_admm(_coord(), fleet, ROUNDS)
    finally:
        fleet.close()
    sites.join()
    return str(err.value), sites


@pytest.mark.parametrize(
    "make, why",
    [
        (lambda r: r[:-5], "malformed"),
        (lambda r: r[:2] + (99).to_bytes(4, "little") + r[6:], "round 99 during round 3 (out of order)"),
        (lambda r: r[:6] + (0).to_bytes(4, "little") + r[10:], "signed as participant 1"),
        (lambda r: b"\x07" + r[1:], "answered a kind-1 message with a kind-7"),
        (lambda r: None, "sent no reply"),
    ],
)
def test_malformed_or_out_of_order_reply_stops_every_party(tables, make, why):
    msg, sites = _faulty_run(tables, make)
    assert msg.startswith("site 2 (site1) ") and why in msg
    # the other sites stop too, told which site broke the run
    assert set(sites.errors) == {0, 1, 2}
    for k in (0, 2):
        assert "site 2 (site1)" in str(sites.errors[k]) and "stopped the run" in str(sites.errors[k])


def test_site_that_disconnects_mid_run(tables):
    def vanish(_reply):
        raise KeyboardInterrupt  # the site's process is interrupted while it computes

    msg, sites = _faulty_run(tables, vanish)
    assert msg.startswith("site 2 (site1) ") and ("disconnected" in msg or "interrupted" in msg)
    assert isinstance(sites.errors.get(1), KeyboardInterrupt)
    assert "site 2 (site1)" in str(sites.errors[0])


def test_site_timeout(tables):
    def slow(reply):
        time.sleep(1.5)
        return reply

    msg, sites = _faulty_run(tables, slow, timeout=0.5)
    assert msg.startswith("site 2 (site1) timed out after 0.5 s")


def test_mismatched_columns_name_the_site(tables):
    cols = [list(t.names) for t in tables]
    cols[2] = cols[2][:-1] + ["other"]
    fleet = NetworkFleet("127.0.0.1:0", P, timeout=20)
    sites = Sites(fleet.port, tables, _parts(tables), columns=cols)
    try:
        with pytest.raises(ColumnMismatchError, match=r"site 3 \(site2\) has different columns.*has extra 'other'"):
            fleet.gather(20)
    finally:
        fleet.close()
    sites.join()
    assert all("site 3 (site2)" in str(e) for e in sites.errors.values()) and len(sites.errors) == 3


def test_site_refusal_stops_everyone(tables):
    def refuse(k, plan):
        if k == 0:
            raise RefusedError("ε = 9 exceeds --max-epsilon 5")

    fleet = NetworkFleet("127.0.0.1:0", P, timeout=20)
    sites = Sites(fleet.port, tables, _parts(tables), on_plan=refuse)
    try:
        fleet.gather(20)
        with pytest.raises(SiteRefusedError, match=r"site 1 \(site0\) refused the run: .*exceeds --max-epsilon 5"):
            fleet.start(lambda i: {"index": i})
    finally:
        fleet.close()
    sites.join()
    assert isinstance(sites.errors[0], RefusedError) and sites.errors[0].exit_code == 5
    for k in (1, 2):
        assert "site 1 (site0) refused the run" in str(sites.errors[k]) and "max-epsilon" in str(sites.errors[k])


def test_transcript_lists_every_frame_sent(tmp_path, tables):
    import hashlib
    import json

    trs = [Transcript(tmp_path / f"t{k}.jsonl") for k in range(P)]
    fleet = NetworkFleet("127.0.0.1:0", P, timeout=20)
    sent = []
    parts = _parts(tables)
    orig = parts[0].handle

    def spy(data):
        reply = orig(data)
        sent.append(reply)
        return reply

    parts[0].handle = spy
    sites = Sites(fleet.port, tables, parts, transcripts=trs)
    try:
        fleet.gather(20)
        fleet.start(lambda i: {"index": i})
        log = run_admm(_coord(), fleet, 5)
        fleet.finish()
        fleet.close(ok=True)
    finally:
        fleet.close()
    sites.join()
    for t in trs:
        t.close("ok")
    recs = [json.loads(line) for line in (tmp_path / "t0.jsonl").read_text().splitlines()]
    frames = [r for r in recs if r["event"] == "sent"]
    assert [r["frame"] for r in frames] == ["HELLO", "ACCEPT"] + ["DATA"] * log.rounds + ["EMPTY", "SUMMARY"]
    data = [r for r in frames if r["frame"] == "DATA"]
    assert [r["round"] for r in data] == list(range(1, log.rounds + 1))
    assert all(r["type"] == "sparse-update" for r in data)
    for r, payload in zip(data, sent):
        raw = F.data(payload)
        assert r["bytes"] == len(raw) and r["sha256"] == hashlib.sha256(raw).hexdigest()
    assert recs[-1]["event"] == "end" and recs[-1]["bytes_sent"] == sum(r["bytes"] for r in frames)


def test_check_reply_accepts_a_real_reply():
    from bnsl_cli.federated.messages import ConsensusBroadcast

    msg = ConsensusBroadcast(4, 3, np.zeros((3, 3)), 1.0).encode()
    ok = SparseUpdate(4, 1, 3, SparseEntries.from_dense(np.eye(3)), 0.5).encode()
    assert check_reply(msg, ok, 1) is None
    bad = SparseUpdate(4, 1, 3, SparseEntries(np.array([5], np.int32), np.array([5], np.int32), np.ones(1))).encode()
    assert "outside" in check_reply(msg, bad, 1)


def test_secure_sum_hides_terms_and_keeps_the_sum(tables):
    """Under secure aggregation the coordinator gets the polish moments' sum (to fixed-point rounding)
    and the sites' masked replies on the wire are not their values."""
    import os

    from bnsl_cli.federated.polish import PolishStage
    from bnsl_cli.federated.secure_sum import generate_keypair

    n = sum(t.n for t in tables)
    st0 = PolishStage(0.3, n)
    c0 = _coord()
    run_admm(c0, LocalFleet(_parts(tables)), ROUNDS, polish=st0)
    keys = [generate_keypair() for _ in range(P)]
    fleet = NetworkFleet("127.0.0.1:0", P, timeout=20, secure_sum=True)
    parts = _parts(tables)
    seen = []
    fleet.frame_observers.append(lambda index, frame: seen.append(frame.body) if frame.kind == F.MASKED else None)
    threads, errors = [], []
    try:
        for k, t in enumerate(tables):
            def go(k=k, t=t):
                try:
                    run_site(f"127.0.0.1:{fleet.port}",
                             {"site": f"site{k}", "columns": list(t.names), "rows": t.n, "x25519": keys[k][1].hex()},
                             lambda plan: parts[plan["index"]], secure_key=keys[k][0], connect_timeout=5)
                except BaseException as exc:  # noqa: BLE001
                    errors.append(exc)
            threads.append(threading.Thread(target=go))
            threads[-1].start()
        hellos = fleet.gather(20)
        spec = {"public_keys": [h["x25519"] for h in hellos], "run_id": os.urandom(16).hex(), "scale_bits": 32}
        fleet.start(lambda i: {"index": i, "secure_sum": spec})
        st1 = PolishStage(0.3, n)
        c1 = _coord()
        run_admm(c1, fleet, ROUNDS, polish=st1)
        fleet.finish()
        fleet.close(ok=True)
    finally:
        fleet.close()
    for th in threads:
        th.join(20)
    assert not errors
    assert np.array_equal(c0.W, c1.W)
    assert len(seen) == P
    # what the coordinator received from one site is not that site's moments (masked), but the
    # polish saw the sum: same support, weights equal to fixed-point rounding
    from bnsl_cli.federated.messages import HEADER, GramReply, GramRequest

    req = GramRequest(ROUNDS + 1, D, st1.pairs).encode()
    true0 = GramReply.decode(_parts(tables)[0].handle(req)).values
    got0 = np.frombuffer(seen[0], dtype="<f8", offset=HEADER.size)
    assert not np.allclose(got0, true0)
    assert np.array_equal(st0.result.W != 0, st1.result.W != 0)
    np.testing.assert_allclose(st1.result.W, st0.result.W, atol=1e-6)


def test_a_silent_connection_does_not_hold_up_the_others(tables):
    import grpc

    from bnsl_cli.net.common import METHOD

    fleet = NetworkFleet("127.0.0.1:0", P, timeout=30)
    channel = grpc.insecure_channel(f"127.0.0.1:{fleet.port}")
    gate = threading.Event()

    def nothing():
        gate.wait(30)
        return
        yield  # pragma: no cover

    call = channel.stream_stream(METHOD)(nothing())
    try:
        time.sleep(0.3)  # the silent stream is first in line
        t0 = time.monotonic()
        sites = Sites(fleet.port, tables, _parts(tables))
        fleet.gather(20)
        assert time.monotonic() - t0 < 15  # not the 30 s HELLO timeout of the silent one
        fleet.start(lambda i: {"index": i})
        run_admm(_coord(), fleet, 2)
        fleet.finish()
        fleet.close(ok=True)
        sites.join()
        assert not sites.errors
    finally:
        gate.set()
        call.cancel()
        channel.close()
        fleet.close()


def test_a_site_that_leaves_before_the_plan_may_join_again(tables):
    import grpc

    from bnsl_cli.net.common import METHOD

    fleet = NetworkFleet("127.0.0.1:0", P, timeout=20)
    channel = grpc.insecure_channel(f"127.0.0.1:{fleet.port}")
    hello = F.control(F.HELLO, {"site": "site0", "columns": list(tables[0].names), "rows": tables[0].n})
    gate = threading.Event()

    def once():
        yield hello
        gate.wait(20)

    call = channel.stream_stream(METHOD)(once())
    try:
        box = {}
        th = threading.Thread(target=lambda: box.setdefault("hellos", fleet.gather(20)))
        th.start()
        for _ in range(200):  # until the first site0 is in
            if fleet.sites:
                break
            time.sleep(0.02)
        assert fleet.sites and fleet.sites[0].name == "site0"
        call.cancel()  # it leaves; the real site0 may take its place
        time.sleep(0.3)
        sites = Sites(fleet.port, tables, _parts(tables))
        th.join(30)
        assert [h["site"] for h in box["hellos"]] == ["site0", "site1", "site2"]
        fleet.start(lambda i: {"index": i})
        run_admm(_coord(), fleet, 2)
        fleet.finish()
        fleet.close(ok=True)
        sites.join()
        assert not sites.errors
    finally:
        gate.set()
        call.cancel()
        channel.close()
        fleet.close()

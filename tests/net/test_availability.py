"""Idle or unauthenticated connections cannot keep the real sites out: 20 idle gRPC streams and 50
idle TCP sockets held open while 3 real sites join, and the run completes."""

import json
import socket
import threading
import time

import pytest

pytest.importorskip("grpc")
pytest.importorskip("cryptography")

from bnsl_cli.net.common import METHOD  # noqa: E402
from bnsl_cli.net.fleet import NetworkFleet  # noqa: E402
from tests.net.conftest import Party  # noqa: E402


class Idlers:
    """``streams`` gRPC calls that never say anything and ``sockets`` TCP connections that never
    send a byte, against ``port`` on loopback (plaintext: any local process can do this)."""

    def __init__(self, port, streams=20, sockets=50):
        import grpc

        self.gate = threading.Event()
        self.channels, self.calls = [], []
        for _ in range(streams):  # one channel each: separate connections, as separate processes would
            ch = grpc.insecure_channel(f"127.0.0.1:{port}")
            self.channels.append(ch)
            self.calls.append(ch.stream_stream(METHOD)(self._silence()))
        self.socks = [socket.create_connection(("127.0.0.1", port)) for _ in range(sockets)]

    def _silence(self):
        self.gate.wait(120)
        return
        yield  # pragma: no cover

    def close(self):
        self.gate.set()
        for c in self.calls:
            c.cancel()
        for ch in self.channels:
            ch.close()
        for s in self.socks:
            s.close()


def _port_of(path, party):
    end = time.monotonic() + 60
    while time.monotonic() < end:
        if path.exists() and path.read_text().strip():
            return int(path.read_text())
        assert party.proc.poll() is None, party.done()[2]
        time.sleep(0.05)
    raise AssertionError("serve did not start")


@pytest.mark.slow  # a heavy end-to-end networked run
def test_idle_streams_and_sockets_do_not_keep_sites_out(small_world, tmp_path):
    _, paths = small_world
    out, port_file = tmp_path / "out", tmp_path / "port"
    coord = Party(["serve", "-P", "3", "--listen", "127.0.0.1:0", "--port-file", str(port_file), "--insecure",
                   "--handshake-timeout", "1", "--join-timeout", "40", "--timeout", "20", "--rounds", "5",
                   "--out", str(out)])
    port = _port_of(port_file, coord)
    idle = Idlers(port)
    try:
        time.sleep(0.5)  # the idle connections are in first
        sites = [Party(["join", f"127.0.0.1:{port}", str(p), "--insecure", "--allow-non-private",
                        "--connect-timeout", "20", "--transcript", str(tmp_path / f"t{k}.jsonl")])
                 for k, p in enumerate(paths)]
        for party in (*sites, coord):
            code, _, err = party.done(timeout=90)
            assert code == 0, err
    finally:
        idle.close()
    assert "sent no HELLO within 1 s (handshake deadline)" in coord.stderr
    rep = json.loads((out / "report.json").read_text())
    net = rep["network"]
    assert net["peer_identity"].startswith("none: plaintext (--insecure)")  # said so in the report
    assert net["coordinator_certificate_sha256"] is None
    assert [s["identity"] for s in net["sites"]] == [None, None, None]
    recs = [json.loads(line) for line in (tmp_path / "t0.jsonl").read_text().splitlines()]
    assert [r["identity"] for r in recs if r["event"] == "coordinator"] == [None]


def test_a_flood_beyond_the_waiting_room_drops_the_oldest(tables):
    """With room for 4 waiting connections, 20 idle streams are dropped oldest first and the real
    sites (each says HELLO on arrival) get in; a site dropped as busy tries again."""
    from bnsl_cli.federated.methods.admm.coordinator import Coordinator, PenaltySchedule
    from bnsl_cli.net.site import run_site
    from bnsl_cli.federated.methods.admm.site import SparseParticipant
    from bnsl_cli.federated.methods.admm.protocol import run_admm

    fleet = NetworkFleet("127.0.0.1:0", len(tables), timeout=20, handshake_timeout=30, max_pending=4)
    n = sum(t.n for t in tables)
    parts = [SparseParticipant(k, t.X, n, 0.005, 20) for k, t in enumerate(tables)]
    errors, threads = {}, []
    idle = Idlers(fleet.port, streams=20, sockets=0)
    try:
        box = {}
        gather = threading.Thread(target=lambda: box.setdefault("hellos", fleet.gather(30)))
        gather.start()
        time.sleep(0.5)

        def site(k, t):
            try:
                run_site(f"127.0.0.1:{fleet.port}", {"site": f"site{k}", "columns": list(t.names), "rows": t.n},
                         lambda plan: parts[plan["index"]], connect_timeout=15, timeout=20)
            except BaseException as exc:  # noqa: BLE001
                errors[k] = exc

        for k, t in enumerate(tables):
            threads.append(threading.Thread(target=site, args=(k, t)))
            threads[-1].start()
        gather.join(40)
        assert [h["site"] for h in box["hellos"]] == [f"site{k}" for k in range(len(tables))]
        fleet.start(lambda i: {"index": i})
        run_admm(Coordinator(tables[0].d, len(tables), PenaltySchedule(1e-3, 1e-3, 1.75, 1.25, 1e16), snap=0.05),
                 fleet, 2)
        fleet.finish()
        fleet.close(ok=True)
        for th in threads:
            th.join(30)
        assert not errors, errors
    finally:
        idle.close()
        fleet.close()


def test_a_site_turned_away_as_busy_tries_again_within_its_connect_timeout(tables):
    """Before the coordinator gathers, 30 idle streams fill its gRPC capacity (1 site + 1 waiting +
    the margin): the site's first calls fail with RESOURCE_EXHAUSTED; it retries, and once the
    coordinator drops the idle ones it gets in."""
    from bnsl_cli.net.site import run_site

    t = tables[0]
    fleet = NetworkFleet("127.0.0.1:0", 1, timeout=20, handshake_timeout=30, max_pending=1)
    idle = Idlers(fleet.port, streams=30, sockets=0)
    box, logs = {}, []
    try:
        time.sleep(0.5)

        def site():
            try:
                box["res"] = run_site(f"127.0.0.1:{fleet.port}", {"site": "s", "columns": list(t.names), "rows": t.n},
                                      lambda plan: None, connect_timeout=20, timeout=20, log=logs.append)
            except BaseException as exc:  # noqa: BLE001
                box["err"] = exc

        th = threading.Thread(target=site)
        th.start()
        time.sleep(1.5)  # the site is being turned away meanwhile
        assert any("busy" in m and "RESOURCE_EXHAUSTED" in m for m in logs), logs
        hellos = fleet.gather(20)
        assert [h["site"] for h in hellos] == ["s"]
    finally:
        idle.close()
        fleet.close()
        th.join(30)


def test_a_continuing_flood_of_new_connections_does_not_starve_the_sites(tables):
    """New idle streams keep arriving (one every few milliseconds, the oldest dropped each time)
    while the sites join: the sites' HELLOs are still read and the run gathers."""
    import grpc

    from bnsl_cli.net.site import run_site

    fleet = NetworkFleet("127.0.0.1:0", len(tables), timeout=20, handshake_timeout=30, max_pending=8)
    stop = threading.Event()
    opened = []

    def flood():
        ch = grpc.insecure_channel(f"127.0.0.1:{fleet.port}")
        opened.append(ch)

        def silence():
            stop.wait(60)
            return
            yield  # pragma: no cover

        while not stop.is_set():
            opened.append(ch.stream_stream(METHOD)(silence()))
            time.sleep(0.005)

    flooder = threading.Thread(target=flood)
    flooder.start()
    errors, threads = {}, []
    try:
        time.sleep(0.5)
        for k, t in enumerate(tables):
            def site(k=k, t=t):
                try:
                    run_site(f"127.0.0.1:{fleet.port}", {"site": f"site{k}", "columns": list(t.names), "rows": t.n},
                             lambda plan: None, connect_timeout=20, timeout=20)
                except BaseException as exc:  # noqa: BLE001 - the fleet closes before any plan: expected
                    errors[k] = exc
            threads.append(threading.Thread(target=site))
            threads[-1].start()
        hellos = fleet.gather(30)
        assert sorted(h["site"] for h in hellos) == [f"site{k}" for k in range(len(tables))]
        assert len(opened) > 50  # the flood was on all along
    finally:
        stop.set()
        flooder.join(10)
        for c in opened[1:]:
            c.cancel()
        opened[0].close()
        fleet.close()
        for th in threads:
            th.join(30)

"""bnsl serve / bnsl join / bnsl certs as separate processes on loopback, with real mutual TLS."""

import json
import os
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

pytest.importorskip("grpc")
pytest.importorskip("cryptography")

from bnsl_cli.simulate import simulate  # noqa: E402

BNSL = [sys.executable, "-m", "bnsl_cli"]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "COLUMNS": "200"}
OUTS = ("adjacency.csv", "edges.csv", "graph.dot", "report.json")


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """Three site CSVs and a certificate set (coordinator, site1..3), plus an expired site cert."""
    import datetime as dt

    from bnsl_cli.federated.net.tls import make_certs

    root = tmp_path_factory.mktemp("net")
    sim = simulate(10, 10, participants=3, samples=400, seed=5)
    shards = root / "shards"
    shards.mkdir()
    paths = []
    for k, X in enumerate(sim.shards):
        p = shards / f"site{k + 1}.csv"
        np.savetxt(p, X, delimiter=",", header=",".join(sim.names), comments="", fmt="%.10g")
        paths.append(p)
    make_certs(root / "certs", ["coordinator", "site1", "site2", "site3"])
    make_certs(root / "old", ["site1"], days=1, not_before=dt.datetime.now(dt.timezone.utc) - dt.timedelta(days=5))
    return root, paths


def _tls(root, party):
    c = root / "certs"
    return ["--ca", str(c / "ca.pem"), "--cert", str(c / f"{party}.pem"), "--key", str(c / f"{party}.key")]


def _serve(root, out, *args, participants=3):
    port_file = out.parent / (out.name + ".port")
    port_file.unlink(missing_ok=True)
    proc = subprocess.Popen(
        BNSL + ["serve", "-P", str(participants), "--listen", "127.0.0.1:0", "--port-file", str(port_file),
                "--join-timeout", "40", "--timeout", "20", "--out", str(out), *_tls(root, "coordinator"), *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV,
    )
    for _ in range(600):
        if port_file.exists() and port_file.read_text().strip():
            return proc, int(port_file.read_text())
        if proc.poll() is not None:
            raise AssertionError(f"serve exited early: {proc.stderr.read()}")
        time.sleep(0.05)
    proc.kill()
    raise AssertionError("serve did not start")


def _join(root, port, csv, party, *args, tls=None):
    return subprocess.Popen(
        BNSL + ["join", f"127.0.0.1:{port}", str(csv), *(tls if tls is not None else _tls(root, party)), *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV,
    )


def _done(proc, timeout=60):
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


def _error_lines(err):
    return [line for line in err.splitlines() if line.startswith("error:")]


def test_three_sites_same_bytes_as_learn(world, tmp_path):
    root, paths = world
    learned = tmp_path / "learned"
    learn = subprocess.Popen(BNSL + ["learn", *map(str, paths), "--seed", "3", "--out", str(learned), "-q"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
    served = tmp_path / "served"
    serve, port = _serve(root, served, "--seed", "3")
    # garbage on the port, and a site whose certificate is from another CA: neither disturbs the run
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(b"\x16\x03\x01 not a TLS hello at all" * 10)
    other = root / "other"
    from bnsl_cli.federated.net.tls import make_certs

    make_certs(other, ["site1"])
    rogue = _join(root, port, paths[0], "site1", "--allow-non-private", "--connect-timeout", "3",
                  tls=["--ca", str(other / "ca.pem"), "--cert", str(other / "site1.pem"), "--key", str(other / "site1.key")])
    # the three real sites join in reverse order; they are numbered by file name, as bnsl learn sorts
    sites = [_join(root, port, p, f"site{k + 1}", "--allow-non-private", "--transcript", str(tmp_path / f"t{k + 1}.jsonl"))
             for k, p in reversed(list(enumerate(paths)))]
    code, _, err = _done(rogue)
    assert code == 6 and len(_error_lines(err)) == 1 and "TLS handshake" in err and "Traceback" not in err
    code, _, err = _done(learn)
    assert code == 0, err
    for s in sites:
        code, _, err = _done(s)
        assert code == 0, err
    code, _, err = _done(serve)
    assert code == 0, err
    for name in ("adjacency.csv", "edges.csv", "graph.dot"):
        assert (served / name).read_bytes() == (learned / name).read_bytes(), name
    rep = json.loads((served / "report.json").read_text())
    assert rep["network"]["transport"] == "gRPC, mutual TLS"
    assert [s["site"] for s in rep["network"]["sites"]] == ["site1.csv", "site2.csv", "site3.csv"]
    # every DATA frame a site sent is in its transcript, with its size and hash
    recs = [json.loads(line) for line in (tmp_path / "t2.jsonl").read_text().splitlines()]
    data = [r for r in recs if r["event"] == "sent" and r["frame"] == "DATA"]
    assert len(data) == rep["rounds"] + 3  # the column statistics (two shares), the rounds, the polish's second moments
    assert sum(r["bytes"] - 2 for r in data) == rep["communication"]["per_participant"][1]["bytes_up"]
    assert recs[-1] == {**recs[-1], "event": "end", "status": "ok"}


def test_site_refuses_epsilon_and_nobody_writes(world, tmp_path):
    root, paths = world
    out = tmp_path / "out"
    serve, port = _serve(root, out, "--dp", "--epsilon", "8", "--value-bound", "20")
    sites = [_join(root, port, p, f"site{k + 1}", "--max-epsilon", "5" if k == 1 else "10")
             for k, p in enumerate(paths)]
    results = [_done(s) for s in sites]
    code, _, err = _done(serve)
    assert code == 5, err
    lines = _error_lines(err)
    assert len(lines) == 1 and "site 2 (site2.csv) refused the run" in lines[0] and "--max-epsilon 5" in lines[0]
    assert results[1][0] == 5 and "more than this site's --max-epsilon 5" in results[1][2]
    for k in (0, 2):
        assert results[k][0] == 6 and "site 2 (site2.csv) refused the run" in results[k][2]
    for code_, _, err_ in results:
        assert "Traceback" not in err_ and len(_error_lines(err_)) == 1
    assert not out.exists() or not any((out / n).exists() for n in OUTS)


def test_mismatched_columns_and_expired_certificate(world, tmp_path):
    root, paths = world
    bad = tmp_path / "site3.csv"
    head, body = paths[2].read_text().split("\n", 1)
    cols = head.split(",")
    old = cols[3]
    cols[3] = "renamed"
    bad.write_text(",".join(cols) + "\n" + body)
    expired = _join(root, 1, paths[0], "site1", "--allow-non-private",
                    tls=["--ca", str(root / "old" / "ca.pem"), "--cert", str(root / "old" / "site1.pem"),
                         "--key", str(root / "old" / "site1.key")])
    out = tmp_path / "out"
    serve, port = _serve(root, out)
    sites = [_join(root, port, p, f"site{k + 1}", "--allow-non-private") for k, p in enumerate([paths[0], paths[1], bad])]
    code, _, err = _done(expired)
    assert code == 2 and "certificate expired on" in err and len(_error_lines(err)) == 1
    results = [_done(s) for s in sites]
    code, _, err = _done(serve)
    assert code == 3, err
    assert f"site 3 (site3.csv) has different columns from site 1 (site1.csv): lacks {old!r}; has extra 'renamed'" in err
    assert all(r[0] == 6 and "site 3 (site3.csv) has different columns" in r[2] for r in results)
    assert not out.exists() or not any((out / n).exists() for n in OUTS)


SLOW_SITE = r"""
import sys, time
from bnsl_cli.federated.net.site import run_site
from bnsl_cli.federated.net.tls import load_party
from bnsl_cli.federated.net.transcript import Transcript
from bnsl_cli.federated.roles import make_participant
from bnsl_cli.io.data import read_table
from bnsl_cli.plan import RunPlan
port, csv, certs, tpath = sys.argv[1:]
t = read_table(csv)
class Slow:
    def __init__(self, inner): self.inner, self.n = inner, 0
    def handle(self, data):
        self.n += 1
        if self.n == 3:
            time.sleep(60)  # killed here, mid-run
        return self.inner.handle(data)
def on_plan(body):
    return Slow(make_participant(RunPlan.from_dict(body["plan"]), body["index"], t.X, None))
creds = load_party(f"{certs}/ca.pem", f"{certs}/site2.pem", f"{certs}/site2.key")
run_site(f"127.0.0.1:{port}", {"site": "site2.csv", "columns": list(t.names), "rows": t.n}, on_plan,
         credentials=creds, transcript=Transcript(tpath))
"""


def test_site_killed_mid_run(world, tmp_path):
    root, paths = world
    out = tmp_path / "out"
    serve, port = _serve(root, out)
    tpath = tmp_path / "slow.jsonl"
    slow = subprocess.Popen([sys.executable, "-c", SLOW_SITE, str(port), str(paths[1]), str(root / "certs"), str(tpath)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
    others = [_join(root, port, paths[k], f"site{k + 1}", "--allow-non-private") for k in (0, 2)]
    for _ in range(1200):  # until the slow site has answered round 2
        if tpath.exists() and tpath.read_text().count('"frame":"DATA"') >= 2:
            break
        time.sleep(0.05)
    else:
        raise AssertionError("the slow site never reached round 2")
    time.sleep(0.2)
    slow.send_signal(signal.SIGKILL)
    slow.communicate(timeout=10)
    code, _, err = _done(serve)
    assert code == 6, err
    lines = _error_lines(err)
    assert len(lines) == 1 and "site 2 (site2.csv)" in lines[0] and ("disconnected" in lines[0] or "closed" in lines[0])
    for s in others:
        c, _, e = _done(s)
        assert c == 6 and "site 2 (site2.csv)" in e and "Traceback" not in e
    assert not out.exists() or not any((out / n).exists() for n in OUTS)


def test_ctrl_c_on_the_coordinator_stops_the_sites(world, tmp_path):
    root, paths = world
    out = tmp_path / "out"
    serve, port = _serve(root, out, participants=3)
    tpath = tmp_path / "t.jsonl"
    site = _join(root, port, paths[0], "site1", "--allow-non-private", "--transcript", str(tpath))
    for _ in range(1200):  # until the site has sent its HELLO
        if tpath.exists() and '"frame":"HELLO"' in tpath.read_text():
            break
        time.sleep(0.05)
    time.sleep(0.5)
    serve.send_signal(signal.SIGINT)
    code, _, err = _done(serve)
    assert code == 130 and "interrupted" in err and "Traceback" not in err
    c, _, e = _done(site)
    assert c == 6 and "interrupted" in e and "Traceback" not in e


def test_insecure_only_on_loopback(world):
    root, paths = world
    r = subprocess.run(BNSL + ["serve", "-P", "2", "--listen", "0.0.0.0:0", "--insecure"], capture_output=True, text=True, env=ENV)
    assert r.returncode == 2 and "--insecure is only allowed on a loopback address" in r.stderr
    r = subprocess.run(BNSL + ["join", "127.0.0.1:1", str(paths[0]), "--allow-non-private", "--insecure"],
                       capture_output=True, text=True, env=ENV)
    assert r.returncode == 6 and "cannot reach the coordinator at 127.0.0.1:1" in r.stderr
    assert "plaintext" in r.stderr  # the --insecure warning



def test_private_run_with_secure_sum_transcripts_match_the_report(world, tmp_path):
    root, paths = world
    out = tmp_path / "out"
    serve, port = _serve(root, out, "--dp", "--epsilon", "5", "--value-bound", "20", "--rounds", "4", "--secure-sum")
    sites = [_join(root, port, p, f"site{k + 1}", "--max-epsilon", "5", "--transcript", str(tmp_path / f"t{k + 1}.jsonl"))
             for k, p in enumerate(paths)]
    for s in sites:
        code, _, err = _done(s)
        assert code == 0, err
    code, _, err = _done(serve)
    assert code == 0, err
    rep = json.loads((out / "report.json").read_text())
    assert rep["network"]["secure_sum"] is True
    for k in range(3):
        recs = [json.loads(line) for line in (tmp_path / f"t{k + 1}.jsonl").read_text().splitlines()]
        assert [r["frame"] for r in recs if r["event"] == "sent"].count("MASKED") == 3  # two statistics shares, the polish moments
        rho = sum(r["rho"] for r in recs if r["event"] == "release")
        assert rho == pytest.approx(rep["privacy"]["participants"][k]["rho"], rel=1e-9)
        assert recs[-1]["status"] == "ok"

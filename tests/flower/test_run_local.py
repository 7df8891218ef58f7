"""``examples/flower/run_local.sh`` end to end: a real SuperLink and one SuperNode per shard of
``examples/tiny/shards`` on loopback, the app run with ``flwr run``, the run folder compared byte
for byte with ``bnsl learn``'s; a malicious ServerApp (``tests/flower/malicious_app``) refused by
every site as ``bnsl join`` refuses it; nothing the script started outlives it, also on Ctrl-C.
Slow (each run pays Flower's deployment overhead: a fresh ClientApp process per message, SuperNodes
that poll every 3 s); CI runs them."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("flwr")

from tests.flower.conftest import ENV, OUTPUTS, learn_cli, records, report

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "examples" / "flower" / "run_local.sh"
SHARDS = ROOT / "examples" / "tiny" / "shards"
BIN = Path(sys.executable).parent


def _env(**extra) -> dict:
    return {**ENV, "BNSL_FLOWER_BIN": str(BIN), **extra}


def _leftovers(work: Path) -> list:
    """Processes (other than this one) whose FLWR_HOME is the run's: the SuperLink, SuperNodes and
    everything they started."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            environ = (proc / "environ").read_bytes()
        except OSError:
            continue
        if f"FLWR_HOME={work / 'flwr-home'}".encode() in environ.split(b"\0"):
            found.append(int(proc.name))
    return found


def _no_leftovers(work: Path) -> None:
    end = time.monotonic() + 30  # a SuperExec notices its parent is gone within seconds
    while _leftovers(work) and time.monotonic() < end:
        time.sleep(0.2)
    assert not _leftovers(work)


RUNS = {
    "fed-sparse": ("-m fed-sparse --rounds 4 --seed 1", {}),
    "dp-per-site": ("--dp --epsilon 5 --noise per-site --seed 1", {}),
    "attack": ("", {"BNSL_FLOWER_APP": str(ROOT / "tests" / "flower" / "malicious_app"),
                    "BNSL_FLOWER_EXPECT": "outcome.json"}),
}


@pytest.fixture(scope="module")
def deployed(tmp_path_factory):
    """The three runs at once (each its own SuperLink and four SuperNodes; most of their time is
    Flower's polling, so they overlap well): ``{name: (out folder, exit code, stderr)}``."""
    root = tmp_path_factory.mktemp("deployed")
    procs = {}
    for name, (options, env) in RUNS.items():
        out = root / name
        procs[name] = (out, subprocess.Popen(["bash", str(SCRIPT), str(SHARDS), str(out), *shlex.split(options)],
                                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                             env=_env(**env)))
    done = {}
    for name, (out, proc) in procs.items():
        try:
            _, err = proc.communicate(timeout=600)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
        done[name] = (out, proc.returncode, err)
    return done


@pytest.mark.slow
@pytest.mark.parametrize("name", ["fed-sparse", "dp-per-site"])
def test_run_local_equals_learn(deployed, tmp_path, name):
    out, code, err = deployed[name]
    work = Path(str(out) + ".flower")
    assert code == 0, err + (work / "logs" / "flwr-run.log").read_text()
    options = RUNS[name][0]
    learned = learn_cli(sorted(SHARDS.glob("*.csv")), tmp_path / "learned", options)
    for file in OUTPUTS:
        assert (out / file).read_bytes() == (learned / file).read_bytes(), file
    a, b = report(out), report(learned)
    assert a["rounds"] == b["rounds"] and a["communication"] == b["communication"]
    assert len(a["network"]["sites"]) == 4 and a["network"]["transport"].startswith("Flower")
    for k in range(1, 5):  # every site's transcript ends ok; its state file stays, closed
        recs = records(work / f"site-{k}" / "transcript.jsonl")
        assert recs[-1]["event"] == "end" and recs[-1]["status"] == "ok", recs[-1]
        assert len(list((work / f"site-{k}" / "state").glob("run-*.state"))) == 1
    _no_leftovers(work)


@pytest.mark.slow
def test_a_malicious_server_app_is_refused_by_every_site(deployed):
    out, code, err = deployed["attack"]
    assert code == 0, err
    seen = json.loads((out / "outcome.json").read_text())
    one, two, three, four = (seen[f"participant-0{k}.csv"] for k in range(1, 5))
    assert [s[0] for s in one] == ["DATA", "DATA", "ABORT"] and "beyond the plan's 2 rounds" in one[-1][1]["reason"]
    assert [s[0] for s in two] == ["DATA", "DATA", "ABORT"] and "numbered 1 after round 2" in two[-1][1]["reason"]
    assert [s[0] for s in three] == ["DATA", "DATA", "ABORT"] and "replayed or repeated" in three[-1][1]["reason"]
    assert [s[0] for s in four] == ["DATA", "DATA", "ABORT"] and "whitening" in four[-1][1]["reason"]
    for reply in (one[-1], two[-1], three[-1], four[-1]):
        assert reply[1]["refused"] is True
    work = Path(str(out) + ".flower")
    for k in range(1, 5):
        recs = records(work / f"site-{k}" / "transcript.jsonl")
        assert sum(r["event"] == "refused" for r in recs) == 1
        accepted = next(r for r in recs if r["event"] == "plan")
        assert accepted["decision"] == "accepted"
        spent = sum(r["rho"] for r in recs if r["event"] == "release")
        assert 0 < spent <= accepted["rho"] * (1 + 1e-9)
        assert recs[-1]["event"] == "end" and recs[-1]["status"].startswith("stopped")
    _no_leftovers(work)


@pytest.mark.slow
@pytest.mark.parametrize("to_group", [True, False], ids=["ctrl-c", "sigint-to-script"])
def test_ctrl_c_stops_everything_the_script_started(tmp_path, to_group):
    """Ctrl-C in a terminal (SIGINT to the script's process group) or SIGINT to the script alone,
    mid-run: exit 130, no run folder, nothing the script started left running."""
    out = tmp_path / "run"
    proc = subprocess.Popen(["bash", str(SCRIPT), str(SHARDS), str(out), "-m", "fed-sparse", "--seed", "1"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(),
                            start_new_session=True)
    work = tmp_path / "run.flower"
    end = time.monotonic() + 120
    while time.monotonic() < end and not list(work.glob("site-*/transcript.jsonl")):
        assert proc.poll() is None, proc.communicate()[1]
        time.sleep(0.2)
    assert len(_leftovers(work)) >= 5  # the SuperLink and four SuperNodes run, the sites answer
    if to_group:
        os.killpg(proc.pid, signal.SIGINT)
    else:
        proc.send_signal(signal.SIGINT)
    proc.wait(timeout=60)
    assert proc.returncode == 130
    assert not (out / "report.json").exists()
    _no_leftovers(work)

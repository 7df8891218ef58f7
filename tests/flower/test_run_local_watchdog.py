"""``examples/flower/run_local.sh``'s watchdog (issue 46, item 5): a run's length follows its plan — the
script stops it only when its log stays silent for ``BNSL_FLOWER_STALL`` seconds, or after
``BNSL_FLOWER_TIMEOUT`` when that is set — and each stop names the variable that allows more.

Flower itself is stood in for by small fakes (``BNSL_FLOWER_BIN``): a SuperLink and SuperNodes that only
listen on their ports, and a ``flwr`` whose ``run`` logs on a schedule the test chooses, so the timing is
exact and no Flower install is needed."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "examples" / "flower" / "run_local.sh"
SHARDS = ROOT / "examples" / "tiny" / "shards"

LISTEN = f"""#!{sys.executable}
import socket, sys, time
port = int(sys.argv[sys.argv.index("--port") + 1])
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", port)); s.listen(16)
while True:
    time.sleep(3600)
"""

#: ``flwr run``: print one line every ``BNSL_FAKE_EVERY`` seconds, ``BNSL_FAKE_LINES`` times, then
#: stay silent for ``BNSL_FAKE_SILENT`` seconds and exit 0 (no run folder: the script calls that a failure)
FLWR = f"""#!{sys.executable}
import os, sys, time
every, lines = float(os.environ["BNSL_FAKE_EVERY"]), int(os.environ["BNSL_FAKE_LINES"])
for k in range(lines):
    print(f"bnsl: exchange {{k + 1}}", flush=True)
    time.sleep(every)
time.sleep(float(os.environ.get("BNSL_FAKE_SILENT", "0")))
"""


@pytest.fixture()
def fake_bin(tmp_path) -> Path:
    folder = tmp_path / "bin"
    folder.mkdir()
    for name, text in (("flower-superlink", LISTEN), ("flower-supernode", LISTEN), ("flwr", FLWR)):
        (folder / name).write_text(text)
        (folder / name).chmod(0o755)
    (folder / "python").symlink_to(sys.executable)
    return folder


def _run(fake_bin, out, **env):
    environ = {**os.environ, "BNSL_FLOWER_BIN": str(fake_bin), **{k: str(v) for k, v in env.items()}}
    t0 = time.monotonic()
    res = subprocess.run(["bash", str(SCRIPT), str(SHARDS), str(out)], capture_output=True, text=True,
                         env=environ, timeout=120)
    return res, time.monotonic() - t0


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the script's clean-up reads /proc")
def test_a_silent_run_is_stopped_after_the_stall_and_the_message_names_the_variable(fake_bin, tmp_path):
    res, took = _run(fake_bin, tmp_path / "out", BNSL_FLOWER_STALL=2, BNSL_FAKE_EVERY=0, BNSL_FAKE_LINES=1,
                     BNSL_FAKE_SILENT=60)
    assert res.returncode == 6, res.stderr
    assert "logged nothing for 2 s" in res.stderr and "BNSL_FLOWER_STALL=SECONDS" in res.stderr
    assert took < 30
    assert not (tmp_path / "out" / "report.json").exists()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the script's clean-up reads /proc")
def test_a_run_that_keeps_logging_outlasts_the_stall(fake_bin, tmp_path):
    # 8 lines a second apart: 8 s in all, four times the 2-s silence allowed; it ends by itself (exit 0 of
    # flwr, but no run folder: the script's "failed" line, not a watchdog stop)
    res, took = _run(fake_bin, tmp_path / "out", BNSL_FLOWER_STALL=2, BNSL_FAKE_EVERY=1, BNSL_FAKE_LINES=8)
    assert "BNSL_FLOWER_STALL" not in res.stderr and "BNSL_FLOWER_TIMEOUT" not in res.stderr, res.stderr
    assert "the Flower run failed" in res.stderr
    assert took >= 8


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the script's clean-up reads /proc")
def test_a_set_timeout_caps_the_whole_run_however_busy_it_is(fake_bin, tmp_path):
    res, took = _run(fake_bin, tmp_path / "out", BNSL_FLOWER_TIMEOUT=3, BNSL_FAKE_EVERY=0.5, BNSL_FAKE_LINES=200)
    assert res.returncode == 6, res.stderr
    assert "did not finish within BNSL_FLOWER_TIMEOUT=3 s" in res.stderr
    assert took < 30


def test_the_watchdog_takes_whole_seconds_only(fake_bin, tmp_path):
    res, _ = _run(fake_bin, tmp_path / "out", BNSL_FLOWER_STALL="1e3", BNSL_FAKE_EVERY=0, BNSL_FAKE_LINES=1)
    assert res.returncode == 2
    assert "BNSL_FLOWER_STALL and BNSL_FLOWER_TIMEOUT take whole seconds, got '1e3'" in res.stderr

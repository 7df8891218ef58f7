"""Deployed on Flower (``examples/flower/run_local.sh``: a real SuperLink and SuperNodes on loopback), a site
whose CSV holds a planted secret cell stops the run, and nothing on the coordinator's side — the
``flwr run`` log (the ServerApp's), the SuperLink's log, the script's own output, the run folder — carries
the cell, its row or the site's file path (issue 43, item 4). Slow: one deployed run."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("flwr")

from tests.flower.conftest import ENV

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "examples" / "flower" / "run_local.sh"
SHARDS = ROOT / "examples" / "tiny" / "shards"
SECRET = "SECRET-4711"


@pytest.mark.slow
def test_a_planted_secret_cell_never_reaches_the_coordinator_side(tmp_path):
    shards = tmp_path / "shards"
    shutil.copytree(SHARDS, shards)
    victim = sorted(shards.glob("*.csv"))[1]
    lines = victim.read_text().splitlines()
    cells = lines[5].split(",")
    cells[2] = SECRET
    lines[5] = ",".join(cells)
    victim.write_text("\n".join(lines) + "\n")
    out = tmp_path / "run"
    proc = subprocess.run(["bash", str(SCRIPT), str(shards), str(out), "--dp", "--epsilon", "5"],
                          capture_output=True, text=True, timeout=900,
                          env={**ENV, "BNSL_FLOWER_BIN": str(Path(sys.executable).parent)})
    assert proc.returncode != 0, proc.stderr  # the run stops
    work = Path(str(out) + ".flower")
    coordinator_side = [proc.stdout, proc.stderr, (work / "logs" / "flwr-run.log").read_text(errors="replace"),
                        (work / "logs" / "superlink.log").read_text(errors="replace")]
    if out.exists():
        coordinator_side += [f.read_text(errors="replace") for f in out.rglob("*") if f.is_file()]
    text = "\n".join(coordinator_side)
    assert "cannot use its data" in text  # the fixed, data-free reason
    for needle in (SECRET, str(victim), str(shards)):
        assert needle not in text, needle
    assert "Traceback" not in (work / "logs" / "flwr-run.log").read_text(errors="replace")
    # the site kept the details in its own transcript
    site_logs = "\n".join(p.read_text(errors="replace") for p in work.rglob("transcript.jsonl"))
    assert SECRET in site_logs

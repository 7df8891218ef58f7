"""The README's first set-up command is all a new user runs: in a copy of the repository, exactly that
command (read from the README, not repeated here) makes a fresh virtual environment, and then the
main commands work in it on the shipped example — ``learn``, ``learn --dp``, ``show``, ``evaluate``,
``privacy-budget`` and ``refit``. CI installs every extra for the rest of the suite, so
only this test sees a dependency that an extra, not the first command, brings (``learn --dp`` once
needed the ``net`` extra's ``cryptography``)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.test_repository import tracked_files

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow


def first_setup_command(readme: str) -> str:
    """The first ```bash block under the README's "Set-up" heading (one command line)."""
    section = readme.split("## Set-up", 1)
    assert len(section) == 2, "the README has no '## Set-up' section"
    m = re.search(r"```bash\n(.+?)\n```", section[1], re.S)
    assert m, "the README's set-up section has no bash block"
    lines = [ln for ln in m.group(1).splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    assert len(lines) == 1, f"the first set-up block should be one command, got {lines}"
    return lines[0]


def test_the_first_setup_command_is_read_from_the_readme():
    cmd = first_setup_command((ROOT / "README.md").read_text(encoding="utf-8"))
    assert "python3 -m venv .venv" in cmd and "pip install" in cmd and "bnsl learn" in cmd
    # the first command must not install the test or network extras: it is what a user runs
    extras = re.search(r"-e '\.\[([^\]]*)\]'", cmd)
    assert extras is None or not {"test", "net", "flower"} & set(extras.group(1).split(","))


def _copy_tree(dest: Path) -> None:
    for path in tracked_files(ROOT):
        if path.is_file():
            target = dest / path.relative_to(ROOT)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)


def test_after_the_first_setup_command_every_tour_command_runs(tmp_path):
    if shutil.which("python3") is None:
        pytest.skip("python3 is not on PATH")
    repo = tmp_path / "repo"
    _copy_tree(repo)
    cmd = first_setup_command((ROOT / "README.md").read_text(encoding="utf-8"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BNSL_", "VIRTUAL_ENV", "PYTHONPATH"))}
    env["OPENBLAS_NUM_THREADS"] = "1"
    res = subprocess.run(cmd, shell=True, cwd=repo, env=env, capture_output=True, text=True, timeout=1200)
    assert res.returncode == 0, f"the README's first command failed: {res.stderr[-2000:]}"
    assert (repo / "out" / "tiny" / "adjacency.csv").is_file()
    bnsl = str(repo / ".venv" / "bin" / "bnsl")
    shards = "examples/tiny/shards"

    def ok(*args: str) -> subprocess.CompletedProcess:
        r = subprocess.run([bnsl, *args], cwd=repo, env=env, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, f"bnsl {' '.join(args)} exited {r.returncode}: {r.stderr.strip()[-1500:]}"
        return r

    ok("learn", shards, "--dp", "--epsilon", "5", "--out", "out/dp", "-q")
    assert json.loads((repo / "out" / "dp" / "report.json").read_text())["privacy"]
    ok("show", "out/tiny", "-q")
    assert (repo / "out" / "tiny" / "graph.png").is_file()
    ev = json.loads(ok("evaluate", "out/tiny/adjacency.csv", "--truth", "examples/tiny/truth.csv", "--json").stdout)
    assert "shd" in json.dumps(ev).lower()
    ok("privacy-budget", "--epsilon", "5", "--samples", "250,250,250,250", "--nodes", "8", "-q")
    ok("refit", "out/tiny", shards, "--out", "out/refit", "-q")
    assert (repo / "out" / "refit" / "summary.json").is_file()

"""Fixtures of the Flower app's tests: three site CSVs (d = 8, 400 rows each), each site's node
configuration, ``bnsl learn`` as a subprocess, and the ServerApp run through :class:`LoopbackGrid`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("flwr")
pytest.importorskip("grpc")
pytest.importorskip("cryptography")

BNSL = [sys.executable, "-m", "bnsl_cli"]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
for _name in [k for k in ENV if k.startswith("BNSL_")]:
    del ENV[_name]
OUTPUTS = ("adjacency.csv", "edges.csv", "graph.dot")
NODES = (101, 102, 103)


@pytest.fixture(scope="session")
def site_csvs(tmp_path_factory) -> list:
    from bnsl_cli.simulate import simulate

    root = tmp_path_factory.mktemp("flower-sites")
    sim = simulate(8, 8, participants=3, samples=400, seed=5)
    paths = []
    for k, X in enumerate(sim.shards):
        p = root / f"site{k + 1}.csv"
        np.savetxt(p, X, delimiter=",", header=",".join(sim.names), comments="", fmt="%.10g")
        paths.append(p)
    return paths


def node_configs(csvs, state_root: Path, **limits) -> dict:
    """Each node's configuration: its CSV, its state directory and transcript under ``state_root``,
    and the limits (defaults: ε ≤ 8, non-private allowed, seeded and split noise accepted)."""
    base = {"max-epsilon": 8.0, "allow-non-private": True, "accept-seeded-noise": True, "accept-split-noise": True}
    base.update({k.replace("_", "-"): v for k, v in limits.items()})
    return {nid: {"csv": str(p), "state-dir": str(state_root / f"state-{k + 1}"),
                  "transcript": str(state_root / f"site{k + 1}.transcript.jsonl"), **base}
            for k, (nid, p) in enumerate(zip(NODES, csvs))}


def learn_cli(csvs, out: Path, options: str) -> Path:
    """``bnsl learn`` on ``csvs`` with ``options`` (a string), its run folder ``out``."""
    import shlex

    res = subprocess.run(BNSL + ["learn", *map(str, csvs), *shlex.split(options), "--out", str(out), "-q"],
                         capture_output=True, text=True, env=ENV, timeout=300, check=False)
    assert res.returncode == 0, res.stderr
    return out


def flower_run(csvs, tmp: Path, options: str, *, nodes=None, tamper=None, run_id=7, **run_config):
    """The ServerApp's run through the in-process grid: ``(result or the BnslError that stopped it,
    grid, out folder)``."""
    from bnsl_cli.errors import BnslError
    from bnsl_cli.net.flower.server import coordinate
    from tests.flower._grid import LoopbackGrid

    grid = LoopbackGrid(nodes or node_configs(csvs, tmp), run_id=run_id, tamper=tamper)
    out = tmp / "flower-out"
    cfg = {"options": options, "participants": 3, "out": str(out), "timeout": 60.0, **run_config}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            result = coordinate(grid, cfg, fleet_hook=lambda f: setattr(grid, "fleet", f))
        except BnslError as exc:
            result = exc
    return result, grid, out


def report(folder: Path) -> dict:
    return json.loads((folder / "report.json").read_text())


def records(path: Path) -> list:
    return [json.loads(line) for line in path.read_text().splitlines()]

"""Benchmark cells: one self-contained shell line of `bnsl` commands per cell, and their collection.

A *cell* is one simulate → learn → evaluate run in its own folder ``ROOT/<cell id>/``. Its command
line (:func:`shell_line`) only needs a POSIX shell, ``bnsl`` and coreutils, so the same lines run
here (:func:`run_lines`), under GNU parallel, or as a Slurm array job (``examples/cluster/``). The line

1. skips the cell when the folder is complete: ``evaluation.json`` exists and ``cell.json`` holds
   exactly this cell's description (a changed command or option reruns it);
2. writes ``cell.json`` (the cell's parameters and its exact `bnsl` commands);
3. ``bnsl simulate … --out CELL/data`` (``data/manifest.json`` records the seed, every option and the
   bnsl / numpy versions); ``bnsl learn CELL/data/shards … --out CELL/run`` (``run/report.json``:
   options, seed, versions, timing, bytes); ``bnsl evaluate run/report.json --truth data/truth.csv --json``;
4. records the sha256 of every input (``inputs.sha256``: truth and shards), deletes the shards
   (``bnsl simulate`` regenerates them byte for byte from the manifest's seed) and only then moves
   ``evaluation.json`` into place, so a folder with ``evaluation.json`` is complete.

With ``measure=`` (benchmarks of time and memory, ``bench_learn.py``) ``bnsl learn`` runs under a
small Python wrapper that writes ``CELL/resources.json``: the process's wall seconds and peak RSS.

stderr of every command goes to ``CELL/log.txt``; a failed command leaves ``CELL/failed`` with the
exit code and no ``evaluation.json``. :func:`collect` reads every complete folder under a root.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Optional, Sequence

#: Environment fixed for every cell: one BLAS thread (the machine's cores run cells, not BLAS).
CELL_ENV = "OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1"


@dataclass(frozen=True)
class Cell:
    """One benchmark cell: ``id`` is a relative folder name (may contain ``/``), ``params`` the grid
    coordinates (JSON-able), ``simulate`` / ``learn`` the arguments after ``bnsl simulate`` and
    ``bnsl learn`` without the ``--out``/input paths, which the line adds."""

    id: str
    params: dict
    simulate: tuple[str, ...]
    learn: tuple[str, ...]
    evaluate: tuple[str, ...] = field(default=())

    def describe(self) -> dict:
        return {
            "id": self.id,
            "params": self.params,
            "bnsl simulate": list(self.simulate),
            "bnsl learn": list(self.learn),
            "bnsl evaluate": list(self.evaluate),
        }


def _q(path) -> str:
    return shlex.quote(str(path))


#: Run by ``python -c`` around ``bnsl learn`` when a line measures resources (``measure=``): runs
#: argv[2:], then writes argv[1] (JSON: the command's wall seconds, the peak resident set size of
#: the largest process it ran — the maximum over waited-for descendants, ``RUSAGE_CHILDREN`` — in
#: kB, and its exit code) and exits with that code. Python's ``resource`` module, so the line needs
#: no GNU time.
MEASURE = (
    "import json, resource, subprocess, sys, time; t = time.perf_counter(); rc = subprocess.call(sys.argv[2:]); "
    "w = time.perf_counter() - t; ru = resource.getrusage(resource.RUSAGE_CHILDREN); "
    "open(sys.argv[1], 'w').write(json.dumps({'wall_s': w, 'peak_rss_kb': ru.ru_maxrss, 'exit': rc}) + chr(10)); "
    "sys.exit(rc)"
)


def shell_line(cell: Cell, root: str | Path, bnsl: str = "bnsl", measure: Optional[str] = None) -> str:
    """The self-contained shell line of ``cell`` with its folder under ``root`` (see the module doc).

    ``measure``: a Python interpreter (e.g. ``sys.executable``); when given, ``bnsl learn`` runs
    under it with :data:`MEASURE` and the folder gets ``resources.json`` (wall seconds and peak RSS
    of the whole ``bnsl learn`` process, reading and imports included)."""
    D = '"$D"'
    desc = _q(json.dumps(cell.describe(), sort_keys=True))
    sim = " ".join(map(shlex.quote, cell.simulate))
    learn = " ".join(map(shlex.quote, cell.learn))
    ev = "".join(" " + shlex.quote(a) for a in cell.evaluate)
    # `env` runs a bnsl given as "VAR=value … command" as well as a plain command
    wrap = f"{measure} -c {_q(MEASURE)} {D}/resources.json env " if measure else ""
    steps = [
        f"{bnsl} simulate {sim} --force --out {D}/data",
        f"{wrap}{bnsl} learn {D}/data/shards {learn} --quiet --force --out {D}/run",
        f"{bnsl} evaluate {D}/run/report.json --truth {D}/data/truth.csv{ev} --json > {D}/evaluation.part",
        f"(cd {D}/data && sha256sum truth.csv shards/*.csv) > {D}/inputs.sha256",
        f"rm -rf {D}/data/shards",
        f"mv {D}/evaluation.part {D}/evaluation.json",
    ]
    body = " && ".join(steps)
    return (
        f"export {CELL_ENV}; D={_q(str(root).rstrip('/') + '/' + cell.id)}; C={desc}; "
        f"if printf '%s\\n' \"$C\" | cmp -s - {D}/cell.json && test -s {D}/evaluation.json; then :; else "
        f"mkdir -p {D} && rm -f {D}/evaluation.json {D}/failed {D}/resources.json && printf '%s\\n' \"$C\" > {D}/cell.json && "
        f"{{ {body}; }} 2> {D}/log.txt || {{ rc=$?; echo \"exit $rc\" > {D}/failed; exit $rc; }}; fi"
    )


def is_complete(cell: Cell, root: str | Path) -> bool:
    """True when the cell's folder holds its ``evaluation.json`` and exactly its ``cell.json``."""
    d = Path(root) / cell.id
    try:
        same = (d / "cell.json").read_text(encoding="utf-8") == json.dumps(cell.describe(), sort_keys=True) + "\n"
    except OSError:
        return False
    return same and (d / "evaluation.json").is_file() and (d / "evaluation.json").stat().st_size > 0


def run_lines(
    lines: Sequence[str],
    jobs: int = 1,
    timeout: Optional[float] = None,
    on_done: Optional[Callable[[int, int, float], None]] = None,
) -> list[int]:
    """Run shell lines with ``jobs`` at a time; returns their exit codes (124 on timeout).

    ``on_done(index, exit_code, seconds)`` is called as each line ends."""

    def one(k: int) -> int:
        t0 = time.perf_counter()
        proc = subprocess.Popen(["bash", "-c", lines[k]], start_new_session=True)
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 15)
            proc.wait()
            rc = 124
        if on_done is not None:
            on_done(k, rc, time.perf_counter() - t0)
        return rc

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        return list(pool.map(one, range(len(lines))))


def _load(path: Path):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def read_cell(folder: Path) -> Optional[dict]:
    """One flat row for a complete cell folder (``None`` when incomplete): the cell's params, the
    evaluation metrics, learn's timing / bytes / rounds / ε, and provenance (versions, seed, sha256)."""
    desc = _load(folder / "cell.json")
    ev = _load(folder / "evaluation.json")
    if not isinstance(desc, dict) or not isinstance(ev, list) or not ev:
        return None
    report = _load(folder / "run" / "report.json") or {}
    manifest = _load(folder / "data" / "manifest.json") or {}
    row = {"cell": desc.get("id"), **desc.get("params", {})}
    metrics = ev[0]
    for key in ("shd", "shd_cpdag", "shd_skeleton", "tpr", "fdr", "nnz", "skeleton_recall", "skeleton_precision",
                "reversed", "extra", "missing", "is_dag"):
        row[key] = metrics.get(key)
    timing = report.get("timing") or {}
    row["seconds"] = timing.get("wall_s", timing.get("compute_s"))
    comm = report.get("communication") or {}
    row["bytes"] = comm.get("bytes_total")
    row["rounds"] = report.get("rounds")
    privacy = report.get("privacy") or {}
    row["epsilon_spent"] = privacy.get("epsilon") if isinstance(privacy, dict) else None
    row["edges_true"] = (manifest.get("truth") or {}).get("edges")
    row["bnsl_version"] = (report.get("versions") or {}).get("bnsl") or manifest.get("bnsl_version")
    row["numpy_version"] = manifest.get("numpy_version")
    row["seed"] = manifest.get("seed", row.get("seed"))
    sha = folder / "inputs.sha256"
    # one digest for the whole input set: the sha256 of the inputs.sha256 listing
    row["inputs_sha256"] = hashlib.sha256(sha.read_bytes()).hexdigest() if sha.is_file() else None
    row["warnings"] = len(report.get("warnings") or [])
    return row


def collect(root: str | Path) -> tuple[list[dict], list[str]]:
    """Every complete cell under ``root`` as rows (sorted by cell id), and the ids of folders that
    have a ``cell.json`` but no result (failed or unfinished)."""
    root = Path(root)
    rows, incomplete = [], []
    for desc_path in sorted(root.rglob("cell.json")):
        folder = desc_path.parent
        row = read_cell(folder)
        if row is None:
            incomplete.append(str(folder.relative_to(root)))
        else:
            rows.append(row)
    return rows, incomplete


def default_bnsl() -> str:
    """The `bnsl` of this Python environment (its console script, else ``python -m bnsl_cli``)."""
    exe = Path(sys.executable).with_name("bnsl")
    if exe.is_file():
        return shlex.quote(str(exe))
    return f"{shlex.quote(sys.executable)} -m bnsl_cli"


def print_lines(cells: Iterable[Cell], root: str | Path, bnsl: str = "bnsl", file=None,
                measure: Optional[str] = None) -> int:
    n = 0
    try:
        for c in cells:
            print(shell_line(c, root, bnsl, measure), file=file or sys.stdout)
            n += 1
        (file or sys.stdout).flush()
    except BrokenPipeError:  # `| head`: stop quietly
        sys.stderr.close()
    return n

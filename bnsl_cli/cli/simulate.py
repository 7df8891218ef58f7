"""`bnsl simulate`: synthetic federated data from a random linear SEM with a known DAG."""

from __future__ import annotations

import enum
import json
import math
import shutil
from pathlib import Path
from typing import Optional

import typer

from bnsl_cli.cli.common import err_console, fail, print_json

GENERATOR = "bnsl simulate"
SCHEMA_VERSION = 1


class GraphType(str, enum.Enum):
    er = "er"
    sf = "sf"


class Noise(str, enum.Enum):
    gaussian = "gaussian"
    exponential = "exponential"
    gumbel = "gumbel"
    uniform = "uniform"


def _parse_range(text: str, option: str = "--weight-range", example: str = "0.5,2", single: bool = False):
    """``LOW,HIGH`` as two floats with ``0 < LOW <= HIGH``; with ``single`` one number ``V`` is
    also accepted and returned as a float."""
    parts = [p.strip() for p in text.split(",")]
    if single and len(parts) == 1:
        try:
            value = float(parts[0])
        except ValueError:
            raise ValueError(f"{option} must be a number or LOW,HIGH such as {example} (got {text!r})") from None
        if not math.isfinite(value) or value <= 0:
            raise ValueError(f"{option} must be > 0 (got {text!r})")
        return value
    if len(parts) != 2:
        raise ValueError(f"{option} must be LOW,HIGH such as {example} (got {text!r})")
    try:
        low, high = float(parts[0]), float(parts[1])
    except ValueError:
        raise ValueError(f"{option} must be two numbers LOW,HIGH such as {example} (got {text!r})") from None
    if not (math.isfinite(low) and math.isfinite(high)) or low <= 0 or high < low:
        raise ValueError(f"{option} needs 0 < LOW <= HIGH (got {text!r})")
    return low, high


def _previous_manifest(out: Path) -> Optional[dict]:
    """The manifest of an earlier `bnsl simulate` run in ``out``, or None."""
    try:
        obj = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if isinstance(obj, dict) and obj.get("generator") == GENERATOR:
        return obj
    return None


def _data_csv_chunks(X, names, chunk: int = 2048):
    """CSV text of a data matrix: shortest round-trip ``repr`` of every float, ``-0.0`` as ``0.0``."""
    yield ",".join(names) + "\n"
    for start in range(0, X.shape[0], chunk):
        block = (X[start : start + chunk] + 0.0).tolist()  # + 0.0 turns -0.0 into 0.0
        yield "".join(",".join(map(repr, row)) + "\n" for row in block)


def _write_data_csv(path: Path, X, names) -> None:
    from bnsl_cli.io.atomic import atomic_open

    with atomic_open(path, "w", newline="") as fh:
        for part in _data_csv_chunks(X, names):
            fh.write(part)


def command(
    nodes: int = typer.Option(..., "--nodes", "-d", help="Number of variables d (>= 2)."),
    edges: int = typer.Option(
        ...,
        "--edges",
        "-e",
        help="Expected number of edges (er: each pair gets an edge with p = E / (d(d-1)/2); "
        "sf: m = round(E / d) edges per new node). At most d(d-1)/2.",
    ),
    graph: GraphType = typer.Option(
        GraphType.er, "--graph", case_sensitive=False, help="Erdős–Rényi (er) or scale-free (sf) DAG."
    ),
    participants: int = typer.Option(..., "--participants", "-p", help="Number of shards P (>= 1)."),
    samples: int = typer.Option(..., "--samples", "-n", help="Rows per participant (>= 2)."),
    seed: Optional[int] = typer.Option(
        None, "--seed", help="Random seed (>= 0). Without it fresh entropy is drawn and recorded in manifest.json."
    ),
    out: Path = typer.Option(..., "--out", "-o", metavar="DIR", help="Output directory."),
    weight_range: str = typer.Option(
        "0.5,2", "--weight-range", metavar="LOW,HIGH", help="LOW,HIGH: |weights| uniform on \\[LOW, HIGH], random sign."
    ),
    noise: Noise = typer.Option(
        Noise.gaussian, "--noise", case_sensitive=False, help="Noise distribution (mean 0, variance scale²)."
    ),
    noise_scale: str = typer.Option(
        "1", "--noise-scale", metavar="SD|LOW,HIGH",
        help="Noise standard deviation: one number (the same for every variable) or LOW,HIGH (each variable's sd "
        "uniform on \\[LOW, HIGH], recorded in manifest.json; unequal variances identify the DAG only up to its "
        "Markov equivalence class).",
    ),
    column_scale: Optional[str] = typer.Option(
        None, "--column-scale", metavar="LOW,HIGH",
        help="Multiply each observed column by a log-uniform factor on \\[LOW, HIGH] (a change of units, recorded in "
        "manifest.json). truth.csv keeps the unscaled weights; truth-scaled.csv has them in the scaled units "
        "(w_ij · s_j / s_i); the DAG is the same.",
    ),
    heterogeneous: bool = typer.Option(
        False, "--heterogeneous", help="Same DAG, participant-specific weights (written to truths/)."
    ),
    spread: float = typer.Option(
        0.5, "--spread", help="With --heterogeneous: |w_p| = |w| + U\\[-spread, spread], reflected at LOW, sign kept."
    ),
    categorical: Optional[float] = typer.Option(
        None, "--categorical", metavar="SHARE", show_default=False,
        help="Make this share of the nodes categorical (mixed data: continuous children with per-level offsets, "
        "categorical children by a multinomial logit of their parents); levels written L0, L1, ...",
    ),
    levels: str = typer.Option("2,4", "--levels", metavar="LOW,HIGH", help="Levels of a categorical node (with --categorical)."),
    force: bool = typer.Option(False, "--force", help="Write into a non-empty directory not made by bnsl simulate."),
    json_out: bool = typer.Option(False, "--json", help="Print the manifest as JSON on stdout."),
    quiet: bool = typer.Option(False, "--quiet", "-q", envvar="BNSL_QUIET", help="No summary on stderr."),
) -> None:
    """Simulate a random DAG, its weights and P participant shards from the linear SEM X = XW + N.

    Orientation: W\\[i, j] is the weight of the edge i -> j (rows are parents). Writes truth.csv,
    truth.dot, manifest.json and shards/participant-NN.csv (or data.csv when P = 1); with
    --heterogeneous also truths/participant-NN.csv. The same seed gives byte-identical files.
    """
    import numpy as np

    from bnsl_cli import __version__
    from bnsl_cli import simulate as sim
    from bnsl_cli.io.atomic import atomic_write_text
    from bnsl_cli.io.dot import dot_text
    from bnsl_cli.io.graphs import adjacency_csv_text, ORIENTATION

    try:
        low, high = _parse_range(weight_range)
        noise_sd = _parse_range(noise_scale, "--noise-scale", "0.5,2", single=True)
        col_scale = _parse_range(column_scale, "--column-scale", "1e-3,1e6") if column_scale is not None else None
        sim.check_params(
            nodes,
            edges,
            graph.value,
            participants=participants,
            samples=samples,
            weight_range=(low, high),
            noise=noise.value,
            noise_scale=noise_sd,
            spread=spread,
            column_scale=col_scale,
        )
    except ValueError as exc:
        raise fail(str(exc), 2) from None
    if seed is not None and seed < 0:
        raise fail(f"--seed must be >= 0 (got {seed})", 2)

    def check_target() -> Optional[dict]:
        if out.exists() and not out.is_dir():
            raise fail(f"{out}: exists and is not a directory; choose another --out", 2)
        previous = _previous_manifest(out) if out.is_dir() else None
        if out.is_dir() and any(out.iterdir()) and previous is None and not force:
            raise fail(
                f"{out}: directory is not empty and was not written by bnsl simulate; "
                "choose another --out or add --force",
                2,
            )
        return previous

    check_target()
    if categorical is not None:
        _mixed(nodes, edges, graph.value, participants, samples, seed, out, categorical, levels, json_out, quiet)
        return
    result = sim.simulate(
        nodes,
        edges,
        participants=participants,
        samples=samples,
        graph_type=graph.value,
        weight_range=(low, high),
        noise=noise.value,
        noise_scale=noise_sd,
        heterogeneous=heterogeneous,
        spread=spread,
        seed=seed,
        column_scale=col_scale,
    )
    names = list(result.names)
    P = participants
    width = max(2, len(str(P)))
    n_edges = result.n_edges

    # Everything to write, as (relative path, kind, rows, writer). Generation has succeeded here.
    plan: list[tuple[str, str, dict, object]] = []
    plan.append(("truth.csv", "truth", {"rows": nodes, "edges": n_edges},
                 lambda p: atomic_write_text(p, adjacency_csv_text(result.W, names))))
    if result.W_scaled is not None:
        plan.append(("truth-scaled.csv", "truth_scaled", {"rows": nodes, "edges": n_edges},
                     lambda p: atomic_write_text(p, adjacency_csv_text(result.W_scaled, names))))
    plan.append(("truth.dot", "truth_dot", {"edges": n_edges},
                 lambda p: atomic_write_text(p, dot_text(result.W, names, title="bnsl simulate: true DAG"))))
    if heterogeneous:
        for k, Wp in enumerate(result.weights, start=1):
            plan.append((f"truths/participant-{k:0{width}d}.csv", "participant_truth",
                         {"participant": k, "rows": nodes, "edges": int(np.count_nonzero(Wp))},
                         lambda p, Wp=Wp: atomic_write_text(p, adjacency_csv_text(Wp, names))))
    if P == 1:
        plan.append(("data.csv", "data", {"participant": 1, "rows": samples},
                     lambda p: _write_data_csv(p, result.shards[0], names)))
    else:
        for k, X in enumerate(result.shards, start=1):
            plan.append((f"shards/participant-{k:0{width}d}.csv", "data", {"participant": k, "rows": samples},
                         lambda p, X=X: _write_data_csv(p, X, names)))

    options = dict(result.params)
    options["graph"] = graph.value
    manifest = {
        "schema_version": SCHEMA_VERSION,
        "generator": GENERATOR,
        "bnsl_version": __version__,
        "numpy_version": np.__version__,
        "orientation": ORIENTATION,
        "model": _model_text(result),
        "seed": result.seed,
        "seed_given": seed is not None,
        "options": options,
        "truth": {"nodes": names, "edges": n_edges, "expected_edges": edges},
        "files": [{"path": rel, "kind": kind, **info} for rel, kind, info, _ in plan]
        + [{"path": "manifest.json", "kind": "manifest"}],
    }

    previous = check_target()
    created = not out.exists()
    try:
        out.mkdir(parents=True, exist_ok=True)
        for rel, _, _, write in plan:
            write(out / rel)
        atomic_write_text(out / "manifest.json", json.dumps(manifest, indent=2, allow_nan=False) + "\n")
    except BaseException:
        if created:
            shutil.rmtree(out, ignore_errors=True)
        raise
    if previous is not None:
        _remove_stale(out, previous, {rel for rel, *_ in plan} | {"manifest.json"})

    first, last = f"{1:0{width}d}", f"{P:0{width}d}"
    written = ["truth.csv"] + (["truth-scaled.csv"] if result.W_scaled is not None else []) + ["truth.dot"]
    if heterogeneous:
        written.append(f"truths/participant-{first}.csv" + (f" … participant-{last}.csv" if P > 1 else ""))
    written.append("data.csv" if P == 1 else f"shards/participant-{first}.csv … participant-{last}.csv")
    written.append("manifest.json")
    if quiet:
        if json_out:
            print_json(manifest)
        return
    err_console.print(
        f"simulated {graph.value} DAG: {nodes} nodes, {n_edges} edge{'s' if n_edges != 1 else ''} "
        f"(expected {edges}); {P} participant{'s' if P != 1 else ''} × {samples} rows"
        f"{', heterogeneous weights' if heterogeneous else ''}; seed {result.seed}",
        soft_wrap=True,
        markup=False,
    )
    err_console.print(f"wrote {out}/: {', '.join(written)}", soft_wrap=True, markup=False)
    if json_out:
        print_json(manifest)


def _model_text(result) -> str:
    text = "X = X W + N; noise columns independent, mean 0, variance noise_scale^2"
    if result.noise_sds is not None:
        text = "X = X W + N; noise columns independent, mean 0, sd noise_sds[j] (uniform on noise_scale)"
    if result.column_factors is not None:
        text += (
            "; observed column j = X[:, j] * column_factors[j] (log-uniform on column_scale); truth.csv holds W, "
            "truth-scaled.csv W[i, j] * column_factors[j] / column_factors[i] (the same DAG in the observed units)"
        )
    return text


def _remove_stale(out: Path, previous: dict, keep: set[str]) -> None:
    """Delete files an earlier `bnsl simulate` run listed in its manifest and this run did not write."""
    root = out.resolve()
    for entry in previous.get("files", []):
        rel = entry.get("path") if isinstance(entry, dict) else None
        if not isinstance(rel, str) or rel in keep:
            continue
        target = (out / rel).resolve()
        if root not in target.parents or not target.is_file():
            continue
        target.unlink()
        parent = target.parent
        if parent != root and not any(parent.iterdir()):
            parent.rmdir()


def _mixed(nodes, edges, graph, participants, samples, seed, out, share, levels, json_out, quiet) -> None:
    """``simulate --categorical SHARE``: mixed data (:func:`bnsl_cli.simulate_mixed.simulate_mixed`); the
    shards hold the categorical columns as text, ``truth.csv`` the DAG (the weight of an edge between
    continuous nodes, 1 for an edge into or out of a categorical one)."""
    import numpy as np

    from bnsl_cli import __version__
    from bnsl_cli.io.atomic import atomic_open, atomic_write_text
    from bnsl_cli.io.graphs import ORIENTATION, adjacency_csv_text
    from bnsl_cli.simulate_mixed import simulate_mixed

    if not 0.0 <= share <= 1.0:
        raise fail(f"--categorical must be a share between 0 and 1, got {share:g}", 2)
    try:
        lo, hi = (int(x) for x in levels.split(","))
    except ValueError:
        raise fail(f"--levels {levels!r}: give two whole numbers LOW,HIGH (e.g. 2,4)", 2) from None
    if not 2 <= lo <= hi <= 20:
        raise fail(f"--levels {levels!r}: need 2 <= LOW <= HIGH <= 20", 2)
    used_seed = int(seed) if seed is not None else int(np.random.SeedSequence().entropy % (2**31))
    res = simulate_mixed(nodes, edges, share, (lo, hi), participants, samples, used_seed, graph)
    names = list(res.names)
    truth = np.where(res.B, res.W, 0.0)
    width = max(2, len(str(participants)))
    files = [("truth.csv", "truth")]
    files += [("data.csv" if participants == 1 else f"shards/participant-{k:0{width}d}.csv", "data")
              for k in range(1, participants + 1)]
    manifest = {
        "schema_version": SCHEMA_VERSION, "generator": GENERATOR, "bnsl_version": __version__,
        "numpy_version": np.__version__, "orientation": ORIENTATION,
        "model": ("mixed SEM: a continuous node = its continuous parents' weighted sum + an offset per level of each "
                  "categorical parent + N(0, 1); a categorical node draws its level from a multinomial logit of its "
                  "parents; truth.csv: the weight between continuous nodes, 1 into or out of a categorical node"),
        "seed": used_seed, "seed_given": seed is not None,
        "options": {"graph": graph, "categorical": share, "levels": [lo, hi], "participants": participants,
                    "samples": samples},
        "truth": {"nodes": names, "edges": int(res.B.sum()), "expected_edges": edges,
                  "categorical": {k: list(v) for k, v in res.levels.items()}},
        "files": [{"path": rel, "kind": kind} for rel, kind in files] + [{"path": "manifest.json", "kind": "manifest"}],
    }
    created = not out.exists()
    try:
        out.mkdir(parents=True, exist_ok=True)
        atomic_write_text(out / "truth.csv", adjacency_csv_text(truth, names))
        for (rel, _), shard in zip(files[1:], res.shards):
            (out / rel).parent.mkdir(parents=True, exist_ok=True)
            with atomic_open(out / rel, "w", newline="") as fh:
                fh.write(",".join(names) + "\n")
                cols = [shard[n] if n in res.levels else [repr(float(v)) for v in shard[n]] for n in names]
                for row in zip(*cols):
                    fh.write(",".join(row) + "\n")
        atomic_write_text(out / "manifest.json", json.dumps(manifest, indent=2, allow_nan=False) + "\n")
    except BaseException:
        if created:
            shutil.rmtree(out, ignore_errors=True)
        raise
    if json_out:
        print_json(manifest)
    if not quiet:
        err_console.print(
            f"simulated mixed {graph} DAG: {nodes} nodes ({len(res.levels)} categorical), {int(res.B.sum())} edges; "
            f"{participants} participant{'s' if participants != 1 else ''} × {samples} rows; seed {used_seed}",
            soft_wrap=True, markup=False)
        err_console.print(f"wrote {out}/", soft_wrap=True, markup=False)

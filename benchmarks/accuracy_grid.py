"""Accuracy grid (issue 11): structure accuracy of every method on harder simulated data.

Axes of the full grid (the factorial product; meant for a cluster, see ``examples/cluster/``):
graphs ER1, ER2, ER4, SF2, SF4 (ERk: Erdős–Rényi with k·d expected edges; SFk: scale-free with k
edges per new node) × d ∈ {20, 50, 100} × seeds 1–5 × noise equal (sd 1) / unequal (sd uniform on
[0.5, 2]) × weights default (|w| ∈ [0.5, 2]) / weak (|w| ∈ [0.2, 1]) × the same 40,000 rows over
P ∈ {8, 50, 200} sites × methods fed-sparse, fed-moments, fed-bnsl, notears (pooled), non-private
and under --dp with ε ∈ {1, 10} (fed-sparse, fed-moments, fed-bnsl; NOTEARS pooled has no DP).
Every run uses `bnsl learn` defaults: nothing is tuned to the grid.

``--quick`` (d ≤ 50, seeds 1–3) runs slices of that grid, in this order (see QUICK_SLICES):
  core  every graph, d = 20, equal and unequal noise, default weights, P = 8, all four methods
  dp    ER2 and SF2, d = 20, equal noise, P = 8, ε ∈ {1, 10}: fed-sparse, fed-moments, fed-bnsl
  weak  ER2 and SF2, d = 20, equal and unequal noise, weak weights, P = 8: fed-sparse, fed-moments, notears
  sites ER1, d = 20, equal noise, P ∈ {50, 200}: fed-sparse, fed-moments, notears
  d50   ER2 and SF2, d = 50, equal and unequal noise, P = 8: fed-sparse, fed-moments, notears
  scale ER2, d = 20, equal noise, P = 8, learn --standardize on raw columns (variant std) and on
        columns times log-uniform factors in [1e-3, 1e6] (cs-std): fed-sparse, fed-moments, notears;
        target: identical graphs (skipped while `bnsl learn` has no --standardize)
Cells run seed by seed (all slices' seed 1, then seed 2, then 3), so a run cut short still covers
every group. Left out of --quick (cost on 2 cores: pooled NOTEARS alone takes about a minute per
d = 50 cell): d = 100, graphs beyond the slices above, fed-bnsl outside core and dp, P > 8 beyond
ER1, DP at P > 8, DP with unequal noise or weak weights.

Usage:
  python benchmarks/accuracy_grid.py --quick --jobs 2                # run, collect, print the table
  python benchmarks/accuracy_grid.py --quick --print-commands > cells.txt   # one shell line per cell
  python benchmarks/accuracy_grid.py --collect DIR --results-md benchmarks/RESULTS.md
  python benchmarks/accuracy_grid.py --only 'ER2/d20/eq-def/P8/*/fed-sparse'   # regenerate cells
  python benchmarks/accuracy_grid.py --quick --acyclicity expm,logdet --only '*-expm' --only '*-logdet'
      # every fed-sparse cell with both acyclicity functions (variants expm / logdet); --collect then
      # adds the paired comparison (rules R1/R2 of benchmarks/RESULTS.md, "Acyclicity default")

A method `bnsl learn` does not offer (yet) is skipped and named in the table's notes, never faked.
"""

from __future__ import annotations

import argparse
import csv
import fnmatch
import itertools
import json
import math
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _cells import Cell, collect, default_bnsl, is_complete, print_lines, run_lines, shell_line  # noqa: E402

ROWS = 40_000
GRAPHS = ("ER1", "ER2", "ER4", "SF2", "SF4")
DIMS = (20, 50, 100)
SEEDS = (1, 2, 3, 4, 5)
NOISES = ("eq", "uneq")
WEIGHTS = ("def", "weak")
SITES = (8, 50, 200)
METHODS = ("fed-sparse", "fed-moments", "fed-bnsl", "notears")
DP_METHODS = ("fed-sparse", "fed-moments", "fed-bnsl")
EPSILONS = (1.0, 10.0)

NOISE_ARG = {"eq": "1", "uneq": "0.5,2"}
WEIGHT_ARG = {"def": "0.5,2", "weak": "0.2,1"}

#: --quick: (name, graphs, dims, noises, weights, sites, methods, epsilons); epsilon None = non-private.
QUICK_SEEDS = (1, 2, 3)
QUICK_SLICES = (
    ("core", GRAPHS, (20,), NOISES, ("def",), (8,), METHODS, (None,)),
    ("dp", ("ER2", "SF2"), (20,), ("eq",), ("def",), (8,), DP_METHODS, EPSILONS),
    ("weak", ("ER2", "SF2"), (20,), NOISES, ("weak",), (8,), ("fed-sparse", "fed-moments", "notears"), (None,)),
    ("sites", ("ER1",), (20,), ("eq",), ("def",), (50, 200), ("fed-sparse", "fed-moments", "notears"), (None,)),
    ("d50", ("ER2", "SF2"), (50,), NOISES, ("def",), (8,), ("fed-sparse", "fed-moments", "notears"), (None,)),
)
#: --quick scale-invariance slice: ER2, d = 20, equal noise, P = 8, learn --standardize on the raw
#: columns and on columns rescaled by COLUMN_SCALE; the two graphs must be identical.
QUICK_SCALE = (("ER2",), (20,), ("fed-sparse", "fed-moments", "notears"), ("std", "cs-std"))


def graph_args(graph: str, d: int) -> list[str]:
    kind, k = graph[:2].lower(), int(graph[2:])
    return ["--graph", kind, "--nodes", str(d), "--edges", str(k * d)]


#: Column scales of the scale-invariance slice (each column times a log-uniform factor).
COLUMN_SCALE = "1e-3,1e6"


#: Variants that name the coordinator's acyclicity function explicitly (learn --acyclicity V):
#: fed-sparse only (the other methods have no choice of h).
H_VARIANTS = ("expm", "logdet")
H_METHODS = ("fed-sparse",)


def make_cell(graph, d, noise, weights, P, seed, method, eps, variant="", rows=ROWS) -> Cell:
    """``variant``: "" (defaults), "std" (learn --standardize), "cs-std" (columns rescaled by
    ``--column-scale COLUMN_SCALE`` and learn --standardize), or "expm" / "logdet" (learn
    --acyclicity V; fed-sparse only)."""
    dp = eps is not None
    run = method + (f"-dp{eps:g}" if dp else "") + (f"-{variant}" if variant else "")
    sites = f"P{P}" if rows == ROWS else f"P{P}x{rows // P}"
    cid = f"{graph}/d{d}/{noise}-{weights}/{sites}/s{seed}/{run}"
    params = dict(graph=graph, d=d, noise=noise, weights=weights, P=P, seed=seed, method=method,
                  epsilon=eps, rows=rows)
    if variant:
        params["variant"] = variant
    sim = graph_args(graph, d) + [
        "--participants", str(P), "--samples", str(rows // P), "--seed", str(seed),
        "--noise-scale", NOISE_ARG[noise], "--weight-range", WEIGHT_ARG[weights],
    ]
    if variant == "cs-std":
        sim += ["--column-scale", COLUMN_SCALE]
    learn = ["--method", method, "--seed", str(seed)]
    if dp:
        learn += ["--dp", "--epsilon", f"{eps:g}"]
    if variant in ("std", "cs-std"):
        learn += ["--standardize"]
    if variant in H_VARIANTS:
        learn += ["--acyclicity", variant]
    if variant == "per-site":
        learn += ["--noise", "per-site"]
    return Cell(cid, params, tuple(sim), tuple(learn))


#: --private (issue 19): (graph, d, noise, P, rows, [(method, ε), ...]); seeds QUICK_SEEDS. The
#: non-private fed-sparse (the default) is each group's reference; Sachs is benchmarks/private_sachs.py.
PRIVATE_SLICES = (
    ("ER2", 20, "eq", 8, ROWS, [("fed-sparse", None), ("fed-suffstats", 1.0), ("fed-suffstats", 5.0),
                                ("fed-suffstats", 10.0)]),
    ("ER2", 50, "uneq", 5, 5000, [("fed-sparse", None), ("fed-suffstats", 5.0), ("fed-sparse", 5.0)]),
    ("SF2", 50, "uneq", 5, 5000, [("fed-sparse", None), ("fed-suffstats", 5.0), ("fed-sparse", 5.0)]),
    ("ER2", 100, "uneq", 5, 5000, [("fed-sparse", None), ("fed-suffstats", 5.0), ("fed-sparse", 5.0)]),
)


def private_cells() -> list[Cell]:
    out = []
    for s in QUICK_SEEDS:
        for g, d, noise, P, rows, runs in PRIVATE_SLICES:
            for m, e in runs:
                out.append(make_cell(g, d, noise, "def", P, s, m, e, rows=rows))
    return out


#: --private-grid (issue 19's grid): every graph × d × site layout × seed, unequal noise, default
#: weights; per data set the non-private default (fed-sparse) and the --dp default (fed-suffstats)
#: at every ε with the secure sum on (distributed noise, variant "") and off (variant "per-site":
#: each site adds the whole noise). Cells run d by d, seed by seed, so a run cut short has the
#: small networks of every graph.
PRIVATE_GRID_GRAPHS = ("ER1", "ER2", "SF2")
PRIVATE_GRID_DIMS = (20, 50, 100)
PRIVATE_GRID_SIZES = ((5, 1000), (8, 5000))
PRIVATE_GRID_EPSILONS = (1.0, 5.0, 10.0)
PRIVATE_GRID_NOISE = ("", "per-site")


def private_grid_cells() -> list[Cell]:
    out = []
    for d, s, g, (P, n) in itertools.product(PRIVATE_GRID_DIMS, QUICK_SEEDS, PRIVATE_GRID_GRAPHS, PRIVATE_GRID_SIZES):
        out.append(make_cell(g, d, "uneq", "def", P, s, "fed-sparse", None, rows=P * n))
        for e, v in itertools.product(PRIVATE_GRID_EPSILONS, PRIVATE_GRID_NOISE):
            out.append(make_cell(g, d, "uneq", "def", P, s, "fed-suffstats", e, v, rows=P * n))
    return out


def full_cells() -> list[Cell]:
    out = []
    for g, d, s, n, w, P in itertools.product(GRAPHS, DIMS, SEEDS, NOISES, WEIGHTS, SITES):
        for m in METHODS:
            out.append(make_cell(g, d, n, w, P, s, m, None))
        for m, e in itertools.product(DP_METHODS, EPSILONS):
            out.append(make_cell(g, d, n, w, P, s, m, e))
    return out


def quick_cells() -> list[Cell]:
    out, seen = [], set()
    # seed-major: an interrupted run has every group's first seeds
    for s, (_, graphs, dims, noises, weights, sites, methods, eps) in itertools.product(QUICK_SEEDS, QUICK_SLICES):
        for g, d, n, w, P, m, e in itertools.product(graphs, dims, noises, weights, sites, methods, eps):
            c = make_cell(g, d, n, w, P, s, m, e)
            if c.id not in seen:
                seen.add(c.id)
                out.append(c)
        if _ == QUICK_SLICES[-1][0]:
            graphs, dims, methods, variants = QUICK_SCALE
            for g, d, m, v in itertools.product(graphs, dims, methods, variants):
                out.append(make_cell(g, d, "eq", "def", 8, s, m, None, v))
    return out


def h_twins(cells: list[Cell], functions) -> list[Cell]:
    """``cells`` with, after each fed-sparse cell run with defaults, its twins that name the
    acyclicity function (variants ``functions``, e.g. ("expm", "logdet")): both live side by side
    in one root and one table."""
    out = []
    for c in cells:
        out.append(c)
        p = c.params
        if p["method"] in H_METHODS and not p.get("variant"):
            for f in functions:
                out.append(make_cell(p["graph"], p["d"], p["noise"], p["weights"], p["P"], p["seed"], p["method"],
                                     p["epsilon"], f))
    return out


def available_methods() -> tuple[set, set]:
    """(methods `bnsl learn` offers, methods it can run under --dp)."""
    from bnsl_cli.federated.methods import registry

    methods = set(registry.METHODS)
    private = set(registry.PRIVATE_METHODS)
    return methods, private


def has_standardize() -> bool:
    """True when `bnsl learn` offers --standardize (its CLI option and the library stage)."""
    import inspect

    from bnsl_cli.cli import learn as cli_learn
    from bnsl_cli.federated import standardize

    return hasattr(standardize, "standardize_stage") and "standardize" in inspect.signature(cli_learn.command).parameters


def unavailable(c: Cell, methods: set, private: set, standardize: bool) -> str | None:
    """Why `bnsl learn` here cannot run the cell (None: it can)."""
    p = c.params
    if p["method"] not in methods:
        return p["method"]
    if p["epsilon"] is not None and p["method"] not in private:
        return p["method"] + " --dp"
    if p.get("variant") and not standardize:
        return "--standardize"
    return None


# ---------------------------------------------------------------------------------------------
# table


GROUP_KEYS = ("graph", "d", "noise", "weights", "P", "method", "epsilon", "variant")


def _group_id(r) -> str:
    run = r["method"] + (f"-dp{r['epsilon']:g}" if r["epsilon"] is not None else "")
    run += f"-{r['variant']}" if r.get("variant") else ""
    return f"{r['graph']}/d{r['d']}/{r['noise']}-{r['weights']}/P{r['P']}/s*/{run}"


def _ms(values, digits=1) -> str:
    vals = [v for v in values if v is not None]
    if not vals:
        return "–"
    m = statistics.fmean(vals)
    if len(vals) == 1:
        return f"{m:.{digits}f}"
    return f"{m:.{digits}f} ± {statistics.stdev(vals):.{digits}f}"


def _edge_sets(root: Path, rows) -> dict:
    """cell id -> frozenset of (source, target) of the learned graph (for the fed-moments check)."""
    out = {}
    for r in rows:
        try:
            rep = json.loads((root / r["cell"] / "run" / "report.json").read_text())
            out[r["cell"]] = frozenset((e["source"], e["target"]) for e in rep["graph"]["edges"])
        except (OSError, ValueError, KeyError, TypeError):
            pass
    return out


def summarise(rows: list[dict]) -> list[dict]:
    groups: dict = {}
    for r in rows:
        groups.setdefault(tuple(r.get(k) or ("" if k == "variant" else r.get(k)) for k in GROUP_KEYS), []).append(r)
    out = []
    def order(kv):
        g, d, noise, weights, P, method, eps, variant = kv[0]
        return (str(g), int(d), str(noise), str(weights), int(P), str(method), -1.0 if eps is None else float(eps),
                str(variant))

    for key, rs in sorted(groups.items(), key=order):
        rs = sorted(rs, key=lambda r: r["seed"])
        g = dict(zip(GROUP_KEYS, key))
        g.update(
            seeds=[r["seed"] for r in rs],
            shd=[r["shd"] for r in rs],
            shd_cpdag=[r["shd_cpdag"] for r in rs],
            shd_skeleton=[r["shd_skeleton"] for r in rs],
            tpr=[r["tpr"] for r in rs],
            fdr=[r["fdr"] if r["fdr"] is not None else 0.0 for r in rs],
            skeleton_recall=[r["skeleton_recall"] for r in rs],
            seconds=[r["seconds"] for r in rs],
            bytes=[r["bytes"] for r in rs],
            cells=[r["cell"] for r in rs],
        )
        out.append(g)
    return out


def _mean(v):
    v = [x for x in v if x is not None]
    return statistics.fmean(v) if v else None


def targets(groups: list[dict], edge_sets: dict) -> dict:
    """Issue 11's targets per group (d ≤ 50): name -> (met: bool | None, detail str)."""
    by = {tuple(g[k] for k in GROUP_KEYS): g for g in groups}
    res = {}

    def other(g, method, eps=None, variant=""):
        return by.get((g["graph"], g["d"], g["noise"], g["weights"], g["P"], method, eps, variant))

    def common(a, b):
        seeds = sorted(set(a["seeds"]) & set(b["seeds"]))
        pick = lambda g: [g["shd"][g["seeds"].index(s)] for s in seeds]  # noqa: E731
        return seeds, pick(a), pick(b)

    for g in groups:
        key = _group_id(g)
        if g["d"] > 50:
            continue
        if g["variant"] == "cs-std":
            raw = other(g, g["method"], g["epsilon"], "std")
            if raw:
                pairs = [(c, raw["cells"][raw["seeds"].index(s)]) for c, s in zip(g["cells"], g["seeds"])
                         if s in raw["seeds"]]
                same = [edge_sets.get(a) is not None and edge_sets.get(a) == edge_sets.get(b) for a, b in pairs]
                if pairs:
                    res[key] = (all(same), f"same graph as unscaled --standardize on {sum(same)}/{len(same)} seeds")
            continue
        # the acyclicity twins (variant expm / logdet) are checked like the default cells, against
        # pooled NOTEARS and, under DP, against the non-private run of the same function
        hv = g["variant"] if g["variant"] in H_VARIANTS else ""
        if g["variant"] and not hv:
            continue
        pooled = other(g, "notears")
        if g["method"] == "fed-sparse" and g["epsilon"] is None and pooled:
            seeds, a, b = common(g, pooled)
            if seeds:
                lim = 1.25 * statistics.fmean(b) + 2
                res[key] = (statistics.fmean(a) <= lim, f"SHD {statistics.fmean(a):.1f}, target ≤ 1.25×pooled+2 = {lim:.1f}")
        if g["method"] == "fed-sparse" and g["epsilon"] == 10.0:
            base = other(g, "fed-sparse", None, hv)
            if base:
                seeds, a, b = common(g, base)
                if seeds:
                    lim = 2 * statistics.fmean(b) + 3
                    res[key] = (statistics.fmean(a) <= lim, f"SHD {statistics.fmean(a):.1f}, target ≤ 2×non-private+3 = {lim:.1f}")
        if g["method"] == "fed-moments" and g["epsilon"] == 10.0 and pooled:
            seeds, a, b = common(g, pooled)
            if seeds:
                lim = 1.5 * statistics.fmean(b) + 2
                res[key] = (statistics.fmean(a) <= lim, f"SHD {statistics.fmean(a):.1f}, target ≤ 1.5×pooled+2 = {lim:.1f}")
        if g["method"] == "fed-moments" and g["epsilon"] is None and pooled:
            pairs = [(c, pooled["cells"][pooled["seeds"].index(s)]) for c, s in zip(g["cells"], g["seeds"])
                     if s in pooled["seeds"]]
            same = [edge_sets.get(a) is not None and edge_sets.get(a) == edge_sets.get(b) for a, b in pairs]
            if pairs:
                res[key] = (all(same), f"edge set = pooled on {sum(same)}/{len(same)} seeds")
        if g["weights"] == "weak" and g["epsilon"] is None and g["method"] in ("fed-sparse", "fed-moments"):
            rec = _mean(g["skeleton_recall"])
            if rec is not None:
                prev = res.get(key)
                met = rec >= 0.9 and (prev is None or prev[0])
                detail = f"skeleton recall {rec:.2f}, target ≥ 0.9" + (f"; {prev[1]}" if prev else "")
                res[key] = (met, detail)
    return res


def markdown(groups, tgt, skipped_methods, incomplete, expected=None, command_prefix="python benchmarks/accuracy_grid.py") -> str:
    lines = [
        "| graph | d | noise | weights | P | method | ε | variant | seeds | SHD | SHD cpdag | SHD skel | TPR | FDR | skel recall "
        "| seconds | bytes | target | regenerate |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for g in groups:
        key = _group_id(g)
        t = tgt.get(key)
        mark = "–" if t is None else (("met: " if t[0] else "**missed**: ") + t[1])
        byts = _mean(g["bytes"])
        eps = "–" if g["epsilon"] is None else f"{g['epsilon']:g}"
        regen = f"{command_prefix}" + (f" --acyclicity {g['variant']}" if g["variant"] in H_VARIANTS else "")
        lines.append(
            f"| {g['graph']} | {g['d']} | {g['noise']} | {g['weights']} | {g['P']} | {g['method']} "
            f"| {eps} | {g['variant'] or '–'} | {len(g['seeds'])} "
            f"| {_ms(g['shd'])} | {_ms(g['shd_cpdag'])} | {_ms(g['shd_skeleton'])} | {_ms(g['tpr'], 2)} "
            f"| {_ms(g['fdr'], 2)} | {_ms(g['skeleton_recall'], 2)} | {_ms(g['seconds'])} "
            f"| {'–' if not byts else f'{byts / 1e6:.2f} MB'} | {mark} | `{regen} --only '{key}'` |"
        )
    met = sum(1 for v in tgt.values() if v[0])
    notes = [f"Targets checked: {len(tgt)} groups, {met} met, {len(tgt) - met} missed."]
    if skipped_methods:
        notes.append("Skipped (not offered by `bnsl learn` on this commit, not faked): " + ", ".join(sorted(skipped_methods)) + ".")
    if incomplete:
        notes.append(f"{len(incomplete)} cell folder(s) without a result (failed or unfinished): "
                     + ", ".join(f"`{c}`" for c in incomplete[:12]) + (" …" if len(incomplete) > 12 else "") + ".")
    if expected is not None:
        notes.append(f"Cells in the requested grid: {expected}; with a result: {sum(len(g['seeds']) for g in groups)}.")
    return "\n".join(lines) + "\n\n" + "\n".join(f"- {n}" for n in notes) + "\n"


def write_csv(path: Path, rows: list[dict]) -> None:
    keys = list(dict.fromkeys(k for r in rows for k in r))
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=keys, lineterminator="\n")
        w.writeheader()
        w.writerows(rows)


def replace_section(md_path: Path, title: str, body: str) -> None:
    """Replace (or append) the ``## title`` section of a markdown file, leaving other sections alone."""
    text = md_path.read_text(encoding="utf-8") if md_path.exists() else "# Benchmark results\n"
    head = f"## {title}"
    lines = text.splitlines(keepends=True)
    start = next((k for k, ln in enumerate(lines) if ln.rstrip() == head), None)
    new = head + "\n\n" + body.rstrip() + "\n"
    if start is None:
        text = text.rstrip() + "\n\n" + new
    else:
        end = next((k for k in range(start + 1, len(lines)) if lines[k].startswith("## ")), len(lines))
        text = "".join(lines[:start]) + new + ("\n" + "".join(lines[end:]) if end < len(lines) else "")
    md_path.write_text(text, encoding="utf-8")


def provenance(rows) -> str:
    import os
    import platform

    versions = sorted({str(r.get("bnsl_version")) for r in rows})
    numpy_v = sorted({str(r.get("numpy_version")) for r in rows})
    return (
        f"Collected {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} from {len(rows)} cells; bnsl "
        f"{', '.join(versions) or '?'}, numpy "
        f"{', '.join(numpy_v) or '?'}; {platform.machine()} with {os.cpu_count()} cores, one BLAS thread per cell. "
        "Mean ± sd over seeds; seconds = `timing.wall_s` of the learn report; bytes = `communication.bytes_total`; "
        "FDR of an empty graph counted as 0. Targets (issue 11) are checked for d ≤ 50 on the seeds both groups have.\n\n"
    )


def acyclicity_comparison(groups: list[dict], tgt: dict) -> str:
    """Markdown: every group that has both acyclicity twins (variants expm and logdet), SHD per
    seed side by side, the paired difference δ = logdet − expm (mean ± standard error), rule R1
    (mean δ ≤ max(1, se)) and R2 (the target status does not flip from met to missed); see
    benchmarks/RESULTS.md. Empty when no group has both twins."""
    by = {tuple(g[k] for k in GROUP_KEYS): g for g in groups}
    lines = [
        "| graph | d | noise | weights | P | ε | SHD expm (per seed) | SHD logdet (per seed) | mean δ ± se | R1 "
        "| target expm → logdet | R2 |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    n = r1 = r2 = 0
    deltas_all, by_mode = [], {}
    for g in groups:
        if g["variant"] != "logdet":
            continue
        e = by.get(tuple(g[k] for k in GROUP_KEYS[:-1]) + ("expm",))
        if e is None:
            continue
        seeds = sorted(set(g["seeds"]) & set(e["seeds"]))
        if not seeds:
            continue
        a = [e["shd"][e["seeds"].index(s)] for s in seeds]
        b = [g["shd"][g["seeds"].index(s)] for s in seeds]
        delta = [y - x for x, y in zip(a, b)]
        md = statistics.fmean(delta)
        se = statistics.stdev(delta) / math.sqrt(len(delta)) if len(delta) > 1 else 0.0
        ok1 = md <= max(1.0, se) + 1e-9  # a single differing seed gives mean = se exactly
        te, tl = tgt.get(_group_id(e)), tgt.get(_group_id(g))
        ok2 = not (te and tl and te[0] and not tl[0])
        status = "–" if te is None and tl is None else (
            f"{'met' if te and te[0] else 'missed'} → {'met' if tl and tl[0] else 'missed'}")
        n, r1, r2 = n + 1, r1 + ok1, r2 + ok2
        deltas_all += delta
        by_mode.setdefault("DP" if g["epsilon"] is not None else "non-private", []).append((ok1 and ok2, delta))
        eps = "–" if g["epsilon"] is None else f"{g['epsilon']:g}"
        lines.append(
            f"| {g['graph']} | {g['d']} | {g['noise']} | {g['weights']} | {g['P']} | {eps} | {' '.join(map(str, a))} "
            f"| {' '.join(map(str, b))} | {md:+.2f} ± {se:.2f} | {'holds' if ok1 else '**fails**'} | {status} "
            f"| {'holds' if ok2 else '**fails**'} |"
        )
    if not n:
        return ""
    notes = [f"{n} groups with both functions: R1 holds in {r1}, R2 in {r2}; over all {len(deltas_all)} paired "
             f"cells mean δ = {statistics.fmean(deltas_all):+.2f} (logdet lower in "
             f"{sum(x < 0 for x in deltas_all)}, equal in {sum(x == 0 for x in deltas_all)}, higher in "
             f"{sum(x > 0 for x in deltas_all)})."]
    for mode, res in sorted(by_mode.items()):
        ds = [x for _, dl in res for x in dl]
        notes.append(f"{mode}: {sum(ok for ok, _ in res)}/{len(res)} groups pass R1 and R2; mean δ "
                     f"{statistics.fmean(ds):+.2f} over {len(ds)} cells.")
    return "\n".join(lines) + "\n\n" + "\n".join(f"- {x}" for x in notes) + "\n"


def report(root: Path, args, expected=None, skipped=()) -> str:
    rows, incomplete = collect(root)
    groups = summarise(rows)
    tgt = targets(groups, _edge_sets(root, rows))
    md = provenance(rows) + markdown(groups, tgt, set(skipped), incomplete, expected)
    write_csv(root / "accuracy_grid.csv", rows)
    (root / "accuracy_grid.md").write_text(md, encoding="utf-8")
    cmp_md = acyclicity_comparison(groups, tgt)
    if cmp_md:
        (root / "accuracy_grid_acyclicity.md").write_text(cmp_md, encoding="utf-8")
        md += "\n### expm against logdet\n\n" + cmp_md
    if args.results_md:
        intro = args.results_intro.read_text(encoding="utf-8") if args.results_intro else ""
        replace_section(Path(args.results_md), "Accuracy grid", intro + md)
    return md


def _failed(root: Path, incomplete) -> dict:
    """cell id -> "exit N" for the incomplete cells that failed (unfinished ones are left out)."""
    out = {}
    for cid in incomplete:
        f = root / cid / "failed"
        if f.is_file():
            out[cid] = f.read_text(encoding="utf-8").strip()
    return out


def private_grid_table(root: Path) -> str:
    """Issue 19's grid as one row per data layout (graph, d, sites × rows): the non-private default's
    SHD, the empty graph's (the true edges), and fed-suffstats' mean SHD [skeleton recall] per ε with
    the secure sum on (distributed noise) and off (per-site); exits counted, seeds in brackets; then
    the issue's targets on these cells."""
    rows, incomplete = collect(root)
    failed = _failed(root, incomplete)
    by: dict = {}
    for r in rows:
        key = (r["graph"], int(r["d"]), int(r["P"]), int(r["rows"]) // int(r["P"]))
        run = "np" if r["epsilon"] is None else (float(r["epsilon"]), r.get("variant") or "")
        by.setdefault(key, {}).setdefault(run, []).append(r)
    for cid, why in failed.items():
        desc = json.loads((root / cid / "cell.json").read_text(encoding="utf-8"))["params"]
        key = (desc["graph"], int(desc["d"]), int(desc["P"]), int(desc["rows"]) // int(desc["P"]))
        run = "np" if desc["epsilon"] is None else (float(desc["epsilon"]), desc.get("variant") or "")
        by.setdefault(key, {}).setdefault(run, []).append({"failed": why, "seed": desc["seed"]})
    eps_list = sorted({k[0] for g in by.values() for k in g if k != "np"})
    modes = ("", "per-site")
    head = ["graph", "d", "sites × rows", "empty", "non-private"]
    head += [f"ε = {e:g} {'secure sum' if m == '' else 'per-site'}" for e in eps_list for m in modes]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]

    def cell(rs):
        if not rs:
            return "–"
        ok = [r for r in rs if "failed" not in r]
        bad = [r for r in rs if "failed" in r]
        parts = []
        if ok:
            shd = statistics.fmean(r["shd"] for r in ok)
            rec = statistics.fmean(r["skeleton_recall"] for r in ok)
            seeds = " ".join(str(r["shd"]) for r in sorted(ok, key=lambda r: r["seed"]))
            parts.append(f"{shd:.1f} [{seeds}] r {rec:.2f}")
        if bad:
            parts.append(f"{len(bad)}× {bad[0]['failed']}")
        return "; ".join(parts)

    for key in sorted(by):
        g = by[key]
        empty = [r["edges_true"] for rs in g.values() for r in rs if "failed" not in r and r.get("edges_true")]
        seeds_empty = {}
        for rs in g.values():
            for r in rs:
                if "failed" not in r and r.get("edges_true"):
                    seeds_empty[r["seed"]] = r["edges_true"]
        e_mean = statistics.fmean(seeds_empty.values()) if seeds_empty else float("nan")
        line = [key[0], str(key[1]), f"{key[2]} × {key[3]:,}", f"{e_mean:.1f}", cell(g.get("np", []))]
        line += [cell(g.get((e, m), [])) for e in eps_list for m in modes]
        lines.append("| " + " | ".join(line) + " |")
    # the targets
    out = ["\n".join(lines), ""]
    above = []
    for key, g in by.items():
        for run, rs in g.items():
            if run == "np":
                continue
            for r in rs:
                if "failed" not in r and r.get("edges_true") is not None and r["shd"] > r["edges_true"]:
                    above.append(f"{key[0]} d{key[1]} {key[2]}×{key[3]} ε {run[0]:g} {run[1] or 'secure sum'} seed {r['seed']}: "
                                 f"SHD {r['shd']} > {r['edges_true']}")
    exits5 = []
    for key, g in by.items():
        for run, rs in g.items():
            if run != "np" and run[0] >= 5 and key[3] >= 1000 and key[1] <= 150:
                exits5 += [f"{key[0]} d{key[1]} {key[2]}×{key[3]} ε {run[0]:g} {run[1] or 'secure sum'} seed {r['seed']}: {r['failed']}"
                           for r in rs if "failed" in r]
    out.append(f"- Private runs above the empty graph's SHD: {len(above)}" + (": " + "; ".join(sorted(above)) if above else ""))
    out.append(f"- Runs that stopped at ε ≥ 5 with ≥ 1,000 rows per site (d ≤ 150): {len(exits5)}"
               + (": " + "; ".join(sorted(exits5)) if exits5 else ""))
    for gname, d, P, n, eps, rule in (("ER2", 20, 8, 5000, 1.0, "np+3"), ("ER2", 20, 8, 5000, 10.0, "np+1"),
                                      ("ER2", 50, 5, 1000, 5.0, "1.5np+5"), ("SF2", 50, 5, 1000, 5.0, "1.5np+5")):
        g = by.get((gname, d, P, n))
        if not g or "np" not in g:
            continue
        npm = statistics.fmean(r["shd"] for r in g["np"])
        lim = {"np+3": npm + 3, "np+1": npm + 1, "1.5np+5": 1.5 * npm + 5}[rule]
        for m in modes:
            rs = [r for r in g.get((eps, m), []) if "failed" not in r]
            if not rs:
                continue
            shd = statistics.fmean(r["shd"] for r in rs)
            rec = statistics.fmean(r["skeleton_recall"] for r in rs)
            extra = f", skeleton recall {rec:.2f} (target ≥ 0.8)" if rule == "1.5np+5" else ""
            out.append(f"- {gname} d = {d}, {P} × {n:,}, ε = {eps:g}, {m or 'secure sum'}: SHD {shd:.1f} against "
                       f"{rule.replace('np', ' × non-private ' if rule.startswith('1.5') else 'non-private ')} = {lim:.1f} "
                       f"({'met' if shd <= lim else 'missed'}){extra}")
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="the documented d ≤ 50, 3-seed subset")
    ap.add_argument("--private", action="store_true", help="issue 19's private cells (PRIVATE_SLICES), 3 seeds")
    ap.add_argument("--private-grid", action="store_true",
                    help="issue 19's private grid (ER1/ER2/SF2 × d 20/50/100 × 5×1,000 and 8×5,000 rows × ε 1/5/10 × "
                    "secure sum on/off, 3 seeds)")
    ap.add_argument("--only", action="append", default=[], metavar="PATTERN",
                    help="only cells whose id matches this glob (repeatable), e.g. 'ER2/d20/*/fed-sparse'")
    ap.add_argument("--acyclicity", default="", metavar="LIST",
                    help="also run every fed-sparse cell with learn --acyclicity V for V in LIST (e.g. expm,logdet); "
                    "variant V in the table and the cell id")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/accuracy_grid"), help="cells root folder")
    ap.add_argument("--print-commands", action="store_true", help="print one shell line per cell and exit")
    ap.add_argument("--collect", type=Path, metavar="DIR", help="only merge the cells under DIR into the table")
    ap.add_argument("--jobs", type=int, default=1, help="cells run at a time (default 1)")
    ap.add_argument("--timeout", type=float, default=None, help="seconds before a cell is killed")
    ap.add_argument("--bnsl", default=None, help="the bnsl command (default: this environment's)")
    ap.add_argument("--results-md", type=Path, default=None, help="write the table into this file's '## Accuracy grid'")
    ap.add_argument("--results-intro", type=Path, default=None, help="markdown placed before the table")
    args = ap.parse_args(argv)

    if args.collect is not None and args.private_grid:
        print(private_grid_table(args.collect))
        return 0
    if args.collect is not None:
        methods, _ = available_methods()
        skipped = set(METHODS) - methods
        if not has_standardize():
            skipped.add("--standardize")
        text = report(args.collect, args, skipped=skipped)
        try:
            print(text)
        except BrokenPipeError:
            sys.stderr.close()
        return 0

    functions = [f for f in args.acyclicity.split(",") if f]
    bad = [f for f in functions if f not in H_VARIANTS]
    if bad:
        ap.error(f"--acyclicity: unknown function(s) {', '.join(bad)}; choose from {', '.join(H_VARIANTS)}")
    base = (private_grid_cells() if args.private_grid else private_cells() if args.private
            else quick_cells() if args.quick else full_cells())
    cells = h_twins(base, functions)
    if args.only:
        cells = [c for c in cells if any(fnmatch.fnmatchcase(c.id, p) for p in args.only)]
        if not cells:  # --only may name a cell outside --quick
            cells = [c for c in h_twins(full_cells(), functions) if any(fnmatch.fnmatchcase(c.id, p) for p in args.only)]
    methods, private = available_methods()
    std = has_standardize()
    why = [unavailable(c, methods, private, std) for c in cells]
    skipped = {w for w in why if w}
    runnable = [c for c, w in zip(cells, why) if not w]

    if args.print_commands:
        print_lines(runnable, args.out, args.bnsl or "bnsl")
        for s in sorted(skipped):
            print(f"# skipped: {s} is not offered by bnsl learn here", file=sys.stderr)
        return 0

    bnsl = args.bnsl or default_bnsl()
    todo = [c for c in runnable if not is_complete(c, args.out)]
    print(f"{len(cells)} cells, {len(cells) - len(runnable)} skipped ({', '.join(sorted(skipped)) or 'none'}), "
          f"{len(runnable) - len(todo)} already complete, {len(todo)} to run with {args.jobs} job(s)", file=sys.stderr)
    lines = [shell_line(c, args.out, bnsl) for c in todo]
    t0 = time.perf_counter()
    done = [0]

    def on_done(k, rc, sec):
        done[0] += 1
        print(f"[{done[0]}/{len(todo)}] {todo[k].id}: {'ok' if rc == 0 else f'exit {rc}'} {sec:.1f} s "
              f"(elapsed {time.perf_counter() - t0:.0f} s)", file=sys.stderr, flush=True)

    run_lines(lines, jobs=args.jobs, timeout=args.timeout, on_done=on_done)
    print(report(args.out, args, expected=len(cells), skipped=skipped))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

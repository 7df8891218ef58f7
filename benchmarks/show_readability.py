"""When does ``bnsl show``'s node-link picture stop being readable? (issue 29 item 4: the size above
which ``show`` draws the matrix view instead.)

For random DAGs (``bnsl_cli.simulate.random_dag``: Erdős–Rényi with E = k·d expected edges, k = 1, 2,
4 — learned graphs on real data are dense: Sachs 34 edges on 11 nodes, k ≈ 3; weights from
``random_weights``, signs mixed) of growing size, the node-link geometry that ``bnsl show`` draws
(:func:`bnsl_cli.io.draw.graph_geometry`, nothing rendered) is measured:

- ``cross/edge``: crossings between the drawn arrows (each arrow as the polyline of its control
  points; arrows that share a node are not counted) per arrow;
- ``labels hit``: share of weight labels whose box overlaps another label or a node box;
- ``through``: share of arrows whose polyline passes through a node box other than its own ends;
- ``width in``: the drawing's width in inches, and ``font pt``: the node names' size once the
  picture is shrunk to a 10-inch-wide page or screen (9 pt at full size).

Each row is the mean over ``--seeds`` draws. A picture is counted *unreadable* when any of: more
than one crossing per arrow, more than 10 % of labels hit, or names below 6 pt on a 10-inch page.

Usage: python benchmarks/show_readability.py [--seeds 5] [--sizes 5,8,...]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from bnsl_cli.io.draw import graph_geometry
from bnsl_cli.simulate import random_dag, random_weights

PAGE_IN = 10.0
FONT_PT = 9.0


def _seg_cross(p1, p2, q1, q2) -> bool:
    def orient(a, b, c):
        return (b[0] - a[0]) * (c[1] - a[1]) - (b[1] - a[1]) * (c[0] - a[0])

    d1, d2 = orient(q1, q2, p1), orient(q1, q2, p2)
    d3, d4 = orient(p1, p2, q1), orient(p1, p2, q2)
    return d1 * d2 < 0 and d3 * d4 < 0


def _seg_box(p, q, box) -> bool:
    """Whether the segment p-q passes through the rectangle box = (x0, x1, y0, y1) (sampled)."""
    x0, x1, y0, y1 = box
    for t in np.linspace(0.0, 1.0, 25):
        x, y = p[0] + t * (q[0] - p[0]), p[1] + t * (q[1] - p[1])
        if x0 < x < x1 and y0 < y < y1:
            return True
    return False


def measure(W, names) -> dict:
    geo = graph_geometry(W, names)
    edges = geo.edges
    segs = [list(zip(e.points[:-1], e.points[1:])) for e in edges]
    bbox = [[min(p[0] for p in e.points), max(p[0] for p in e.points), min(p[1] for p in e.points),
             max(p[1] for p in e.points)] for e in edges]
    crossings = 0
    for a in range(len(edges)):
        for b in range(a + 1, len(edges)):
            ea, eb = edges[a], edges[b]
            if {ea.i, ea.j} & {eb.i, eb.j}:
                continue
            A, B = bbox[a], bbox[b]
            if A[1] < B[0] or B[1] < A[0] or A[3] < B[2] or B[3] < A[2]:
                continue
            crossings += sum(_seg_cross(p1, p2, q1, q2) for p1, p2 in segs[a] for q1, q2 in segs[b])
    hh = geo.box_h / 2
    nodes = [(x - w / 2, x + w / 2, y - hh, y + hh) for (x, y), w in zip(geo.xy, geo.widths)]
    labels = [(e.label_xy[0] - e.label_w / 2, e.label_xy[0] + e.label_w / 2, e.label_xy[1] - 0.08,
               e.label_xy[1] + 0.08) for e in edges if e.label is not None]

    def overlap(r, s):
        return r[0] < s[1] and s[0] < r[1] and r[2] < s[3] and s[2] < r[3]

    hit = sum(1 for k, r in enumerate(labels)
              if any(overlap(r, s) for m, s in enumerate(labels) if m != k) or any(overlap(r, n) for n in nodes))
    through = sum(1 for e, sg in zip(edges, segs)
                  if any(_seg_box(p, q, nodes[k]) for p, q in sg for k in range(len(nodes)) if k not in (e.i, e.j)))
    x0, x1, _, _ = geo.bounds
    width = x1 - x0 + 0.6
    return {"edges": len(edges), "cross_per_edge": crossings / max(len(edges), 1),
            "labels_hit": hit / max(len(labels), 1), "through": through / max(len(edges), 1),
            "width_in": width, "font_pt": FONT_PT * min(1.0, PAGE_IN / width)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--sizes", default="5,8,10,12,15,20,25,30,40,50,75,100")
    ap.add_argument("--ratios", default="1,2,4")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    ratios = [float(k) for k in args.ratios.split(",")]
    print(f"{'k':>3} {'d':>4} {'edges':>6} {'cross/edge':>10} {'labels hit':>10} {'through':>8} "
          f"{'width in':>8} {'font pt':>7} {'readable':>8} {'s':>5}")
    for k in ratios:
        for d in sizes:
            e_max = d * (d - 1) / 2
            rows = []
            t0 = time.perf_counter()
            for seed in range(args.seeds):
                rng = np.random.default_rng(seed)
                B = random_dag(d, min(k * d, e_max), "er", rng=rng)
                W = random_weights(B, rng=rng)
                rows.append(measure(W, [f"x{i + 1}" for i in range(d)]))
            m = {key: float(np.mean([r[key] for r in rows])) for key in rows[0]}
            ok = sum(1 for r in rows if r["cross_per_edge"] <= 1.0 and r["labels_hit"] <= 0.10 and r["font_pt"] >= 6.0)
            print(f"{k:>3g} {d:>4} {m['edges']:>6.1f} {m['cross_per_edge']:>10.2f} {m['labels_hit']:>10.2f} "
                  f"{m['through']:>8.2f} {m['width_in']:>8.1f} {m['font_pt']:>7.1f} {ok:>5}/{len(rows):<2} "
                  f"{time.perf_counter() - t0:>5.1f}", flush=True)


if __name__ == "__main__":
    main()

"""Sachs (P = 3 random shards, seed 0, as examples/sachs.py): candidate rules for the polish's edges (issue 21 item 5).

Runs the default fed-sparse once, keeps the polish's pooled and per-site second moments, and replays
the polish with each candidate: the weight threshold after the search (raw units), a cross-site
stability rule (an edge stays only if its per-node BIC gain, computed from a site's own moments with
that site's penalty, is positive at ``need`` of the 3 sites), a heteroskedasticity-robust (sandwich)
likelihood-ratio test of each edge (from the pooled rows; an offline check of the idea, not a
federated implementation), and a scale-free effect-size floor (the fraction of the child's residual
variance an edge explains). Prints SHD etc. against the 18-edge consensus graph.

Usage: python benchmarks/sachs_candidates.py
"""
import sys, numpy as np
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
import _common as C
from bnsl_cli.federated import polish as PM
from bnsl_cli.learn import LearnConfig, learn
from bnsl_cli.split import split_indices
from bnsl_cli.io.csv_reader import read_table
from bnsl_cli.io.graph_formats import read_graph
from bnsl_cli.federated.messages import GramReply
DATA = C.HERE / "sachs"
table = read_table(DATA / "sachs.csv"); names = table.names
truth = read_graph(DATA / "sachs_truth_18edges.csv").reorder(names).W
parts = split_indices(table.n, 3, seed=0)
shards = [table.X[idx] for idx in parts]
tables = C.tables_of(shards, names, tag="p")
cap = {}
orig = PM.PolishStage.receive
def rec(self, replies):
    replies = list(replies); cap["replies"] = [GramReply.decode(r).values for r in replies]; cap["stage"] = self
    return orig(self, replies)
PM.PolishStage.receive = rec
res = learn(tables, LearnConfig(method="fed-sparse", seed=0))
print("default", C.metrics(res.W, truth))
st = cap["stage"]; d = len(names); n = st.n_total
def gram(vals):
    G = np.zeros((d, d)); a, b = st.pairs // d, st.pairs % d; G[a, b] = vals; G[b, a] = vals; return G
G = gram(sum(cap["replies"]))
np_ = [s.shape[0] for s in shards]
Gs = [gram(v) * n / m for v, m in zip(cap["replies"], np_)]
r = PM.polish_graph(G, n, st.W0, st.W_raw, None, score="auto", additions="all")
print("replay", C.metrics(r.W, truth), r.info["score"])
E = r.W != 0
for sc in ("equal", "node"):
    r2 = PM.polish_graph(G, n, st.W0, st.W_raw, None, score=sc, additions="all"); print("score", sc, C.metrics(r2.W, truth))
print("consensus (no polish)", C.metrics(st.W0, truth))
for t in (0.1, 0.2, 0.3):
    r2 = PM.polish_graph(G, n, st.W0, st.W_raw, t, score="auto", additions="all"); print("thr", t, C.metrics(r2.W, truth))
def site_prune(E, need, extra=0.0):
    E = E.copy()
    while True:
        worst, where = None, None
        for i, j in zip(*np.nonzero(E)):
            S = list(np.flatnonzero(E[:, j])); rest = [k for k in S if k != i]
            votes = 0; gains = []
            for Gp, m in zip(Gs, np_):
                g = m / 2 * np.log(PM.family_rss(Gp, j, rest) / PM.family_rss(Gp, j, S)) - (np.log(m) / 2 + extra)
                gains.append(g); votes += g > 0
            if votes < need:
                s = min(gains)
                if worst is None or s < worst: worst, where = s, (i, j)
        if where is None: return E
        E[where] = False
for need in (2, 3):
    for extra in (0.0, np.log(d)):
        E2 = site_prune(E, need, extra); W = PM.least_squares_weights(G, E2)
        print("site", need, round(extra, 2), C.metrics(W, truth))
# robust (sandwich) LR: per edge, ratio of robust to naive variance, pooled rows
X = np.vstack(shards); X = X - X.mean(0)
def robust_prune(E, pen):
    E = E.copy()
    while True:
        worst, where = None, None
        for i, j in zip(*np.nonzero(E)):
            S = list(np.flatnonzero(E[:, j]))
            rest = [k for k in S if k != i]
            b = np.linalg.lstsq(X[:, S], X[:, j], rcond=None)[0]; e = X[:, j] - X[:, S] @ b
            if rest:
                c = np.linalg.lstsq(X[:, rest], X[:, i], rcond=None)[0]; u = X[:, i] - X[:, rest] @ c
            else: u = X[:, i]
            lr = 2 * len(X) / 2 * np.log(PM.family_rss(G, j, rest) / PM.family_rss(G, j, S))
            infl = np.mean(u**2 * e**2) / (np.mean(u**2) * np.mean(e**2))
            stat = lr / infl - 2 * pen
            if stat < 0 and (worst is None or stat < worst): worst, where = stat, (i, j)
        if where is None: return E
        E[where] = False
for pen in (np.log(n) / 2, np.log(n) / 2 + np.log(d)):
    E2 = robust_prune(E, pen); W = PM.least_squares_weights(G, E2); print("robust", round(pen, 2), C.metrics(W, truth))
T = (truth != 0) | (truth != 0).T
rows = []
for i, j in zip(*np.nonzero(E)):
    S = list(np.flatnonzero(E[:, j])); rest = [k for k in S if k != i]
    rows.append((1 - PM.family_rss(G, j, S) / PM.family_rss(G, j, rest), bool(T[i, j]), round(float(r.W[i, j]), 3)))
for x in sorted(rows): print("eff %.4f %s %s" % x)
for thr in (0.005, 0.01, 0.02, 0.03, 0.05):
    E2 = E.copy()
    while True:
        worst, where = None, None
        for i, j in zip(*np.nonzero(E2)):
            S = list(np.flatnonzero(E2[:, j])); rest = [k for k in S if k != i]
            eff = 1 - PM.family_rss(G, j, S) / PM.family_rss(G, j, rest)
            if eff < thr and (worst is None or eff < worst): worst, where = eff, (i, j)
        if where is None: break
        E2[where] = False
    print("effthr", thr, C.metrics(PM.least_squares_weights(G, E2), truth))

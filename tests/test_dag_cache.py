"""dag.DescendantCache: the descendant sets a search keeps across its moves."""

import numpy as np

from bnsl_cli.dag import DescendantCache, descendants


def test_cache_agrees_with_a_fresh_walk_through_random_moves():
    rng = np.random.default_rng(0)
    d = 25
    order = rng.permutation(d)
    rank = np.empty(d, int)
    rank[order] = np.arange(d)
    ch = [set() for _ in range(d)]
    cache = DescendantCache(ch)
    for step in range(3000):
        i, j = map(int, rng.choice(d, 2, replace=False))
        if j in ch[i]:
            if rng.random() < 0.5:  # delete
                ch[i].discard(j)
                cache.edge_changed(i)
            else:  # reverse, when that keeps the graph acyclic
                ch[i].discard(j)
                if i in descendants(ch, j):
                    ch[i].add(j)
                    continue
                ch[j].add(i)
                cache.edge_changed(i)
                cache.edge_changed(j)
        elif i not in ch[j] and i not in cache(j):  # add i -> j when it closes no cycle
            ch[i].add(j)
            cache.edge_changed(i)
        for k in map(int, rng.choice(d, 3, replace=False)):
            assert cache(k) == descendants(ch, k), (step, k)

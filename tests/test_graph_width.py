"""Heavy-op depth/width algorithms on plain DAGs (no TensorFlow)."""

from __future__ import annotations

import itertools
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from tf_autopar.graph.width import avg_width, max_width, profile_dag, propagate


def chains(k: int, length: int):
    edges = []
    for c in range(k):
        for i in range(length - 1):
            edges.append((c * length + i, c * length + i + 1))
    return k * length, edges, [True] * (k * length)


def test_independent_chains_have_width_k_and_depth_l():
    for k, length in [(1, 1), (1, 5), (3, 4), (8, 2)]:
        p = profile_dag(*chains(k, length))
        assert (p.heavy, p.depth, p.avg_width, p.max_width) == (k * length, length, k, k)
        assert p.level_widths == (k,) * length


def test_light_ops_link_heavy_ops_to_their_nearest_heavy_ancestor():
    # H -> l -> l -> H -> l  and a light-only side branch
    p = profile_dag(6, [(0, 1), (1, 2), (2, 3), (3, 4), (1, 5)], [True, False, False, True, False, False])
    assert (p.heavy, p.depth, p.level_widths) == (2, 2, (1, 1))


def test_diamond():
    p = profile_dag(4, [(0, 1), (0, 2), (1, 3), (2, 3)], [True] * 4)
    assert (p.depth, p.level_widths, p.avg_width, p.max_width) == (3, (1, 2, 1), 1, 2)


def test_unbalanced_diamond_counts_the_longer_side():
    # top -> a -> b -> bottom, top -> c -> bottom
    p = profile_dag(5, [(0, 1), (1, 2), (2, 4), (0, 3), (3, 4)], [True] * 5)
    assert p.depth == 4 and p.level_widths == (1, 2, 1, 1)


def test_chain_of_40_diamonds():
    n, edges = 1, []
    for _ in range(40):
        top = n - 1
        a, b, bottom = n, n + 1, n + 2
        edges += [(top, a), (top, b), (a, bottom), (b, bottom)]
        n += 3
    p = profile_dag(n, edges, [True] * n)
    assert p.depth == 1 + 2 * 40
    assert p.level_widths == (1,) + (2, 1) * 40
    assert (p.avg_width, p.max_width) == (1, 2)


def test_inception_module():
    # stem conv; four branches of 1, 2, 3 convs and pool(light) -> 1x1 conv; concat (light); head conv
    nodes = ["stem", "b1", "b2a", "b2b", "b3a", "b3b", "b3c", "pool", "b4", "concat", "head"]
    heavy = [n not in ("pool", "concat") for n in nodes]
    ix = {n: i for i, n in enumerate(nodes)}
    e = [
        ("stem", "b1"),
        ("stem", "b2a"),
        ("b2a", "b2b"),
        ("stem", "b3a"),
        ("b3a", "b3b"),
        ("b3b", "b3c"),
        ("stem", "pool"),
        ("pool", "b4"),
        ("b1", "concat"),
        ("b2b", "concat"),
        ("b3c", "concat"),
        ("b4", "concat"),
        ("concat", "head"),
    ]
    p = profile_dag(len(nodes), [(ix[a], ix[b]) for a, b in e], heavy)
    assert (p.heavy, p.depth) == (9, 5)
    assert p.level_widths == (1, 4, 2, 1, 1)
    assert (p.avg_width, p.max_width) == (1, 4)


def test_residual_blocks():
    # x=conv; per block: conv -> conv -> add(light, skip from block input)
    nodes, edges, heavy = 1, [], [True]
    prev = 0
    for _ in range(3):
        c1, c2, add = nodes, nodes + 1, nodes + 2
        edges += [(prev, c1), (c1, c2), (c2, add), (prev, add)]
        heavy += [True, True, False]
        nodes += 3
        prev = add
    p = profile_dag(nodes, edges, heavy)
    assert (p.heavy, p.depth, p.avg_width, p.max_width) == (7, 7, 1, 1)


def test_back_edges_are_dropped_and_counted():
    # 0 -> 1 -> 2 -> 3 with a loop back edge 2 -> 1 (a TF1 while loop left undropped)
    p = profile_dag(4, [(0, 1), (1, 2), (2, 1), (2, 3)], [True] * 4)
    assert p.back_edges == 1 and p.depth == 4
    # a pure cycle with no source at all
    p = profile_dag(3, [(0, 1), (1, 2), (2, 0)], [True, True, False])
    assert p.back_edges == 1 and p.depth == 2 and p.heavy == 2


def test_no_heavy_ops():
    p = profile_dag(3, [(0, 1), (1, 2)], [False] * 3)
    assert (p.heavy, p.depth, p.avg_width, p.max_width, p.level_widths) == (0, 0, 1, 1, ())
    assert profile_dag(0, [], []).depth == 0


def test_helpers():
    assert avg_width(10, 4) == 2 and avg_width(3, 5) == 1 and avg_width(0, 0) == 1
    assert max_width((1, 3, 2)) == 3 and max_width(()) == 1


def test_super_node_weights_and_widths():
    # src(heavy) -> call (body widths (2,1)) -> done(weight 2); out0 (weight 1) -> heavy sink
    preds = [[], [0], [1], [1], [3]]
    weight = [1, 0, 2, 1, 1]
    r = propagate(preds, weight, {0: (1,), 1: (2, 1), 4: (1,)})
    assert r.levels == [1, 1, 3, 2, 3]
    assert r.level_widths == (1, 2, 2)


def _brute_force_depth(n, edges, heavy):
    succ = {i: [] for i in range(n)}
    for u, v in edges:
        succ[u].append(v)

    def paths(u):
        yield [u]
        for v in succ[u]:
            for p in paths(v):
                yield [u] + p

    best = 0
    for s in range(n):
        for p in paths(s):
            best = max(best, sum(heavy[i] for i in p))
    return best


def _reach(n, edges):
    r = [[False] * n for _ in range(n)]
    for u, v in edges:
        r[u][v] = True
    for k, i, j in itertools.product(range(n), repeat=3):
        if r[i][k] and r[k][j]:
            r[i][j] = True
    return r


@st.composite
def dags(draw):
    n = draw(st.integers(min_value=0, max_value=9))
    pairs = [(i, j) for i in range(n) for j in range(i + 1, n)]
    edges = draw(st.lists(st.sampled_from(pairs), max_size=20, unique=True)) if pairs else []
    heavy = draw(st.lists(st.booleans(), min_size=n, max_size=n))
    perm = draw(st.permutations(range(n)))  # node ids need not be in topological order
    return n, [(perm[u], perm[v]) for u, v in edges], [heavy[perm.index(i)] for i in range(n)]


@settings(max_examples=300, deadline=None)
@given(dags())
def test_random_dags_match_brute_force(dag):
    n, edges, heavy = dag
    p = profile_dag(n, edges, heavy)
    assert p.depth == _brute_force_depth(n, edges, heavy)
    assert p.heavy == sum(heavy) == sum(p.level_widths)
    assert all(w > 0 for w in p.level_widths)
    assert p.back_edges == 0
    # every level is an antichain: no heavy op reaches another heavy op of its level
    preds = [[] for _ in range(n)]
    for u, v in edges:
        preds[v].append(u)
    levels = propagate(preds, [int(h) for h in heavy]).levels
    reach = _reach(n, edges)
    for a in range(n):
        for b in range(n):
            if a != b and heavy[a] and heavy[b] and levels[a] == levels[b]:
                assert not reach[a][b]


def test_large_random_graph_is_linear_and_consistent():
    rng = random.Random(1)
    n = 20000
    edges = [(rng.randrange(max(0, v - 50), v), v) for v in range(1, n) for _ in range(2)]
    heavy = [rng.random() < 0.3 for _ in range(n)]
    p = profile_dag(n, edges, heavy)
    assert sum(p.level_widths) == p.heavy and p.depth == len(p.level_widths)

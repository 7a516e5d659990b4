"""Depth and width of a graph reduced to its heavy operators: pure algorithms, no TensorFlow.

Definitions (the published guideline made operational):

- A node's *level* is the largest number of heavy ops on any path from a source to it,
  itself included. Each heavy op is thus linked to its nearest heavy ancestors through
  any number of light ops, and its level is one more than theirs.
- *depth* ("maximum layers") = the largest level = the longest chain of heavy ops.
- *average width* = floor(heavy ops / depth), the guideline's inter-op pool size p.
- *level widths*: heavy ops per level, level 1 first. Two heavy ops on one level are
  never ancestor and descendant (a heavy descendant has a strictly higher level), so
  each level is an antichain: ops that may run at once.
- *maximum width* = the widest level. This is an ESTIMATE, a lower bound on the true
  maximum antichain: ops on different levels can also be independent (e.g. a short
  branch beside a long one), which a max-antichain computation (Dilworth, bipartite
  matching, O(n^2.5)) would find. The level estimate is linear and is what we report.
- A graph without heavy ops has depth 0, average width 1 and maximum width 1 (nothing
  to overlap: plan as for a chain).

Time: one pass over nodes and edges in a topological order (depth-first post-order
over predecessors; equivalent to Kahn's order, and faster in Python), O(V + E).
Levels are memoised per node, so a chain of 40 diamonds (2^40 paths) costs 121 node
visits, where an unmemoised path search explodes.

Cycles: TensorFlow graphs are acyclic except TF1 while-loops, whose NextIteration ->
Merge edges close the loop. Callers drop those edges by op type; any cycle left (a
malformed graph) is broken here by dropping the edges that the depth-first search
finds pointing back into its own stack, reported in ``back_edges``.
A loop body is therefore counted once: the number of iterations is unknown statically.

Function calls: a node may carry a *weight* other than 0/1 and a tuple of level widths.
The graph module uses this to splice in a function body as a super-node: the body's
level widths are added starting one level above the call's inputs, and its outputs
leave at the body's per-output levels (see analysis.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import chain
from typing import Iterable, Mapping, Sequence


@dataclass(frozen=True)
class LevelResult:
    levels: list[int]  # per node: heavy ops on the heaviest path ending at it (node included)
    level_widths: tuple[int, ...]  # heavy ops per level, level 1 first
    back_edges: int  # edges dropped to break cycles

    @property
    def depth(self) -> int:
        return len(self.level_widths)


@dataclass(frozen=True)
class DagProfile:
    heavy: int
    depth: int
    avg_width: int
    max_width: int
    level_widths: tuple[int, ...]
    back_edges: int = 0


def avg_width(heavy: int, depth: int) -> int:
    """floor(heavy / depth), the published guideline; 1 when there is no heavy op."""
    if heavy <= 0 or depth <= 0:
        return 1
    return max(1, heavy // depth)


def max_width(level_widths: Sequence[int]) -> int:
    """The widest level (an antichain): lower bound on the most heavy ops that can run at once."""
    return max(level_widths, default=0) or 1


def _forward(preds: Sequence[Sequence[int]], weight: Sequence[int], levels: list[int]) -> int:
    """Levels in one pass for the leading nodes whose predecessors all come before them, as
    TensorFlow writes a graph (ops in creation order); how many were done. No cycle can run
    through those nodes, so their levels are exact and the search below only does the rest
    (on 100,000 ops: about half the cost of the search for all)."""
    for v, ps in enumerate(preds):
        if not ps:
            levels[v] = weight[v]
            continue
        vals = [levels[p] for p in ps]
        if -1 in vals:  # a predecessor later in the order (or a cycle): the search takes over
            return v
        levels[v] = max(vals) + weight[v]
    return len(preds)


def propagate(
    preds: Sequence[Sequence[int]],
    weight: Sequence[int],
    widths: Mapping[int, Sequence[int]] | None = None,
    unit: Iterable[int] = (),
) -> LevelResult:
    """Levels of every node in O(V + E).

    ``preds[v]``: predecessors of v (duplicates allowed). ``weight[v]``: what v adds to the
    level of its heaviest predecessor (1 for a heavy op, 0 for a light one, a body's depth
    for a call). ``unit``: the heavy ops, each counted once on its own level.
    ``widths[v]``: heavy ops a super-node v puts on the levels just above its heaviest
    predecessor (a function body's level widths).

    Nodes are finished in depth-first post-order over their predecessors (a topological
    order), each once: level(v) = max(level(preds)) + weight(v). An edge from a node still
    on the DFS stack closes a cycle: it is dropped (counted in ``back_edges``). This
    "pull" order needs no successor lists and beat Kahn's queue by 1.4-1.6x here.
    """
    n = len(preds)
    levels = [-1] * n
    done = _forward(preds, weight, levels)
    state = bytearray(n)  # 0 new, 1 waiting for its predecessors (on the stack), 2 done
    if done:
        state[:done] = b"\x02" * done
    back_edges = 0
    # Start from the sinks, so that on a cycle the edge dropped is the one closing the
    # loop as seen from the graph's outputs (the one entering the cycle's first node is kept).
    referenced = set(chain.from_iterable(preds))
    roots = chain((v for v in range(n) if v not in referenced), range(n))
    for root in roots:
        if levels[root] >= 0:
            continue
        stack = [root]
        while stack:
            v = stack[-1]
            if levels[v] >= 0:
                stack.pop()
                continue
            ps = preds[v]
            if not ps:
                levels[v] = weight[v]
                state[v] = 2
                stack.pop()
                continue
            if state[v] == 0:
                pending = [p for p in ps if levels[p] < 0 and state[p] != 1]
                if pending:
                    state[v] = 1
                    stack.extend(pending)
                    continue
            vals = [levels[p] for p in ps]
            m = max(vals)
            if m < 0 or -1 in vals:  # predecessors still on the stack: back edges
                back_edges += vals.count(-1)
                if m < 0:
                    m = 0
            levels[v] = m + weight[v]
            state[v] = 2
            stack.pop()

    acc: list[int] = [0] * max(levels, default=0)
    for v in unit:
        acc[levels[v] - 1] += 1
    for v, w in (widths or {}).items():
        base = levels[v] - weight[v]
        if base + len(w) > len(acc):
            acc.extend([0] * (base + len(w) - len(acc)))
        for k, c in enumerate(w):
            acc[base + k] += c
    while acc and acc[-1] == 0:
        acc.pop()
    return LevelResult(levels=levels, level_widths=tuple(acc), back_edges=back_edges)


def profile_dag(n: int, edges: Iterable[tuple[int, int]], heavy: Sequence[bool]) -> DagProfile:
    """Depth/width of a plain DAG given as node count, (src, dst) edges and heavy flags."""
    preds: list[list[int]] = [[] for _ in range(n)]
    for u, v in edges:
        preds[v].append(u)
    weight = [1 if h else 0 for h in heavy]
    result = propagate(preds, weight, unit=[v for v in range(n) if heavy[v]])
    total = sum(weight)
    return DagProfile(
        heavy=total,
        depth=result.depth,
        avg_width=avg_width(total, result.depth),
        max_width=max_width(result.level_widths),
        level_widths=result.level_widths,
        back_edges=result.back_edges,
    )

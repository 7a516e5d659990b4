"""What a trace holds and how raw recorder events become per-op records. Pure: no TF.

Both backends (native recorder, tf.profiler fallback) deliver the same raw material:
TensorFlow's own TraceMe events, one per kernel execution, named ``node_name:OpType``
on the thread that ran the kernel (``tf_Compute`` inter-op threads, the caller's
``python`` thread for inlined or eager work, tf.data threads...). Everything from here on
is shared, so both backends give identical structures.

Conventions (documented in docs/tracing.md):

- ``kernel`` is the op type that actually ran (``_MklNativeConv2D``: TF's oneDNN rewrite);
  ``type`` is its framework name with the oneDNN prefix removed (``Conv2D``,
  ``_FusedMatMul``), which is what op-type profiles group by.
- Bookkeeping ops (``_Arg``, ``_Retval``, ``NoOp``, sends/recvs) and call/control-flow
  containers (``PartitionedCall``, ``While``, ``If``...) are left out: the first are
  not work, the second would count the ops they contain twice.
- Eager ops have no node name: they are recorded as ``eager/<Type>`` with the kernel
  time (``EagerKernelExecute``) of each call.
- At the default level (2) TF traces only "expensive" kernels; cheap ones that the
  executor runs inline (small element-wise ops) appear only with ``cheap_ops=True``
  (level 3), which costs more because TF then also formats every op's input shapes.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence

import numpy as np

from tf_autopar.graph.heavy_ops import (
    CONDITIONAL_GATHER_OP_TYPES,
    EMBEDDING_TABLE_SOURCES,
    PASS_THROUGH_OP_TYPES,
    heavy_class,
    is_table_const,
)

# TF node names: [A-Za-z0-9.][A-Za-z0-9_.\-/>]* ; op types: identifiers.
_OP_EVENT = re.compile(r"^([A-Za-z0-9.][A-Za-z0-9_.\-/>]*):([A-Za-z_][A-Za-z0-9_]*)$")
_EAGER_OP = "EagerLocalExecute: "
_EAGER_KERNEL = "EagerKernelExecute"

EXCLUDED_TYPES = frozenset(
    {"_Arg", "_Retval", "_DeviceArg", "_DeviceRetval", "NoOp", "_Send", "_Recv", "_HostSend", "_HostRecv"}
)
CONTAINER_TYPES = frozenset(
    {
        "PartitionedCall",
        "StatefulPartitionedCall",
        "TPUPartitionedCall",
        "RemoteCall",
        "SymbolicGradient",
        "While",
        "StatelessWhile",
        "_While",
        "If",
        "StatelessIf",
        "_If",
        "Case",
        "StatelessCase",
        "For",
        "MapDefun",
    }
)


@dataclass(frozen=True)
class RawChunk:
    """One recorder Stop(): interned names, threads and an (n, 4) int64 array of
    (name index, thread index, start ns, end ns), times on the recorder's wall clock."""

    names: tuple[str, ...]
    threads: tuple[str, ...]
    thread_ids: tuple[int, ...]
    events: np.ndarray

    def __post_init__(self) -> None:
        if self.events.ndim != 2 or self.events.shape[1] != 4:
            raise ValueError(f"events must have shape (n, 4), got {self.events.shape}")

    def window(self, start_ns: int, end_ns: int) -> np.ndarray:
        """The events that started in [start_ns, end_ns]."""
        ev = self.events
        return ev[(ev[:, 2] >= start_ns) & (ev[:, 2] <= end_ns)]


@dataclass(frozen=True)
class OpEvent:
    """One kernel execution. Times in ns since the trace started."""

    name: str
    type: str
    kernel: str
    thread: str
    start_ns: int
    end_ns: int

    @property
    def duration_s(self) -> float:
        return (self.end_ns - self.start_ns) * 1e-9


@dataclass(frozen=True)
class OpRecord:
    """One graph node (or eager op type) over the whole trace."""

    type: str
    name: str
    count: int
    total_s: float
    median_s: float
    thread: str  # the thread it spent most time on
    kernel: str = ""  # the kernel that ran (oneDNN name), when it differs from ``type``
    threads: int = 1  # how many distinct threads ran it


@dataclass(frozen=True)
class TypeRecord:
    """One op type (the Fathom-style profile row)."""

    type: str
    count: int  # executions
    ops: int  # distinct nodes
    total_s: float
    median_s: float  # median of single executions
    share: float  # of all traced op time
    heavy: str | None  # heavy class (convolution, matmul, embedding, recurrent) or None


@dataclass(frozen=True)
class HeavyShare:
    """Time in heavy ops (convolution, matmul, embedding, recurrent) versus the rest.

    - ``heavy_fraction``: heavy op time / all traced op time (kernel time only).
    - ``tax_fraction``: the paper's "programmability tax", the share of the traced wall time
      during which no heavy kernel is running (``1 - heavy_busy_s / wall_s``): lighter ops,
      framework scheduling, Python. Uses the union of heavy-op intervals, so overlapping
      heavy ops on several inter-op threads are not counted twice.
    """

    heavy_s: float  # summed heavy kernel time
    other_s: float  # summed time of the other traced kernels
    op_s: float
    heavy_fraction: float
    wall_s: float
    heavy_busy_s: float  # wall time with at least one heavy kernel running
    tax_fraction: float
    by_class: dict[str, float] = field(default_factory=dict)
    heavy_types: tuple[str, ...] = ()


def normalize_type(kernel: str) -> str:
    """Framework op type for a kernel name: strip TF's oneDNN rewrite prefix.

    ``_MklNativeConv2D`` -> ``Conv2D``, ``_MklMatMul`` -> ``MatMul``,
    ``_MklNativeFusedMatMul`` -> ``_FusedMatMul`` (grappler's fused op), ``_MklFusedBatchNormV3``
    -> ``FusedBatchNormV3`` (a stock op whose name starts with Fused).
    """
    for prefix in ("_MklNative", "_Mkl"):
        if kernel.startswith(prefix) and len(kernel) > len(prefix):
            rest = kernel[len(prefix) :]
            if rest.startswith("Fused") and not rest.startswith(("FusedBatchNorm", "FusedPad", "FusedResize")):
                return "_" + rest
            return rest
    return kernel


def parse_op_event(name: str) -> tuple[str, str] | None:
    """``node:Type`` -> (node, Type) for a kernel event; None for runtime events."""
    m = _OP_EVENT.match(name)
    return (m.group(1), m.group(2)) if m else None


def embedding_gather_names(graph_def) -> frozenset[str]:
    """Names of the Gather/GatherV2 nodes (top level and function bodies) that read an
    embedding table: params produced by a variable read or a rank>=2 Const, looking through
    Identity-like ops. The same rule as tf_autopar.graph.heavy_ops applies to graphs."""

    def producer(by_name: dict, ref: str):
        return by_name.get(ref.lstrip("^").split(":")[0])

    def scan(nodes) -> set[str]:
        by_name = {n.name: n for n in nodes}
        out = set()
        for n in nodes:
            if n.op not in CONDITIONAL_GATHER_OP_TYPES or not n.input:
                continue
            src, hops = producer(by_name, n.input[0]), 0
            while src is not None and src.op in PASS_THROUGH_OP_TYPES and src.input and hops < 32:
                src, hops = producer(by_name, src.input[0]), hops + 1
            if src is not None and src.op in EMBEDDING_TABLE_SOURCES and (src.op != "Const" or is_table_const(src)):
                out.add(n.name)
        return out

    names = scan(graph_def.node)
    for f in graph_def.library.function:
        names |= scan(f.node_def)
    return frozenset(names)


def heavy_classifier(embedding_gathers: frozenset[str] = frozenset()) -> Callable[[str, str, str], str | None]:
    """(type, kernel, name) -> heavy class or None, from tf_autopar.graph.heavy_ops.

    Gathers are heavy only as embedding look-ups, which a trace cannot see (the params input
    is not recorded): a Gather/GatherV2 counts when its node is in ``embedding_gathers``
    (from the model's graph, see ``embedding_gather_names``) or its name says ``embedding``.
    """

    def classify(op_type: str, kernel: str, name: str) -> str | None:
        cls = heavy_class(op_type) or heavy_class(kernel)
        if (
            cls is None
            and op_type in ("GatherV2", "Gather")
            and (name in embedding_gathers or "embedding" in name.lower())
        ):
            cls = "embedding"
        return cls

    return classify


@dataclass(frozen=True)
class OpTable:
    """Kernel executions, columnar: row i ran ``keys[key[i]]`` = (name, type, kernel) on
    ``threads[thread[i]]`` from ``start[i]`` to ``end[i]`` (ns since the trace started)."""

    keys: tuple[tuple[str, str, str], ...]
    threads: tuple[str, ...]
    key: np.ndarray
    thread: np.ndarray
    start: np.ndarray
    end: np.ndarray

    def __len__(self) -> int:
        return len(self.key)

    @property
    def duration(self) -> np.ndarray:
        return self.end - self.start

    def events(self) -> list[OpEvent]:
        order = np.lexsort((self.end, self.start))
        out = []
        for i in order:
            name, op_type, kernel = self.keys[int(self.key[i])]
            out.append(
                OpEvent(name, op_type, kernel, self.threads[int(self.thread[i])], int(self.start[i]), int(self.end[i]))
            )
        return out


def _eager_ops(names: Sequence[str], ev: np.ndarray) -> list[tuple[int, str]]:
    """(event row, op type) for eager kernel executions: an ``EagerKernelExecute`` inside an
    ``EagerLocalExecute: <Type>`` on the same thread. Function calls are skipped (their
    ops are traced one by one)."""
    kernel_ids = [i for i, n in enumerate(names) if n == _EAGER_KERNEL]
    outer_ids = {i: n[len(_EAGER_OP) :].strip() for i, n in enumerate(names) if n.startswith(_EAGER_OP)}
    if not kernel_ids or not outer_ids or len(ev) == 0:
        return []
    out: list[tuple[int, str]] = []
    is_kernel = np.isin(ev[:, 0], kernel_ids)
    is_outer = np.isin(ev[:, 0], list(outer_ids))
    for thread in np.unique(ev[is_kernel, 1]):
        on_thread = ev[:, 1] == thread
        outer_rows = np.flatnonzero(on_thread & is_outer)
        outers = sorted((int(ev[r, 2]), int(ev[r, 3]), outer_ids[int(ev[r, 0])]) for r in outer_rows)
        if not outers:
            continue
        starts = [o[0] for o in outers]
        for r in np.flatnonzero(on_thread & is_kernel):
            s, e = int(ev[r, 2]), int(ev[r, 3])
            k = bisect.bisect_right(starts, s) - 1
            while k >= 0 and not (outers[k][0] <= s and e <= outers[k][1]):
                k -= 1
            if k < 0:
                continue
            op_type = outers[k][2]
            if not op_type or op_type.startswith("__") or op_type in CONTAINER_TYPES:
                continue  # a tf.function call: its kernels are traced one by one
            out.append((int(r), op_type))
    return out


def op_table(chunks: Iterable[RawChunk], start_ns: int, end_ns: int) -> OpTable:
    """Kernel executions that started within [start_ns, end_ns]."""
    keys: dict[tuple[str, str, str], int] = {}
    threads: dict[str, int] = {}
    cols: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []

    def key_id(k: tuple[str, str, str]) -> int:
        return keys.setdefault(k, len(keys))

    for ch in chunks:
        ev = ch.window(start_ns, end_ns)
        if len(ev) == 0:
            continue
        lookup = np.full(len(ch.names), -1, dtype=np.int64)
        for i, n in enumerate(ch.names):
            p = parse_op_event(n)
            if p is not None and p[1] not in EXCLUDED_TYPES and p[1] not in CONTAINER_TYPES:
                lookup[i] = key_id((p[0], normalize_type(p[1]), p[1]))
        tmap = np.array([threads.setdefault(t, len(threads)) for t in ch.threads], dtype=np.int64)
        k = lookup[ev[:, 0]]
        sel = k >= 0
        cols.append((k[sel], tmap[ev[sel, 1]], ev[sel, 2] - start_ns, ev[sel, 3] - start_ns))
        eager = _eager_ops(ch.names, ev)
        if eager:
            rows = np.array([r for r, _ in eager], dtype=np.int64)
            ek = np.array(
                [key_id((f"eager/{normalize_type(t)}", normalize_type(t), t)) for _, t in eager], dtype=np.int64
            )
            cols.append((ek, tmap[ev[rows, 1]], ev[rows, 2] - start_ns, ev[rows, 3] - start_ns))
    if cols:
        key, thread, start, end = (np.concatenate([c[j] for c in cols]) for j in range(4))
    else:
        key = thread = start = end = np.zeros(0, dtype=np.int64)
    return OpTable(tuple(keys), tuple(threads), key, thread, start, end)


def runtime_events(chunks: Iterable[RawChunk], start_ns: int, end_ns: int) -> list[tuple[str, str, int, int]]:
    """(name, thread, start, end) of the non-kernel events (executor, eager runtime, tf.data)."""
    out = []
    for ch in chunks:
        ev = ch.window(start_ns, end_ns)
        if len(ev) == 0:
            continue
        is_op = np.array([parse_op_event(n) is not None for n in ch.names] or [False], dtype=bool)
        for row in ev[~is_op[ev[:, 0]]]:
            out.append((ch.names[int(row[0])], ch.threads[int(row[1])], int(row[2]) - start_ns, int(row[3]) - start_ns))
    return out


def _group_stats(group: np.ndarray, d: np.ndarray, n_groups: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """count, total and median of ``d`` per group id (vectorised: sort by (group, d))."""
    count = np.bincount(group, minlength=n_groups)
    total = np.bincount(group, weights=d, minlength=n_groups)
    order = np.lexsort((d, group))
    ds = d[order]
    offset = np.concatenate([[0], np.cumsum(count)[:-1]])
    lo = offset + np.maximum(count - 1, 0) // 2
    hi = offset + count // 2
    safe = count > 0
    median = np.zeros(n_groups)
    median[safe] = (ds[lo[safe]] + ds[np.minimum(hi[safe], len(ds) - 1)]) / 2.0
    return count, total, median


def aggregate_ops(table: OpTable) -> list[OpRecord]:
    """Per (node, kernel): count, total, median, main thread. Sorted by total time, largest first."""
    n_keys, n_threads = len(table.keys), len(table.threads)
    if n_keys == 0 or len(table) == 0:
        return []
    d = table.duration.astype(np.float64)
    count, total, median = _group_stats(table.key, d, n_keys)
    per_thread = np.bincount(
        table.key * n_threads + table.thread, weights=d + 1e-3, minlength=n_keys * n_threads
    ).reshape(n_keys, n_threads)
    out = []
    for k in np.flatnonzero(count):
        name, op_type, kernel = table.keys[k]
        out.append(
            OpRecord(
                type=op_type,
                name=name,
                count=int(count[k]),
                total_s=float(total[k]) * 1e-9,
                median_s=float(median[k]) * 1e-9,
                thread=table.threads[int(np.argmax(per_thread[k]))],
                kernel=kernel if kernel != op_type else "",
                threads=int(np.count_nonzero(per_thread[k])),
            )
        )
    out.sort(key=lambda r: (-r.total_s, r.name))
    return out


def _key_classes(table: OpTable, classify: Callable[[str, str, str], str | None]) -> list[str | None]:
    return [classify(op_type, kernel, name) for name, op_type, kernel in table.keys]


def aggregate_types(table: OpTable, classify: Callable[[str, str, str], str | None]) -> list[TypeRecord]:
    """Per op type, sorted by total time, largest first."""
    if len(table) == 0:
        return []
    types = sorted({k[1] for k in table.keys})
    type_id = {t: i for i, t in enumerate(types)}
    key_type = np.array([type_id[k[1]] for k in table.keys], dtype=np.int64)
    g = key_type[table.key]
    d = table.duration.astype(np.float64)
    count, total, median = _group_stats(g, d, len(types))
    classes = _key_classes(table, classify)
    heavy: dict[str, str | None] = {}
    for (_, op_type, _), cls in zip(table.keys, classes):
        heavy[op_type] = heavy.get(op_type) or cls
    present = set(np.unique(table.key).tolist())
    ops_per_type = {t: len({table.keys[k][0] for k in present if table.keys[k][1] == t}) for t in types}
    all_s = float(d.sum()) or 1.0
    out = [
        TypeRecord(
            type=t,
            count=int(count[i]),
            ops=ops_per_type[t],
            total_s=float(total[i]) * 1e-9,
            median_s=float(median[i]) * 1e-9,
            share=float(total[i]) / all_s,
            heavy=heavy.get(t),
        )
        for i, t in enumerate(types)
        if count[i] > 0
    ]
    out.sort(key=lambda r: (-r.total_s, r.type))
    return out


def union_length(start: np.ndarray, end: np.ndarray) -> int:
    """Total length covered by the intervals [start_i, end_i] (overlaps counted once)."""
    if len(start) == 0:
        return 0
    order = np.argsort(start, kind="stable")
    s, e = start[order], end[order]
    reach = np.maximum.accumulate(e)
    new = np.concatenate([[True], s[1:] > reach[:-1]])
    first = np.flatnonzero(new)
    last = np.concatenate([first[1:] - 1, [len(s) - 1]])
    return int((reach[last] - s[first]).sum())


def heavy_share(table: OpTable, wall_s: float, classify: Callable[[str, str, str], str | None]) -> HeavyShare:
    d = table.duration.astype(np.float64)
    per_key = np.bincount(table.key, weights=d, minlength=len(table.keys)) if len(table) else np.zeros(0)
    heavy_ns = other_ns = 0.0
    by_class: dict[str, float] = {}
    types: set[str] = set()
    heavy_keys = []
    for k, cls in enumerate(_key_classes(table, classify)):
        t = float(per_key[k]) if k < len(per_key) else 0.0
        if cls:
            heavy_keys.append(k)
            heavy_ns += t
            by_class[cls] = by_class.get(cls, 0.0) + t * 1e-9
            if t > 0:
                types.add(table.keys[k][1])
        else:
            other_ns += t
    op_ns = heavy_ns + other_ns
    is_heavy = np.isin(table.key, heavy_keys) if heavy_keys else np.zeros(len(table), dtype=bool)
    busy_s = union_length(table.start[is_heavy], table.end[is_heavy]) * 1e-9
    return HeavyShare(
        heavy_s=heavy_ns * 1e-9,
        other_s=other_ns * 1e-9,
        op_s=op_ns * 1e-9,
        heavy_fraction=heavy_ns / op_ns if op_ns else 0.0,
        wall_s=wall_s,
        heavy_busy_s=busy_s,
        tax_fraction=max(0.0, 1.0 - busy_s / wall_s) if wall_s > 0 else 0.0,
        by_class=dict(sorted(by_class.items())),
        heavy_types=tuple(sorted(types)),
    )


def timeline(events: Sequence[OpEvent]) -> dict[str, list[OpEvent]]:
    """Per thread, that thread's kernel executions in start order."""
    out: dict[str, list[OpEvent]] = {}
    for e in events:
        out.setdefault(e.thread, []).append(e)
    for evs in out.values():
        evs.sort(key=lambda e: (e.start_ns, e.end_ns))
    return dict(sorted(out.items()))


def chrome_trace(
    events: Sequence[OpEvent], runtime: Sequence[tuple[str, str, int, int]] = (), metadata: dict | None = None
) -> dict:
    """A Trace Event Format document (Perfetto, chrome://tracing): complete ("X") events in µs."""
    threads = sorted({e.thread for e in events} | {r[1] for r in runtime})
    tid = {t: i + 1 for i, t in enumerate(threads)}
    trace_events: list[dict] = [{"ph": "M", "pid": 1, "name": "process_name", "args": {"name": "tensorflow"}}]
    for t in threads:
        trace_events.append({"ph": "M", "pid": 1, "tid": tid[t], "name": "thread_name", "args": {"name": t}})
    for e in events:
        trace_events.append(
            {
                "ph": "X",
                "pid": 1,
                "tid": tid[e.thread],
                "name": e.name,
                "cat": "op",
                "ts": e.start_ns / 1000.0,
                "dur": (e.end_ns - e.start_ns) / 1000.0,
                "args": {"type": e.type, "kernel": e.kernel},
            }
        )
    for name, thread, s, t_end in runtime:
        trace_events.append(
            {
                "ph": "X",
                "pid": 1,
                "tid": tid[thread],
                "name": name,
                "cat": "runtime",
                "ts": s / 1000.0,
                "dur": (t_end - s) / 1000.0,
            }
        )
    return {"traceEvents": trace_events, "displayTimeUnit": "ms", "metadata": metadata or {}}

"""A graph body (GraphDef nodes or a FunctionDef) -> its heavy-op levels. Protobuf fields only: no TF.

How the graph is reduced (the algorithm itself is in width.py):

- Nodes are heavy by op type (heavy_ops.py). Edges are data and control inputs: a
  control edge orders two ops just as a data edge does, so ops joined by one cannot
  overlap. TF1 loop back edges (NextIteration -> Merge) are dropped, so a TF1 loop body
  counts once, and each loop Exit is made to wait for the NextIteration of its Merge
  (else, with the back edge gone, what follows the loop would look independent of it).
- Nested functions are spliced in as super-nodes, in linear time, each function body
  analysed once (memoised by name) however many call sites it has:
  * PartitionedCall / StatefulPartitionedCall (attr ``f``) and ops whose type is a
    function of the library: the body's heavy ops are added at every call site (the
    body runs once per call), its level widths start one level above the call's
    inputs, and output j leaves at the call's input level + the body's level at its
    j-th return value. Consumers of a call thus see the heavy depth of the body path
    that produced the tensor they read, not of the whole body; all of a call's inputs
    are taken to arrive together (the latest one), which can overstate depth only when
    a body has independent input->output paths fed at different levels.
  * While / StatelessWhile: cond then body, each counted ONCE (the trip count is
    unknown statically). Outputs leave after the whole cond + body depth.
  * If / StatelessIf / Case / StatelessCase: the heaviest branch (most heavy ops, then
    deepest) as if it always ran: which branch runs is data-dependent, and taking one
    branch whole keeps the invariants sum(level_widths) == heavy_ops and
    len(level_widths) == depth. (Taking the max of counts and depths separately over
    branches would break them when the heaviest branch is not the deepest.)
  * Function-valued attributes of other ops (tf.data map functions...) are not
    descended: they run on tf.data's threads, not the inter-op pool.
- Gradients: ops of gradient-only types (Conv2DBackpropInput...), ops under a gradient
  name scope (``gradients/``, ``gradient_tape/``) and everything inside backward
  functions (``__inference___backward_*``, ``*_grad*`` While/If bodies) are gradient
  ops. They set ``training`` and count as heavy unless ``include_gradients=False``
  (the decision and the measurement behind it are in docs of ``analyze``).
- Histograms count what the profile counts: per call site, a loop body once, the chosen
  branch of a conditional. ``nodes`` likewise.
"""

from __future__ import annotations

import dataclasses
import logging
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from tf_autopar.graph import heavy_ops as H
from tf_autopar.graph.dims import Assumed
from tf_autopar.graph.width import propagate
from tf_autopar.graph.work import WORK_ATTR, NodeDefShapes, const_ints, estimate, output_shapes

log = logging.getLogger("tf_autopar.graph")

# Function calls nested deeper than this are refused with a ValueError instead of running into
# Python's recursion limit (Keras models nest a few tens deep at most).
MAX_FUNCTION_NESTING = 128
_CALL_OPS = frozenset({"PartitionedCall", "StatefulPartitionedCall"})
WHILE_OPS = frozenset({"While", "StatelessWhile", "_While"})
_IF_OPS = frozenset({"If", "StatelessIf", "_If"})
_CASE_OPS = frozenset({"Case", "StatelessCase", "_Case"})
_STRUCTURAL = _CALL_OPS | WHILE_OPS | _IF_OPS | _CASE_OPS
_MERGE_OPS = frozenset({"Merge", "RefMerge"})
_NEXT_ITERATION_OPS = frozenset({"NextIteration", "RefNextIteration"})
_SWITCH_OPS = frozenset({"Switch", "RefSwitch"})
_EXIT_OPS = frozenset({"Exit", "RefExit"})
_NO_PREDS: tuple[int, ...] = ()


@dataclass
class Summary:
    """One analysed body (the top-level graph or a function)."""

    level_widths: tuple[int, ...]
    ret_levels: tuple[int, ...] = ()
    op_types: Counter = field(default_factory=Counter)
    heavy_types: Counter = field(default_factory=Counter)
    nodes: int = 0
    functions: frozenset[str] = frozenset()
    training: bool = False
    tf_data: bool = False
    back_edges: int = 0
    # per heavy op (per call site): (work per run or None when unknown, runs per step, is a look-up)
    works: tuple[tuple[int | None, int, bool], ...] = ()

    @property
    def depth(self) -> int:
        return len(self.level_widths)

    @property
    def heavy(self) -> int:
        return sum(self.level_widths)


def function_map(library: Any) -> dict[str, Any]:
    """name -> FunctionDef from a FunctionDefLibrary, a mapping or an iterable of FunctionDefs."""
    if library is None:
        return {}
    if isinstance(library, Mapping):
        return dict(library)
    functions = getattr(library, "function", library)
    return {f.signature.name: f for f in functions}


def _attr_func_names(node: Any, key: str) -> list[str]:
    if key not in node.attr:
        return []
    value = node.attr[key]
    if value.HasField("func"):
        return [value.func.name]
    if value.HasField("list"):
        return [f.name for f in value.list.func]
    return []


# call node -> (done node id, first output node id or -1, outputs, output-name offsets)
_Call = tuple[int, int, int, "dict[str, int] | None"]


class Reducer:
    """Reduces the top-level body and, memoised by name, every function it calls."""

    def __init__(self, library: Mapping[str, Any], include_gradients: bool, assumed: Assumed | None = None) -> None:
        self.library = library
        self.include_gradients = include_gradients
        self.assumed = assumed
        self.assumed_used: set[str] = set()  # "batch", "other": which unknown dimensions were read as assumed
        self.memo: dict[tuple[str, bool], Summary] = {}
        self.active: set[str] = set()
        self.fingerprint_lines: list[str] = []
        self.fingerprinted: set[str] = set()

    # --- function bodies -------------------------------------------------------------
    def function(self, name: str, grad_ctx: bool) -> Summary | None:
        fdef = self.library.get(name)
        if fdef is None:
            log.debug("function %s is not in the library; its call counts as a light op", name)
            return None
        grad_ctx = grad_ctx or H.is_gradient_function_name(name)
        key = (name, grad_ctx)
        summary = self.memo.get(key)
        if summary is not None:
            return summary
        if name in self.active:  # TF forbids recursion; stay safe on malformed input
            log.warning("function %s calls itself; the inner call counts as a light op", name)
            return None
        if len(self.active) >= MAX_FUNCTION_NESTING:  # each level costs a few Python frames
            raise ValueError(
                f"functions nested more than {MAX_FUNCTION_NESTING} deep (at {name!r}): "
                "not a graph tf_autopar can analyse"
            )
        self.active.add(name)
        try:
            prefix = None if name in self.fingerprinted else f"{name}/"
            self.fingerprinted.add(name)
            ret = [fdef.ret.get(arg.name, "") for arg in fdef.signature.output_arg]
            args = {}
            for k, arg in enumerate(fdef.signature.input_arg):
                shapes = output_shapes(fdef.arg_attr[k]) if k in fdef.arg_attr else []
                args[arg.name] = shapes[:1]
            # only what feeds the outputs and control outputs runs: Keras RNN layers trace one cell
            # step outside their loop just to learn its shapes, and that step is never executed
            live = prune_to_outputs(
                fdef.node_def, [r for r in ret if r] + list(fdef.control_ret.values()), strict=False
            )
            body = self.body(live, function_format=True, grad_ctx=grad_ctx, ret=ret, fp_prefix=prefix, arg_shapes=args)
        finally:
            self.active.discard(name)
        body.functions = body.functions | {name}
        body.training = body.training or grad_ctx
        self.memo[key] = body
        return body

    def call_summary(self, node: Any, op: str, grad_ctx: bool, trips: int = 1) -> tuple[Summary, bool] | None:
        """(summary, per_output) for a call-like node, or None when it is an ordinary op."""
        if op in _CALL_OPS:
            names = _attr_func_names(node, "f")
            s = self.function(names[0], grad_ctx) if names else None
            return (s, True) if s is not None else None
        if op in WHILE_OPS:
            parts = [
                self.function(n, grad_ctx) for n in _attr_func_names(node, "cond") + _attr_func_names(node, "body")
            ]
            parts = [p for p in parts if p is not None]
            if not parts:
                return None
            looped = _sequence(parts)
            looped.works = tuple((w, runs * trips, lookup) for w, runs, lookup in looped.works)
            return looped, False
        if op in _IF_OPS or op in _CASE_OPS:
            keys = ("then_branch", "else_branch") if op in _IF_OPS else ("branches",)
            branches = [self.function(n, grad_ctx) for k in keys for n in _attr_func_names(node, k)]
            branches = [b for b in branches if b is not None]
            if not branches:
                return None
            chosen = max(branches, key=lambda b: (b.heavy, b.depth))
            every = frozenset().union(*(b.functions for b in branches))
            return dataclasses.replace(chosen, functions=every), True
        if op in self.library:
            s = self.function(op, grad_ctx)
            return (s, True) if s is not None else None
        return None

    # --- one body ------------------------------------------------------------------------
    def body(
        self,
        nodes: Sequence[Any],
        *,
        function_format: bool,
        grad_ctx: bool,
        ret: Sequence[str] = (),
        fp_prefix: str | None = "",
        arg_shapes: Mapping[str, list[Any]] | None = None,
    ) -> Summary:
        """One body's summary, in four steps: heavy ops and call super-nodes, edges, TF1 loop
        exits, levels. ``fp_prefix`` None: the body is already in the fingerprint."""
        b = _Body(self, nodes, function_format, grad_ctx, arg_shapes)
        b.mark_heavy_and_calls()
        b.link(self.fingerprint_lines if fp_prefix is not None else None, fp_prefix or "")
        b.wait_for_loop_bodies()
        return b.summary(ret)


class _Body:
    """One graph body being reduced: its nodes' ids 0..n-1, then the virtual nodes of its calls
    (each call's "done" node and one node per output)."""

    def __init__(
        self,
        reducer: Reducer,
        nodes: Sequence[Any],
        function_format: bool,
        grad_ctx: bool,
        arg_shapes: Mapping[str, list[Any]] | None,
    ) -> None:
        self.reducer = reducer
        self.nodes = nodes
        self.n = n = len(nodes)
        self.names = [nd.name for nd in nodes]
        self.ops = [nd.op for nd in nodes]
        self.index = {name: i for i, name in enumerate(self.names)}
        if len(self.index) != n:
            log.warning("duplicate node names in a graph body; later definitions shadow earlier ones")
        self.function_format = function_format
        self.grad_ctx = grad_ctx
        self.shapes = NodeDefShapes(self.index, nodes, arg_shapes, function_format)
        self.op_types = Counter(self.ops)
        self.heavy_types: Counter = Counter()
        self.training = grad_ctx or any(H.is_gradient_op_type(t) for t in self.op_types)
        self.tf_data = any(H.is_dataset_op_type(t) for t in self.op_types)
        self.functions: set[str] = set()
        self.node_count = n
        self.back_edges = 0
        self.weight = [0] * n
        self.widths: dict[int, Sequence[int]] = {}  # call super-nodes: body level widths
        self.unit: list[int] = []  # heavy ops
        self.preds: list[Sequence[int]] = []
        self.calls: dict[int, _Call] = {}
        self.extra_preds: list[list[int]] = []
        self.extra_weight: list[int] = []
        self.works: list[tuple[int | None, int, bool]] = []
        self.loop_next: dict[int, list[int]] = {}  # Merge -> its NextIteration inputs (dropped back edges)

    def gradient_node(self, i: int) -> bool:
        return self.grad_ctx or H.is_gradient_op_type(self.ops[i]) or H.is_gradient_node_name(self.names[i])

    # --- step 1: heavy flags and call super-nodes ------------------------------------------
    def mark_heavy_and_calls(self) -> None:
        heavy_table = H.HEAVY_OP_TYPES
        gathers = H.CONDITIONAL_GATHER_OP_TYPES
        library = self.reducer.library
        for i, op in enumerate(self.ops):
            cls = heavy_table.get(op)
            if cls is None and op in gathers:
                cls = H.EMBEDDING if self._gathers_table(i) else None
            if cls is not None:
                self._add_heavy(i, op, cls)
            elif op in _STRUCTURAL or op in library:
                self._add_call(i, op)

    def _add_heavy(self, i: int, op: str, cls: str) -> None:
        grad = self.gradient_node(i)
        self.training = self.training or grad
        if grad and not self.reducer.include_gradients:
            return
        work = self._work(i)
        if cls == H.EMBEDDING and work is not None and work < H.MIN_LOOKUP_ELEMENTS:
            return  # a look-up of a few rows: bookkeeping, not worth a thread
        self.weight[i] = 1
        self.unit.append(i)
        self.heavy_types[op] += 1
        self.works.append((work, 1, cls == H.EMBEDDING))

    def _add_call(self, i: int, op: str) -> None:
        """Splice a function call in as a super-node: a "done" node weighing the body's depth,
        and (when outputs can be told apart) one node per output at its return level."""
        node = self.nodes[i]
        trips = _trip_count(node, self.index, self.nodes) if op in WHILE_OPS else 1
        found = self.reducer.call_summary(node, op, self.gradient_node(i), trips)
        if found is None:
            return
        s, per_output = found
        if s.level_widths:
            self.widths[i] = s.level_widths
        self.op_types.update(s.op_types)
        self.heavy_types.update(s.heavy_types)
        self.node_count += s.nodes
        self.functions |= s.functions
        self.training = self.training or s.training
        self.tf_data = self.tf_data or s.tf_data
        self.back_edges += s.back_edges
        self.works.extend(s.works)
        extra_preds, extra_weight = self.extra_preds, self.extra_weight
        done_id = self.n + len(extra_weight)
        extra_preds.append([i])
        extra_weight.append(s.depth)
        first_out = -1
        offsets = None
        if per_output and s.ret_levels:
            first_out = self.n + len(extra_weight)
            for r in s.ret_levels:
                extra_preds.append([i])
                extra_weight.append(r)
            if op not in _STRUCTURAL:  # direct call: outputs named after the signature
                fdef = self.reducer.library[op]
                offsets = {a.name: k for k, a in enumerate(fdef.signature.output_arg)}
        self.calls[i] = (done_id, first_out, len(s.ret_levels) if first_out >= 0 else 0, offsets)

    # --- step 2: edges ----------------------------------------------------------------------
    def link(self, fingerprint: list[str] | None, fp_prefix: str) -> None:
        """Each node's predecessors (data and control inputs; a call's consumers read the
        virtual node of the output they use), TF1 loop back edges dropped. One tight loop:
        it runs once per node of the model."""
        ops, names, calls, preds = self.ops, self.names, self.calls, self.preds
        has_merge = any(t in _MERGE_OPS for t in self.op_types)
        index_get = self.index.get
        out_node = _output_node
        function_format = self.function_format
        fp_append = fingerprint.append if fingerprint is not None else None
        for i, nd in enumerate(self.nodes):
            inputs = nd.input[:]
            if fp_append is not None:
                fp_append(f"{fp_prefix}{names[i]}\x1f{ops[i]}\x1f" + "\x1e".join(inputs))
            if not inputs:
                preds.append(_NO_PREDS)
                continue
            ps: list[int] = list(map(index_get, inputs))  # fast path: inputs "name" (output 0) only
            if None not in ps and (not calls or calls.keys().isdisjoint(ps)):
                if has_merge and ops[i] in _MERGE_OPS:
                    ps = self._drop_back_edges(i, ps)
                preds.append(ps)
                continue
            ps = []
            for s in inputs:
                k = index_get(s)
                if k is not None:  # "name": output 0 (graph format)
                    if calls and k in calls:
                        ps.append(out_node(calls[k], s, -1, function_format))
                    else:
                        ps.append(k)
                    continue
                if s[0] == "^":  # control input
                    k = index_get(s[1:])
                    if k is not None:
                        call = calls.get(k) if calls else None
                        ps.append(call[0] if call is not None else k)
                    continue
                j = s.find(":")
                if j < 0:
                    continue  # a function argument (or a name outside the graph)
                k = index_get(s[:j])
                if k is None:
                    continue
                if calls and k in calls:
                    ps.append(out_node(calls[k], s, j, function_format))
                else:
                    ps.append(k)
            if has_merge and ops[i] in _MERGE_OPS:
                ps = self._drop_back_edges(i, ps)
            preds.append(ps)

    def _drop_back_edges(self, i: int, ps: list[int]) -> list[int]:
        """A Merge's predecessors without its NextIteration inputs (TF1 loop back edges)."""
        n, ops = self.n, self.ops
        kept = [k for k in ps if k >= n or ops[k] not in _NEXT_ITERATION_OPS]
        if len(kept) != len(ps):
            self.back_edges += len(ps) - len(kept)
            self.loop_next[i] = [k for k in ps if k < n and ops[k] in _NEXT_ITERATION_OPS]
        return kept

    # --- step 3: TF1 loop exits ----------------------------------------------------------------
    def wait_for_loop_bodies(self) -> None:
        """TF1 loop: an Exit reads Switch(Merge(Enter, NextIteration)); with the back edge gone it
        would not wait for the body. Make it wait for the NextIteration (one iteration of the
        body: the trip count is unknown)."""
        if not self.loop_next:
            return
        n, ops, preds = self.n, self.ops, self.preds
        for i, op in enumerate(ops):
            if op not in _EXIT_OPS:
                continue
            for k in list(preds[i]):
                if k < n and ops[k] in _SWITCH_OPS:
                    for m in preds[k]:
                        preds[i] = [*preds[i], *self.loop_next.get(m, ())]

    # --- step 4: levels -----------------------------------------------------------------------
    def summary(self, ret: Sequence[str]) -> Summary:
        """Levels of every node (width.py), and of the body's return values."""
        self.preds.extend(self.extra_preds)
        self.weight.extend(self.extra_weight)
        result = propagate(self.preds, self.weight, self.widths, self.unit)
        levels = result.levels
        ret_levels: list[int] = []
        for s in ret:
            k = self._resolve(s) if s else -1
            ret_levels.append(levels[k] if k >= 0 else 0)  # an argument returned as is: level 0
        return Summary(
            level_widths=result.level_widths,
            ret_levels=tuple(ret_levels),
            op_types=self.op_types,
            heavy_types=self.heavy_types,
            nodes=self.node_count,
            functions=frozenset(self.functions),
            training=self.training,
            tf_data=self.tf_data,
            back_edges=self.back_edges + result.back_edges,
            works=tuple(self.works),
        )

    # --- helpers ------------------------------------------------------------------------------
    def _resolve(self, s: str) -> int:
        """Node id for a tensor name (used for function return values); -1 for arguments."""
        name = s[1:] if s.startswith("^") else s
        j = name.find(":")
        k = self.index.get(name if j < 0 else name[:j])
        if k is None:
            return -1
        call = self.calls.get(k)
        if call is not None:
            return _output_node(call, name, j, self.function_format)
        return k

    def _work(self, i: int) -> int | None:
        """The op's work (work.py): as structure_graph_def recorded it, else from the recorded
        shapes of the op and its inputs; None if unknown."""
        node = self.nodes[i]
        recorded = node.attr.get(WORK_ATTR)
        if recorded is not None:
            return None if recorded.i < 0 else recorded.i
        work, needed = estimate(node, self.shapes, self.reducer.assumed)
        self.reducer.assumed_used |= needed
        return work

    def _gathers_table(self, i: int) -> bool:
        """Is input 0 (params) of this GatherV2/Gather an embedding table? Look through
        Identity-like ops (TF1 reads a variable via Identity) up to a few hops."""
        nodes, index, ops = self.nodes, self.index, self.ops
        node = nodes[i]
        if not node.input:
            return False
        src = node.input[0]
        for _ in range(8):
            if src.startswith("^"):
                return False
            k = index.get(src.split(":", 1)[0])
            if k is None:
                return False  # a function argument: the table (if any) is read by the caller
            op = ops[k]
            if op in H.PASS_THROUGH_OP_TYPES:
                if not nodes[k].input:
                    return False
                src = nodes[k].input[0]
                continue
            if op == "Const":
                return H.is_table_const(nodes[k])
            return op in H.EMBEDDING_TABLE_SOURCES
        return False


def _output_node(call: _Call, s: str, j: int, function_format: bool) -> int:
    """The virtual node that carries output `s` of a call node (its "done" node when
    the output cannot be told apart, e.g. a While's loop variables)."""
    done_id, first_out, n_out, offsets = call
    if first_out < 0:
        return done_id
    try:
        if function_format:  # "node:out_name:index"
            _, out_name, idx = s.split(":")
            port = int(idx) + (offsets.get(out_name, 0) if offsets is not None else 0)
        else:  # "node:index" or "node"
            port = int(s[j + 1 :]) if j >= 0 else 0
    except ValueError:
        return done_id
    return first_out + port if 0 <= port < n_out else done_id


def _trip_count(node: Any, index: Mapping[str, int], nodes: Sequence[Any]) -> int:
    """A While loop's iterations when its maximum_iterations (input 1 of a TF2 While) is a
    constant, as Keras RNNs over a fixed-length sequence make it: Const, or Max/Min/Identity
    of one. 1 when unknown: the loop body's work then counts once."""
    if len(node.input) < 2:
        return 1
    ref = node.input[1]
    for _ in range(4):
        k = index.get(ref.lstrip("^").split(":", 1)[0])
        if k is None:
            return 1
        found = nodes[k]
        if found.op == "Const":
            values = const_ints(found)
            return max(1, max(values)) if values else 1
        if found.op not in ("Max", "Min", "Identity", "Cast") or not found.input:
            return 1
        ref = found.input[0]
    return 1


def _sequence(parts: Sequence[Summary]) -> Summary:
    """Bodies run one after the other (a While's cond, then its body)."""
    out = Summary(level_widths=tuple(w for p in parts for w in p.level_widths))
    for p in parts:
        out.op_types.update(p.op_types)
        out.heavy_types.update(p.heavy_types)
        out.nodes += p.nodes
        out.functions = out.functions | p.functions
        out.training = out.training or p.training
        out.tf_data = out.tf_data or p.tf_data
        out.back_edges += p.back_edges
        out.works += p.works
    return out


def prune_to_outputs(nodes: Sequence[Any], outputs: Iterable[str], strict: bool = True) -> list[Any]:
    """The nodes a run fetching `outputs` ("name:0" or "name") executes: their ancestors.
    ``strict=False``: outputs that are no node (a function's arguments) are skipped."""
    index = {nd.name: nd for nd in nodes}
    seen: set[str] = set()
    stack = []
    for t in outputs:
        name = t.lstrip("^").split(":", 1)[0]
        if name not in index:
            if not strict:
                continue
            raise ValueError(f"output {t!r} is not a node of the graph")
        stack.append(name)
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        seen.add(name)
        for s in index[name].input:
            src = s.lstrip("^").split(":", 1)[0]
            if src in index and src not in seen:
                stack.append(src)
    return [nd for nd in nodes if nd.name in seen]

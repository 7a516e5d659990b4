"""How much arithmetic one heavy op does, from the static shapes in a GraphDef. Pure: no TF.

The width rule says how many ops may run at once; it says nothing about whether one op
is worth splitting across threads. Measured on this host (docs/design.md, "Small ops"): at batch 1,
DeepQ's convolutions (about 2 M multiply-adds each) ran 1.9x slower with two intra-op
threads than with one, while SqueezeNet's (about 10 M+) ran 1.35x faster. Waking a
second thread and joining it costs a fixed few tens of microseconds per op; only ops with
enough work pay that back. So the analysis records each heavy op's work and the planner
compares the typical op against a measured threshold.

Work is counted in multiply-adds (MACs) for contractions and in output elements for
look-ups (they move memory, one element per row read):

- MatMul / BatchMatMul / fused and oneDNN variants: output elements x K.
- Einsum: output elements x the product of the contracted index sizes.
- Convolutions (forward and both backprops): output elements x kh*kw*cin, i.e. the
  output (or the incoming gradient) times the filter's elements per output channel;
  depthwise: output elements x kh*kw.
- Gathers and sparse-segment combiners: output elements.
- Anything else: unknown (None). The planner only acts on work it knows.

Unknown dimensions (a serving signature's None batch, a free sequence length) make the work
unknown unless the caller says what to read them as (``Assumed``): the leading dimension as
the batch, any other as one size. A SavedModel's shapes are recorded at trace time, so this
substitution is all that is possible without running it; the profile says what was assumed.

One estimator (``estimate``) serves both places shapes come from (``OpShapes``):

- a NodeDef's ``_output_shapes`` attribute (``NodeDefShapes``): TensorFlow writes it on
  function-body nodes and on function arguments (``arg_attr``), and on top-level nodes when the
  GraphDef is made with ``add_shapes=True``;
- a live op's static shapes (live_graphs.py), for a tf.Graph or a traced function:
  ``structure_graph_def`` computes each heavy op's work there and writes it as one integer
  (``WORK_ATTR``), which costs far less than writing every op's shapes as protobufs.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Iterable, Mapping, Protocol, Sequence

from tf_autopar.graph import heavy_ops as H
from tf_autopar.graph.dims import Assumed, fill_unknown, proto_dims

Shape = tuple[int, ...]  # fully known dimensions only
Dims = Sequence[int]  # -1 = unknown
#: A heavy op's work as computed by ``structure_graph_def`` from the live op (a private NodeDef
#: attribute; -1 = unknown).
WORK_ATTR = "_tf_autopar_work"


class OpShapes(Protocol):
    """Where an op's static shapes come from. A *ref* names one tensor: an input string of a
    NodeDef, or a live tf.Tensor. Dims use -1 for an unknown size, None for an unknown rank."""

    def input_refs(self, node: Any) -> Sequence[Any]:
        """The op's data inputs, in order."""
        ...

    def output_dims(self, node: Any) -> Dims | None:
        """The op's first output."""
        ...

    def dims(self, ref: Any) -> Dims | None: ...

    def reshape_input(self, ref: Any) -> Any | None:
        """The ref a Reshape that produces ``ref`` reads (its input 0), else None."""
        ...


def estimate(node: Any, shapes: OpShapes, assumed: Assumed | None) -> tuple[int | None, frozenset[str]]:
    """(work of one run of ``node``, which kinds of unknown dimension were read as ``assumed``)
    from its shapes; (None, ...) when unknown. ``node`` is the op's NodeDef (type and attributes)."""
    refs = shapes.input_refs(node)
    needed: set[str] = set()

    def filled(raw: Dims | None) -> Shape | None:
        if raw is None:
            return None
        dims, kinds = fill_unknown(raw, assumed)
        if kinds:
            needed.update(kinds)
        return dims

    def input_shape(i: int) -> Shape | None:
        return filled(shapes.dims(refs[i])) if i < len(refs) else None

    def input_elements(i: int) -> int | None:
        """Through a Reshape whose own shape is partly computed: its input's elements."""
        if i >= len(refs):
            return None
        raw = shapes.dims(refs[i])
        if raw is None or min(raw, default=0) < 0:
            through = shapes.reshape_input(refs[i])
            if through is not None:
                raw = shapes.dims(through)
        dims = filled(raw)
        return None if dims is None else math.prod(dims)

    work = op_work(node, lambda: filled(shapes.output_dims(node)), input_shape, input_elements)
    return work, frozenset(needed) if work is not None else frozenset()


class NodeDefShapes:
    """OpShapes of the nodes of one graph body, from their ``_output_shapes`` attributes (and
    a function's argument shapes). Dims are read once per tensor: a weight or an activation
    read by several heavy ops is parsed once."""

    def __init__(
        self,
        index: Mapping[str, int],
        nodes: Sequence[Any],
        arg_shapes: Mapping[str, list[Any]] | None,
        function_format: bool,
    ) -> None:
        self.index = index
        self.nodes = nodes
        self.arg_shapes = arg_shapes
        self.function_format = function_format
        self._dims: dict[str, Dims | None] = {}

    @staticmethod
    def input_refs(node: Any) -> list[str]:
        return [s for s in node.input if s[:1] != "^"]

    @staticmethod
    def output_dims(node: Any) -> Dims | None:
        recorded = node.attr.get("_output_shapes")  # one map look-up, not `in` then `[]`
        if recorded is None:
            return None
        own = recorded.list.shape
        return proto_dims(own[0]) if len(own) else None

    def dims(self, ref: str) -> Dims | None:
        try:
            return self._dims[ref]
        except KeyError:
            pass
        proto = self._shape_proto(ref)
        found = self._dims[ref] = None if proto is None else proto_dims(proto)
        return found

    def reshape_input(self, ref: str) -> str | None:
        k = self.index.get(ref.partition(":")[0])
        if k is None:
            return None
        producer = self.nodes[k]
        return producer.input[0] if producer.op == "Reshape" and producer.input else None

    def _shape_proto(self, ref: str) -> Any:
        name, _, rest = ref.partition(":")
        k = self.index.get(name)
        if k is None:
            found = self.arg_shapes.get(name) if self.arg_shapes else None
            return found[0] if found else None
        recorded = self.nodes[k].attr.get("_output_shapes")
        if recorded is None:
            return None
        shapes = recorded.list.shape
        if len(shapes) == 1:
            return shapes[0]
        if not self.function_format:  # "name" or "name:port"
            port = int(rest) if rest.isascii() and rest.isdigit() else 0  # "x:²" is no port
            return shapes[port] if port < len(shapes) else None
        return None  # "name:out_arg:i" of a multi-output op: its port needs the OpDef


def output_shapes(node_or_attr_owner: Any) -> list[Any]:
    """The ``_output_shapes`` list of a NodeDef (or an ArgAttrs), as TensorShapeProtos."""
    attr = node_or_attr_owner.attr
    if "_output_shapes" not in attr:
        return []
    return list(attr["_output_shapes"].list.shape)


def _elements(shape: Shape | None) -> int | None:
    return None if shape is None else math.prod(shape)


def _matmul_k(node: Any, a: Shape | None, b: Shape | None) -> int | None:
    """The contracted dimension, from whichever input's shape is known (a weight gradient's
    saved activation, popped from a TensorList in a loop, often has no recorded shape)."""
    batch = "BatchMatMul" in node.op

    def transposed(key: str) -> bool:
        return node.attr[key].b if key in node.attr else False

    if a is not None and len(a) >= 2:
        return a[-2] if transposed("adj_x" if batch else "transpose_a") else a[-1]
    if b is not None and len(b) >= 2:
        return b[-1] if transposed("adj_y" if batch else "transpose_b") else b[-2]
    return None


def _einsum_contracted(equation: str, inputs: Sequence[Shape | None]) -> int | None:
    """Product of the sizes of indices summed over (in some input, not in the output)."""
    if "->" not in equation:
        return None
    lhs, out = equation.replace(" ", "").split("->")
    specs = lhs.split(",")
    if len(specs) != len(inputs):
        return None
    sizes: dict[str, int] = {}
    for spec, shape in zip(specs, inputs):
        if shape is None:
            return None
        if "..." in spec:
            head, tail = spec.split("...")
            pairs = list(zip(head, shape[: len(head)])) + list(zip(tail, shape[len(shape) - len(tail) :]))
        else:
            if len(spec) != len(shape):
                return None
            pairs = list(zip(spec, shape))
        sizes.update(pairs)
    contracted = set("".join(specs).replace(".", "")) - set(out)
    return math.prod(sizes.get(c, 1) for c in contracted)


def op_work(
    node: Any,
    output_shape: Callable[[], Shape | None],
    input_shape: Callable[[int], Shape | None],
    input_elements: Callable[[int], int | None] | None = None,
) -> int | None:
    """Multiply-adds (or elements moved) of one run of ``node``; None when shapes are unknown.

    ``output_shape()``: the node's first output shape, asked for only where the rule needs it (a
    MatMul's work usually comes from its inputs, and a live op's shapes cost a call into
    TensorFlow each). ``input_shape(i)``: the shape of its i-th input.
    ``input_elements(i)``: its element count, which a caller can know when the shape is not:
    Keras' Dense on a 3-D input reshapes it to a matrix with a computed shape ([-1, -1] in the
    graph), so a plain MatMul's rows are only known as the Reshape input's elements / K. For a
    2-D MatMul, work = elements(A) x columns(B) (= M x K x N).
    """
    cls = H.heavy_class(node.op)
    op = node.op
    if cls == H.MATMUL:
        if "Sparse" in op or "Quantized" in op:
            return None
        if "Einsum" not in op and "BatchMatMul" not in op and input_elements is not None:
            b = input_shape(1)
            a_elements = input_elements(0) if b is not None and len(b) == 2 else None
            if a_elements is not None:
                attr = node.attr.get("transpose_b")  # one map look-up, not `in` then `[]`
                transposed_b = attr.b if attr is not None else False
                return a_elements * (b[0] if transposed_b else b[1])  # type: ignore[index]
        if "Einsum" in op:
            equation = node.attr["equation"].s.decode() if "equation" in node.attr else ""
            n_in = sum(1 for s in node.input if not s.startswith("^"))
            k = _einsum_contracted(equation, [input_shape(i) for i in range(n_in)])
        else:
            k = _matmul_k(node, input_shape(0), input_shape(1))
        n = _elements(output_shape())
        return None if k is None or n is None else n * k
    if cls == H.EMBEDDING or op in H.CONDITIONAL_GATHER_OP_TYPES:
        return _elements(output_shape())  # look-ups: rows read
    if cls == H.CONVOLUTION:
        backprop_filter = "BackpropFilter" in op
        backprop_input = "BackpropInput" in op
        if "Quantized" in op or "Pad" in op:
            return None
        filt = output_shape() if backprop_filter else input_shape(1)
        flow = input_shape(2) if (backprop_filter or backprop_input) else output_shape()
        if filt is None or flow is None or len(filt) < 3:
            return None
        if "Depthwise" in op:
            per_output = math.prod(filt[:-2])
        else:
            per_output = math.prod(filt) // max(1, filt[-1])
        return math.prod(flow) * per_output
    return None


def typical_work(works: Sequence[tuple[int | None, int]]) -> int | None:
    """The work-weighted median op size over (work per run, runs per step) pairs: half of
    a step's heavy work runs in ops at most this big. None when any op's work is unknown
    or there are none (then nothing is claimed)."""
    if not works or any(w is None for w, _ in works):
        return None
    ordered = sorted((w, runs) for w, runs in works)  # type: ignore[misc]
    total = sum(w * runs for w, runs in ordered)
    if total <= 0:
        return 0
    running = 0
    for w, runs in ordered:
        running += w * runs
        if 2 * running >= total:
            return int(w)
    return int(ordered[-1][0])


def total_work(works: Iterable[tuple[int | None, int]]) -> int | None:
    """The summed work per step over (work per run, runs per step) pairs, as typical_work takes
    them; None when any op's work is unknown (then nothing is claimed), 0 when there are none."""
    total = 0
    for w, runs in works:
        if w is None:
            return None
        total += w * runs
    return total


_INT_DTYPES = {3: "int32_val", 9: "int64_val"}  # DataType enum -> TensorProto field


def const_ints(node: Any) -> list[int]:
    """The integer values of a small Const NodeDef (int32/int64), without TensorFlow."""
    try:
        tensor = node.attr["value"].tensor
    except (AttributeError, KeyError):
        return []
    field = _INT_DTYPES.get(tensor.dtype)
    if field is None:
        return []
    values = list(getattr(tensor, "int_val" if field == "int32_val" else field))
    if not values and tensor.tensor_content:
        import numpy as np  # here: enable() imports the graph package and must not load numpy

        values = np.frombuffer(tensor.tensor_content, dtype=np.int32 if tensor.dtype == 3 else np.int64).tolist()
    return [int(v) for v in values]

"""Live TensorFlow objects (tf.Graph, a traced function's FuncGraph, Keras models) -> a GraphDef.

TensorFlow is only touched through the objects given (so it is already imported), except to
trace a Keras model or load a ``.keras`` file. The GraphDef keeps what the analysis reads
(names, op types, inputs, attributes) and, on each heavy op, its work computed from the live
op's static shapes (work.py), which a GraphDef does not keep.
"""

from __future__ import annotations

import logging
import zipfile
from typing import Any, Sequence

from tf_autopar.graph import heavy_ops as H
from tf_autopar.graph._gc import paused_gc
from tf_autopar.graph.dims import Assumed
from tf_autopar.graph.work import WORK_ATTR, Dims, estimate

log = logging.getLogger("tf_autopar.graph")

# Below this many constant bytes per op, one as_graph_def() (C++, ~0.6 GB/s here) is cheaper than
# rebuilding the GraphDef op by op in Python (~10 us per op).
SMALL_PAYLOAD_PER_OP = 4096


def structure_graph_def(graph: Any, assumed: Assumed | None = None, used: set[str] | None = None) -> Any:
    """``graph`` as a GraphDef without large constant payloads, with its function library.

    ``graph.as_graph_def()`` serialises every constant: for a frozen model that is all its
    weights (575 MB for VGG-19), and copying them cost 97% of a Session's creation time in
    analysis. The analysis needs names, op types, inputs, attributes and, for constants,
    only dtype and shape (the embedding-table rule looks at the rank). Small graphs with small
    constants are serialised whole: that is faster than the op-by-op copy. Each heavy op (in
    nested function bodies too) carries its work as a private int attribute (work.py),
    computed from the live op's static shapes; unknown dimensions are read as ``assumed``
    says, and ``used`` collects which were. ``as_graph_def(add_shapes=True)`` would give the
    shapes too, but writes every op's (measured: 5.8x the plain export's time on 100,000
    ops, benchmarks/results/graph_live.json).
    """
    with paused_gc():
        return _structure_graph_def(graph, assumed, set() if used is None else used)


def _structure_graph_def(graph: Any, assumed: Assumed | None, used: set[str]) -> Any:
    from tensorflow.core.framework import graph_pb2

    ops = graph.get_operations()
    stubs: dict[str, tuple[Any, Any]] = {}
    heavy: list[int] = []  # positions of heavy-typed ops: they get their work recorded (work.py)
    payload = 0
    for i, op in enumerate(ops):
        kind = op.type
        if kind == "Const":
            out = op.outputs[0]  # its dtype and shape are cached on the tensor: no attr lookup
            dtype, shape = out.dtype, out.shape
            stubs[op.name] = (dtype, shape)
            payload += (shape.num_elements() or 0) * dtype.size
        elif kind in H.HEAVY_OP_TYPES or kind in H.CONDITIONAL_GATHER_OP_TYPES:
            heavy.append(i)
    functions = getattr(graph, "_functions", {})  # what as_graph_def() copies into its library
    if payload <= SMALL_PAYLOAD_PER_OP * max(1, len(ops)):
        graph_def = graph.as_graph_def()
    else:
        graph_def = graph_pb2.GraphDef()
        nodes = graph_def.node
        for op in ops:
            stub = stubs.get(op.name)
            if stub is None:
                nodes.append(op.node_def)
                continue
            node = nodes.add(name=op.name, op="Const", device=op.device)
            node.input.extend("^" + c.name for c in op.control_inputs)
            tensor = node.attr["value"].tensor
            tensor.dtype = stub[0].as_datatype_enum
            tensor.tensor_shape.CopyFrom(stub[1].as_proto())
            node.attr["dtype"].type = tensor.dtype
        graph_def.library.function.extend(f.cached_definition for f in functions.values())
    _add_heavy_work(graph_def.node, ops, heavy, assumed, used)
    for fdef in graph_def.library.function:  # loop and branch bodies: work from their traced graphs
        body = getattr(functions.get(fdef.signature.name), "_cached_graph", None)  # never re-traced
        if body is None:
            continue
        for node in fdef.node_def:
            if node.op in H.HEAVY_OP_TYPES or node.op in H.CONDITIONAL_GATHER_OP_TYPES:
                try:
                    op = body.get_operation_by_name(node.name)
                except (KeyError, ValueError):
                    continue
                _write_work(node, op, assumed, used)
    return graph_def


def _add_heavy_work(nodes: Any, ops: list[Any], heavy: list[int], assumed: Assumed | None, used: set[str]) -> None:
    """Write each heavy op's work (work.py) on its NodeDef, from the live op's static shapes
    (``heavy``: positions in both ``ops`` and ``nodes``). One int per heavy op: shapes as
    protobufs cost 25 us per op, a visible share of a small model's session creation."""
    by_name: dict[str, Any] | None = None
    for i in heavy:
        op = ops[i]
        node = nodes[i] if i < len(nodes) else None
        if node is None or node.name != op.name:  # as_graph_def kept another order: look it up
            by_name = by_name or {n.name: n for n in nodes}
            node = by_name.get(op.name)
            if node is None:
                continue
        _write_work(node, op, assumed, used)


def _write_work(node: Any, op: Any, assumed: Assumed | None, used: set[str]) -> None:
    work, needed = estimate(node, LiveOpShapes(op), assumed)
    node.attr[WORK_ATTR].i = -1 if work is None else work
    used.update(needed)


class LiveOpShapes:
    """OpShapes (work.py) of one live tf.Operation: refs are its tf.Tensors."""

    __slots__ = ("op",)

    def __init__(self, op: Any) -> None:
        self.op = op

    def input_refs(self, node: Any) -> Sequence[Any]:
        return self.op.inputs

    def output_dims(self, node: Any) -> Dims | None:
        outputs = self.op.outputs
        return self.dims(outputs[0]) if outputs else None

    @staticmethod
    def dims(tensor: Any) -> Dims | None:
        # A graph tensor's ``_shape`` is TensorFlow's C++ read of its static shape, (dims with
        # None, unknown rank) (tensor.py builds ``.shape`` from it): 0.3 us, against 6 us for
        # ``.shape``, which builds a TensorShape of Dimensions; on 100,000 ops that was most of
        # the live path's extra time over a GraphDef's. Anything else falls back to ``.shape``.
        raw = getattr(tensor, "_shape", None)
        if type(raw) is tuple and len(raw) == 2:
            dims, unknown_rank = raw
            if unknown_rank:
                return None
        else:
            try:
                dims = tensor.shape.as_list()
            except ValueError:  # unknown rank
                return None
        return [-1 if d is None else d for d in dims]

    @staticmethod
    def reshape_input(tensor: Any) -> Any | None:
        producer = tensor.op
        return producer.inputs[0] if producer.type == "Reshape" and producer.inputs else None


def input_dims(graph: Any) -> dict[str, tuple[int, ...] | None]:
    """A traced function's inputs (resource handles left out) as name -> dims (-1 = unknown)."""
    return {t.name.split(":")[0]: spec_dims(t) for t in getattr(graph, "inputs", ()) if t.dtype != "resource"}


def spec_dims(spec: Any) -> tuple[int, ...] | None:
    """A TensorSpec's or tensor's dims (-1 = unknown), None for an unknown rank."""
    try:
        dims = spec.shape.as_list()
    except (AttributeError, ValueError):
        return None
    return tuple(-1 if d is None else int(d) for d in dims)


def trace_tf_function(fn: Any, input_signature: Any) -> tuple[Any, str]:
    """(the FuncGraph of ``fn`` traced at ``input_signature`` or its own, its name)."""
    name = getattr(fn, "__name__", None) or getattr(fn, "name", "tf.function")
    try:
        cf = fn.get_concrete_function(*input_signature) if input_signature else fn.get_concrete_function()
    except (TypeError, ValueError) as exc:
        raise TypeError(
            f"cannot trace tf.function {name!r} without arguments: give it an input_signature, "
            f"pass input_signature=... here, or pass f.get_concrete_function(<specs>) ({exc})"
        ) from exc
    return cf.graph, name


def _keras_input_specs(model: Any) -> Any:
    import tensorflow as tf

    def spec(t: Any) -> Any:
        return tf.TensorSpec(tuple(t.shape), t.dtype, name=getattr(t, "name", None))

    try:
        structure = model.input
    except (AttributeError, ValueError):
        try:
            inputs = model.inputs
        except (AttributeError, ValueError):
            inputs = None
        if not inputs:
            raise ValueError(
                f"Keras model {model.name!r} has no known inputs (never built or called); "
                "call it once, give it a keras.Input, or pass input_signature=[tf.TensorSpec(...)]"
            ) from None
        structure = inputs[0] if len(inputs) == 1 else list(inputs)
    return tf.nest.map_structure(spec, structure)


def trace_keras(model: Any, input_signature: Any) -> tuple[Any, str, dict[str, tuple[int, ...] | None]]:
    """(graph, label, inputs as name -> dims) of what ``model.predict`` runs: Keras 3's TF trainer
    traces ``predict_function`` (a tf.function around ``predict_step`` -> ``model(x,
    training=False)``) and calls it with ``[(x,)]``, one batch per step; we trace the same
    function with the model's input specs (batch dimension None, read as the batch asked for)."""
    import tensorflow as tf

    if input_signature is not None:
        specs = input_signature[0] if len(input_signature) == 1 else list(input_signature)
    else:
        specs = _keras_input_specs(model)
    label = f"Keras model {model.name!r} (predict)"
    try:
        model.make_predict_function()
        cf = model.predict_function.get_concrete_function([(specs,)])
    except (AttributeError, TypeError, ValueError) as exc:
        log.info("Keras predict_function could not be traced (%s); tracing model(x, training=False)", exc)
        fn = tf.function(lambda x: model(x, training=False))
        cf = fn.get_concrete_function(specs)
        label = f"Keras model {model.name!r} (call, training=False)"
    inputs = {
        getattr(spec, "name", None) or f"input_{i}": spec_dims(spec) for i, spec in enumerate(tf.nest.flatten(specs))
    }
    return cf.graph, label, inputs


def load_keras_file(path: str) -> Any:
    """The model of a .keras file: rebuilt (a zip of config and weights holds no graph), so this
    starts TensorFlow's runtime; enable() does it in a child process when the pools are still open."""
    if not zipfile.is_zipfile(path):
        raise ValueError(f"{path} is not a Keras archive (a .keras file is a zip of config.json and weights)")
    import keras

    try:
        return keras.models.load_model(path, compile=False)
    except Exception as exc:  # Keras raises many types for a broken archive
        raise ValueError(f"cannot load the Keras model {path}: {exc}") from None

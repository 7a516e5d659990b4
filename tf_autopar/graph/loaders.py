"""Turn any supported object into GraphDef(s) + function library, then profile it.

TensorFlow is imported only when the object is a TensorFlow object (which means TF is
already imported) or when a file must be parsed with TF's protobuf classes. Reading a
SavedModel uses ``tensorflow.core.protobuf.saved_model_pb2`` only: that imports the
``tensorflow`` package but creates no op and no context, so the runtime (and its thread
pools) is still unstarted afterwards and ``tf.config.threading`` can still be set. That
is what lets a plan be made before TensorFlow fixes its pools (tested).
"""
from __future__ import annotations

import dataclasses
import logging
import math
import os
import re
from typing import Any, Mapping, Sequence

from tf_autopar._model_path import looks_like_model
from tf_autopar.graph import heavy_ops as H
from tf_autopar.graph import named
from tf_autopar.graph.analysis import analyze_function, analyze_graph_def
from tf_autopar.graph.profile import GraphProfile
from tf_autopar.graph.dims import Assumed, assumed_dims, describe_assumptions, fill_unknown, proto_dims
from tf_autopar.graph.work import WORK_ATTR, op_work

log = logging.getLogger("tf_autopar.graph")

SUPPORTED = (
    "tf.Graph",
    "GraphDef",
    "MetaGraphDef",
    "SavedModel protobuf",
    "tf.function with an input_signature",
    "ConcreteFunction",
    "Keras 3 model",
    "SavedModel directory",
    "path to saved_model.pb(txt) or a GraphDef .pb/.pbtxt file",
    "registered model name (a bundled workload once tf_autopar_workloads is imported)",
)

_SAVER_FUNCTION = re.compile(r"^__inference__traced_(save|restore)_\d+$")


def analyze(
    obj: Any,
    *,
    include_gradients: bool = True,
    signature: str | None = None,
    input_signature: Any = None,
    workload_mode: str = "infer",
    workload_size: str = "tiny",
    batch: int | None = None,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
) -> GraphProfile:
    """Profile the heavy-op structure of a model (see width.py for the definitions).

    ``include_gradients``: count heavy ops of the backward pass. Default True: they are
    real compute scheduled by the same inter-op pool (Conv2DBackpropInput and
    Conv2DBackpropFilter of one layer are independent, so a training graph is wider than
    its forward pass). Measured (``benchmarks/bench_graph.py --training``, 2-core shared
    host, 3 interleaved fresh-process rounds): a plain CNN has average width 1 with or
    without gradients (max 2 vs 1); an inception-style CNN 4 with, 2 without (max 8 vs
    4). On 2 cores both counts lead to the same capped pool size, and 1x2 beat 2x1 for both
    models (95 vs 130 ms, 47 vs 75 ms per step), so the measurement found nothing in
    favour of excluding gradients as the authors' tuner did; we keep them (and the
    option) until a many-core measurement says otherwise. ``signature``: which SavedModel /
    MetaGraphDef signature to follow (default ``serving_default``). ``input_signature``:
    input specs for a Keras model without known inputs or a tf.function without a
    signature. ``workload_mode``/``workload_size``: for a registered model name (graph/named.py).
    ``batch``: what an unknown batch dimension (a serving signature's None) is read as when
    estimating each op's work; default 1 (a bundled workload is built at it, default: its
    published batch). ``input_shapes``: full shapes of some inputs by name (``--input-shape``),
    for other unknown dimensions such as a sequence length (default dims.DEFAULT_OTHER_DIM). The
    profile's ``assumptions`` say what was assumed.
    """
    shapes = dict(input_shapes or {})
    if isinstance(obj, (str, os.PathLike)):
        return _from_path_or_name(
            os.fspath(obj), include_gradients, signature, workload_mode, workload_size, batch, shapes
        )
    kw = {"include_gradients": include_gradients}
    full_name = getattr(getattr(obj, "DESCRIPTOR", None), "full_name", None)
    if full_name == "tensorflow.GraphDef":
        return analyze_graph_def(obj, assumed=assumed_dims(_placeholders(obj), batch, shapes), **kw)
    if full_name == "tensorflow.MetaGraphDef":
        return _from_meta_graph(obj, signature, "MetaGraphDef", include_gradients, batch, shapes)
    if full_name == "tensorflow.SavedModel":
        return _from_saved_model_proto(obj, signature, "SavedModel protobuf", include_gradients, batch, shapes)
    module = type(obj).__module__ or ""
    if module.startswith(("keras", "tf_keras")) and hasattr(obj, "make_predict_function"):
        return _from_keras(obj, input_signature, include_gradients, batch, shapes)
    if module.startswith("tensorflow"):
        if hasattr(obj, "function_def") and hasattr(obj, "graph"):  # ConcreteFunction
            return _from_live_graph(obj.graph, f"ConcreteFunction {obj.name}", include_gradients, batch, shapes)
        if hasattr(obj, "get_concrete_function"):  # tf.function
            return _from_tf_function(obj, input_signature, include_gradients, batch, shapes)
        if hasattr(obj, "as_graph_def"):  # tf.Graph (and FuncGraph)
            return _from_live_graph(obj, f"tf.Graph ({type(obj).__name__})", include_gradients, batch, shapes)
    raise TypeError(
        f"cannot analyse an object of type {type(obj).__module__}.{type(obj).__qualname__}; "
        f"supported: {', '.join(SUPPORTED)}"
    )


# --- TensorFlow / Keras objects ---------------------------------------------------------
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
    computed from the live op's static shapes, which a GraphDef does not keep; unknown
    dimensions are read as ``assumed`` says (work.py), and ``used`` collects which were.
    """
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
    used = set() if used is None else used
    _add_heavy_work(graph_def.node, ops, heavy, assumed, used)
    for fdef in graph_def.library.function:  # loop and branch bodies: work from their traced graphs
        body = getattr(functions.get(fdef.signature.name), "_cached_graph", None)  # never re-traced
        if body is None:
            continue
        for node in fdef.node_def:
            if node.op in H.HEAVY_OP_TYPES or node.op in H.CONDITIONAL_GATHER_OP_TYPES:
                try:
                    _write_work(node, body.get_operation_by_name(node.name), assumed, used)
                except (KeyError, ValueError):
                    continue
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


def _write_work(node: Any, op: Any, assumed: Assumed | None = None, used: set[str] | None = None) -> None:
    inputs = op.inputs
    outputs = op.outputs
    needed: set[str] = set()

    def static(tensor: Any) -> tuple[int, ...] | None:
        try:
            dims = tensor.shape.as_list()
        except ValueError:  # unknown rank
            return None
        filled, kinds = fill_unknown(dims, assumed)
        needed.update(kinds)
        return filled

    def elements(i: int) -> int | None:  # through a Reshape with a computed shape (work.op_work)
        if i >= len(inputs):
            return None
        tensor = inputs[i]
        if tensor.op.type == "Reshape" and not tensor.shape.is_fully_defined():
            tensor = tensor.op.inputs[0]
        dims = static(tensor)
        return None if dims is None else math.prod(dims)

    work = op_work(node, static(outputs[0]) if outputs else None,
                   lambda i: static(inputs[i]) if i < len(inputs) else None, elements)
    node.attr[WORK_ATTR].i = -1 if work is None else work
    if work is not None and used is not None:
        used.update(needed)


def _spec_dims(spec: Any) -> tuple[int, ...] | None:
    try:
        dims = spec.shape.as_list()
    except (AttributeError, ValueError):
        return None
    return tuple(-1 if d is None else int(d) for d in dims)


def _from_live_graph(graph: Any, source: str, include_gradients: bool, batch: int | None,
                     shapes: Mapping[str, Sequence[int]], inputs: Mapping[str, Any] | None = None) -> GraphProfile:
    """A live graph (tf.Graph, a function's FuncGraph): work from its ops' static shapes, unknown
    dimensions read as assumed (inputs: name -> dims, for ``--input-shape`` checks)."""
    if inputs is None:
        inputs = {t.name.split(":")[0]: _spec_dims(t) for t in getattr(graph, "inputs", ()) if t.dtype != "resource"}
    assumed = assumed_dims(dict(inputs), batch, dict(shapes))
    used: set[str] = set()
    profile = analyze_graph_def(structure_graph_def(graph, assumed, used), include_gradients=include_gradients,
                                source=source)
    return dataclasses.replace(profile, assumptions=describe_assumptions(assumed, used))


def _from_tf_function(fn: Any, input_signature: Any, include_gradients: bool, batch: int | None = None,
                      shapes: Mapping[str, Sequence[int]] | None = None) -> GraphProfile:
    name = getattr(fn, "__name__", None) or getattr(fn, "name", "tf.function")
    try:
        cf = fn.get_concrete_function(*input_signature) if input_signature else fn.get_concrete_function()
    except (TypeError, ValueError) as exc:
        raise TypeError(
            f"cannot trace tf.function {name!r} without arguments: give it an input_signature, "
            f"pass input_signature=... here, or pass f.get_concrete_function(<specs>) ({exc})"
        ) from exc
    return _from_live_graph(cf.graph, f"tf.function {name}", include_gradients, batch, shapes or {})


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


def _from_keras(model: Any, input_signature: Any, include_gradients: bool, batch: int | None = None,
                shapes: Mapping[str, Sequence[int]] | None = None) -> GraphProfile:
    """What ``model.predict`` runs: Keras 3's TF trainer traces ``predict_function`` (a
    tf.function around ``predict_step`` -> ``model(x, training=False)``) and calls it with
    ``[(x,)]``, one batch per step; we trace the same function with the model's input
    specs (batch dimension None, read as ``batch`` for the work estimate)."""
    import tensorflow as tf

    if input_signature is not None:
        specs = input_signature[0] if len(input_signature) == 1 else list(input_signature)
    else:
        specs = _keras_input_specs(model)
    source = f"Keras model {model.name!r} (predict)"
    try:
        model.make_predict_function()
        cf = model.predict_function.get_concrete_function([(specs,)])
    except (AttributeError, TypeError, ValueError) as exc:
        log.info("Keras predict_function could not be traced (%s); tracing model(x, training=False)", exc)
        fn = tf.function(lambda x: model(x, training=False))
        cf = fn.get_concrete_function(specs)
        source = f"Keras model {model.name!r} (call, training=False)"
    inputs = {getattr(spec, "name", None) or f"input_{i}": _spec_dims(spec)
              for i, spec in enumerate(tf.nest.flatten(specs))}
    return _from_live_graph(cf.graph, source, include_gradients, batch, shapes or {}, inputs)


# --- protobufs ----------------------------------------------------------------------------
def signature_inputs(mg: Any, signature: str | None = None) -> tuple[str | None, dict[str, tuple[int, ...] | None]]:
    """(chosen signature, its inputs as name -> dims, -1 = unknown) of a MetaGraphDef: the
    one asked for, else ``serving_default``, else the first by name; (None, {}) without any."""
    sigs = {k: v for k, v in mg.signature_def.items() if not k.startswith("__")}
    if signature is not None and signature not in sigs:
        raise ValueError(f"the model has no signature {signature!r}; it has {sorted(sigs) or 'none'}")
    chosen = signature or ("serving_default" if "serving_default" in sigs else (sorted(sigs)[0] if sigs else None))
    if chosen is None:
        return None, {}
    return chosen, {k: proto_dims(v.tensor_shape) for k, v in sigs[chosen].inputs.items()}


def _placeholders(graph_def: Any) -> dict[str, tuple[int, ...] | None]:
    """A GraphDef's feeds (Placeholder nodes) as name -> dims."""
    return {n.name: (proto_dims(n.attr["shape"].shape) if "shape" in n.attr else None)
            for n in graph_def.node if n.op == "Placeholder"}


def _from_meta_graph(mg: Any, signature: str | None, where: str, include_gradients: bool,
                     batch: int | None = None, shapes: Mapping[str, Sequence[int]] | None = None) -> GraphProfile:
    """Follow a signature (``serving_default`` by default) from the graph's fetches; without
    signatures, a TF2 SavedModel's entry function; else the whole graph."""
    try:
        chosen, inputs = signature_inputs(mg, signature)
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None
    if chosen is not None:
        assumed = assumed_dims(inputs, batch, dict(shapes or {}))
        outputs = [t.name for t in mg.signature_def[chosen].outputs.values() if t.name]
        if outputs:
            return analyze_graph_def(
                mg.graph_def,
                include_gradients=include_gradients,
                outputs=outputs,
                source=f"{where}, signature {chosen}",
                assumed=assumed,
            )
    assumed = assumed_dims(_placeholders(mg.graph_def), batch, dict(shapes or {}))
    entry = _entry_function(mg)
    if entry is not None:
        name, why = entry
        return analyze_function(
            name, mg.graph_def.library, include_gradients=include_gradients, source=f"{where}, {why} {name}",
            assumed=assumed,
        )
    return analyze_graph_def(mg.graph_def, include_gradients=include_gradients, source=where, assumed=assumed)


def _entry_function(mg: Any) -> tuple[str, str] | None:
    """A TF2 SavedModel saved without signatures: the root object's ``__call__``, else the
    heaviest function no other function calls (saver functions excluded)."""
    og = mg.object_graph_def
    if og.nodes:
        for child in og.nodes[0].children:
            if child.local_name != "__call__":
                continue
            node = og.nodes[child.node_id]
            kind = node.WhichOneof("kind")
            if kind == "function" and node.function.concrete_functions:
                return node.function.concrete_functions[0], "__call__"
            if kind == "bare_concrete_function":
                return node.bare_concrete_function.concrete_function_name, "__call__"
    library = mg.graph_def.library.function
    if not library:
        return None
    called: set[str] = set()
    for holder in [mg.graph_def.node] + [f.node_def for f in library]:
        for node in holder:
            called.add(node.op)
            for value in node.attr.values():
                if value.HasField("func"):
                    called.add(value.func.name)
                elif value.HasField("list"):
                    called.update(f.name for f in value.list.func)
    roots = [
        f.signature.name
        for f in library
        if f.signature.name not in called and not _SAVER_FUNCTION.match(f.signature.name)
    ]
    if not roots:
        return None
    if len(roots) == 1:
        return roots[0], "entry function"
    best = max(roots, key=lambda r: (lambda p: (p.heavy_ops, p.depth))(analyze_function(r, library)))
    log.info("no signature and no __call__: analysing the heaviest of %d entry functions, %s", len(roots), best)
    return best, "heaviest entry function"


def serving_meta_graph(sm: Any) -> Any:
    """The MetaGraph a server loads: the one tagged "serve", else the first."""
    return next((m for m in sm.meta_graphs if "serve" in m.meta_info_def.tags), sm.meta_graphs[0])


def _from_saved_model_proto(sm: Any, signature: str | None, where: str, include_gradients: bool,
                            batch: int | None = None, shapes: Mapping[str, Sequence[int]] | None = None) -> GraphProfile:
    if not sm.meta_graphs:
        raise ValueError(f"corrupt SavedModel protobuf {where}: it holds no MetaGraph")
    return _from_meta_graph(serving_meta_graph(sm), signature, where, include_gradients, batch, shapes)


def read_saved_model(path: str) -> Any:
    """Parse ``saved_model.pb`` (or ``.pbtxt``) of a SavedModel directory, or such a file,
    with the protobuf classes only."""
    if os.path.isdir(path):
        pb, pbtxt = os.path.join(path, "saved_model.pb"), os.path.join(path, "saved_model.pbtxt")
        if os.path.isfile(pb):
            file = pb
        elif os.path.isfile(pbtxt):
            file = pbtxt
        else:
            raise ValueError(f"{path} is not a SavedModel directory: it has no saved_model.pb/saved_model.pbtxt")
    else:
        file = path
    from tensorflow.core.protobuf import saved_model_pb2

    sm = saved_model_pb2.SavedModel()
    try:
        _parse_proto(file, sm, text=file.endswith(".pbtxt"))
    except ValueError as exc:
        raise ValueError(f"corrupt SavedModel protobuf {file}: {exc}") from None
    if not sm.meta_graphs:
        raise ValueError(f"corrupt SavedModel protobuf {file}: it holds no MetaGraph")
    return sm


def _parse_proto(path: str, proto: Any, text: bool) -> None:
    """Fill ``proto`` from a binary or text protobuf file; ValueError naming what is wrong."""
    from google.protobuf import message, text_format

    try:
        if text:
            with open(path, encoding="utf-8") as f:
                text_format.Parse(f.read(), proto)
        else:
            with open(path, "rb") as f:
                proto.ParseFromString(f.read())
    except (message.DecodeError, text_format.ParseError, UnicodeDecodeError) as exc:
        raise ValueError(str(exc)) from None


def _read_graph_file(path: str) -> Any:
    """A frozen GraphDef (.pb binary, .pbtxt text), or a MetaGraphDef file."""
    from tensorflow.core.framework import graph_pb2
    from tensorflow.core.protobuf import meta_graph_pb2

    text = path.endswith((".pbtxt", ".txt"))
    errors = []
    for cls in (graph_pb2.GraphDef, meta_graph_pb2.MetaGraphDef):
        proto = cls()
        try:
            _parse_proto(path, proto, text)
        except ValueError as exc:
            errors.append(f"{cls.__name__}: {exc}")
            continue
        nodes = proto.node if cls is graph_pb2.GraphDef else proto.graph_def.node
        if len(nodes):
            return proto
        errors.append(f"{cls.__name__}: no nodes")
    raise ValueError(f"{path} is not a GraphDef, MetaGraphDef or SavedModel file ({'; '.join(errors)})")


# --- paths and model names ----------------------------------------------------------------
def _from_keras_file(path: str, include_gradients: bool, batch: int | None,
                     shapes: Mapping[str, Sequence[int]] | None) -> GraphProfile:
    """A .keras file: the model is rebuilt (a zip of config and weights holds no graph), so this
    starts TensorFlow's runtime; enable() does it in a child process when the pools are still open."""
    import zipfile

    if not zipfile.is_zipfile(path):
        raise ValueError(f"{path} is not a Keras archive (a .keras file is a zip of config.json and weights)")
    import keras

    try:
        model = keras.models.load_model(path, compile=False)
    except Exception as exc:  # Keras raises many types for a broken archive
        raise ValueError(f"cannot load the Keras model {path}: {exc}") from None
    profile = _from_keras(model, None, include_gradients, batch, shapes)
    return dataclasses.replace(profile, source=f"{profile.source} from {path}")


def _from_path_or_name(
    s: str, include_gradients: bool, signature: str | None, mode: str, size: str,
    batch: int | None = None, shapes: Mapping[str, Sequence[int]] | None = None,
) -> GraphProfile:
    path = os.path.expanduser(s)
    if os.path.isdir(path) or (
        os.path.isfile(path) and os.path.basename(path) in ("saved_model.pb", "saved_model.pbtxt")
    ):
        sm = read_saved_model(path)
        return _from_saved_model_proto(sm, signature, f"SavedModel {s}", include_gradients, batch, shapes)
    if os.path.isfile(path) and path.endswith(".keras"):
        return _from_keras_file(path, include_gradients, batch, shapes)
    if os.path.isfile(path):
        proto = _read_graph_file(path)
        profile = analyze(proto, include_gradients=include_gradients, signature=signature, batch=batch,
                          input_shapes=shapes)
        return dataclasses.replace(profile, source=f"{profile.source} from {s}")
    if not looks_like_model(s):
        profile = _from_name(s, mode, size, include_gradients, batch)
        if profile is not None:
            return profile
        raise FileNotFoundError(named.not_a_model(s))
    raise FileNotFoundError(f"no such file or directory: {s!r}")


def _from_name(name: str, mode: str, size: str, include_gradients: bool,
               batch: int | None = None) -> GraphProfile | None:
    """A registered model name's graph (see named.py: ``import tf_autopar_workloads`` registers the
    bundled workloads), or None when no provider knows the name."""
    provider = named.find(name)
    if provider is None:
        return None
    graph_def = provider.graph_def(name, mode=mode, size=size, batch=batch)
    profile = analyze(graph_def, include_gradients=include_gradients)
    return dataclasses.replace(profile, source=f"workload {name} ({mode}, {size})")

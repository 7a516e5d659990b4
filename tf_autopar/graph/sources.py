"""Any supported object, file or model name -> a ``Source``: the GraphDef to analyse and what its
unknown dimensions are read as. No analysis here (analysis.py).

TensorFlow is imported only when the object is a TensorFlow object (which means TF is
already imported) or when a file must be parsed with TF's protobuf classes (protobufs.py).
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from tf_autopar._model_path import looks_like_model
from tf_autopar.graph import named
from tf_autopar.graph._gc import paused_gc
from tf_autopar.graph.dims import Assumed, assumed_dims, describe_assumptions
from tf_autopar.graph.live_graphs import (
    input_dims,
    load_keras_file,
    structure_graph_def,
    trace_keras,
    trace_tf_function,
)
from tf_autopar.graph.protobufs import (
    EntryFunctions,
    entry_functions,
    placeholders,
    read_graph_file,
    read_saved_model,
    serving_meta_graph,
    signature_inputs,
)

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

Shapes = Mapping[str, Sequence[int]]
_PROTOBUFS = ("tensorflow.GraphDef", "tensorflow.MetaGraphDef", "tensorflow.SavedModel")


@dataclass(frozen=True)
class Source:
    """What one analysis reads: the nodes of ``graph_def`` (all, or what a run fetching
    ``outputs`` executes) or an entry function of its library."""

    graph_def: Any
    label: str = ""  # the profile's source; "" = "GraphDef (N nodes)"
    assumed: Assumed | None = None  # what the analysis reads unknown dimensions as
    outputs: tuple[str, ...] | None = None  # a signature's fetches
    entry: EntryFunctions | None = None  # analyse this library function instead of the nodes
    # a live graph's heavy ops carry their work, computed under these assumptions (live_graphs.py);
    # None: the analysis reads the shapes itself and says what it assumed
    assumptions: tuple[str, ...] | None = None
    suffix: str = ""  # appended to the profile's source (" from PATH")


def source_of(
    obj: Any,
    *,
    signature: str | None = None,
    input_signature: Any = None,
    workload_mode: str = "infer",
    workload_size: str = "tiny",
    batch: int | None = None,
    input_shapes: Shapes | None = None,
) -> Source:
    """The Source of ``obj`` (see ``analyze`` for the arguments); TypeError for an unsupported object."""
    shapes = dict(input_shapes or {})
    if isinstance(obj, (str, os.PathLike)):
        return _from_path_or_name(os.fspath(obj), signature, workload_mode, workload_size, batch, shapes)
    full_name = getattr(getattr(obj, "DESCRIPTOR", None), "full_name", None)
    if full_name in _PROTOBUFS:
        with paused_gc():  # the first walk over the nodes creates a Python object per node
            if full_name == "tensorflow.GraphDef":
                return Source(obj, assumed=assumed_dims(placeholders(obj), batch, shapes))
            if full_name == "tensorflow.MetaGraphDef":
                return _from_meta_graph(obj, signature, "MetaGraphDef", batch, shapes)
            return _from_saved_model_proto(obj, signature, "SavedModel protobuf", batch, shapes)
    module = type(obj).__module__ or ""
    if module.startswith(("keras", "tf_keras")) and hasattr(obj, "make_predict_function"):
        return _from_keras(obj, input_signature, batch, shapes)
    if module.startswith("tensorflow"):
        if hasattr(obj, "function_def") and hasattr(obj, "graph"):  # ConcreteFunction
            return _from_live_graph(obj.graph, f"ConcreteFunction {obj.name}", batch, shapes)
        if hasattr(obj, "get_concrete_function"):  # tf.function
            graph, name = trace_tf_function(obj, input_signature)
            return _from_live_graph(graph, f"tf.function {name}", batch, shapes)
        if hasattr(obj, "as_graph_def"):  # tf.Graph (and FuncGraph)
            return _from_live_graph(obj, f"tf.Graph ({type(obj).__name__})", batch, shapes)
    raise TypeError(
        f"cannot analyse an object of type {type(obj).__module__}.{type(obj).__qualname__}; "
        f"supported: {', '.join(SUPPORTED)}"
    )


# --- TensorFlow / Keras objects ---------------------------------------------------------
def _from_live_graph(
    graph: Any, label: str, batch: int | None, shapes: Shapes, inputs: Mapping[str, Any] | None = None
) -> Source:
    """A live graph (tf.Graph, a function's FuncGraph): work from its ops' static shapes, unknown
    dimensions read as assumed (inputs: name -> dims, for ``--input-shape`` checks)."""
    assumed = assumed_dims(dict(input_dims(graph) if inputs is None else inputs), batch, dict(shapes))
    used: set[str] = set()
    graph_def = structure_graph_def(graph, assumed, used)
    return Source(graph_def, label, assumptions=describe_assumptions(assumed, used))


def _from_keras(model: Any, input_signature: Any, batch: int | None, shapes: Shapes) -> Source:
    graph, label, inputs = trace_keras(model, input_signature)
    return _from_live_graph(graph, label, batch, shapes, inputs)


# --- protobufs ----------------------------------------------------------------------------
def _from_meta_graph(mg: Any, signature: str | None, where: str, batch: int | None, shapes: Shapes) -> Source:
    """Follow a signature (``serving_default`` by default) from the graph's fetches; without
    signatures, a TF2 SavedModel's entry function; else the whole graph."""
    try:
        chosen, inputs = signature_inputs(mg, signature)
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None
    if chosen is not None:
        assumed = assumed_dims(inputs, batch, dict(shapes))
        outputs = tuple(t.name for t in mg.signature_def[chosen].outputs.values() if t.name)
        if outputs:
            return Source(mg.graph_def, f"{where}, signature {chosen}", assumed, outputs=outputs)
    assumed = assumed_dims(placeholders(mg.graph_def), batch, dict(shapes))
    return Source(mg.graph_def, where, assumed, entry=entry_functions(mg))


def _from_saved_model_proto(sm: Any, signature: str | None, where: str, batch: int | None, shapes: Shapes) -> Source:
    if not sm.meta_graphs:
        raise ValueError(f"corrupt SavedModel protobuf {where}: it holds no MetaGraph")
    return _from_meta_graph(serving_meta_graph(sm), signature, where, batch, shapes)


# --- paths and model names ----------------------------------------------------------------
def _from_path_or_name(
    s: str, signature: str | None, mode: str, size: str, batch: int | None, shapes: Shapes
) -> Source:
    path = os.path.expanduser(s)
    if os.path.isdir(path) or (
        os.path.isfile(path) and os.path.basename(path) in ("saved_model.pb", "saved_model.pbtxt")
    ):
        return _from_saved_model_proto(read_saved_model(path), signature, f"SavedModel {s}", batch, shapes)
    if os.path.isfile(path) and path.endswith(".keras"):
        found = _from_keras(load_keras_file(path), None, batch, shapes)
        return dataclasses.replace(found, suffix=f" from {path}")
    if os.path.isfile(path):
        found = source_of(read_graph_file(path), signature=signature, batch=batch, input_shapes=shapes)
        return dataclasses.replace(found, suffix=f" from {s}")
    if not looks_like_model(s):
        provider = named.find(s)  # see named.py: ``import tf_autopar_workloads`` registers the bundled workloads
        if provider is None:
            raise FileNotFoundError(named.not_a_model(s))
        graph_def = provider.graph_def(s, mode=mode, size=size, batch=batch)
        return dataclasses.replace(source_of(graph_def), label=f"workload {s} ({mode}, {size})")
    raise FileNotFoundError(f"no such file or directory: {s!r}")

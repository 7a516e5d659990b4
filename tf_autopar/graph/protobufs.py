"""Model protobufs: SavedModel directories and files, GraphDef/MetaGraphDef files, signatures.

Reading a SavedModel uses ``tensorflow.core.protobuf.saved_model_pb2`` only: that imports the
``tensorflow`` package but creates no op and no context, so the runtime (and its thread
pools) is still unstarted afterwards and ``tf.config.threading`` can still be set. That
is what lets a plan be made before TensorFlow fixes its pools (tested).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any

from tf_autopar.graph.dims import proto_dims

_SAVER_FUNCTION = re.compile(r"^__inference__traced_(save|restore)_\d+$")


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


def placeholders(graph_def: Any) -> dict[str, tuple[int, ...] | None]:
    """A GraphDef's feeds (Placeholder nodes) as name -> dims."""
    return {
        n.name: (proto_dims(n.attr["shape"].shape) if "shape" in n.attr else None)
        for n in graph_def.node
        if n.op == "Placeholder"
    }


@dataclass(frozen=True)
class EntryFunctions:
    """Where a MetaGraph without signatures starts: one function, or the candidates of which the
    analysis takes the heaviest. ``why`` names the choice in the profile's source."""

    names: tuple[str, ...]
    why: str


def entry_functions(mg: Any) -> EntryFunctions | None:
    """A TF2 SavedModel saved without signatures: the root object's ``__call__``, else the
    functions no other function calls (saver functions excluded); None when there are none."""
    og = mg.object_graph_def
    if og.nodes:
        for child in og.nodes[0].children:
            if child.local_name != "__call__":
                continue
            node = og.nodes[child.node_id]
            kind = node.WhichOneof("kind")
            if kind == "function" and node.function.concrete_functions:
                return EntryFunctions((node.function.concrete_functions[0],), "__call__")
            if kind == "bare_concrete_function":
                return EntryFunctions((node.bare_concrete_function.concrete_function_name,), "__call__")
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
    roots = tuple(
        f.signature.name
        for f in library
        if f.signature.name not in called and not _SAVER_FUNCTION.match(f.signature.name)
    )
    if not roots:
        return None
    return EntryFunctions(roots, "entry function" if len(roots) == 1 else "heaviest entry function")


def serving_meta_graph(sm: Any) -> Any:
    """The MetaGraph a server loads: the one tagged "serve", else the first."""
    return next((m for m in sm.meta_graphs if "serve" in m.meta_info_def.tags), sm.meta_graphs[0])


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
    from google.protobuf import message, text_format  # here: ~14 ms that enable() (which imports graph) need not pay

    try:
        if text:
            with open(path, encoding="utf-8") as f:
                text_format.Parse(f.read(), proto)
        else:
            with open(path, "rb") as f:
                proto.ParseFromString(f.read())
    except (message.DecodeError, text_format.ParseError, UnicodeDecodeError) as exc:
        raise ValueError(str(exc)) from None


def read_graph_file(path: str) -> Any:
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

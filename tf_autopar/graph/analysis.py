"""The public analysis: ``analyze(obj)`` and the protobuf entry points, -> GraphProfile.

``sources.py`` turns the object into a GraphDef and what its unknown dimensions are read as;
``reduction.py`` reduces it to heavy-op levels; this module picks the entry point, runs the
reduction with the garbage collector paused, and fills the profile.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
from typing import Any, Iterable, Mapping, Sequence

from tf_autopar.graph._gc import paused_gc
from tf_autopar.graph.dims import Assumed, describe_assumptions
from tf_autopar.graph.profile import GraphProfile
from tf_autopar.graph.reduction import WHILE_OPS, Reducer, Summary, function_map, prune_to_outputs
from tf_autopar.graph.sources import Source, source_of
from tf_autopar.graph.width import avg_width, max_width
from tf_autopar.graph.work import total_work, typical_work

log = logging.getLogger("tf_autopar.graph")


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
    source = source_of(
        obj,
        signature=signature,
        input_signature=input_signature,
        workload_mode=workload_mode,
        workload_size=workload_size,
        batch=batch,
        input_shapes=input_shapes,
    )
    return analyze_source(source, include_gradients=include_gradients)


def analyze_source(source: Source, *, include_gradients: bool = True) -> GraphProfile:
    """Profile what a Source names: its entry function (the heaviest of several candidates), or
    its GraphDef's nodes."""
    if source.entry is not None:
        library = source.graph_def.library
        names = source.entry.names
        name = names[0] if len(names) == 1 else _heaviest_function(names, library)
        profile = analyze_function(
            name,
            library,
            include_gradients=include_gradients,
            source=f"{source.label}, {source.entry.why} {name}",
            assumed=source.assumed,
        )
    else:
        profile = analyze_graph_def(
            source.graph_def,
            include_gradients=include_gradients,
            outputs=source.outputs,
            source=source.label,
            assumed=source.assumed,
        )
    changes: dict[str, Any] = {}
    if source.assumptions is not None:
        changes["assumptions"] = source.assumptions
    if source.suffix:
        changes["source"] = profile.source + source.suffix
    return dataclasses.replace(profile, **changes) if changes else profile


def _heaviest_function(names: Sequence[str], library: Any) -> str:
    best = max(names, key=lambda r: (lambda p: (p.heavy_ops, p.depth))(analyze_function(r, library)))
    log.info("no signature and no __call__: analysing the heaviest of %d entry functions, %s", len(names), best)
    return best


def analyze_graph_def(
    graph_def: Any,
    library: Any = None,
    *,
    include_gradients: bool = True,
    outputs: Iterable[str] | None = None,
    source: str = "",
    assumed: Assumed | None = None,
) -> GraphProfile:
    """Profile a GraphDef (nodes + function library). ``library`` defaults to
    ``graph_def.library``; ``outputs`` (tensor names) restricts the analysis to what a run
    fetching them executes (used for SavedModel signatures); ``assumed``: what unknown
    dimensions are read as when estimating each op's work (work.py)."""
    if not hasattr(graph_def, "node"):
        raise TypeError(f"expected a GraphDef, got {type(graph_def).__name__}")
    with paused_gc():  # from the first read of the nodes: that creates a Python object per node
        lib = function_map(graph_def.library if library is None and hasattr(graph_def, "library") else library)
        nodes: Sequence[Any] = graph_def.node
        if outputs is not None:
            nodes = prune_to_outputs(list(nodes), outputs)
        else:
            nodes = list(nodes)
        reducer = Reducer(lib, include_gradients, assumed)
        summary = reducer.body(nodes, function_format=False, grad_ctx=False)
        return _profile(reducer, summary, source or f"GraphDef ({len(nodes)} nodes)")


def analyze_function(
    name: str, library: Any, *, include_gradients: bool = True, source: str = "", assumed: Assumed | None = None
) -> GraphProfile:
    """Profile one function of a library as the entry point (its arguments at level 0)."""
    with paused_gc():
        lib = function_map(library)
        if name not in lib:
            raise ValueError(f"function {name!r} is not in the function library")
        reducer = Reducer(lib, include_gradients, assumed)
        summary = reducer.function(name, grad_ctx=False)
        assert summary is not None
        profile = _profile(reducer, summary, source or f"function {name}")
    # count the functions descended into, not the entry itself (as for a GraphDef)
    return dataclasses.replace(profile, functions=len(summary.functions - {name}))


def _profile(reducer: Reducer, summary: Summary, source: str) -> GraphProfile:
    if summary.back_edges:
        log.info("%s: dropped %d loop back edge(s)", source, summary.back_edges)
    digest = hashlib.sha256()
    for line in sorted(reducer.fingerprint_lines):
        digest.update(line.encode("utf-8", "surrogateescape"))
        digest.update(b"\n")
    heavy, depth = summary.heavy, summary.depth
    return GraphProfile(
        heavy_ops=heavy,
        depth=depth,
        avg_width=avg_width(heavy, depth),
        max_width=max_width(summary.level_widths),
        level_widths=summary.level_widths,
        op_types=dict(summary.op_types.most_common()),
        heavy_op_types=dict(summary.heavy_types.most_common()),
        nodes=summary.nodes,
        functions=len(summary.functions),
        training=summary.training,
        uses_tf_data=summary.tf_data,
        loops=any(op in WHILE_OPS for op in summary.op_types),
        typical_op_work=typical_work([(w, runs) for w, runs, _ in summary.works]),
        lookups=sum(1 for _, _, lookup in summary.works if lookup),
        lookup_work=total_work((w, runs) for w, runs, lookup in summary.works if lookup),
        contraction_work=total_work((w, runs) for w, runs, lookup in summary.works if not lookup),
        assumptions=describe_assumptions(reducer.assumed, reducer.assumed_used),
        source=source,
        fingerprint=digest.hexdigest(),
    )

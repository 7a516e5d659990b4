"""A concrete function's variables folded into constants: the GraphDef a session runs, and the
names of its input and output tensors.

Why not ``convert_variables_to_constants_v2`` as it stands: after folding the variables it
imports the result into a new function (``_construct_concrete_function``), which the fast path
threw away at once, serializing the function's graph and importing it into a graph of its own.
Those imports hold the interpreter lock, and every request of the serving process waits behind
them: a BERT-style encoder's freeze took 1.68 s, 1.13 s of it with the lock held, against 0.50 s
and 0.36 s this way (benchmarks/freeze_lock.py; 2.96x faster over fifteen models, the same
graphs). So the converter's own two steps are called (its data, then
``_replace_variables_by_constants``), and the GraphDef pruned to what the outputs need, as the
function's import would have. A graph with control flow (functions in its library, or loops
lowered to TF1's Switch/Merge) takes the converter's whole way, as before, and so does a
TensorFlow whose converter lacks those steps (they are private).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Iterator

from tf_autopar.runtime import watch

#: TF1 control flow, as ``convert_variables_to_constants_v2`` lowers While and If by default
LOWERED_CONTROL_FLOW = frozenset({"Enter", "Exit", "Switch", "Merge", "NextIteration", "LoopCond"})


@dataclass
class Frozen:
    """The frozen GraphDef and its tensor names; ``direct``: made without the converter's function."""

    graph_def: Any
    inputs: list[str]
    outputs: list[str]
    direct: bool


def freeze(concrete: Any, lower_control_flow: bool = True) -> Frozen:
    """``concrete`` with its variables as constants (see the module docstring)."""
    with _variables_readable(concrete):
        steps = _converter_steps()
        if steps is None:
            return _via_function(concrete, lower_control_flow)
        data_class, replace, construct = steps
        try:
            data = data_class(func=concrete, lower_control_flow=lower_control_flow, aggressive_inlining=False)
            graph_def, converted = replace(converter_data=data)
        except (TypeError, ValueError):  # private steps that take or give other things in another TensorFlow
            return _via_function(concrete, lower_control_flow)
        del data  # the variables' values, already copied into the GraphDef
        if len(graph_def.library.function) or any(n.op in LOWERED_CONTROL_FLOW for n in graph_def.node):
            # functions the sessions must find in the graph's library, or lowered loops whose
            # unused inputs the function's import rewires: the converter's way, as before
            return _from_function(construct(concrete, graph_def, converted), direct=False)
        captures = concrete.graph.internal_captures
        folded = {id(captures[i]) for i in converted}
        inputs = [t.name for t in concrete.inputs if id(t) not in folded]
        outputs = [t.name for t in concrete.outputs]
        prune(graph_def, keep=inputs + outputs)
        return Frozen(graph_def, inputs, outputs, direct=True)


def prune(graph_def: Any, keep: list[str]) -> int:
    """Drop, in place, the nodes none of ``keep`` (tensor or node names) depends on: what the
    converter's import into a function drops (a shape read of a folded variable, a dead branch).
    How many went. In place: the constants are not copied again."""
    by_name = {n.name: n for n in graph_def.node}
    needed: set[str] = set()
    todo = [name.split(":")[0] for name in keep]
    while todo:
        name = todo.pop()
        if name in needed or name not in by_name:
            continue
        needed.add(name)
        todo.extend(i.lstrip("^").split(":")[0] for i in by_name[name].input)
    dropped = [i for i, n in enumerate(graph_def.node) if n.name not in needed]
    for i in reversed(dropped):
        del graph_def.node[i]
    return len(dropped)


def _converter_steps() -> tuple[Any, Any, Any] | None:
    """The converter's data class, its replacing step and its function import; None when this
    TensorFlow has not all three."""
    try:
        from tensorflow.python.framework import convert_to_constants as c2c
    except ImportError:
        return None
    names = ("_FunctionConverterDataInEager", "_replace_variables_by_constants", "_construct_concrete_function")
    steps = tuple(getattr(c2c, n, None) for n in names)
    return steps if all(callable(s) for s in steps) else None  # type: ignore[return-value]


def _via_function(concrete: Any, lower_control_flow: bool) -> Frozen:
    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

    return _from_function(
        convert_variables_to_constants_v2(concrete, lower_control_flow=lower_control_flow), direct=False
    )


def _from_function(func: Any, direct: bool) -> Frozen:
    return Frozen(func.graph.as_graph_def(), [t.name for t in func.inputs], [t.name for t in func.outputs], direct)


@contextlib.contextmanager
def _variables_readable(concrete: Any) -> Iterator[None]:
    """The converter finds variables through the function graph's weak references to them.

    ``sig = tf.saved_model.load(path).signatures["serving_default"]`` keeps working (its captured
    handles hold the variables' resources) but the variable objects were collected. Then each
    captured resource handle the graph no longer knows stands in for its variable, read from
    the handle, for the conversion only."""
    graph = concrete.graph
    weak = list(getattr(graph, "_weak_variables", ()))
    if all(ref() is not None for ref in weak):
        yield
        return
    live = {id(v.handle) for v in (ref() for ref in weak) if v is not None}
    stand_ins = [_HandleValue(h) for h in watch.resource_handles(concrete) if id(h) not in live]
    graph.variables = [v for v in (ref() for ref in weak) if v is not None] + stand_ins
    try:
        yield
    finally:
        graph._weak_variables = weak  # as it was (the stand-ins die with this call)


class _HandleValue:
    """What the converter needs of a variable (``handle``, ``numpy()``), read from the handle itself."""

    def __init__(self, handle: Any) -> None:
        from tensorflow.python.ops import resource_variable_ops

        self.handle = handle
        self.dtype = resource_variable_ops.get_eager_safe_handle_data(handle).shape_and_type[0].dtype

    def numpy(self) -> Any:
        from tensorflow.python.ops import gen_resource_variable_ops

        return gen_resource_variable_ops.read_variable_op(self.handle, self.dtype).numpy()

"""runtime/freezing.py: the converter's own steps, without its function's import, give the graph
the converter's whole way gives (names, nodes, outputs), and control flow takes the whole way."""

from __future__ import annotations

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from tf_autopar.runtime import freezing  # noqa: E402
from tf_autopar.runtime.frozen import FrozenGraph  # noqa: E402


def _run(graph_def, inputs: list[str], outputs: list[str], feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    graph = tf.Graph()
    with graph.as_default():
        tf.graph_util.import_graph_def(graph_def, name="")
    with tf.compat.v1.Session(graph=graph) as sess:
        return sess.run(outputs, {name: feeds[name.split(":")[0]] for name in inputs})


def _nodes(graph_def) -> list[tuple[str, str]]:
    # TensorFlow's import of lowered loops adds unconnected placeholders, a different number each time
    return sorted((n.name, n.op) for n in graph_def.node if not n.name.startswith("unused_control_flow_input"))


def _same_as_the_converter(concrete, feeds: dict[str, np.ndarray]) -> freezing.Frozen:
    ours = freezing.freeze(concrete)
    theirs = freezing._via_function(concrete, True)
    assert (ours.inputs, ours.outputs) == (theirs.inputs, theirs.outputs)
    assert _nodes(ours.graph_def) == _nodes(theirs.graph_def)
    for a, b in zip(
        _run(ours.graph_def, ours.inputs, ours.outputs, feeds),
        _run(theirs.graph_def, theirs.inputs, theirs.outputs, feeds),
    ):
        np.testing.assert_array_equal(a, b)
    return ours


def _dense_model():
    rng = np.random.default_rng(0)
    w = tf.Variable(rng.standard_normal((8, 4)).astype(np.float32))
    b = tf.Variable(rng.standard_normal(4).astype(np.float32))
    scale = tf.constant(0.5)  # a captured tensor, not a variable: folded too

    @tf.function(input_signature=[tf.TensorSpec([None, 8], tf.float32), tf.TensorSpec([None], tf.int32)])
    def f(x, unused_ids):
        return {"y": tf.nn.relu(tf.matmul(x, w) + b) * scale, "shape": tf.shape(w)}

    return f, (w, b)


def test_variables_fold_without_the_function_and_match_the_converter():
    f, keep = _dense_model()
    feeds = {"x": np.ones((3, 8), np.float32), "unused_ids": np.zeros(3, np.int32)}
    frozen = _same_as_the_converter(f.get_concrete_function(), feeds)
    assert frozen.direct
    assert [n.split(":")[0] for n in frozen.inputs] == ["x", "unused_ids"]  # the unused input stays feedable
    assert {n.name for n in frozen.graph_def.node if n.op == "Placeholder"} == {"x", "unused_ids"}
    assert not {n.op for n in frozen.graph_def.node} & {"VarHandleOp", "ReadVariableOp"}


def test_control_flow_takes_the_converters_whole_way():
    w = tf.Variable(np.full((4, 4), 0.1, np.float32))

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32)])
    def loop(x):
        i = tf.constant(0)
        _, y = tf.while_loop(lambda i, y: i < 3, lambda i, y: (i + 1, tf.matmul(y, w)), [i, x])
        return tf.cond(tf.reduce_sum(y) > 0, lambda: y, lambda: -y)

    frozen = _same_as_the_converter(loop.get_concrete_function(), {"x": np.ones((2, 4), np.float32)})
    assert not frozen.direct
    functional = freezing.freeze(loop.get_concrete_function(), lower_control_flow=False)
    assert not functional.direct and any(n.op in ("While", "StatelessWhile") for n in functional.graph_def.node)


def _changed(**kwargs):
    raise TypeError("__init__() got an unexpected keyword argument 'aggressive_inlining'")


@pytest.mark.parametrize("steps", ["missing", "changed"])
def test_without_the_converters_steps_the_whole_way_serves(monkeypatch, steps):
    f, keep = _dense_model()
    real = freezing._converter_steps()
    monkeypatch.setattr(freezing, "_converter_steps", lambda: None if steps == "missing" else (_changed, *real[1:]))
    frozen = freezing.freeze(f.get_concrete_function())
    assert not frozen.direct
    x, ids = np.ones((1, 8), np.float32), np.zeros(1, np.int32)
    out = _run(frozen.graph_def, frozen.inputs, frozen.outputs, {"x": x, "unused_ids": ids})
    for a, b in zip(out, tf.nest.flatten(f(x, ids))):
        np.testing.assert_array_equal(a, b.numpy())


def test_the_frozen_graph_serves_the_functions_outputs_with_shapes_for_the_analysis():
    f, keep = _dense_model()
    frozen = FrozenGraph(f.get_concrete_function())
    x = np.arange(16, dtype=np.float32).reshape(2, 8)
    with tf.compat.v1.Session(graph=frozen.graph) as sess:
        got = sess.run(frozen.outputs, {frozen.inputs[0]: x, frozen.inputs[1]: np.zeros(2, np.int32)})
    for a, b in zip(got, tf.nest.flatten(f(x, np.zeros(2, np.int32)))):
        np.testing.assert_array_equal(a, b.numpy())
    matmul = next(n for n in frozen.graph_def.node if n.op == "MatMul")
    assert [d.size for d in matmul.attr["_output_shapes"].list.shape[0].dim] == [-1, 4]


def test_prune_keeps_what_the_outputs_and_inputs_need_in_place():
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None], name="x")
        tf.compat.v1.placeholder(tf.float32, [None], name="unused")
        y = tf.identity(x * 2.0, name="y")
        tf.identity(x + 1.0, name="dead")
        with tf.control_dependencies([tf.no_op(name="guard")]):
            tf.identity(y, name="z")
    graph_def = graph.as_graph_def()
    before = {n.name for n in graph_def.node}
    dropped = freezing.prune(graph_def, keep=["x:0", "unused:0", "z:0"])
    kept = {n.name for n in graph_def.node}
    assert before - kept == {"dead", "add", "add/y"} and dropped == 3
    assert {"x", "unused", "y", "z", "guard"} <= kept  # a control input is needed too

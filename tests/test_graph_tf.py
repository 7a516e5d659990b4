"""analyze() on real TensorFlow / Keras 3 objects, with known answers (small models)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.tf

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

import numpy as np  # noqa: E402

from tf_autopar.graph import analyze  # noqa: E402


def test_tf1_graph_with_parallel_matmul_chains():
    k, length = 3, 4
    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, (8, 8))
        outs = []
        for c in range(k):
            y = x
            for i in range(length):
                w = tf.constant(1.0, shape=(8, 8), name=f"w{c}_{i}")
                y = tf.nn.relu(tf.matmul(y, w))
            outs.append(y)
        tf.add_n(outs)
    p = analyze(g)
    assert (p.heavy_ops, p.depth, p.avg_width, p.max_width) == (k * length, length, k, k)
    assert p.heavy_op_types == {"MatMul": k * length} and not p.training


def inception_model():
    inp = keras.Input((16, 16, 8))
    stem = keras.layers.Conv2D(8, 3, padding="same")(inp)
    b1 = keras.layers.Conv2D(4, 1)(stem)
    b2 = keras.layers.Conv2D(4, 3, padding="same")(keras.layers.Conv2D(4, 1)(stem))
    b3 = keras.layers.Conv2D(4, 1)(stem)
    for _ in range(2):
        b3 = keras.layers.Conv2D(4, 3, padding="same")(b3)
    b4 = keras.layers.Conv2D(4, 1)(keras.layers.MaxPooling2D(3, 1, padding="same")(stem))
    x = keras.layers.Concatenate()([b1, b2, b3, b4])
    x = keras.layers.Flatten()(keras.layers.GlobalAveragePooling2D()(x))
    return keras.Model(inp, keras.layers.Dense(10)(x), name="inception")


def test_keras_inception_module_predict_path():
    p = analyze(inception_model())
    assert "predict" in p.source
    # stem, branches of 1, 2, 3 and 1 convs, then the dense head
    assert (p.heavy_ops, p.depth) == (9, 5)
    assert p.level_widths == (1, 4, 2, 1, 1)
    assert (p.avg_width, p.max_width) == (1, 4)
    assert p.heavy_op_types == {"Conv2D": 8, "MatMul": 1}


def test_keras_residual_blocks():
    inp = keras.Input((8, 8, 4))
    x = keras.layers.Conv2D(4, 3, padding="same")(inp)
    for _ in range(3):
        y = keras.layers.Conv2D(4, 3, padding="same", activation="relu")(x)
        y = keras.layers.BatchNormalization()(keras.layers.Conv2D(4, 3, padding="same")(y))
        x = keras.layers.ReLU()(keras.layers.Add()([x, y]))
    p = analyze(keras.Model(inp, x))
    assert (p.heavy_ops, p.depth, p.avg_width, p.max_width) == (7, 7, 1, 1)


def test_embedding_heavy_recommender():
    users, items = keras.Input((1,), dtype="int32"), keras.Input((1,), dtype="int32")
    u = keras.layers.Flatten()(keras.layers.Embedding(50, 8)(users))
    v = keras.layers.Flatten()(keras.layers.Embedding(60, 8)(items))
    u2 = keras.layers.Flatten()(keras.layers.Embedding(50, 8)(users))
    v2 = keras.layers.Flatten()(keras.layers.Embedding(60, 8)(items))
    gmf = keras.layers.Multiply()([u, v])
    mlp = keras.layers.Dense(8)(keras.layers.Dense(16)(keras.layers.Concatenate()([u2, v2])))
    out = keras.layers.Dense(1)(keras.layers.Concatenate()([gmf, mlp]))
    model = keras.Model([users, items], out)
    # at batch 1 (the default reading of the None batch) each look-up reads one 8-wide row: light
    assert analyze(model).heavy_op_types == {"MatMul": 3}
    p = analyze(model, batch=1024)  # 1024 rows of 8 per look-up: heavy
    # 4 look-ups at level 1, MLP dense x2, output dense
    assert p.heavy_op_types == {"GatherV2": 4, "MatMul": 3}
    assert (p.heavy_ops, p.depth, p.level_widths) == (7, 4, (4, 1, 1, 1))
    assert p.avg_width == 1 and p.max_width == 4


def test_tf_function_with_while_loop():
    w = tf.Variable(tf.eye(4))

    @tf.function(input_signature=[tf.TensorSpec((None, 4))])
    def f(x):
        def body(i, y):
            return i + 1, tf.matmul(tf.matmul(y, w), w)

        _, y = tf.while_loop(lambda i, y: i < 5, body, (tf.constant(0), x))
        return tf.matmul(y, w)

    p = analyze(f)
    assert p.heavy_ops == 3 and p.depth == 3  # body counted once, then the final matmul
    assert p.functions >= 2 and p.op_types["While"] == 1
    cf = f.get_concrete_function()
    assert analyze(cf).fingerprint == p.fingerprint


def test_nested_tf_functions_are_descended():
    w = tf.Variable(tf.eye(4))

    @tf.function
    def inner(x):
        return tf.matmul(tf.matmul(x, w), w)

    @tf.function(input_signature=[tf.TensorSpec((2, 4))])
    def outer(x):
        return inner(x) + inner(x * 2.0)

    p = analyze(outer)
    assert (p.heavy_ops, p.depth, p.max_width) == (4, 2, 2)


def test_training_graph_counts_backprop_ops():
    inp = keras.Input((8, 8, 3))
    x = keras.layers.Conv2D(4, 3)(keras.layers.Conv2D(4, 3)(inp))
    model = keras.Model(inp, keras.layers.Dense(2)(keras.layers.Flatten()(x)))

    @tf.function(input_signature=[tf.TensorSpec((2, 8, 8, 3)), tf.TensorSpec((2, 2))])
    def step(x, t):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((model(x, training=True) - t) ** 2)
        return tape.gradient(loss, model.trainable_variables)

    p = analyze(step)
    assert p.training
    assert p.heavy_op_types["Conv2DBackpropFilter"] == 2 and p.heavy_op_types["Conv2DBackpropInput"] >= 1
    forward = analyze(step, include_gradients=False)
    assert forward.training and (forward.heavy_ops, forward.depth) == (3, 3)
    assert p.heavy_ops > forward.heavy_ops and p.depth > forward.depth
    assert not analyze(model).training


def test_unsupported_and_untraceable_objects():
    with pytest.raises(TypeError, match=r"builtins\.int.*supported: tf\.Graph"):
        analyze(3)

    @tf.function
    def needs_args(x):
        return x

    with pytest.raises(TypeError, match="input_signature"):
        analyze(needs_args)
    with pytest.raises(ValueError, match="no known inputs"):
        analyze(keras.Sequential([keras.layers.Dense(2)]))


def test_structure_graph_def_drops_constant_payloads_not_the_analysis():
    """Sessions are analysed from structure_graph_def(): a frozen model's weights must not be
    serialised (that was 97% of session creation for VGG-19), and nothing the analysis reads
    may be lost, nested functions included."""
    from tf_autopar.graph import analyze_graph_def
    from tf_autopar.graph.live_graphs import structure_graph_def

    g = tf.Graph()
    with g.as_default():
        table = tf.constant(np.zeros((2048, 1024), np.float32))  # an 8 MB frozen embedding table
        ids = tf.compat.v1.placeholder(tf.int32, [None])
        w = tf.constant(np.ones((1024, 256), np.float32))

        @tf.function
        def head(x):
            return tf.matmul(x, tf.ones((256, 8)))

        head(tf.matmul(tf.gather(table, ids), w))
    full, lean = g.as_graph_def(), structure_graph_def(g)
    assert lean.ByteSize() * 100 < full.ByteSize()
    assert [n.name for n in lean.node] == [n.name for n in full.node]
    assert len(lean.library.function) == len(full.library.function) == 1
    a, b = analyze_graph_def(full), analyze_graph_def(lean)
    for field in (
        "heavy_ops",
        "depth",
        "avg_width",
        "max_width",
        "level_widths",
        "op_types",
        "heavy_op_types",
        "functions",
        "fingerprint",
    ):
        assert getattr(a, field) == getattr(b, field), field
    assert (b.heavy_ops, b.depth) == (3, 3)  # gather on the table -> matmul -> matmul in the function


def test_structure_graph_def_serialises_small_graphs_whole():
    """Small constants: one as_graph_def() is cheaper than the op-by-op copy, and identical."""
    from tf_autopar.graph.live_graphs import structure_graph_def

    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, 16])
        tf.nn.relu(tf.matmul(x, tf.constant(np.ones((16, 16), np.float32))))
    lean, full = structure_graph_def(g), g.as_graph_def()
    assert [(n.name, n.op, list(n.input)) for n in lean.node] == [(n.name, n.op, list(n.input)) for n in full.node]
    for a, b in zip(lean.node, full.node):  # only the heavy op gains its work
        extra = set(a.attr) - set(b.attr)
        assert extra == ({"_tf_autopar_work"} if a.op == "MatMul" else set()), a.name
        assert all(a.attr[k] == b.attr[k] for k in b.attr)


@pytest.mark.parametrize("frozen", [False, True], ids=["whole", "op-by-op"])
def test_heavy_op_work_from_a_real_graph(frozen):
    """Three matmuls of known sizes and a relu: the typical op's work is the matmul that holds
    the median multiply-add, in both ways structure_graph_def builds the GraphDef; a None
    batch leaves it unknown."""
    from tf_autopar.graph.live_graphs import structure_graph_def

    def build(batch):
        g = tf.Graph()
        with g.as_default():
            x = tf.compat.v1.placeholder(tf.float32, [batch, 64])
            big = 700 if frozen else 8  # > 4 KB of constants per op: the op-by-op copy
            pad = tf.constant(np.zeros((big, 1024), np.float32))
            a = tf.matmul(x, tf.ones((64, 128)))  # 64 x 128 MACs per row
            b = tf.matmul(a, tf.ones((128, 256)))  # 128 x 256
            c = tf.matmul(b, tf.ones((256, 32)))  # 256 x 32
            tf.nn.relu(c + tf.reduce_sum(pad))
        return g

    lean = structure_graph_def(build(4))
    assert (len(lean.node[1].attr["value"].tensor.tensor_content) == 0) == frozen  # the pad constant
    p = analyze(lean)
    assert p.heavy_ops == 3 and p.depth == 3
    # works 4*128*64 = 32768, 4*256*128 = 131072, 4*32*256 = 32768: 131072 holds the median
    assert p.typical_op_work == 131072
    assert analyze(structure_graph_def(build(None))).typical_op_work is None


def test_while_loop_work_counts_its_iterations():
    """A loop over a fixed-length sequence (Keras RNN style, maximum_iterations constant):
    its body's small matmul runs 50 times a step and outweighs one larger matmul outside."""
    w_small, w_big = tf.Variable(tf.ones((8, 8))), tf.Variable(tf.ones((8, 200)))

    @tf.function(input_signature=[tf.TensorSpec((1, 8))])
    def f(x):
        _, y = tf.while_loop(
            lambda i, y: i < 50, lambda i, y: (i + 1, tf.matmul(y, w_small)), (tf.constant(0), x), maximum_iterations=50
        )
        return tf.matmul(y, w_big)

    p = analyze(f)
    assert p.heavy_ops == 2
    assert p.typical_op_work == 64  # 50 runs x 64 MACs = 3200 > 1600 in the final 1x8x200 matmul


def test_tiny_lookups_are_not_heavy():
    """A look-up of a few rows (batch 1) is bookkeeping; at a real batch it is heavy."""
    from tf_autopar.graph.heavy_ops import MIN_LOOKUP_ELEMENTS

    table = tf.Variable(tf.ones((1000, 32)))
    w = tf.Variable(tf.ones((32, 8)))

    def profile(batch):
        @tf.function(input_signature=[tf.TensorSpec((batch,), tf.int32)])
        def f(ids):
            return tf.matmul(tf.gather(table, ids), w)

        return analyze(f)

    assert 1 * 32 < MIN_LOOKUP_ELEMENTS <= 256 * 32
    assert profile(1).heavy_op_types == {"MatMul": 1}
    assert profile(256).heavy_op_types == {"ResourceGather": 1, "MatMul": 1} or profile(256).heavy_op_types == {
        "GatherV2": 1,
        "MatMul": 1,
    }

"""The analysis gives the profiles recorded before graph/ was split by role and sped up
(tests/fixtures/graph_models.py wrote tests/fixtures/graph_profiles.json from that code), and
the live tf.Graph path agrees with the GraphDef path on the same graph."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os

import pytest

pytestmark = pytest.mark.tf

import tensorflow as tf  # noqa: E402

from tf_autopar.graph import analyze  # noqa: E402

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")


def _models():
    spec = importlib.util.spec_from_file_location("graph_models", os.path.join(FIXTURES, "graph_models.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


MODELS = _models()
with open(os.path.join(FIXTURES, "graph_profiles.json")) as _f:
    RECORDED = json.load(_f)


def test_every_model_is_recorded():
    assert sorted(RECORDED) == sorted(MODELS.MODELS)


@pytest.mark.parametrize("name", sorted(MODELS.MODELS))
def test_profile_as_recorded(name, tmp_path):
    assert MODELS.profile_of(name, str(tmp_path)) == RECORDED[name]


def _wide_graph(batch_dim):
    """Parallel MatMul chains through Reshapes with computed shapes, a gather on a table, and a
    tf.function call: every kind of shape the work estimate reads."""
    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, (batch_dim, 6, 8), name="x")
        table = tf.constant(1.0, shape=(500, 256), name="table")

        @tf.function
        def block(t):
            return tf.nn.relu(tf.matmul(t, tf.ones((8, 8))))

        outs = []
        for c in range(3):
            y = tf.reshape(x, (-1, 8), name=f"flat{c}")  # [-1, 8] or [6B, 8]: through the Reshape
            for i in range(c + 1):
                y = tf.matmul(y, tf.constant(0.5, shape=(8, 8)), name=f"mm{c}_{i}")
            outs.append(block(y))
        ids = tf.cast(tf.reduce_sum(tf.add_n(outs), axis=1), tf.int32)
        tf.gather(table, tf.clip_by_value(ids, 0, 499), name="lookup")
    return g


@pytest.mark.parametrize("batch_dim", [None, 4])
def test_live_graph_and_graph_def_agree(batch_dim):
    g = _wide_graph(batch_dim)
    live = analyze(g, batch=128)
    proto = analyze(g.as_graph_def(add_shapes=True), batch=128)
    assert live.heavy_ops == (1 + 2 + 3) + 3 + 1 and live.typical_op_work is not None
    differ = {f.name for f in dataclasses.fields(live) if getattr(live, f.name) != getattr(proto, f.name)}
    assert differ == {"source"}, {k: (getattr(live, k), getattr(proto, k)) for k in differ}

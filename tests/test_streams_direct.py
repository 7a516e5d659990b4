"""The sessions' direct run (runtime/streams.py direct_run) against Session.run, on a real session."""

from __future__ import annotations

import numpy as np
import pytest

from tf_autopar.runtime.streams import StreamPool, direct_run

pytestmark = pytest.mark.tf


def _graph():
    import tensorflow as tf

    g = tf.Graph()
    with g.as_default():
        a = tf.compat.v1.placeholder(tf.float32, [None, 3], name="a")
        ids = tf.compat.v1.placeholder(tf.int64, [None], name="ids")
        table = tf.constant(np.arange(12, dtype=np.float32).reshape(4, 3))
        tf.identity(tf.matmul(a, table, transpose_b=True) + tf.reduce_sum(tf.gather(table, ids)), name="y")
        tf.identity(tf.shape(a), name="s")
    g.finalize()
    return tf.compat.v1.Session(graph=g)


def test_direct_run_gives_session_runs_values_and_errors():
    session = _graph()
    feeds = {"a:0": np.ones((2, 3), np.float32), "ids:0": np.array([1, 3], np.int64)}
    fetches = ["y:0", "s:0"]
    direct = direct_run(session, fetches, list(feeds))
    assert direct is not None
    got, want = direct(list(feeds.values())), session.run(fetches, feeds)
    assert len(got) == 2 and all(np.array_equal(g, w) for g, w in zip(got, want))
    pool = StreamPool([session])
    assert all(np.array_equal(g, w) for g, w in zip(pool.run(fetches, feeds), want))
    import tensorflow as tf

    with pytest.raises(tf.errors.InvalidArgumentError):  # an id outside the table: TensorFlow's own error
        direct([feeds["a:0"], np.array([9], np.int64)])


def test_direct_run_is_none_without_a_sessions_internals():
    class NotASession:
        def run(self, fetches, feeds):
            return fetches

    assert direct_run(NotASession(), ["y:0"], []) is None
    assert StreamPool([NotASession()]).run(["y:0"], {}) == ["y:0"]


def test_a_bound_run_gives_session_runs_values_with_its_feeds_in_order():
    session = _graph()
    feeds = {"a:0": np.ones((2, 3), np.float32), "ids:0": np.array([1, 3], np.int64)}
    fetches = ["y:0", "s:0"]
    run = StreamPool([session]).bind(fetches, list(feeds))
    got, want = run(list(feeds.values())), session.run(fetches, feeds)
    assert len(got) == 2 and all(np.array_equal(g, w) for g, w in zip(got, want))


def test_a_bound_run_takes_a_sessions_own_run_values_else_its_run():
    class Foreign:
        """Another engine's session (engines/): its own way in, the feeds as a list."""

        def __init__(self):
            self.values = []

        def run_values(self, values):
            self.values.append(values)
            return ["own"]

        def run(self, fetches, feeds):
            raise AssertionError("run_values is the way in")

    class NotASession:
        def run(self, fetches, feeds):
            return sorted(feeds.items())

    foreign = Foreign()
    assert StreamPool([foreign]).bind(["y:0"], [0, 1])([10, 11]) == ["own"] and foreign.values == [[10, 11]]
    assert StreamPool([NotASession()]).bind(["y:0"], ["b", "a"])([1, 2]) == [("a", 2), ("b", 1)]


def test_a_bound_run_of_a_retired_pool_raises_retired():
    from tf_autopar.runtime.streams import Retired

    session = _graph()
    pool = StreamPool([session])
    run = pool.bind(["s:0"], ["a:0"])
    assert run([np.ones((4, 3), np.float32)])[0].tolist() == [4, 3]
    pool.retire()
    with pytest.raises(Retired):
        run([np.ones((4, 3), np.float32)])

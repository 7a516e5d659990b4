"""A call's inputs checked against the function's input specs (fastpath/routing/arrays.py), and
the environment switch read on every call (fastpath/switches.py): the request path's own
per-call work, made cheap without changing what is taken and what is declined."""

from __future__ import annotations

import numpy as np
import pytest

from tf_autopar.runtime.fastpath import switches
from tf_autopar.runtime.fastpath.routing import reasons

tf = pytest.importorskip("tensorflow")

from tf_autopar.runtime.fastpath.routing.arrays import Feed, arrays_of, exact_array  # noqa: E402

pytestmark = pytest.mark.tf


def _check(value, feed):
    return exact_array(value, feed, np, tf)


def test_a_fitting_shape_is_remembered_and_a_shape_that_does_not_fit_is_still_declined():
    feed = Feed(tf.TensorSpec([None, 3], tf.float32))
    good = np.zeros((2, 3), np.float32)
    assert _check(good, feed) is good and feed.fits == (2, 3)
    assert _check(np.ones((2, 3), np.float32), feed) is not None  # the remembered shape: taken
    assert _check(np.zeros((2, 4), np.float32), feed) is None  # right after a fitting one
    assert _check(np.zeros((2, 3, 1), np.float32), feed) is None
    assert _check(np.zeros((2, 3), np.float64), feed) is None  # the remembered shape, another dtype
    assert _check(np.zeros((5, 3), np.float32), feed) is not None and feed.fits == (5, 3)
    assert _check(tf.zeros((5, 3), tf.int32), feed) is None
    assert _check(tf.ones((5, 3)), feed).tolist() == [[1.0] * 3] * 5  # an eager tensor: its array


def test_an_eager_tensor_is_fed_from_its_own_buffer_not_a_copy():
    feed = Feed(tf.TensorSpec([None, 3], tf.float32))
    tensor = tf.constant(np.arange(6, dtype=np.float32).reshape(2, 3))
    array = _check(tensor, feed)
    assert np.shares_memory(array, tensor._numpy())  # numpy() would have copied it
    assert array.tolist() == tensor.numpy().tolist()
    words = _check(tf.constant([b"a", b"b"]), Feed(tf.TensorSpec([None], tf.string)))
    assert words.tolist() == [b"a", b"b"]


def test_unknown_rank_strings_and_python_values():
    anything = Feed(tf.TensorSpec(None, tf.int64))
    assert _check(np.zeros((1, 2, 3), np.int64), anything) is not None
    assert _check(np.zeros((), np.int64), anything) is not None
    words = Feed(tf.TensorSpec([None], tf.string))
    assert _check(np.array([b"a", b"b"], dtype=object), words) is not None
    assert _check(np.array([1, 2]), words) is None
    assert _check([1.0, 2.0], Feed(tf.TensorSpec([None], tf.float32))) is None


def test_a_calls_batch_is_its_inputs_common_first_dimension():
    feeds = [Feed(tf.TensorSpec([None, 2], tf.float32)), Feed(tf.TensorSpec([None], tf.int32))]
    arrays, batch = arrays_of([np.zeros((4, 2), np.float32), np.zeros(4, np.int32)], feeds)
    assert batch == 4 and len(arrays) == 2
    assert arrays_of([np.zeros((4, 2), np.float32), np.zeros(3, np.int32)], feeds) == reasons.BATCHES
    assert arrays_of([np.zeros((4, 2), np.float32), np.zeros(4, np.int64)], feeds) == reasons.DTYPE


def test_the_switch_is_read_on_every_call(monkeypatch):
    monkeypatch.delenv(switches.SWITCH_VAR, raising=False)
    assert switches.switched_off() == ""
    monkeypatch.setenv(switches.SWITCH_VAR, "off")  # set while serving: the next call sees it
    assert switches.switched_off() == f"{switches.SWITCH_VAR}=off"
    monkeypatch.setenv(switches.SWITCH_VAR, "1")
    assert switches.switched_off() == ""
    monkeypatch.delenv(switches.SWITCH_VAR)
    assert switches.switched_off() == ""

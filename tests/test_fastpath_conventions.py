"""Every calling convention the fast path routes (runtime/fastpath/routing/), in real processes:
each routed call is served by the frozen session with the original's outputs, a bad input gets the
original's own error, the calls it must not take (training=True, a recording GradientTape) stay
Keras's, and status() counts every call by the path that answered it and why.

As in test_fastpath.py, the children set ``SWITCH_RATIO`` to infinity so the switch is certain:
what is checked is the routing, not the host's timing."""

from __future__ import annotations

import pytest

from _runtime_child import run_child
from tf_autopar.runtime.records import BucketRecord, FunctionRecord, ServedRecord
from tf_autopar.runtime.state import Status

pytestmark = pytest.mark.tf

# A tiny MLP (.keras and exported), a two-input model, a tf.Module whose function has two input
# signatures (float32 and float64) and a one-input signature.
BUILD = """
import numpy as np, tensorflow as tf, keras
keras.utils.set_random_seed(0)
x = keras.Input((4,), name="x")
h = keras.layers.Dropout(0.5)(keras.layers.Dense(8, activation="relu")(x))
mlp = keras.Model(x, keras.layers.Dense(3)(h))
mlp.save(DIR + "/mlp.keras")
mlp.export(DIR + "/mlp", verbose=False)

class Scale(tf.Module):
    def __init__(self):
        self.v = tf.Variable(2.0)

    @tf.function
    def f(self, x):
        return {"y": x * tf.cast(self.v, x.dtype) + 1}

m = Scale()
m.f.get_concrete_function(tf.TensorSpec([None, 4], tf.float32))
m.f.get_concrete_function(tf.TensorSpec([None, 4], tf.float64))
tf.saved_model.save(m, DIR + "/scale")
report(ok=True)
"""

PRELUDE = """
import numpy as np
import tf_autopar
tf_autopar.enable()
import tensorflow as tf
from tf_autopar.runtime import fastpath
from tf_autopar.runtime.fastpath import rules as fastpath_rules
fastpath_rules.SWITCH_RATIO = float("inf")
X = np.random.default_rng(0).standard_normal((1, 4)).astype(np.float32)
def error(call):
    try:
        call(); return None
    except Exception as e:
        return [type(e).__name__, str(e)[:300]]
def maxdiff(a, b):
    a, b = tf.nest.flatten(a), tf.nest.flatten(b)
    return max(float(np.max(np.abs(np.asarray(x, np.float64) - np.asarray(y, np.float64)))) for x, y in zip(a, b))
def record(function):
    for s in tf_autopar.status().served:
        if s.function == function:
            return dict(calls=s.calls, served=s.served, declined=dict(s.declined), convention=s.convention)
    return None
"""


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> str:
    directory = str(tmp_path_factory.mktemp("conventions_models"))
    res, err, rc = run_child(f"DIR = {directory!r}\n" + BUILD, {})
    assert rc == 0 and res.get("ok"), err[-3000:]
    return directory


def _run(saved: str, body: str, tmp_path) -> dict:
    res, err, rc = run_child(
        f"DIR = {saved!r}\n" + PRELUDE + body, {"TF_AUTOPAR_CACHE_DIR": str(tmp_path / "cache")}, timeout=400
    )
    assert rc == 0 and res, err[-4000:]
    return res


def test_saved_model_signature_positionally_and_a_function_with_two_input_signatures(saved, tmp_path):
    res = _run(
        saved,
        """
loaded = tf.saved_model.load(DIR + "/mlp")
sig = loaded.signatures["serving_default"]
orig_sig = type(sig)._tf_autopar_original.__call__
scale = tf.saved_model.load(DIR + "/scale")
f = scale.f
orig_f = type(f)._tf_autopar_original.__call__
X64 = X.astype(np.float64)
sig(tf.constant(X)); f(X); f(X64)
assert fastpath.wait_idle(180)
out = {
    "positional": maxdiff(sig(tf.constant(X)), orig_sig(sig, x=tf.constant(X))),
    "f32": maxdiff(f(X), orig_f(f, X)), "f64": maxdiff(f(X64), orig_f(f, X64)),
    "f64_dtype": f(X64)["y"].dtype.name,
}
errors = {  # ours and the original's
    "numpy positionally": [error(lambda: sig(X)), error(lambda: orig_sig(sig, X))],
    "list positionally": [error(lambda: sig([[1.0, 2.0, 3.0, 4.0]])), error(lambda: orig_sig(sig, [[1.0, 2.0, 3.0, 4.0]]))],
    "bad shape": [error(lambda: sig(tf.zeros((1, 5)))), error(lambda: orig_sig(sig, tf.zeros((1, 5))))],
    "two values": [error(lambda: sig(tf.constant(X), x=X)), error(lambda: orig_sig(sig, tf.constant(X), x=X))],
    "int input": [error(lambda: f(np.ones((1, 4), np.int32))), error(lambda: orig_f(f, np.ones((1, 4), np.int32)))],
}
report(out=out, errors=errors, sig=record("signatures['serving_default']"), f1=record("f[1 of 2]"),
       f2=record("f[2 of 2]"), text=tf_autopar.status().text(), warnings=list(tf_autopar.status().warnings))
""",
        tmp_path,
    )
    out = res["out"]
    assert out["positional"] <= 1e-5 and out["f32"] <= 1e-5 and out["f64"] <= 1e-9, out
    assert out["f64_dtype"] == "float64"
    for kind, (ours, theirs) in res["errors"].items():
        assert ours is not None and ours == theirs, (kind, ours, theirs)
    sig = res["sig"]  # positional tensors served; numpy, a list and a bad shape counted as not routed
    assert sig["convention"] == "signature" and sig["served"] >= 1, sig
    assert sig["declined"] == {
        "positionally with a numpy array (the original takes tensors there)": 1,
        "with a Python list or scalar as an input": 1,
        "with an input of a shape the function does not take": 1,
        "with arguments the fast path does not take (other keywords or a wrong count)": 1,
    }, sig
    # each input signature its own served function: float32 calls the first, float64 the second
    assert res["f1"]["served"] >= 1 and res["f2"]["served"] >= 1, (res["f1"], res["f2"])
    assert res["f1"]["declined"] == {"matching none of the function's input signatures": 1}, res["f1"]
    assert "1 call positionally with a numpy array (the original takes tensors there): not routed" in res["text"]
    assert any("pass tf.constant(x)" in w for w in res["warnings"]), res["warnings"]


def test_keras_call_predict_on_batch_and_what_is_never_routed(saved, tmp_path):
    res = _run(
        saved,
        """
import keras
model = keras.models.load_model(DIR + "/mlp.keras")
cls = type(model)._tf_autopar_original
want = cls.__call__(model, X, training=False).numpy()
model(X); model.predict_on_batch(X)
assert fastpath.wait_idle(180)
got = {
    "call": model(X), "call_training_false": model(X, training=False), "call_tensor": model(tf.constant(X)),
    "predict_on_batch": model.predict_on_batch(X),
}
types = {k: type(v).__name__ for k, v in got.items()}
diffs = {k: maxdiff(v, want) for k, v in got.items()}
served_before = record("__call__")["served"]
xt = tf.constant(X)
with tf.GradientTape() as tape:
    tape.watch(xt)
    y = model(xt)
grad = tape.gradient(y, xt)
# Dropout(0.5) in training: outputs differ from inference, as Keras's own call gives them
train = [model(X, training=True).numpy() for _ in range(3)]
errors = {
    "call bad shape": [error(lambda: model(np.zeros((1, 5), np.float32))),
                       error(lambda: cls.__call__(model, np.zeros((1, 5), np.float32)))],
    "predict bad shape": [error(lambda: model.predict(np.zeros((1, 5), np.float32), verbose=0)),
                          error(lambda: cls.predict(model, np.zeros((1, 5), np.float32), verbose=0))],
    "predict_on_batch bad shape": [error(lambda: model.predict_on_batch(np.zeros((1, 5), np.float32))),
                                   error(lambda: cls.predict_on_batch(model, np.zeros((1, 5), np.float32)))],
}
report(types=types, diffs=diffs, grad=grad is not None, served_before=served_before,
       train_differs=any(float(np.max(np.abs(t - want))) > 1e-4 for t in train),
       call=record("__call__"), pob=record("predict_on_batch"), errors=errors,
       text=tf_autopar.status().text())
""",
        tmp_path,
    )
    assert res["types"] == {
        "call": "EagerTensor",
        "call_training_false": "EagerTensor",
        "call_tensor": "EagerTensor",
        "predict_on_batch": "ndarray",
    }, res["types"]
    assert max(res["diffs"].values()) <= 1e-5, res["diffs"]
    call = res["call"]
    assert call["convention"] == "keras call" and res["served_before"] >= 3, call
    assert call["served"] == res["served_before"], call  # the tape's and training's calls were not served
    assert res["grad"] and res["train_differs"]
    assert call["declined"].get("under a recording GradientTape") == 1, call
    assert call["declined"].get("with training=True") == 3, call
    assert call["declined"].get("with an input of a shape the function does not take") == 1, call
    assert res["pob"]["served"] >= 1 and res["pob"]["convention"] == "keras predict_on_batch", res["pob"]
    for kind, (ours, theirs) in res["errors"].items():
        assert ours is not None and ours[0] == theirs[0], (kind, ours, theirs)
    assert "3 calls with training=True: not routed" in res["text"]
    assert "served by the frozen session" in res["text"]


def test_status_words_count_every_call_and_point_at_optimize_for_an_unrouted_keras_model():
    bucket = BucketRecord(bucket=1, batch=1, calls=4245, served=4210, path="frozen session")
    called = ServedRecord(
        model="/m",
        function="signatures['serving_default']",
        calls=4245,
        batches="batch 1 in 100% of 4,245 calls",
        buckets=(bucket,),
        convention="signature",
        served=4210,
        declined=(("positionally with a Python list or scalar", 312),),
    )
    missed = ServedRecord(
        model="/m",
        function="serve",
        calls=0,
        batches="",
        convention="positional",
        declined=(("with training=True", 3),),
    )
    idle = ServedRecord(model="/m", function="other", calls=0, batches="", convention="positional")
    text = Status(enabled=True, mode="latency", served=(called, missed, idle), fast_path=True).text()
    assert "calls: 4,210 served by the frozen session, 35 by the original path; 312 calls positionally" in text
    assert "serve of /m: none of its calls routed" in text and "3 calls with training=True: not routed" in text
    # a function never called, beside the model's called ones: named once, not "no calls yet"
    assert "also routed, not called yet, of /m: other" in text and "no calls yet" not in text
    alone = Status(enabled=True, mode="latency", served=(idle,), fast_path=True).text()
    assert "other of /m: no calls yet" in alone  # the model's only routed function: it says so
    assert "tf_autopar.optimize(model)" not in text

    step = FunctionRecord("one_step_on_data", "f", 3, 1, 1, 1, True)
    unrouted = Status(enabled=True, mode="latency", functions=(step,), served=(called,), fast_path=True).text()
    assert "no Keras model is on the fast path" in unrouted and "tf_autopar.optimize(model)" in unrouted
    keras = ServedRecord(model="/k.keras", function="__call__", calls=1, batches="b", convention="keras call")
    routed = Status(enabled=True, mode="latency", functions=(step,), served=(keras,), fast_path=True).text()
    assert "no Keras model is on the fast path" not in routed

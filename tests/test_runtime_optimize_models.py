"""optimize() on what users of SavedModels hold: loaded SavedModels, signatures, .keras files;
called any number of times; never stale after the model's variables are written."""

from __future__ import annotations

import textwrap

import pytest

from _runtime_child import run_child

# A SavedModel with two named inputs of different widths, out of alphabetical order, and a
# dict of two outputs: a mixed-up input or output mapping cannot give the signature's numbers.
SAVE_TWO_INPUTS = """
PATH = __PATH__
import logging, numpy as np, tensorflow as tf, keras
records = []
class H(logging.Handler):
    def emit(self, r): records.append((r.levelname, r.getMessage()))
logging.getLogger("tf_autopar").addHandler(H()); logging.getLogger("tf_autopar").setLevel(logging.INFO)
import tf_autopar
keras.utils.set_random_seed(0)
zeta, alpha = keras.Input((4,), name="zeta"), keras.Input((3,), name="alpha")
h = keras.layers.Dense(16, activation="relu")(keras.layers.Concatenate()([zeta, alpha]))
model = keras.Model([zeta, alpha], {"scores": keras.layers.Dense(2)(h), "aux": keras.layers.Dense(1)(alpha)})
model.export(PATH, verbose=False)
rng = np.random.default_rng(0)
def as_numpy(d): return {k: v.numpy() for k, v in d.items()}
def maxdiff(a, b):
    assert sorted(a) == sorted(b), (sorted(a), sorted(b))
    return max(float(np.max(np.abs(a[k] - b[k]))) for k in a)
"""


def _child(script: str, tmp_path, env: dict | None = None, saved_model: bool = False) -> dict:
    """Run ``script`` in a fresh process (after SAVE_TWO_INPUTS with ``saved_model``); its report."""
    script = textwrap.dedent(script)
    if saved_model:
        script = SAVE_TWO_INPUTS.replace("__PATH__", repr(str(tmp_path / "sm"))) + script
    res, err, rc = run_child(script, {"TF_AUTOPAR_CACHE_DIR": str(tmp_path / "cache"), **(env or {})})
    assert rc == 0, err[-3000:]
    return res


# Programs that only read what optimize() returns (no status, hooks or warnings of the process),
# so they need no process of their own: one child runs them one after the other (TensorFlow starts
# once), each in its own function; one that fails reports its traceback and the next still runs.
READ_ONLY = """
import traceback

def called_twice():
    import numpy as np, keras
    import tf_autopar
    inp = keras.Input((4,)); model = keras.Model(inp, keras.layers.Dense(2)(inp))
    x = np.ones((2, 4), np.float32)
    first, second = tf_autopar.optimize(model), tf_autopar.optimize(model)
    import tf_autopar.runtime.frozen, tf_autopar.runtime
    third = tf_autopar.optimize(model)
    return dict(same=all(np.array_equal(f(x), model(x).numpy()) for f in (first, second, third)),
                fn=callable(tf_autopar.runtime.optimize) and type(tf_autopar.runtime.optimize).__name__)

def keras_file():
    import numpy as np, keras
    import tf_autopar
    keras.utils.set_random_seed(0)
    inp = keras.Input((6,))
    a = keras.layers.Dense(16, activation="relu")(inp)
    b = keras.layers.Dense(16, activation="tanh")(inp)
    keras.Model(inp, keras.layers.Dense(3)(keras.layers.Concatenate()([a, b]))).save(KERAS_FILE)
    model = keras.models.load_model(KERAS_FILE)
    fast = tf_autopar.optimize(model)
    rng = np.random.default_rng(1)
    xs = [rng.random((n, 6), dtype=np.float32) for n in (1, 4)]
    return dict(equal=[bool(np.array_equal(fast(x), model(x).numpy())) for x in xs],
                shapes=[list(fast(x).shape) for x in xs])

def guarded(program):
    try:
        return program()
    except Exception:
        return {"error": traceback.format_exc()}

report(called_twice=guarded(called_twice), keras_file=guarded(keras_file))
"""


@pytest.fixture(scope="module")
def read_only(tmp_path_factory) -> dict[str, dict]:
    """Each READ_ONLY program's report (``called_twice`` first), from one child process."""
    tmp = tmp_path_factory.mktemp("optimize_read_only")
    return _child(f"KERAS_FILE = {str(tmp / 'm.keras')!r}\n" + READ_ONLY, tmp)


@pytest.mark.tf
def test_optimize_called_twice_and_after_importing_its_module(read_only):
    """The second call used to raise "'module' object is not callable": importing the
    submodule tf_autopar.runtime.optimize replaced the package's optimize() function."""
    assert read_only["called_twice"] == {"same": True, "fn": "function"}


@pytest.mark.tf
def test_optimize_loaded_savedmodel_and_its_signature_match_the_signature(tmp_path):
    res = _child(
        """
    loaded = tf.saved_model.load(PATH)
    sig = loaded.signatures["serving_default"]
    by_model, by_sig = tf_autopar.optimize(loaded), tf_autopar.optimize(sig)
    by_name = tf_autopar.optimize(loaded, signature="serve")
    out = {"diffs": [], "types": set(), "shapes": []}
    for n in (1, 4):
        z, a = rng.random((n, 4), dtype=np.float32), rng.random((n, 3), dtype=np.float32)
        ref = as_numpy(sig(zeta=z, alpha=a))
        for got in (by_model(zeta=z, alpha=a), by_sig(alpha=a, zeta=tf.constant(z)), by_name(zeta=z, alpha=a)):
            out["diffs"].append(maxdiff(got, ref))
            out["types"] |= {type(got).__name__} | {type(v).__name__ for v in got.values()}
            out["shapes"].append({k: list(v.shape) for k, v in got.items()})
    errors = []
    for bad in (lambda: by_model(z, a), lambda: by_model(zeta=z), lambda: by_model(zeta=z, alpha=a, extra=a)):
        try: bad()
        except TypeError as e: errors.append(str(e))
    try: tf_autopar.optimize(loaded, signature="nope")
    except ValueError as e: errors.append(str(e))
    # a single-input signature is also called positionally, as the signature itself is
    inp = keras.Input((5,), name="pixels")
    single = keras.Model(inp, keras.layers.Dense(3)(inp)); single.export(PATH + "_1", verbose=False)
    sig1 = tf.saved_model.load(PATH + "_1").signatures["serving_default"]
    x = rng.random((4, 5), dtype=np.float32)
    f1 = tf_autopar.optimize(sig1)
    out["single"] = [maxdiff(f1(x), as_numpy(sig1(tf.constant(x)))),
                     maxdiff(f1(pixels=x[:1]), as_numpy(sig1(pixels=x[:1])))]
    report(**{k: sorted(v) if isinstance(v, set) else v for k, v in out.items()}, errors=errors,
           notes=[s.note for s in tf_autopar.status().sessions], refreshes=[by_model.refreshes, by_sig.refreshes])
    """,
        tmp_path,
        saved_model=True,
    )
    assert len(res["diffs"]) == 6 and max(res["diffs"]) <= 1e-6, res["diffs"]
    assert max(res["single"]) <= 1e-6, res["single"]
    assert res["types"] == ["dict", "ndarray"]
    assert res["shapes"][0] == {"scores": [1, 2], "aux": [1, 1]}
    assert res["shapes"][-1] == {"scores": [4, 2], "aux": [4, 1]}
    assert "keyword arguments ['alpha', 'zeta']" in res["errors"][0]
    assert "missing ['alpha']" in res["errors"][1] and "unexpected ['extra']" in res["errors"][2]
    assert "no signature 'nope'" in res["errors"][3] and "serve, serving_default" in res["errors"][3]
    # one frozen graph per callable serves batch 1 and batch 4 (the signature keeps its None batch)
    assert res["notes"] == ["frozen inference graph"] * 4
    assert res["refreshes"] == [0, 0]  # calling the signature itself writes nothing


@pytest.mark.tf
def test_optimize_keras_model_loaded_from_a_keras_file(read_only):
    res = read_only["keras_file"]
    assert res.get("equal") == [True, True], res  # bit for bit, like the existing Keras test
    assert res["shapes"] == [[1, 3], [4, 3]]


@pytest.mark.tf
def test_writes_to_the_variables_are_never_served_stale(tmp_path):
    """assign, fit, set_weights and a loaded SavedModel's variable: the next call re-freezes
    (one INFO line); reading the model (predict, the signature) does not; refresh() by hand."""
    res = _child(
        """
    import threading
    from tf_autopar.runtime import watch
    x = rng.random((4, 7), dtype=np.float32)
    inp = keras.Input((7,))
    km = keras.Model(inp, keras.layers.Dense(3)(keras.layers.Dense(8, activation="relu")(inp)))
    fast = tf_autopar.optimize(km)
    out = {}
    before = fast(x)
    km.predict(x, verbose=0); km(x)
    out["read_only_refreshes"] = fast.refreshes
    km.weights[0].assign(km.weights[0] * 2.0)
    after = fast(x)
    out["assign"] = [bool(np.array_equal(after, km(x).numpy())), bool(not np.array_equal(after, before))]
    km.compile(keras.optimizers.SGD(0.5), "mse")
    km.fit(x, np.ones((4, 3), np.float32), epochs=2, verbose=0)
    out["fit"] = bool(np.array_equal(fast(x), km(x).numpy()))
    km.set_weights([w * 0.5 for w in km.get_weights()])
    out["set_weights"] = bool(np.array_equal(fast(x), km(x).numpy()))
    out["refreshes"] = fast.refreshes
    # concurrent callers while the weights change: no error, no hang, fresh once writes stop
    errors = []
    def caller():
        try:
            for _ in range(30): fast(x)
        except Exception as e: errors.append(repr(e))
    ts = [threading.Thread(target=caller) for _ in range(3)]
    [t.start() for t in ts]
    for i in range(10): km.weights[1].assign_add(tf.ones_like(km.weights[1]) * 0.01)
    [t.join() for t in ts]
    out["threads"] = [errors, bool(np.array_equal(fast(x), km(x).numpy()))]
    # a variable of a SavedModel loaded with tf.saved_model.load
    loaded = tf.saved_model.load(PATH)
    sig = loaded.signatures["serving_default"]
    served = tf_autopar.optimize(loaded)
    z, a = rng.random((2, 4), dtype=np.float32), rng.random((2, 3), dtype=np.float32)
    first = served(zeta=z, alpha=a)
    for v in loaded.variables: v.assign(v * -1.5)
    now = as_numpy(sig(zeta=z, alpha=a))
    out["loaded"] = [maxdiff(served(zeta=z, alpha=a), now), maxdiff(first, now)]
    # refresh() for writes the watch cannot see (a raw op)
    tf.raw_ops.AssignVariableOp(resource=loaded.variables[0].handle, value=loaded.variables[0] * 3.0)
    served.refresh()
    out["refresh"] = maxdiff(served(zeta=z, alpha=a), as_numpy(sig(zeta=z, alpha=a)))
    out["installed"] = watch.installed()
    fast.close(); served.close()
    from tensorflow.python.eager.polymorphic_function.atomic_function import AtomicFunction
    out["removed"] = not watch.installed() and not hasattr(AtomicFunction.call_flat, "__wrapped__")
    once = tf_autopar.optimize(km); once(x)
    out["gc"] = [watch.installed()]
    del once; __import__("gc").collect()
    out["gc"].append(watch.installed())
    out["info"] = [m for lvl, m in records if lvl == "INFO" and "re-froze" in m]
    report(**out)
    """,
        tmp_path,
        saved_model=True,
    )
    assert res["read_only_refreshes"] == 0  # predict and model(x) only read: no needless re-freeze
    assert res["assign"] == [True, True]
    assert res["fit"] and res["set_weights"]
    assert res["refreshes"] == 3
    assert res["threads"] == [[], True]
    assert res["loaded"][0] <= 1e-6 and res["loaded"][1] > 1e-3  # fresh, and the write did change outputs
    assert res["refresh"] <= 1e-6
    assert res["installed"] and res["removed"]  # hooks live only while a watched callable does
    assert res["gc"] == [True, False]  # ... also when it is garbage-collected without close()
    assert len(res["info"]) == 2 and all("re-froze" in m for m in res["info"])  # once per callable


@pytest.mark.tf
def test_savedmodel_without_signatures_is_a_clear_error(tmp_path):
    res = _child(
        f"""
    import tensorflow as tf, keras
    import tf_autopar
    class M(tf.Module):
        def __init__(self): self.v = tf.Variable(2.0)
        @tf.function
        def scale(self, x): return x * self.v
    m = M(); m.scale(tf.ones([2]))
    tf.saved_model.save(m, {str(tmp_path / "nosig")!r})
    loaded = tf.saved_model.load({str(tmp_path / "nosig")!r})
    errors = []
    for call in (lambda: tf_autopar.optimize(loaded),
                 lambda: tf_autopar.optimize(keras.Sequential([keras.Input((2,))]), signature="x")):
        try: call()
        except ValueError as e: errors.append(str(e))
    report(errors=errors, sessions=len(tf_autopar.status().sessions))
    """,
        tmp_path,
    )
    assert len(res["errors"]) == 2
    assert "no signatures" in res["errors"][0] and "optimize(loaded.scale)" in res["errors"][0]
    assert "signature=" in res["errors"][1]
    assert res["sessions"] == 0  # nothing built


@pytest.mark.tf
def test_fails_open_to_the_model_itself_with_one_warning(tmp_path):
    """Our own code failing (a planted analysis failure; a watch that cannot be installed) leaves
    the model running on TensorFlow's settings, with its own outputs: fresh after a write too."""
    res = _child(
        """
    import os
    from tf_autopar.runtime import watch
    loaded = tf.saved_model.load(PATH)
    sig = loaded.signatures["serving_default"]
    z, a = rng.random((3, 4), dtype=np.float32), rng.random((3, 3), dtype=np.float32)
    os.environ["TF_AUTOPAR_TEST_FAIL"] = "analysis"
    planted = tf_autopar.optimize(loaded)
    d1 = maxdiff(planted(zeta=z, alpha=a), as_numpy(sig(zeta=z, alpha=a)))
    del os.environ["TF_AUTOPAR_TEST_FAIL"]
    def broken(): raise RuntimeError("internals moved")
    watch._install = broken
    inp = keras.Input((5,)); km = keras.Model(inp, keras.layers.Dense(2)(inp))
    unwatched = tf_autopar.optimize(km)
    x = rng.random((2, 5), dtype=np.float32)
    unwatched(x)
    km.weights[0].assign(km.weights[0] + 1.0)
    report(d1=d1, fresh=bool(np.array_equal(unwatched(x), km(x).numpy())),
           warnings=[m for lvl, m in records if lvl == "WARNING"], sessions=len(tf_autopar.status().sessions))
    """,
        tmp_path,
        saved_model=True,
    )
    assert res["d1"] == 0.0 and res["fresh"]  # the model itself ran
    assert len(res["warnings"]) == 1 and "could not build a tuned session for optimize()" in res["warnings"][0]
    assert res["sessions"] == 0


def test_bad_input_is_a_clear_error_without_importing_tensorflow():
    import sys

    from tf_autopar.runtime.frozen import OptimizedFunction

    had_tf = "tensorflow" in sys.modules
    with pytest.raises(TypeError, match="not a path"):
        OptimizedFunction("/models/resnet/1")
    with pytest.raises(TypeError, match="got int"):
        OptimizedFunction(3)
    with pytest.raises(TypeError, match="got object"):
        OptimizedFunction(object())
    with pytest.raises(ValueError, match="signature= needs a SavedModel"):
        OptimizedFunction(lambda x: x, signature="serving_default")
    assert ("tensorflow" in sys.modules) == had_tf


@pytest.mark.tf
def test_optimize_uses_what_tune_measured_for_the_loaded_savedmodel(tmp_path):
    """`tf-autopar tune` keys its result by the model file's fingerprint; optimize() plans a frozen
    graph (another fingerprint), so it must find the tune through the model it was given."""
    from _runtime_child import cpus

    if cpus() < 2:
        pytest.skip("a tuned 2x2 needs 2 CPUs")
    res = _child(
        """
    tf_autopar.enable(batch=1)
    from tf_autopar.graph import analyze
    from tf_autopar.runtime import cache
    from tf_autopar.runtime.state import STATE
    fp = analyze(PATH, batch=1).fingerprint
    cache.store_tuned(fp, cache.host_key(STATE.topology()), "latency", 1,
                      {"inter_op": 2, "intra_op": 2, "speedup": 1.25, "rounds": 3, "runs": 8, "date": "2026-11-30"})
    loaded = tf.saved_model.load(PATH)
    fast = tf_autopar.optimize(loaded)
    x = {"zeta": rng.normal(size=(1, 4)).astype(np.float32), "alpha": rng.normal(size=(1, 3)).astype(np.float32)}
    out = fast(**x)
    rule = tf_autopar.optimize(model)  # built here, not loaded: nothing was tuned for it
    rule(x["zeta"], x["alpha"])
    report(tuned=[fast.plan.inter_op, fast.plan.intra_op], explain="tuned on 2026-11-30" in fast.plan.explain(),
           same=maxdiff(as_numpy(loaded.signatures["serving_default"](**{k: tf.constant(v) for k, v in x.items()})),
                        out) < 1e-6,
           rule_tuned="tuned on" in rule.plan.explain())
    """,
        tmp_path,
        saved_model=True,
    )
    assert res == {"tuned": [2, 2], "explain": True, "same": True, "rule_tuned": False}


def test_concurrent_callers_are_served_fairly(tmp_path):
    """Eight threads on one optimized model, in latency mode (one session, shared) and with two
    streams: every thread gets at least a fifth of the best-served thread's calls (with the old
    Condition hand-out one thread made about 8,000 calls and the other seven one each)."""
    res = _child(
        """
    import threading, time
    import numpy as np, keras
    import tf_autopar
    inp = keras.Input((8,)); model = keras.Model(inp, keras.layers.Dense(4)(keras.layers.Dense(32)(inp)))
    x = np.ones((1, 8), np.float32)
    out = {}
    for label, kw in (("latency", {}), ("streams", dict(mode="throughput", streams=2))):
        fast = tf_autopar.optimize(model, **kw)
        fast(x)
        counts = [0] * 8
        stop = time.monotonic() + 1.5
        def work(i):
            while time.monotonic() < stop:
                fast(x); counts[i] += 1
        threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
        for t in threads: t.start()
        for t in threads: t.join()
        out[label] = counts
    report(**out)
    """,
        tmp_path,
    )
    for label in ("latency", "streams"):
        counts = res[label]
        assert min(counts) >= max(counts) / 5, (label, counts)

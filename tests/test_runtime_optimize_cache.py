"""optimize() and the persistent plan cache, in real TensorFlow child processes."""

from __future__ import annotations

import json

import pytest

from _runtime_child import cpus, run_child

pytestmark = pytest.mark.tf


def test_optimize_keras_model_bit_identical(tmp_path):
    script = """
    import tensorflow as tf, numpy as np, keras
    import tf_autopar
    keras.utils.set_random_seed(0)
    inp = keras.Input((32,))
    a = keras.layers.Dense(64, activation="relu")(inp)
    b = keras.layers.Dense(64, activation="tanh")(inp)
    out = keras.layers.Dense(10)(keras.layers.Concatenate()([a, b]))
    model = keras.Model(inp, out)
    x = np.random.default_rng(0).random((16, 32), dtype=np.float32)
    fast = tf_autopar.optimize(model)
    y = fast(x)
    import threading
    results = [None] * 4
    def worker(i): results[i] = fast(x)
    ts = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    [t.start() for t in ts]; [t.join() for t in ts]
    traced = tf.function(lambda t: model(t, training=False))
    report(predict_close=bool(np.allclose(y, model.predict(x, verbose=0), rtol=1e-5, atol=1e-6)),
           eager=bool(np.array_equal(y, model(x).numpy())),
           traced_close=bool(np.allclose(y, traced(tf.constant(x)).numpy(), rtol=1e-5, atol=1e-6)),
           threads=all(np.array_equal(r, y) for r in results),
           typ=type(y).__name__, shape=list(y.shape),
           inter=fast.session._config.inter_op_parallelism_threads,
           per_session=fast.session._config.use_per_session_threads, plan_inter=fast.plan.inter_op, width=fast.profile.avg_width,
           recs=[s.note for s in tf_autopar.status().sessions])
    """
    res, err, rc = run_child(script, {"TF_AUTOPAR_CACHE_DIR": str(tmp_path)})
    assert rc == 0, err
    # bit-identical to the model's call model(x); predict() and a plain tf.function run through the
    # eager function runtime, whose graph rewrites (fusions) differ from a Session's on a frozen
    # graph and can change the last bit (checked: 2.4e-7 here), so those are compared closely
    assert res["eager"] and res["threads"]
    assert res["predict_close"] and res["traced_close"]
    assert res["typ"] == "ndarray" and res["shape"] == [16, 10]
    assert res["width"] == 1  # heavy ops 3 (two parallel Dense, one after), depth 2
    assert res["inter"] == res["plan_inter"] == 1
    assert res["per_session"]
    assert res["recs"] == ["frozen inference graph"]


def test_cache_applies_a_function_plan_at_the_next_start(tmp_path):
    if cpus() < 2:
        pytest.skip("needs 2 CPUs for a plan that differs from the host-only one")
    script = """
    import logging
    records = []
    class H(logging.Handler):
        def emit(self, r): records.append(r.getMessage())
    logging.getLogger("tf_autopar").addHandler(H())
    import tf_autopar
    st = tf_autopar.enable()
    import tensorflow as tf
    @tf.function  # a chain (width 1): since f5f4b45 the host-only plan keeps TF's 2 pools here
    def chain(x):
        return tf.matmul(tf.matmul(x, x), x)
    chain(tf.ones([8, 8]))
    s = tf_autopar.status()
    report(source=s.process.source, planned=s.process.planned_inter, tf_compute=tf_compute_threads(),
           functions=[f.__dict__ for f in []] or s.to_dict()["functions"], warnings=records)
    """
    env = {"TF_AUTOPAR_CACHE_DIR": str(tmp_path / "cache")}
    path = str(tmp_path / "prog.py")
    first, err, rc = run_child(script, env, path=path)
    assert rc == 0, err
    assert first["source"] == "host" and first["planned"] == 2
    (fn,) = first["functions"]
    assert fn["name"] == "chain" and fn["avg_width"] == 1 and not fn["matches_process"] and fn["cached"]
    assert len(first["warnings"]) == 1 and "tf_autopar.optimize" in first["warnings"][0]
    with open(tmp_path / "cache" / "plans.json") as fh:
        data = json.load(fh)
    assert len(data["programs"]) == 1 and len(data["plans"]) == 1
    second, err, rc = run_child(script, env, path=path)
    assert rc == 0, err
    assert second["source"].startswith("cache: chain")
    assert second["planned"] == 1 and second["tf_compute"] == 1  # applied before the runtime started
    assert second["functions"][0]["matches_process"] and second["warnings"] == []


def test_corrupt_cache_is_moved_aside_with_one_warning(tmp_path, monkeypatch, caplog):
    from tf_autopar.runtime import cache
    from tf_autopar.runtime.state import STATE

    monkeypatch.setenv("TF_AUTOPAR_CACHE_DIR", str(tmp_path))
    (tmp_path / "plans.json").write_text("{not json")
    STATE.warned_keys.discard(f"cache-corrupt:{tmp_path / 'plans.json'}")
    with caplog.at_level("WARNING", logger="tf_autopar"):
        assert cache.load() == {
            "version": cache.VERSION,
            "plans": {},
            "programs": {},
            "profiles": {},
            "tuned": {},
            "calibration": {},
            "served": {},
        }
    assert not (tmp_path / "plans.json").exists()
    assert len(list(tmp_path.glob("plans.json.corrupt-*"))) == 1
    assert sum("unreadable" in r.getMessage() for r in caplog.records) == 1
    cache.store("fp", "topo", "latency", {"inter_op": 2}, {"heavy_ops": 3}, "f", program="prog")
    assert cache.lookup_program("prog", "topo", "latency")["plan"] == {"inter_op": 2}
    # a lighter graph of the same program does not displace the heavier one
    cache.store("fp2", "topo", "latency", {"inter_op": 1}, {"heavy_ops": 1}, "g", program="prog")
    assert cache.lookup_program("prog", "topo", "latency")["fingerprint"] == "fp"


def test_cache_from_an_older_version_is_dropped_quietly(tmp_path, monkeypatch, caplog):
    """Plans made by an older planner are not reused after an upgrade, and that is no error."""
    from tf_autopar.runtime import cache

    monkeypatch.setenv("TF_AUTOPAR_CACHE_DIR", str(tmp_path))
    old = {"version": cache.VERSION - 1, "plans": {"fp|topo|latency": {"plan": {"inter_op": 9}}}, "programs": {}}
    (tmp_path / "plans.json").write_text(json.dumps(old))
    with caplog.at_level("WARNING", logger="tf_autopar"):
        assert cache.load()["plans"] == {}
    assert not caplog.records
    assert not list(tmp_path.glob("plans.json.corrupt-*"))
    cache.store("fp", "topo", "latency", {"inter_op": 2}, {"heavy_ops": 3}, "f")
    assert json.loads((tmp_path / "plans.json").read_text())["version"] == cache.VERSION


def test_optimize_throughput_streams_run_concurrent_requests(tmp_path):
    """mode="throughput": one tuned session per stream, each with its own pools; many threads
    calling at once get the model's outputs."""
    if cpus() < 2:
        pytest.skip("needs 2 CPUs for two streams")
    script = """
    import tf_autopar
    tf_autopar.enable(mode="throughput")
    import tensorflow as tf, numpy as np, keras, threading
    keras.utils.set_random_seed(0)
    inp = keras.Input((32,))
    model = keras.Model(inp, keras.layers.Dense(8)(keras.layers.Dense(64, activation="relu")(inp)))
    x = np.random.default_rng(0).random((4, 32), dtype=np.float32)
    expected = model(x).numpy()
    base = tf_compute_threads()
    fast = tf_autopar.optimize(model, mode="throughput", streams=2)
    results = [None] * 8
    def worker(i): results[i] = fast(x)
    ts = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    [t.start() for t in ts]; [t.join() for t in ts]
    report(same=all(np.array_equal(r, expected) for r in results), streams=len(fast.sessions),
           configs=[[s._config.inter_op_parallelism_threads, s._config.intra_op_parallelism_threads]
                    for s in fast.sessions],
           new_inter_threads=tf_compute_threads() - base,
           notes=[s.note for s in tf_autopar.status().sessions])
    """
    res, err, rc = run_child(script, {"TF_AUTOPAR_CACHE_DIR": str(tmp_path)})
    assert rc == 0, err
    assert res["same"]
    assert res["streams"] == 2 and res["configs"] == [[1, 1], [1, 1]]  # 2 cores -> 2 streams of 1x1
    assert res["new_inter_threads"] == 2  # each stream's session really has its own inter-op pool
    assert res["notes"] == ["frozen inference graph stream 1/2", "frozen inference graph stream 2/2"]
    with pytest.raises(ValueError, match="streams"):
        from tf_autopar.runtime.frozen import OptimizedFunction

        OptimizedFunction(object(), mode="latency", streams=2)

"""The native op tracer on real TensorFlow: build, known graphs, eager, sessions, Keras,
nesting, threads, the profiler lock, the chrome trace, and the fallback's structure."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

pytestmark = pytest.mark.tf

REPO = Path(__file__).resolve().parent.parent

# The known graph: three chained matmuls of known sizes and a relu.
KNOWN_GRAPH = textwrap.dedent(
    """
    import tensorflow as tf
    x = tf.random.stateless_normal([256, 512], seed=(1, 2))
    w1 = tf.random.stateless_normal([512, 1024], seed=(1, 3))   # 256x512x1024: 134 M MACs
    w2 = tf.random.stateless_normal([1024, 256], seed=(1, 4))   # 256x1024x256:  67 M MACs
    w3 = tf.random.stateless_normal([256, 8], seed=(1, 5))      # 256x256x8:     0.5 M MACs

    @tf.function
    def known(x):
        a = tf.matmul(x, w1, name="big")
        b = tf.nn.relu(a, name="act")
        c = tf.matmul(b, w2, name="mid")
        return tf.matmul(c, w3, name="small")

    known(x)
    """
)
KNOWN_OPS = {("big", "MatMul"), ("act", "Relu"), ("mid", "MatMul"), ("small", "MatMul")}


@pytest.fixture(scope="module")
def tf_env():
    import tensorflow as tf

    ns: dict = {}
    exec(KNOWN_GRAPH, ns)
    return tf, ns


@pytest.fixture(scope="module")
def native(tf_env, need_tool):
    need_tool(os.environ.get("CXX", "g++"), "c++")  # the native tracer is built with it
    from tf_autopar.tracing import native_status

    ok, why = native_status()
    assert ok, f"native tracer unavailable: {why}"
    return True


def _trace_known(tf_env, steps: int = 3, **kw):
    import tf_autopar

    tf, ns = tf_env
    with tf_autopar.trace(**kw) as t:
        for _ in range(steps):
            ns["known"](ns["x"]).numpy()
    return t


def test_extension_builds_here(tmp_path, monkeypatch, tf_env, need_tool) -> None:
    need_tool(os.environ.get("CXX", "g++"), "c++")
    from tf_autopar.tracing import build as b

    monkeypatch.setenv("TF_AUTOPAR_CACHE_DIR", str(tmp_path))
    plan = b.make_plan()
    assert plan.key.startswith("tf" + tf_env[0].__version__)
    lib = b.build(plan=plan)
    assert lib.is_file() and lib.parent == tmp_path / "native" / plan.key
    assert b.build(plan=plan) == lib  # cached: no second compile
    syms = subprocess.run(["nm", "-D", "--defined-only", str(lib)], capture_output=True, text=True).stdout
    assert "tfap_start" in syms and "tfap_stop" in syms


def test_failed_build_falls_back_with_a_clear_message(tmp_path) -> None:
    """A broken compiler: the build fails once, is remembered, and trace() uses tf.profiler."""
    code = textwrap.dedent(
        """
        import logging, sys
        logging.basicConfig(level=logging.WARNING, stream=sys.stdout, format="%(message)s")
        import tensorflow as tf, tf_autopar
        from tf_autopar.tracing import native_status
        ok, why = native_status()
        print("STATUS", ok, why.splitlines()[0])
        with tf_autopar.trace() as t:
            tf.matmul(tf.ones([64, 64]), tf.ones([64, 64])).numpy()
        print("BACKEND", t.backend, [r.name for r in t.ops()])
        """
    )
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "TF_AUTOPAR_CACHE_DIR": str(tmp_path),
        "CXX": "false",
        "TF_CPP_MIN_LOG_LEVEL": "2",
    }
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "STATUS False compiling the native tracer failed" in out.stdout
    assert "native op tracer unavailable, using the tf.profiler fallback" in out.stdout
    backend_line = next(line for line in out.stdout.splitlines() if line.startswith("BACKEND"))
    assert backend_line.startswith("BACKEND tf.profiler [") and "'eager/MatMul'" in backend_line
    assert list(tmp_path.glob("native/*/build-failed.log"))


def test_known_graph_reports_exactly_its_ops(tf_env, native) -> None:
    t = _trace_known(tf_env, steps=3)
    assert t.backend == "native"
    ops = t.ops()
    assert {(r.name, r.type) for r in ops} == KNOWN_OPS
    assert all(r.count == 3 for r in ops)
    rec = {r.name: r for r in ops}
    # plausible times: positive, below the block's wall time, and bigger matmuls take longer
    assert all(0 < r.median_s and r.total_s < t.wall_s for r in ops)
    assert rec["big"].median_s > rec["small"].median_s
    assert rec["mid"].median_s > rec["small"].median_s
    assert rec["big"].kernel in ("", "_MklMatMul") and rec["big"].thread
    # dependencies: within each step, every op starts after its producer ended
    evs = t.events()
    chain = ["big", "act", "mid", "small"]
    by_name = {n: [e for e in evs if e.name == n] for n in chain}
    for step in range(3):
        for prod, cons in zip(chain, chain[1:]):
            assert by_name[prod][step].end_ns <= by_name[cons][step].start_ns
    # the type profile and the heavy share add up
    types = {r.type: r for r in t.by_type()}
    assert set(types) == {"MatMul", "Relu"} and types["MatMul"].count == 9 and types["MatMul"].ops == 3
    assert types["MatMul"].heavy == "matmul" and types["Relu"].heavy is None
    hs = t.heavy_share()
    assert hs.heavy_s == pytest.approx(types["MatMul"].total_s) and hs.other_s == pytest.approx(types["Relu"].total_s)
    assert 0.5 < hs.heavy_fraction < 1.0 and hs.heavy_types == ("MatMul",)
    tl = t.timeline()
    assert sum(len(v) for v in tl.values()) == 12
    assert all(v == sorted(v, key=lambda e: e.start_ns) for v in tl.values())


def test_keras_eager_and_session_ops_are_captured(tf_env, native) -> None:
    import keras

    import tf_autopar

    tf, _ = tf_env
    model = keras.Sequential([keras.Input((32,)), keras.layers.Dense(64, activation="relu"), keras.layers.Dense(4)])
    xin = tf.random.normal([16, 32])
    model.predict(xin, verbose=0)
    g = tf.Graph()
    with g.as_default():
        a = tf.compat.v1.placeholder(tf.float32, [64, 64], name="a")
        out = tf.matmul(a, a, name="sess_mm")
    sess = tf.compat.v1.Session(graph=g)
    import numpy as np

    feed = {a: np.ones((64, 64), np.float32)}
    sess.run(out, feed)
    with tf_autopar.trace() as t:
        model.predict(xin, verbose=0)  # tf.function inside Keras
        tf.matmul(xin, tf.transpose(xin)).numpy()  # eager
        sess.run(out, feed)  # TF1 Session
    sess.close()
    recs = t.ops()
    names = {r.name for r in recs}
    keras_heavy = [r for r in recs if "dense" in r.name and r.type in ("MatMul", "_FusedMatMul")]
    assert keras_heavy, names
    assert "eager/MatMul" in names
    assert any(r.name == "sess_mm" and r.type == "MatMul" for r in recs)
    assert not any(r.type in ("_Arg", "_Retval", "NoOp", "StatefulPartitionedCall") for r in recs)


def test_nested_traces_report_their_own_window(tf_env, native) -> None:
    import tf_autopar

    tf, ns = tf_env
    w4 = tf.random.stateless_normal([512, 128], seed=(1, 6))
    other = tf.function(lambda x: tf.nn.softmax(tf.matmul(x, w4, name="gram"), name="sm"))
    other(ns["x"])
    with tf_autopar.trace() as outer:
        ns["known"](ns["x"]).numpy()
        with tf_autopar.trace() as inner:
            other(ns["x"]).numpy()
        assert {r.name for r in inner.ops()} == {"gram", "sm"}  # available right after the inner block
        ns["known"](ns["x"]).numpy()
    outer_ops = {r.name: r for r in outer.ops()}
    assert set(outer_ops) == {"big", "act", "mid", "small", "gram", "sm"}
    assert outer_ops["big"].count == 2 and outer_ops["gram"].count == 1
    assert not outer.incomplete and not inner.incomplete
    assert inner.backend == outer.backend == "native"


def test_two_threads_never_mix(tf_env, native) -> None:
    """A second thread cannot trace while the first does; serialised traces see only their own ops."""
    import tf_autopar
    from tf_autopar.tracing import TraceBusyError

    tf, ns = tf_env
    w5 = tf.random.stateless_normal([512, 64], seed=(1, 7))
    other = tf.function(lambda x: tf.nn.softmax(tf.matmul(x, w5, name="gram2"), name="sm2"))
    other(ns["x"])
    entered, release = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def holder() -> None:
        with tf_autopar.trace():
            entered.set()
            release.wait(30)

    th = threading.Thread(target=holder)
    th.start()
    assert entered.wait(30)
    with pytest.raises(TraceBusyError, match="another thread"):
        with tf_autopar.trace():
            pass
    release.set()
    th.join()

    results: dict[str, list] = {"known": [], "other": []}
    funcs = {"known": ns["known"], "other": other}
    lock = threading.Lock()  # serialises the TF work + trace pairs, retrying on busy

    def worker(kind: str) -> None:
        try:
            for _ in range(3):
                while True:
                    with lock:
                        try:
                            with tf_autopar.trace() as t:
                                funcs[kind](ns["x"]).numpy()
                        except TraceBusyError:
                            continue
                    break
                results[kind].append({r.name for r in t.ops()})
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(k,)) for k in ("known", "other")]
    for x in threads:
        x.start()
    for x in threads:
        x.join(120)
    assert not errors, errors
    assert results["known"] == [{"big", "act", "mid", "small"}] * 3
    assert results["other"] == [{"gram2", "sm2"}] * 3


def test_profiler_lock_is_respected_both_ways(tf_env, native, tmp_path) -> None:
    import tf_autopar
    from tf_autopar.tracing import TraceBusyError

    tf, ns = tf_env
    tf.profiler.experimental.start(str(tmp_path / "p1"))
    try:
        with pytest.raises(TraceBusyError, match="profiler session is active"):
            with tf_autopar.trace():
                pass
    finally:
        tf.profiler.experimental.stop()
    with tf_autopar.trace() as t:
        with pytest.raises(Exception):  # noqa: B017
            tf.profiler.experimental.start(str(tmp_path / "p2"))
        ns["known"](ns["x"]).numpy()
    assert {r.name for r in t.ops()} == {"big", "act", "mid", "small"}  # tf.profiler stole nothing


def test_chrome_trace_loads(tf_env, native, tmp_path) -> None:
    t = _trace_known(tf_env, steps=2)
    path = t.save_chrome_trace(tmp_path / "trace.json", include_runtime=True)
    doc = json.loads(path.read_text())
    xs = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    ops = [e for e in xs if e.get("cat") == "op"]
    assert sorted({e["name"] for e in ops}) == ["act", "big", "mid", "small"] and len(ops) == 8
    assert all(e["dur"] >= 0 and e["ts"] >= 0 for e in xs)
    assert any(e.get("cat") == "runtime" for e in xs)
    assert doc["metadata"]["backend"] == "native"


FALLBACK_CHILD = KNOWN_GRAPH + textwrap.dedent(
    """
    import json, tf_autopar
    with tf_autopar.trace() as t:
        for _ in range(3):
            known(x).numpy()
    d = t.to_dict(steps=3)
    print("JSON" + json.dumps(d))
    """
)


def test_fallback_gives_the_same_structure(tf_env, native) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO), "TF_AUTOPAR_NO_NATIVE": "1", "TF_CPP_MIN_LOG_LEVEL": "2"}
    out = subprocess.run([sys.executable, "-c", FALLBACK_CHILD], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    fb = json.loads(next(line[4:] for line in out.stdout.splitlines() if line.startswith("JSON")))
    nat = _trace_known(tf_env, steps=3).to_dict(steps=3)
    assert fb["backend"] == "tf.profiler" and nat["backend"] == "native"
    assert set(fb) == set(nat)
    assert set(fb["heavy_share"]) == set(nat["heavy_share"])
    assert [set(r) for r in fb["ops"]] == [set(r) for r in nat["ops"]]
    assert {(r["name"], r["type"], r["count"]) for r in fb["ops"]} == {
        (r["name"], r["type"], r["count"]) for r in nat["ops"]
    }
    assert [(r["type"], r["count"], r["ops"], r["heavy"]) for r in fb["by_type"]] == [
        (r["type"], r["count"], r["ops"], r["heavy"]) for r in nat["by_type"]
    ]


def test_cli_trace_json(tf_env, native, capsys, tmp_path) -> None:
    from tf_autopar.cli.main import main

    chrome = tmp_path / "c.json"
    rc = main(
        ["trace", "autoenc", "--size", "tiny", "--steps", "2", "--warmup", "1", "--json", "--chrome", str(chrome)]
    )
    assert rc == 0
    data = json.loads(capsys.readouterr().out)
    assert data["workload"] == "autoenc" and data["steps"] == 2 and data["backend"] == "native"
    assert any(r["heavy"] == "matmul" for r in data["by_type"])
    assert json.loads(chrome.read_text())["traceEvents"]
    rc = main(["trace", "autoenc", "--size", "tiny", "--steps", "2", "--warmup", "0"])
    text = capsys.readouterr().out
    assert rc == 0 and "op type" in text and "heavy ops:" in text


def test_use_graph_marks_embedding_gathers_heavy(tf_env, native) -> None:
    import keras
    import numpy as np

    import tf_autopar

    tf, _ = tf_env
    model = keras.Sequential(
        [
            keras.Input((4,), dtype="int32"),
            keras.layers.Embedding(5000, 16, name="lookup"),
            keras.layers.Flatten(),
            keras.layers.Dense(2),
        ]
    )
    fn = tf.function(lambda x: model(x, training=False))
    ids = tf.constant(np.arange(32, dtype=np.int32).reshape(8, 4))
    fn(ids)
    with tf_autopar.trace() as t:
        fn(ids).numpy()
    # Keras 3 reads the table, then GatherV2 on it: the name ("lookup") does not say embedding
    assert any(r.type == "GatherV2" and "lookup" in r.name for r in t.ops()), [r.name for r in t.ops()]
    assert "embedding" not in t.heavy_share().by_class
    t.use_graph(fn.get_concrete_function(ids))
    assert t.heavy_share().by_class.get("embedding", 0) > 0
    assert next(r for r in t.by_type() if r.type == "GatherV2").heavy == "embedding"
    with pytest.raises(ValueError, match="GraphDef"):
        t.use_graph(42)


def test_cli_traces_a_users_savedmodel_and_keras_file(tf_env, native, capsys, tmp_path) -> None:
    """Everything a user does with a bundled workload works on their own model: trace included."""
    from _runtime_child import build_user_model

    from tf_autopar.cli.main import main

    models = build_user_model(str(tmp_path / "m"))
    for path in (models["SM"], models["KERAS"]):
        rc = main(["trace", path, "--batch", "4", "--steps", "2", "--warmup", "1", "--json"])
        assert rc == 0
        data = json.loads(capsys.readouterr().out)
        assert data["workload"] == path and data["batch"] == 4 and data["steps"] == 2
        heavy = {r["type"]: r["heavy"] for r in data["by_type"]}
        assert "Conv2D" in str(heavy) and any(h for h in heavy.values()), heavy
    assert main(["trace", models["SM"], "--mode", "train"]) == 2
    assert "traced for inference" in capsys.readouterr().err
    assert main(["trace", str(tmp_path / "missing")]) == 2
    assert "missing" in capsys.readouterr().err
    assert main(["trace", "autoenc", "--input-shape", "x=1,2"]) == 2
    assert "apply to model files" in capsys.readouterr().err

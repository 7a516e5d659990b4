"""The engine seam of the fast path (runtime/fastpath/engines/): other engines compete with
TensorFlow's sessions as live-tuning candidates, a failing one falls open to the path serving
before it, and status() names the engine that serves. Real sessions in real processes; the
engines here are TensorFlow's own sessions under other names (so these run without the
``engines`` extra); tests/test_engines.py covers OpenVINO and ONNX Runtime themselves.

As in test_fastpath.py, the children set ``SWITCH_RATIO`` to infinity and ``TUNE_NOISE`` to -1:
any candidate wins at the first look, so what is checked is the routing, the outputs and the fallbacks.
"""

from __future__ import annotations

import pytest

from _runtime_child import run_child

pytestmark = pytest.mark.tf

BUILD = """
import keras
keras.utils.set_random_seed(0)
x = keras.Input((16,), name="x")
h = keras.layers.Dense(32, activation="relu")(x)
keras.Model(x, keras.layers.Dense(4)(h)).export(DIR + "/mlp", verbose=False)
report(ok=True)
"""

PRELUDE = """
import os, threading, time, numpy as np
if ONE_CPU:  # TensorFlow's sessions have no neighbour on one CPU: the engines are the only candidates
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
import tf_autopar
tf_autopar.enable()
import tensorflow as tf
from tf_autopar.runtime import fastpath
from tf_autopar.runtime.fastpath import engines, memory, rules
memory.LOCK_DIRS = (os.environ["TF_AUTOPAR_LEASE_DIR"],)  # its own build lock (run_child's dir): a parallel test's build never skips the prebuild
from tf_autopar.runtime.fastpath.engines import tf_session
rules.SWITCH_RATIO = float("inf")
rules.TUNE_NOISE = -1.0

class Copy(tf_session.TensorFlowSessions):
    '''TensorFlow's sessions under another name: a real second engine.'''
    name, precision = "tf-copy", "f32"
    def available(self): return ""

class Broken(Copy):
    '''Its conversion fails (in the background, as OpenVINO's and ONNX Runtime's run).'''
    name = "broken"
    def convert(self, frozen): raise RuntimeError("no converter for this graph")
    def converted(self, frozen): return False

events = []

class SlowConvert(Copy):
    '''A conversion that takes 8 s (tf2onnx at SCHED_IDLE on a busy host takes tens).'''
    name, seconds = "tf-slowconvert", 8
    done = __import__("weakref").WeakSet()
    def convert(self, frozen):  # once per graph, as the real engines' (foreign.Conversions)
        if frozen in self.done:
            return
        events.append(("convert", self.name, time.monotonic()))
        time.sleep(self.seconds)
        self.done.add(frozen)
    def converted(self, frozen): return frozen in self.done
    def build(self, frozen, setting):
        events.append(("build", self.name, time.monotonic()))
        return super().build(frozen, setting)

class SlowConvert2(SlowConvert):
    name, seconds = "tf-slowconvert2", 2
    done = __import__("weakref").WeakSet()

class FailsLater(Copy):
    '''Runs a few calls, then raises while serving (an engine's error at run time).'''
    name = "fails-later"
    def build(self, frozen, setting):
        runner = super().build(frozen, setting)
        run, count = runner.run, [0]
        def failing(arrays):
            count[0] += 1
            if count[0] > 3:
                raise RuntimeError("engine error at run time")
            return run(arrays)
        runner.run = failing
        return runner

class Slow(Copy):
    '''TensorFlow's sessions and a 3 ms sleep a call: a candidate that wins (any does, the bar is off)
    at well under 1x, so that its own win cannot end the session settings' trials.'''
    name = "tf-slow"
    def build(self, frozen, setting):
        runner = super().build(frozen, setting)
        run = runner.run
        def slow(arrays):
            time.sleep(0.003)
            return run(arrays)
        runner.run = slow
        return runner

class Memo(Copy):
    '''TensorFlow's answers, remembered per input: far faster than a session on the same inputs.'''
    name = "tf-memo"
    def build(self, frozen, setting):
        runner = super().build(frozen, setting)
        run, seen = runner.run, {}
        def memo(arrays):
            key = b"".join(a.tobytes() for a in arrays)
            if key not in seen:
                seen[key] = run(arrays)
            return [o.copy() for o in seen[key]]
        runner.run = memo
        return runner

class Bf16(Copy):
    name, precision = "tf-bf16", "bf16"

class Skewed(Bf16):
    '''A bf16 engine whose answers move the top class: the opted-in tolerance must reject it.'''
    name = "tf-skewed"
    def build(self, frozen, setting):
        runner = super().build(frozen, setting)
        run = runner.run
        runner.run = lambda arrays: [np.ascontiguousarray(o[..., ::-1]) for o in run(arrays)]
        return runner

for e in ENGINES:
    engines.register(globals()[e]())
mlp = tf.saved_model.load(DIR + "/mlp")
sig = mlp.signatures["serving_default"]
X = np.random.default_rng(0).standard_normal((1, 16)).astype(np.float32)
from tf_autopar.runtime.fastpath.routing.base import ATTR
served = lambda: vars(sig)[ATTR]  # the current sig's: another loaded model's may linger until Python collects it
def original():
    cls = getattr(type(sig), "_tf_autopar_original", type(sig))
    return cls.__call__(sig, x=X)
def drive(seconds=120):
    sig(x=X); assert fastpath.wait_idle(180)
    t0, answered = time.monotonic(), 0
    while time.monotonic() - t0 < seconds:
        out = sig(x=X); answered += 1
        b = served().buckets[1]
        if b.tuned == "done":
            break
        fastpath.wait_idle(30)
    fastpath.wait_idle(30)  # "done" is set before the verdict is written to the cache
    return answered
"""


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> str:
    directory = str(tmp_path_factory.mktemp("engine_models"))
    res, err, rc = run_child(f"DIR = {directory!r}\n" + BUILD, {})
    assert rc == 0 and res.get("ok"), err[-3000:]
    return directory


def _run(saved: str, engines: str, body: str, tmp_path, env: dict | None = None, one_cpu: bool = True) -> dict:
    script = f"DIR = {saved!r}\nENGINES = {engines.split(', ')!r}\nONE_CPU = {one_cpu}\n" + PRELUDE + body
    names = {
        "Copy": "tf-copy",
        "Broken": "broken",
        "FailsLater": "fails-later",
        "Bf16": "tf-bf16",
        "Skewed": "tf-skewed",
        "Memo": "tf-memo",
        "Slow": "tf-slow",
        "SlowConvert": "tf-slowconvert",
        "SlowConvert2": "tf-slowconvert2",
    }
    # only this test's engines compete (OpenVINO and ONNX Runtime, where installed, stay out)
    allowed = ",".join(names[e] for e in engines.split(", "))
    env = {"TF_AUTOPAR_CACHE_DIR": str(tmp_path / "cache"), "TF_AUTOPAR_ENGINES": allowed, **(env or {})}
    res, err, rc = run_child(script, env, timeout=400)
    assert rc == 0, err[-4000:]
    assert res, err[-4000:]
    return res


REPORT = """
answered = drive()
b = served().buckets[1]
out = sig(x=X)
report(answered=answered, tried=list(b.tried), key=list(b.key), failed=dict(served().engine_failed),
       text=tf_autopar.status().text(), diff=float(np.max(np.abs(out["output_0"].numpy() - original()["output_0"].numpy()))),
       engine=b.pool.describe()["engine"], tuned=b.tuned)
"""


def test_another_engine_competes_first_and_a_failing_conversion_falls_open(saved, tmp_path):
    res = _run(saved, "Broken, Copy", REPORT, tmp_path)
    tried = " | ".join(res["tried"])
    assert "tf-copy, " in tried and "win" in tried, res["tried"]  # tried as a live candidate, won (ratio inf)
    assert "broken" in res["failed"] and "no converter for this graph" in res["failed"]["broken"], res
    assert "not tried (broken could not run the graph" in tried, res["tried"]
    assert res["tuned"] == "done" and res["diff"] <= 1e-4, res
    assert res["engine"] == "tf-copy", res


def test_only_the_engines_the_user_allows_compete(saved, tmp_path):
    res = _run(saved, "Copy", REPORT, tmp_path, env={"TF_AUTOPAR_ENGINES": "tensorflow"})
    assert not any("tf-copy" in t for t in res["tried"]), res["tried"]
    assert res["engine"] == "tensorflow"


def test_bf16_engines_compete_only_when_the_user_opts_in(saved, tmp_path):
    off = _run(saved, "Bf16", REPORT, tmp_path)
    assert not any("tf-bf16" in t for t in off["tried"]), off["tried"]
    flags = open("/proc/cpuinfo").read()
    on = _run(saved, "Bf16", REPORT, tmp_path, env={"TF_AUTOPAR_PRECISION": "bf16"})
    opted = any("tf-bf16" in t for t in on["tried"])
    assert opted == ("avx512_bf16" in flags or "amx_bf16" in flags), on["tried"]


def test_an_opted_in_bf16_engine_that_moves_the_top_class_is_rejected(saved, tmp_path):
    flags = open("/proc/cpuinfo").read()
    if "avx512_bf16" not in flags and "amx_bf16" not in flags:
        pytest.skip("bf16 engines compete only on a CPU with AVX512_BF16 or AMX")
    res = _run(saved, "Skewed", REPORT, tmp_path, env={"TF_AUTOPAR_PRECISION": "bf16"})
    tried = " | ".join(res["tried"])
    assert "tf-skewed, 1 thread: not tried (outputs differ: output 0:" in tried, res["tried"]
    assert res["engine"] == "tensorflow" and res["diff"] <= 1e-4, res


def test_an_engine_failing_while_serving_falls_open_and_every_call_is_answered(saved, tmp_path):
    body = """
answered = drive()
b = served().buckets[1]
outs = [sig(x=X)["output_0"].numpy() for _ in range(20)]
ref = original()["output_0"].numpy()
report(answered=answered, tried=list(b.tried), failed=dict(served().engine_failed), engine=b.pool.describe()["engine"],
       diff=max(float(np.max(np.abs(o - ref))) for o in outs), text=tf_autopar.status().text())
"""
    res = _run(saved, "FailsLater", body, tmp_path)
    assert "fails-later" in res["failed"] and "engine error at run time" in res["failed"]["fails-later"], res
    assert res["engine"] == "tensorflow", res  # what serves now: TensorFlow's sessions
    assert res["diff"] <= 1e-4, res


def test_status_names_the_engine_that_serves_and_the_next_start_builds_it_at_load(saved, tmp_path):
    res = _run(saved, "Copy", REPORT, tmp_path)
    assert res["engine"] == "tf-copy" and res["key"][3:] == ["tf-copy"], res
    assert "tf-copy (" in res["text"], res["text"]
    again = _run(
        saved,
        "Copy",
        """
b0 = served().buckets[1]
out = sig(x=X)
report(engine=b0.pool.describe()["engine"], served=b0.served, tuned=b0.tuned)
""",
        tmp_path,
    )
    assert again == {"engine": "tf-copy", "served": 1, "tuned": "done"}, again


def test_with_tensorflow_neighbours_the_engines_are_tried_first(saved, tmp_path):
    if len(__import__("os").sched_getaffinity(0)) < 2:
        pytest.skip("needs 2 CPUs: on one, TensorFlow's sessions have no neighbour")
    res = _run(saved, "Copy", REPORT, tmp_path, one_cpu=False)
    assert res["tried"][0].startswith("tf-copy"), res["tried"]
    assert len(res["tried"]) > 1 and res["diff"] <= 1e-4, res


def test_while_an_engine_converts_tensorflows_settings_are_tried_and_the_engine_after(saved, tmp_path):
    if len(__import__("os").sched_getaffinity(0)) < 2:
        pytest.skip("needs 2 CPUs: on one, TensorFlow's sessions have no neighbour")
    body = """
from tf_autopar.runtime.fastpath import converting
sig(x=X); assert fastpath.wait_idle(180)
seen, t0 = "", time.monotonic()
while not seen and time.monotonic() - t0 < 60:
    sig(x=X)
    seen = next((line for line in tf_autopar.status().text().splitlines() if "in the background" in line), "")
""" + REPORT.replace("report(", "report(seen=seen, ")
    res = _run(saved, "SlowConvert", body, tmp_path, one_cpu=False)
    tried = res["tried"]
    assert "converting signatures['serving_default']" in res["seen"] and "for tf-slowconvert" in res["seen"], res
    first = next(i for i, t in enumerate(tried) if t.startswith("tf-slowconvert"))
    assert first > 0, tried  # TensorFlow's settings went first, while it converted
    assert "win" in tried[first] and res["engine"] == "tf-slowconvert" and res["diff"] <= 1e-4, res


def test_when_a_conversion_ends_the_next_starts_before_the_first_engine_is_built(saved, tmp_path):
    body = REPORT.replace("report(", "report(events=[e[:2] for e in sorted(events, key=lambda e: e[2])], ")
    res = _run(saved, "SlowConvert, SlowConvert2", body, tmp_path, env={"TF_AUTOPAR_CACHE_DIR": str(tmp_path / "c2")})
    # one conversion at a time; the second starts as the first ends, not after the first one's trial
    (first, a), (second, b), (third, c) = res["events"][:3]
    assert (first, second, third) == ("convert", "convert", "build") and a != b and c == a, res["events"]
    assert ["build", "tf-slowconvert2"] in res["events"] and res["tuned"] == "done" and res["diff"] <= 1e-4, res


def test_an_engine_far_faster_than_tensorflows_session_ends_the_session_settings_trials(saved, tmp_path):
    if len(__import__("os").sched_getaffinity(0)) < 2:
        pytest.skip("needs 2 CPUs: on one, TensorFlow's sessions have no neighbour")
    res = _run(saved, "Slow, Memo", REPORT, tmp_path, one_cpu=False)
    tried = " | ".join(res["tried"])
    assert res["engine"] == "tf-memo" and res["diff"] <= 1e-4, res
    # tf-slow won first at well under 1x, tf-memo over it: the product is what is weighed
    assert "TensorFlow session setting(s) not tried: tf-memo" in tried, res["tried"]
    assert "faster than TensorFlow's session" in tried, res["tried"]


# ------------------------------------------------------------------ the real engines (the extra)
SCALED = """
import tensorflow as tf
class Scaled(tf.Module):
    def __init__(self):
        self.w = tf.Variable(tf.random.stateless_normal((16, 4), seed=(1, 2)))
    @tf.function(input_signature=[tf.TensorSpec([None, 16], tf.float32, name="x")])
    def serve(self, x):
        return {"output_0": tf.matmul(x, self.w)}
m = Scaled()
tf.saved_model.save(m, DIR + "/scaled", signatures={"serving_default": m.serve})
report(ok=True)
"""


@pytest.mark.parametrize("engine", ["openvino", "onnxruntime"])
def test_a_real_engine_serves_after_its_live_trial_and_a_variable_write_routes_back(saved, tmp_path, engine):
    pytest.importorskip(engine)
    if engine == "onnxruntime":
        pytest.importorskip("tf2onnx")
    res, err, rc = run_child(f"DIR = {saved!r}\n" + SCALED, {})
    assert rc == 0 and res.get("ok"), err[-3000:]
    body = """
mlp = tf.saved_model.load(DIR + "/scaled")
sig = mlp.signatures["serving_default"]
answered = drive()
b = served().buckets[1]
engine, text, static = b.pool.describe()["engine"], tf_autopar.status().text(), b.pool.describe().get("static_shapes")
before = float(np.max(np.abs(sig(x=X)["output_0"].numpy() - original()["output_0"].numpy())))
mlp.w.assign(mlp.w * 2.0)  # a variable write: the frozen copy is stale from here
after = sig(x=X)["output_0"].numpy()
report(engine=engine, text=text, static=static, before=before, tried=list(b.tried), failed=dict(served().engine_failed),
       after=float(np.max(np.abs(after - original()["output_0"].numpy()))), scale=float(np.max(np.abs(after))))
"""
    out = _run(saved, "Copy", body, tmp_path, env={"TF_AUTOPAR_ENGINES": engine})
    assert out["engine"] in (engine, f"{engine}-spinning"), out  # the family: both variants allowed
    assert f"{out['engine']} (" in out["text"], out["text"]
    if engine == "openvino":  # a second copy compiled for the bucket's calls (pools.static_shapes)
        assert out["static"] == [[1, 16]] and "a copy for 1x16" in out["text"], out
    assert out["before"] <= 1e-4 * 10 and out["after"] <= 1e-4 * out["scale"], out  # the write is seen at once


def test_the_served_calls_reach_a_conversions_pace_while_it_runs(saved, tmp_path):
    body = """
from tf_autopar.runtime.fastpath.engines import pacing
drive()
sig(x=X)
with pacing.watching() as calls:  # as a conversion child's driver watches (engines/conversion.py)
    for _ in range(5):
        sig(x=X)
    noted = list(calls)
report(noted=len(noted), runners=len({c[0] for c in noted}), timed=all(c[2] > 0 for c in noted),
       after=len(calls), engine=served().buckets[1].pool.describe()["engine"])
"""
    res = _run(saved, "Copy", body, tmp_path)
    assert res["noted"] == 5 and res["runners"] == 1 and res["timed"], res  # each served call, with its runner
    assert res["after"] == 5, res  # none once the watching ended

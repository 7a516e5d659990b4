"""The fast path (runtime/fastpath/): a SavedModel loaded after enable() serves its signatures
and restored functions from a frozen session, in real processes, as a server would run it.

The switch rule (frozen not slower in paired rounds) is timing and tested pure
(test_fastpath_rules.py); here the children set ``SWITCH_RATIO`` to infinity so that the
routing, the outputs and the fallbacks are what is checked, whatever the host's noise.
"""

from __future__ import annotations

import pytest

from _runtime_child import run_child

from tf_autopar.runtime.fastpath import rules

pytestmark = pytest.mark.tf

# Three SavedModels a user could bring: a conv net with batch norm, two inputs out of
# alphabetical order and a dict of two outputs (Keras export: serving_default and serve); an
# LSTM over int ids (a While loop); a tf.Module with two signatures, string and int64 inputs and
# variables a program may write.
BUILD = """
import numpy as np, tensorflow as tf, keras
keras.utils.set_random_seed(0)
img, meta = keras.Input((16, 16, 3), name="image"), keras.Input((4,), name="meta")
x = keras.layers.Conv2D(8, 3, padding="same")(img)
x = keras.layers.BatchNormalization(beta_initializer="random_normal", moving_mean_initializer="random_normal",
                                    moving_variance_initializer="ones")(x)
x = keras.layers.GlobalAveragePooling2D()(keras.layers.ReLU()(x))
h = keras.layers.Concatenate()([x, meta])
model = keras.Model({"meta": meta, "image": img}, {"scores": keras.layers.Dense(3)(h), "aux": keras.layers.Dense(1)(meta)})
model.export(DIR + "/vision", verbose=False)
model.save(DIR + "/vision.keras")
ids = keras.Input((12,), dtype="int32", name="ids")
r = keras.layers.LSTM(16)(keras.layers.Embedding(100, 8)(ids))
keras.Model(ids, keras.layers.Dense(2)(r)).export(DIR + "/rnn", verbose=False)

class Words(tf.Module):
    def __init__(self):
        self.table = tf.Variable(tf.random.stateless_normal((64, 4), seed=(1, 2)))
        self.scale = tf.Variable(2.0)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="words"),
                                  tf.TensorSpec([None], tf.int64, name="counts")])
    def embed(self, words, counts):
        ids = tf.strings.to_hash_bucket_fast(words, 64)
        v = tf.nn.embedding_lookup(self.table, ids) * self.scale
        return {"vector": v * tf.cast(counts, tf.float32)[:, None], "ids": ids}

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
    def norm(self, x):
        return {"y": x * self.scale + tf.reduce_sum(self.table)}

w = Words()
tf.saved_model.save(w, DIR + "/words", signatures={"embed": w.embed, "norm": w.norm})
report(ok=True)
"""

# What every child shares: the three models loaded after enable(), their inputs, and the
# original path (the function's own class) to compare with.
PRELUDE = """
import threading, time, numpy as np
import tf_autopar
st0 = tf_autopar.enable(__ENABLE__)
import tensorflow as tf
from tf_autopar.runtime import fastpath
from tf_autopar.runtime.fastpath import builder, memory, rules as fastpath_rules
memory.LOCK_DIRS = (os.environ["TF_AUTOPAR_LEASE_DIR"],)  # its own build lock (run_child's dir): a parallel test's build never skips the prebuild
fastpath_rules.SWITCH_RATIO = float("inf")
vision = tf.saved_model.load(DIR + "/vision")  # the others where a test uses them: the process plan is the last load's
def load(name): return tf.saved_model.load(DIR + "/" + name)
rng = np.random.default_rng(0)
V = dict(image=rng.standard_normal((1, 16, 16, 3)).astype(np.float32), meta=rng.standard_normal((1, 4)).astype(np.float32))
W = dict(words=np.array([b"tensor", b"flow", b"cpu"], dtype=object), counts=np.array([1, 2, 3], np.int64))
R = dict(ids=rng.integers(0, 100, (1, 12)).astype(np.int32))
def original(fn, *args, **kwargs):
    cls = getattr(type(fn), "_tf_autopar_original", type(fn))
    return cls.__call__(fn, *args, **kwargs)
def maxdiff(a, b):
    a, b = tf.nest.flatten(a), tf.nest.flatten(b)
    return max(float(np.max(np.abs(x.numpy().astype(np.float64) - y.numpy().astype(np.float64)))) for x, y in zip(a, b))
def bucket(fn_name, model="vision"):
    for s in tf_autopar.status().served:
        if s.function == fn_name and s.model.endswith(model):
            return {b.bucket: dict(path=b.path, served=b.served, calls=b.calls, reason=b.reason) for b in s.buckets}
    return None
"""


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> str:
    directory = str(tmp_path_factory.mktemp("fastpath_models"))
    res, err, rc = run_child(f"DIR = {directory!r}\n" + BUILD, {})
    assert rc == 0 and res.get("ok"), err[-3000:]
    return directory


def _run(saved: str, body: str, tmp_path, enable: str = "", env: dict | None = None, cache: str | None = None) -> dict:
    script = f"DIR = {saved!r}\n" + PRELUDE.replace("__ENABLE__", enable) + body
    res, err, rc = run_child(
        script, {"TF_AUTOPAR_CACHE_DIR": cache or str(tmp_path / "cache"), **(env or {})}, timeout=400
    )
    assert rc == 0, err[-4000:]
    assert res, err[-4000:]
    return res


def test_calls_switch_to_the_frozen_session_with_the_originals_outputs_and_errors(saved, tmp_path):
    res = _run(
        saved,
        """
sig = vision.signatures["serving_default"]
builder.BUILD_GATE = threading.Event()  # every build is held back until the gate opens
first = sig(**V)
held = bucket("signatures['serving_default']")
first_is_original = maxdiff(first, original(sig, **V)) == 0.0
builder.BUILD_GATE.set()
assert fastpath.wait_idle(180)
out = sig(**V)
ref = original(sig, **V)
after = bucket("signatures['serving_default']")
# bad input: the original's error, not ours
def error(call):
    try:
        call(); return None
    except Exception as e:
        return [type(e).__name__, str(e)]
bad_shape = dict(V, image=np.zeros((1, 15, 16, 3), np.float32))
errors = dict(
    shape=[error(lambda: sig(**bad_shape)), error(lambda: original(sig, **bad_shape))],
    missing=[error(lambda: sig(image=V["image"])), error(lambda: original(sig, image=V["image"]))],
    positional=[error(lambda: sig(V["image"], V["meta"])), error(lambda: original(sig, V["image"], V["meta"]))],
)
cast = dict(V, meta=V["meta"].astype(np.float64))  # the original casts; the fast path leaves it to it
cast_same = maxdiff(sig(**cast), original(sig, **cast)) == 0.0
tensors = {k: tf.constant(v) for k, v in V.items()}
tensor_diff = maxdiff(sig(**tensors), ref)
# several signatures, strings and int64, a While loop
words, rnn = load("words"), load("rnn")
emb, norm = words.signatures["embed"], words.signatures["norm"]
rsig = rnn.signatures["serving_default"]
for f, kw in ((emb, W), (norm, dict(x=V["meta"])), (rsig, R)):
    f(**kw)
assert fastpath.wait_idle(180)
others = {}
for name, f, kw, model in (("embed", emb, W, "words"), ("norm", norm, dict(x=V["meta"]), "words"),
                           ("serving_default", rsig, R, "rnn")):
    got, want = f(**kw), original(f, **kw)
    others[name] = dict(diff=maxdiff(got, want), keys=sorted(got), dtypes=[got[k].dtype.name for k in sorted(got)],
                        want_dtypes=[want[k].dtype.name for k in sorted(want)],
                        state=bucket(f"signatures[{name!r}]", model))
text = tf_autopar.status().text()
report(held=held, first_is_original=first_is_original, after=after, diff=maxdiff(out, ref), keys=sorted(out),
       types=sorted({type(v).__name__ for v in out.values()}), ref_types=sorted({type(v).__name__ for v in ref.values()}),
       dtypes={k: v.dtype.name for k, v in out.items()}, errors=errors, cast_same=cast_same, tensor_diff=tensor_diff,
       others=others, text=text, same_object=vision.signatures["serving_default"] is sig,
       class_name=type(sig).__name__, isinstance_ok=isinstance(sig, type(sig)._tf_autopar_original),
       warnings=list(tf_autopar.status().warnings))
""",
        tmp_path,
    )
    # the first call returned while the builder was held: it ran the original path, by mechanism
    assert res["held"] == {"1": {"path": "queued", "served": 0, "calls": 1, "reason": ""}}, res["held"]
    assert res["first_is_original"]
    assert res["after"]["1"]["path"] == "frozen session" and res["after"]["1"]["served"] >= 1, res["after"]
    assert res["diff"] <= 1e-4 and res["tensor_diff"] <= 1e-4
    assert res["keys"] == ["aux", "scores"] and res["types"] == res["ref_types"] == ["EagerTensor"]
    assert res["dtypes"] == {"aux": "float32", "scores": "float32"}
    for kind, (ours, theirs) in res["errors"].items():
        assert ours is not None and ours == theirs, (kind, ours, theirs)
    assert res["cast_same"]
    for name, o in res["others"].items():
        assert o["diff"] == 0.0 or o["diff"] <= 1e-4, (name, o)
        assert o["dtypes"] == o["want_dtypes"], (name, o)
        bucket = {"embed": "4"}.get(name, "1")  # three words: bucket 4
        assert o["state"][bucket]["path"] == "frozen session", (name, o["state"])
    assert res["others"]["embed"]["keys"] == ["ids", "vector"]
    assert res["same_object"] and res["class_name"] == "_WrapperFunction" and res["isinstance_ok"]
    assert "signatures['serving_default'] of" in res["text"] and "frozen session" in res["text"]
    assert "the original path's speed" in res["text"]
    # the one warning: the float64 call, not routed, with what to change (once)
    assert len(res["warnings"]) == 1 and "of another dtype" in res["warnings"][0], res["warnings"]


def test_restored_function_and_concurrent_callers(saved, tmp_path):
    res = _run(
        saved,
        """
spec = vision.serve.concrete_functions[0].structured_input_signature[0]
args = (dict(V),)  # Keras export: one positional argument, a dict by input name
serve_first = vision.serve(*args)
assert fastpath.wait_idle(180)
serve_out = vision.serve(*args)
serve_ref = original(vision.serve, *args)
sig = vision.signatures["serving_default"]
sig(**V); assert fastpath.wait_idle(180)
ref = original(sig, **V)
counts, bad = [0] * 8, []
stop = time.monotonic() + 2.0
def work(i):
    x = dict(image=V["image"] + i, meta=V["meta"])
    want = original(sig, **x)
    while time.monotonic() < stop:
        got = sig(**x)
        counts[i] += 1
        if maxdiff(got, want) > 1e-4:
            bad.append(i)
threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
for t in threads: t.start()
for t in threads: t.join()
report(spec=str(spec), serve_type=type(serve_out).__name__, serve_diff=maxdiff(serve_out, serve_ref),
       serve_state=bucket("serve"), counts=counts, bad=bad, state=bucket("signatures['serving_default']"))
""",
        tmp_path,
    )
    assert res["serve_type"] == "dict", res  # what the original returns for this model
    assert res["serve_diff"] <= 1e-4
    assert res["serve_state"]["1"]["path"] == "frozen session" and res["serve_state"]["1"]["served"] >= 1
    counts = res["counts"]
    assert not res["bad"], res["bad"]
    assert min(counts) >= max(counts) / 5, counts  # every caller is served, none starved
    assert res["state"]["1"]["served"] >= sum(counts) * 0.9  # concurrent calls stay on the frozen session


def test_a_variable_write_routes_back_then_refreezes(saved, tmp_path):
    res = _run(
        saved,
        """
words = load("words")
norm = words.signatures["norm"]
x = dict(x=V["meta"])
norm(**x); assert fastpath.wait_idle(180)
before = norm(**x)["y"].numpy()
state_before = bucket("signatures['norm']", "words")
words.scale.assign(5.0)
right_after = norm(**x)["y"].numpy()  # the original path: the frozen constants are stale
want = original(norm, **x)["y"].numpy()
assert fastpath.wait_idle(180)
norm(**x); assert fastpath.wait_idle(180)
later = norm(**x)["y"].numpy()
report(state_before=state_before, state_after=bucket("signatures['norm']", "words"),
       changed=float(np.max(np.abs(before - want))), right_after=float(np.max(np.abs(right_after - want))),
       later=float(np.max(np.abs(later - want))))
""",
        tmp_path,
    )
    assert res["state_before"]["1"]["path"] == "frozen session"
    assert res["changed"] > 0.1  # the write changed the outputs
    assert res["right_after"] == 0.0 and res["later"] <= 1e-5
    assert res["state_after"]["1"]["path"] == "frozen session" and res["state_after"]["1"]["served"] >= 1


@pytest.mark.parametrize("how", ["optimize=False", "env", "training"])
def test_opt_outs_keep_the_original_path(saved, tmp_path, how):
    enable = {"optimize=False": "optimize=False", "env": "", "training": "mode='training'"}[how]
    env = {"TF_AUTOPAR_FAST_PATH": "0"} if how == "env" else {}
    res = _run(
        saved,
        """
sig = vision.signatures["serving_default"]
sig(**V); sig(**V)
report(routed=hasattr(type(sig), "_tf_autopar_original"), served=[s.function for s in tf_autopar.status().served])
""",
        tmp_path,
        enable=enable,
        env=env,
    )
    assert res == {"routed": False, "served": []}


def test_a_failing_build_falls_open_with_one_warning(saved, tmp_path):
    res = _run(
        saved,
        """
sig = vision.signatures["serving_default"]
outs = [sig(**V) for _ in range(3)]
assert fastpath.wait_idle(180)
outs += [sig(**V) for _ in range(3)]
ref = original(sig, **V)
report(diffs=[maxdiff(o, ref) for o in outs], state=bucket("signatures['serving_default']"),
       warnings=[w for w in tf_autopar.status().warnings if "frozen" in w])
""",
        tmp_path,
        env={"TF_AUTOPAR_TEST_FAIL": "fast path build"},
    )
    assert res["diffs"] == [0.0] * 6
    assert res["state"]["1"]["path"] == "original" and "planted failure" in res["state"]["1"]["reason"]
    assert len(res["warnings"]) == 1 and len(res["warnings"][0]) < 400, res["warnings"]


def test_over_the_memory_bound_it_stays_on_the_original_path_and_says_so(saved, tmp_path):
    res = _run(
        saved,
        """
sig = vision.signatures["serving_default"]
sig(**V); assert fastpath.wait_idle(180); out = sig(**V)
st = tf_autopar.status()
report(diff=maxdiff(out, original(sig, **V)), text=st.text(), warnings=list(st.warnings))
""",
        tmp_path,
        env={"TF_AUTOPAR_FAST_PATH_MAX_MB": "0"},
    )
    assert res["diff"] == 0.0
    assert "original path: its frozen copy would add about" in res["text"]
    assert any("TF_AUTOPAR_FAST_PATH_MAX_MB" in w for w in res["warnings"])


def test_the_next_start_plans_for_the_observed_batch_and_serves_its_first_call_frozen(saved, tmp_path):
    cache = str(tmp_path / "shared-cache")
    first = _run(
        saved,
        """
sig = vision.signatures["serving_default"]
X = dict(image=np.repeat(V["image"], 8, 0), meta=np.repeat(V["meta"], 8, 0))
for _ in range(30): sig(**X)
assert fastpath.wait_idle(180)
for _ in range(10): sig(**X)
report(state=bucket("signatures['serving_default']"), explain=tf_autopar.status().process.explain)
""",
        tmp_path,
        cache=cache,
    )
    assert first["state"]["8"]["path"] == "frozen session"
    assert "the batch is not given" in first["explain"]
    second = _run(
        saved,
        """
sig = vision.signatures["serving_default"]
loaded_state = bucket("signatures['serving_default']")
X = dict(image=np.repeat(V["image"], 8, 0), meta=np.repeat(V["meta"], 8, 0))
out = sig(**X)
first_call = bucket("signatures['serving_default']")
assert fastpath.wait_idle(180)
report(loaded_state=loaded_state, first_call=first_call, diff=maxdiff(out, original(sig, **X)),
       after_check=bucket("signatures['serving_default']"), explain=tf_autopar.status().process.explain)
""",
        tmp_path,
        cache=cache,
    )
    assert second["loaded_state"]["8"]["path"] == "frozen session"  # built while the model loaded
    assert second["first_call"]["8"]["served"] == 1  # the very first call was answered by it
    assert second["diff"] <= 1e-4 and second["after_check"]["8"]["path"] == "frozen session"
    assert "the batch is 8: batch 5-8 in 100% of 40 calls in an earlier run" in second["explain"], second["explain"]


def test_keras_predict_of_one_batch_is_served_frozen_and_the_rest_by_keras(saved, tmp_path):
    res = _run(
        saved,
        """
import keras
km = keras.models.load_model(DIR + "/vision.keras")
x = dict(V)  # the model takes a dict by input name
ref = km.__class__.predict(km, x, verbose=0)
km.predict(x, verbose=0)
assert fastpath.wait_idle(180)
out = km.predict(x, verbose=0)
state = bucket("predict", "vision.keras")
big = {k: np.repeat(a, 40, 0) for k, a in x.items()}  # 40 rows: more than one of predict's batches, Keras's own loop
km.predict(big, verbose=0)
km.predict(x, verbose=0, callbacks=[keras.callbacks.Callback()])
after = bucket("predict", "vision.keras")
tf_autopar.disable()
report(diff=max(float(np.max(np.abs(out[k] - ref[k]))) for k in ref), types=sorted({type(v).__name__ for v in out.values()}),
       keys=sorted(out), state=state, after=after, unrouted="predict" not in vars(km))
""",
        tmp_path,
    )
    assert res["diff"] <= 1e-4 and res["types"] == ["ndarray"] and res["keys"] == ["aux", "scores"]
    assert res["state"]["1"]["path"] == "frozen session" and res["state"]["1"]["served"] == 1, res["state"]
    assert res["after"]["1"]["served"] == 1 and "64" not in res["after"]  # 40 rows and callbacks: Keras's predict
    assert res["unrouted"]


def test_live_tuning_tries_one_neighbour_at_a_time_and_the_next_start_serves_the_result(saved, tmp_path):
    cache = str(tmp_path / "live-cache")
    body = """
sig = vision.signatures["serving_default"]
from tf_autopar.runtime.fastpath.routing.base import ATTR
served = lambda: vars(sig)[ATTR]  # the current sig's: another loaded model's may linger until Python collects it
most_pools, words, t0 = 0, "", time.monotonic()
sig(**V); assert fastpath.wait_idle(180)
while time.monotonic() - t0 < 120:
    sig(**V)
    most_pools = max(most_pools, len(served().pools))
    rec = next(s for s in tf_autopar.status().served if s.function == "signatures['serving_default']")
    words = rec.buckets[0].tuning if rec.buckets else ""
    if words.startswith("tuned live"):
        break
    fastpath.wait_idle(60)
b = served().buckets[1]
report(words=words, most_pools=most_pools, tried=list(b.tried), key=list(b.key), text=tf_autopar.status().text(),
       diff=maxdiff(sig(**V), original(sig, **V)))
"""
    first = _run(saved, body, tmp_path, cache=cache)
    assert first["words"].startswith("tuned live"), first["text"]
    assert first["tried"], first  # the plan's neighbours on this host were tried
    assert first["most_pools"] <= 2  # the serving session and at most one candidate
    assert first["diff"] <= 1e-4
    second = _run(
        saved,
        """
sig = vision.signatures["serving_default"]
b0 = next(s for s in fastpath._served if s.name == "signatures['serving_default']").buckets[1]
sig(**V); assert fastpath.wait_idle(180)
for _ in range(20): sig(**V)
b = next(s for s in fastpath._served if s.name == "signatures['serving_default']").buckets[1]
report(key=list(b0.key), tuned=b.tuned, tuned0=b0.tuned, same=b is b0, reason=b.reason, trial=b.trial is not None, served=b.served)
""",
        tmp_path,
        cache=cache,
    )
    assert second["key"] == first["key"], second  # built at load with what live tuning ended on
    assert second["tuned"] == "done" and not second["trial"] and second["served"] == 21, second


def test_a_start_that_ends_while_tuning_leaves_its_winner_and_the_next_start_tries_only_the_rest(saved, tmp_path):
    """A server stopped before live tuning finished (a slow model's 60 s): the winner so far is
    what the next start builds at load and serves from its first call, and it tries only the
    candidates the first start had not (not the whole list again from the plan's setting)."""
    cache = str(tmp_path / "unfinished-cache")
    first = _run(
        saved,
        """
fastpath_rules.TUNE_NOISE = -1  # any candidate wins at its first look: a win, then the process ends
sig = vision.signatures["serving_default"]
from tf_autopar.runtime.fastpath.routing.base import ATTR
served = lambda: vars(sig)[ATTR]  # the current sig's: another loaded model's may linger until Python collects it
sig(**V); assert fastpath.wait_idle(180)
t0 = time.monotonic()
while time.monotonic() - t0 < 120 and not served().buckets[1].won:
    sig(**V)
    fastpath.wait_idle(60)
b = served().buckets[1]
left = ([b.trial.key] if b.trial is not None else []) + list(b.candidates)
from tf_autopar.runtime.fastpath import report as fastpath_report
entry = fastpath_report.summary(served())["buckets"]["1"]
report(key=list(b.key), won=dict(b.won), tuned=b.tuned, left=[fastpath_rules.label(k) for k in left],
       tried=[t.split(":", 1)[0] for t in b.tried], entry=entry)
""",
        tmp_path,
        cache=cache,
    )
    assert first["won"] and first["tuned"] == "" and first["left"], first
    assert first["won"]["to"] == rules.label(tuple(first["key"])), first
    entry = first["entry"]
    assert entry["tuned"] == "unfinished" and entry["pending"] == first["left"], entry
    assert [entry["inter_op"], entry["intra_op"], entry["streams"]] == first["key"][:3], entry
    second = _run(
        saved,
        """
b0 = next(s for s in fastpath._served if s.name == "signatures['serving_default']").buckets[1]
at_load = dict(key=list(b0.key), pending=b0.pending, tuned=b0.tuned, reason=b0.reason)
sig = vision.signatures["serving_default"]
sig(**V); assert fastpath.wait_idle(180)
b = next(s for s in fastpath._served if s.name == "signatures['serving_default']").buckets[1]
queued = [fastpath_rules.label(k) for k in ([b.trial.key] if b.trial is not None else []) + list(b.candidates)]
report(at_load=at_load, first_served=b0.served >= 1 and b is b0, queued=queued, tuned=b.tuned)
""",
        tmp_path,
        cache=cache,
    )
    at_load = second["at_load"]
    assert at_load["key"] == first["key"] and at_load["reason"] == "built at load: it won last time", second
    assert at_load["pending"] == first["left"] and at_load["tuned"] == "", second
    assert second["first_served"], second  # the first call: the winner, built at load
    # what is tried now: what was left, in its order; none of what the first start tried
    assert second["queued"] == first["left"], (second, first)
    assert not set(second["queued"]) & set(first["tried"]), (second, first)


def test_a_plan_that_lost_its_switch_check_is_tried_again_against_the_neighbour_that_passed(saved, tmp_path):
    """A switch check compares with the original path, on a noisy host: the plan losing it says
    little about the plan against the neighbour that then passed, so live tuning tries it first."""
    body = """
real = fastpath_rules.switch_verdict
checks = []
def first_loses(times_o, times_f):  # the plan's check (the first) loses, the neighbours' pass
    checks.append(1)
    ok, speedup, spread = real(times_o, times_f)
    return len(checks) > 1, speedup, spread
fastpath_rules.switch_verdict = first_loses
sig = vision.signatures["serving_default"]
from tf_autopar.runtime.fastpath.routing.base import ATTR
served = lambda: vars(sig)[ATTR]  # the current sig's: another loaded model's may linger until Python collects it
sig(**V); assert fastpath.wait_idle(180)
t0, words = time.monotonic(), ""
while time.monotonic() - t0 < 120 and not words.startswith("tuned live"):
    sig(**V)
    rec = next(s for s in tf_autopar.status().served if s.function == "signatures['serving_default']")
    words = rec.buckets[0].tuning if rec.buckets else ""
    fastpath.wait_idle(60)
b = served().buckets[1]
plan = fastpath_rules.label(fastpath.plan_key(b.plan))
report(words=words, tried=list(b.tried), plan=plan, lost=[fastpath_rules.label(k) for k in b.lost],
       text=tf_autopar.status().text(), checks=len(checks))
"""
    res = _run(saved, body, tmp_path)
    plan, tried = res["plan"], res["tried"]
    assert res["lost"] == [plan] and res["checks"] == 2, res
    assert tried[0].startswith(f"{plan}:") and "not taken" in tried[0], res
    assert tried[1].startswith(f"{plan}:") and "not taken" not in tried[1], res  # tried again, first, in a live trial
    assert res["words"].startswith("tuned live"), res
    winners = [t.split(":", 1)[0] for t in tried if t.split(":", 1)[1].startswith(" win")]
    if not winners:  # the neighbour that passed held against every setting tried: the text says whose setting serves
        assert f"where the setting planned by the rule ({plan}) lost" in res["text"], res["text"]
    else:  # a setting won a live trial (the plan, or a third setting beating the neighbour): the text says so
        assert "tuned live on" in res["text"], res["text"]
        assert f"{winners[-1]} won over" in res["words"], res


def test_a_build_beside_traffic_is_checked_on_the_live_calls_and_with_live_tuning_off_the_plan_serves(saved, tmp_path):
    """Calls keep coming while the bucket builds (two threads, as a threaded server): the switch is
    decided on those calls, every other one from the frozen session, not in paired rounds on the
    builder thread beside them; every answer meanwhile is the original's. A check the frozen
    session cannot pass (SWITCH_RATIO near 0) keeps the original path and says on what evidence.
    Live tuning is switched off in this process (TF_AUTOPAR_TUNE_LIVE=0): the bucket that switched
    keeps serving the plan's session, with no candidate, trial or tried setting, call after call."""
    res = _run(
        saved,
        """
import logging
said = []
class Keep(logging.Handler):
    def emit(self, record): said.append(record.getMessage())
logging.getLogger("tf_autopar").addHandler(Keep()); logging.getLogger("tf_autopar").setLevel(logging.INFO)
def drive(fn, kw, model, name):
    ref, worst, stop, seen = original(fn, **kw), [0.0], threading.Event(), set()
    def work():
        while not stop.is_set():
            worst[0] = max(worst[0], maxdiff(fn(**kw), ref))
    threads = [threading.Thread(target=work) for _ in range(2)]
    for t in threads: t.start()
    t0, path = time.monotonic(), None
    while time.monotonic() - t0 < 150 and path not in ("frozen session", "original"):
        rec = bucket(name, model) or {}
        path = rec.get(1, {}).get("path")
        seen.add(str(path))
        time.sleep(0.002)
    stop.set()
    for t in threads: t.join()
    fastpath.wait_idle(60)
    return dict(path=bucket(name, model)[1]["path"], reason=bucket(name, model)[1]["reason"], worst=worst[0],
                seen=sorted(seen))
sig = vision.signatures["serving_default"]
taken = drive(sig, V, "vision", "signatures['serving_default']")
for _ in range(30): sig(**V)
b = next(s for s in fastpath._served if s.name == "signatures['serving_default']").buckets[1]  # vision's: rnn not loaded yet
off = dict(candidates=len(b.candidates), tried=b.tried, trial=b.trial is not None, path=b.state)
fastpath_rules.SWITCH_RATIO = 1e-9  # the frozen session would have to be a billion times faster
rnn = load("rnn")
kept = drive(rnn.signatures["serving_default"], R, "rnn", "signatures['serving_default']")
report(taken=taken, off=off, kept=kept, said=[m for m in said if "paired" in m])
""",
        tmp_path,
        env={"TF_AUTOPAR_TUNE_LIVE": "0"},
    )
    assert res["taken"]["path"] == "frozen session" and res["taken"]["worst"] <= 1e-4, res
    assert res["off"] == {"candidates": 0, "tried": [], "trial": False, "path": "frozen session"}, res
    assert any("serves batch 1 from a frozen session" in m and "paired live calls" in m for m in res["said"]), res
    assert res["kept"]["path"] == "original" and res["kept"]["worst"] <= 1e-4, res
    assert "paired live calls" in res["kept"]["reason"] and "not taken" in res["kept"]["reason"], res
    assert not any("paired rounds" in m for m in res["said"]), res  # neither was decided on the builder

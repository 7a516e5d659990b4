"""enable() in real TensorFlow child processes: what the process really runs with."""

from __future__ import annotations

import os
import re
import textwrap

import pytest

from _runtime_child import cpus, run_child

pytestmark = pytest.mark.tf

MATMUL_CHAIN = """
import numpy as np
x = tf.random.normal([384, 384])
@tf.function
def chain(x):
    for _ in range(12):
        x = tf.matmul(x, x) * 0.001
    return x
chain(x)
# enough calls for /proc's 10 ms CPU ticks to tell the threads apart (6 calls gave too few ticks
# to count a second busy thread once in a while)
intra = busy_threads(lambda: [chain(x).numpy() for _ in range(30)])
"""


def needs_two_cpus() -> None:
    if cpus() < 2:
        pytest.skip("needs at least 2 CPUs in the affinity mask")


def test_enable_before_start_sets_the_inter_op_pool(tmp_path):
    needs_two_cpus()
    script = """
    import tf_autopar
    st = tf_autopar.enable(width=1)          # plan: one inter-op thread
    import tensorflow as tf
    tf.constant(1.0) + 1.0                   # runtime starts here
    report(tf_compute=tf_compute_threads(), planned=st.process.planned_inter, phase=st.process.phase,
           applied=st.process.applied, warnings=list(tf_autopar.status().warnings))
    """
    res, err, rc = run_child(script, {"TF_AUTOPAR_CACHE_DIR": str(tmp_path)})
    assert rc == 0, err
    assert res["phase"] == "before-start"
    assert res["planned"] == 1
    assert res["tf_compute"] == 1  # TF's default here would be one per CPU
    assert res["applied"]["TF_NUM_INTEROP_THREADS"] == "1"
    assert res["applied"]["TF_OVERRIDE_GLOBAL_THREADPOOL"] == "1"
    assert res["warnings"] == []
    control, err, rc = run_child(
        "import tensorflow as tf\ntf.constant(1.0) + 1.0\nreport(tf_compute=tf_compute_threads())"
    )
    assert rc == 0, err
    assert control["tf_compute"] == cpus()  # the difference above is enable()'s doing


def test_intra_op_threads_really_used_and_user_variable_kept(tmp_path):
    needs_two_cpus()
    script = (
        textwrap.dedent("""
    import tensorflow as tf                  # enable() after the import, before the first op
    import tf_autopar
    st = tf_autopar.enable()
    """)
        + MATMUL_CHAIN
        + textwrap.dedent("""
    report(intra=intra, planned_intra=st.process.planned_intra, kept=st.process.kept_user,
           env=os.environ.get("TF_NUM_INTRAOP_THREADS"))
    """)
    )
    planned, err, rc = run_child(script, {"TF_AUTOPAR_CACHE_DIR": str(tmp_path)})
    assert rc == 0, err
    assert planned["planned_intra"] == cpus()
    assert planned["intra"]["busy"] >= 2  # the chain's matmuls ran on several threads at once
    user, err, rc = run_child(script, {"TF_AUTOPAR_CACHE_DIR": str(tmp_path), "TF_NUM_INTRAOP_THREADS": "1"})
    assert rc == 0, err
    assert user["kept"] == {"TF_NUM_INTRAOP_THREADS": "1"}
    assert user["env"] == "1"
    assert user["planned_intra"] == 1  # the plan reports the user's value
    # and TF really ran the matmuls one thread at a time: at most one core's worth of CPU per
    # second of wall time (which thread ran them may change; other load only lowers the ratio)
    assert user["intra"]["cpu_per_wall"] < 1.3, user["intra"]


def test_two_sessions_get_their_own_pools(tmp_path):
    needs_two_cpus()
    script = """
    import tf_autopar
    tf_autopar.enable()
    import tensorflow as tf, numpy as np
    tf1 = tf.compat.v1
    def graph(branches):
        g = tf.Graph()
        with g.as_default():
            x = tf1.placeholder(tf.float32, [512, 512])
            outs = []
            for b in range(branches):
                y = x
                for _ in range(6):
                    y = tf.matmul(y, y) * (0.001 * (b + 1))  # distinct branches: no CSE
                outs.append(y)
            out = tf.add_n(outs)
        return g, x, out
    xv = np.random.rand(512, 512).astype(np.float32)
    base = tf_compute_threads()
    g1, x1, o1 = graph(1)
    s1 = tf1.Session(graph=g1, config=tf1.ConfigProto(intra_op_parallelism_threads=1))  # user field
    s1.run(o1, {x1: xv})
    after1 = tf_compute_threads()
    g2, x2, o2 = graph(4)
    s2 = tf1.Session(graph=g2)
    s2.run(o2, {x2: xv})
    after2 = tf_compute_threads()
    busy1 = busy_threads(lambda: [s1.run(o1, {x1: xv}) for _ in range(40)])
    busy2 = busy_threads(lambda: [s2.run(o2, {x2: xv}) for _ in range(10)])
    st = tf_autopar.status()
    report(inter1=after1 - base, inter2=after2 - after1, busy1=busy1, busy2=busy2,
           recs=st.to_dict()["sessions"], text=str(st))
    """
    res, err, rc = run_child(script, {"TF_AUTOPAR_CACHE_DIR": str(tmp_path)})
    assert rc == 0, err
    r1, r2 = res["recs"]
    assert r1["avg_width"] == 1 and r2["avg_width"] == 4
    assert r1["inter_op"] == 1 and r2["inter_op"] == min(4, cpus())
    assert r1["intra_op"] == 1 and "intra_op_parallelism_threads=1" in r1["user_fields"]
    assert r2["intra_op"] == cpus() and r2["intra_per_session"]
    # what really happened: each session spawned its own inter-op pool of the planned size ...
    assert res["inter1"] == 1
    assert res["inter2"] == min(4, cpus())
    # ... and its own intra-op pool: the user's 1 thread for the first, several for the second
    # ran inline: no intra-op pool thread worked (the caller may show CPU time beside the inter-op thread)
    assert res["busy1"]["pool_busy"] == 0 and res["busy1"]["busy"] <= 2, res["busy1"]
    assert res["busy2"]["pool_busy"] >= 2, res["busy2"]
    assert re.search(r"TF1 session 2: \d+ heavy ops, width 4 -> ", res["text"]), res["text"]


def test_late_and_repeated_enable_warns_once_and_never_raises(tmp_path):
    script = """
    import logging
    records = []
    class H(logging.Handler):
        def emit(self, r): records.append(r.getMessage())
    logging.getLogger("tf_autopar").addHandler(H())
    import tensorflow as tf
    tf.constant(1.0) + 1.0                    # runtime started by "some library"
    import tf_autopar
    st = tf_autopar.enable(width=1)
    st2 = tf_autopar.enable(width=1)
    st3 = tf_autopar.enable(mode="throughput")
    g = tf.Graph()
    with g.as_default():
        out = tf.matmul(tf.ones([4, 4]), tf.ones([4, 4]))
    v = tf.compat.v1.Session(graph=g).run(out)
    warns = [m for m in records if "tf_autopar" in m]
    report(warnings=warns, phase=st.process.phase, not_applied=list(st.process.not_applied),
           v=float(v[0, 0]), sessions=len(tf_autopar.status().sessions))
    """
    res, err, rc = run_child(script, {"TF_AUTOPAR_CACHE_DIR": str(tmp_path)})
    assert rc == 0, err
    assert "cannot be modified after initialization" not in err
    assert res["phase"] == "after-start"
    assert len(res["warnings"]) == 1, res["warnings"]
    w = res["warnings"][0]
    assert "Applied:" in w and "Not applied:" in w and "Fix:" in w
    assert res["v"] == 4.0
    assert res["sessions"] == 1  # the session patch still applied after a late enable()


def test_planted_failures_leave_the_program_running(tmp_path):
    script = """
    import logging
    records = []
    class H(logging.Handler):
        def emit(self, r): records.append(r.getMessage())
    logging.getLogger("tf_autopar").addHandler(H())
    import tf_autopar
    tf_autopar.enable()
    import tensorflow as tf
    g = tf.Graph()
    with g.as_default():
        out = tf.matmul(tf.ones([4, 4]), tf.ones([4, 4]))
    s = tf.compat.v1.Session(graph=g)
    v1 = float(s.run(out)[0, 0])
    s2 = tf.compat.v1.Session(graph=g)
    @tf.function
    def f(x):
        return tf.matmul(x, x) + tf.matmul(x, x)
    v2 = float(f(tf.ones([3, 3]))[0, 0])
    report(v1=v1, v2=v2, warnings=records, cfg=s._config.inter_op_parallelism_threads,
           sessions=len(tf_autopar.status().sessions), functions=len(tf_autopar.status().functions))
    """
    res, err, rc = run_child(script, {"TF_AUTOPAR_CACHE_DIR": str(tmp_path), "TF_AUTOPAR_TEST_FAIL": "analysis"})
    assert rc == 0, err
    assert res["v1"] == 4.0 and res["v2"] == 6.0
    assert res["cfg"] == 0  # the session got the user's (default) config
    assert res["sessions"] == 0 and res["functions"] == 0
    fails = [w for w in res["warnings"] if "could not" in w]
    assert len(fails) == 2, res["warnings"]  # one per kind (sessions, functions), not one per call
    assert all("TensorFlow runs with its own settings" in w for w in fails)
    # a failure inside enable() itself: nothing applied, program unaffected
    res, err, rc = run_child(script, {"TF_AUTOPAR_CACHE_DIR": str(tmp_path), "TF_AUTOPAR_TEST_FAIL": "enable"})
    assert rc == 0, err
    assert res["v1"] == 4.0 and res["v2"] == 6.0 and res["sessions"] == 0
    assert len(res["warnings"]) == 1 and "could not apply its thread plan" in res["warnings"][0]


def test_disable_removes_every_patch(tmp_path):
    script = """
    import tensorflow as tf
    from tensorflow.python.client import session
    from tensorflow.python.eager.polymorphic_function import transform
    orig_init, orig_cbs = session.BaseSession.__init__, list(transform.CONCRETE_FUNCTION_CALLBACKS)
    import tf_autopar
    tf_autopar.enable()
    patched = session.BaseSession.__init__ is not orig_init and len(transform.CONCRETE_FUNCTION_CALLBACKS) == len(orig_cbs) + 1
    env_on = {k: os.environ.get(k) for k in ("TF_NUM_INTEROP_THREADS", "TF_OVERRIDE_GLOBAL_THREADPOOL")}
    st = tf_autopar.disable()
    report(patched=patched, env_on=env_on, restored=session.BaseSession.__init__ is orig_init,
           cbs=transform.CONCRETE_FUNCTION_CALLBACKS == orig_cbs,
           env_off={k: os.environ.get(k) for k in ("TF_NUM_INTEROP_THREADS", "TF_OVERRIDE_GLOBAL_THREADPOOL")},
           enabled=st.enabled, patches=list(st.patches))
    """
    res, err, rc = run_child(script, {"TF_AUTOPAR_CACHE_DIR": str(tmp_path)})
    assert rc == 0, err
    assert res["patched"] and res["restored"] and res["cbs"]
    assert res["env_on"]["TF_OVERRIDE_GLOBAL_THREADPOOL"] == "1"
    assert res["env_off"] == {"TF_NUM_INTEROP_THREADS": None, "TF_OVERRIDE_GLOBAL_THREADPOOL": None}
    assert not res["enabled"] and res["patches"] == []


def test_cooperating_workers_plan_for_disjoint_shares(tmp_path):
    """Two workers (WEB_CONCURRENCY=2, no launcher) each call enable(): each is bound to its own
    core and plans 1x1, where TensorFlow's default would give both the whole host."""
    needs_two_cpus()
    import subprocess
    import sys
    import json

    from _runtime_child import PRELUDE, ROOT

    script = PRELUDE + textwrap.dedent("""
    import glob, time
    import tf_autopar
    st = tf_autopar.enable()
    import tensorflow as tf
    (tf.ones([64, 64]) @ tf.ones([64, 64])).numpy()
    open(os.path.join(sys.argv[1], f"ready-{os.getpid()}"), "w").close()
    deadline = time.time() + 120  # hold the lease until both workers have claimed theirs
    while len(glob.glob(os.path.join(sys.argv[1], "ready-*"))) < 2 and time.time() < deadline:
        time.sleep(0.05)
    report(affinity=sorted(os.sched_getaffinity(0)), share=st.process.share, bound=st.process.bound_cpus,
           planned=[st.process.planned_inter, st.process.planned_intra], tf_compute=tf_compute_threads())
    """)
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("TF_NUM_", "TF_AUTOPAR", "OMP_")) or k == "TF_AUTOPAR_ENGINES"
    }
    env.update(
        PYTHONPATH=ROOT,
        TF_CPP_MIN_LOG_LEVEL="2",
        WEB_CONCURRENCY="2",
        TF_AUTOPAR_LEASE_DIR=str(tmp_path / "lease"),
        TF_AUTOPAR_CACHE_DIR=str(tmp_path / "cache"),
    )
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", script, str(tmp_path)],
            env=env,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for _ in range(2)
    ]
    results = []
    for w in workers:
        out, err = w.communicate(timeout=240)
        assert w.returncode == 0, err
        results.append(json.loads(next(l for l in out.splitlines() if l.startswith("RESULT "))[7:]))  # noqa: E741
    first, second = (set(r["affinity"]) for r in results)
    assert first and second and not first & second  # each on its own core
    assert sorted(r["share"]["index"] for r in results) == [0, 1]
    assert all(r["share"]["source"] == "lease" and r["share"]["count"] == 2 for r in results)
    assert all(r["planned"] == [1, 1] and r["tf_compute"] == 1 for r in results)


STATUS_PROGRAM = """
import os
os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:2])
import tf_autopar
tf_autopar.enable()
import numpy as np
import keras
import tensorflow as tf
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4)])
model.predict(np.zeros((2, 8)), verbose=0)
g = tf.Graph()
with g.as_default():
    x = tf.compat.v1.placeholder(tf.float32, [None, 8])
    y = tf.matmul(x, tf.ones([8, 8]))
with tf.compat.v1.Session(graph=g) as s:
    s.run(y, {x: np.zeros((1, 8))})
st = tf_autopar.status()
report(text=st.text(), pid=os.getpid(), data=st.to_dict())
"""

STATUS_TEXT = """\
tf_autopar: enabled in process PID, latency mode
  planned: 2 inter-op x 2 intra-op threads, for this host (no model given)
  applied before TensorFlow started: TF_NUM_INTEROP_THREADS=2 TF_NUM_INTRAOP_THREADS=2 TF_OVERRIDE_GLOBAL_THREADPOOL=1
    (tf.config.threading.get_*_parallelism_threads() report 0 for settings made this way: TensorFlow read them from the environment)
  TensorFlow runs 2 inter-op x 2 intra-op threads; its default here: 2 inter-op x 2 intra-op threads (one per CPU it may use)
  watching: new TF1 sessions (each planned for its own graph), tf.function and Keras models (each planned at its first call), model loads (tf.saved_model.load, keras.models.load_model, keras.layers.TFSMLayer)
  TF1 session 1: 1 heavy op, width 1 -> 1 inter-op x 2 intra-op threads, its own pools
  a Keras model's predict/fit/evaluate step: 1 heavy op, width 1 -> best at 1 inter-op x 1 intra-op threads, but the process pools were already fixed; the plan is saved for the next start
  warning: a Keras model's predict/fit/evaluate step (width 1, 1 heavy op) would run best with inter_op=1 intra_op=1, but the process pools are already fixed at 2x2. For inference now: fn = tf_autopar.optimize(model_or_function). The plan is cached: the next start of this program applies it when enable() runs before TensorFlow starts.
  next: to plan for your model, pass it: tf_autopar.enable('path/to/saved_model'), or load it with tf.saved_model.load / keras.models.load_model after enable(); enable(batch=N) gives its batch
  next: for inference now: fast = tf_autopar.optimize(model) runs it with its own plan; the next start of this program applies the saved plan"""


def test_status_text_speaks_the_users_words_and_to_dict_keeps_the_internals(tmp_path):
    """status() on a small program: what was planned and applied, in which process, against
    TensorFlow's default, and what to do next; hook names and Keras internals only in to_dict()."""
    needs_two_cpus()
    res, err, rc = run_child(STATUS_PROGRAM, {"TF_AUTOPAR_CACHE_DIR": str(tmp_path)})
    assert rc == 0, err
    assert res["text"].replace(f"process {res['pid']},", "process PID,") == STATUS_TEXT
    for internal in ("BaseSession", "CONCRETE_FUNCTION_CALLBACKS", "one_step_on", "before-start", "Session#"):
        assert internal not in res["text"]
    data = res["data"]
    assert data["process"]["phase"] == "before-start" and data["process"]["tf_default"] == 2
    assert any("BaseSession.__init__" in h for h in data["patches"])
    assert data["functions"][0]["name"].startswith("one_step_on") and data["sessions"][0]["session"] == "Session#1"

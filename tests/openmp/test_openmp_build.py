"""tf_autopar on a real OpenMP build (intel-tensorflow 2.14), each check in a fresh process:
what the OpenMP runtime really runs with is read from the runtime itself (omp_get_max_threads,
kmp_get_blocktime), not from the environment we set."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

from _runtime_child import ROOT, run_child

from tf_autopar.topology import detect_topology


def _cores_in_mask() -> int:
    topo = detect_topology()
    return math.ceil(len(os.sched_getaffinity(0)) / max(1, topo.threads_per_core))


def test_the_build_is_detected_before_tensorflow_starts_and_its_runtime_after():
    topo = detect_topology()
    assert topo.threading_runtime == "openmp"  # decided from the ELF files, without importing TensorFlow
    res, err, rc = run_child("""
    from tf_autopar.runtime.openmp import openmp_state
    before = openmp_state()
    import tensorflow as tf
    x = tf.random.normal([128, 128]); tf.linalg.matmul(x, x)
    report(before=before, after=openmp_state())
    """)
    assert rc == 0, err
    assert res["before"] is None  # nothing loaded until TensorFlow is imported
    assert res["after"]["library"].startswith("libiomp5")
    # TensorFlow's own defaults with no variable set, which the planner's OpenMP branch starts from:
    # one OpenMP thread per physical core of the mask, KMP_BLOCKTIME 1 ms (not OpenMP's 200 ms)
    assert res["after"]["max_threads"] == _cores_in_mask()
    assert res["after"]["blocktime_ms"] == 1


def test_the_plans_openmp_variables_reach_the_runtime_and_the_users_are_kept(tmp_path):
    script = """
    import tf_autopar
    st = tf_autopar.enable(width=2)   # two pools: the OpenMP teams are sized for them
    import tensorflow as tf
    x = tf.random.normal([128, 128]); tf.linalg.matmul(x, x)
    from tf_autopar.runtime.openmp import openmp_state
    report(applied=st.process.applied, kept=st.process.kept_user, state=openmp_state(),
           explain=st.process.explain)
    """
    res, err, rc = run_child(script, {"TF_AUTOPAR_CACHE_DIR": str(tmp_path)})
    assert rc == 0, err
    applied = res["applied"]
    assert res["state"]["max_threads"] == int(applied["OMP_NUM_THREADS"]) == int(applied["MKL_NUM_THREADS"])
    assert res["state"]["blocktime_ms"] == int(applied["KMP_BLOCKTIME"])
    assert "OpenMP" in res["explain"]
    user, err, rc = run_child(
        script, {"TF_AUTOPAR_CACHE_DIR": str(tmp_path), "OMP_NUM_THREADS": "1", "KMP_BLOCKTIME": "30"}
    )
    assert rc == 0, err
    assert user["kept"] == {"OMP_NUM_THREADS": "1", "KMP_BLOCKTIME": "30"}
    assert "OMP_NUM_THREADS" not in user["applied"] and "KMP_BLOCKTIME" not in user["applied"]
    assert user["state"]["max_threads"] == 1 and user["state"]["blocktime_ms"] == 30


def test_a_session_runs_under_its_plan_with_the_same_results(tmp_path):
    res, err, rc = run_child(
        """
    import tf_autopar
    tf_autopar.enable()
    import numpy as np, tensorflow as tf
    tf1 = tf.compat.v1
    g = tf.Graph()
    with g.as_default():
        x = tf1.placeholder(tf.float32, [2, 32, 32, 8])
        w = tf.constant(np.random.RandomState(0).rand(3, 3, 8, 16).astype(np.float32))
        branches = [tf.nn.relu(tf.nn.conv2d(x, w * (b + 1), 1, "SAME")) for b in range(3)]
        out = tf.add_n(branches)
    xv = np.random.RandomState(1).rand(2, 32, 32, 8).astype(np.float32)
    with tf1.Session(graph=g) as s:
        got = s.run(out, {x: xv})
    ref = sum(tf.nn.relu(tf.nn.conv2d(xv, w_ * (b + 1), 1, "SAME")).numpy()
              for b, w_ in enumerate([np.random.RandomState(0).rand(3, 3, 8, 16).astype(np.float32)] * 3))
    from tf_autopar.runtime.openmp import openmp_state
    report(close=bool(np.allclose(got, ref, rtol=1e-4, atol=1e-4)), recs=tf_autopar.status().to_dict()["sessions"],
           state=openmp_state(), applied=tf_autopar.status().process.applied)
    """,
        {"TF_AUTOPAR_CACHE_DIR": str(tmp_path)},
    )
    assert rc == 0, err
    assert res["close"]
    (rec,) = res["recs"]
    assert rec["avg_width"] == 3 and rec["inter_op"] >= 1  # planned for its own three-branch graph
    assert res["state"]["max_threads"] == int(res["applied"]["OMP_NUM_THREADS"])


def test_optimize_a_keras_2_model_gives_the_same_outputs(tmp_path):
    res, err, rc = run_child(
        """
    import tf_autopar
    tf_autopar.enable()
    import numpy as np, tensorflow as tf
    m = tf.keras.Sequential([tf.keras.layers.Dense(64, activation="relu", input_shape=(32,)),
                             tf.keras.layers.Dense(8)])
    x = np.random.RandomState(0).rand(4, 32).astype(np.float32)
    ref = m(x).numpy()
    fast = tf_autopar.optimize(m)
    out = fast(x)
    out = (out.numpy() if hasattr(out, "numpy") else np.asarray(out))
    m.layers[0].kernel.assign(tf.zeros_like(m.layers[0].kernel))   # a write after freezing ...
    out2 = fast(x)
    out2 = (out2.numpy() if hasattr(out2, "numpy") else np.asarray(out2))
    fast2 = tf_autopar.optimize(m)   # a second call works too
    report(same=bool(np.allclose(out, ref, rtol=1e-5, atol=1e-5)), tf=tf.__version__,
           fresh=bool(np.allclose(out2, m(x).numpy(), rtol=1e-5, atol=1e-5)), changed=bool(not np.allclose(out2, ref)),
           warnings=list(tf_autopar.status().warnings), second=fast2 is not None)
    """,
        {"TF_AUTOPAR_CACHE_DIR": str(tmp_path)},
    )
    assert rc == 0, err
    assert res["tf"].startswith("2.14") and res["same"] and res["second"]
    assert res["changed"] and res["fresh"]  # ... is never served stale (the write watch works on 2.14)
    assert res["warnings"] == []


def _save_module(path, module: str) -> None:
    """Save ``module`` (the source of a tf.Module class M with a ``serve`` tf.function) as a
    SavedModel with this build, in a child process (TensorFlow must not start in the test's)."""
    script = f"""
import tensorflow as tf
{module}
m = M()
tf.saved_model.save(m, {str(path)!r}, signatures={{"serving_default": m.serve}})
"""
    subprocess.run(
        [sys.executable, "-c", script],
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
        timeout=300,
    )


def _save_two_branch_savedmodel(path) -> None:
    _save_module(
        path,
        """
class M(tf.Module):
    def __init__(self):
        self.a = tf.Variable(tf.random.normal([64, 64], seed=1))
        self.b = tf.Variable(tf.random.normal([64, 64], seed=2))
    @tf.function(input_signature=[tf.TensorSpec([None, 64], tf.float32, name="x")])
    def serve(self, x):
        return {"y": tf.matmul(tf.matmul(x, self.a), self.b) + tf.matmul(x, self.b)}
""",
    )


def test_a_savedmodel_is_analysed_planned_and_traced_on_this_build(tmp_path):
    sm = tmp_path / "sm"
    _save_two_branch_savedmodel(sm)
    env = {
        **os.environ,
        "PYTHONPATH": ROOT,
        "TF_AUTOPAR_CACHE_DIR": str(tmp_path / "cache"),
        "TF_CPP_MIN_LOG_LEVEL": "3",
    }
    cli = [sys.executable, "-m", "tf_autopar.cli.main"]
    analysed = subprocess.run(
        [*cli, "analyze", str(sm), "--json"], capture_output=True, text=True, env=env, timeout=300
    )
    assert analysed.returncode == 0, analysed.stderr
    profile = json.loads(analysed.stdout)
    assert profile["heavy_ops"] == 3 and profile["max_width"] == 2
    planned = subprocess.run(
        [*cli, "plan", str(sm), "--batch", "1", "--format", "env"], capture_output=True, text=True, env=env, timeout=300
    )
    assert planned.returncode == 0, planned.stderr
    assert "OMP_NUM_THREADS=" in planned.stdout and "KMP_BLOCKTIME=" in planned.stdout
    traced = subprocess.run(
        [*cli, "trace", str(sm), "--steps", "3", "--json"], capture_output=True, text=True, env=env, timeout=600
    )
    assert traced.returncode == 0, traced.stderr
    doc = json.loads(traced.stdout)
    assert doc["backend"] == "native"  # the native tracer built against 2.14's headers and ran
    assert any("MatMul" in row["type"] for row in doc["by_type"])


def test_a_lookup_bound_savedmodel_gives_tensorflows_pool_the_teams_threads(tmp_path):
    """A recommender saved on this build: 8 look-ups per example into a 100,000 x 32 table, then
    one matmul. At batch 2048 the look-ups read 0.5 M elements against 34 M multiply-adds: about
    half the step, on TensorFlow's own pool, which gets the team's threads. At batch 1 they read
    256 elements, a light op: TensorFlow's pool keeps 1 thread."""
    sm = tmp_path / "rec"
    _save_module(
        sm,
        """
class M(tf.Module):
    def __init__(self):
        self.table = tf.Variable(tf.random.normal([100000, 32], seed=1))
        self.w = tf.Variable(tf.random.normal([256, 64], seed=2))
    @tf.function(input_signature=[tf.TensorSpec([None, 8], tf.int64, name="ids")])
    def serve(self, ids):
        rows = tf.reshape(tf.gather(self.table, ids), [-1, 256])
        return {"y": tf.matmul(rows, self.w)}
""",
    )
    env = {
        **os.environ,
        "PYTHONPATH": ROOT,
        "TF_AUTOPAR_CACHE_DIR": str(tmp_path / "cache"),
        "TF_CPP_MIN_LOG_LEVEL": "3",
    }
    env = {k: v for k, v in env.items() if not k.startswith(("TF_NUM_", "OMP_", "MKL_", "KMP_"))}

    def plan(batch: int) -> dict:
        out = subprocess.run(
            [sys.executable, "-m", "tf_autopar.cli.main", "plan", str(sm), "--batch", str(batch), "--format", "json"],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
        )
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)

    big, small = plan(2048), plan(1)
    assert big["runtime"] == "openmp" and small["runtime"] == "openmp"
    cores = big["usable_cpus"]
    assert (big["inter_op"], big["intra_op"], big["omp_threads"]) == (1, cores, cores)
    assert "look-ups take about" in big["settings"]["intra_op"]["reason"]
    assert (small["intra_op"], small["omp_threads"]) == (1, cores)
    assert "look-ups" not in small["settings"]["intra_op"]["reason"]


def test_the_main_thread_bound_by_openmp_is_not_a_change_of_the_cpu_limits(tmp_path):
    """The plan's KMP_AFFINITY=compact binds the thread that runs an eager op (the main one) to a
    CPU. The limits watch took that for the process's mask shrinking and re-planned every frozen
    session for fewer CPUs; the process's CPUs are its threads' union (topology/cpus.py)."""
    if len(os.sched_getaffinity(0)) < 2:
        import pytest

        pytest.skip("needs 2 CPUs in the mask: binding to one CPU of one changes nothing")
    res, err, rc = run_child(
        """
    import time
    import tf_autopar
    st = tf_autopar.enable()
    import tensorflow as tf
    class M(tf.Module):
        def __init__(self):
            self.k = tf.Variable(tf.random.normal((3, 3, 8, 8), seed=1))
        @tf.function(input_signature=[tf.TensorSpec([None, 16, 16, 8], tf.float32)])
        def serve(self, x):
            return {"y": tf.reduce_mean(tf.nn.conv2d(x, self.k, 1, "SAME"), [1, 2])}
    m = M()
    tf.saved_model.save(m, DIR + "/m", signatures={"serving_default": m.serve})
    sig = tf.saved_model.load(DIR + "/m").signatures["serving_default"]
    before = sorted(os.sched_getaffinity(0))
    x = tf.random.normal((4, 16, 16, 8), seed=2)
    t = time.monotonic()
    while time.monotonic() - t < 3.5:  # the watch looks once a second
        tf.nn.softmax(sig(x=tf.nn.relu(x))["y"])  # eager ops on this thread, as a server's pre/post-processing
    after = sorted(os.sched_getaffinity(0))
    s = tf_autopar.status()
    report(before=before, after=after, kmp=os.environ.get("KMP_AFFINITY"), limits=str(s.limits), text=str(s))
    """.replace("DIR", repr(str(tmp_path))),
        {"TF_AUTOPAR_CACHE_DIR": str(tmp_path / "cache")},
    )
    assert rc == 0, err
    assert res["kmp"] and "compact" in res["kmp"]
    assert len(res["after"]) < len(res["before"]), res  # OpenMP did bind the main thread
    assert res["limits"] == "None", res["text"]
    assert "CPU limits changed" not in res["text"]
    assert "affinity mask went from" not in err

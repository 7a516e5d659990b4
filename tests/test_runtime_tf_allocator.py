"""TensorFlow's CPU allocator: the fast path sees malloc refault large buffers on every call and says what to set."""

from __future__ import annotations

import pytest

from tf_autopar.runtime import tf_allocator
from tf_autopar.runtime.tf_allocator import FAULTS_PER_CALL, VAR, advice

from _runtime_child import run_child

MANY, FEW = [FAULTS_PER_CALL * 10] * 9, [30] * 9


def test_advice_only_where_malloc_faults_and_nobody_chose_the_allocator():
    text = advice(MANY, {}, "malloc")
    assert f"{FAULTS_PER_CALL * 10:,} page faults a call" in text and f"{VAR}=true" in text
    assert advice(FEW, {}, "malloc") == ""  # malloc keeps its buffers: nothing to gain
    assert advice(MANY, {}, "bfc") == ""  # already the BFC pool
    assert advice(MANY, {VAR: "false"}, "malloc") == ""  # the user's choice stands
    assert advice(MANY, {"LD_PRELOAD": "/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4"}, "malloc") == ""
    assert advice(MANY, {"LD_PRELOAD": "/opt/libtrace.so"}, "malloc") != ""  # not an allocator
    assert advice([], {}, "malloc") == ""
    # the median decides: first touches of a new buffer are not the steady state
    assert advice([FAULTS_PER_CALL * 10] * 4 + [0] * 5, {}, "malloc") == ""
    assert advice([0] * 4 + [FAULTS_PER_CALL * 10] * 5, {}, "malloc") != ""


def test_a_remembered_fault_count_sets_the_variable_at_the_next_start_unless_someone_chose():
    from tf_autopar.runtime.tf_allocator import remembered_env

    def entry(faults):
        return {
            "functions": {"signatures['serving_default']": {"buckets": {"1": {"calls": 9, "faults_per_call": faults}}}}
        }

    assert remembered_env(entry(FAULTS_PER_CALL * 10), "eigen", {}) == {VAR: "true"}
    assert remembered_env(entry(30), "eigen", {}) == {}
    assert remembered_env(entry(FAULTS_PER_CALL * 10), "openmp", {}) == {}  # not measured there
    assert remembered_env(entry(FAULTS_PER_CALL * 10), "eigen", {VAR: "false"}) == {}
    assert remembered_env(entry(FAULTS_PER_CALL * 10), "eigen", {"LD_PRELOAD": "/usr/lib/libjemalloc.so.2"}) == {}
    for garbled in (None, {}, {"functions": []}, entry("many"), entry(True), {"functions": {"f": {"buckets": 3}}}):
        assert remembered_env(garbled, "eigen", {}) == {}  # a damaged cache entry sets nothing


# A signature whose one call makes and frees a 64 MB tensor (16384 x 1024 floats per example):
# above glibc's largest mmap threshold (32 MB), so malloc maps it afresh on every call.
SCRIPT = """
import tensorflow as tf
import tf_autopar
tf_autopar.enable()
from tf_autopar.runtime import fastpath, tf_allocator
from tf_autopar.runtime.fastpath import rules as fastpath_rules
fastpath_rules.SWITCH_RATIO = RATIO  # inf: the frozen session serves whatever its speed; ~0: it never does
class Big(tf.Module):
    @tf.function(input_signature=[tf.TensorSpec([None, 16384], tf.float32)])
    def serve(self, x):
        return {"y": tf.reduce_sum(tf.tile(x, [1, 1024]) * 2.0, axis=1)}
m = Big()
tf.saved_model.save(m, PATH, signatures={"serving_default": m.serve})
sig = tf.saved_model.load(PATH).signatures["serving_default"]
x = tf.ones([1, 16384])
sig(x=x)
assert fastpath.wait_idle(120)
for _ in range(2 * tf_allocator.SAMPLE_CALLS):
    sig(x=x)
b = next(s for s in fastpath._served if s.buckets).buckets[1]
report(path=b.state, faults=b.faults, in_use=tf_allocator.in_use(), warnings=list(tf_autopar.status().warnings),
       applied=tf_autopar.status().process.applied)
"""


# TensorFlow's own CPU allocator is malloc only where oneDNN's optimizations are off: where they are
# on (TensorFlow turns them on by default on some x86 CPUs, this project's AVX-512/AMX Xeon hosts
# among them), oneDNN's allocator serves, and it pools its buffers. The malloc cases turn them off.
MALLOC = {"TF_ENABLE_ONEDNN_OPTS": "0"}


@pytest.mark.tf
def test_the_fast_path_counts_malloc_refaulting_a_large_buffer_and_says_what_to_set(tmp_path):
    env = {"TF_AUTOPAR_CACHE_DIR": str(tmp_path / "cache"), "TF_AUTOPAR_TUNE_LIVE": "0", **MALLOC}
    script = f"PATH = {str(tmp_path / 'big')!r}\nRATIO = float('inf')\n" + SCRIPT
    res, err, rc = run_child(script, env)
    assert rc == 0, err
    assert res["path"] == "frozen session" and res["in_use"] == "malloc" and VAR not in res["applied"]
    assert len(res["faults"]) == tf_allocator.SAMPLE_CALLS and min(res["faults"]) > FAULTS_PER_CALL, res["faults"]
    said = [w for w in res["warnings"] if VAR in w]
    assert len(said) == 1 and "page faults a call" in said[0], res["warnings"]
    assert err.count(f"{VAR}=true") == 1  # on stderr, once
    # the next start loads the same model with the same cache: enable() sets the variable before
    # TensorFlow starts, the BFC pool serves it, nothing faults and nothing is said
    second = SCRIPT.replace("tf.saved_model.save(m, PATH", "0 and tf.saved_model.save(m, PATH")
    res, err, rc = run_child(script.replace(SCRIPT, second), env)
    assert rc == 0, err
    assert res["applied"][VAR] == "true" and res["in_use"] == "bfc" and max(res["faults"]) < FAULTS_PER_CALL, res[
        "faults"
    ]
    assert not [w for w in res["warnings"] if VAR in w]
    # and the start after it too: the BFC start counted no faults, and malloc's count is kept
    res, err, rc = run_child(script.replace(SCRIPT, second), env)
    assert rc == 0, err
    assert res["applied"].get(VAR) == "true" and res["in_use"] == "bfc", res["applied"]
    # the user's own choice stands over what was remembered
    res, err, rc = run_child(script.replace(SCRIPT, second), {**env, VAR: "false"})
    assert rc == 0, err
    assert res["in_use"] == "malloc" and len([w for w in res["warnings"] if VAR in w]) == 0


@pytest.mark.tf
def test_a_bucket_kept_on_the_original_path_is_counted_too(tmp_path):
    """malloc's faults can be why the frozen session lost its switch check: the original path's calls count."""
    env = {"TF_AUTOPAR_CACHE_DIR": str(tmp_path / "cache"), "TF_AUTOPAR_TUNE_LIVE": "0", **MALLOC}
    res, err, rc = run_child(f"PATH = {str(tmp_path / 'big')!r}\nRATIO = 1e-9\n" + SCRIPT, env)
    assert rc == 0, err
    assert res["path"] == "original" and len(res["faults"]) == tf_allocator.SAMPLE_CALLS, res
    assert min(res["faults"]) > FAULTS_PER_CALL and len([w for w in res["warnings"] if VAR in w]) == 1, res


@pytest.mark.tf
def test_onednns_allocator_is_a_pool_and_gets_no_advice(tmp_path):
    """With oneDNN's optimizations on, its allocator keeps the large buffer: no refaults, nothing to set."""
    env = {"TF_AUTOPAR_CACHE_DIR": str(tmp_path / "cache"), "TF_AUTOPAR_TUNE_LIVE": "0", "TF_ENABLE_ONEDNN_OPTS": "1"}
    res, err, rc = run_child(f"PATH = {str(tmp_path / 'big')!r}\nRATIO = float('inf')\n" + SCRIPT, env)
    assert rc == 0, err
    assert res["in_use"] == "bfc" and max(res["faults"]) < FAULTS_PER_CALL, res
    assert not [w for w in res["warnings"] if VAR in w] and VAR not in res["applied"]


def test_a_winner_tuned_under_another_allocator_is_tuned_again():
    """The start that switches to the BFC pool (because malloc faulted) must not serve a winner chosen
    on samples that carried the faults; entries written before the allocator was recorded still count."""
    from tf_autopar.runtime.fastpath.remembered import remembered_key

    tuned = {"tuned": "done", "inter_op": 1, "intra_op": 2, "streams": 1}
    assert remembered_key({**tuned, "allocator": "malloc"}, "malloc") == (1, 2, 1)
    assert remembered_key({**tuned, "allocator": "malloc"}, "bfc") is None
    assert remembered_key({**tuned, "allocator": "bfc"}, "bfc") == (1, 2, 1)
    assert remembered_key(tuned, "bfc") == (1, 2, 1)  # an older entry: no allocator recorded
    assert remembered_key({**tuned, "allocator": "bfc"}, None) == (1, 2, 1)  # not known yet: not judged
    assert remembered_key({**tuned, "tuned": ""}, "bfc") is None
    # a start that ended while tuning: its winner so far is served next time, under the same rule
    assert remembered_key({**tuned, "tuned": "unfinished", "allocator": "bfc"}, "bfc") == (1, 2, 1)
    assert remembered_key({**tuned, "tuned": "unfinished", "allocator": "malloc"}, "bfc") is None

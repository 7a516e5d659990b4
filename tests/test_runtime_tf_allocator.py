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


# A signature whose one call makes and frees a 64 MB tensor (16384 x 1024 floats per example):
# above glibc's largest mmap threshold (32 MB), so malloc maps it afresh on every call.
SCRIPT = """
import tensorflow as tf
import tf_autopar
tf_autopar.enable()
from tf_autopar.runtime import fastpath, fastpath_rules, tf_allocator
fastpath_rules.SWITCH_RATIO = float("inf")  # the frozen session serves whatever its speed: the faults are the point
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
report(path=b.state, faults=b.faults, in_use=tf_allocator.in_use(), warnings=list(tf_autopar.status().warnings))
"""


@pytest.mark.tf
def test_the_fast_path_counts_malloc_refaulting_a_large_buffer_and_says_what_to_set(tmp_path):
    env = {"TF_AUTOPAR_CACHE_DIR": str(tmp_path / "cache"), "TF_AUTOPAR_TUNE_LIVE": "0"}
    script = f"PATH = {str(tmp_path / 'big')!r}\n" + SCRIPT
    res, err, rc = run_child(script, env)
    assert rc == 0, err
    assert res["path"] == "frozen session" and res["in_use"] == "malloc"
    assert len(res["faults"]) == tf_allocator.SAMPLE_CALLS and min(res["faults"]) > FAULTS_PER_CALL, res["faults"]
    said = [w for w in res["warnings"] if VAR in w]
    assert len(said) == 1 and "page faults a call" in said[0], res["warnings"]
    assert err.count(f"{VAR}=true") == 1  # on stderr, once
    # started as it says: TensorFlow's BFC pool, no faults, nothing to say
    env[VAR] = "true"
    script = f"PATH = {str(tmp_path / 'big2')!r}\n" + SCRIPT
    res, err, rc = run_child(script, env)
    assert rc == 0, err
    assert res["in_use"] == "bfc" and max(res["faults"]) < FAULTS_PER_CALL, res["faults"]
    assert not [w for w in res["warnings"] if VAR in w]

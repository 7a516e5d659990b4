"""enable() plans from the user's own model when the program loads it (runtime/model_loads.py).

Each loader is exercised in a fresh process, as a server would: enable() first, then the
load is the first TensorFlow work. What the process really runs with is read from /proc.
"""

from __future__ import annotations

import json
import os

import pytest

from _runtime_child import cpus, run_child

pytestmark = pytest.mark.tf

# The load is the program's first TensorFlow work; the request's input is made after it.
X = "x = tf.zeros((1, 32, 32, 3))"
LOADERS = {
    "tf.saved_model.load": f"m = tf.saved_model.load(SM); {X}; out = m.signatures['serving_default'](image=x)",
    "keras.models.load_model": f"import keras; m = keras.models.load_model(KERAS); {X}; out = m.predict(x, verbose=0)",
    "keras.layers.TFSMLayer": f"import keras; m = keras.layers.TFSMLayer(SM, call_endpoint='serving_default'); {X}; out = m(x)",
}


@pytest.fixture(scope="module")
def models(user_models: dict[str, str]) -> dict[str, str]:
    """The session's user model (conftest.py): built once for every file that loads it."""
    return user_models


def _script(models: dict[str, str], load: str, enable: str = "tf_autopar.enable(batch=1)", before: str = "") -> str:
    return f"""
import tf_autopar
{before}
st0 = {enable}
import tensorflow as tf
SM, KERAS = {models["SM"]!r}, {models["KERAS"]!r}
{load}
st = tf_autopar.status()
report(tf_compute=tf_compute_threads(), phase=st.process.phase, source=st.process.source,
       planned=[st.process.planned_inter, st.process.planned_intra], explain=st.process.explain,
       warnings=list(st.warnings), env={{k: os.environ.get(k) for k in ("TF_NUM_INTEROP_THREADS", "TF_NUM_INTRAOP_THREADS")}})
"""


@pytest.mark.parametrize("loader", sorted(LOADERS))
def test_each_loader_plans_from_the_model_before_the_runtime_starts(models, loader, tmp_path):
    if cpus() < 2:
        pytest.skip("needs 2 CPUs: on 1 the plan and TF's default agree")
    res, err, rc = run_child(_script(models, LOADERS[loader]), {"TF_AUTOPAR_CACHE_DIR": str(tmp_path)})
    assert rc == 0, err
    assert res["phase"] == "before-start" and "(loaded)" in res["source"], res
    assert "unknown batch dimension read as 1" in res["explain"]  # the None batch, read as latency's 1
    assert res["planned"] == [1, 1], res["explain"]  # tiny ops at batch 1; the host-only plan is 2x2 here
    assert res["env"] == {"TF_NUM_INTEROP_THREADS": "1", "TF_NUM_INTRAOP_THREADS": "1"}
    assert res["tf_compute"] == 1  # the running inter-op pool is the model's plan, not TF's default
    assert res["warnings"] == []


def test_without_a_loaded_model_enable_keeps_tensorflows_default_pools(models, tmp_path):
    if cpus() < 2:
        pytest.skip("needs 2 CPUs")
    build = (
        f"import keras\nm = keras.Sequential([keras.Input((32, 32, 3)), keras.layers.Conv2D(8, 3)])\n{X}\nout = m(x)"
    )
    res, err, rc = run_child(_script(models, build), {"TF_AUTOPAR_CACHE_DIR": str(tmp_path)})
    assert rc == 0, err
    assert res["source"] == "host" and res["planned"] == [cpus(), cpus()]
    assert res["tf_compute"] == cpus()  # a wide graph would keep its branches parallel


def test_without_a_batch_ops_are_sized_for_batched_requests_too(models, tmp_path):
    res, err, rc = run_child(
        _script(models, LOADERS["tf.saved_model.load"], "tf_autopar.enable()"), {"TF_AUTOPAR_CACHE_DIR": str(tmp_path)}
    )
    assert rc == 0, err
    assert "unknown batch dimension read as 1" in res["explain"] and "the batch is not given" in res["explain"]
    assert res["planned"][1] == cpus()  # one thread per op would slow batched requests


def test_a_given_batch_is_what_a_none_batch_is_read_as(models, tmp_path):
    res, err, rc = run_child(
        _script(models, LOADERS["tf.saved_model.load"], "tf_autopar.enable(batch=64)"),
        {"TF_AUTOPAR_CACHE_DIR": str(tmp_path)},
    )
    assert rc == 0, err
    assert "unknown batch dimension read as 64" in res["explain"]
    assert res["planned"][1] == cpus()  # at batch 64 the ops are big enough for every CPU


def test_a_late_load_is_said_once_cached_and_applied_at_the_next_start(models, tmp_path):
    if cpus() < 2:
        pytest.skip("needs 2 CPUs")
    env = {"TF_AUTOPAR_CACHE_DIR": str(tmp_path), "TF_AUTOPAR_PROGRAM": "model-loads-test"}
    late = "import tensorflow as tf\ntf.constant(1.0) + 1.0  # the runtime starts before enable()"
    load_twice = LOADERS["tf.saved_model.load"] + "\nm2 = tf.saved_model.load(SM)"
    res, err, rc = run_child(_script(models, load_twice, before=late), env)
    assert rc == 0, err
    assert res["phase"] == "after-start" and res["tf_compute"] == cpus()
    said = [w for w in res["warnings"] if "was loaded after TensorFlow's runtime started" in w]
    assert len(said) == 1 and "inter_op=1 intra_op=1" in said[0]
    with open(tmp_path / "plans.json", encoding="utf-8") as fh:
        programs = json.load(fh)["programs"]
    assert any(key.startswith("model-loads-test|") for key in programs)
    # next start: enable() applies the cached plan before any load, and the load agrees with it
    res, err, rc = run_child(_script(models, "import tensorflow as tf\ntf.constant(1.0) + 1.0"), env)
    assert rc == 0, err
    assert res["source"].startswith("cache:") and res["planned"] == [1, 1] and res["tf_compute"] == 1


def test_a_bad_batch_is_refused_before_anything_changes():
    import tf_autopar

    before = dict(os.environ)
    for bad in (0, -2, 1.5, True):
        with pytest.raises(ValueError, match="batch must be a positive integer"):
            tf_autopar.enable(batch=bad)
    assert dict(os.environ) == before and not tf_autopar.status().enabled


def test_a_cached_profile_without_a_field_the_planner_reads_is_a_miss(tmp_path):
    """A profile cached by an older tf_autopar lacks the look-up fields; planning from it would
    read them as "no look-ups" and plan differently from a fresh analysis, so it is re-analysed."""
    from tf_autopar.graph.profile import GraphProfile
    from tf_autopar.planning.graph_plan import cached_profile, profile_summary
    from tf_autopar.runtime import cache

    path = str(tmp_path / "plans.json")
    fresh = GraphProfile(
        heavy_ops=33,
        depth=7,
        avg_width=4,
        max_width=27,
        typical_op_work=268_435_456,
        lookups=26,
        lookup_work=1_703_936,
        contraction_work=1_017_184_256,
        source="dlrm",
    )
    cache.store_profile("new", profile_summary(fresh), path=path)
    old = {k: v for k, v in profile_summary(fresh).items() if k not in ("lookups", "lookup_work")}
    cache.store_profile("old", old, path=path)
    back = cached_profile(cache.lookup_profile("new", path=path))
    assert back is not None and (back.lookups, back.lookup_work, back.contraction_work) == (
        26,
        1_703_936,
        1_017_184_256,
    )
    assert cached_profile(cache.lookup_profile("old", path=path)) is None
    assert cached_profile(None) is None and cached_profile("garbled") is None

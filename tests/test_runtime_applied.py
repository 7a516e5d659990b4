"""enable()'s record of what it changed (runtime/applied.py): restore() undoes exactly that.

The record on its own in this process (variables, patches, list entries, a failing hook), and
enable()/disable() in fresh processes: without TensorFlow (variables, affinity, the import
hook, the lease slot) and with it (every loader and hook attribute back as it was; a hook
whose install raises leaves nothing behind and enable() fails open)."""

from __future__ import annotations

import os
import types

import pytest

from _runtime_child import run_child
from tf_autopar import _warn
from tf_autopar.runtime.applied import ENV, Applied

KEY_SET, KEY_UNSET, KEY_USER = "TFA_TEST_APPLIED_SET", "TFA_TEST_APPLIED_UNSET", "TFA_TEST_APPLIED_USER"


@pytest.fixture
def env(monkeypatch):
    """Three test variables: one set before (a launcher's, ours to re-plan), one unset, one the user's."""
    monkeypatch.setenv(KEY_SET, "launcher")
    monkeypatch.delenv(KEY_UNSET, raising=False)
    monkeypatch.setenv(KEY_USER, "mine")
    return {KEY_USER: "mine"}  # the environment as the user set it


def test_restore_puts_back_variables_patches_and_entries_and_twice_is_harmless(env):
    owner = types.SimpleNamespace(load="original load")

    class Base:
        def call(self):
            return "base"

    class Child(Base):
        pass

    callbacks = ["theirs"]
    before_env = dict(os.environ)

    record = Applied()
    applied, kept = record.set_env({KEY_SET: "1", KEY_UNSET: "2", KEY_USER: "3"}, env)
    assert applied == {KEY_SET: "1", KEY_UNSET: "2"} and kept == {KEY_USER: "mine"}
    record.set_env({KEY_SET: "4"}, env)  # set again (a model loaded later): the first "before" stays
    assert record.env_before() == {KEY_SET: "launcher", KEY_UNSET: None}
    assert record.ours() == {KEY_SET: "4", KEY_UNSET: "2"}
    assert record.patch(owner, "load", "our load") == "original load"
    assert record.patch(Child, "call", lambda self: "ours") is Base.__dict__["call"]  # inherited
    record.add(callbacks, "ours", "remove our callback")
    assert (os.environ[KEY_SET], os.environ[KEY_UNSET], os.environ[KEY_USER]) == ("4", "2", "mine")
    assert owner.load == "our load" and Child().call() == "ours" and callbacks == ["theirs", "ours"]

    record.restore()
    assert dict(os.environ) == before_env
    assert owner.load == "original load" and "call" not in Child.__dict__ and Child().call() == "base"
    assert callbacks == ["theirs"] and record.changes() == []
    record.restore()  # a second time: nothing left to undo, nothing changes
    assert dict(os.environ) == before_env and owner.load == "original load" and callbacks == ["theirs"]


def test_restore_leaves_what_someone_changed_since(env):
    owner = types.SimpleNamespace(load="original load")
    record = Applied()
    record.set_env({KEY_UNSET: "2"}, env)
    record.patch(owner, "load", "our load")
    os.environ[KEY_UNSET] = "the program's"
    owner.load = "another library's wrapper"
    record.restore()
    assert os.environ[KEY_UNSET] == "the program's" and owner.load == "another library's wrapper"


def test_a_partial_restore_keeps_the_rest_in_order(env):
    owner = types.SimpleNamespace(load="original load")
    record = Applied()
    record.set_env({KEY_UNSET: "2"}, env)
    record.patch(owner, "load", "our load")
    record.restore(kinds=(ENV,))  # a forked worker re-plans its variables; the hooks stay
    assert KEY_UNSET not in os.environ and owner.load == "our load"
    record.set_env({KEY_UNSET: "5"}, env)
    assert record.env_before() == {KEY_UNSET: None}
    record.restore()
    assert KEY_UNSET not in os.environ and owner.load == "original load"


class FailingHook:
    """Patches two things, then raises: the record must take both back."""

    PATCH_NAME = "a hook that fails half-way"

    def __init__(self, owner, callbacks):
        self.owner, self.callbacks, self.uninstalled = owner, callbacks, 0

    def install(self, record: Applied) -> None:
        record.patch(self.owner, "load", "half-applied")
        record.add(self.callbacks, "half-applied", "remove it")
        raise RuntimeError("install failed half-way")

    def uninstall(self) -> None:
        self.uninstalled += 1


class GoodHook:
    PATCH_NAME = "a hook that works"

    def __init__(self, owner):
        self.owner = owner

    def install(self, record: Applied) -> None:
        record.patch(self.owner, "run", "patched")

    def uninstall(self) -> None:
        pass


def test_a_hook_whose_install_raises_leaves_nothing_half_applied():
    owner = types.SimpleNamespace(load="original load", run="original run")
    callbacks: list[str] = []
    failing, good = FailingHook(owner, callbacks), GoodHook(owner)
    record = Applied()
    record.install(good)
    with pytest.raises(RuntimeError, match="half-way"):
        record.install(failing)
    assert owner.load == "original load" and callbacks == [] and failing.uninstalled == 1
    assert not record.installed(failing) and record.installed(good)
    assert record.hook_names() == ["a hook that works"] and owner.run == "patched"
    record.restore()
    assert owner.run == "original run" and record.hook_names() == []


def test_an_undo_that_raises_is_reported_and_the_others_still_run(env):
    owner = types.SimpleNamespace(load="original load")
    record = Applied()
    record.set_env({KEY_UNSET: "2"}, env)
    record.on_restore("boom", lambda: 1 / 0, "run an undo that raises")
    record.patch(owner, "load", "our load")
    record.restore()
    assert KEY_UNSET not in os.environ and owner.load == "original load"
    assert any("could not run an undo that raises" in w for w in _warn.ISSUED)
    assert record.changes() == []  # dropped, not retried


# ------------------------------------------------------------------ enable() and disable(), fresh processes

NO_TF = """
import os, sys
import tf_autopar
def snap():
    return {"env": dict(os.environ), "mask": sorted(os.sched_getaffinity(0)),
            "meta_path": [repr(f) for f in sys.meta_path], "tf": "tensorflow" in sys.modules}
before = snap()
st = tf_autopar.enable(width=1, cooperate=COOPERATE)
during = snap()
from tf_autopar.runtime.state import STATE
binding = STATE.applied.binding()
recorded = {"binding": binding and [sorted(m) for m in binding], "before": STATE.applied.env_before()}
first = tf_autopar.disable()
after = snap()
tf_autopar.disable()
twice = snap()
report(before=before, during=during, after=after, twice=twice, applied=st.process.applied, recorded=recorded,
       kept=st.process.kept_user, bound=list(st.process.bound_cpus), enabled=first.enabled,
       warnings=list(tf_autopar.status().warnings))
"""


@pytest.mark.parametrize("cooperate", [True, False])
def test_enable_then_disable_without_tensorflow_leaves_the_process_as_it_was(tmp_path, cooperate):
    """The user set one pool variable themselves; enable() sets the others, binds (two workers
    share the host: this one gets half), arms the import hook; disable() puts each back."""
    if len(os.sched_getaffinity(0)) < 2 and cooperate:
        pytest.skip("needs 2 CPUs to pin a worker to half of them")
    env = {
        "TF_AUTOPAR_CACHE_DIR": str(tmp_path / "cache"),
        "TF_NUM_INTRAOP_THREADS": "1",
        "OMP_NUM_THREADS": "3",
        "TF_AUTOPAR_LEASE_DIR": str(tmp_path / "lease"),
        "TF_AUTOPAR_GROUP": "applied-test",
        "TF_AUTOPAR_INSTANCES": "2",
    }
    (tmp_path / "lease").mkdir()
    res, err, rc = run_child(NO_TF.replace("COOPERATE", str(cooperate)), env)
    assert rc == 0, err
    before, during, after = res["before"], res["during"], res["after"]
    assert not during["tf"]  # nothing here imported TensorFlow
    assert res["kept"]["TF_NUM_INTRAOP_THREADS"] == "1"  # the user's own, kept ...
    assert during["env"]["TF_NUM_INTRAOP_THREADS"] == "1"
    assert res["applied"]["TF_NUM_INTEROP_THREADS"] == "1" and during["env"]["TF_OVERRIDE_GLOBAL_THREADPOOL"] == "1"
    assert len(during["meta_path"]) == len(before["meta_path"]) + 1  # the hook waiting for `import tensorflow`
    if cooperate:  # worker 0 of 2: bound to its half; the record has the mask from before and the one set
        assert res["bound"] and during["mask"] == res["bound"] and len(during["mask"]) < len(before["mask"])
        assert res["recorded"]["binding"] == [before["mask"], during["mask"]]
    assert res["recorded"]["before"] == {k: None for k in res["applied"]}  # none was set before
    assert after == before  # ... and everything else exactly as it was
    assert res["twice"] == before and res["enabled"] is False
    assert res["warnings"] == []


TF_LOADERS = """
import os, sys
import tensorflow as tf
import keras
from tensorflow.python.client import session
from tensorflow.python.eager.polymorphic_function import transform
from tf_autopar.runtime import model_loads
TARGETS = model_loads._TF_TARGETS + model_loads._KERAS_TARGETS
def snap():
    attrs = {f"{m}.{a}": id(getattr(sys.modules[m], a, None)) for m, a in TARGETS if m in sys.modules}
    return {"attrs": attrs, "init": id(session.BaseSession.__init__),
            "tfsm_new": "__new__" in vars(keras.layers.TFSMLayer),
            "callbacks": len(transform.CONCRETE_FUNCTION_CALLBACKS), "env": dict(os.environ),
            "mask": sorted(os.sched_getaffinity(0)), "meta_path": len(sys.meta_path)}
FAIL
import tf_autopar
before = snap()
st = tf_autopar.enable(cooperate=False)
during = snap()
tf_autopar.disable()
after = snap()
report(before=before, during=during, after=after, patches=list(st.patches), enabled=st.enabled,
       warnings=list(tf_autopar.status().warnings), loaded=tf.saved_model.load is before_load)
"""


@pytest.mark.tf
def test_enable_then_disable_with_tensorflow_and_keras_puts_every_attribute_back(tmp_path):
    script = TF_LOADERS.replace("FAIL", "before_load = tf.saved_model.load")
    res, err, rc = run_child(script, {"TF_AUTOPAR_CACHE_DIR": str(tmp_path)})
    assert rc == 0, err
    before, during, after = res["before"], res["during"], res["after"]
    changed = {k for k in before["attrs"] if during["attrs"][k] != before["attrs"][k]}
    assert len(changed) >= 3, during  # tf.saved_model.load and keras's load_model, wrapped
    assert during["init"] != before["init"] and during["tfsm_new"] and not before["tfsm_new"]
    assert during["callbacks"] == before["callbacks"] + 1
    assert len(res["patches"]) == 3 and res["enabled"]
    assert after == before and res["loaded"]
    assert res["warnings"] == []


FAIL_LOADERS = """
from tf_autopar.runtime.state import STATE
def failing_install(record):  # wraps one loader, then breaks
    record.patch(tf.saved_model, "load", lambda *a, **k: None)
    raise RuntimeError("planted: the loader hook broke half-way")
model_loads.install = failing_install
before_load = tf.saved_model.load
"""


@pytest.mark.tf
def test_a_hook_that_fails_to_install_leaves_nothing_and_enable_fails_open(tmp_path):
    res, err, rc = run_child(TF_LOADERS.replace("FAIL", FAIL_LOADERS.strip()), {"TF_AUTOPAR_CACHE_DIR": str(tmp_path)})
    assert rc == 0, err
    before, during, after = res["before"], res["during"], res["after"]
    assert res["enabled"] and len(res["patches"]) == 2 and not any("model loading" in p for p in res["patches"])
    assert during["attrs"] == before["attrs"] and not during["tfsm_new"]  # no loader left wrapped
    assert during["init"] != before["init"]  # the other hooks went in
    fails = [w for w in res["warnings"] if "planted: the loader hook broke half-way" in w]
    assert len(fails) == 1 and "could not install the hook for model loading" in fails[0], res["warnings"]
    assert after == before and res["loaded"]

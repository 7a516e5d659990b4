"""`tf-autopar tune` in one process (tuning/inprocess.py), `--live-reset`, and live tuning's
cache entry at the next start, in real processes on a real SavedModel.

The switch check (frozen not slower than the original path) is timing and tested pure
(test_fastpath_rules.py); these children set its ratio through a ``sitecustomize`` on their
path (to infinity: always switch; to 0: never), so that what is checked is the search, the
cache entry and its use, whatever this host's noise.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from _runtime_child import ROOT, run_child

pytestmark = pytest.mark.tf

FN = "signatures['serving_default']"


@pytest.fixture(scope="module")
def model(user_models: dict[str, str]) -> str:
    """The session's user model (conftest.py): a tune writes only its plan cache, never the model."""
    return user_models["SM"]


def _env(tmp_path, cache: str, ratio: str = "inf") -> dict[str, str]:
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(
        "import os\nif os.environ.get('TFA_TEST_SWITCH_RATIO'):\n"
        "    from tf_autopar.runtime.fastpath import rules as fastpath_rules\n"
        "    fastpath_rules.SWITCH_RATIO = float(os.environ['TFA_TEST_SWITCH_RATIO'])\n"
    )
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("TF_NUM_", "TF_OVERRIDE", "TF_AUTOPAR")) or k == "TF_AUTOPAR_ENGINES"
    }
    env.update(
        TF_AUTOPAR_CACHE_DIR=cache,
        TFA_TEST_SWITCH_RATIO=ratio,
        TF_CPP_MIN_LOG_LEVEL="2",
        PYTHONPATH=os.pathsep.join((str(site), ROOT)),
    )
    return env


def _cli(args: list[str], env: dict[str, str], timeout: float = 400) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tf_autopar.cli.main", *args], env=env, capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture(scope="module")
def tuned(model, tmp_path_factory) -> tuple[dict, str]:
    """One in-process tune (switch check always passing) and the plan cache it wrote, kept as it
    was: each test that starts from it works on its own copy (``_tuned_cache``)."""
    tmp = tmp_path_factory.mktemp("tuned")
    cache = str(tmp / "cache")
    proc = _cli(["tune", model, "--batch", "1", "--budget", "90", "--json"], _env(tmp, cache))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout), cache


def _tuned_cache(tuned: tuple[dict, str], tmp_path) -> str:
    """A copy of the tuned fixture's plan cache, for one test to read and change."""
    cache = str(tmp_path / "cache")
    shutil.copytree(tuned[1], cache)
    return cache


def _served(cache: str) -> dict:
    with open(os.path.join(cache, "plans.json"), encoding="utf-8") as fh:
        entries = json.load(fh)["served"]
    assert len(entries) == 1, entries
    return next(iter(entries.values()))["functions"][FN]["buckets"]["1"]


SECOND_START = """
import tf_autopar
tf_autopar.enable()
import numpy as np, tensorflow as tf
from tf_autopar.runtime import fastpath
from tf_autopar.runtime.fastpath import memory
memory.LOCK_DIRS = (os.environ["TF_AUTOPAR_LEASE_DIR"],)  # its own build lock (run_child's dir): a parallel test's build never skips the prebuild
loaded = tf.saved_model.load(SM)
sig = loaded.signatures["serving_default"]
def rec():
    for s in tf_autopar.status().served:
        if s.function == "signatures['serving_default']":
            return s.buckets[0] if s.buckets else None
at_load = rec()
out = sig(image=np.zeros((1, 32, 32, 3), np.float32))
first = rec()
fastpath.wait_idle(120)
report(at_load=None if at_load is None else [at_load.path, at_load.inter_op, at_load.intra_op, at_load.tuned],
       first_served=None if first is None else first.served, text=tf_autopar.status().text())
"""


def test_in_process_tune_writes_the_served_entry_and_the_next_start_serves_it_first(model, tuned, tmp_path):
    cache = _tuned_cache(tuned, tmp_path)
    env = _env(tmp_path, cache)
    out = tuned[0]
    assert out["settled"], out  # every neighbour tried within the budget
    bucket = _served(cache)
    assert bucket["path"] == "frozen session" and bucket["tuned"] == "done" and bucket["tried"], bucket
    assert out["chosen"].split("x")[:2] == [str(bucket["inter_op"]), str(bucket["intra_op"])]
    assert bucket["by"] == "tune" and (not bucket.get("won") or bucket["won"]["by"] == "tune")
    res, err, rc = run_child(f"SM = {model!r}\n" + SECOND_START, {"TF_AUTOPAR_CACHE_DIR": cache})
    assert rc == 0, err[-3000:]
    # built while the model loaded, at the tuned setting, and its very first call answered by it
    assert res["at_load"] == ["frozen session", bucket["inter_op"], bucket["intra_op"], True], res
    assert res["first_served"] == 1
    # status names where the served numbers came from: the tune's win, or the plan that held against it
    said = "tuned by `tf-autopar tune` on" if bucket.get("won") else "held against"
    assert said in res["text"] and "tuned by `tf-autopar tune`" in res["text"], res["text"]

    # --live-reset: this host's tuning forgotten; the next start serves the rule's plan and tunes again
    reset = _cli(["tune", "--live-reset", model], env)
    assert reset.returncode == 0 and "forgot what was tuned" in reset.stdout, reset.stderr
    bucket = _served(cache)
    assert "tuned" not in bucket and "inter_op" not in bucket and bucket["path"] == "frozen session"
    res, err, rc = run_child(f"SM = {model!r}\n" + SECOND_START, {"TF_AUTOPAR_CACHE_DIR": cache})
    assert rc == 0, err[-3000:]
    assert res["at_load"][0] == "frozen session" and res["at_load"][3] is False, res


def test_live_reset_names_a_missing_or_corrupt_model(tmp_path):
    env = _env(tmp_path, str(tmp_path / "cache"))
    missing = _cli(["tune", "--live-reset", str(tmp_path / "nope")], env, timeout=120)
    assert missing.returncode == 2 and "no such SavedModel directory or .keras file" in missing.stderr
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "saved_model.pb").write_bytes(b"not a protobuf")
    corrupt = _cli(["tune", "--live-reset", str(bad)], env, timeout=120)
    assert corrupt.returncode == 2 and "cannot read it as a model" in corrupt.stderr, corrupt.stderr


def test_another_host_key_ignores_the_entry(model, tuned, tmp_path):
    """The same cache on a host with another affinity (another host key) is not applied: it tunes again."""
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs two CPUs to change the affinity")
    cache = _tuned_cache(tuned, tmp_path)  # the cache the module's tune wrote, as it wrote it
    assert _served(cache)["tuned"] == "done"
    one_cpu = sorted(os.sched_getaffinity(0))[0]
    res, err, rc = run_child(
        f"import os\nos.sched_setaffinity(0, {{{one_cpu}}})\nSM = {model!r}\n" + SECOND_START,
        {"TF_AUTOPAR_CACHE_DIR": cache},
    )
    assert rc == 0, err[-3000:]
    assert res["at_load"] is None, res  # nothing built at load: no entry for this host key


def test_when_the_plan_loses_the_switch_check_its_neighbours_are_checked_in_turn(model, tmp_path):
    """Never faster (ratio 0): each neighbour gets its switch check, once, then the original path serves."""
    cache = str(tmp_path / "cache")
    proc = _cli(["tune", model, "--batch", "1", "--budget", "60", "--json"], _env(tmp_path, cache, ratio="0"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    bucket = out["bucket"]
    assert out["chosen"] == "original path" and out["settled"], out
    checks = [t for t in bucket["tried"] if "the original path's speed, not taken" in t]
    assert len(checks) >= 2 and len(set(checks)) == len(checks), bucket  # the plan and at least one neighbour


STREAMS = """
import threading, time
import tf_autopar
tf_autopar.enable(mode="throughput", streams=2)
import numpy as np, tensorflow as tf
from tf_autopar.runtime import fastpath
from tf_autopar.runtime.fastpath import rules as fastpath_rules
fastpath_rules.SWITCH_RATIO = float("inf")
sig = tf.saved_model.load(SM).signatures["serving_default"]
x = np.zeros((1, 32, 32, 3), np.float32)
from tf_autopar.runtime.fastpath.routing.base import ATTR
served = lambda: vars(sig)[ATTR]  # the current sig's: another loaded model's may linger until Python collects it
sig(image=x); fastpath.wait_idle(120)
most_pools, stop, errors = [0], threading.Event(), []
def caller():
    while not stop.is_set():
        try:
            sig(image=x)
        except Exception as exc:
            errors.append(repr(exc))
        most_pools[0] = max(most_pools[0], len(served().pools))
threads = [threading.Thread(target=caller) for _ in range(3)]
[t.start() for t in threads]
t0 = time.monotonic()
while time.monotonic() - t0 < 150 and served().buckets[1].tuned != "done":
    time.sleep(0.2)
stop.set(); [t.join() for t in threads]
b = served().buckets[1]
report(tuned=b.tuned, tried=b.tried, key=list(b.key), most_pools=most_pools[0], errors=errors[:3],
       sessions=b.pool.streams if b.pool else 0)
"""


def test_throughput_streams_are_tuned_as_streams_under_concurrent_callers(model, tmp_path):
    res, err, rc = run_child(
        f"SM = {model!r}\n" + STREAMS, {"TF_AUTOPAR_CACHE_DIR": str(tmp_path / "cache")}, timeout=400
    )
    assert rc == 0, err[-3000:]
    assert res["tuned"] == "done" and not res["errors"], res
    assert res["most_pools"] <= 2  # the serving streams and at most one candidate's

    def streams(label: str) -> int:  # "1x2" (one stream) or "1x1 in 2 streams"
        return int(label.split(" in ")[1].split()[0]) if " in " in label else 1

    tried = {streams(t.split(":")[0]) for t in res["tried"]}
    assert tried - {2}, res  # a candidate with another stream count than the plan's two was tried
    assert res["sessions"] == res["key"][2]  # the pool serving holds as many sessions as its stream count

"""The plan cache as outside input: shared directories, other users' files, wrong-typed entries,
huge files. Pure (no TensorFlow); enable() runs in a child process where the start is the point."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time

import pytest

from tf_autopar import _warn
from tf_autopar.runtime import cache

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PROFILE = {
    "heavy_ops": 6,
    "depth": 2,
    "avg_width": 3,
    "max_width": 3,
    "nodes": 40,
    "functions": 0,
    "training": False,
    "uses_tf_data": False,
    "loops": False,
    "sizes_known": True,
    "source": "test",
    "fingerprint": "f" * 16,
    "typical_op_work": 50_000_000,
    "assumptions": [],
    "lookups": 0,
    "lookup_work": None,
    "contraction_work": None,
}


def _write(path, **sections) -> None:
    data = {"version": cache.VERSION, "plans": {}, "programs": {}, "profiles": {}, "tuned": {}, "calibration": {}}
    data.update(sections)
    path.write_text(json.dumps(data))
    os.chmod(path, 0o600)


def _new_warnings(before: int) -> list[str]:
    return _warn.ISSUED[before:]


def test_a_plan_cache_someone_else_could_write_is_not_applied(tmp_path):
    """A shared TF_AUTOPAR_CACHE_DIR: another user's plans.json was applied without a word."""
    path = tmp_path / "plans.json"
    good = {"profiles": {"workload:w:tiny": {"profile": PROFILE, "updated": 1.0}}}
    _write(path, **good)
    assert cache.lookup_profile("workload:w:tiny", str(path)) == PROFILE  # trusted: used

    os.chmod(path, 0o666)  # ours, but anyone may have rewritten it
    before = len(_warn.ISSUED)
    assert cache.lookup_profile("workload:w:tiny", str(path)) is None
    warned = _new_warnings(before)
    assert len(warned) == 1 and "writable by group or others" in warned[0] and len(warned[0]) < 200
    cache.store_profile("workload:other:tiny", PROFILE, str(path))  # ours: replaced by a private file
    assert os.stat(path).st_mode & 0o077 == 0 and "workload:w:tiny" not in path.read_text()

    link = tmp_path / "link" / "plans.json"
    link.parent.mkdir()
    link.symlink_to(path)
    assert cache.load(str(link))["profiles"] == {}  # a symlink is not followed

    if os.geteuid() == 0:
        theirs = tmp_path / "theirs" / "plans.json"
        theirs.parent.mkdir()
        _write(theirs, **good)
        os.chown(theirs, 65534, 65534)
        before = len(_warn.ISSUED)
        assert cache.lookup_profile("workload:w:tiny", str(theirs)) is None
        warned = _new_warnings(before)
        assert len(warned) == 1 and "belongs to uid 65534" in warned[0] and "left as it is" in warned[0]
        text = theirs.read_text()
        cache.store_profile("workload:x:tiny", PROFILE, str(theirs))  # never overwritten
        assert theirs.read_text() == text and os.stat(theirs).st_uid == 65534


@pytest.mark.parametrize(
    "section, key, entry, named",
    [
        ("profiles", "workload:bad:tiny", {"profile": {**PROFILE, "avg_width": "abc"}}, "avg_width: 'abc'"),
        ("profiles", "workload:bad:tiny", {"profile": {**PROFILE, "typical_op_work": float("nan")}}, "typical_op_work"),
        ("profiles", "workload:bad:tiny", {"profile": {**PROFILE, "max_width": 10**30}}, "max_width"),
        ("profiles", "workload:bad:tiny", {"profile": "x" * 5000}, "not an object"),
        ("tuned", "fp|host|latency|1", {"inter_op": 10**12, "intra_op": 1}, "inter_op"),
        ("calibration", "host", {"small_op_work": "big"}, "small_op_work"),
        ("programs", "prog|host|latency", {"fingerprint": ["x"], "heavy_ops": 3}, "fingerprint"),
        ("plans", "fp|host|latency", {"plan": {}, "profile": PROFILE, "updated": "yesterday"}, "updated"),
    ],
)
def test_an_entry_that_fails_its_check_is_skipped_alone_and_dropped_at_the_next_write(
    tmp_path, section, key, entry, named
):
    path = tmp_path / "plans.json"
    sections = {"profiles": {"workload:good:tiny": {"profile": PROFILE, "updated": 1.0}}}
    sections.setdefault(section, {})[key] = entry
    _write(path, **sections)
    before = len(_warn.ISSUED)
    data = cache.load(str(path))
    assert key not in data[section] and data["profiles"]["workload:good:tiny"]["profile"] == PROFILE
    warned = _new_warnings(before)
    assert len(warned) == 1 and f"{section}[{key!r}]" in warned[0] and named in warned[0], warned
    assert len(warned[0]) < 250  # the entry is named, never printed whole
    cache.load(str(path))
    assert len(_new_warnings(before)) == 1  # once per entry, not at every read
    cache.store_profile("workload:new:tiny", PROFILE, str(path))
    stored = json.loads(path.read_text())
    assert key not in stored[section] and set(stored["profiles"]) >= {"workload:good:tiny", "workload:new:tiny"}


def test_enable_plans_on_when_the_programs_cached_profile_is_garbled(tmp_path):
    """A profile with avg_width "abc" once switched enable() off at every start, forever, with a
    warning of about 900 characters (the whole profile)."""
    script = textwrap.dedent("""
        import json, os
        from tf_autopar.runtime import cache
        from tf_autopar.runtime.state import STATE
        path = cache.cache_path()
        key = f"{cache.program_key()}|{cache.topology_key(STATE.host_topology())}|latency"
        bad = dict(json.loads(os.environ["PROFILE"]), avg_width="abc", fingerprint="g" * 16)
        data = {"version": cache.VERSION, "plans": {"g" * 16 + key[key.index("|"):]: {"plan": {}, "profile": bad}},
                "programs": {key: {"fingerprint": "g" * 16, "heavy_ops": 6}}, "profiles": {}, "tuned": {},
                "calibration": {}}
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as fh:
            json.dump(data, fh)
        import tf_autopar
        st = tf_autopar.enable(cooperate=False)
        print(json.dumps({"enabled": st.enabled, "inter": os.environ.get("TF_NUM_INTEROP_THREADS"),
                          "warnings": list(st.warnings)}))
    """)
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("TF_NUM_", "TF_AUTOPAR", "OMP_", "WEB_")) or k == "TF_AUTOPAR_ENGINES"
    }
    env.update(
        PYTHONPATH=ROOT,
        TF_AUTOPAR_CACHE_DIR=str(tmp_path / "cache"),
        TF_AUTOPAR_PROGRAM="garbled-test",
        PROFILE=json.dumps(PROFILE),
        TF_AUTOPAR_LEASE_DIR=str(tmp_path / "lease"),
    )
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["enabled"] is True and out["inter"], out
    assert len(out["warnings"]) == 1 and "avg_width: 'abc'" in out["warnings"][0], out["warnings"]
    assert len(out["warnings"][0]) < 250


def test_a_huge_plan_cache_costs_no_time_at_later_starts(tmp_path):
    """A valid 60 MB plans.json cost 0.8 s at every start: beyond MAX_BYTES it is moved aside, once."""
    path = tmp_path / "plans.json"
    pad = "x" * 1000
    big = {f"workload:w{i}:tiny": {"profile": PROFILE, "pad": pad} for i in range((cache.MAX_BYTES // 1000) + 10)}
    _write(path, profiles=big)
    assert path.stat().st_size > cache.MAX_BYTES
    before = len(_warn.ISSUED)
    t0 = time.perf_counter()
    assert cache.load(str(path))["profiles"] == {}
    assert time.perf_counter() - t0 < 0.3
    assert not path.exists() and len(_new_warnings(before)) == 1 and "larger than" in _new_warnings(before)[0]
    assert cache.MAX_BYTES <= 8 << 20


def test_an_oversized_entry_is_not_written(tmp_path):
    path = tmp_path / "plans.json"
    cache.store_profile("workload:huge:tiny", {**PROFILE, "source": "s" * (cache.MAX_ENTRY_BYTES + 1)}, str(path))
    cache.store_profile("workload:ok:tiny", PROFILE, str(path))
    assert set(json.loads(path.read_text())["profiles"]) == {"workload:ok:tiny"}


def test_the_small_host_caches_beside_it_get_the_same_check(tmp_path, monkeypatch):
    from tf_autopar.topology._cache import load_cache, store_cache

    monkeypatch.setenv("TF_AUTOPAR_CACHE_DIR", str(tmp_path))
    store_cache("cpuinfo.json", "k", {"model": "ours"})
    assert load_cache("cpuinfo.json") == {"k": {"model": "ours"}}
    os.chmod(tmp_path / "cpuinfo.json", 0o666)
    assert load_cache("cpuinfo.json") == {}
    if os.geteuid() == 0:
        os.chmod(tmp_path / "cpuinfo.json", 0o600)
        os.chown(tmp_path / "cpuinfo.json", 65534, 65534)
        assert load_cache("cpuinfo.json") == {}
        store_cache("cpuinfo.json", "k", {"model": "mine"})
        assert os.stat(tmp_path / "cpuinfo.json").st_uid == 65534


def test_live_reset_forgets_this_hosts_tuning_and_keeps_the_rest(tmp_path):
    from tf_autopar.runtime import cache

    path = str(tmp_path / "plans.json")
    tuned_bucket = {
        "calls": 40,
        "path": "frozen session",
        "batch": 1,
        "inter_op": 2,
        "intra_op": 1,
        "streams": 1,
        "tuned": "done",
        "tried": ["1x2: lose (...)"],
        "won": {"to": "2x1"},
    }
    for host in ("here", "elsewhere"):
        cache.store_served(
            "fp",
            host,
            "latency",
            "signatures['serving_default']",
            {"buckets": {"1": dict(tuned_bucket), "8": {"calls": 3, "path": "original"}}},
            path,
        )
        cache.store_tuned("fp", host, "latency", 1, {"inter_op": 2, "intra_op": 1}, path)
    cache.store_tuned("other-model", "here", "latency", 1, {"inter_op": 1, "intra_op": 1}, path)
    assert cache.forget_tuning("fp", "here", path) == {"tuned": 1, "served_buckets": 1}
    here = cache.lookup_served("fp", "here", "latency", path)["functions"]["signatures['serving_default']"]["buckets"]
    assert here["1"] == {"calls": 40, "path": "frozen session", "batch": 1}  # the calls and the verdict stay
    assert here["8"] == {"calls": 3, "path": "original"}
    assert cache.lookup_tuned("fp", "here", "latency", 1, path) is None
    assert cache.lookup_tuned("other-model", "here", "latency", 1, path) is not None
    there = cache.lookup_served("fp", "elsewhere", "latency", path)["functions"]["signatures['serving_default']"]
    assert there["buckets"]["1"]["tuned"] == "done" and cache.lookup_tuned("fp", "elsewhere", "latency", 1, path)
    assert cache.forget_tuning("fp", "here", path) == {"tuned": 0, "served_buckets": 0}
    assert cache.forget_tuning("fp", "here", str(tmp_path / "none.json")) == {"tuned": 0, "served_buckets": 0}


def test_a_summary_without_a_fault_count_keeps_the_one_malloc_left(tmp_path):
    """A start under the BFC pool counts no faults; malloc's count from the start before stays, so
    the start after it sets the pool again (tf_allocator.remembered_env) instead of flip-flopping."""
    path, fn = str(tmp_path / "plans.json"), "signatures['serving_default']"
    malloc = {"buckets": {"8": {"calls": 9, "path": "original", "faults_per_call": 9411}}}
    bfc = {"buckets": {"8": {"calls": 200, "path": "frozen session", "tuned": "done"}, "1": {"calls": 2}}}
    cache.store_served("fp", "here", "latency", fn, malloc, path)
    cache.store_served("fp", "here", "latency", fn, bfc, path)
    buckets = cache.lookup_served("fp", "here", "latency", path)["functions"][fn]["buckets"]
    assert buckets["8"] == {"calls": 200, "path": "frozen session", "tuned": "done", "faults_per_call": 9411}
    assert buckets["1"] == {"calls": 2}
    # a later count under malloc replaces it
    cache.store_served("fp", "here", "latency", fn, {"buckets": {"8": {"calls": 5, "faults_per_call": 12}}}, path)
    assert cache.lookup_served("fp", "here", "latency", path)["functions"][fn]["buckets"]["8"]["faults_per_call"] == 12


def test_editing_writes_on_success_and_nothing_on_an_exception(tmp_path):
    path = str(tmp_path / "sub" / "plans.json")
    with cache.editing(path) as data:
        data["profiles"]["a"] = {"profile": {}, "updated": 1.0}
    assert cache.load(path)["profiles"] == {"a": {"profile": {}, "updated": 1.0}}
    written = open(path, "rb").read()
    with pytest.raises(RuntimeError, match="halfway"):
        with cache.editing(path) as data:
            data["profiles"]["b"] = {"profile": {}, "updated": 2.0}
            del data["profiles"]["a"]
            raise RuntimeError("halfway")
    assert open(path, "rb").read() == written  # untouched: not even rewritten the same
    mtime = os.stat(path).st_mtime_ns
    time.sleep(0.01)
    with cache.editing(path) as data:
        pass  # nothing changed: nothing written
    assert os.stat(path).st_mtime_ns == mtime and open(path, "rb").read() == written


def test_editing_refuses_another_users_file_before_its_body(tmp_path):
    path = tmp_path / "plans.json"
    path.write_text(json.dumps(cache._empty()))
    os.chmod(path, 0o666)  # writable by others: untrusted; and another user's (as _owned_by_me says below)
    before = path.read_bytes()
    ran = []
    with pytest.raises(PermissionError):
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(cache, "_owned_by_me", lambda p: False)
            with cache.editing(str(path)):
                ran.append(True)
    assert not ran and path.read_bytes() == before
    with pytest.MonkeyPatch.context() as mp:  # the writers that skip such a file say nothing, raise nothing
        mp.setattr(cache, "_owned_by_me", lambda p: False)
        cache.store_profile("k", {}, path=str(path))
    assert path.read_bytes() == before


EDITOR = """
import sys, time
from tf_autopar.runtime import cache
path, who, n, start = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
while time.time() < start:
    time.sleep(0.001)
for i in range(n):
    with cache.editing(path) as data:
        seen = data["profiles"].get("count", {}).get("profile", {}).get("heavy_ops", 0)
        time.sleep(0.002)  # read, think, write: a lost update needs only the other writer in between
        data["profiles"]["count"] = {"profile": {"heavy_ops": seen + 1}, "updated": time.time()}
        data["profiles"][f"{who}-{i}"] = {"profile": {}, "updated": time.time()}
"""


def test_two_processes_editing_at_once_lose_no_update(tmp_path):
    path = str(tmp_path / "plans.json")
    n = 25
    start = time.time() + 1.0  # both past their imports, then at once
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH", "")) if p)}
    procs = [
        subprocess.Popen([sys.executable, "-c", EDITOR, path, who, str(n), str(start)], env=env, stderr=subprocess.PIPE)
        for who in ("p", "q")
    ]
    errs = [p.communicate(timeout=120)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], errs
    profiles = cache.load(path)["profiles"]
    assert profiles["count"]["profile"]["heavy_ops"] == 2 * n
    assert {f"{w}-{i}" for w in "pq" for i in range(n)} <= set(profiles)

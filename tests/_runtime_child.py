"""Helpers for runtime tests: run a script in a fresh Python process, read what really happened."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Prepended to every child script: thread inspection from /proc (what really runs).
PRELUDE = r'''
import json, os, sys, collections
def _threads():
    out = {}
    for t in os.listdir("/proc/self/task"):
        try:
            comm = open(f"/proc/self/task/{t}/comm").read().strip()
            st = open(f"/proc/self/task/{t}/stat").read().rsplit(")", 1)[1].split()
            out[int(t)] = (comm, int(st[11]) + int(st[12]))
        except OSError:
            pass
    return out
def tf_compute_threads():
    return sum(1 for c, _ in _threads().values() if c == "tf_Compute")
def busy_threads(run, frac=0.15):
    """Threads that did at least frac of the CPU work while run() ran (intra-op threads in use)."""
    import threading, time, resource
    before = _threads(); r0 = resource.getrusage(resource.RUSAGE_SELF); w = time.perf_counter()
    run()
    w = time.perf_counter() - w; r1 = resource.getrusage(resource.RUSAGE_SELF); after = _threads()
    me = threading.get_native_id()
    deltas = [(after[t][1] - before.get(t, (None, 0))[1], after[t][0], t) for t in after]
    total = sum(d for d, _, _ in deltas) or 1
    cpu = (r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime)
    return {"busy": sum(1 for d, _, _ in deltas if d >= frac * total),
            # intra-op (Eigen) pool threads are named like the process; inter-op ones tf_Compute;
            # the calling thread (also named like the process) feeds and fetches, so it is left out
            "pool_busy": sum(1 for d, c, t in deltas if d >= 0.05 * total and c != "tf_Compute" and t != me),
            "ticks": total, "cpu_per_wall": cpu / w}
def report(**kw):
    print("RESULT " + json.dumps(kw, default=str), flush=True)
'''


def run_child(
    script: str,
    env: dict[str, str] | None = None,
    timeout: float = 240,
    args: list[str] | None = None,
    path: str | None = None,
) -> tuple[dict, str, int]:
    """Run ``script`` in a fresh interpreter; returns (the RESULT dict, stderr, exit code)."""
    full_env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("TF_NUM_", "TF_OVERRIDE", "TF_AUTOPAR", "OMP_", "KMP_")) or k == "TF_AUTOPAR_ENGINES"
    }
    full_env["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH", "")) if p)
    full_env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    lease_dir = tempfile.mkdtemp(prefix="tfa_lease_")  # children of other tests are not co-workers
    full_env["TF_AUTOPAR_LEASE_DIR"] = lease_dir
    full_env.update(env or {})
    code = PRELUDE + textwrap.dedent(script)
    if path is not None:
        with open(path, "w") as fh:
            fh.write(code)
        cmd = [sys.executable, path, *(args or [])]
    else:
        cmd = [sys.executable, "-c", code, *(args or [])]
    try:
        proc = subprocess.run(cmd, env=full_env, capture_output=True, text=True, timeout=timeout)
    finally:
        shutil.rmtree(lease_dir, ignore_errors=True)
    result = {}
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            result = json.loads(line[len("RESULT ") :])
    return result, proc.stderr, proc.returncode


def cpus() -> int:
    return len(os.sched_getaffinity(0))


# A small conv net with a free batch, as a user would export it: at batch 1 its typical op is about
# 1 M multiply-adds (a 1x1 plan on any processor), at batch 64 about 64 M (every CPU per op).
_BUILD_USER_MODEL = """
import keras
inp = keras.Input((32, 32, 3), name="image")
x = keras.layers.Conv2D(32, 3, padding="same", activation="relu")(inp)
x = keras.layers.DepthwiseConv2D(3, padding="same")(x)
x = keras.layers.Conv2D(32, 1, activation="relu")(x)
x = keras.layers.GlobalAveragePooling2D()(x)
model = keras.Model(inp, keras.layers.Dense(10)(x))
model.export(DIR + "/sm", verbose=False)
model.save(DIR + "/m.keras")
report(ok=True)
"""


def build_user_model(directory: str) -> dict[str, str]:
    """Save the small model as a SavedModel (``SM``, batch None) and a .keras file (``KERAS``)."""
    res, err, rc = run_child(f"DIR = {directory!r}\n" + _BUILD_USER_MODEL, {})
    assert rc == 0 and res.get("ok"), err
    return {"SM": os.path.join(directory, "sm"), "KERAS": os.path.join(directory, "m.keras")}

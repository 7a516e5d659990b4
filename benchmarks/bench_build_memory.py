#!/usr/bin/env python
"""What the fast path's build adds to a served process's memory, stage by stage (the fit of
runtime/fastpath/memory.py's estimate).

Per model (built by benchmarks/user_models.py), in a fresh process: load, one call of
``signatures["serving_default"]`` at batch 1 (the served process), a heap trim; then the stages a
build runs, as the fast path runs them (``frozen.FrozenGraph`` with the fast path's trims between
stages, unless ``--no-trim``, its collection over the build's own objects): the converter, the
graph import, a session's first run (grappler), then a second session's first run (a
live-tuning candidate). Before each stage the peak resident
size (VmHWM) is reset (``/proc/self/clear_refs`` 5); after it, its peak and, after the trim, what
it keeps. Reported over the served process's resident size, with the variables' bytes, so that
memory.py's factor (peak = F x variables + base) can be fitted.

    python benchmarks/bench_build_memory.py /work/user_models --only mobilenet_v2,xception,dlrm \\
        --out benchmarks/results/build_memory_<processor>.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
MB = 1 << 20

CHILD = r"""
import ctypes, json, os, sys, time
path, name, here, trim_between = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "1"
sys.path.insert(0, here)
import numpy as np, tensorflow as tf
import user_models
from tf_autopar.runtime import watch
from tf_autopar.runtime.frozen import FrozenGraph
from tf_autopar.runtime.fastpath import memory

def status(key):
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024

def reset():
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")

def trim(what=""):
    if trim_between:
        memory.after_stage(what)  # as the fast path does: after the converter, a gc first

MB = 1 << 20
loaded = tf.saved_model.load(path)
sig = loaded.signatures["serving_default"]
inputs = user_models.make_inputs(name, 1)
sig(**inputs)
memory.trim_heap()
served = status("VmRSS")
var_bytes = memory.variable_bytes(watch.resource_handles(sig))
out = {"model": name, "variables_mb": round(var_bytes / MB, 1), "served_rss_mb": round(served / MB, 1), "stages": {}}
stages = out["stages"]
last = [served]

def stage(what):
    peak, rss = status("VmHWM"), status("VmRSS")
    t_trim = time.perf_counter()
    trim(what)
    trim_ms = round((time.perf_counter() - t_trim) * 1e3, 1)
    kept = status("VmRSS")
    stages[what] = {"peak_over_served_mb": round((peak - served) / MB, 1), "peak_over_before_mb": round((peak - last[0]) / MB, 1),
                    "rss_mb": round(rss / MB, 1), "after_trim_mb": round(kept / MB, 1), "trim_ms": trim_ms}
    last[0] = kept
    reset()

reset()
t = time.perf_counter()
with memory.young_garbage():  # as the fast path freezes (pools._frozen_graph)
    frozen = FrozenGraph(sig, between=stage)
frozen.graph_def = None  # as the fast path's plan drops it
stage("graph_def dropped")
order = list(sig._arg_keywords)
arrays = [np.asarray(inputs[k]) for k in order]
feed = dict(zip(frozen.inputs, arrays))
for n in (1, 2):
    sess = frozen.open_sessions(1, 2)[0]
    sess.run(frozen.outputs, feed)
    stage(f"session {n}: first run")
    if n == 1:
        first = sess
out["build_s"] = round(time.perf_counter() - t, 1)
out["build_peak_over_served_mb"] = max(stages[s]["peak_over_served_mb"] for s in ("frozen", "imported", "session 1: first run"))
out["session_peak_mb"] = stages["session 2: first run"]["peak_over_before_mb"]
print("RESULT " + json.dumps(out), flush=True)
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model_dir")
    ap.add_argument("--only", default="mobilenet_v2,efficientnet_b0,dlrm,xception")
    ap.add_argument("--no-trim", action="store_true", help="no heap trim between stages (the old build)")
    ap.add_argument("--out")
    args = ap.parse_args()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TF_NUM_", "TF_OVERRIDE", "TF_AUTOPAR"))}
    env["TF_CPP_MIN_LOG_LEVEL"] = "3"
    env["PYTHONPATH"] = os.pathsep.join(p for p in (REPO, env.get("PYTHONPATH", "")) if p)
    sys.path.insert(0, HERE)
    from _host import processor

    rows = []
    for name in args.only.split(","):
        argv = [
            sys.executable,
            "-c",
            CHILD,
            os.path.join(args.model_dir, name),
            name,
            HERE,
            "0" if args.no_trim else "1",
        ]
        res = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=900)
        line = [x for x in res.stdout.splitlines() if x.startswith("RESULT ")]
        if not line:
            print(f"{name}: failed\n{res.stderr[-2000:]}", file=sys.stderr)
            continue
        row = json.loads(line[-1][7:])
        rows.append(row)
        print(
            f"{name}: variables {row['variables_mb']} MB, served {row['served_rss_mb']} MB; build peak +"
            f"{row['build_peak_over_served_mb']} MB; a second session +{row['session_peak_mb']} MB; "
            + "; ".join(
                f"{k}: peak +{v['peak_over_served_mb']} kept {v['after_trim_mb']}" for k, v in row["stages"].items()
            ),
            flush=True,
        )
    data = {
        "processor": processor(),
        "method": "VmHWM reset per stage (/proc/self/clear_refs 5), over the served process's RSS after one call and a trim",
        "trim_between_stages": not args.no_trim,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "rows": rows,
    }
    if args.out:
        with open(args.out, "w", encoding="utf-8") as fh:
            json.dump(data, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python
"""How long the fast path's freeze keeps the interpreter lock from the requests beside it.

A request in the serving process needs the interpreter lock to enter and leave TensorFlow; a
build step that holds it in one long C++ call makes the request wait that long. For each
SavedModel of ``benchmarks/user_models.py``, in a fresh process: its serving signature frozen
into a graph of its own two ways, alternating round by round (the order swapped each round),
while a second thread sleeps 0.5 ms at a time and records how late it wakes (a wake-up later
than LATE_MS: the lock was held):

- ``function``: ``convert_variables_to_constants_v2`` as it stands (it imports the result into a
  new function), then that function's GraphDef imported, as the fast path froze before;
- ``direct``: runtime/freezing.py, the converter's own steps without the function's import
  (runtime/frozen.FrozenGraph).

Per freeze: wall seconds, the lock-held seconds (the late wake-ups' lateness, summed) and the
longest wait. Then both graphs' nodes (names and op types) and their sessions' outputs on the
same inputs are compared. Last, the garbage collection the fast path makes after a freeze
(fastpath/memory.after_stage), timed over every object of the process and over only those made
since the build began (memory.young_garbage), alternating.

    python benchmarks/freeze_lock.py /work/user_models --rounds 3 --out benchmarks/results/freeze_lock_epyc.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from bench_fastpath import child_env, host, run_script  # noqa: E402
from user_models import MODELS  # noqa: E402

LATE_MS = 2.0

CHILD = r"""
import contextlib, json, sys, threading, time
path, name, rounds, here = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
sys.path.insert(0, here)
import numpy as np, tensorflow as tf
from user_models import make_inputs
from tf_autopar.runtime import freezing
from tf_autopar.runtime.frozen import FrozenGraph
LATE_MS, TICK_S = float(sys.argv[5]), 0.0005

loaded = tf.saved_model.load(path)
sig = loaded.signatures["serving_default"]

def function_way():
    frozen = freezing._via_function(sig, True)
    graph = tf.Graph()
    with graph.as_default():
        tf.graph_util.import_graph_def(frozen.graph_def, name="")
    return graph, graph.as_graph_def(add_shapes=True), frozen.inputs, frozen.outputs

def direct_way():
    frozen = FrozenGraph(sig)
    return frozen.graph, frozen.graph_def, frozen.inputs, frozen.outputs

late, running = [], [True]
def ticker():
    last = time.perf_counter()
    while running[0]:
        time.sleep(TICK_S)
        now = time.perf_counter()
        late.append((now, (now - last - TICK_S) * 1e3))
        last = now
threading.Thread(target=ticker, daemon=True).start()
time.sleep(0.2)

def timed(way):
    start = time.perf_counter()
    made = way()
    end = time.perf_counter()
    time.sleep(0.05)  # the ticker's wake-up that ends the last wait
    waits = [ms for t, ms in late if start <= t <= end + 0.05 and ms > LATE_MS]
    return made, {"wall_s": round(end - start, 3), "held_s": round(sum(waits) / 1e3, 3),
                  "longest_ms": round(max(waits, default=0.0), 1)}

runs, made = [], {}
for r in range(rounds):
    order = [("function", function_way), ("direct", direct_way)]
    for way, fn in (order if r % 2 == 0 else order[::-1]):
        made[way], stats = timed(fn)
        runs.append({"way": way, "round": r, **stats})
running[0] = False

# the collection after a freeze (fastpath/memory.after_stage): every object of the process,
# or only those made since the build began (memory.young_garbage), alternating
import gc
from tf_autopar.runtime.fastpath import memory
collections = []
for r in range(rounds):
    for way in (("full", "young") if r % 2 == 0 else ("young", "full")):
        with (memory.young_garbage() if way == "young" else contextlib.nullcontext()):
            FrozenGraph(sig)
            start = time.perf_counter()
            gc.collect()
            collections.append({"way": way, "round": r, "ms": round((time.perf_counter() - start) * 1e3, 1)})

inputs = make_inputs(name, 1)
def outputs(graph, ins, outs):
    with tf.compat.v1.Session(graph=graph) as sess:
        feed = {}
        for t in ins:
            key = t.split(":")[0]
            feed[t] = inputs[key]
        return sess.run(outs, feed)
(g1, gd1, i1, o1), (g2, gd2, i2, o2) = made["function"], made["direct"]
# TensorFlow's import of a graph with lowered loops adds unconnected placeholders, a different
# number each time (unused_control_flow_input_N, the same code twice): not compared
def nodes(gd):
    return sorted((n.name, n.op) for n in gd.node if not n.name.startswith("unused_control_flow_input"))
nodes1, nodes2 = nodes(gd1), nodes(gd2)
a, b = outputs(g1, i1, o1), outputs(g2, i2, o2)
check = {"same_names": (i1, o1) == (i2, o2), "same_nodes": nodes1 == nodes2, "nodes": [len(nodes1), len(nodes2)],
         "only_function": [n for n in nodes1 if n not in nodes2][:5], "only_direct": [n for n in nodes2 if n not in nodes1][:5],
         "max_abs_diff": float(max(float(np.max(np.abs(np.asarray(x) - np.asarray(y)))) for x, y in zip(a, b)))}
print("RESULT " + json.dumps({"runs": runs, "check": check, "collections": collections}))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model_dir")
    ap.add_argument("--only", default=None, help="comma-separated model names (default: all of user_models.MODELS)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default=os.path.join(HERE, "results", "freeze_lock.json"))
    args = ap.parse_args()
    names = args.only.split(",") if args.only else list(MODELS)
    out = {"host": host(), "command": " ".join(sys.argv), "late_ms": LATE_MS, "rows": []}
    print(f"processor: {out['host']['cpu_model']} ({out['host']['cpus']} CPUs); TensorFlow {out['host']['tf_version']}")
    print(
        "| model | function: s (lock held s, longest ms) | direct: s (lock held s, longest ms) | same nodes, outputs | collection after it, full / young ms |"
    )
    print("|---|---|---|---|---|")
    for name in names:
        path = os.path.join(args.model_dir, name)
        if not os.path.isdir(path):
            continue
        res = run_script(CHILD, [path, name, str(args.rounds), HERE, str(LATE_MS)], child_env())
        res["model"] = name
        out["rows"].append(res)
        if "error" in res:
            print(f"| {name} | failed: {res['error'].splitlines()[-1]} | | | |")
            continue
        cells = []
        for way in ("function", "direct"):
            runs = [r for r in res["runs"] if r["way"] == way]
            med = {k: statistics.median(r[k] for r in runs) for k in ("wall_s", "held_s", "longest_ms")}
            res.setdefault("median", {})[way] = med
            cells.append(f"{med['wall_s']:.2f} ({med['held_s']:.2f}, {med['longest_ms']:.0f})")
        c = res["check"]
        same = "yes" if c["same_nodes"] and c["same_names"] else f"no ({c['nodes'][0]} vs {c['nodes'][1]})"
        gc_ms = {w: statistics.median(x["ms"] for x in res["collections"] if x["way"] == w) for w in ("full", "young")}
        res["median"]["collection_ms"] = gc_ms
        print(
            f"| {name} | {cells[0]} | {cells[1]} | {same}, {c['max_abs_diff']:.1e} | {gc_ms['full']:.0f} / {gc_ms['young']:.0f} |",
            flush=True,
        )
        with open(args.out, "w") as fh:
            json.dump(out, fh, indent=1)
    out["load_average_at_end"] = round(os.getloadavg()[0], 2)
    with open(args.out, "w") as fh:
        json.dump(out, fh, indent=1)


if __name__ == "__main__":
    main()

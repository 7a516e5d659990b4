#!/usr/bin/env python
"""Where a candidate session's build goes: grappler, or the rest of its first run (docs/tuning.md).

Live tuning builds a fresh session per candidate and runs it once before it takes calls; that
first run holds grappler's rewrite of the whole graph, the executor's creation and one call.
On the rows that took longest to tune the builds, not the paired calls, took the time. This
measures, per model in a fresh process on an idle host (no requests beside it), the first and a
steady call of a session on the frozen graph as the fast path opens it, and the same with
grappler turned off (``disable_meta_optimizer``): the first-run difference is what grappler
costs a build, the upper bound of what reusing one session's rewritten graph for the next
candidates could save; the steady-call difference is what grappler's rewrite is worth per call
(why it cannot simply be skipped). Last, the rewrite done once (``tf_optimizer.OptimizeGraph``
with the outputs as fetches), imported, and run by a session with grappler off: what each later
candidate's build would cost if the first rewrite were kept, its steady call, and how far its
outputs are from a grappler session's.

    python benchmarks/bench_build_split.py /work/models --only xception,nasnet_mobile,bert_encoder \\
        --out benchmarks/results/build_split_xeon.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from bench_fastpath import child_env, host, run_script  # noqa: E402
from user_models import SERVING  # noqa: E402

CHILD = r"""
import json, statistics, sys, time
path, name, batch, inter, intra = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
sys.path.insert(0, sys.argv[6])
import tf_autopar
tf_autopar.enable(optimize=False)
import tensorflow as tf
from user_models import make_inputs
from tf_autopar.runtime.frozen import FrozenGraph
from tf_autopar.runtime import sessions

inputs = make_inputs(name, batch)
t0 = time.perf_counter()
frozen = FrozenGraph(tf.saved_model.load(path).signatures["serving_default"])
freeze_s = time.perf_counter() - t0
feeds = {t: inputs[n] for t, n in zip(frozen.inputs, sorted(inputs))}
out = dict(freeze_s=freeze_s)
def open_session(graph, grappler):
    config = tf.compat.v1.ConfigProto(inter_op_parallelism_threads=inter, intra_op_parallelism_threads=intra,
                                      use_per_session_threads=True)
    config.graph_options.rewrite_options.disable_meta_optimizer = not grappler
    with sessions.bypass():
        return tf.compat.v1.Session(graph=graph, config=config)
def timed(s):
    # (first run s, median of 9 steady calls ms, the first run's outputs)
    t = time.perf_counter(); got = s.run(frozen.outputs, feeds); first = time.perf_counter() - t
    steady = []
    for _ in range(9):
        t = time.perf_counter(); s.run(frozen.outputs, feeds); steady.append(time.perf_counter() - t)
    s.close()
    return first, statistics.median(steady) * 1e3, got
for label, grappler in (("grappler", True), ("no_grappler", False), ("grappler_again", True)):
    first, steady, got = timed(open_session(frozen.graph, grappler))
    out[label] = dict(first_s=first, steady_ms=steady)
    if label == "grappler":
        ref = got  # a grappler session's outputs, for the rewritten graph's
# grappler's rewrite done once, as a session would do it (fetches: the outputs), its graph imported
# and run by a session with grappler off: what every later candidate would cost to build
import numpy as np
from tensorflow.core.protobuf import meta_graph_pb2
from tensorflow.python.grappler import tf_optimizer
t = time.perf_counter()
meta = meta_graph_pb2.MetaGraphDef()
meta.graph_def.CopyFrom(frozen.graph.as_graph_def())
for o in frozen.outputs:
    meta.collection_def["train_op"].node_list.value.append(o.split(":")[0])
rewritten = tf_optimizer.OptimizeGraph(tf.compat.v1.ConfigProto(), meta)
out["rewrite_s"] = time.perf_counter() - t
graph = tf.Graph()
with graph.as_default():
    tf.graph_util.import_graph_def(rewritten, name="")
first, steady, got = timed(open_session(graph, False))
out["reused"] = dict(first_s=first, steady_ms=steady,
                     max_abs_diff=max(float(np.max(np.abs(a - b))) for a, b in zip(got, ref)),
                     nodes=[len(frozen.graph_def.node), len(rewritten.node)])
print("RESULT " + json.dumps(out), flush=True)
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model_dir")
    ap.add_argument("--only", default="xception,nasnet_mobile,bert_encoder,efficientnet_b0")
    ap.add_argument("--batches", default="batch1,serving", help="SERVING keys of user_models.py")
    ap.add_argument("--setting", default="1x2", help="the sessions' inter x intra")
    ap.add_argument("--out")
    args = ap.parse_args()
    inter, intra = (int(x) for x in args.setting.split("x"))
    env = child_env()
    rows, start = [], time.time()
    print(
        "| model | batch | freeze s | first run s, grappler / off / again | grappler's share of the first run "
        "| steady ms, grappler / off | rewrite once s | first run s, rewritten graph | steady ms, rewritten | max diff |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name in args.only.split(","):
        for key in args.batches.split(","):
            batch = SERVING[name][key]
            argv = [os.path.join(args.model_dir, name), name, str(batch), str(inter), str(intra), HERE]
            res = run_script(CHILD, argv, env)
            res.update(model=name, batch=batch)
            rows.append(res)
            if "error" in res:
                print(f"| {name} | {batch} | error: {res['error'][-200:]} | | | | | | | |")
                continue
            g, n, a, r = res["grappler"], res["no_grappler"], res["grappler_again"], res["reused"]
            share = 1 - n["first_s"] / min(g["first_s"], a["first_s"])
            print(
                f"| {name} | {batch} | {res['freeze_s']:.1f} | {g['first_s']:.2f} / {n['first_s']:.2f} / {a['first_s']:.2f} "
                f"| {share:.0%} | {g['steady_ms']:.1f} / {n['steady_ms']:.1f} | {res['rewrite_s']:.2f} "
                f"| {r['first_s']:.2f} | {r['steady_ms']:.1f} | {r['max_abs_diff']:.1e} |"
            )
    out = dict(
        host=host(), setting=args.setting, rows=rows, command=" ".join(sys.argv), wall_s=round(time.time() - start, 1)
    )
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(out, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python
"""Does the order of calls change a paired comparison of two frozen sessions? One process, the
same two sessions of one model, timed two ways, interleaved for ``--seconds``:

- ``blocks``: 8 calls of one session, then 8 of the other, the first 2 of each block dropped
  (what one session serving alone looks like, and what bench_fastpath.py's sweep does);
- ``alternating``: a call of A, then a call of B, the ratio B/A per pair (how live tuning paired
  its calls before it took blocks of four, the first untimed: measure/live.py).

If the two schemes give different ratios, a trial that alternates call by call measures the
switching, not the setting.

    python benchmarks/bench_alternation.py /work/models --rows lstm_classifier:32:1x2:2x2,dcn_v2:2048:1x2:2x2 \\
        --seconds 60 --out benchmarks/results/alternation.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from bench_fastpath import host  # noqa: E402

CHILD = r"""
import json, statistics, sys, time
sys.path.insert(0, sys.argv[6])
import tensorflow as tf
from tf_autopar.runtime.frozen import FrozenGraph
from user_models import make_inputs
path, name, batch, a, b, seconds = sys.argv[1], sys.argv[1].rstrip("/").split("/")[-1], int(sys.argv[2]), sys.argv[3], sys.argv[4], float(sys.argv[5])
loaded = tf.saved_model.load(path)
frozen = FrozenGraph(loaded.signatures["serving_default"])
inputs = make_inputs(name, batch)
feeds = {t: inputs[n] for t, n in zip(frozen.inputs, sorted(inputs))}
sess = {k: frozen.open_sessions(*map(int, k.split("x")))[0] for k in (a, b)}
for s in sess.values():
    for _ in range(3):
        s.run(frozen.outputs, feeds)
def timed(s):
    t0 = time.perf_counter(); s.run(frozen.outputs, feeds); return time.perf_counter() - t0
block, alt, rounds = {a: [], b: []}, [], 0
end = time.perf_counter() + seconds
while time.perf_counter() < end:
    rounds += 1
    for k in (a, b):
        for i in range(8):
            x = timed(sess[k])
            if i >= 2:
                block[k].append(x)
    for _ in range(6):
        xa = timed(sess[a]); xb = timed(sess[b]); alt.append(xb / xa)
med = {k: statistics.median(v) * 1e3 for k, v in block.items()}
print("RESULT " + json.dumps(dict(model=name, batch=batch, a=a, b=b, block_ms=med, block_ratio=med[b] / med[a],
      alternating_ratio=statistics.median(alt), pairs=len(alt), per_session=len(block[a]), rounds=rounds)))
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model_dir")
    ap.add_argument("--rows", default="lstm_classifier:32:1x2:2x2,dcn_v2:2048:1x2:2x2", help="MODEL:BATCH:A:B,...")
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    rows = []
    for spec in args.rows.split(","):
        name, batch, a, b = spec.split(":")
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
        env["PYTHONPATH"] = os.pathsep.join(p for p in (os.path.dirname(HERE), env.get("PYTHONPATH", "")) if p)
        proc = subprocess.run(
            [sys.executable, "-c", CHILD, os.path.join(args.model_dir, name), batch, a, b, str(args.seconds), HERE],
            env=env,
            capture_output=True,
            text=True,
            timeout=args.seconds + 600,
        )
        line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
        row = json.loads(line[7:]) if line else {"model": name, "error": proc.stderr[-1500:]}
        rows.append(row)
        print(
            f"{name} b{batch} {b}/{a}: blocks {row.get('block_ratio', float('nan')):.3f}, "
            f"alternating {row.get('alternating_ratio', float('nan')):.3f} ({row.get('pairs')} pairs)",
            flush=True,
        )
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"host": host(), "command": " ".join(sys.argv), "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

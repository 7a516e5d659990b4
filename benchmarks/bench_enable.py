"""What tf_autopar.enable() costs: (a) at process start, (b) per session creation (graph analysis).

(a) Fresh processes, configurations interleaved round by round:
    tf          `import tensorflow`
    tf+enable   `import tensorflow; import tf_autopar; tf_autopar.enable()`
    enable+tf   `import tf_autopar; tf_autopar.enable(); import tensorflow`
  Reported: enable()'s own time measured inside the process with perf_counter around
  `import tf_autopar; enable()` (median, p90; goal < 20 ms), and the difference of whole-process
  wall times against `tf` (noisier: TF's import is ~2.5 s). The plan cache and topology cache
  live in a temporary directory warmed once, as on a second start.
(b) Per bundled workload, in a fresh process with enable(): the frozen inference graph is imported
  into fresh tf.Graphs and a Session is created on each; reported: the analysis time recorded in
  status() against the Session constructor alone and against constructor + first run (where TF
  really builds the executors). Goal: analysis < 5% of session creation.

Usage: python benchmarks/bench_enable.py [--rounds N] [--workloads a,b] [--size tiny|paper] [--parts start,sessions] [--quick] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

START_SCRIPTS = {
    "tf": "import time; t=time.perf_counter(); import tensorflow; print('ENABLE_MS', 0.0)",
    "tf+enable": (
        "import tensorflow, time; t=time.perf_counter(); import tf_autopar; tf_autopar.enable(); "
        "print('ENABLE_MS', (time.perf_counter()-t)*1e3)"
    ),
    "enable+tf": (
        "import time; t=time.perf_counter(); import tf_autopar; tf_autopar.enable(); "
        "e=(time.perf_counter()-t)*1e3; import tensorflow; print('ENABLE_MS', e)"
    ),
}

SESSION_SCRIPT = r"""
import json, sys, time
import tf_autopar
tf_autopar.enable()
import tensorflow as tf
from tf_autopar_workloads import runner
name, size, reps = sys.argv[1], sys.argv[2], int(sys.argv[3])
built = runner.build(name, size=size)
infer = built.session("infer")
graph_def = infer.graph_def
feeds = dict(zip(infer.input_names, built._flat_inputs))
ctor, first, analysis = [], [], []
for _ in range(reps):
    g = tf.Graph()
    with g.as_default():
        tf.graph_util.import_graph_def(graph_def, name="")
    t0 = time.perf_counter()
    s = tf.compat.v1.Session(graph=g)
    t1 = time.perf_counter()
    s.run(infer.output_names, feeds)
    t2 = time.perf_counter()
    s.close()
    ctor.append((t1 - t0) * 1e3); first.append((t2 - t0) * 1e3)
    analysis.append(tf_autopar.status().sessions[-1].analysis_ms)
print("RESULT " + json.dumps({"nodes": len(graph_def.node), "ctor_ms": ctor, "first_run_ms": first, "analysis_ms": analysis}))
"""


def _env(cache_dir: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TF_NUM_", "TF_OVERRIDE", "TF_AUTOPAR"))}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH", "")) if p)
    env["TF_AUTOPAR_CACHE_DIR"] = cache_dir
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    # enable()'s own work: a lone process without a count also waits out the rendezvous window
    # (about 1 s, docs/design.md "Production"), which is a wait, not a cost of this code
    env["TF_AUTOPAR_RENDEZVOUS_S"] = "0"
    return env


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


def start_cost(rounds: int, cache_dir: str) -> dict:
    env = _env(cache_dir)
    subprocess.run([sys.executable, "-c", START_SCRIPTS["enable+tf"]], env=env, capture_output=True)  # warm caches
    wall: dict[str, list[float]] = {k: [] for k in START_SCRIPTS}
    inside: dict[str, list[float]] = {k: [] for k in START_SCRIPTS}
    for _ in range(rounds):
        for name, code in START_SCRIPTS.items():
            t0 = time.perf_counter()
            out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
            wall[name].append((time.perf_counter() - t0) * 1e3)
            line = [x for x in out.stdout.splitlines() if x.startswith("ENABLE_MS")]
            if out.returncode != 0 or not line:
                raise RuntimeError(f"{name} failed: {out.stderr[-500:]}")
            inside[name].append(float(line[-1].split()[1]))
    base = statistics.median(wall["tf"])
    result = {}
    for name in START_SCRIPTS:
        result[name] = {
            "wall_median_ms": round(statistics.median(wall[name]), 1),
            "wall_minus_tf_ms": round(statistics.median(wall[name]) - base, 1),
            "enable_median_ms": round(statistics.median(inside[name]), 2),
            "enable_p90_ms": round(pct(inside[name], 0.9), 2),
            "rounds": rounds,
        }
    return result


def session_cost(names: list[str], size: str, reps: int, cache_dir: str) -> dict:
    env = _env(cache_dir)
    result = {}
    for name in names:
        out = subprocess.run(
            [sys.executable, "-c", SESSION_SCRIPT, name, size, str(reps)],
            env=env,
            capture_output=True,
            text=True,
            timeout=1800,
        )
        line = [x for x in out.stdout.splitlines() if x.startswith("RESULT ")]
        if out.returncode != 0 or not line:
            result[name] = {"error": (out.stderr.strip().splitlines() or ["?"])[-1]}
            continue
        d = json.loads(line[-1][7:])
        a, c, f = (statistics.median(d[k]) for k in ("analysis_ms", "ctor_ms", "first_run_ms"))
        result[name] = {
            "nodes": d["nodes"],
            "analysis_ms": round(a, 2),
            "ctor_ms": round(c, 2),
            "ctor_first_run_ms": round(f, 1),
            "analysis_pct_of_ctor": round(100 * a / c, 1) if c else None,
            "analysis_pct_of_ctor_first_run": round(100 * a / f, 2) if f else None,
        }
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--workloads", default=None, help="comma list (default: all bundled)")
    ap.add_argument("--size", default="tiny", choices=("tiny", "paper"))
    ap.add_argument("--quick", action="store_true", help="2 rounds, 2 reps, 2 workloads: checks it runs")
    ap.add_argument("--parts", default="start,sessions", help="which measurements: start, sessions or both")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    sys.path.insert(0, ROOT)
    import tf_autopar_workloads as workloads

    names = args.workloads.split(",") if args.workloads else workloads.names()
    rounds, reps = args.rounds, args.reps
    if args.quick:
        rounds, reps, names = 2, 2, names[:2] if not args.workloads else names
    with tempfile.TemporaryDirectory(prefix="bench_enable_") as cache_dir:
        parts = set(args.parts.split(","))
        report = {
            "start": start_cost(rounds, cache_dir) if "start" in parts else {},
            "sessions": session_cost(names, args.size, reps, cache_dir) if "sessions" in parts else {},
        }
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print("(a) start cost (ms)")
    for name, r in report["start"].items():
        print(
            f"  {name:10s} process {r['wall_median_ms']:8.1f} (+{r['wall_minus_tf_ms']:6.1f} vs tf)  "
            f"enable() median {r['enable_median_ms']:6.2f} p90 {r['enable_p90_ms']:6.2f}  [{r['rounds']} rounds]"
        )
    print(f"(b) analysis per session creation ({args.size})")
    for name, r in report["sessions"].items():
        if "error" in r:
            print(f"  {name:14s} error: {r['error']}")
            continue
        print(
            f"  {name:14s} {r['nodes']:6d} nodes  analysis {r['analysis_ms']:7.2f} ms  ctor {r['ctor_ms']:7.2f} ms "
            f"({r['analysis_pct_of_ctor']}%)  ctor+first run {r['ctor_first_run_ms']:8.1f} ms "
            f"({r['analysis_pct_of_ctor_first_run']}%)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

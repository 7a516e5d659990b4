"""AMD's zentf plugin untuned against planned, beside stock TensorFlow (docs/openmp.md, "AMD zentf").

zentf pins numpy 1.26.4, so it lives in its own virtual environment (never the shared one):

    python3 -m venv /tmp/zentf-venv
    /tmp/zentf-venv/bin/pip install zentf 'tensorflow-cpu==2.21.0'
    python benchmarks/bench_zentf.py --zentf-python /tmp/zentf-venv/bin/python

Each configuration runs in a fresh process, in interleaved rounds; the figure per process is the
median of the timed calls after untimed warm-up calls, and ratios are medians of per-round ratios.
Configurations:
  stock             this interpreter's TensorFlow, TensorFlow's defaults
  stock-plan        the same with tf_autopar's plan (`tf-autopar plan MODEL --batch N`)
  zentf             the zentf environment with TF_ENABLE_ZENDNN_OPTS=1 only (untuned)
  zentf-plan        the same with the plan made there (zentf detected: AMD's variables too)
  zentf-plan-intra1 zentf-plan with TensorFlow's intra-op pool at 1 thread (the OpenMP rule of
                    intel-tensorflow) instead of the team's size (the guide's cores)
results/zentf_epyc.json was run before the plan took the team's size for TensorFlow's pool: there,
"zentf-plan" had TF_NUM_INTRAOP_THREADS=1 and "zentf-plan-intra" (then: the CPU count) is
exactly today's plan (its "env" records both).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(ROOT), str(HERE)]

from _host import processor  # noqa: E402

import tf_autopar.planning.variables as V  # noqa: E402
import tf_autopar.planning.zentf as Z  # noqa: E402

CONFIGS = ("stock", "stock-plan", "zentf", "zentf-plan", "zentf-plan-intra1")
# --ablate: the zentf plan without one group of its variables at a time (all with zentf on)
ABLATIONS: dict[str, tuple[str, ...]] = {
    "no-wait-policy": (Z.OMP_WAIT_POLICY,),
    "no-kmp-extras": (Z.KMP_TPAUSE, *Z.BARRIER_PATTERNS),
    "no-kmp-rule": (V.KMP_BLOCKTIME, V.KMP_AFFINITY),
    "no-zendnn-vars": (Z.MATMUL_DIRECT, Z.MATMUL_WEIGHT_CACHE, Z.MATMUL_ALGO),
    "no-omp-flags": (Z.OMP_DYNAMIC, Z.OMP_PROC_BIND),
    "no-affinity": (V.KMP_AFFINITY,),
    "no-blocktime": (V.KMP_BLOCKTIME,),
}

CHILD = r"""
import json, os, statistics, sys, time
sys.path.insert(0, os.environ["BENCH_DIR"])
import tensorflow as tf
from user_models import make_inputs
name, batch, warm, timed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
fn = tf.saved_model.load(os.path.join(os.environ["MODELS"], name)).signatures["serving_default"]
inputs = {k: tf.constant(v) for k, v in make_inputs(name, batch).items()}
for _ in range(warm):
    out = fn(**inputs)
times = []
for _ in range(timed):
    t = time.perf_counter(); out = fn(**inputs); times.append(time.perf_counter() - t)
first = sorted(out)[0]
print(json.dumps({"ms": statistics.median(times) * 1e3, "checksum": float(tf.reduce_sum(out[first]))}))
"""


def clean_env() -> dict[str, str]:
    """This environment without thread, ZenDNN or zentf variables: each configuration sets its own."""
    drop = set(Z.VARIABLES) | {Z.ENABLE}
    return {
        k: v
        for k, v in os.environ.items()
        if not V.is_thread_setting(k) and k not in drop and not k.startswith(("ZENDNN", "TF_AUTOPAR_"))
    }


def plan_env(python: str, model: str, batch: int, base: dict[str, str]) -> dict[str, str]:
    """The plan tf_autopar makes for MODEL at BATCH in that interpreter's environment."""
    env = dict(base, PYTHONPATH=str(ROOT))
    out = subprocess.run(
        [python, "-m", "tf_autopar.cli.main", "plan", model, "--batch", str(batch), "--format", "env"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    ).stdout
    pairs = (line.split("=", 1) for line in out.splitlines() if "=" in line and not line.startswith("#"))
    return {k: v.strip("'") for k, v in pairs if not k.startswith("TF_AUTOPAR_")}


def run_child(python: str, env: dict[str, str], model: str, name: str, batch: int, warm: int, timed: int) -> dict:
    env = dict(env, BENCH_DIR=str(HERE), MODELS=str(Path(model).parent), TF_CPP_MIN_LOG_LEVEL="2")
    env["PYTHONPATH"] = str(ROOT)
    out = subprocess.run(
        [python, "-c", CHILD, name, str(batch), str(warm), str(timed)],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    if out.returncode != 0:
        return {"error": out.stderr.strip().splitlines()[-1:] or ["exit %d" % out.returncode]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--zentf-python", required=True, help="the interpreter of the environment with zentf")
    ap.add_argument("--models", default="/work/user_models")
    ap.add_argument("--rows", default="mobilenet_v2:1,mobilenet_v2:8,bert_encoder:1,dlrm:1")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--warm", type=int, default=5)
    ap.add_argument("--timed", type=int, default=30)
    ap.add_argument("--out", default=str(HERE / "results" / "zentf_epyc.json"))
    ap.add_argument(
        "--ablate",
        default="",
        metavar="NAMES",
        help=f"the zentf plan without each named group of its variables ({', '.join(ABLATIONS)}, or all)",
    )
    args = ap.parse_args(argv)

    base = clean_env()
    zbase = dict(base, **{Z.ENABLE: "1"})
    cpus = len(os.sched_getaffinity(0))
    rows = [(r.split(":")[0], int(r.split(":")[1])) for r in args.rows.split(",")]
    result: dict = {
        "processor": processor(),
        "cpus": cpus,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "method": f"fresh process per configuration, {args.rounds} interleaved rounds, median of {args.timed} "
        f"calls after {args.warm} warm-up calls; ratios: median over rounds of per-round ratios",
        "rows": {},
    }
    for name, batch in rows:
        model = os.path.join(args.models, name)
        envs = {
            "stock": base,
            "stock-plan": dict(base, **plan_env(sys.executable, model, batch, base)),
            "zentf": zbase,
            "zentf-plan": dict(zbase, **plan_env(args.zentf_python, model, batch, zbase)),
        }
        envs["zentf-plan-intra1"] = dict(envs["zentf-plan"], **{V.INTRAOP: "1"})
        configs = CONFIGS
        if args.ablate:
            wanted = args.ablate.split(",") if args.ablate != "all" else list(ABLATIONS)
            configs = ("zentf", "zentf-plan", "zentf-plan-intra1", *wanted)
            for label in wanted:
                envs[label] = {k: v for k, v in envs["zentf-plan"].items() if k not in ABLATIONS[label]}
        pythons = {c: (sys.executable if c.startswith("stock") else args.zentf_python) for c in configs}
        planned = {c: {k: v for k, v in envs[c].items() if base.get(k) != v} for c in configs}
        runs: dict[str, list] = {c: [] for c in configs}
        for r in range(args.rounds):
            order = configs if r % 2 == 0 else tuple(reversed(configs))
            for c in order:
                runs[c].append(run_child(pythons[c], envs[c], model, name, batch, args.warm, args.timed))
                print(f"{name} b{batch} round {r} {c}: {runs[c][-1]}", flush=True)
        result["rows"][f"{name}:{batch}"] = {"env": planned, "runs": runs, "summary": summarize(runs)}
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: v["summary"] for k, v in result["rows"].items()}, indent=1))
    return 0


def summarize(runs: dict[str, list]) -> dict:
    """Median ms per configuration, and speed ratios (time of the first / time of the second) over rounds."""
    ok = {c: [r.get("ms") for r in rs] for c, rs in runs.items()}
    out: dict = {"median_ms": {c: round(statistics.median(v), 3) for c, v in ok.items() if None not in v and v}}

    def ratio(a: str, b: str) -> dict | None:
        pairs = [x / y for x, y in zip(ok[a], ok[b]) if x and y]
        if not pairs:
            return None
        return {"median": round(statistics.median(pairs), 3), "min": round(min(pairs), 3), "max": round(max(pairs), 3)}

    pairs = [("stock", "zentf"), ("zentf", "zentf-plan"), ("stock", "zentf-plan"), ("stock-plan", "zentf-plan")]
    pairs += [(c, "zentf-plan") for c in ("zentf-plan-intra", "zentf-plan-intra1", *ABLATIONS)]
    for a, b in pairs:
        if a in ok and b in ok:
            out[f"{b} speedup over {a}"] = ratio(a, b)
    return out


if __name__ == "__main__":
    sys.exit(main())

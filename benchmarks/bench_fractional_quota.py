#!/usr/bin/env python
"""Under a fractional CPU quota, is one more thread than the whole CPUs worse or better?

The planner gives the pools floor(quota) CPUs (planning/planner.py, FRACTIONAL_QUOTA_EXTRA_THREAD):
a pool with more runnable threads than the quota burns the group's runtime early in each CFS
period and the whole process waits out the rest of it. Under a 1.5-CPU quota the remainder might
instead pay for a second thread. This measures it with a real cgroup (v1 cpu controller, or v2
where the cpu controller is delegated): each configuration (inter x intra threads) runs in a
fresh process inside its own quota group, configurations interleaved round by round (the start
rotates each round), and reports per configuration the median request latency, throughput and
the throttled share of CFS periods during the timed loop (cpu.stat nr_throttled / nr_periods),
with their range over rounds and the latency ratio to the first configuration paired by round.

    sudo python benchmarks/bench_fractional_quota.py                       # 1.5 CPUs, 7 rounds x 20 s
    sudo python benchmarks/bench_fractional_quota.py --quota 2.5 --configs 2x2,3x3,2x3,3x2
    sudo python benchmarks/bench_fractional_quota.py --model wide_deep     # a bundled workload, tiny size
    sudo python benchmarks/bench_fractional_quota.py --rounds 2 --seconds 3 --out /tmp/q.json  # smoke run

Run on a quiet machine: other load competes for the same cores and shows up as latency, not as
throttling (the quota only caps; --shares raises the group's weight if the host is busy). Needs
root (or a writable delegated controller); without one it says what is missing and exits 2.
The result decides FRACTIONAL_QUOTA_EXTRA_THREAD: if the extra thread (1x2, 2x2 at 1.5 CPUs)
beats floor (1x1) by more than the spread between rounds in both latency and throughput, switch
it on and record the run in benchmarks/results/ and docs/design.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _host import processor as cpu_model  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tf_autopar.measure.cgroup import (  # noqa: E402  (after the path is set)
    CgroupUnavailable,
    CpuStat,
    QuotaGroup,
    check_writable,
    find_cpu_controller,
)

DEFAULT_OUT = REPO / "benchmarks" / "results" / "fractional_quota.json"

# The child: builds the model, warms up, says "start", waits for the parent's cpu.stat snapshot,
# times requests for the given seconds, says "end" (the parent snapshots again), then prints JSON.
CHILD = r"""
import json, os, sys, time
cfg = json.loads(sys.argv[1])
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import tensorflow as tf
if cfg["model"] == "matmul":
    n, depth, branches = cfg["size"], cfg["depth"], cfg["branches"]
    x = tf.random.stateless_normal((n, n), seed=(1, 2))
    ws = [[tf.random.stateless_normal((n, n), seed=(b, d)) / n ** 0.5 for d in range(depth)] for b in range(branches)]

    @tf.function
    def fn(x):
        outs = []
        for b in range(branches):  # independent branches: what inter-op threads can overlap
            y = x
            for w in ws[b]:
                y = tf.tanh(tf.matmul(y, w))
            outs.append(y)
        return tf.add_n(outs)

    def step():
        fn(x).numpy()
else:
    from tf_autopar_workloads import runner
    built = runner.build(cfg["model"], size=cfg["workload_size"], batch=1)
    f = built.infer_function()
    args = [tf.constant(a) for a in tf.nest.flatten(built.inputs)]

    def step():
        for o in f(*args):
            o.numpy()
for _ in range(cfg["warmup"]):
    step()
print("start", flush=True)
sys.stdin.readline()
times = []
cpu0 = os.times()
begin = time.perf_counter()
while time.perf_counter() - begin < cfg["seconds"]:
    t0 = time.perf_counter()
    step()
    times.append(time.perf_counter() - t0)
loop = time.perf_counter() - begin
cpu1 = os.times()
print("end", flush=True)
comm = []  # thread names: the inter-op pool's threads are "tf_Compute" (what really ran, not what was asked)
for t in os.listdir("/proc/self/task"):
    try:
        comm.append(open(f"/proc/self/task/{t}/comm").read().strip())
    except OSError:
        pass
# prefixed: TensorFlow or a workload may print lines of its own to stdout
print("RESULT " + json.dumps({"step_times_s": times, "loop_s": loop,
                  "cpu_s": (cpu1.user + cpu1.system) - (cpu0.user + cpu0.system), "affinity": sorted(os.sched_getaffinity(0)),
                  "inter_op_threads_running": comm.count("tf_Compute"), "threads": len(comm),
                  "tf_version": tf.__version__}), flush=True)
"""


def parse_config(text: str) -> tuple[int, int]:
    inter, sep, intra = text.lower().partition("x")
    if not sep or not inter.isdigit() or not intra.isdigit() or int(inter) < 1 or int(intra) < 1:
        raise argparse.ArgumentTypeError(f"a configuration is INTERxINTRA with positive counts, got {text!r}")
    return int(inter), int(intra)


def stat_delta(before: CpuStat, after: CpuStat) -> dict[str, Any]:
    periods = after.nr_periods - before.nr_periods
    throttled = after.nr_throttled - before.nr_throttled
    return {
        "nr_periods": periods,
        "nr_throttled": throttled,
        "throttled_us": after.throttled_us - before.throttled_us,
        "throttled_fraction": throttled / periods if periods else None,
    }


def run_one(controller: Any, args: argparse.Namespace, config: tuple[int, int], tag: str) -> dict[str, Any]:
    """One fresh process at ``config`` inside its own quota group; its timed loop and cpu.stat."""
    inter, intra = config
    env = dict(
        os.environ,
        TF_NUM_INTEROP_THREADS=str(inter),
        TF_NUM_INTRAOP_THREADS=str(intra),
        TF_CPP_MIN_LOG_LEVEL="2",
        TF_AUTOPAR_DISABLE="1",
    )
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    cfg = {
        "model": args.model,
        "size": args.size,
        "depth": args.depth,
        "branches": args.branches,
        "workload_size": args.workload_size,
        "warmup": args.warmup,
        "seconds": args.seconds,
    }
    with QuotaGroup(controller, args.quota, tag) as group:
        if args.shares:
            name, value = (
                ("cpu.shares", str(args.shares)) if controller.version == 1 else ("cpu.weight", str(args.shares))
            )
            Path(group.path, name).write_text(value)
        started = time.monotonic()
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, json.dumps(cfg)],
            env=env,
            preexec_fn=group.join,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            line = child.stdout.readline()
            while line and line.strip() != "start":  # lines the model printed while it was built
                line = child.stdout.readline()
            if line.strip() != "start":
                child.kill()
                _, err = child.communicate(timeout=30)
                return {"config": f"{inter}x{intra}", "error": (line + err)[-2000:]}
            before = group.stat()
            child.stdin.write("go\n")
            child.stdin.flush()
            line = child.stdout.readline()
            after = group.stat()
            out, err = child.communicate(timeout=args.seconds + 120)
        except BaseException:
            child.kill()
            child.wait()
            raise
        whole = group.stat()
    found = [ln[len("RESULT ") :] for ln in out.splitlines() if ln.startswith("RESULT ")]
    if child.returncode != 0 or line.strip() != "end" or not found:
        return {"config": f"{inter}x{intra}", "error": (out[-500:] + err)[-2000:], "returncode": child.returncode}
    result = json.loads(found[-1])
    times = result.pop("step_times_s")
    return {
        "config": f"{inter}x{intra}",
        "requests": len(times),
        "median_s": statistics.median(times),
        "p90_s": sorted(times)[int(0.9 * (len(times) - 1))],
        "throughput_rps": len(times) / result["loop_s"],
        "timed": stat_delta(before, after),
        "whole_process": whole.to_dict() | {"raw": None},
        "cpu_ms_per_request": result["cpu_s"] * 1e3 / max(1, len(times)),
        "load_after": os.getloadavg()[0],
        "wall_s": time.monotonic() - started,
        **result,
    }


def spread(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def summarise(runs: list[dict[str, Any]], configs: list[str]) -> dict[str, Any]:
    """Per configuration: medians over rounds with their range, and latency / throughput paired with
    the first configuration in the same round (ratio > 1: slower latency, more throughput)."""
    base = configs[0]
    by_round: dict[int, dict[str, dict[str, Any]]] = {}
    for r in runs:
        if "error" not in r:
            by_round.setdefault(r["round"], {})[r["config"]] = r
    table: dict[str, Any] = {}
    for name in configs:
        mine = [rd[name] for rd in by_round.values() if name in rd]
        if not mine:
            table[name] = {"rounds": 0}
            continue
        fractions = [m["timed"]["throttled_fraction"] for m in mine if m["timed"]["throttled_fraction"] is not None]
        row = {
            "rounds": len(mine),
            "median_ms": spread([m["median_s"] * 1e3 for m in mine]),
            "throughput_rps": spread([m["throughput_rps"] for m in mine]),
            "cpu_ms_per_request": spread([m["cpu_ms_per_request"] for m in mine]),
            "nr_throttled": spread([m["timed"]["nr_throttled"] for m in mine]),
            "throttled_fraction": spread(fractions) if fractions else None,
        }
        paired = [
            (rd[name]["median_s"] / rd[base]["median_s"], rd[name]["throughput_rps"] / rd[base]["throughput_rps"])
            for rd in by_round.values()
            if name in rd and base in rd
        ]
        if paired and name != base:
            row[f"latency_vs_{base}"] = spread([p[0] for p in paired])
            row[f"throughput_vs_{base}"] = spread([p[1] for p in paired])
        table[name] = row
    return table


def print_table(table: dict[str, Any], configs: list[str], quota: float) -> None:
    base = configs[0]
    print(f"\n{quota:g}-CPU quota: median over rounds (range)")
    print(
        f"{'config':7s} {'latency ms':>22s} {'requests/s':>22s} {'throttled periods':>22s} "
        f"{'lat/' + base:>17s} {'thr/' + base:>17s}"
    )
    for name in configs:
        row = table[name]
        if not row.get("rounds"):
            print(f"{name:7s} no successful run")
            continue

        def cell(s: dict[str, float] | None, fmt: str) -> str:
            return "-" if s is None else f"{s['median']:{fmt}} ({s['min']:{fmt}}-{s['max']:{fmt}})"

        print(
            f"{name:7s} {cell(row['median_ms'], '.2f'):>22s} {cell(row['throughput_rps'], '.1f'):>22s} "
            f"{cell(row['throttled_fraction'], '.0%'):>22s} {cell(row.get(f'latency_vs_{base}'), '.2f'):>17s} "
            f"{cell(row.get(f'throughput_vs_{base}'), '.2f'):>17s}"
        )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quota", type=float, default=1.5, help="CPUs (quota / period), e.g. 1.5 or 2.5")
    p.add_argument(
        "--configs",
        default="1x1,1x2,2x1,2x2",
        help="INTERxINTRA thread settings; the first is the baseline of the paired ratios",
    )
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--seconds", type=float, default=20.0, help="timed loop per process")
    p.add_argument("--warmup", type=int, default=5, help="untimed requests after the model is built")
    p.add_argument("--model", default="matmul", help="'matmul' (branches of square matmuls) or a bundled workload")
    p.add_argument("--size", type=int, default=384, help="matmul: the matrices' side (384: 57 M multiply-adds each)")
    p.add_argument("--depth", type=int, default=4, help="matmul: matmuls per branch")
    p.add_argument("--branches", type=int, default=2, help="matmul: independent branches (inter-op width)")
    p.add_argument("--workload-size", default="tiny", help="bundled workloads: tiny, small or paper")
    p.add_argument("--shares", type=int, default=0, help="cpu.shares (v1) / cpu.weight (v2) of each group; 0 = default")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"JSON with every run (default {DEFAULT_OUT})")
    args = p.parse_args(argv)
    try:
        configs = [parse_config(c) for c in args.configs.split(",") if c.strip()]
    except argparse.ArgumentTypeError as exc:
        p.error(str(exc))
    if not configs or args.rounds < 1 or args.seconds <= 0 or not args.quota > 0:
        p.error("need at least one configuration, --rounds >= 1, --seconds > 0 and --quota > 0")
    try:
        controller = find_cpu_controller()
        check_writable(controller)
    except CgroupUnavailable as exc:
        print(f"bench_fractional_quota: {exc}", file=sys.stderr)
        return 2
    names = [f"{i}x{j}" for i, j in configs]
    print(
        f"{cpu_model()}; cgroup v{controller.version} at {controller.path}; quota {args.quota:g} CPUs; CPUs "
        f"{sorted(os.sched_getaffinity(0))}; {args.rounds} rounds x {len(configs)} configs x {args.seconds:g} s"
    )
    runs: list[dict[str, Any]] = []
    started = time.time()
    # a background run ignores SIGINT: SIGTERM also stops it and keeps what was measured
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    load_before = os.getloadavg()[0]
    try:
        for r in range(args.rounds):
            order = configs[r % len(configs) :] + configs[: r % len(configs)]  # rotate: no config always first
            for config in order:
                result = run_one(controller, args, config, "fracq")
                result["round"] = r
                runs.append(result)
                if "error" in result:
                    print(f"round {r} {result['config']}: FAILED {result['error'][-300:]}", file=sys.stderr)
                else:
                    t = result["timed"]
                    print(
                        f"round {r} {result['config']}: median {result['median_s'] * 1e3:.2f} ms, "
                        f"{result['throughput_rps']:.1f} req/s, throttled {t['nr_throttled']}/{t['nr_periods']} "
                        f"periods",
                        flush=True,
                    )
    except KeyboardInterrupt:
        print("interrupted: writing what was measured", file=sys.stderr)
    table = summarise(runs, names)
    print_table(table, names, args.quota)
    doc = {
        "benchmark": "bench_fractional_quota",
        "date": time.strftime("%Y-%m-%d", time.localtime(started)),
        "host": {
            "cpu_model": cpu_model(),
            "cpus": sorted(os.sched_getaffinity(0)),
            "machine": platform.machine(),
            "cgroup_version": controller.version,
            "load_before": load_before,
        },
        "options": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "summary": table,
        "runs": runs,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0 if any("error" not in r for r in runs) else 1


if __name__ == "__main__":
    raise SystemExit(main())

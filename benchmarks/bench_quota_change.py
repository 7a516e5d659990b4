#!/usr/bin/env python
"""A CPU quota that drops from 2 to 1 CPU under a running server: how fast the served pools follow,
and how the server runs afterwards against one that started at 1 CPU.

Each round runs two fresh server processes, one after the other (order alternating by round),
each inside its own real quota group (cgroup v1 cpu controller, or v2 where delegated):

- "changed": starts under a 2-CPU quota, serves a SavedModel from the fast path (tf_autopar.enable,
  tf.saved_model.load), then the quota is rewritten to 1 CPU; later back to 2;
- "started at 1": starts under a 1-CPU quota and keeps it.

One client thread calls the model back to back. Reported per round: the seconds from the quota
write to the served sessions' new pools (status()), the throttled share of CFS periods
(cpu.stat nr_throttled / nr_periods) in a window of --window seconds that starts once the pools
followed (the same window, after the same warm-up, for "started at 1"), the request latency before
the change and in that window, and the calls not answered (errors) or answered differently from
the original path (mismatches). Needs root (or a writable delegated controller); exits 2 otherwise.

    sudo python benchmarks/bench_quota_change.py                 # 3 rounds
    sudo python benchmarks/bench_quota_change.py --rounds 1 --window 3 --out /tmp/q.json   # smoke run
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from bench_fastpath import host  # noqa: E402  (after the path is set)
from tf_autopar.measure.cgroup import (  # noqa: E402
    CgroupUnavailable,
    QuotaGroup,
    check_writable,
    find_cpu_controller,
)

DEFAULT_OUT = REPO / "benchmarks" / "results" / "quota_change.json"

# The server: enable() before TensorFlow starts, a model of three 768-wide layers saved and loaded
# through the load hook, served at batch 64 by one client thread that keeps (start, seconds, ok).
# Commands on stdin: "mark" (print the time and the calls so far), "wait" (print when the served
# pools change), "stop" (print every call's record and status()).
CHILD = r"""
import json, sys, threading, time, numpy as np
import tf_autopar
tf_autopar.enable(tune_live=False)
import tensorflow as tf
from tf_autopar.runtime import fastpath

class Net(tf.Module):
    def __init__(self):
        self.w = [tf.Variable(tf.random.stateless_normal((768, 768), seed=(i, 1)) / 28.0) for i in range(3)]

    @tf.function(input_signature=[tf.TensorSpec([None, 768], tf.float32, name="x")])
    def serve(self, x):
        for w in self.w:
            x = tf.nn.relu(tf.matmul(x, w))
        return {"y": x}

net = Net()
tf.saved_model.save(net, sys.argv[1], signatures={"serving_default": net.serve})
sig = tf.saved_model.load(sys.argv[1]).signatures["serving_default"]
x = np.random.default_rng(0).standard_normal((64, 768)).astype(np.float32)
ref = type(sig)._tf_autopar_original.__call__(sig, x=x)["y"].numpy()
for _ in range(3):
    sig(x=x)
    fastpath.wait_idle(120)

def key():
    for s in tf_autopar.status().served:
        for b in s.buckets:
            if b.path == "frozen session":
                return f"{b.inter_op}x{b.intra_op}"
    return "original"

calls, errors, stop = [], [], threading.Event()
def client():
    scale = float(np.max(np.abs(ref)))
    while not stop.is_set():
        t0 = time.monotonic()
        try:
            got = sig(x=x)["y"].numpy()
        except Exception as exc:
            errors.append(repr(exc)); continue
        calls.append((t0, time.monotonic() - t0, float(np.max(np.abs(got - ref))) <= 1e-4 * scale))
thread = threading.Thread(target=client)
thread.start()
print("ready", key(), flush=True)
for line in sys.stdin:
    cmd = line.strip()
    if cmd == "mark":
        print("mark", time.monotonic(), len(calls), flush=True)
    elif cmd == "wait":
        was, deadline = key(), time.monotonic() + 20
        while key() == was and time.monotonic() < deadline:
            time.sleep(0.01)
        print("changed", key(), time.monotonic(), flush=True)
    else:
        break
stop.set()
thread.join()
st = tf_autopar.status()
print("RESULT " + json.dumps({"calls": calls, "errors": errors, "text": st.text(),
                              "process": [st.process.planned_inter, st.process.planned_intra]}), flush=True)
"""


class Server:
    """One child serving inside its quota group, spoken to line by line."""

    def __init__(self, group: QuotaGroup, model_dir: str) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("TF_NUM_", "TF_OVERRIDE", "TF_AUTOPAR"))}
        env.update(
            PYTHONPATH=str(REPO),
            TF_CPP_MIN_LOG_LEVEL="2",
            TF_AUTOPAR_CACHE_DIR=model_dir + "_cache",
            TF_AUTOPAR_LEASE_DIR=model_dir + "_lease",
        )
        self.proc = subprocess.Popen(
            [sys.executable, "-c", CHILD, model_dir],
            env=env,
            text=True,
            preexec_fn=group.join,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=lambda: [self.lines.put(ln) for ln in self.proc.stdout], daemon=True).start()

    def expect(self, word: str, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                raise RuntimeError(f"the server never said {word!r}: {self.proc.stderr.read()[-2000:]}") from None
            if line.startswith(word + " "):
                return line.strip()

    def say(self, cmd: str) -> None:
        self.proc.stdin.write(cmd + "\n")
        self.proc.stdin.flush()


def set_quota(group: QuotaGroup, cpus: float) -> None:
    quota = int(cpus * group.period_us)
    name, value = (
        ("cpu.cfs_quota_us", str(quota)) if group.controller.version == 1 else ("cpu.max", f"{quota} {group.period_us}")
    )
    Path(group.path, name).write_text(value)


def follow(server: Server, group: QuotaGroup, cpus: float) -> tuple[str, float]:
    """Rewrite the quota; (the served pools after, seconds from the write until the server served them)."""
    t0 = time.monotonic()
    set_quota(group, cpus)
    server.say("wait")
    _, pools, seen = server.expect("changed", 30).split()
    return pools, float(seen) - t0


def latency(calls: list[list[Any]], start: float, end: float) -> dict[str, Any]:
    times = sorted(c[1] for c in calls if start <= c[0] < end)
    if not times:
        return {"calls": 0}
    return {
        "calls": len(times),
        "median_ms": statistics.median(times) * 1e3,
        "p99_ms": times[min(len(times) - 1, int(0.99 * len(times)))] * 1e3,
    }


def throttled(before: Any, after: Any) -> dict[str, Any]:
    periods, n = after.nr_periods - before.nr_periods, after.nr_throttled - before.nr_throttled
    return {"nr_periods": periods, "nr_throttled": n, "fraction": n / periods if periods else None}


def run_server(controller: Any, changed: bool, args: argparse.Namespace, tag: str) -> dict[str, Any]:
    out: dict[str, Any] = {"server": "changed" if changed else "started at 1"}
    with QuotaGroup(controller, 2.0 if changed else 1.0, tag) as group:
        server = Server(group, f"/tmp/bench_quota_change_{os.getpid()}_{tag}")
        try:
            out["pools_at_start"] = server.expect("ready", 300).split()[1]
            time.sleep(args.before)
            server.say("mark")
            t_before = float(server.expect("mark", 5).split()[1])
            if changed:
                out["pools_after"], out["follow_s"] = follow(server, group, 1.0)
            start = time.monotonic()
            s0 = group.stat()
            time.sleep(args.window)
            s1 = group.stat()
            end = time.monotonic()
            out["throttled_after"] = throttled(s0, s1)
            if changed:
                out["pools_back"], out["grow_s"] = follow(server, group, 2.0)
                time.sleep(1.0)
            server.say("stop")
            res = json.loads(server.expect("RESULT", 120).partition(" ")[2])
            server.proc.wait(60)
        finally:
            if server.proc.poll() is None:
                server.proc.kill()
                server.proc.wait()
    calls = res["calls"]
    out.update(
        latency_before=latency(calls, t_before - args.before, t_before),
        latency_after=latency(calls, start, end),
        calls=len(calls),
        errors=len(res["errors"]),
        mismatches=sum(1 for c in calls if not c[2]),
        process_pools=res["process"],
        status_lines=[ln for ln in res["text"].splitlines() if "CPU limits" in ln],
    )
    return out


def spread(values: list[float]) -> dict[str, float] | None:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)} if values else None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--before", type=float, default=4.0, help="seconds served before the change (latency before)")
    p.add_argument("--window", type=float, default=8.0, help="seconds of the after-change window")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = p.parse_args(argv)
    try:
        controller = find_cpu_controller()
        check_writable(controller)
    except CgroupUnavailable as exc:
        print(f"bench_quota_change: {exc}", file=sys.stderr)
        return 2
    machine = host()
    load_before = os.getloadavg()[0]
    print(f"{machine['cpu_model']}; cgroup v{controller.version}; {args.rounds} rounds", flush=True)
    runs = []
    for r in range(args.rounds):
        for changed in (True, False) if r % 2 == 0 else (False, True):
            res = run_server(controller, changed, args, f"qc{r}{int(changed)}")
            res["round"] = r
            runs.append(res)
            t = res["throttled_after"]
            print(
                f"round {r} {res['server']}: pools {res['pools_at_start']}"
                + (
                    f" -> {res['pools_after']} in {res['follow_s']:.2f} s, back to {res['pools_back']} in "
                    f"{res['grow_s']:.2f} s"
                    if changed
                    else ""
                )
                + f"; throttled {t['nr_throttled']}/{t['nr_periods']} after; median "
                f"{res['latency_before'].get('median_ms', 0):.1f} -> {res['latency_after'].get('median_ms', 0):.1f} ms;"
                f" {res['calls']} calls, {res['errors']} errors, {res['mismatches']} mismatches",
                flush=True,
            )
    summary: dict[str, Any] = {}
    for name in ("changed", "started at 1"):
        mine = [r for r in runs if r["server"] == name]
        summary[name] = {
            "throttled_fraction_after": spread(
                [r["throttled_after"]["fraction"] for r in mine if r["throttled_after"]["fraction"] is not None]
            ),
            "median_ms_before": spread(
                [r["latency_before"]["median_ms"] for r in mine if r["latency_before"]["calls"]]
            ),
            "median_ms_after": spread([r["latency_after"]["median_ms"] for r in mine if r["latency_after"]["calls"]]),
            "p99_ms_after": spread([r["latency_after"]["p99_ms"] for r in mine if r["latency_after"]["calls"]]),
            "dropped": sum(r["errors"] for r in mine),
            "mismatches": sum(r["mismatches"] for r in mine),
        }
        if name == "changed":
            summary[name]["follow_s"] = spread([r["follow_s"] for r in mine])
            summary[name]["grow_s"] = spread([r["grow_s"] for r in mine])
    print(json.dumps(summary, indent=1))
    doc = {
        "benchmark": "bench_quota_change",
        "host": machine,
        "cgroup_version": controller.version,
        "load_before": load_before,
        "load_after": os.getloadavg()[0],
        "options": {k: str(v) for k, v in vars(args).items()},
        "summary": summary,
        "runs": runs,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

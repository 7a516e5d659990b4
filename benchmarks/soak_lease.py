"""Soak the host-wide lease: N workers x M start/stop cycles with random kill -9, with and without a count.

Why: the lease and the rendezvous are exercised by short tests; a long run of restarts and
kills is where a slot left behind, a hang or an overlap between live workers would show.

Each of N lanes runs M cycles: start a worker process (``claim_share`` on a fake host of
``--cores`` cores, so that N workers can be disjoint on any machine; nothing is pinned), wait
for its share, hold it a random time, then stop it cleanly or ``kill -9`` it (``--kill``
probability), and start the next. Every reported share is checked against the shares of the
workers still alive in the other lanes. At the end no process is alive, so every slot must be
free.

Reported per mode ("count": TF_AUTOPAR_INSTANCES=N, "no-count": the rendezvous): cycles,
kills, hangs (no share within ``--timeout``), overlaps among live workers (expected 0 with a
count; without one, workers too late for the rendezvous overlap and say so: overlaps not
involving such a worker are counted apart and expected 0), leaked slots, and the warnings:
distinct texts and the most any one process printed.

Usage: nice -n 19 python benchmarks/soak_lease.py [--workers 8] [--cycles 50] [--modes count,no-count]
       [--kill 0.3] [--hold 0.3] [--cores 8] [--window 1] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

WORKER = r"""
import json, os, sys
from tf_autopar.coordination import claim_share
from tf_autopar.topology.model import Core, NumaNode, Topology
n = int(sys.argv[1])
topo = Topology(host_cpus=n, affinity=tuple(range(n)), cores=tuple(Core(0, i, (i,)) for i in range(n)),
                numa_nodes=(NumaNode(0, tuple(range(n))),), cpu_budget=n)
share = claim_share(topo)
print(json.dumps({**share.to_dict(), "pid": os.getpid()}), flush=True)
sys.stdin.read()
"""


class Soak:
    """One mode's run: lanes of workers, the live shares, and what went wrong."""

    def __init__(self, args: argparse.Namespace, mode: str, lease_dir: str) -> None:
        self.args, self.mode, self.lease_dir = args, mode, lease_dir
        self.lock = threading.Lock()
        self.live: dict[int, tuple[subprocess.Popen, set[int], bool, dict]] = {}  # lane -> (worker, CPUs, late, share)
        self.examples: list[list[dict[str, Any]]] = []  # the first few silent overlaps, both shares
        self.stats = {
            "cycles": 0,
            "kills": 0,
            "clean_stops": 0,
            "hangs": 0,
            "overlaps": 0,
            "silent_overlaps": 0,
            "late": 0,
            "crashes": 0,
        }
        self.warnings: dict[str, int] = {}
        self.most_warnings_per_process = 0

    def env(self) -> dict[str, str]:
        from tf_autopar.coordination.ranks import COUNTS, PAIRS

        drop = {x for pair in PAIRS for x in pair} | set(COUNTS)
        env = {k: v for k, v in os.environ.items() if k not in drop and not k.startswith("TF_AUTOPAR")}
        env.update(
            {
                "PYTHONPATH": ROOT,
                "TF_AUTOPAR_LEASE_DIR": self.lease_dir,
                "TF_AUTOPAR_GROUP": "soak",
                "TF_AUTOPAR_RENDEZVOUS_S": str(self.args.window),
            }
        )
        if self.mode == "count":
            env["TF_AUTOPAR_INSTANCES"] = str(self.args.workers)
        return env

    def lane(self, lane: int, seed: int) -> None:
        rng = random.Random(seed)
        env = self.env()
        for _ in range(self.args.cycles):
            p = subprocess.Popen(
                [sys.executable, "-c", WORKER, str(self.args.cores)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=env,
            )
            share = self._read_share(p)
            if share is None:
                with self.lock:
                    self.stats["hangs" if p.poll() is None else "crashes"] += 1
                p.kill()
                self._reap(p)
                continue
            cpus = set(share["cpus"])
            # without a count, a worker that came too late for the rendezvous falls back to the
            # slots held now (source "lease") and warns: its overlaps are announced
            late = self.mode == "no-count" and share["source"] == "lease"
            with self.lock:
                self.stats["cycles"] += 1
                self.stats["late"] += late
                for q, other, other_late, other_share in self.live.values():
                    if q.poll() is None and cpus & other:
                        self.stats["overlaps"] += 1
                        if not (late or other_late):
                            self.stats["silent_overlaps"] += 1
                            if len(self.examples) < 5:
                                self.examples.append([other_share, share])
                self.live[lane] = (p, cpus, late, share)
            time.sleep(rng.uniform(0, self.args.hold))
            killed = rng.random() < self.args.kill
            with self.lock:  # told to stop, it serves no more: its slot may go to the next worker at once
                del self.live[lane]
            if killed:
                p.send_signal(signal.SIGKILL)
            else:
                p.stdin.close()
            self._reap(p)
            with self.lock:
                self.stats["kills" if killed else "clean_stops"] += 1

    def _read_share(self, p: subprocess.Popen) -> dict[str, Any] | None:
        import selectors

        sel = selectors.DefaultSelector()
        sel.register(p.stdout, selectors.EVENT_READ)
        if not sel.select(self.args.timeout):
            return None
        line = p.stdout.readline()
        try:
            return json.loads(line)
        except ValueError:
            return None

    def _reap(self, p: subprocess.Popen) -> None:
        p.wait(60)
        err = p.stderr.read() if p.stderr else ""
        for f in (p.stdin, p.stdout, p.stderr):
            try:
                f.close()
            except Exception:
                pass
        lines = [ln for ln in err.splitlines() if ln.startswith("tf_autopar")]
        with self.lock:
            self.most_warnings_per_process = max(self.most_warnings_per_process, len(lines))
            for ln in lines:
                key = re.sub(r"\d+(\.\d+)?", "#", ln)  # one kind per text, whatever the pids and times
                self.warnings[key] = self.warnings.get(key, 0) + 1

    def run(self) -> dict[str, Any]:
        t0 = time.monotonic()
        threads = [
            threading.Thread(target=self.lane, args=(i, self.args.seed * 1000 + i)) for i in range(self.args.workers)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        from tf_autopar.coordination.lease import lease_status

        leaked = sum(
            1 for d in os.listdir(self.lease_dir) for s in lease_status(os.path.join(self.lease_dir, d)) if s["held"]
        )
        return {
            "mode": self.mode,
            **self.stats,
            "leaked_slots": leaked,
            "seconds": round(time.monotonic() - t0, 1),
            "warning_kinds": self.warnings,
            "silent_overlap_examples": self.examples,
            "most_warnings_per_process": self.most_warnings_per_process,
        }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--cycles", type=int, default=50, help="start/stop cycles per worker lane")
    ap.add_argument("--modes", default="count,no-count")
    ap.add_argument("--kill", type=float, default=0.3, help="probability a worker is killed with SIGKILL")
    ap.add_argument("--hold", type=float, default=0.3, help="longest time a worker holds its share, s")
    ap.add_argument("--cores", type=int, default=8, help="cores of the fake host the workers split")
    ap.add_argument("--window", type=float, default=1.0, help="TF_AUTOPAR_RENDEZVOUS_S for the workers")
    ap.add_argument("--timeout", type=float, default=60.0, help="a worker without a share by then hangs")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args(argv)
    sys.path.insert(0, ROOT)
    results = []
    for mode in args.modes.split(","):
        tmp = tempfile.mkdtemp(prefix="soak-lease-")
        try:
            r = Soak(args, mode, tmp).run()
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        results.append(r)
        kinds = "; ".join(f"{n}x {k!r}" for k, n in r["warning_kinds"].items()) or "none"
        print(
            f"{mode:9s} {args.workers} workers x {args.cycles} cycles: {r['cycles']} shares, {r['kills']} kill -9, "
            f"{r['clean_stops']} clean stops, {r['hangs']} hangs, {r['crashes']} crashes, {r['late']} late, "
            f"{r['overlaps']} overlaps among live workers ({r['silent_overlaps']} not involving a late worker), "
            f"{r['leaked_slots']} leaked slots, {r['seconds']} s; warnings: {kinds} "
            f"(at most {r['most_warnings_per_process']} per process)",
            flush=True,
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "results": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

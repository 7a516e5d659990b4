"""Start the example app under real gunicorn (2 workers, no count) many times: do the workers meet?

(``--server uvicorn``: plain ``uvicorn --workers 2``, whose workers are spawned, not forked.)

Why: without a worker count the workers find each other in the rendezvous window; a worker
that misses it takes the whole host or overlaps the others. Short tests start gunicorn a few
times; a race that loses one start in six needs dozens to see, and a before/after comparison.

Each start: gunicorn with 2 uvicorn workers, no WEB_CONCURRENCY, a fresh lease directory, the
small test model; the workers' /status gives each share's source ("rendezvous" for both when
they met; "single" + "lease" when the first took the host and the second came late). With
several ``--roots`` (checkouts of this repository: ``name=path``), the starts alternate
between them, so that both run under the same load. ``--quota 1`` runs the server in a cgroup
with a 1-CPU quota (the v1 cpu controller, as root).

Usage: python benchmarks/soak_server_start.py [--roots before=/path/old,after=.] [--starts 24]
       [--quota 1] [--json out.json]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import tempfile
import time
from collections import Counter
from contextlib import nullcontext
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))

from _host import processor  # noqa: E402


def harness(root: str, name: str):
    """examples/serving/harness.py of the checkout at ``root``: its Server runs that checkout's tf_autopar."""
    spec = importlib.util.spec_from_file_location(f"harness_{name}", os.path.join(root, "examples/serving/harness.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def one_start(h, model: str, quota: float | None, server_kind: str = "gunicorn") -> dict[str, Any]:
    from tf_autopar.measure.cgroup import QuotaGroup, find_cpu_controller

    d = tempfile.mkdtemp(prefix="soak-gunicorn-")
    os.mkdir(os.path.join(d, "lease"), 0o700)
    env = {k: v for k, v in os.environ.items() if k not in ("WEB_CONCURRENCY", "TF_AUTOPAR_INSTANCES")}
    env.update(
        TF_AUTOPAR_LEASE_DIR=os.path.join(d, "lease"),
        TF_AUTOPAR_CACHE_DIR=os.path.join(d, "cache"),
        TF_AUTOPAR_FAST_PATH_DIR=os.path.join(d, "fastpath"),
    )
    group = QuotaGroup(find_cpu_controller(), quota, tag="soak") if quota else nullcontext()
    t0 = time.monotonic()
    with group as g:
        preexec = g.join if quota else None
        log = os.path.join(d, "server.log")
        with h.Server(model, 2, env=env, server=server_kind, preexec=preexec, log_path=log) as server:
            st = server.statuses(2)
    shares = [s["share"] for s in st.values()]
    cpus = [set(s["cpus"]) for s in shares]
    return {
        "sources": sorted(s["source"] for s in shares),
        "met": all(s["source"] == "rendezvous" and s["count"] == 2 for s in shares),
        "overlap": bool(cpus[0] & cpus[1]) and not any(s.get("shared_with", 1) > 1 for s in shares),
        "notes": [s.get("note", "") for s in shares],
        "seconds": round(time.monotonic() - t0, 2),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--roots", default=f"this={ROOT}", help="name=path,... checkouts to alternate between")
    ap.add_argument("--starts", type=int, default=24, help="starts per root")
    ap.add_argument("--quota", type=float, default=None, help="CPUs of a cgroup quota around the server")
    ap.add_argument("--server", default="gunicorn", choices=("gunicorn", "uvicorn"), help="uvicorn: --workers 2")
    ap.add_argument("--model", default=None, help="a SavedModel (default: the tests' small model, built once)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    roots = dict(item.split("=", 1) for item in args.roots.split(","))
    model = args.model
    if model is None:
        from _runtime_child import build_user_model

        model = build_user_model(tempfile.mkdtemp(prefix="soak-model-"))["SM"]
    hs = {name: harness(os.path.abspath(path), name) for name, path in roots.items()}
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in roots}
    for i in range(args.starts):
        for name, h in hs.items():
            r = one_start(h, model, args.quota, args.server)
            runs[name].append(r)
            print(f"{i:3d} {name:>8}: {' + '.join(r['sources'])} ({r['seconds']:.1f} s)", flush=True)
    summary = {
        name: {
            "starts": len(rs),
            "met": sum(r["met"] for r in rs),
            "outcomes": dict(Counter(" + ".join(r["sources"]) for r in rs)),
            "overlapping": sum(r["overlap"] for r in rs),
        }
        for name, rs in runs.items()
    }
    print(
        f"\n{args.server}; processor: {processor()}, {len(os.sched_getaffinity(0))} CPUs, quota: {args.quota or 'none'}"
    )
    print(f"{'root':>8} | starts | met | outcomes")
    for name, s in summary.items():
        print(f"{name:>8} | {s['starts']:6d} | {s['met']:3d} | {s['outcomes']}")
    if args.json:
        out = {
            "server": args.server,
            "processor": processor(),
            "cpus": len(os.sched_getaffinity(0)),
            "quota": args.quota,
        }
        with open(args.json, "w") as fh:
            json.dump({**out, "summary": summary, "runs": runs}, fh, indent=1)


if __name__ == "__main__":
    main()

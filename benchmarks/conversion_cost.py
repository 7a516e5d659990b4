#!/usr/bin/env python
"""What a conversion child costs the calls served beside it, and whether stopping it gives it back.

One process: a SavedModel of ``benchmarks/user_models.py`` frozen (runtime/frozen.py) and served
back to back (``--serve``: one TensorFlow session, the host's CPUs as 2 inter-op x N intra-op
threads, or the fast path's OpenVINO runner); ``--before`` seconds alone, then the fast path's
conversion child (engines/conversion.py: the real child, at its own ``SCHED_IDLE`` or at
``--priority``) converts the same graph for ``--kind`` while a thread stops and continues it in
alternate ``--slice`` second slices. Each call counts for the slice it ran wholly inside: the
median and 90th percentile while the child ran, while it was stopped, and alone before it. The
ratio of the first two is what engines/pacing.py measures live; that stopping the child gives
the calls their time back is why it stops it. The child's CPU time in its running slices (/proc)
over their length is what it gets beside the calls; ``--summarise`` turns that ratio and that
rate into the share of the time the pacing would let the child run at its default budget and how
long the conversion would then take. Nothing is kept between runs (no conversion cache).

    python benchmarks/conversion_cost.py /work/user_models/xception --batch 2 --kind onnx \\
        --out benchmarks/results/conversion_cost_xception_b2_epyc.json
    python benchmarks/conversion_cost.py --summarise runs/*.json
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from _host import cpu_seconds, processor  # noqa: E402
from user_models import make_inputs  # noqa: E402


def _summary(ms: list[float]) -> dict:
    if len(ms) < 2:
        return {"calls": len(ms)}
    return {
        "calls": len(ms),
        "median_ms": round(statistics.median(ms), 2),
        "p90_ms": round(statistics.quantiles(ms, n=10)[-1], 2),
    }


#: the child's priority, set before its own main() runs, which then can change it no more
PRIORITIES = ("idle", "nice19", "normal")
_APPLY = {
    "idle": "os.nice(19); os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0)); ",
    "nice19": "os.nice(19); ",
    "normal": "",
}


def _child_priority(conversion, priority: str) -> None:
    """The real child's command, run at ``priority`` whatever the fast path's own would be."""
    command = conversion.child_command

    def at_priority(kind, directory, guarded=False):
        cmd, env = command(kind, directory, guarded)
        code = (
            f"import os, runpy, sys; {_APPLY[priority]}os.nice = lambda n: 0; "
            f"os.sched_setscheduler = lambda *a: None; sys.argv = {cmd[2:]!r}; "
            f"runpy.run_module({conversion.__name__!r}, run_name='__main__')"
        )
        return [cmd[0], "-c", code], env

    conversion.child_command = at_priority


def summary_rows(runs: list[dict], budget: float | None = None) -> list[dict]:
    """Per model, batch, runner and priority, medians over the converted runs: the child's CPU
    seconds and CPUs while it ran, the calls' ratio ``r`` while it ran over while stopped, and
    what follows at the pacing's ``budget`` (its default when None): the share of the time the
    child runs (engines/pacing.py's duty_for) and the conversion's wall time at that share."""
    from tf_autopar.runtime.fastpath.engines.pacing import DEFAULT_BUDGET, duty_for

    budget = DEFAULT_BUDGET if budget is None else budget
    groups: dict[tuple, list[dict]] = {}
    for run in runs:
        if run.get("converted") and run.get("running_over_stopped"):
            key = (run["model"], run["batch"], run.get("served_by", "tensorflow"), run.get("priority", "idle"))
            groups.setdefault(key, []).append(run)
    rows = []
    for (model, batch, served_by, priority), rs in sorted(groups.items()):
        cpu = statistics.median(r["child_cpu_s_while_running"] for r in rs)
        rate = statistics.median(r["child_cpus_while_running"] for r in rs)
        ratio = statistics.median(r["running_over_stopped"] for r in rs)
        share = duty_for(ratio, budget)
        rows.append(
            {
                "model": model,
                "batch": batch,
                "served_by": served_by,
                "priority": priority,
                "runs": len(rs),
                "cpu_s": cpu,
                "cpus": rate,
                "cpus_runs": [r["child_cpus_while_running"] for r in rs],
                "ratio": ratio,
                "ratio_runs": [r["running_over_stopped"] for r in rs],
                "share": share,
                "paced_s": cpu / (share * rate),
            }
        )
    return rows


def summarise(paths: list[str]) -> None:
    runs: list[dict] = []
    for path in paths:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
        runs.extend(data if isinstance(data, list) else [data])
    print(f"processor {', '.join(sorted({r['processor'] for r in runs}))}")
    print(
        "model    batch  served by  priority  runs  CPU s  child CPUs while running  calls' r while running"
        "  share at the default budget  conversion at that share, s"
    )
    for row in summary_rows(runs):
        rates = ", ".join(f"{x:.2f}" for x in row["cpus_runs"])
        ratios = ", ".join(f"{x:.2f}" for x in row["ratio_runs"])
        print(
            f"{row['model']} {row['batch']} {row['served_by']} {row['priority']}  {row['runs']}  {row['cpu_s']:.1f}"
            f"  {row['cpus']:.2f} ({rates})  {row['ratio']:.2f} ({ratios})  {row['share']:.2f}  {row['paced_s']:.0f}"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "model", nargs="?", help="a SavedModel directory of benchmarks/user_models.py (its name picks the inputs)"
    )
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--kind", choices=("onnx", "openvino"), default="onnx")
    ap.add_argument("--before", type=float, default=10.0, help="seconds served alone first")
    ap.add_argument("--slice", type=float, default=1.5, help="seconds running, then stopped, alternately")
    ap.add_argument("--limit", type=float, default=400.0, help="stop serving after this long beside the child")
    ap.add_argument(
        "--priority",
        choices=PRIORITIES,
        default="idle",
        help="the child's CPU priority: SCHED_IDLE and nice 19 (the fast path's), nice 19 alone, or not lowered",
    )
    ap.add_argument(
        "--serve",
        choices=("tensorflow", "openvino"),
        default="tensorflow",
        help="what serves the calls: a TensorFlow session (2 x the CPUs), or the fast path's OpenVINO runner",
    )
    ap.add_argument("--out")
    ap.add_argument("--summarise", nargs="+", metavar="JSON", help="summarise results written by --out, per priority")
    args = ap.parse_args()
    if args.summarise:
        summarise(args.summarise)
        return
    if not args.model:
        ap.error("a model directory (or --summarise)")

    os.environ["TF_AUTOPAR_DISABLE"] = "1"  # the session's pools are set here, nothing planned
    os.environ["TF_AUTOPAR_CONVERSION_CACHE_MB"] = "0"  # every run converts (conversion_cache.py)
    import tensorflow as tf

    from tf_autopar.runtime.fastpath.engines import conversion
    from tf_autopar.runtime.frozen import FrozenGraph

    _child_priority(conversion, args.priority)

    name = os.path.basename(os.path.normpath(args.model))
    sig = tf.saved_model.load(args.model).signatures["serving_default"]
    frozen = FrozenGraph(sig)
    cpus = len(os.sched_getaffinity(0))
    inputs = make_inputs(name, args.batch)
    # a signature's keyword inputs flatten in sorted key order, as the frozen graph's inputs do
    arrays = [inputs[k] for k in sorted(inputs)]
    if args.serve == "openvino":  # the fast path's OpenVINO runner at the budget's setting
        from tf_autopar.runtime.fastpath import engines

        engine = engines.get("openvino")
        engine.convert(frozen)
        runner = engine.build(frozen, (1, cpus, 1))

        def serve() -> None:
            runner.run(arrays)

    else:
        config = tf.compat.v1.ConfigProto(inter_op_parallelism_threads=2, intra_op_parallelism_threads=cpus)
        session = tf.compat.v1.Session(graph=frozen.graph, config=config)
        feed = dict(zip(frozen.inputs, arrays))

        def serve() -> None:
            session.run(frozen.outputs, feed)

    for _ in range(3):
        serve()

    calls: list[tuple[float, float]] = []  # (start, end) on time.monotonic
    slices: list[tuple[float, float, bool]] = []  # (start, end, child running)
    done = threading.Event()
    outcome: dict = {}

    def call() -> None:
        t0 = time.monotonic()
        serve()
        calls.append((t0, time.monotonic()))

    def convert() -> None:
        t0 = time.monotonic()
        try:
            conversion.convert(args.kind, frozen).close()
            outcome["converted"] = True
        except Exception as exc:
            outcome["error"] = f"{type(exc).__name__}: {exc}"[:300]
        outcome["conversion_s"] = round(time.monotonic() - t0, 1)
        done.set()

    cpu = {True: 0.0, False: 0.0}  # the child's CPU seconds in running / stopped slices

    def alternate() -> None:
        running, start = True, time.monotonic()
        last: dict[int, float] = {}
        while not done.wait(args.slice):
            with conversion._children_lock:
                children = list(conversion._children)
            now = time.monotonic()
            slices.append((start, now, running))
            for child in children:
                used = cpu_seconds(child.pid)
                if used is not None:
                    cpu[running] += used - last.get(child.pid, 0.0)
                    last[child.pid] = used
            running, start = not running, now
            for child in children:
                conversion._signal(child, signal.SIGCONT if running else signal.SIGSTOP)
        slices.append((start, time.monotonic(), running))

    end = time.monotonic() + args.before
    while time.monotonic() < end:
        call()
    alone = [(b - a) * 1e3 for a, b in calls]
    calls.clear()
    threading.Thread(target=convert, daemon=True).start()
    threading.Thread(target=alternate, daemon=True).start()
    limit = time.monotonic() + args.limit
    while not done.is_set() and time.monotonic() < limit:
        call()
    done.set()

    def inside(running: bool) -> list[float]:
        return [(b - a) * 1e3 for a, b in calls if any(s <= a and b <= e and r == running for s, e, r in slices)]

    ran, stopped = _summary(inside(True)), _summary(inside(False))
    ran_s = sum(e - s for s, e, r in slices if r)
    result = {
        "processor": processor(),
        "cpus": cpus,
        "model": name,
        "batch": args.batch,
        "kind": args.kind,
        "slice_s": args.slice,
        "priority": args.priority,
        "served_by": args.serve,
        "child_cpu_s_while_running": round(cpu[True], 2),
        "child_running_s": round(ran_s, 1),
        "child_cpus_while_running": round(cpu[True] / ran_s, 3) if ran_s else None,
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "alone": _summary(alone),
        "child_running": ran,
        "child_stopped": stopped,
        "running_over_stopped": round(ran["median_ms"] / stopped["median_ms"], 3)
        if "median_ms" in ran and "median_ms" in stopped
        else None,
        **outcome,
        "load_average_at_end": os.getloadavg(),
    }
    print(json.dumps(result, indent=1))
    if args.out:
        with open(args.out, "w", encoding="utf-8") as fh:
            json.dump(result, fh, indent=1)


if __name__ == "__main__":
    main()

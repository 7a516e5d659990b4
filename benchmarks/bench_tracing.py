#!/usr/bin/env python3
"""Overhead and fidelity of per-op tracers on bundled workloads (issue 6).

Four configurations, each in a FRESH process (thread pools and caches start cold the
same way), interleaved round by round in a rotating order, all on the SAME execution
path (default: the frozen inference graph in a tf.compat.v1.Session, the only path
where FULL_TRACE step stats exist in TF 2.21; eager run-metadata returns no step stats
for tf.functions):

- none:       no tracing
- ours:       ``with tf_autopar.trace():`` around the measured steps
- profiler:   ``tf.profiler.experimental.start/stop`` (host tracer level 2, the default)
- full_trace: ``RunOptions(trace_level=FULL_TRACE)`` + RunMetadata on every measured step

Tracing stays on across all measured steps; each step's wall time (Session.run, outputs
fetched) is recorded. The stop/collect cost (ours: stop + drain; profiler: stop, which
serialises and writes xplane.pb) is reported separately, as is our analysis time.

Per workload and configuration: the median step time of each process, then the overhead
of each round's process against the same round's ``none`` process; the table shows the
median overhead over rounds and its range (min..max).

Kernel speed differs from process to process on a shared machine (here up to 2x between
fresh processes of the same configuration), so each round also runs one more fresh process
("paired") that alternates windows of none / ours / tf.profiler (rotating order, 6 windows of
steps/2 steps each): its paired overheads are reported in a second table, with the
"window" overhead: the wall time of a whole traced window (start, steps, stop: what a user
waits for; tf.profiler's stop serialises and writes its xplane.pb) against an untraced
window of the same steps in the same process. Its heavy-op
times give the fidelity figure: agreement = |median(ours) / median(tf.profiler) - 1| of the
heavy-op time per step on the same process's steps (with --no-paired: the cross-process
medians). Heavy-op time is computed from both tracers' events by the same code.

Usage:
  python benchmarks/bench_tracing.py                        # full run (the lead's quiet machine)
  python benchmarks/bench_tracing.py --quick                # tiny sizes, 2 rounds: checks it runs
  python benchmarks/bench_tracing.py --workloads resnet50 --rounds 3 --json out.json
  python benchmarks/bench_tracing.py --paired-only --rounds 3 --steps 10 --json out.json
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
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CONFIGS = ("none", "ours", "profiler", "full_trace")
DEFAULT_WORKLOADS = ("resnet50", "inception_v3", "vgg", "transformer", "wide_deep")


# ---------------------------------------------------------------------------- child --
def _heavy_per_step_from_stepstats(run_metadatas: list, classify) -> float:
    """Heavy-op time per step from FULL_TRACE step stats (node_name + timeline_label kernel)."""
    from tf_autopar.tracing.model import normalize_type

    total_us = 0
    for md in run_metadatas:
        for dev in md.step_stats.dev_stats:
            for n in dev.node_stats:
                # timeline_label: "name = Kernel(args)"; the op type follows " = ".
                label = n.timeline_label
                kernel = label.split(" = ", 1)[1].split("(", 1)[0].strip() if " = " in label else ""
                if kernel and classify(normalize_type(kernel), kernel, n.node_name):
                    total_us += n.all_end_rel_micros
    return total_us * 1e-6 / max(1, len(run_metadatas))


def child(spec: dict) -> dict:
    sys.path.insert(0, str(REPO))
    import numpy as np
    import tensorflow as tf

    from tf_autopar_workloads import runner

    cfg, steps = spec["config"], spec["steps"]
    built = runner.build(spec["workload"], size=spec["size"], batch=spec["batch"])
    if spec["path"] == "session":
        sess = built.session("infer")
        step = sess.run
    else:
        fn = built.infer_function()
        xs = [tf.constant(a) for a in built._flat_inputs]
        sess = None

        def step(run_options=None):
            return [o.numpy() for o in fn(*xs)]

    for _ in range(spec["warmup"]):
        step()
    out: dict = {"config": cfg, "workload": spec["workload"], "round": spec["round"], "pid": os.getpid()}
    times: list[float] = []

    def measure(**kw) -> None:
        for _ in range(steps):
            t0 = time.perf_counter()
            step(**kw)
            times.append(time.perf_counter() - t0)

    from tf_autopar.tracing.model import heavy_classifier

    classify = heavy_classifier()
    if cfg == "none":
        measure()
    elif cfg == "ours":
        import tf_autopar

        with tf_autopar.trace(backend=spec.get("ours_backend", "auto")) as t:
            measure()
        t0 = time.perf_counter()
        hs = t.heavy_share()
        out.update(
            backend=t.backend,
            stop_s=t.collect_s,
            analysis_s=time.perf_counter() - t0,
            heavy_per_step_s=hs.heavy_s / steps,
            op_per_step_s=hs.op_s / steps,
            n_events=len(t.op_table()),
        )
    elif cfg == "profiler":
        from tf_autopar.tracing._profiler import parse_xspace
        from tf_autopar.tracing.model import heavy_share, op_table
        import glob

        d = tempfile.mkdtemp(prefix="bench_prof_")
        origin = time.time_ns()
        tf.profiler.experimental.start(d)
        measure()
        t0 = time.perf_counter()
        tf.profiler.experimental.stop()
        out["stop_s"] = time.perf_counter() - t0
        files = glob.glob(os.path.join(d, "**", "*.xplane.pb"), recursive=True)
        t0 = time.perf_counter()
        chunk = parse_xspace(open(files[0], "rb").read(), origin)
        table = op_table([chunk], 0, 2**62)
        hs = heavy_share(table, 0.0, classify)
        out.update(
            analysis_s=time.perf_counter() - t0,
            heavy_per_step_s=hs.heavy_s / steps,
            op_per_step_s=hs.op_s / steps,
            n_events=len(table),
            xplane_bytes=os.path.getsize(files[0]),
        )
    elif cfg == "paired":
        # One fresh process alternating windows: none, ours, tf.profiler (order rotated), so
        # process-to-process speed differences (large on shared machines) cancel out. Gives a
        # paired overhead and the heavy-op agreement of ours vs tf.profiler on the same steps.
        import glob

        import tf_autopar
        from tf_autopar.tracing._profiler import parse_xspace
        from tf_autopar.tracing.model import heavy_share, op_table

        per: dict = {"none": [], "ours": [], "profiler": []}
        windows: dict = {"none": [], "ours": [], "profiler": []}  # start + steps + stop, wall seconds
        heavy: dict = {"ours": [], "profiler": []}
        order = list(per)
        for k in range(spec.get("paired_windows", 6)):
            for c in order[k % 3 :] + order[: k % 3]:
                times.clear()
                w0 = time.perf_counter()
                if c == "none":
                    measure()
                    windows[c].append(time.perf_counter() - w0)
                elif c == "ours":
                    with tf_autopar.trace(backend=spec.get("ours_backend", "auto")) as t:
                        measure()
                    windows[c].append(time.perf_counter() - w0)  # the trace is collected on exit
                    heavy["ours"].append(t.heavy_share().heavy_s / steps)
                else:
                    d = tempfile.mkdtemp(prefix="bench_prof_")
                    origin = time.time_ns()
                    w0 = time.perf_counter()
                    tf.profiler.experimental.start(d)
                    measure()
                    tf.profiler.experimental.stop()  # serialises and writes xplane.pb
                    windows[c].append(time.perf_counter() - w0)
                    files = glob.glob(os.path.join(d, "**", "*.xplane.pb"), recursive=True)
                    table = op_table([parse_xspace(open(files[0], "rb").read(), origin)], 0, 2**62)
                    heavy["profiler"].append(heavy_share(table, 0.0, classify).heavy_s / steps)
                per[c] += times
        times.clear()
        base = float(np.median(per["none"]))
        out.update(
            paired_median_s={c: float(np.median(v)) for c, v in per.items()},
            paired_overhead={c: float(np.median(v)) / base - 1 for c, v in per.items() if c != "none"},
            window_s=windows,
            window_overhead={
                c: float(np.median(v)) / float(np.median(windows["none"])) - 1
                for c, v in windows.items()
                if c != "none"
            },
            ours_heavy_per_step_s=heavy["ours"],
            profiler_heavy_per_step_s=heavy["profiler"],
            fidelity_ratio=(
                float(np.median(heavy["ours"]) / np.median(heavy["profiler"]))
                if np.median(heavy["profiler"]) > 0
                else None
            ),
        )
    elif cfg == "full_trace":
        if sess is None:
            out["skipped"] = "FULL_TRACE needs the session path"
            return out
        opts = tf.compat.v1.RunOptions(trace_level=tf.compat.v1.RunOptions.FULL_TRACE)
        mds = []
        for _ in range(steps):
            md = tf.compat.v1.RunMetadata()
            t0 = time.perf_counter()
            sess.session.run(
                sess.output_names, dict(zip(sess.input_names, built._flat_inputs)), options=opts, run_metadata=md
            )
            times.append(time.perf_counter() - t0)
            mds.append(md)
        t0 = time.perf_counter()
        out["heavy_per_step_s"] = _heavy_per_step_from_stepstats(mds, classify)
        out["analysis_s"] = time.perf_counter() - t0
    else:
        raise ValueError(f"unknown config {cfg!r}")
    if sess is not None:
        sess.close()
    if cfg != "paired":
        out["times_s"] = times
        out["median_s"] = float(np.median(times))
    return out


# ------------------------------------------------------------------------- parent --
def run_child(spec: dict, timeout: float) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    proc = subprocess.run(
        [sys.executable, __file__, "--child", json.dumps(spec)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"child {spec} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def summarize(results: list[dict], workloads: list[str], configs: list[str]) -> dict:
    summary: dict = {}
    for w in workloads:
        rows = [r for r in results if r["workload"] == w and "median_s" in r]
        base = {r["round"]: r["median_s"] for r in rows if r["config"] == "none"}
        ws: dict = {"none_median_ms": 1e3 * statistics.median(base.values()) if base else None}
        for c in configs:
            rc = [r for r in rows if r["config"] == c]
            if not rc:
                continue
            ratios = [r["median_s"] / base[r["round"]] - 1 for r in rc if r["round"] in base]
            entry = {
                "median_ms": 1e3 * statistics.median(r["median_s"] for r in rc),
                "overhead_median": statistics.median(ratios) if ratios else None,
                "overhead_min": min(ratios) if ratios else None,
                "overhead_max": max(ratios) if ratios else None,
            }
            for k in ("stop_s", "analysis_s", "heavy_per_step_s", "n_events"):
                vals = [r[k] for r in rc if k in r]
                if vals:
                    entry[k] = statistics.median(vals)
            ws[c] = entry
        ours, prof = ws.get("ours", {}).get("heavy_per_step_s"), ws.get("profiler", {}).get("heavy_per_step_s")
        ws["heavy_agreement_across_processes"] = abs(ours - prof) / prof if ours and prof else None
        paired = [r for r in results if r["workload"] == w and r["config"] == "paired"]
        if ws["none_median_ms"] is None and paired:  # --paired-only: the untraced windows' steps
            ws["none_median_ms"] = 1e3 * statistics.median(r["paired_median_s"]["none"] for r in paired)
        fid = [r["fidelity_ratio"] for r in paired if r.get("fidelity_ratio")]
        ws["heavy_agreement"] = abs(statistics.median(fid) - 1) if fid else ws["heavy_agreement_across_processes"]
        ws["heavy_ratio_same_process"] = statistics.median(fid) if fid else None
        for c in ("ours", "profiler"):
            for key, name in (("paired_overhead", "paired"), ("window_overhead", "window")):
                vals = [r[key][c] for r in paired if c in r.get(key, {})]
                if vals:
                    ws[f"{name}_{c}"] = {"median": statistics.median(vals), "min": min(vals), "max": max(vals)}
        summary[w] = ws
    return summary


def render(summary: dict, configs: list[str], meta: dict) -> str:
    def pct(x):
        return "-" if x is None else f"{x * 100:+.1f}%"

    lines = [
        f"path={meta['path']} size={meta['size']} rounds={meta['rounds']} steps={meta['steps']} "
        f"(overhead: median over rounds of each process's median step vs that round's `none`; [min..max])",
        "",
        "| workload | step (none) | "
        + " | ".join(f"{c} overhead" for c in configs if c != "none")
        + " | ours stop | tf.profiler stop | heavy ms/step ours / profiler / FULL_TRACE | heavy-op agreement |",
        "|---|---|" + "---|" * (len([c for c in configs if c != "none"]) + 4),
    ]
    paired_lines = [
        "",
        "Paired (one fresh process per round alternating none / ours / tf.profiler windows):",
        "",
        "| workload | ours overhead | tf.profiler overhead | window: ours | window: tf.profiler "
        "| heavy-op time ours / tf.profiler |",
        "|---|---|---|---|---|---|",
    ]
    for w, ws in summary.items():
        cells = [w, f"{ws['none_median_ms']:.1f} ms" if ws.get("none_median_ms") else "-"]
        for c in configs:
            if c == "none":
                continue
            e = ws.get(c)
            cells.append(
                "-" if not e else f"{pct(e['overhead_median'])} [{pct(e['overhead_min'])}..{pct(e['overhead_max'])}]"
            )
        stop = lambda c: f"{ws[c]['stop_s'] * 1e3:.1f} ms" if c in ws and "stop_s" in ws[c] else "-"  # noqa: B023, E731
        cells += [stop("ours"), stop("profiler")]
        hv = [ws.get(c, {}).get("heavy_per_step_s") for c in ("ours", "profiler", "full_trace")]
        cells.append(" / ".join("-" if v is None else f"{v * 1e3:.2f}" for v in hv))
        ag = ws.get("heavy_agreement")
        ratio = ws.get("heavy_ratio_same_process")
        cells.append("-" if ag is None else f"{ag * 100:.1f}%" + ("" if ratio is None else f" (ours/prof {ratio:.3f})"))
        lines.append("| " + " | ".join(cells) + " |")
        if "paired_ours" in ws or "paired_profiler" in ws:
            pc = [w]
            for key in ("paired_ours", "paired_profiler", "window_ours", "window_profiler"):
                e = ws.get(key)
                pc.append("-" if not e else f"{pct(e['median'])} [{pct(e['min'])}..{pct(e['max'])}]")
            ratio = ws.get("heavy_ratio_same_process")
            pc.append("-" if ratio is None else f"{ratio:.3f}")
            paired_lines.append("| " + " | ".join(pc) + " |")
    if len(paired_lines) > 5:
        lines += paired_lines
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--workloads", default=",".join(DEFAULT_WORKLOADS))
    p.add_argument("--configs", default=",".join(CONFIGS))
    p.add_argument("--size", default="paper", choices=("tiny", "paper"))
    p.add_argument("--batch", type=int, default=None, help="default: each workload's published batch")
    p.add_argument("--path", default="session", choices=("session", "function"))
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--steps", type=int, default=20, help="measured steps per process")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--timeout", type=float, default=1800, help="per child process, seconds")
    p.add_argument("--ours-backend", default="auto", choices=("auto", "native", "profiler"))
    p.add_argument(
        "--paired-only",
        action="store_true",
        help="only the paired processes (per-step and whole-window overheads, fidelity)",
    )
    p.add_argument(
        "--no-paired",
        dest="paired",
        action="store_false",
        help="skip the per-round paired process (alternating none/ours/tf.profiler windows)",
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="check it runs: tiny sizes, 2 rounds, 3 steps, autoenc+resnet50 (overrides those options)",
    )
    p.add_argument("--json", metavar="OUT", help="write raw results and the summary here")
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(child(json.loads(args.child))))
        return 0
    if args.quick:
        args.size, args.rounds, args.steps, args.warmup = "tiny", 2, 3, 1
        if args.workloads == ",".join(DEFAULT_WORKLOADS):
            args.workloads = "autoenc,resnet50"
    workloads = [w for w in args.workloads.split(",") if w]
    configs = [c for c in args.configs.split(",") if c]
    bad = [c for c in configs if c not in CONFIGS]
    if bad:
        p.error(f"unknown configs {bad}; choose from {CONFIGS}")
    if "none" not in configs:
        configs.insert(0, "none")
    if args.path == "function" and "full_trace" in configs:
        print("note: FULL_TRACE needs --path session; dropping it", file=sys.stderr)
        configs.remove("full_trace")
    # Build the native tracer once up front so no measured child pays for the compile.
    if "ours" in configs and args.ours_backend != "profiler":
        subprocess.run(
            [sys.executable, "-m", "tf_autopar.tracing.build"],
            cwd=REPO,
            check=False,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
    results: list[dict] = []
    t_start = time.time()
    meta = {
        "path": args.path,
        "size": args.size,
        "rounds": args.rounds,
        "steps": args.steps,
        "batch": args.batch,
        "warmup": args.warmup,
    }

    def save(partial: bool) -> None:  # after every run, so an interrupted benchmark keeps its data
        if args.json:
            doc = {"meta": {**meta, "partial": partial}, "results": results}
            if not partial:
                doc["summary"] = summarize(results, workloads, configs)
            Path(args.json).write_text(json.dumps(doc, indent=1))

    for rnd in range(args.rounds):
        for wi, w in enumerate(workloads):
            k = (rnd + wi) % len(configs)
            for c in [] if args.paired_only else configs[k:] + configs[:k]:  # rotate the order every round
                spec = {
                    "workload": w,
                    "config": c,
                    "round": rnd,
                    "size": args.size,
                    "batch": args.batch,
                    "steps": args.steps,
                    "warmup": args.warmup,
                    "path": args.path,
                    "ours_backend": args.ours_backend,
                }
                r = run_child(spec, args.timeout)
                results.append(r)
                save(partial=True)
                print(
                    f"[{time.time() - t_start:7.1f}s] round {rnd} {w:>14} {c:>10}: "
                    f"{r.get('median_s', float('nan')) * 1e3:9.2f} ms/step"
                    + (f"  stop {r['stop_s'] * 1e3:.1f} ms" if "stop_s" in r else ""),
                    file=sys.stderr,
                )
            if args.paired and "ours" in configs:
                spec = {
                    "workload": w,
                    "config": "paired",
                    "round": rnd,
                    "size": args.size,
                    "batch": args.batch,
                    "steps": max(3, args.steps // 2),
                    "warmup": args.warmup,
                    "path": args.path,
                    "ours_backend": args.ours_backend,
                    "paired_windows": 6,
                }
                r = run_child(spec, args.timeout)
                results.append(r)
                save(partial=True)
                po = r.get("paired_overhead", {})
                print(
                    f"[{time.time() - t_start:7.1f}s] round {rnd} {w:>14}     paired: ours {po.get('ours', 0):+.1%} "
                    f"profiler {po.get('profiler', 0):+.1%}, heavy ours/profiler "
                    f"{r.get('fidelity_ratio') or float('nan'):.3f}",
                    file=sys.stderr,
                )
    print(render(summarize(results, workloads, configs), configs, meta))
    save(partial=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())

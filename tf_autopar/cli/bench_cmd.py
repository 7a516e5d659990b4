"""`tf-autopar bench MODEL`: latency and throughput of a model under several thread settings.

MODEL is a SavedModel directory, a .keras file or a bundled workload name. Every
configuration runs in fresh processes, interleaved round by round (tf_autopar/models/bench.py);
this command never imports TensorFlow itself.
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Mapping

from tf_autopar._numbers import count, seconds
from tf_autopar.graph.dims import MAX_BATCH
from tf_autopar._files import write_json_atomic
from tf_autopar.models.options import add_model_flags
from tf_autopar.validation.report import format_ratio
from tf_autopar.measure.configs import config_name


def add_parser(subparsers: Any) -> None:
    from tf_autopar.models import bench as b

    p = subparsers.add_parser(
        "bench",
        help="latency/throughput of your model (SavedModel, .keras, workload) under TF's default, our plan, ...",
        description="Runs each configuration in fresh processes, interleaved round by round, on inputs "
                    "synthesised from the model's signature (or --inputs), and reports the effective thread "
                    "settings, p50/p90/p99 latency, throughput and the speedup over TensorFlow's default.",
    )
    p.add_argument("model", metavar="MODEL", help="SavedModel directory, .keras file, or bundled workload name")
    p.add_argument("--batch", type=count(MAX_BATCH, "the largest batch tf-autopar synthesises inputs for"), default=1, help="batch per request; a None batch dimension (default 1)")
    p.add_argument("--mode", choices=b.MODES, default="latency",
                   help="latency: one process, one request at a time; throughput: the plan's instances as "
                        "that many concurrent processes for every configuration, throughput summed")
    amount = p.add_mutually_exclusive_group()
    amount.add_argument("--requests", type=count(), default=None,
                        help=f"timed requests per process and run (default {b.DEFAULT_REQUESTS})")
    amount.add_argument("--time", type=seconds(), default=None, metavar="SECONDS",
                        help="time requests for this long per process and run instead")
    p.add_argument("--warmup", type=count(), default=b.DEFAULT_WARMUP,
                   help=f"untimed requests first (tracing, allocation; default {b.DEFAULT_WARMUP})")
    p.add_argument("--rounds", type=count(), default=b.DEFAULT_ROUNDS,
                   help=f"interleaved rounds (default {b.DEFAULT_ROUNDS})")
    p.add_argument("--compare", default=",".join(b.DEFAULT_COMPARE),
                   help="comma-separated configurations: default (TF's default), plan (tf_autopar's plan), "
                        "enable (enable() with no model, empty cache: a first start), enable-cached (its second "
                        "start), INTERxINTRA (e.g. 1x2), and on OpenMP builds INTERxINTRAxOMP[:btMS] (OpenMP "
                        "threads apart from TF's intra-op pool, KMP_BLOCKTIME; e.g. 1x1x2:bt1); default "
                        "'default,plan'. Speedups are over 'default'")
    p.add_argument("--streams", type=count(4096), default=None, help="throughput mode: instances to plan (default: planner)")
    p.add_argument("--size", choices=("tiny", "paper"), default="tiny", help="bundled workloads only (default tiny)")
    p.add_argument("--timeout", type=seconds(), default=b.DEFAULT_TIMEOUT_S,
                   help=f"seconds per process before it is killed (default {b.DEFAULT_TIMEOUT_S:g})")
    add_model_flags(p)
    p.add_argument("--json", metavar="OUT.json", default=None, help="write every raw timing as JSON ('-' = stdout)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    p.set_defaults(func=run)


def _ms(x: float | None) -> str:
    if x is None:
        return "-"
    ms = x * 1e3
    return f"{ms:.3f}" if ms < 1 else f"{ms:.2f}" if ms < 100 else f"{ms:.1f}"


def _num(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:.1f}" if x < 1000 else f"{x:.0f}"


def settings_text(s: Mapping[str, Any] | None, affinity: list[int]) -> str:
    """'1x2 TF_NUM_*; bound 0' from a configuration's effective settings."""
    if not s:
        return "-"
    omp = s.get("openmp") or {}  # what the OpenMP runtime runs with, TF's defaults included
    text = config_name(s.get("inter_op"), s.get("intra_op"), omp.get("max_threads"),
                       omp.get("blocktime_ms") if omp.get("max_threads") else None)
    if s.get("processes", 1) > 1:
        text += f" x{s['processes']} processes"
    cpus = [c for c in s.get("cpus") or [] if c and sorted(c) != sorted(affinity)]
    if cpus:
        text += " bound " + "|".join(",".join(map(str, c)) for c in cpus)
    tfa = s.get("tf_autopar")
    if tfa:
        text += f" (enable: {tfa.get('phase')}, from {tfa.get('source')})"
    elif not s.get("env"):
        text += " (TF default)"
    else:
        text += " (" + " ".join(f"{k}={v}" for k, v in sorted(s["env"].items())) + ")"
    return text



def header(doc: Mapping[str, Any]) -> list[str]:
    o, h, m = doc["options"], doc["host"], doc.get("model") or {}
    kind = {"savedmodel": "SavedModel", "keras": "Keras file", "workload": "bundled workload"}.get(m.get("kind"), "?")
    what = f"{m.get('path', o['model'])} ({kind}" + (f", signature {m['signature']}" if m.get("signature") else "") \
        + (f", size {m['size']}" if m.get("size") else "") + ")"
    lines = [f"tf-autopar bench: {what}, batch {doc.get('batch')}, {o['mode']} mode"
             + (f", {doc['instances']} concurrent processes per configuration" if doc.get("instances", 1) > 1 else ""),
             f"host: {h['cpu_model']}; {h['logical_cpus']} logical CPUs, {h['physical_cores']} cores, budget "
             f"{h['cpu_budget']}" + (f", quota {h['quota_cpus']:g} CPUs" if h.get("quota_cpus") else "")
             + f"; TensorFlow {h.get('tf_version') or '?'} ({h.get('threading_runtime')})"]
    for i in doc.get("inputs") or []:
        shape = ",".join(map(str, i["shape"]))
        lines.append(f"input {i['name']}: {i['dtype']}[{shape}] {i.get('values', '')}".rstrip())
    for a in doc.get("assumptions") or []:
        lines.append(f"assumed: {a}")
    plan = (doc.get("plan") or {}).get("plan") or {}
    if plan:
        lines.append(f"plan ({plan.get('mode')}): {plan.get('instances', 1)} x inter_op={plan.get('inter_op')} "
                     f"intra_op={plan.get('intra_op')}; {(doc['plan'].get('profile_note') or '')}")
    amount = f"{o['time_s']:g} s" if o.get("time_s") else f"{o['requests']} requests"
    lines.append(f"runs: {o['rounds']} interleaved rounds x {amount} (warm-up {o['warmup']}) per configuration, "
                 f"fresh process per run; order per round: {' '.join(doc.get('order', []))}")
    return lines


def format_report(doc: Mapping[str, Any]) -> str:
    out = header(doc)
    if doc.get("interrupted"):
        out.append("INTERRUPTED: partial results below")
    affinity = doc["host"].get("affinity") or []
    head = ["config", "effective settings", "p50 ms", "p90 ms", "p99 ms", "req/s", "items/s", "speedup vs default"]
    rows = []
    for name in doc.get("order", []):
        s = doc["summary"].get(name, {})
        lat = s.get("latency_s", {})
        rps = (s.get("throughput_rps") or {}).get("median")
        rows.append([name, settings_text(s.get("settings"), affinity), _ms(lat.get("p50")), _ms(lat.get("p90")),
                     _ms(lat.get("p99")), _num(rps), _num(s.get("items_per_s")),
                     "1 (baseline)" if name == "default" else format_ratio(s.get("speedup_vs_default"))])
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows)]
    fmt = lambda cells: "  ".join(str(c).ljust(w) for c, w in zip(cells, widths)).rstrip()  # noqa: E731
    out += ["", fmt(head), fmt(["-" * w for w in widths]), *(fmt(r) for r in rows)]
    if "default" not in doc.get("order", []):
        out.append("no 'default' in --compare: no speedups")
    notes = []
    for name in doc.get("order", []):
        s = doc["summary"].get(name, {})
        if s.get("status") != "ok":
            notes.append(f"  {name}: {s.get('rounds_ok')}/{s.get('rounds')} rounds ran cleanly; "
                         + "; ".join(e for e in s.get("errors", []) if e))
    if notes:
        out += ["failures:", *notes]
    ratio = ("config's requests/s / default's" if doc["options"]["mode"] == "throughput"
             else "default's median latency / config's")
    out.append(f"speedup = {ratio} in each round, median over rounds (range; a range including 1.00 is within "
               f"the rounds' noise). p50/p90/p99 are over every request of every round")
    return "\n".join(out)


def run(args: argparse.Namespace) -> int:
    from tf_autopar.models.bench import Bench, BenchOptions, parse_compare
    from tf_autopar.models.options import from_args
    from tf_autopar.measure.progress import Progress

    options = BenchOptions(
        model=args.model, batch=args.batch, mode=args.mode, requests=args.requests, time_s=args.time,
        warmup=args.warmup, rounds=args.rounds, compare=parse_compare(args.compare), size=args.size,
        streams=args.streams, timeout_s=args.timeout, model_options=from_args(args),
    )
    out = sys.stderr if args.json == "-" else sys.stdout
    progress = Progress(0, enabled=not args.no_progress)
    with Bench(options, progress=progress) as bench:  # SIGTERM: cli/interrupt.py
        print(f"tf-autopar bench: loading and planning {bench.model} in a child process ...", file=out, flush=True)
        try:
            bench.prepare()
        except RuntimeError as exc:  # the child crashed (not bad input: that is a ValueError, exit 2)
            print(f"tf-autopar bench: error: {exc}", file=sys.stderr)
            return 1
        doc = bench.run()
    print(format_report(doc), file=out)
    if args.json == "-":
        print(json.dumps(doc, indent=1, default=str))
    elif args.json:
        write_json_atomic(args.json, doc, indent=1, default=str)
        print(f"raw timings written to {args.json}", file=out)
    if doc.get("interrupted"):
        return 130
    failed = [n for n, s in doc["summary"].items() if s.get("rounds_ok", 0) == 0]
    return 1 if failed else 0

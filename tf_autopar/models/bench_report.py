"""``tf-autopar bench``'s report: the document models/bench.py returns, as the table a person reads.

Beside the data it renders (models/bench.py), as validation/report.py is beside validation's; the
CLI only prints it.
"""

from __future__ import annotations

from typing import Any, Mapping

from tf_autopar._text import table
from tf_autopar.measure.stats import format_ratio
from tf_autopar.measure.configs import config_name


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
    text = config_name(
        s.get("inter_op"),
        s.get("intra_op"),
        omp.get("max_threads"),
        omp.get("blocktime_ms") if omp.get("max_threads") else None,
    )
    if s.get("processes", 1) > 1:
        text += f" x{s['processes']} processes"
    cpus = [c for c in s.get("cpus") or [] if c and sorted(c) != sorted(affinity)]
    if cpus:
        text += " bound " + "|".join(",".join(map(str, c)) for c in cpus)
    if s.get("frozen_session"):
        text = f"frozen graph, session {s['frozen_session']}"
    if s.get("served"):
        text += f", served from a frozen session {'/'.join(s['served'])}"
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
    what = (
        f"{m.get('path', o['model'])} ({kind}"
        + (f", signature {m['signature']}" if m.get("signature") else "")
        + (f", size {m['size']}" if m.get("size") else "")
        + ")"
    )
    lines = [
        f"tf-autopar bench: {what}, batch {doc.get('batch')}, {o['mode']} mode"
        + (f", {doc['instances']} concurrent processes per configuration" if doc.get("instances", 1) > 1 else ""),
        f"host: {h['cpu_model']}; {h['logical_cpus']} logical CPUs, {h['physical_cores']} cores, budget "
        f"{h['cpu_budget']}"
        + (f", quota {h['quota_cpus']:g} CPUs" if h.get("quota_cpus") else "")
        + f"; TensorFlow {h.get('tf_version') or '?'} ({h.get('threading_runtime')})",
    ]
    for i in doc.get("inputs") or []:
        shape = ",".join(map(str, i["shape"]))
        lines.append(f"input {i['name']}: {i['dtype']}[{shape}] {i.get('values', '')}".rstrip())
    for a in doc.get("assumptions") or []:
        lines.append(f"assumed: {a}")
    plan = (doc.get("plan") or {}).get("plan") or {}
    if plan:
        lines.append(
            f"plan ({plan.get('mode')}): {plan.get('instances', 1)} x inter_op={plan.get('inter_op')} "
            f"intra_op={plan.get('intra_op')}; {(doc['plan'].get('profile_note') or '')}"
        )
    amount = f"{o['time_s']:g} s" if o.get("time_s") else f"{o['requests']} requests"
    lines.append(
        f"runs: {o['rounds']} interleaved rounds x {amount} (warm-up {o['warmup']}) per configuration, "
        f"fresh process per run; order per round: {' '.join(doc.get('order', []))}"
    )
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
        rows.append(
            [
                name,
                settings_text(s.get("settings"), affinity),
                _ms(lat.get("p50")),
                _ms(lat.get("p90")),
                _ms(lat.get("p99")),
                _num(rps),
                _num(s.get("items_per_s")),
                "1 (baseline)" if name == "default" else format_ratio(s.get("speedup_vs_default")),
            ]
        )
    out += ["", *table(head, rows)]
    if "default" not in doc.get("order", []):
        out.append("no 'default' in --compare: no speedups")
    notes = []
    for name in doc.get("order", []):
        s = doc["summary"].get(name, {})
        if s.get("status") != "ok":
            notes.append(
                f"  {name}: {s.get('rounds_ok')}/{s.get('rounds')} rounds ran cleanly; "
                + "; ".join(e for e in s.get("errors", []) if e)
            )
    if notes:
        out += ["failures:", *notes]
    ratio = (
        "config's requests/s / default's"
        if doc["options"]["mode"] == "throughput"
        else "default's median latency / config's"
    )
    out.append(
        f"speedup = {ratio} in each round, median over rounds (range; a range including 1.00 is within "
        f"the rounds' noise). p50/p90/p99 are over every request of every round"
    )
    return "\n".join(out)

"""Markdown tables from `tf-autopar validate --tuned` documents: the rule's plan, the tuned
setting and the optimum side by side, with the tuning's cost against the sweep's.

Usage: python benchmarks/tuned_table.py RESULT.json [RESULT.json ...]
"""

from __future__ import annotations

import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tf_autopar.measure.stats import geomean, median, paired_ratios  # noqa: E402  (pure, no TF)
from tf_autopar.planning import baselines  # noqa: E402


def _ratio(c: dict | None) -> str:
    if not c or c.get("value") is None:
        return "-"
    p = c.get("paired") or {}
    rng = f" ({p['min']:.2f}-{p['max']:.2f})" if p.get("n", 0) >= 2 and p.get("min") is not None else ""
    return f"{c['value']:.2f}{rng}"


def _threads(row: dict, name: str) -> str:
    cfg = row["configs"].get(name) or {}
    return f"{cfg.get('inter', 0)}x{cfg.get('intra', 0)}" if cfg else "-"


def _opt(row: dict, s: dict) -> str:
    opt = s.get("optimum")
    if not opt:
        return "-"
    cfg = row["configs"][opt]
    label = next((b.label for b in baselines.BASELINES if b.name == opt), "")
    threads = f"{cfg['inter']}x{cfg['intra']}" if cfg.get("inter") else "2x2 (implicit)"
    return f"{threads}" + (f" ({label})" if label and cfg.get("inter") else "")


def _name(workload: str) -> str:
    return os.path.basename(workload.rstrip("/")) if "/" in workload else workload


def table(doc: dict) -> str:
    lines = [
        "| model | mode | batch | rule's plan | plan/opt | tuned | tuned/opt | optimum | tune: runs, machine time | share of the sweep's time |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    geo_plan, geo_tuned, tune_s, sweep_s = [], [], 0.0, 0.0
    for row in doc["rows"]:
        s = row.get("summary") or {}
        cost = s.get("tune_cost") or {}
        pv = (s.get("ours_vs_optimum") or {}).get("value")
        tv = (s.get("tuned_vs_optimum") or {}).get("value")
        if pv:
            geo_plan.append(pv)
        if tv:
            geo_tuned.append(tv)
        tune_s += cost.get("wall_s") or 0.0
        sweep_s += cost.get("sweep_wall_s") or 0.0
        stopped = ((row.get("tune") or {}).get("search") or {}).get("stopped", "")
        how = stopped.split(":")[0] if stopped else (row.get("tune") or {}).get("status", "-")
        share = cost.get("share")
        lines.append(
            f"| {_name(row['workload'])} | {row['mode']} | {row['batch']} | {_threads(row, 'tf_autopar')} | "
            f"{_ratio(s.get('ours_vs_optimum'))} | {_threads(row, 'tuned')} ({how}) | "
            f"{_ratio(s.get('tuned_vs_optimum'))} | {_opt(row, s)} | {cost.get('runs', '-')}, "
            f"{cost.get('wall_s', 0):.0f} s | {'-' if share is None else f'{share:.0%}'} |"
        )
    lines.append(
        f"| geomean | | | | {geomean(geo_plan):.3f} | | {geomean(geo_tuned):.3f} | | {tune_s:.0f} s | "
        f"{tune_s / sweep_s:.0%} |"
        if sweep_s
        else "| geomean | | | | | | | | | |"
    )
    host = doc.get("host", {}).get("cpu", {})
    lines.append("")
    for label, rows in (
        ("bundled workloads", [r for r in doc["rows"] if "/" not in r["workload"]]),
        ("model files (not bundled)", [r for r in doc["rows"] if "/" in r["workload"]]),
    ):
        if not rows:
            continue
        plan = [v for r in rows if (v := ((r.get("summary") or {}).get("ours_vs_optimum") or {}).get("value"))]
        tuned = [v for r in rows if (v := ((r.get("summary") or {}).get("tuned_vs_optimum") or {}).get("value"))]
        lines.append(
            f"- {label}, {len(rows)} rows: plan/opt geomean {geomean(plan):.3f} ({sum(x < 0.97 for x in plan)} "
            f"below 0.97), tuned/opt {geomean(tuned):.3f} ({sum(x < 0.97 for x in tuned)} below 0.97)"
        )
    lines.append(f"- processor: {host.get('model', '?')}; started {doc.get('started')}, finished {doc.get('finished')}")
    return "\n".join(lines)


def _round_times(row: dict, name: str) -> dict[int, float]:
    """Per-round times of a configuration; one that `validate` ran once under another name
    (``same_as``: the same environment) has that one's times."""
    cfg = row["configs"].get(name) or {}
    if cfg.get("same_as") and not cfg.get("runs"):
        cfg = row["configs"].get(cfg["same_as"]) or {}
    return {r["round"]: r["median_s"] for r in cfg.get("runs", []) if r.get("status") == "ok" and r.get("median_s")}


def _rows(n: int) -> str:
    return f"{n} row" + ("" if n == 1 else "s")


def ceiling(doc: dict) -> str:
    """What this host can resolve: TensorFlow's implicit default and an explicit 2x2 are the same
    setting on 2 CPUs, measured as two configurations in the same rounds. Per row, the worse of
    the two reads at w of the better (median of per-round ratios). A tuner that always picks the
    truly best setting is still compared with the luckiest-measured configuration: about half
    the time its own run is the unlucky one, so its expected share is about sqrt(w) per row, and
    a row reads below 0.97 when w does and the draw goes against it."""
    ws, lines = [], []
    for row in doc["rows"]:
        ratios = paired_ratios(_round_times(row, "tf-default"), _round_times(row, "2x2"))
        if not ratios:
            continue
        mid = median(ratios)  # as validate's paired shares
        w = min(mid, 1 / mid)
        ws.append(w)
        tv = ((row.get("summary") or {}).get("tuned_vs_optimum") or {}).get("value")
        if tv is not None and tv < 0.97:
            lines.append(
                f"  - {_name(row['workload'])} {row['mode']}: tuned/opt {tv:.2f}; the same setting twice: {w:.2f}"
            )
    if not ws:
        return "no row measured TensorFlow's implicit default and an explicit 2x2 side by side"
    g = geomean(ws)
    below = sum(w < 0.97 for w in ws)
    head = (
        f"- the same setting measured twice (implicit default against explicit 2x2), {_rows(len(ws))}: the "
        f"worse reads at {g:.3f} of the better (geomean), {_rows(below)} below 0.97, lowest {min(ws):.2f}; a "
        f"tuner that always chose the best setting would be expected to show about {math.sqrt(g):.3f} "
        f"(geomean) and about {below / 2:g} rows below 0.97"
    )
    return "\n".join([head] + (["- rows where the tuned setting read below 0.97:"] + lines if lines else []))


def main(argv: list[str]) -> int:
    for path in argv:
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
        print(table(doc))
        print(ceiling(doc))
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

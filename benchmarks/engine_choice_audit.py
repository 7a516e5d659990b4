#!/usr/bin/env python
"""Was the fast path's engine the right one? Its live choice judged in one process.

``bench_engines.py`` compares ``enable()`` with each engine alone in separate processes; on a
shared host a process can land in a fast or a slow phase for its whole life (an A/A of the same
code differed by 0.83-1.45x per row), so a row under 0.95 there does not say whether the choice
was wrong. ``bench_engine_settings.py`` runs the fast path's own runners side by side in one set of
worker processes, interleaved: there the candidates are compared under the same conditions. This
reads both: for each row, the engine ``enable()`` served at the end of each round, the in-process
median of each candidate, which was fastest, and what the served one cost against it.

The candidates map to ``bench_engine_settings.py``'s configurations: ``openvino`` to
``ov-f32-static`` (its runner with the copy for the call's shapes), ``onnxruntime`` to
``ort-nospin``, ``onnxruntime-spinning`` to ``ort-spin``. A row TensorFlow's session served is
shown but not judged: ``tf`` is the frozen session at 1 inter-op x 2 intra-op, not the pools live
tuning chose (NASNetMobile b1: 32 ms at 1x2, about 11 at the 2x1 it served).

    python benchmarks/engine_choice_audit.py --engines results/engines_static_shapes_24rows_epyc.json.gz \\
        results/engines_ort_cli_epyc.json.gz --settings results/engine_choice_audit_epyc.json
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import statistics

#: the fast path's engine name -> bench_engine_settings.py's configuration of the same runner
CONFIG = {
    "openvino": "ov-f32-static",
    "onnxruntime": "ort-nospin",
    "onnxruntime-spinning": "ort-spin",
    "tensorflow": "tf",
}


def _load(path: str) -> dict:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as fh:
        return json.load(fh)


def served_engines(engine_runs: list[dict]) -> dict[tuple[str, int], list[str]]:
    """(model, batch) -> the engine serving at the end of each round's ``enable()``; a later run's
    rows replace an earlier run's."""
    out: dict[tuple[str, int], list[str]] = {}
    for data in engine_runs:
        for row in data["rows"]:
            engines = []
            for rnd in row["rounds"]:
                runners = rnd.get("enable", {}).get("runners") or []
                if runners and runners[0].get("engine"):
                    engines.append(runners[0]["engine"])
            if engines:
                out[row["model"], int(row["batch"])] = engines
    return out


def audit(served: dict[tuple[str, int], list[str]], settings: dict) -> list[dict]:
    """Per row: the in-process medians, the fastest, each served engine's cost against it."""
    rows = []
    for key, cfgs in settings["rows"].items():
        model, b = key.rsplit(" b", 1)
        ms = {c: v["median_ms"] for c, v in cfgs.items() if isinstance(v, dict) and v.get("median_ms")}
        engines = served.get((model, int(b)))
        if not ms or not engines:
            continue
        fastest = min(ms, key=ms.get)
        # TensorFlow's session served at the pools live tuning chose, which ``tf`` (1x2) is not: no cost
        costs = [
            ms[CONFIG[e]] / ms[fastest] if e != "tensorflow" and CONFIG.get(e) in ms else float("nan") for e in engines
        ]
        rows.append({"model": model, "batch": int(b), "ms": ms, "fastest": fastest, "served": engines, "costs": costs})
    return rows


def summarise(rows: list[dict]) -> str:
    lines = [
        "| model | batch | in one process, ms: " + " / ".join(CONFIG.values()) + " | fastest | served at the end "
        "(per round) | served / fastest, in one process |",
        "|---|---|---|---|---|---|",
    ]
    all_costs = []
    for r in rows:
        cells = " / ".join(f"{r['ms'][c]:.3g}" if c in r["ms"] else "-" for c in CONFIG.values())
        costs = [c for c in r["costs"] if not math.isnan(c)]
        all_costs += costs
        lines.append(
            f"| {r['model']} | {r['batch']} | {cells} | {r['fastest']} | {', '.join(r['served'])} | "
            + ", ".join("-" if math.isnan(c) else f"{c:.2f}" for c in r["costs"])
            + " |"
        )
    right = sum(1 for c in all_costs if c <= 1.05)
    geo = math.exp(statistics.fmean(math.log(c) for c in all_costs)) if all_costs else float("nan")
    lines += [
        "",
        f"served engine within 5% of the fastest in one process: {right} of {len(all_costs)} row-rounds "
        f"where an OpenVINO or ONNX Runtime runner served; geometric mean of served / fastest {geo:.3f}",
        "(rows served by TensorFlow's session: '-', its tuned pools are not among the configurations here)",
    ]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engines", nargs="+", required=True, help="bench_engines.py results, later ones replacing rows")
    ap.add_argument("--settings", required=True, help="a bench_engine_settings.py result over the same rows")
    ap.add_argument("--out", help="write the audit as JSON too")
    args = ap.parse_args()
    settings = _load(args.settings)
    rows = audit(served_engines([_load(p) for p in args.engines]), settings)
    print(f"processor: {settings.get('processor')}; in-process rounds: {settings.get('rounds')}")
    print(summarise(rows))
    if args.out:
        with open(args.out, "w", encoding="utf-8") as fh:
            json.dump({"processor": settings.get("processor"), "rows": rows}, fh, indent=1)


if __name__ == "__main__":
    main()

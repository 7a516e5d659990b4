#!/usr/bin/env python
"""Merge validation rows from several runs into one document: the training table of docs/measurements.md.

Each row is taken whole (all its configurations, measured interleaved in one run) from the
newest run that measured it; its source file is recorded in ``row["source"]``.

``--replan W=CONFIG``: workload W's plan changed after its run, to a configuration that the
run measured as part of the search space (e.g. ``speech=2x1``). The row is re-summarised with
that configuration's runs as ours: the plan is recomputed by plan_child with the current code
and must equal CONFIG, and the old plan's runs stay with their own search configuration. The
row records ``replanned_from``.

    python benchmarks/combine_validation.py OUT.json RUN.json [RUN.json ...] [--replan speech=2x1]
"""

from __future__ import annotations

import argparse
import copy
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tf_autopar.validation import chart, report, results  # noqa: E402


def replan(row: dict, config: str) -> dict:
    """The row with ``config`` (a measured search configuration) as our plan."""
    row = copy.deepcopy(row)
    configs = row["configs"]
    if config not in configs or configs[config]["kind"] != "search":
        raise SystemExit(f"{row['workload']}: {config!r} is not a search configuration of its run")
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "tf_autopar.models.plan_child",
            row["workload"],
            row["mode"],
            row["size"],
            "--batch",
            str(row["batch"]),
        ],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    new_plan = json.loads(out.stdout.strip().splitlines()[-1])
    got = f"{new_plan['plan']['inter_op']}x{new_plan['plan']['intra_op']}"
    if got != config:
        raise SystemExit(f"{row['workload']}: the current plan is {got}, not {config}")
    old = f"{configs['tf_autopar']['inter']}x{configs['tf_autopar']['intra']}"
    canonical = results.canonical(configs, config)
    ours, measured = configs["tf_autopar"], configs[canonical]
    if configs[old].get("same_as") == "tf_autopar":  # the old plan's runs become its search config's
        configs[old] = {**configs[old], "same_as": None, "runs": ours["runs"]}
    configs["tf_autopar"] = {
        **ours,
        "inter": measured["inter"],
        "intra": measured["intra"],
        "env": measured["env"],
        "same_as": None,
        "runs": measured["runs"],
    }
    for name, c in configs.items():  # everything that pointed at the measured config now points at ours
        if name != "tf_autopar" and (name == canonical or c.get("same_as") == canonical):
            configs[name] = {**c, "same_as": "tf_autopar", "runs": []}
    row["plan"] = {
        "status": "ok",
        **{k: new_plan[k] for k in ("plan_mode", "plan", "env", "explain", "profile", "quota_source")},
    }
    row["replanned_from"] = old
    return row


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out")
    p.add_argument("runs", nargs="+", help="validation JSON files, oldest first")
    p.add_argument("--replan", action="append", default=[], metavar="WORKLOAD=CONFIG")
    args = p.parse_args(argv)
    rows: dict[tuple[str, str], dict] = {}
    doc = None
    sources = []
    for path in args.runs:
        run = json.loads(Path(path).read_text())
        doc = doc or run
        sources.append({"file": Path(path).name, "options": run["options"], "started": run["started"]})
        for row in run["rows"]:
            rows[(row["workload"], row["mode"])] = {**row, "source": Path(path).name}
    for item in args.replan:
        workload, _, config = item.partition("=")
        key = next(k for k in rows if k[0] == workload)
        rows[key] = replan(rows[key], config)
    assert doc is not None
    stat = results.statistic_for(doc["options"].get("cpu_quota"))
    rounds = {s["file"]: s["options"]["rounds"] for s in sources}
    complete = all(
        len(c["runs"]) >= rounds.get(r.get("source", ""), 0)
        for r in rows.values()
        for c in r["configs"].values()
        if not c.get("same_as")
    )
    merged = {
        **doc,
        "rows": sorted(rows.values(), key=lambda r: (r["workload"], r["mode"])),
        "sources": sources,
        "interrupted": not complete,
    }
    for row in merged["rows"]:
        row["summary"] = results.summarize_row(row, doc["host"].get("logical_cpus", 2), stat)
    merged["geomean"] = results.geomeans(merged["rows"])
    results.validate_document(merged)
    report.write_json(merged, args.out)
    chart.write(merged, str(Path(args.out).with_suffix(".png")))
    print(report.format_table(merged))
    print(
        "rows merged from: "
        + "; ".join(f"{s['file']} ({s['options']['rounds']} rounds x {s['options']['steps']} steps)" for s in sources)
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Rendering a validation document: the text table, the JSON file and the PNG chart."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from tf_autopar import _plots
from tf_autopar._files import write_text_atomic
from tf_autopar._text import table
from tf_autopar.measure.stats import BELOW_OPTIMUM, format_ratio
from tf_autopar.planning import baselines
from tf_autopar.validation.results import FROZEN, LIVE, OURS, PROCESS, TUNED, canonical, path_of, served

OPTIMUM_COLOUR = "#8c8c8c"  # the chart's "ours / optimum" bars (each baseline's colour is in its record)


def _ms(x: float | None) -> str:
    """Milliseconds with 3 significant digits at least (sub-ms latency rows need them)."""
    if x is None:
        return "-"
    ms = x * 1e3
    return f"{ms:.3f}" if ms < 1 else f"{ms:.2f}" if ms < 100 else f"{ms:.1f}"


def _range(sp: Mapping[str, Any]) -> str:
    return "-" if sp.get("min") is None else f"{_ms(sp['min'])}-{_ms(sp['max'])}"


def _threads(row: Mapping[str, Any], name: str | None) -> str:
    if not name:
        return "-"
    cfg = row["configs"][name]
    if path_of(cfg) == LIVE:
        return "live " + _served(row, name)
    inter, intra = cfg.get("inter", 0), cfg.get("intra", 0)
    if path_of(cfg) == FROZEN:
        return f"frozen {inter}x{intra}" + (" bound" if cfg.get("cpus") else "")
    text = f"{inter}x{intra}" if (inter or intra) else "0x0"
    if cfg.get("omp"):
        text += f" omp{cfg['omp']}"
    if cfg.get("cpus"):
        text += " bound"
    return text


def _served(row: Mapping[str, Any], name: str) -> str:
    """The sessions a live configuration served at the end of its runs: '1x1', or 'orig' when it
    stayed on TensorFlow's own path, '-' when no run finished."""
    cfg = row["configs"][canonical(row["configs"], name)]
    if not any(r.get("status") == "ok" for r in cfg.get("runs", [])):
        return "-"
    return ",".join(served(cfg)) or "orig"


def _optimum_text(row: Mapping[str, Any], opt: str | None, names: list[str], by_path: bool) -> str:
    """The winning configuration; with the frozen path measured, which path and setting won."""
    if not opt:
        return "-"
    cfgs = row["configs"]
    if path_of(cfgs[opt]) != PROCESS:
        ours = FROZEN in cfgs and canonical(cfgs, FROZEN) == opt
        return _threads(row, opt) + (" = ours" if ours else "")
    text = opt if opt in names or opt == OURS else _threads(row, opt)
    if OURS in cfgs and canonical(cfgs, OURS) == opt:
        text = "ours"
    elif TUNED in cfgs and canonical(cfgs, TUNED) == opt:
        text = "tuned"
    return f"pools {text}" if by_path else text


def _frozen_cells(row: Mapping[str, Any], summary: Mapping[str, Any]) -> list[str]:
    """frozen/opt, live/opt, live serves: ratios as ours/opt; n/a (or failed) where the row has no
    frozen path, the reason in the notes below the table."""
    fp = row.get("frozen_path") or {}
    if fp.get("status") != "ok":
        word = "failed" if fp.get("status") == "failed" else "n/a"
        return [word, word, ""]
    frozen = format_ratio(summary.get("frozen_vs_optimum")) if FROZEN in row["configs"] else "n/a"
    if LIVE not in row["configs"]:
        return [frozen, "n/a", ""]
    return [frozen, format_ratio(summary.get("live_vs_optimum")), _served(row, LIVE)]


@dataclass(frozen=True)
class RowCells:
    """What the cells of one row of the table are made from."""

    row: Mapping[str, Any]
    summary: Mapping[str, Any]  # the row's summary ({} when it has none)
    by_path: bool  # the document measured the frozen path: the optimum names the path it is on


def _blank(_: Mapping[str, Any]) -> str:
    return ""


def _geo(key: str) -> Callable[[Mapping[str, Any]], str]:
    """The geomean line's cell: the document's geometric mean ``key`` to two decimals."""
    return lambda geo: _two(geo.get(key))


def _two(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}"


@dataclass(frozen=True)
class Column:
    """One column of the table: its header, its cell in a row and in the geomean line, and
    whether it is shown by default (the others only with ``details``)."""

    name: str
    header: str
    cell: Callable[[RowCells], str]
    geomean: Callable[[Mapping[str, Any]], str] = _blank
    default: bool = True


def _ours_ms(c: RowCells) -> str:
    ours = c.summary.get("configs", {}).get(OURS)
    if ours:
        return f"{_ms(ours['median_s'])} ({_range(ours['spread_s'])})" if ours["median_s"] else ours["status"]
    return "plan failed" if c.row.get("plan", {}).get("status") not in (None, "ok", "pending") else "-"


def _vs_column(b: baselines.Baseline) -> Column:
    """Our speedup over baseline ``b``; '1.00 (same)' where our plan is the baseline's setting."""

    def cell(c: RowCells) -> str:
        cfgs = c.row["configs"]
        if b.name in cfgs and OURS in cfgs and canonical(cfgs, b.name) == canonical(cfgs, OURS):
            return "1.00 (same)"
        return format_ratio(c.summary.get("speedup", {}).get(b.name))

    return Column(b.name, f"vs {b.label}", cell, lambda geo: _two(geo.get("speedup", {}).get(b.name)))


def _part_column(
    name: str,
    cells: Callable[[Mapping[str, Any], Mapping[str, Any]], list[str]],
    i: int,
    geomean: Callable[[Mapping[str, Any]], str] = _blank,
) -> Column:
    """Column ``name``: cell ``i`` of ``cells(row, summary)``, a group of cells made together."""
    return Column(name, name, lambda c: cells(c.row, c.summary)[i], geomean)


def _tune_cost_share(geo: Mapping[str, Any]) -> str:
    share = geo.get("tune_cost_share")
    return "-" if share is None else f"{share:.0%} of sweep"


def _has_frozen(doc: Mapping[str, Any]) -> bool:
    return any(row.get("frozen_path") for row in doc["rows"])  # documents before issue 28 have none


def _has_tuned(doc: Mapping[str, Any]) -> bool:
    return any(row.get("tune") for row in doc["rows"])


def columns(doc: Mapping[str, Any], details: bool = False) -> list[Column]:
    """The table's columns for ``doc``: the frozen path's and the tuning's only where it has them."""
    names = [b.name for b in baselines.BASELINES]
    cols = [
        Column("workload", "workload", lambda c: c.row["workload"], lambda geo: "geomean"),
        Column("mode", "mode", lambda c: c.row["mode"]),
        Column("batch", "batch", lambda c: str(c.row["batch"])),
        Column("ours", "ours", lambda c: _threads(c.row, OURS) if OURS in c.row["configs"] else "-"),
        Column("ours_ms", "ours ms (min-max)", _ours_ms),
        *(_vs_column(b) for b in baselines.BASELINES),
        Column("optimum", "optimum", lambda c: _optimum_text(c.row, c.summary.get("optimum"), names, c.by_path)),
        Column(
            "ours/opt", "ours/opt", lambda c: format_ratio(c.summary.get("ours_vs_optimum")), _geo("ours_vs_optimum")
        ),
    ]
    if _has_frozen(doc):
        cols += [
            _part_column("frozen/opt", _frozen_cells, 0, _geo("frozen_vs_optimum")),
            _part_column("live/opt", _frozen_cells, 1, _geo("live_vs_optimum")),
            _part_column("live serves", _frozen_cells, 2),
        ]
    if _has_tuned(doc):
        cols += [
            _part_column("tuned", _tuned_cells, 0),
            _part_column("tuned/opt", _tuned_cells, 1, _geo("tuned_vs_optimum")),
            _part_column("tune cost", _tuned_cells, 2, _tune_cost_share),
        ]
    cols.append(Column("flag", "", lambda c: f"< {BELOW_OPTIMUM:.2f}" if c.summary.get("below_optimum") else ""))
    return [c for c in cols if c.default or details]


def format_table(doc: Mapping[str, Any], details: bool = False) -> str:
    """The human report: one line per row, geometric means, flagged rows and failures."""
    cols = columns(doc, details)
    by_path = _has_frozen(doc)
    lines = [[col.cell(RowCells(row, row.get("summary") or {}, by_path)) for col in cols] for row in doc["rows"]]
    geo = doc.get("geomean", {})
    lines.append([col.geomean(geo) for col in cols])
    out = _heading(doc) + table([col.header for col in cols], lines) + _legend(doc)
    out += _flagged(doc["rows"]) + _failures(doc["rows"]) + _throttling(doc)
    if details:
        out.append("")
        out += format_details(doc)
    return "\n".join(out)


def _heading(doc: Mapping[str, Any]) -> list[str]:
    opts = doc.get("options", {})
    out = [
        f"tf-autopar validate: {len(doc['rows'])} row(s), {opts.get('rounds')} rounds x {opts.get('steps')} steps "
        f"(warm-up {opts.get('warmup')}), fresh process per run"
        + (f", CPU quota {opts['cpu_quota']:g}" if opts.get("cpu_quota") else ""),
        f"search space: {doc['space']['description']}",
    ]
    if doc.get("interrupted"):
        out.append("INTERRUPTED: partial results below")
    return out


def _legend(doc: Mapping[str, Any]) -> list[str]:
    """What the columns mean (the frozen path's and the tuning's where the table has them)."""
    out = [
        "speedups = baseline time / our time (>1: ours faster), median of per-round paired ratios (min-max);"
        " ours/opt = optimum time / our time."
    ]
    if _has_frozen(doc):
        out.append(
            "optimum = the best of both paths: pools = the process pools (baselines, ours, the search space),"
            " frozen IxJ = the frozen graph in a session of its own with IxJ pools (every inter x intra of the space);"
        )
        out.append(
            "frozen/opt = that session at our plan's pools; live/opt = enable() fed calls until live tuning"
            " decided, then timed (live serves: the session it settled on, orig = TensorFlow's own path)."
        )
        out += _frozen_notes(doc["rows"])
    if _has_tuned(doc):
        out.append(
            "tuned = what `tf-autopar tune` chose, measured before the rounds (its runs are not reused);"
            " tune cost = its machine time (runs), and its share of the search space's runs in the rounds."
        )
    if any((r.get("summary") or {}).get("statistic") == "mean" for r in doc["rows"]):
        out.append(
            "step time = each run's MEAN step (under a CPU quota a median hides the throttled steps),"
            " median over rounds."
        )
    return out


def _flagged(rows: list[Mapping[str, Any]]) -> list[str]:
    """The rows below BELOW_OPTIMUM of the optimum, with the reasons."""
    flagged = [r for r in rows if r.get("summary", {}).get("below_optimum")]
    if not flagged:
        return []
    return [f"rows below {BELOW_OPTIMUM:.2f} of the optimum:"] + [
        f"  {r['workload']}/{r['mode']}: " + "; ".join(r["summary"]["reasons"]) for r in flagged
    ]


def _failures(rows: list[Mapping[str, Any]]) -> list[str]:
    """Failed plans and runs, each with the last line of its stderr."""
    failures = []
    for row in rows:
        if row.get("plan", {}).get("status") not in (None, "ok", "pending"):
            failures.append(
                f"  {row['workload']}/{row['mode']} plan: {row['plan']['status']}: "
                f"{row['plan'].get('error', '')} {_last_line(row['plan'].get('stderr_tail', ''))}"
            )
        for name, cfg in row["configs"].items():
            for run in cfg.get("runs", []):
                if run["status"] != "ok":
                    failures.append(
                        f"  {row['workload']}/{row['mode']} {name} round {run['round']}: {run['status']}"
                        f" ({run.get('error', '')}) {_last_line(run.get('stderr_tail', ''))}"
                    )
    return ["failed runs (recorded; the run went on):", *failures] if failures else []


def _throttling(doc: Mapping[str, Any]) -> list[str]:
    """Under a CPU quota: each row's configurations' share of throttled CFS periods."""
    quota = doc.get("options", {}).get("cpu_quota")
    if not quota:
        return []
    out = [
        f"throttled CFS periods under the {quota:g}-CPU quota (cpu.stat nr_throttled/nr_periods,"
        " whole process incl. start-up):"
    ]
    for row in doc["rows"]:
        parts = []
        for name, c in (row.get("summary") or {}).get("configs", {}).items():
            t = c.get("throttling")
            if t and not c.get("same_as") and t.get("throttled_fraction") is not None:
                parts.append(f"{name} {t['throttled_fraction']:.0%}")
        out.append(f"  {row['workload']}/{row['mode']}: " + (", ".join(parts) or "-"))
    return out


def _frozen_notes(rows: list[Mapping[str, Any]]) -> list[str]:
    """Why a row has no frozen path (or no live run), one line per reason naming its rows."""
    by_reason: dict[str, list[str]] = {}
    for row in rows:
        fp = row.get("frozen_path") or {}
        if fp.get("status") not in (None, "ok"):
            note = f"frozen path {fp['status']} ({fp.get('reason')})"
        elif fp.get("live_reason"):
            note = f"live {fp['live_reason']}"
        else:
            continue
        by_reason.setdefault(note, []).append(f"{row['workload']}/{row['mode']}")
    return [f"  {note}: {', '.join(keys)}" for note, keys in by_reason.items()]


def _tuned_cells(row: Mapping[str, Any], summary: Mapping[str, Any]) -> list[str]:
    cost = summary.get("tune_cost") or {}
    if not row.get("tune"):
        return ["-", "-", "-"]
    if cost.get("status") != "ok":
        return ["failed", "-", f"{cost.get('wall_s', 0):.0f} s ({cost.get('runs', 0)} runs)"]
    share = cost.get("share")
    text = f"{cost['wall_s']:.0f} s ({cost['runs']} runs" + ("" if share is None else f", {share:.0%} of sweep") + ")"
    return [_threads(row, TUNED), format_ratio(summary.get("tuned_vs_optimum")), text]


def format_details(doc: Mapping[str, Any]) -> list[str]:
    """Every configuration of every row: threads, status, median and range over rounds."""
    out = []
    for row in doc["rows"]:
        out.append(f"{row['workload']}/{row['mode']} batch {row['batch']} (order per round: {' '.join(row['order'])})")
        lines = []
        for name, c in (row.get("summary") or {}).get("configs", {}).items():
            sp = c["spread_s"]
            thr = c.get("throttling") or {}
            lines.append(
                [
                    name,
                    _threads(row, name),
                    c["status"],
                    f"{c['rounds_ok']}/{c['rounds']}",
                    _ms(c["median_s"]),
                    _range(sp),
                    f"same as {c['same_as']}" if c.get("same_as") else "",
                    "" if thr.get("throttled_fraction") is None else f"throttled {thr['throttled_fraction']:.0%}",
                ]
            )
        out += ["  " + l for l in table(["config", "threads", "status", "ok", "median ms", "range ms", "", ""], lines)]  # noqa: E741
    return out


def _last_line(text: str) -> str:
    lines = [l for l in (text or "").strip().splitlines() if l.strip()]  # noqa: E741
    return lines[-1][-160:] if lines else ""


def _json_default(obj: Any) -> Any:
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, (set, frozenset, tuple)):
        return list(obj)
    return str(obj)


def to_json(doc: Mapping[str, Any]) -> str:
    return json.dumps(doc, indent=1, default=_json_default, allow_nan=False)


def write_json(doc: Mapping[str, Any], path: str) -> None:
    """Atomically (write then rename): an interrupt mid-write never leaves a truncated file."""
    write_text_atomic(path, to_json(doc) + "\n")


def plot(doc: Mapping[str, Any], path: str) -> None:
    """Grouped bars per row: our speedup over each baseline and our share of the optimum."""
    plt = _plots.pyplot()
    rows = [r for r in doc["rows"] if (r.get("summary") or {}).get("ours")]
    series = [(f"over {b.label}", b.name, b.colour) for b in baselines.BASELINES]
    series.append(("ours / optimum", None, OPTIMUM_COLOUR))
    n = max(1, len(rows))
    fig, ax = plt.subplots(figsize=(max(7.0, 1.1 * n + 3.5), 4.2))
    width = 0.8 / len(series)
    for k, (label, base, colour) in enumerate(series):
        vals, lo, hi = [], [], []
        for r in rows:
            c = r["summary"]["ours_vs_optimum"] if base is None else r["summary"]["speedup"].get(base)
            v = (c or {}).get("value")
            p = (c or {}).get("paired") or {}
            vals.append(v if v is not None else 0.0)
            lo.append(max(0.0, (v or 0) - p["q25"]) if v is not None and p.get("q25") is not None else 0.0)
            hi.append(max(0.0, p["q75"] - (v or 0)) if v is not None and p.get("q75") is not None else 0.0)
        xs = [i + (k - (len(series) - 1) / 2) * width for i in range(len(rows))]
        ax.bar(xs, vals, width, label=label, color=colour, yerr=[lo, hi], capsize=2)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.axhline(BELOW_OPTIMUM, color=OPTIMUM_COLOUR, linewidth=0.6, linestyle="--")
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels([f"{r['workload']}\n{r['mode']} b{r['batch']}" for r in rows], fontsize=8)
    ax.set_ylabel("speedup of tf_autopar (x); share of optimum")
    fig.text(
        0.01,
        0.01,
        "bars: median of per-round paired ratios; whiskers: their interquartile range",
        fontsize=7,
        color="#555555",
    )
    geo = doc.get("geomean", {})
    parts = [
        f"vs {b.label} {geo['speedup'][b.name]:.2f}" for b in baselines.BASELINES if geo.get("speedup", {}).get(b.name)
    ]
    if geo.get("ours_vs_optimum"):
        parts.append(f"of optimum {geo['ours_vs_optimum']:.2f}")
    quota = doc.get("options", {}).get("cpu_quota")
    ax.set_title(
        "tf_autopar vs baselines"
        + (f" (CPU quota {quota:g})" if quota else "")
        + ("\ngeomean " + ", ".join(parts) if parts else ""),
        fontsize=10,
    )
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)

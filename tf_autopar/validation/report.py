"""Rendering a validation document: the text table, its markdown report and the JSON file (the
chart: chart.py)."""

from __future__ import annotations

import json
import math
import textwrap
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from tf_autopar._files import write_text_atomic
from tf_autopar._text import table
from tf_autopar.measure.stats import BELOW_OPTIMUM, format_ratio
from tf_autopar.planning import baselines
from tf_autopar.validation.results import FROZEN, LIVE, OURS, PROCESS, TUNED, canonical, path_of, served


DEFAULT_WIDTH = 100  # the default view's lines: an 80-100 character terminal


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
    """One column of the table: its header, its cell in a row and in the geomean line."""

    name: str
    header: str
    cell: Callable[[RowCells], str]
    geomean: Callable[[Mapping[str, Any]], str] = _blank


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


def _row_name(c: RowCells) -> str:
    """'inception_v3 infer b16': a model file by its last path component."""
    name = c.row["workload"].rstrip("/").rsplit("/", 1)[-1] or c.row["workload"]
    return f"{name} {c.row['mode']} b{c.row['batch']}"


def delivers_text(row: Mapping[str, Any], summary: Mapping[str, Any]) -> str:
    """What the one line delivers on this row: 'enable(): tensorflow 1x1' (the engine and the
    session live tuning settled on, as the live runs recorded them; 'enable(): TF's own path' when
    it stayed there), 'plan: pools 1x2', or why there is nothing."""
    d = summary.get("delivers")
    if not d:
        return "plan failed" if row.get("plan", {}).get("status") not in (None, "ok", "pending") else "-"
    cfg = (summary.get("configs") or {}).get(d["config"]) or {}
    if d["path"] == LIVE:
        if not cfg.get("rounds_ok"):
            return "enable(): " + (cfg.get("status") or "failed")
        if not d.get("served"):
            return "enable(): TF's own path"
        return "enable(): " + " ".join([*d.get("engines", []), ",".join(d["served"])])
    if not cfg.get("rounds_ok"):
        return "plan: " + (cfg.get("status") or "failed")
    return "plan: pools " + _threads(row, d["config"]).replace(" bound", "")


def _delivers_ms(c: RowCells) -> str:
    d = c.summary.get("delivers") or {}
    cfg = (c.summary.get("configs") or {}).get(d.get("config") or "") or {}
    return _ms(cfg.get("median_s"))


def _x(c: Mapping[str, Any] | None, suffix: str = "") -> str:
    return "-" if not c or c.get("value") is None else f"{c['value']:.2f}{suffix}"


def optimum_text(row: Mapping[str, Any], summary: Mapping[str, Any], by_path: bool = True) -> str:
    """The optimum's setting and path: 'frozen 2x2', 'live 1x1', 'pools 2x1' ('2x1' in a document
    without the frozen path), or a baseline's name."""
    opt = summary.get("optimum")
    if not opt:
        return "-"
    if row["configs"][opt].get("kind") == "baseline":
        return opt  # 'tf-default' (not 0x0): a baseline is the process pools' by name
    text = _threads(row, opt)
    return ("pools " + text) if path_of(row["configs"][opt]) == PROCESS and by_path else text


def _optimum_short(c: RowCells) -> str:
    return optimum_text(c.row, c.summary, c.by_path)


def headline_columns(doc: Mapping[str, Any]) -> list[Column]:
    """The default view: what the one line delivers per row, against TensorFlow's default and the
    optimum (six columns, for an 80-100 character terminal)."""
    cols = [
        Column("row", "row", _row_name, lambda geo: "geomean"),
        Column("delivers", "the one line delivers", lambda c: delivers_text(c.row, c.summary)),
        Column("delivers_ms", "ms", _delivers_ms),
        Column(
            "delivers_vs_default",
            "vs default",
            lambda c: _x(c.summary.get("delivers_vs_default"), "x"),
            lambda geo: _x({"value": geo.get("delivers_vs_default")}, "x"),
        ),
        Column(
            "delivers_vs_optimum",
            "of optimum",
            lambda c: _x(c.summary.get("delivers_vs_optimum")),
            _geo("delivers_vs_optimum"),
        ),
        Column("optimum_short", "optimum", _optimum_short),
    ]
    return cols  # the rows below the optimum are listed under the table (_delivers_below); --tuned's: --details


def _delivers_detail_columns() -> list[Column]:
    """The headline's numbers with their per-round ranges, in the details table."""
    return [
        Column("delivers", "delivers", lambda c: delivers_text(c.row, c.summary)),
        Column("delivers_ms", "delivers ms", _delivers_ms),
        Column(
            "delivers_vs_default",
            "delivers vs default",
            lambda c: format_ratio(c.summary.get("delivers_vs_default")),
            _geo("delivers_vs_default"),
        ),
        Column(
            "delivers/opt",
            "delivers/opt",
            lambda c: format_ratio(c.summary.get("delivers_vs_optimum")),
            _geo("delivers_vs_optimum"),
        ),
    ]


def columns(doc: Mapping[str, Any], details: bool = False) -> list[Column]:
    """The table's columns for ``doc``: the headline (what the one line delivers) by default;
    with ``details`` every column: the baselines, our plan's process pools, the frozen path's
    and the tuning's (only where it has them), and the headline's with their ranges."""
    if not details:
        return headline_columns(doc)
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
    cols += _delivers_detail_columns()
    cols.append(Column("flag", "", lambda c: f"< {BELOW_OPTIMUM:.2f}" if c.summary.get("below_optimum") else ""))
    return cols


def format_table(doc: Mapping[str, Any], details: bool = False) -> str:
    """The human report: one line per row, geometric means, flagged rows and failures."""
    cols = columns(doc, details)
    by_path = _has_frozen(doc)
    lines = [[col.cell(RowCells(row, row.get("summary") or {}, by_path)) for col in cols] for row in doc["rows"]]
    geo = doc.get("geomean", {})
    lines.append([col.geomean(geo) for col in cols])
    if not details:
        notes = _headline_legend(doc) + _delivers_below(doc["rows"]) + _failures_count(doc["rows"])
        out = _wrap(_heading(doc)) + table([col.header for col in cols], lines) + _wrap(notes)
        return "\n".join(out)
    out = _heading(doc) + table([col.header for col in cols], lines)
    out += _legend(doc) + _flagged(doc["rows"]) + _failures(doc["rows"]) + _throttling(doc)
    out.append("")
    out += format_details(doc)
    return "\n".join(out)


def _wrap(lines: list[str], width: int = DEFAULT_WIDTH) -> list[str]:
    """Each line cut at spaces to ``width`` characters, its continuations indented four more."""
    out = []
    for line in lines:
        indent = " " * (len(line) - len(line.lstrip(" ")) + 4)
        out += textwrap.wrap(line, width, subsequent_indent=indent, break_on_hyphens=False) or [""]
    return out


def _headline_legend(doc: Mapping[str, Any]) -> list[str]:
    """What the default view's columns mean, in lines under 100 characters."""
    out = [
        "the one line delivers: enable() after live tuning (its engine and session pools) on inference",
        "rows, the plan's process pools on training rows; ms: its median call or step.",
        "vs default = TF's default time / its time (>1: faster); of optimum = optimum time / its time,",
        "the optimum being the best of every configuration measured in the row, on every path.",
        "--details: every configuration, the baselines, our plan's pools and each path, with ranges.",
    ]
    if _has_tuned(doc):
        out.append(
            f"tuned (what `tf-autopar tune` chose) reached {_two(doc.get('geomean', {}).get('tuned_vs_optimum'))}"
            " of the optimum (geomean); its columns: --details."
        )
    if any((r.get("summary") or {}).get("statistic") == "mean" for r in doc["rows"]):
        out.append("step time = each run's MEAN step (under a CPU quota), median over rounds.")
    return out


def _delivers_below(rows: list[Mapping[str, Any]]) -> list[str]:
    """Rows where what the one line delivers is below BELOW_OPTIMUM of the optimum, and what won."""
    out = []
    for r in rows:
        s = r.get("summary") or {}
        v = (s.get("delivers_vs_optimum") or {}).get("value")
        if v is None or v >= BELOW_OPTIMUM:
            continue
        opt = s.get("optimum")
        won = f"the optimum is {optimum_text(r, s)}" if opt else ""
        why = "; ".join(s.get("reasons") or []) if (s.get("delivers") or {}).get("config") == OURS else ""
        out.append(f"  {_row_name(RowCells(r, s, True))}: {v:.2f}; {won}" + (f": {why}" if why else ""))
    return [f"rows below {BELOW_OPTIMUM:.2f} of the optimum:", *out] if out else []


def _failures_count(rows: list[Mapping[str, Any]]) -> list[str]:
    """One line counting the failed runs (each is listed with --details)."""
    n = sum(
        1 for row in rows for cfg in row["configs"].values() for run in cfg.get("runs", []) if run["status"] != "ok"
    )
    plans = sum(1 for row in rows if row.get("plan", {}).get("status") not in (None, "ok", "pending"))
    if not n and not plans:
        return []
    return [f"{n} failed run(s), {plans} failed plan(s), recorded (the run went on): --details lists them"]


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


def _md_table(header: list[str], rows: list[list[str]]) -> list[str]:
    def line(cells: list[str]) -> str:
        return "| " + " | ".join(c.replace("|", "/") for c in cells) + " |"

    return [line(header), line(["---"] * len(header)), *(line(r) for r in rows)]


def _md_columns(doc: Mapping[str, Any], cols: list[Column]) -> list[str]:
    by_path = _has_frozen(doc)
    lines = [[col.cell(RowCells(row, row.get("summary") or {}, by_path)) for col in cols] for row in doc["rows"]]
    lines.append([col.geomean(doc.get("geomean", {})) for col in cols])
    return _md_table([col.header or "flag" for col in cols], lines)


def format_markdown(doc: Mapping[str, Any], chart: str | None = None) -> str:
    """The report as markdown: the headline table, every column, every configuration of every row,
    the notes; ``chart``: the chart's file name, shown at the top."""
    opts = doc.get("options", {})
    out = [
        "# tf-autopar validate",
        "",
        f"{doc.get('processor', 'unknown processor')}, {doc.get('host', {}).get('logical_cpus', '?')} logical CPUs;"
        f" started {doc.get('started')}, finished {doc.get('finished')};"
        f" {opts.get('rounds')} rounds x {opts.get('steps')} steps (warm-up {opts.get('warmup')}), fresh process"
        " per run (an inference row's frozen sessions inside its live run: the JSON's `swept_in`).",
        "",
        f"Search space: {doc['space']['description']}.",
        "",
    ]
    if doc.get("interrupted"):
        out += ["**Interrupted: partial results.**", ""]
    if chart:
        out += [f"![speed relative to TensorFlow's default]({chart})", ""]
    out += ["## What the one line delivers", "", *_md_columns(doc, headline_columns(doc)), ""]
    out += _headline_legend(doc) + [""] + _delivers_below(doc["rows"])
    out += ["", "## Every column", "", *_md_columns(doc, columns(doc, details=True)), ""]
    out += _legend(doc) + [""] + _flagged(doc["rows"]) + _failures(doc["rows"]) + _throttling(doc)
    out += ["", "## Every configuration", ""]
    for row in doc["rows"]:
        out += [f"### {row['workload']}/{row['mode']} batch {row['batch']}", ""]
        lines = []
        for name, c in (row.get("summary") or {}).get("configs", {}).items():
            lines.append(
                [
                    name,
                    _threads(row, name),
                    c["status"],
                    f"{c['rounds_ok']}/{c['rounds']}",
                    _ms(c["median_s"]),
                    _range(c["spread_s"]),
                    f"same as {c['same_as']}" if c.get("same_as") else "",
                ]
            )
        out += _md_table(["config", "threads", "status", "ok", "median ms", "range ms", ""], lines) + [""]
    return "\n".join(out) + "\n"


def write_markdown(doc: Mapping[str, Any], path: str, chart: str | None = None) -> None:
    write_text_atomic(path, format_markdown(doc, chart))

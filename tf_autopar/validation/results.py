"""The validation document: per-row summaries, geometric means and a schema check.

Pure functions over the JSON-ready document the harness builds, so a saved run can be
re-summarised (or checked by automation) without re-running anything.

Document (``SCHEMA_VERSION`` 1)::

  {"schema": 1, "tool": "tf-autopar validate", "host": Topology.to_dict(), "started": ISO time,
   "finished": ISO time | null, "interrupted": bool, "args": {...}, "space": SearchSpace.to_dict(),
   "scrubbed_env": [names removed from the children's environment],
   "rows": [{"workload", "mode" (infer1|infer|train), "batch", "size", "plan": {...} ,
             "order": [config names run each round, in order],
             "configs": {name: {"kind", "inter", "intra", "omp", "env", "cpus", "same_as",
                                ["runner_args"],
                                "runs": [{"round", "seq", "status" (ok|crash|timeout), "median_s",
                                          "step_times_s", "wall_s", "returncode", "error",
                                          "stderr_tail", "cpu_stat", ...}]}},
             ["frozen_path": {"status" (ok|n/a|failed), "reason", ...}],
             "summary": {...}}],
   "geomean": {...}}

The frozen path (inference rows, since issue 28; absent from older documents and with
``--no-frozen``): configurations of kind ``frozen`` (``frozen`` at our plan's pools,
``frozen:INTERxINTRA`` over the space) and ``live`` (whose runs record the ``served`` sessions).
The optimum is the best configuration of every path; ``optimum_path`` says which won.

What the one line delivers (``summary["delivers"]``, the table's headline since issue 47): on an
inference row with a ``live`` configuration, ``enable()`` after live tuning (the sessions and the
engine it served, read from its runs); elsewhere our plan. ``delivers_vs_default`` and
``delivers_vs_optimum`` compare it with TensorFlow's default and with the optimum, and
``vs_default`` sets every baseline, the delivered configuration and the optimum against the default
(the chart's bars). The optimum is the best of every configuration measured in the row, whatever
its path: a path added later (another engine) counts without a change here.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from tf_autopar.measure import stats
from tf_autopar.models.bench import FROZEN, LIVE
from tf_autopar.models.child import frozen_pools
from tf_autopar.planning import baselines

SCHEMA_VERSION = 1
OURS = "tf_autopar"
TUNED = "tuned"  # validate --tuned: what `tf-autopar tune` chose for the row
STATUSES = ("ok", "crash", "timeout")
ROW_MODES = ("infer1", "infer", "train")
PROCESS = "process"  # the process pools' path: baselines, ours, tuned, the search space
PROCESS_KINDS = ("baseline", "plan", "tuned", "search")
PATHS = (PROCESS, FROZEN, LIVE)  # the paths measured today, in the report's order (any other kind is a path too)
DEFAULT = baselines.BASELINES[0].name  # TensorFlow's default (the first record): every "vs default" is against it
FROZEN_STATUSES = ("ok", "n/a", "failed")


def canonical(configs: Mapping[str, Any], name: str) -> str:
    """The config whose runs ``name`` shares ("same as")."""
    seen = set()
    while configs[name].get("same_as") and name not in seen:
        seen.add(name)
        name = configs[name]["same_as"]
    return name


STATISTICS = ("median", "mean")


def statistic_for(cpu_quota: float | None) -> str:
    """Which step time ranks configurations. Under a CPU quota it is the mean: a run with more
    threads than the quota bursts on several CPUs, then sits throttled, and the throttled steps
    are too few per run to move its median (SqueezeNet under a 1-CPU quota: 1x2 median 7.05 ms
    but mean 9.57 ms, against 9.18 / 9.19 for a bound 1x1). The mean is the sustained rate."""
    return "mean" if cpu_quota else "median"


def round_times(config: Mapping[str, Any], statistic: str = "median") -> dict[int, float]:
    """round -> that round's run's median (or mean) step time, for runs that finished cleanly."""
    if statistic not in STATISTICS:
        raise ValueError(f"statistic must be one of {STATISTICS}, got {statistic!r}")
    out = {}
    for run in config.get("runs", []):
        if run.get("status") != "ok":
            continue
        times = run.get("step_times_s") or []
        if statistic == "mean" and times:
            out[int(run["round"])] = sum(times) / len(times)
        elif statistic == "median" and run.get("median_s") is not None:
            out[int(run["round"])] = float(run["median_s"])
    return out


def effective_threads(config: Mapping[str, Any], logical_cpus: int) -> tuple[int, int]:
    width = len(config.get("cpus") or ()) or logical_cpus
    return (int(config.get("inter") or 0) or width, int(config.get("intra") or 0) or width)


def path_of(config: Mapping[str, Any]) -> str:
    """Which path a configuration measures: PROCESS (the process pools), FROZEN (a frozen session),
    LIVE, or the kind of a configuration of any other path."""
    kind = config.get("kind")
    return PROCESS if kind in PROCESS_KINDS or not kind else str(kind)


def delivered(configs: Mapping[str, Any]) -> str | None:
    """The configuration that measures what the one line delivers: ``live`` (enable() after live
    tuning) where the row has it, else our plan; None when the row has neither."""
    for name in (LIVE, OURS):
        if name in configs:
            return name
    return None


def engines(config: Mapping[str, Any]) -> list[str]:
    """The engines (their runners' ``describe()["engine"]``) a live configuration's clean runs
    served at their end, as the runs recorded them ([]: none recorded, or TensorFlow's own path)."""
    return sorted({e for r in config.get("runs", []) if r.get("status") == "ok" for e in r.get("engines") or []})


def served(config: Mapping[str, Any]) -> list[str]:
    """The frozen sessions (INTERxINTRA) a live configuration's clean runs served at their end:
    what live tuning settled on ([]: it stayed on TensorFlow's own path)."""
    return sorted({s for r in config.get("runs", []) if r.get("status") == "ok" for s in r.get("served") or []})


def config_threads(configs: Mapping[str, Any], name: str, logical_cpus: int) -> tuple[int, int]:
    """Effective (inter, intra) of ``name``; a live configuration's are the one session it served."""
    cfg = configs[name]
    if path_of(cfg) == LIVE:
        sessions = served(configs[canonical(configs, name)])
        if len(sessions) == 1:
            return frozen_pools(sessions[0])
    return effective_threads(cfg, logical_cpus)


def path_label(configs: Mapping[str, Any], name: str, logical_cpus: int) -> str:
    """'session 1x2' or 'live tuning, serving 1x1' (the optimum's path, for the reasons)."""
    if path_of(configs[name]) == LIVE:
        return "live tuning, serving " + (", ".join(served(configs[name])) or "TensorFlow's own path")
    inter, intra = config_threads(configs, name, logical_cpus)
    return f"session {inter}x{intra}"


def _config_status(runs: list[Mapping[str, Any]]) -> str:
    statuses = {r.get("status") for r in runs}
    if not runs:
        return "not-run"
    if statuses == {"ok"}:
        return "ok"
    if "ok" in statuses:
        return "partial"
    return "timeout" if statuses == {"timeout"} else "crash" if statuses == {"crash"} else "failed"


def _throttling(runs: list[Mapping[str, Any]]) -> dict[str, Any] | None:
    stats_ = [r["cpu_stat"] for r in runs if r.get("cpu_stat")]
    if not stats_:
        return None
    periods = sum(int(s.get("nr_periods", 0)) for s in stats_)
    throttled = sum(int(s.get("nr_throttled", 0)) for s in stats_)
    return {
        "nr_periods": periods,
        "nr_throttled": throttled,
        "throttled_us": sum(float(s.get("throttled_us", 0.0)) for s in stats_),
        "throttled_fraction": throttled / periods if periods else None,
    }


def summarize_row(row: Mapping[str, Any], logical_cpus: int, statistic: str = "median") -> dict[str, Any]:
    """Medians over rounds and spreads per config, our speedups over each baseline, our share of
    the optimum. ``statistic``: each run's median step time, or its mean (see statistic_for)."""
    configs = row["configs"]
    per_config: dict[str, Any] = {}
    medians: dict[str, dict[int, float]] = {}
    for name, cfg in configs.items():
        canon = canonical(configs, name)
        runs = configs[canon].get("runs", [])
        rm = round_times(configs[canon], statistic)
        medians[name] = rm
        spread = stats.Spread.of(list(rm.values()))
        per_config[name] = {
            "same_as": cfg.get("same_as"),
            "status": _config_status(runs),
            "rounds": len(runs),
            "rounds_ok": spread.n,
            "median_s": spread.to_dict()["median"],
            "spread_s": spread.to_dict(),
            "threads": list(config_threads(configs, name, logical_cpus)),
            "throttling": _throttling(runs),
            "path": path_of(cfg),
        }
        if path_of(cfg) == LIVE:
            per_config[name]["served"] = served(configs[canon])
    canon_medians = {n: stats.median(medians[n].values()) for n in configs if not configs[n].get("same_as")}
    optimum = stats.best(canon_medians)  # the best of every configuration of every path measured
    paths = list(dict.fromkeys([*(p for p in PATHS), *(path_of(configs[n]) for n in canon_medians)]))
    summary: dict[str, Any] = {
        "configs": per_config,
        "statistic": statistic,
        "optimum": optimum,
        "optimum_path": None if optimum is None else path_of(configs[optimum]),
        "best_by_path": {
            p: stats.best({n: m for n, m in canon_medians.items() if path_of(configs[n]) == p})
            for p in paths
            if any(path_of(configs[n]) == p for n in canon_medians)
        },
        "ours": None,
        "speedup": {},
        "ours_vs_optimum": None,
        "below_optimum": False,
        "reasons": [],
    }
    if row.get("frozen_path"):
        summary["frozen_path"] = {k: row["frozen_path"].get(k) for k in ("status", "reason", "live_reason")}
    summary.update(_delivers(configs, medians, optimum))
    if optimum is not None:
        summary["optimum_aliases"] = sorted(n for n in configs if canonical(configs, n) == optimum)
        for key, name in (("frozen_vs_optimum", FROZEN), ("live_vs_optimum", LIVE)):
            if name in configs and medians.get(name):
                summary[key] = stats.Comparison.of(medians[optimum], medians[name]).to_dict()
    if OURS not in configs or not medians.get(OURS):
        summary["reasons"] = ["our plan did not run cleanly" if OURS in configs else "our plan is unavailable"]
        return summary
    summary["ours"] = OURS
    ours = medians[OURS]
    for base in baselines.names():
        if base in configs and medians.get(base):
            summary["speedup"][base] = stats.Comparison.of(medians[base], ours).to_dict()
    if optimum is not None:
        frac = stats.Comparison.of(medians[optimum], ours)
        summary["ours_vs_optimum"] = frac.to_dict()
        reasons = stats.below_optimum_reasons(
            frac,
            effective_threads(configs[OURS], logical_cpus),
            config_threads(configs, optimum, logical_cpus),
        )
        if reasons and summary["optimum_path"] != PROCESS:  # the path is the difference, not other settings
            reasons = [
                f"the optimum is on the {summary['optimum_path']} path ({path_label(configs, optimum, logical_cpus)}):"
                " no process-pool setting reaches it",
                *(r for r in reasons if r != stats.SAME_THREADS),
            ]
        summary["below_optimum"] = bool(reasons)
        summary["reasons"] = reasons
        if medians.get(TUNED):
            summary["tuned_vs_optimum"] = stats.Comparison.of(medians[optimum], medians[TUNED]).to_dict()
    if row.get("tune"):
        summary["tune_cost"] = tune_cost(row)
    return summary


def _delivers(
    configs: Mapping[str, Any], medians: Mapping[str, Mapping[int, float]], optimum: str | None
) -> dict[str, Any]:
    """The summary's headline: what the one line delivers, against TensorFlow's default and the
    optimum, and every baseline, it and the optimum against the default (the chart)."""
    name = delivered(configs)
    out: dict[str, Any] = {"delivers": None, "delivers_vs_default": None, "delivers_vs_optimum": None}
    if name is None:
        return out
    canon = configs[canonical(configs, name)]
    out["delivers"] = {
        "config": name,
        "path": path_of(configs[name]),
        "served": served(canon) if path_of(configs[name]) == LIVE else [],
        "engines": engines(canon),
    }
    got = medians.get(name)
    default = medians.get(DEFAULT)
    if got and default:
        out["delivers_vs_default"] = stats.Comparison.of(default, got).to_dict()
    if got and optimum is not None and medians.get(optimum):
        out["delivers_vs_optimum"] = stats.Comparison.of(medians[optimum], got).to_dict()
    if default:
        pairs = [*((b, b) for b in baselines.names()), ("delivers", name), ("optimum", optimum)]
        out["vs_default"] = {
            key: stats.Comparison.of(default, medians[n]).to_dict() for key, n in pairs if n and medians.get(n)
        }
    return out


def tune_cost(row: Mapping[str, Any]) -> dict[str, Any]:
    """The tuning's machine time against the exhaustive sweep's in the same row: the wall time
    of every run of the search-space configurations (each distinct process counted once)."""
    configs = row["configs"]
    swept = {canonical(configs, n) for n, c in configs.items() if c.get("kind") == "search"}
    sweep_runs = [r for n in swept for r in configs[n].get("runs", [])]
    sweep_s = sum(float(r.get("wall_s") or 0.0) for r in sweep_runs)
    tune = row.get("tune") or {}
    tune_s = float(tune.get("wall_s") or 0.0)
    return {
        "wall_s": tune_s,
        "runs": len(tune.get("runs") or []),
        "sweep_wall_s": round(sweep_s, 3),
        "sweep_runs": len(sweep_runs),
        "share": tune_s / sweep_s if sweep_s else None,
        "status": tune.get("status"),
        "chosen": tune.get("tuned"),
        "error": tune.get("error"),
    }


def geomeans(rows: list[Mapping[str, Any]]) -> dict[str, Any]:
    """Geometric means over rows of the headline speedups and of our share of the optimum."""
    out: dict[str, Any] = {"speedup": {}, "rows": 0, "below_optimum": []}
    for base in baselines.names():
        vals = [
            r["summary"]["speedup"][base]["value"]
            for r in rows
            if r.get("summary") and base in r["summary"].get("speedup", {})
        ]
        out["speedup"][base] = _none_nan(stats.geomean(v for v in vals if v is not None))
    fracs = [
        r["summary"]["ours_vs_optimum"]["value"]
        for r in rows
        if r.get("summary") and r["summary"].get("ours_vs_optimum")
    ]
    out["ours_vs_optimum"] = _none_nan(stats.geomean(v for v in fracs if v is not None))
    out["rows"] = len([f for f in fracs if f is not None])
    tuned = [
        r["summary"]["tuned_vs_optimum"]["value"]
        for r in rows
        if r.get("summary") and r["summary"].get("tuned_vs_optimum")
    ]
    if tuned:
        out["tuned_vs_optimum"] = _none_nan(stats.geomean(v for v in tuned if v is not None))
        costs = [r["summary"]["tune_cost"] for r in rows if r.get("summary", {}).get("tune_cost")]
        sweep_s = sum(c["sweep_wall_s"] for c in costs)
        out["tune_cost_share"] = sum(c["wall_s"] for c in costs) / sweep_s if sweep_s else None
    for key in ("delivers_vs_default", "delivers_vs_optimum"):
        vals = [r["summary"][key]["value"] for r in rows if (r.get("summary") or {}).get(key)]
        out[key] = _none_nan(stats.geomean(v for v in vals if v is not None)) if vals else None
    for key in ("frozen_vs_optimum", "live_vs_optimum"):
        vals = [r["summary"][key]["value"] for r in rows if (r.get("summary") or {}).get(key)]
        if vals:
            out[key] = _none_nan(stats.geomean(v for v in vals if v is not None))
    out["below_optimum"] = [f"{r['workload']}/{r['mode']}" for r in rows if r.get("summary", {}).get("below_optimum")]
    return out


def _none_nan(x: float) -> float | None:
    return None if not math.isfinite(x) else x


# ------------------------------------------------------------------ schema check


def _need(obj: Mapping[str, Any], key: str, types: type | tuple, where: str) -> Any:
    if key not in obj:
        raise ValueError(f"{where}: missing key {key!r}")
    value = obj[key]
    if not isinstance(value, types):
        raise ValueError(f"{where}.{key}: expected {types}, got {type(value).__name__}")
    return value


def validate_document(doc: Mapping[str, Any]) -> None:
    """Raise ValueError naming the first place ``doc`` departs from the schema above."""
    if _need(doc, "schema", int, "doc") != SCHEMA_VERSION:
        raise ValueError(f"doc.schema: expected {SCHEMA_VERSION}, got {doc['schema']}")
    _need(doc, "host", dict, "doc")
    _need(doc, "started", str, "doc")
    _need(doc, "interrupted", bool, "doc")
    _need(doc, "args", dict, "doc")
    space = _need(doc, "space", dict, "doc")
    for key in ("kind", "searched", "full_size", "description"):
        _need(space, key, (str, int), "doc.space")
    rows = _need(doc, "rows", list, "doc")
    for i, row in enumerate(rows):
        where = f"doc.rows[{i}]"
        _need(row, "workload", str, where)
        if _need(row, "mode", str, where) not in ROW_MODES:
            raise ValueError(f"{where}.mode: {row['mode']!r} not in {ROW_MODES}")
        _need(row, "batch", int, where)
        _need(row, "size", str, where)
        _need(row, "plan", dict, where)
        if "frozen_path" in row:
            status = _need(_need(row, "frozen_path", dict, where), "status", str, where + ".frozen_path")
            if status not in FROZEN_STATUSES:
                raise ValueError(f"{where}.frozen_path.status: {status!r} not in {FROZEN_STATUSES}")
        order = _need(row, "order", list, where)
        configs = _need(row, "configs", dict, where)
        for name in order:
            if name not in configs:
                raise ValueError(f"{where}.order: {name!r} is not a config")
        for name, cfg in configs.items():
            cw = f"{where}.configs[{name!r}]"
            for key in ("inter", "intra"):
                _need(cfg, key, int, cw)
            _need(cfg, "env", dict, cw)
            if "runner_args" in cfg:
                _need(cfg, "runner_args", list, cw)
            same_as = cfg.get("same_as")
            if same_as is not None and same_as not in configs:
                raise ValueError(f"{cw}.same_as: {same_as!r} is not a config")
            runs = _need(cfg, "runs", list, cw)
            if same_as is not None and runs:
                raise ValueError(f"{cw}: an alias must not hold runs of its own")
            for j, run in enumerate(runs):
                rw = f"{cw}.runs[{j}]"
                _need(run, "round", int, rw)
                _need(run, "seq", int, rw)
                status = _need(run, "status", str, rw)
                if status not in STATUSES:
                    raise ValueError(f"{rw}.status: {status!r} not in {STATUSES}")
                times = _need(run, "step_times_s", list, rw)
                if status == "ok":
                    if not times or not all(isinstance(t, (int, float)) and t > 0 for t in times):
                        raise ValueError(f"{rw}.step_times_s: an ok run needs positive step times")
                    _need(run, "median_s", (int, float), rw)
                _need(run, "stderr_tail", str, rw)
                if "cpu_stat" in run and run["cpu_stat"] is not None:
                    for key in ("nr_periods", "nr_throttled"):
                        _need(run["cpu_stat"], key, int, rw + ".cpu_stat")
        if "summary" in row:
            summary = _need(row, "summary", dict, where)
            _need(summary, "configs", dict, where + ".summary")
            _need(summary, "speedup", dict, where + ".summary")
            _need(summary, "below_optimum", bool, where + ".summary")
            _need(summary, "reasons", list, where + ".summary")
    geo = _need(doc, "geomean", dict, "doc")
    _need(geo, "speedup", dict, "doc.geomean")
    _need(geo, "below_optimum", list, "doc.geomean")

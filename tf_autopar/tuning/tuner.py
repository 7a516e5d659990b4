"""``tune``: measure the plan's neighbourhood on this host, keep the winner for the next start.

Each candidate runs in a fresh process (TensorFlow fixes its pools at start) through the
bench machinery (models/bench.py: the same child, synthesised inputs, interleaved rounds);
the search (search.py) decides which to run and when to stop. The result goes into the plan
cache under the model's graph fingerprint, this host's key (topology and processor), the
mode and the batch, so enable() (at the model's load), ``plan`` and ``run --model`` use it; a host
whose key differs ignores it. This process never imports TensorFlow.
"""
from __future__ import annotations

import datetime as _dt
import logging
import math
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from tf_autopar.models.bench import Bench, BenchConfig, BenchOptions
from tf_autopar.models.options import ModelOptions
from tf_autopar.tuning.search import Candidate, SearchResult, neighbourhood, search

log = logging.getLogger("tf_autopar.tuning")

DEFAULT_BUDGET_S = 120.0
DEFAULT_REQUESTS = 20
MIN_REQUESTS = 5


@dataclass(frozen=True)
class TuneOutcome:
    model: str
    mode: str
    batch: int
    rule: Candidate
    result: SearchResult
    entry: dict[str, Any]  # what was stored in the plan cache (empty when not stored)
    seconds: float
    host: dict[str, Any]

    @property
    def best(self) -> Candidate:
        return self.result.best

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "mode": self.mode, "batch": self.batch, "rule": self.rule.label,
                "tuned": self.best.label, "search": self.result.to_dict(), "stored": self.entry,
                "seconds": round(self.seconds, 1), "host": self.host}

    def text(self) -> str:
        r = self.result
        lines = [f"tuned {self.model} ({self.mode}, batch {self.batch}) on {self.host.get('cpu_model', '?')}: "
                 f"{r.runs} runs in {r.rounds} rounds, {self.seconds:.0f} s; {r.stopped}"]
        for c in sorted(r.times, key=r.median):
            tag = " <- rule's plan" if c == self.rule else ""
            tag += " <- chosen" if c == self.best else ""
            lines.append(f"  {c.label:>7}  {r.median(c) * 1e3:9.2f} ms  ({len(r.times[c])} rounds){tag}")
        if self.best == self.rule:
            lines.append(f"kept the rule's plan {self.rule.label}: no neighbour was faster beyond the noise")
        else:
            lines.append(f"chosen {self.best.label}: {r.speedup():.2f}x over the rule's plan {self.rule.label} "
                         "(median of per-round ratios)")
        if self.entry:
            lines.append("stored in the plan cache: enable(), `plan` and `run --model` use it on this host")
        return "\n".join(lines)


def tune(model: str, *, mode: str = "latency", batch: int = 1, budget_s: float = DEFAULT_BUDGET_S,
         requests: int = DEFAULT_REQUESTS, warmup: int = 3, size: str = "tiny",
         model_options: ModelOptions | None = None, store: bool = True,
         progress: Callable[[str], None] | None = None) -> TuneOutcome:
    """Measure the plan and its neighbours for ``model`` (SavedModel dir, .keras file or bundled
    workload) within about ``budget_s`` seconds of machine time; store the winner.

    ValueError when the budget cannot pay for two candidates (the rule's plan is kept) or the
    model cannot be fed (the same messages as ``bench``)."""
    if mode != "latency":
        raise ValueError(f"tune measures inference one request at a time (mode latency) today, not {mode!r}")
    if not budget_s > 0:
        raise ValueError(f"--budget must be a positive number of seconds, got {budget_s!r}")
    t0 = time.perf_counter()
    options = BenchOptions(model=model, batch=batch, mode="latency", requests=max(MIN_REQUESTS, requests),
                           warmup=warmup, rounds=1, compare=("plan",), size=size,
                           model_options=model_options or ModelOptions())
    say = progress or (lambda text: log.info("%s", text))
    with Bench(options) as bench:
        prepared = bench.prepare()
        prepare_s = time.perf_counter() - t0
        plan = prepared["plan"]
        rule = Candidate(int(plan["inter_op"]), int(plan["intra_op"]))
        profile = prepared.get("profile") or {}
        usable = int(plan.get("usable_cpus") or bench.topology.cpu_budget)
        candidates = neighbourhood(rule.inter, rule.intra, usable, int(profile.get("max_width") or 1))
        # a run loads the model like the preparing child did, then times the requests: about as long
        max_runs = int((budget_s - prepare_s) // max(prepare_s, 1.0))
        if max_runs < 2:
            raise ValueError(
                f"a budget of {budget_s:g} s cannot compare two settings (one run of this model takes about "
                f"{prepare_s:.0f} s here): the rule's plan {rule.label} is kept; give --budget "
                f"{math.ceil(4 * prepare_s)} or more")
        say(f"rule's plan {rule.label}; {len(candidates)} candidates "
            f"({', '.join(c.label for c in candidates)}); up to {max_runs} runs")
        plan_env = tuple(sorted((str(k), str(v)) for k, v in (prepared.get("env") or {}).items()))
        plan_cpus = tuple(tuple(int(c) for c in g) for g in plan.get("cpus") or ())

        def config(c: Candidate) -> BenchConfig:
            if c == rule:  # the plan exactly as enable() would apply it (binding included)
                return BenchConfig(c.label, "plan", plan_env, plan_cpus)
            env = dict(plan_env)
            env.update({"TF_NUM_INTEROP_THREADS": str(c.inter), "TF_NUM_INTRAOP_THREADS": str(c.intra)})
            return BenchConfig(c.label, "threads", tuple(sorted(env.items())), plan_cpus)

        def measure(live: Sequence[Candidate], rnd: int) -> Mapping[Candidate, float]:
            out = {}
            for c in live:
                run = bench.run_once(config(c), rnd)
                out[c] = run["median_s"] if run["status"] == "ok" and run["median_s"] else math.nan
                say(f"round {rnd} {c.label}: " + (f"{out[c] * 1e3:.2f} ms" if math.isfinite(out[c]) else run["status"]))
            return out

        result = search(candidates, measure, max_runs=max_runs)
        host = {"cpu_model": getattr(bench.topology.cpu, "model", "unknown"), "cpu_budget": bench.topology.cpu_budget}
    entry: dict[str, Any] = {}
    fingerprint = profile.get("fingerprint")
    if store and fingerprint and result.rounds >= 2:
        from tf_autopar.runtime import cache

        entry = {"inter_op": result.best.inter, "intra_op": result.best.intra, "rule": rule.label,
                 "speedup": round(result.speedup(), 3), "rounds": result.rounds, "runs": result.runs,
                 "date": _dt.date.today().isoformat(), "cpu_model": host["cpu_model"], "model": model}
        cache.store_tuned(fingerprint, cache.host_key(bench.topology), _plan_mode(prepared, mode), batch, entry)
    return TuneOutcome(model, mode, batch, rule, result, entry, time.perf_counter() - t0, host)


def _plan_mode(prepared: Mapping[str, Any], mode: str) -> str:
    return str(prepared.get("plan_mode") or mode)

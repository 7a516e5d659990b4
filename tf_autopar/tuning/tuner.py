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

import tf_autopar.planning.variables as V
import tf_autopar_workloads as workloads
from tf_autopar._model_path import looks_like_model
from tf_autopar.measure import stats
from tf_autopar.measure.configs import config_from_plan
from tf_autopar.measure.runner import OK, check_step_payload, clean_env, run_child
from tf_autopar.measure.search import Candidate, SearchResult, neighbourhood, search
from tf_autopar.models.bench import Bench, BenchConfig, BenchOptions
from tf_autopar.models.child import STEPS_CHILD, runner_args
from tf_autopar.models.options import ModelOptions
from tf_autopar.models.plan_child import PLAN_CHILD, plan_args
from tf_autopar.planning.modes import TRAINING
from tf_autopar.runtime import cache
from tf_autopar.topology import detect_topology
from tf_autopar.tuning.arguments import DEFAULT_BUDGET_S, check_arguments

log = logging.getLogger("tf_autopar.tuning")

PLAN_TIMEOUT_S = 600.0
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
        return {
            "model": self.model,
            "mode": self.mode,
            "batch": self.batch,
            "rule": self.rule.label,
            "tuned": self.best.label,
            "search": self.result.to_dict(),
            "stored": self.entry,
            "seconds": round(self.seconds, 1),
            "host": self.host,
        }

    def text(self) -> str:
        r = self.result
        lines = [
            f"tuned {self.model} ({self.mode}, batch {self.batch}) on {self.host.get('cpu_model', '?')}: "
            f"{r.runs} runs in {r.rounds} rounds, {self.seconds:.0f} s; {r.stopped}"
        ]
        for c in sorted(r.times, key=r.median):
            tag = " <- rule's plan" if c == self.rule else ""
            tag += " <- chosen" if c == self.best else ""
            lines.append(f"  {c.label:>7}  {r.median(c) * 1e3:9.2f} ms  ({len(r.times[c])} rounds){tag}")
        if self.best == self.rule:
            lines.append(f"kept the rule's plan {self.rule.label}: no neighbour was faster beyond the noise")
        else:
            lines.append(
                f"chosen {self.best.label}: {r.speedup():.2f}x over the rule's plan {self.rule.label} "
                "(median of per-round ratios)"
            )
        if self.entry:
            lines.append("stored in the plan cache: enable(), `plan` and `run --model` use it on this host")
        return "\n".join(lines)


def candidate_env(plan_env: Mapping[str, str], c: Candidate) -> dict[str, str]:
    """The plan's variables with ``c``'s pools (OpenMP/MKL teams: ``c.omp``, else the intra-op count)."""
    env = {str(k): str(v) for k, v in plan_env.items()}
    env.update({V.INTEROP: str(c.inter), V.INTRAOP: str(c.intra)})
    for name in (V.OMP_THREADS, V.MKL_THREADS):
        if name in env or c.omp is not None:
            env[name] = str(c.omp if c.omp is not None else c.intra)
    return env


def search_plan(
    plan: Mapping[str, Any],
    profile: Mapping[str, Any],
    usable: int,
    run: Callable[[Candidate, int], float],
    max_runs: int,
    say: Callable[[str], None],
) -> tuple[Candidate, SearchResult]:
    """The search around ``plan`` (a ThreadPlan.to_dict()): ``run(candidate, round)`` measures one
    candidate once in a fresh process and returns its step time (NaN: failed). Shared by ``tune``
    and ``validate --tuned``, so what validation reports is what a user's tune does."""
    omp = plan.get("omp_threads")
    rule = Candidate(int(plan["inter_op"]), int(plan["intra_op"]), int(omp) if omp else None)
    candidates = neighbourhood(rule.inter, rule.intra, usable, int(profile.get("max_width") or 1), rule.omp)
    say(
        f"rule's plan {rule.label}; {len(candidates)} candidates "
        f"({', '.join(c.label for c in candidates)}); up to {max_runs} runs"
    )

    def measure(live: Sequence[Candidate], rnd: int) -> Mapping[Candidate, float]:
        out = {}
        for c in live:
            out[c] = run(c, rnd)
            say(f"round {rnd} {c.label}: " + (f"{out[c] * 1e3:.2f} ms" if math.isfinite(out[c]) else "failed"))
        return out

    return rule, search(candidates, measure, max_runs=max_runs)


def _max_runs(budget_s: float, one_run_s: float, rule: str) -> int:
    """Runs what is left of the budget after preparing pays for, a run costing about what
    preparing the model did (``one_run_s``); the message speaks of the budget the user gave."""
    max_runs = int(max(0.0, budget_s - one_run_s) // max(one_run_s, 1.0))
    if max_runs < 2:
        raise ValueError(
            f"a budget of {budget_s:g} s cannot compare two settings (preparing this model took {one_run_s:.1f} s, "
            f"and each run takes about as long here): the rule's plan {rule} is kept; give --budget "
            f"{math.ceil(5 * max(one_run_s, 1.0))} or more"
        )
    return max_runs


def tune(
    model: str,
    *,
    mode: str = "latency",
    batch: int | None = None,
    budget_s: float = DEFAULT_BUDGET_S,
    requests: int = DEFAULT_REQUESTS,
    warmup: int = 3,
    size: str = "tiny",
    model_options: ModelOptions | None = None,
    store: bool = True,
    progress: Callable[[str], None] | None = None,
) -> TuneOutcome:
    """Measure the plan and its neighbours for ``model`` (SavedModel dir, .keras file or bundled
    workload) within about ``budget_s`` seconds of machine time; store the winner.

    ``mode``: "latency" (one request at a time, at ``batch``, default 1) or "training" (a
    bundled workload's training step at ``batch``, default its published batch; a SavedModel
    carries no training step). ValueError when the budget cannot pay for two candidates (the
    rule's plan is kept) or the model cannot be fed (the same messages as ``bench``)."""
    check_arguments(mode, budget_s, batch, process_pools=True)
    say = progress or (lambda text: log.info("%s", text))
    steps = max(MIN_REQUESTS, requests)
    if mode == "training":
        return _tune_training(model, batch, budget_s, steps, warmup, size, model_options, store, say)
    t0 = time.perf_counter()
    batch = batch or 1
    options = BenchOptions(
        model=model,
        batch=batch,
        mode="latency",
        requests=steps,
        warmup=warmup,
        rounds=1,
        compare=("plan",),
        size=size,
        model_options=model_options or ModelOptions(),
    )
    with Bench(options) as bench:
        prepared = bench.prepare()
        prepare_s = time.perf_counter() - t0
        plan = prepared["plan"]
        profile = prepared.get("profile") or {}
        max_runs = _max_runs(budget_s, prepare_s, f"{plan['inter_op']}x{plan['intra_op']}")
        plan_env = prepared.get("env") or {}
        plan_cpus = tuple(tuple(int(c) for c in g) for g in plan.get("cpus") or ())

        def run(c: Candidate, rnd: int) -> float:
            env = tuple(sorted(candidate_env(plan_env, c).items()))
            # every candidate keeps the rule plan's CPU binding and other variables
            res = bench.run_once(BenchConfig(c.label, "threads", env, plan_cpus), rnd)
            return res["median_s"] if res["status"] == "ok" and res["median_s"] else math.nan

        rule, result = search_plan(
            plan, profile, int(plan.get("usable_cpus") or bench.topology.cpu_budget), run, max_runs, say
        )
        topology = bench.topology
    plan_mode = str(prepared.get("plan_mode") or mode)
    return _finish(model, mode, plan_mode, batch, rule, result, profile, topology, store, t0)


def _tune_training(
    model: str,
    batch: int | None,
    budget_s: float,
    steps: int,
    warmup: int,
    size: str,
    model_options: ModelOptions | None,
    store: bool,
    say: Callable[[str], None],
) -> TuneOutcome:
    """Training steps of a bundled workload, through the workloads runner that ``validate`` uses."""
    if looks_like_model(model):
        raise ValueError(
            f"{model}: a SavedModel or .keras file is tuned for inference (--mode latency); "
            "training is tuned on the bundled workloads"
        )
    if model_options is not None and model_options.given:
        raise ValueError(
            "--signature, --input-shape, --int-max and --inputs apply to model files, "
            f"not to the bundled workload {model!r}"
        )
    t0 = time.perf_counter()
    if batch is None:  # the workload's published batch
        batch = int(workloads.get(model).default_batch)
    env, _ = clean_env()
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    planned = run_child([*PLAN_CHILD, *plan_args(model, "train", size, batch)], env, PLAN_TIMEOUT_S)
    if planned.status != OK or planned.payload is None:
        raise ValueError(f"planning {model} failed: {planned.reported or planned.error} {planned.stderr_tail[-400:]}")
    info = planned.payload
    cpus = config_from_plan("plan", info, "plan").cpus
    prepare_s = time.perf_counter() - t0
    plan, profile = info["plan"], info.get("profile") or {}
    max_runs = _max_runs(budget_s, prepare_s, f"{plan['inter_op']}x{plan['intra_op']}")
    timeout_s = 1800.0 if size == "paper" else 300.0
    cmd = [*STEPS_CHILD, *runner_args(model, "train", batch, steps, size, warmup)]

    def run(c: Candidate, rnd: int) -> float:
        res = run_child(
            cmd, {**env, **candidate_env(info.get("env") or {}, c)}, timeout_s, cpus=cpus, validate=check_step_payload
        )
        if res.status != OK or res.payload is None:
            return math.nan
        return stats.median(float(t) for t in res.payload["step_times_s"])

    topology = detect_topology(cpu_details=True)
    rule, result = search_plan(plan, profile, int(plan.get("usable_cpus") or topology.cpu_budget), run, max_runs, say)
    return _finish(model, TRAINING, TRAINING, batch, rule, result, profile, topology, store, t0)


def _finish(
    model: str,
    mode: str,
    plan_mode: str,
    batch: int,
    rule: Candidate,
    result: SearchResult,
    profile: Mapping[str, Any],
    topology: Any,
    store: bool,
    t0: float,
) -> TuneOutcome:
    host = {"cpu_model": getattr(topology.cpu, "model", "unknown"), "cpu_budget": topology.cpu_budget}
    entry: dict[str, Any] = {}
    fingerprint = profile.get("fingerprint")
    if store and fingerprint and result.rounds >= 2:
        entry = {
            "inter_op": result.best.inter,
            "intra_op": result.best.intra,
            "rule": rule.label,
            **({"omp_threads": result.best.omp} if result.best.omp is not None else {}),
            "speedup": round(result.speedup(), 3),
            "rounds": result.rounds,
            "runs": result.runs,
            "date": _dt.date.today().isoformat(),
            "cpu_model": host["cpu_model"],
            "model": model,
        }
        cache.store_tuned(fingerprint, cache.host_key(topology), plan_mode, batch, entry)
    return TuneOutcome(model, mode, batch, rule, result, entry, time.perf_counter() - t0, host)

"""Orchestration of ``tf-autopar validate``: rows x configurations x interleaved rounds.

For each row (a bundled workload or a user's model file, and a mode) the harness computes
our plan (in a child process, see plan_child.py), lists the configurations (TensorFlow's
default, the TF- and Intel-recommended settings, our plan, the search space), runs every
*distinct* one once per round in a fresh process, round after round (A B C ... A B C ...),
and records every timing. A model file's rows run tf_autopar/models/child.py instead of the
workloads runner (same JSON contract). Configurations that start identical processes run
once and are reported as "same as" the first.

Inference rows also measure the frozen path (``Options.frozen``; space.py): the frozen graph
in a session of its own at our plan's pools (``frozen``) and at every inter x intra of the
space (``frozen:INTERxINTRA``), and ``live`` (``enable()`` until live tuning has decided), in
the same rounds. They run models/child.py's ``run`` on the row's model file; a bundled
workload is first exported once per row (``export``: its inference function as a SavedModel
and its batch as an .npz, in a temporary directory removed after the row), because the fast
path serves loaded SavedModels. Training rows have no frozen path (``frozen_path`` says so). A crash or timeout is recorded and the run goes on. Ctrl-C (or
SIGTERM, turned into KeyboardInterrupt by the CLI) stops after killing the running child
and removing its group; the document then holds everything measured so far.

This process never imports TensorFlow: it would compete for the CPUs it measures.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import logging
import math
import os
import tempfile
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping, Sequence

from tf_autopar.measure import stats
from tf_autopar.measure.cgroup import CpuController, QuotaGroup, check_writable, find_cpu_controller
from tf_autopar.measure.configs import Config, config_from_plan
from tf_autopar.measure.progress import Progress
from tf_autopar.measure.runner import OK, ChildResult, check_step_payload, clean_env, run_child
from tf_autopar.measure.search import Candidate
from tf_autopar.models.bench import FROZEN, LIVE, enable_env, served_engines, served_sessions
from tf_autopar.models.child import EXPORT_CHILD, RUN_CHILD, STEPS_CHILD, export_args, runner_args
from tf_autopar.models.load import KERAS, model_kind
from tf_autopar.models.options import ModelOptions
from tf_autopar.models.plan_child import PLAN_CHILD, ROW_MODES, plan_args
from tf_autopar.topology.cpuinfo import parse_proc_cpuinfo
from tf_autopar.topology.model import Topology
from tf_autopar.tuning.tuner import candidate_env, search_plan
import tf_autopar.validation.results as results
from tf_autopar.validation.space import (
    SearchSpace,
    baseline_configs,
    engine_configs,
    frozen_config,
    live_config,
    search_space,
)

log = logging.getLogger("tf_autopar.validation")

DEFAULT_RUNNER: tuple[str, ...] = STEPS_CHILD  # a bundled workload's rows: its runner (models/child.py:steps)
# A user's model file (SavedModel directory, .keras): same JSON contract, models/child.py:run.
MODEL_RUNNER: tuple[str, ...] = RUN_CHILD
MODEL_ROW_MODES = ("infer1", "infer")  # a model file is validated for inference
MODEL_SIZE = "model"  # the size column of a model file's rows (sizes are the bundled workloads')
# Seconds per fresh process used for the up-front estimate (import TF ~2.5 s, build, steps);
# the progress bar's ETA uses measured times instead.
EST_PROCESS_S = {"tiny": 6.0, "paper": 45.0}
NO_FROZEN_TRAINING = "training: a frozen graph's variables are constants, they do not train"


@dataclass(frozen=True)
class RowSpec:
    workload: str  # a bundled workload's name, or the absolute path of a user's model file
    mode: str  # "infer1" (inference, batch 1), "infer" (published batch, or --batch), "train"
    batch: int
    size: str
    model: ModelOptions | None = None  # set for a model file: its input flags (ModelOptions)

    @property
    def key(self) -> str:
        return f"{self.workload}/{self.mode}"

    @property
    def runner_mode(self) -> str:
        return ROW_MODES[self.mode][0]


@dataclass(frozen=True)
class Options:
    rounds: int = 3
    steps: int = 10
    warmup: int = 2
    timeout_s: float = 300.0
    plan_timeout_s: float = 600.0
    cpu_quota: float | None = None
    space: str = "auto"
    tune_runs: int = 0  # > 0: tune each row (at most this many runs) and validate the tuned setting too
    runner: tuple[str, ...] = DEFAULT_RUNNER
    model_runner: tuple[str, ...] = MODEL_RUNNER  # the runner of model-file rows and of every frozen-path run
    frozen: bool = True  # inference rows: the frozen path too (frozen sessions over the space, live)
    export_runner: tuple[str, ...] = EXPORT_CHILD  # a bundled workload as a SavedModel, for its frozen path
    # the frozen sessions of an inference row timed inside its live run, one process a round (the
    # model child's --sweep: per-session pools, as live tuning measures), not a process each
    sweep: bool = True
    # the process pools' search on inference rows with the frozen path (False: the baselines and
    # our plan only there; --quick, where enable() serves the frozen path the sweep covers)
    infer_pool_search: bool = True

    def check(self) -> None:
        if self.rounds < 1:
            raise ValueError(f"--rounds must be at least 1, got {self.rounds}")
        if self.steps < 1:
            raise ValueError(f"--steps must be at least 1, got {self.steps}")
        if self.warmup < 0:
            raise ValueError(f"--warmup must be >= 0, got {self.warmup}")
        if self.timeout_s <= 0:
            raise ValueError(f"--timeout must be positive, got {self.timeout_s}")
        if self.cpu_quota is not None and not self.cpu_quota > 0:
            raise ValueError(f"--cpu-quota must be a positive number of CPUs, got {self.cpu_quota}")
        if not self.runner:
            raise ValueError("the runner command is empty")
        if self.tune_runs < 0 or self.tune_runs == 1:
            raise ValueError(f"--tune-runs must be 0 (no tuning) or at least 2, got {self.tune_runs}")


def make_rows(
    workload_names: Sequence[str], modes: Sequence[str], size: str, batches: Mapping[str, int] | None = None
) -> list[RowSpec]:
    """Rows in workload-major order; the published batch comes from the workload registry."""
    for m in modes:
        if m not in ROW_MODES:
            raise ValueError(f"unknown mode {m!r}; choose from {', '.join(ROW_MODES)}")
    rows = []
    for name in workload_names:
        published = (batches or {}).get(name)
        if published is None and any(m != "infer1" for m in modes):
            # here, not at the top: importing the workloads package registers its names with
            # tf_autopar.graph.named, which validating model files must not do
            import tf_autopar_workloads as workloads

            published = workloads.get(name).default_batch
        for m in modes:
            rows.append(RowSpec(name, m, 1 if m == "infer1" else int(published), size))
    return rows


def make_model_rows(
    paths: Sequence[str], modes: Sequence[str] | None, batch: int | None, options: ModelOptions | None = None
) -> list[RowSpec]:
    """Rows for users' model files: inference only; ``infer1`` at batch 1, ``infer`` at ``batch``.

    Without ``modes``: one row at ``batch`` (default 1). ValueError naming the problem.
    """
    if modes is None:
        modes = ["infer1"] if batch in (None, 1) else ["infer"]
    for m in modes:
        if m not in MODEL_ROW_MODES:
            raise ValueError(
                f"a model file is validated for inference only: mode {m!r} is not one of {', '.join(MODEL_ROW_MODES)}"
            )
    if "infer" in modes and batch is None:
        raise ValueError("mode 'infer' of a model file needs --batch N (its batch dimension is the signature's)")
    rows = []
    for path in paths:
        full = os.path.abspath(os.path.expanduser(path))
        for m in modes:
            rows.append(RowSpec(full, m, 1 if m == "infer1" else int(batch), MODEL_SIZE, options or ModelOptions()))
    return rows


def runner_command(runner: Sequence[str], row: RowSpec, options: Options) -> list[str]:
    """The runner command line for one run of ``row`` (configuration is in the env).

    A model file's row runs ``options.model_runner`` with the same arguments plus its input flags.
    """
    if row.model is not None:
        runner = options.model_runner
    return [
        *runner,
        *runner_args(row.workload, row.runner_mode, row.batch, options.steps, row.size, options.warmup, row.model),
    ]


# (row, child env, quota group or None, quota CPUs or None) -> (our Config or None, info for the report)
PlanProvider = Callable[[RowSpec, Mapping[str, str], "QuotaGroup | None", "float | None"], tuple["Config | None", dict]]


class ChildPlanProvider:
    """Our plan for a row, computed by ``plan_child`` in a fresh process (inside the quota group)."""

    def __init__(self, command: Sequence[str] = PLAN_CHILD, timeout_s: float = 600.0) -> None:
        self.command = tuple(command)
        self.timeout_s = timeout_s

    def __call__(
        self, row: RowSpec, env: Mapping[str, str], group: QuotaGroup | None, quota: float | None
    ) -> tuple[Config | None, dict]:
        cmd = [*self.command, *plan_args(row.workload, row.mode, row.size, row.batch, row.model, quota)]
        res = run_child(cmd, env, self.timeout_s, group=group)
        if res.status != OK or res.payload is None:
            return None, {"status": res.status, "error": res.error, "stderr_tail": res.stderr_tail}
        info = {
            "status": "ok",
            **{
                k: res.payload.get(k)
                for k in ("plan_mode", "plan", "env", "explain", "profile", "quota_source", "model_info")
            },
        }
        return config_from_plan(results.OURS, res.payload, "plan"), info


def fixed_plan_provider(config: Config) -> PlanProvider:
    """A provider returning one given plan (tests; or validating a hand-made setting)."""

    def provide(row: RowSpec, env: Mapping[str, str], group: QuotaGroup | None, quota: float | None):
        return config, {"status": "ok", "source": "fixed", "plan": config.to_dict()}

    return provide


def processor() -> str:
    """/proc/cpuinfo's model name ("unknown" without one): recorded with every document."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            return parse_proc_cpuinfo(fh.read()).model or "unknown"
    except OSError:
        return "unknown"


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def distinct_slots(
    configs: Sequence[Config], runtime: str, affinity: tuple[int, ...]
) -> tuple[list[str], dict[str, str]]:
    """Configs to run (first of each effect class, in order) and alias -> the config it is the same as."""
    first: dict[tuple, str] = {}
    order: list[str] = []
    same_as: dict[str, str] = {}
    for c in configs:
        key = c.effect_key(runtime, affinity)
        if key in first:
            same_as[c.name] = first[key]
        else:
            first[key] = c.name
            order.append(c.name)
    return order, same_as


class Harness:
    def __init__(
        self,
        topology: Topology,
        options: Options,
        *,
        baselines: Sequence[Config] | None = None,
        plan_provider: PlanProvider | None = None,
        progress: Progress | None = None,
        checkpoint: Callable[[dict], None] | None = None,
        args: Mapping[str, Any] | None = None,
        controller: CpuController | None = None,
    ) -> None:
        options.check()
        self.topology = topology
        self.options = options
        self.baselines = list(baselines) if baselines is not None else baseline_configs(topology)
        self.plan_provider = plan_provider or ChildPlanProvider(timeout_s=options.plan_timeout_s)
        self.progress = progress
        self.checkpoint = checkpoint
        self.args = dict(args or {})
        self.space: SearchSpace = search_space(topology, options.space)
        self.env, self.scrubbed = clean_env()
        self.controller = None
        if options.cpu_quota is not None:
            self.controller = controller or find_cpu_controller()
            check_writable(self.controller)
        self._seq = 0

    # ---------------------------------------------------------------- planning

    def estimate(self, rows: Sequence[RowSpec]) -> tuple[int, float]:
        """(processes, seconds): an upper bound on children and a rough duration."""
        procs = sum(
            self._max_slots(row) * self.options.rounds + 1 + self.options.tune_runs + self._exports(row) for row in rows
        )
        per_proc = EST_PROCESS_S.get(rows[0].size if rows else "tiny", 6.0)
        per_proc += (self.options.steps + self.options.warmup) * (0.05 if rows and rows[0].size == "tiny" else 0.5)
        return procs, procs * per_proc

    def _max_slots(self, row: RowSpec) -> int:
        """Distinct processes per round: baselines and search deduplicated, plus our plan if it is new;
        on an inference row the frozen sweep, plus the frozen session at our plan if it is new, and live."""
        order, _ = distinct_slots(
            [*self.baselines, *self._pool_search(row)], self.topology.threading_runtime, tuple(self.topology.affinity)
        )
        if not self._frozen_row(row):
            return len(order) + 1
        return len(order) + 1 + (1 if self.options.sweep else len(self.space.frozen) + 2)

    def _pool_search(self, row: RowSpec) -> tuple[Config, ...]:
        """The search space's process-pool configurations this row runs (none on an inference row
        with the frozen path when ``infer_pool_search`` is off)."""
        return self.space.configs if self.options.infer_pool_search or not self._frozen_row(row) else ()

    def _frozen_row(self, row: RowSpec) -> bool:
        return self.options.frozen and row.runner_mode == "infer"

    def _exports(self, row: RowSpec) -> int:
        """The export child a bundled workload's inference row runs once (0 or 1)."""
        return int(self._frozen_row(row) and row.model is None)

    @contextlib.contextmanager
    def _group(self, tag: str) -> Iterator[QuotaGroup | None]:
        if self.controller is None:
            yield None
            return
        with QuotaGroup(self.controller, self.options.cpu_quota, tag) as group:
            yield group

    # ---------------------------------------------------------------- running

    def new_document(self) -> dict[str, Any]:
        return {
            "schema": results.SCHEMA_VERSION,
            "tool": "tf-autopar validate",
            "host": self.topology.to_dict(),
            "processor": processor(),
            "started": _now(),
            "finished": None,
            "interrupted": False,
            "args": self.args,
            "options": {
                "rounds": self.options.rounds,
                "steps": self.options.steps,
                "warmup": self.options.warmup,
                "timeout_s": self.options.timeout_s,
                "cpu_quota": self.options.cpu_quota,
                "runner": list(self.options.runner),
                "model_runner": list(self.options.model_runner),
                "frozen": self.options.frozen,
            },
            "cgroup": None
            if self.controller is None
            else {"version": self.controller.version, "path": self.controller.path},
            "space": self.space.to_dict(),
            "scrubbed_env": self.scrubbed,
            "rows": [],
            "geomean": results.geomeans([]),
        }

    def run(self, rows: Sequence[RowSpec], doc: dict[str, Any] | None = None) -> dict[str, Any]:
        """Run every row; returns the document (``interrupted`` set if Ctrl-C stopped it)."""
        doc = doc if doc is not None else self.new_document()
        if self.progress is not None:
            self.progress.set_total(self.estimate(rows)[0])
        try:
            for row in rows:
                self._run_row(row, doc)
                self._finish(doc)
                if self.checkpoint is not None:
                    self.checkpoint(doc)
        except KeyboardInterrupt:
            doc["interrupted"] = True
            log.warning("interrupted: keeping what was measured so far")
        finally:
            self._finish(doc)
            doc["finished"] = _now()
            if self.progress is not None:
                self.progress.close()
        return doc

    def _finish(self, doc: dict[str, Any]) -> None:
        for row in doc["rows"]:
            row["summary"] = results.summarize_row(
                row, self.topology.logical_cpus, results.statistic_for(self.options.cpu_quota)
            )
        doc["geomean"] = results.geomeans(doc["rows"])

    def _tick(self, label: str) -> None:
        if self.progress is not None:
            self.progress.update(label)

    def _run_row(self, row: RowSpec, doc: dict[str, Any]) -> None:
        row_doc: dict[str, Any] = {
            "workload": row.workload,
            "mode": row.mode,
            "batch": row.batch,
            "size": row.size,
            "plan": {"status": "pending"},
            "order": [],
            "configs": {},
        }
        if row.model is not None:
            row_doc["model"] = row.model.to_dict()
        doc["rows"].append(row_doc)  # in the document before anything runs: Ctrl-C keeps partial rows
        with self._group("plan") as group:
            ours, info = self.plan_provider(row, self.env, group, self.options.cpu_quota)
            if group is not None:
                info["cpu_stat"] = group.stat().to_dict()
        row_doc["plan"] = info
        self._tick(f"{row.key} planned" + ("" if ours else " (plan FAILED)"))
        cmd = runner_command(self.options.runner, row, self.options)
        tuned = self._tune(row, ours, info, cmd, row_doc) if ours is not None and self.options.tune_runs else None
        with tempfile.TemporaryDirectory(prefix="tf_autopar_validate_") as tmp:  # removed on Ctrl-C too
            frozen, frozen_cmd = self._frozen_path(row, ours, row_doc, tmp) if self._frozen_row(row) else ([], [])
            if self.options.frozen and not self._frozen_row(row):
                row_doc["frozen_path"] = {"status": "n/a", "reason": NO_FROZEN_TRAINING}
            configs = [
                *self.baselines,
                *([ours] if ours is not None else []),
                *([tuned] if tuned else []),
                *self._pool_search(row),
                *frozen,
            ]
            names = [c.name for c in configs]
            if len(set(names)) != len(names):
                raise ValueError(f"configuration names must be unique, got {names}")
            order, same_as = distinct_slots(configs, self.topology.threading_runtime, tuple(self.topology.affinity))
            row_doc["order"] = order
            for c in configs:
                row_doc["configs"][c.name] = {**c.to_dict(), "same_as": same_as.get(c.name), "runs": []}
            if self.progress is not None:
                # the estimate assumed no duplicates; shrink the total now that this row's slots are known
                self.progress.set_total(self.progress.total - (self._max_slots(row) - len(order)) * self.options.rounds)
            by_name = {c.name: c for c in configs}
            swept = self._swept(order, by_name)
            if swept:
                row_doc["frozen_path"]["swept_in"] = LIVE
                if self.progress is not None:
                    self.progress.set_total(self.progress.total - len(swept) * self.options.rounds)
            for r in range(1, self.options.rounds + 1):
                for name in order:
                    if name in swept:
                        continue  # timed inside this round's live run, below
                    cfg = by_name[name]
                    args = [*cfg.runner_args, *self._sweep_args(swept, r)] if name == LIVE else cfg.runner_args
                    run = self._run_one([*frozen_cmd, *args] if args else cmd, cfg, r)
                    row_doc["configs"][name]["runs"].append(run)
                    self._tick_run(row, r, name, run)
                    if name == LIVE:
                        for label, rec in sweep_records(run, swept, r).items():
                            row_doc["configs"][label]["runs"].append(rec)
                            self._tick_run(row, r, label, rec, count=False)

    def _tick_run(self, row: RowSpec, r: int, name: str, run: Mapping[str, Any], count: bool = True) -> None:
        med = run.get("median_s")
        shown = f"{med * 1e3:.2f} ms" if run["status"] == OK and med else run["status"].upper()
        label = f"{row.key} round {r}/{self.options.rounds} {name}: {shown}"
        if self.progress is not None:
            self.progress.update(label, advance=1 if count else 0)

    def _swept(self, order: Sequence[str], by_name: Mapping[str, Config]) -> dict[str, str]:
        """The frozen configurations timed inside the live run (name -> its setting "IxJ"): every
        distinct one not bound to CPUs of its own, when the row has a live run and ``sweep`` is on."""
        if not self.options.sweep or LIVE not in order:
            return {}
        return {
            n: by_name[n].runner_args[-1]
            for n in order
            if by_name[n].kind == FROZEN
            and not by_name[n].cpus
            and by_name[n].runner_args[:1] == ("--frozen",)
            and "--engine" not in by_name[n].runner_args  # another engine: in a process of its own
        }

    @staticmethod
    def _sweep_args(swept: Mapping[str, str], rnd: int) -> list[str]:
        """``--sweep`` for round ``rnd``: the swept settings, rotated by the round so that none is
        always first after the live calls."""
        settings = list(swept.values())
        if not settings:
            return []
        k = (rnd - 1) % len(settings)
        return ["--sweep", ",".join(settings[k:] + settings[:k])]

    def _frozen_path(
        self, row: RowSpec, ours: Config | None, row_doc: dict[str, Any], tmp: str
    ) -> tuple[list[Config], list[str]]:
        """An inference row's frozen-path configurations and the command that runs them (the model
        child on the row's model file, or on the workload exported into ``tmp``); ``row_doc
        ["frozen_path"]`` says what was done, or why nothing (the export failed)."""
        doc: dict[str, Any] = {"status": "ok", "reason": None}
        row_doc["frozen_path"] = doc
        if row.model is None:
            exported = self._export(row, tmp, doc)
            if exported is None:
                return [], []
            path, model = exported
            doc["model"] = "the workload exported as a SavedModel (export child, removed after the row)"
        else:
            path, model = row.workload, row.model
            doc["model"] = "the row's model file"
        configs = []
        if ours is not None:  # the fast path's first session: our plan's pools, bound as ours is
            inter, intra = ours.effective_threads(self.topology.logical_cpus)
            configs.append(frozen_config(inter, intra, name=FROZEN, cpus=ours.cpus))
        configs += self.space.frozen
        # the other engines the fast path would try, at our plan's CPUs (or the host's)
        budget = inter * intra if ours is not None else self.topology.logical_cpus
        configs += engine_configs(budget)
        if model_kind(path) == KERAS:
            doc["live_reason"] = (
                "n/a for a .keras file: the model child times its traced call, while enable()'s fast path serves predict()"
            )
        else:
            configs.append(live_config(ROW_MODES[row.mode][1]))
        doc["configs"] = [c.name for c in configs]
        o = self.options
        cmd = [*o.model_runner, *runner_args(path, "infer", row.batch, o.steps, row.size, o.warmup, model)]
        return configs, cmd

    def _export(self, row: RowSpec, tmp: str, doc: dict[str, Any]) -> tuple[str, ModelOptions] | None:
        """The bundled workload's inference function as a SavedModel and its batch as an .npz, once
        per row (the steps child's weights and batch: same seed); None when it failed (in ``doc``)."""
        out = os.path.join(tmp, "export")
        os.makedirs(out)
        cmd = [*self.options.export_runner, *export_args(row.workload, row.batch, row.size, out)]
        res = run_child(cmd, self.env, self.options.plan_timeout_s)
        p = res.payload or {}
        doc["export"] = {
            "status": res.status,
            "wall_s": round(res.wall_s, 3),
            **{k: p.get(k) for k in ("signature", "input_shapes", "export_s") if k in p},
        }
        ok = res.status == OK and p.get("ok") and p.get("path") and p.get("inputs")
        self._tick(f"{row.key} exported for the frozen path" + ("" if ok else " (FAILED)"))
        if not ok:
            doc.update(
                status="failed",
                reason=f"the export as a SavedModel failed ({res.status}: {res.reported or res.error})",
                stderr_tail=res.stderr_tail,
            )
            return None
        return str(p["path"]), ModelOptions(inputs=str(p["inputs"]))

    def _tune(
        self, row: RowSpec, ours: Config, info: Mapping[str, Any], cmd: Sequence[str], row_doc: dict[str, Any]
    ) -> Config | None:
        """What ``tf-autopar tune`` would choose for this row, measured here with the row's own
        runner and settings (tuning/tuner.py's search), before the rounds; its runs and machine
        time are kept in ``row_doc["tune"]`` so the report can set them against the sweep's."""
        runs: list[dict[str, Any]] = []
        tune_doc: dict[str, Any] = {"status": "failed", "runs": runs}
        row_doc["tune"] = tune_doc

        def config(c: Candidate, name: str, kind: str) -> Config:
            env = candidate_env(ours.env_dict, c)
            omp = c.omp if c.omp is not None else (c.intra if ours.omp else None)
            return Config(name, c.inter, c.intra, omp=omp, env=tuple(sorted(env.items())), cpus=ours.cpus, kind=kind)

        def run(c: Candidate, rnd: int) -> float:
            rec = {"config": c.label, **self._run_one(cmd, config(c, c.label, "tune"), rnd)}
            runs.append(rec)
            self._tick(
                f"{row.key} tuning round {rnd} {c.label}: "
                + (f"{rec['median_s'] * 1e3:.2f} ms" if rec["status"] == OK and rec["median_s"] else rec["status"])
            )
            return rec["median_s"] if rec["status"] == OK and rec["median_s"] else math.nan

        inter, intra = ours.effective_threads(self.topology.logical_cpus)
        usable = int((info.get("plan") or {}).get("usable_cpus") or self.topology.cpu_budget)
        try:
            rule, result = search_plan(
                {"inter_op": inter, "intra_op": intra},
                info.get("profile") or {},
                usable,
                run,
                self.options.tune_runs,
                lambda text: log.info("%s: %s", row.key, text),
            )
        except (ValueError, KeyError) as exc:
            tune_doc["error"] = str(exc)
            return None
        finally:
            tune_doc["wall_s"] = round(sum(r["wall_s"] for r in runs), 3)
            if self.progress is not None:
                self.progress.set_total(self.progress.total - (self.options.tune_runs - len(runs)))
        tune_doc.update(status="ok", rule=rule.label, tuned=result.best.label, search=result.to_dict())
        if result.best == rule:
            return dataclasses.replace(ours, name=results.TUNED, kind="tuned")
        return config(result.best, results.TUNED, "tuned")

    def _run_one(self, cmd: Sequence[str], cfg: Config, rnd: int) -> dict[str, Any]:
        self._seq += 1
        env = {**self.env, **cfg.env_dict}
        with contextlib.ExitStack() as stack:
            if cfg.kind == LIVE:  # a first start every round: its own empty plan cache and lease
                env.update(enable_env(stack.enter_context(tempfile.TemporaryDirectory(prefix="tf_autopar_live_")), 1))
            group = stack.enter_context(self._group(cfg.name.replace("/", "_").replace(":", "_")))
            res = run_child(cmd, env, self.options.timeout_s, cpus=cfg.cpus, group=group, validate=check_step_payload)
        return run_record(res, rnd, self._seq)


def sweep_records(live: Mapping[str, Any], swept: Mapping[str, str], rnd: int) -> dict[str, dict[str, Any]]:
    """The swept frozen configurations' runs of round ``rnd``, from that round's live run (its
    payload's ``sweep``, kept by run_record): each as a run of its own, failed with the live run's
    status (or "crash" when its setting is missing) and error when there is nothing to read."""
    sweep = live.get("sweep") or {}
    out = {}
    for name, setting in swept.items():
        got = sweep.get(setting) or {}
        times = [float(t) for t in got.get("step_times_s") or []]
        ok = live.get("status") == OK and bool(times)
        out[name] = {
            "round": rnd,
            "seq": live.get("seq"),
            "status": OK if ok else (live.get("status") if live.get("status") != OK else "crash"),
            "step_times_s": times if ok else [],
            "median_s": stats.median(times) if ok else None,
            "p10_s": None,
            "p90_s": None,
            "wall_s": 0.0,  # inside the live run's process (its wall_s counts it)
            "returncode": live.get("returncode"),
            "error": None if ok else (live.get("error") or f"the live run of round {rnd} timed no {setting}"),
            "stderr_tail": "" if ok else live.get("stderr_tail", ""),
            "cpu_stat": live.get("cpu_stat"),  # the live run's process and cgroup: its counters cover the sweep
            "swept_in": LIVE,
        }
    return out


def run_record(res: ChildResult, rnd: int, seq: int) -> dict[str, Any]:
    """One run as stored in the document (every raw step time kept)."""
    p = res.payload or {}
    times = [float(t) for t in p.get("step_times_s", [])] if res.status == OK else []
    rec: dict[str, Any] = {
        "round": rnd,
        "seq": seq,
        "status": res.status,
        "step_times_s": times,
        "median_s": stats.median(times) if times else None,
        "p10_s": p.get("p10_s"),
        "p90_s": p.get("p90_s"),
        "wall_s": round(res.wall_s, 3),
        "returncode": res.returncode,
        "error": res.error,
        "stderr_tail": res.stderr_tail if res.status != OK else "",
        "cpu_stat": res.cpu_stat,
    }
    for key in ("peak_rss_mb", "build_s", "losses", "path"):
        if key in p:
            rec[key] = p[key]
    if (p.get("settings") or {}).get("frozen_session"):
        rec["frozen_session"] = p["settings"]["frozen_session"]  # the session's own pools
    if p.get("sweep"):  # live with --sweep: the frozen sessions it timed (sweep_records reads them)
        rec["sweep"] = {k: {"step_times_s": v.get("step_times_s") or []} for k, v in p["sweep"].items()}
    if p.get("tf_autopar"):  # live: what the fast path served at the end, and how long tuning took
        rec["served"] = served_sessions(p["tf_autopar"])
        rec["engines"] = served_engines(p["tf_autopar"])
        rec["tuned_s"] = p["tf_autopar"].get("tuned_s")
        rec["switch_s"] = p["tf_autopar"].get("switch_s")
    return rec


__all__ = [
    "DEFAULT_RUNNER",
    "MODEL_RUNNER",
    "ChildPlanProvider",
    "Harness",
    "Options",
    "PlanProvider",
    "RowSpec",
    "distinct_slots",
    "fixed_plan_provider",
    "make_model_rows",
    "make_rows",
    "run_record",
    "runner_command",
]

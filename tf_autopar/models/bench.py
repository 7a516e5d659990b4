"""``tf-autopar bench``: how fast is MY model with these thread settings (benchmark_app for TF on CPU).

Every configuration runs in a fresh process (TensorFlow fixes its pools at start), round
robin (A B C A B C ...), so slow drift of a shared machine hits every configuration alike;
speedups are medians of per-round paired ratios (measure/stats.py). The processes are
started with measure/runner.py (own session, timeout, nothing left behind on Ctrl-C).

Configurations:
- ``default``: no thread variable at all (TensorFlow's default).
- ``plan``: tf_autopar's plan for the model at this batch (``ThreadPlan.to_env()`` and its
  CPU binding), computed once in a child process (``prepare``): this process never imports
  TensorFlow, which would compete for the CPUs it measures.
- ``enable``: the child calls ``tf_autopar.enable(mode=...)`` with no model before loading
  it, with an empty plan cache (``TF_AUTOPAR_CACHE_DIR``, fresh per run): a server's first start.
- ``enable-cached``: the same with a cache one unmeasured ``enable`` run filled: its next start.
- ``live``: ``enable`` fed calls until live tuning has tried the served setting's neighbours
  (runtime/fastpath/), then timed: what a server settles on.
- ``frozen``, ``frozen:INTERxINTRA``: no tf_autopar in the child; the model's frozen graph
  (variables folded into constants, as the fast path serves it) in one session with the plan's
  pools or these: the path ``enable()`` switches to, at a setting of your choice.
- ``INTERxINTRA``: TF_NUM_INTEROP_THREADS / TF_NUM_INTRAOP_THREADS (and, on OpenMP builds,
  OMP_NUM_THREADS = MKL_NUM_THREADS = intra); ``INTERxINTRAxOMP`` sets the OpenMP threads
  apart from TF's intra-op pool, ``:btMS`` KMP_BLOCKTIME and ``:compact`` compact KMP_AFFINITY
  (OpenMP builds only; measure/configs.parse_config).

Throughput mode runs the plan's instances as that many concurrent processes for *every*
configuration (the plan's bound to its CPU lists, the others unbound, as a user would start
N workers), starts their timed loops together (a file barrier after warm-up) and sums
their requests/s. ``enable`` processes then get ``TF_AUTOPAR_INSTANCES=N``. Every
``enable`` run uses a private lease directory, so processes of other programs on the host
do not change its share.
"""

from __future__ import annotations

import concurrent.futures
import datetime as _dt
import logging
import math
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import tf_autopar_workloads as workloads
from tf_autopar._model_path import looks_like_model
from tf_autopar._process_group import kill_group
from tf_autopar.measure import stats
from tf_autopar.measure.child import EXIT_BAD_INPUT
from tf_autopar.measure.configs import parse_config
from tf_autopar.measure.progress import Progress
from tf_autopar.measure.runner import OK, TRACKER, ChildResult, check_step_payload, clean_env, run_child
from tf_autopar.models.child import PREPARE_CHILD, RUN_CHILD, frozen_pools
from tf_autopar.models.load import model_kind
from tf_autopar.models.options import ModelOptions
from tf_autopar.planning.modes import INFERENCE_MODES
from tf_autopar.topology import detect_topology

log = logging.getLogger("tf_autopar.models")

SCHEMA_VERSION = 1
MODES = INFERENCE_MODES  # a model file has no training step
FROZEN, LIVE = "frozen", "live"  # the frozen graph at the plan's pools; enable() once live tuning decided
#: Other engines on the model's frozen graph (runtime/fastpath/engines/; the ``engines`` extra), and
#: ``tf-frozen``, TensorFlow's session on it (the same as ``frozen``), at the plan's CPU budget.
ENGINES = ("tf-frozen", "openvino", "onnxruntime", "openvino-bf16")
SPECIAL = ("default", "plan", "enable", "enable-cached", FROZEN, LIVE, *ENGINES)
FROZEN_PREFIX = f"{FROZEN}:"  # frozen:INTERxINTRA, the frozen graph in a session with these pools
DEFAULT_COMPARE = ("default", "plan")
DEFAULT_REQUESTS = 50
DEFAULT_WARMUP = 5
DEFAULT_ROUNDS = 3
DEFAULT_TIMEOUT_S = 600.0
PREPARE_TIMEOUT_S = 900.0
BARRIER_TIMEOUT_S = 600.0
# A session's own intra-op pool needs TensorFlow's global pool overridden at start.
FROZEN_ENV = (("TF_OVERRIDE_GLOBAL_THREADPOOL", "1"),)


@dataclass(frozen=True)
class BenchConfig:
    name: str
    kind: str  # "default", "plan", "enable", "enable-cached", "live", "frozen", "threads"
    env: tuple[tuple[str, str], ...] = ()
    cpus: tuple[tuple[int, ...], ...] = ()  # per instance; () = unbound
    frozen: str = ""  # kind "frozen": the session's pools, "INTERxINTRA"
    engine: str = ""  # kind "frozen": another engine than TensorFlow's session runs the frozen graph

    @property
    def enable(self) -> bool:
        return self.kind in ("enable", "enable-cached", "live")

    def to_dict(self) -> dict[str, Any]:
        out = {"kind": self.kind, "env": dict(self.env), "cpus": [list(c) for c in self.cpus]}
        if self.engine:
            out["engine"] = self.engine
        return {**out, "frozen": self.frozen} if self.frozen else out


def frozen_setting(name: str) -> str:
    """'frozen:2x1' -> '2x1'; ValueError naming the problem."""
    try:
        inter, intra = frozen_pools(name[len(FROZEN_PREFIX) :])
    except ValueError:
        raise ValueError(
            f"--compare: {name!r}: the frozen path's pools are frozen:INTERxINTRA, e.g. frozen:2x1"
        ) from None
    return f"{inter}x{intra}"


def parse_compare(text: str, *, openmp: bool = True) -> tuple[str, ...]:
    """'default,plan,1x2' -> the names, checked; ValueError naming the bad one.

    ``openmp=False`` also refuses OpenMP settings (``1x1x2``, ``:bt1``), which change nothing
    on a build without OpenMP.
    """
    names = tuple(n.strip().lower() for n in text.split(",") if n.strip())
    if not names:
        raise ValueError("--compare needs at least one configuration")
    for n in names:
        if n.startswith(FROZEN_PREFIX):
            frozen_setting(n)
        elif n not in SPECIAL:
            try:
                parse_config(n, openmp=openmp)
            except ValueError as exc:
                raise ValueError(f"--compare: {exc}; or one of {', '.join(SPECIAL)}") from None
    if len(set(names)) != len(names):
        raise ValueError(f"--compare lists a configuration twice: {','.join(names)}")
    return names


@dataclass(frozen=True)
class BenchOptions:
    model: str
    batch: int = 1
    mode: str = "latency"
    requests: int | None = None  # per run; None: DEFAULT_REQUESTS unless time_s
    time_s: float | None = None
    warmup: int = DEFAULT_WARMUP
    rounds: int = DEFAULT_ROUNDS
    compare: tuple[str, ...] = DEFAULT_COMPARE
    size: str = "tiny"  # bundled workloads only
    streams: int | None = None  # throughput: instances to plan (None: the planner's choice)
    timeout_s: float = DEFAULT_TIMEOUT_S
    model_options: ModelOptions = field(default_factory=ModelOptions)

    def check(self) -> None:
        """ValueError naming the bad option; pure (no process, no TensorFlow)."""
        if self.batch < 1:
            raise ValueError(f"--batch must be a positive integer, got {self.batch}")
        if self.mode not in MODES:
            raise ValueError(f"--mode must be one of {', '.join(MODES)}, got {self.mode!r}")
        if self.requests is not None and self.time_s is not None:
            raise ValueError("give --requests or --time, not both")
        if self.requests is not None and self.requests < 1:
            raise ValueError(f"--requests must be a positive integer, got {self.requests}")
        if self.time_s is not None and not self.time_s > 0:
            raise ValueError(f"--time must be a positive number of seconds, got {self.time_s}")
        if self.warmup < 0:
            raise ValueError(f"--warmup must be >= 0, got {self.warmup}")
        if self.rounds < 1:
            raise ValueError(f"--rounds must be at least 1, got {self.rounds}")
        if self.streams is not None and self.streams < 1:
            raise ValueError(f"--streams must be a positive integer, got {self.streams}")
        if self.streams is not None and self.mode != "throughput":
            raise ValueError("--streams applies to --mode throughput")
        if not self.timeout_s > 0:
            raise ValueError(f"--timeout must be positive, got {self.timeout_s}")
        parse_compare(",".join(self.compare))
        if looks_like_model(self.model):
            model_kind(self.model)  # missing path, not a model: ValueError before any process starts
        else:
            workloads.module_path(self.model)  # ValueError listing the bundled names
            if self.model_options.given:
                raise ValueError(
                    "--signature, --input-shape, --int-max and --inputs apply to model files, "
                    f"not to the bundled workload {self.model!r}"
                )

    @property
    def steps(self) -> int:
        return self.requests if self.requests is not None else DEFAULT_REQUESTS

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "batch": self.batch,
            "mode": self.mode,
            "requests": None if self.time_s is not None else self.steps,
            "time_s": self.time_s,
            "warmup": self.warmup,
            "rounds": self.rounds,
            "compare": list(self.compare),
            "size": self.size,
            "streams": self.streams,
            "timeout_s": self.timeout_s,
            "model_options": self.model_options.to_dict(),
        }


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def _tail(text: str, n: int = 400) -> str:
    text = (text or "").strip()
    return text[-n:]


def _model_path(model: str) -> str:
    return os.path.abspath(os.path.expanduser(model)) if looks_like_model(model) else model


class Bench:
    """One benchmark: prepare (describe + plan, in a child), then the interleaved rounds."""

    def __init__(
        self,
        options: BenchOptions,
        *,
        topology: Any = None,
        progress: Progress | None = None,
        child: Sequence[str] = RUN_CHILD,
    ) -> None:
        options.check()
        self.options = options
        self.model = _model_path(options.model)
        if topology is None:
            topology = detect_topology()
        self.topology = topology
        self.openmp = getattr(topology, "threading_runtime", None) == "openmp"
        parse_compare(",".join(options.compare), openmp=self.openmp)  # OpenMP settings on a build without it
        self.progress = progress
        self.child = tuple(child)
        self.env, self.scrubbed = clean_env()
        self.env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        self.prepared: dict[str, Any] | None = None
        if progress is not None:  # prepare + every run + the cache-filling run
            progress.set_total(1 + options.rounds * len(options.compare) + ("enable-cached" in options.compare))
        self._tmp = tempfile.mkdtemp(prefix="tf_autopar_bench_")
        self._seq = 0

    def close(self) -> None:
        shutil.rmtree(self._tmp, ignore_errors=True)

    def __enter__(self) -> "Bench":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ---------------------------------------------------------------- preparing

    def _model_args(self) -> list[str]:
        return self.options.model_options.child_args()

    def prepare(self) -> dict[str, Any]:
        """Describe the inputs and plan, in a child; ValueError with the child's message on bad input."""
        o = self.options
        self.prepared = prepare_in_child(
            self.model,
            batch=o.batch,
            plan_mode=o.mode,
            size=o.size,
            streams=o.streams,
            model_options=o.model_options,
            env=self.env,
        )
        if self.progress is not None:
            self.progress.update("model loaded and planned")
        return self.prepared

    @property
    def instances(self) -> int:
        """Concurrent processes per configuration: the plan's instances in throughput mode, else 1."""
        if self.options.mode != "throughput" or not self.prepared:
            return 1
        return max(1, int(self.prepared["plan"].get("instances") or 1))

    def configs(self) -> list[BenchConfig]:
        if self.prepared is None:
            raise RuntimeError("prepare() first")
        out = []
        for name in self.options.compare:
            if name == "default":
                out.append(BenchConfig(name, "default"))
            elif name == "plan":
                plan = self.prepared["plan"]
                cpus = tuple(tuple(int(c) for c in group) for group in plan.get("cpus") or ())
                env = tuple(sorted((str(k), str(v)) for k, v in (self.prepared.get("env") or {}).items()))
                out.append(BenchConfig(name, "plan", env, cpus))
            elif name in ("enable", "enable-cached", "live"):
                out.append(BenchConfig(name, name))
            elif name in ("frozen", "tf-frozen"):  # at the plan's pools, as the fast path's first session
                plan = self.prepared["plan"]
                setting = f"{max(1, int(plan.get('inter_op') or 1))}x{max(1, int(plan.get('intra_op') or 1))}"
                out.append(BenchConfig(name, "frozen", FROZEN_ENV, frozen=setting))
            elif name in ENGINES:  # as the fast path tries it: the plan's CPUs in one stream
                plan = self.prepared["plan"]
                budget = max(1, int(plan.get("inter_op") or 1)) * max(1, int(plan.get("intra_op") or 1))
                out.append(BenchConfig(name, "frozen", FROZEN_ENV, frozen=f"1x{budget}", engine=name))
            elif name.startswith(FROZEN_PREFIX):
                out.append(BenchConfig(name, "frozen", FROZEN_ENV, frozen=frozen_setting(name)))
            else:
                out.append(BenchConfig(name, "threads", parse_config(name, openmp=self.openmp).env))
        return out

    # ---------------------------------------------------------------- running

    def new_document(self) -> dict[str, Any]:
        t = self.topology
        p = self.prepared or {}
        cpu = getattr(t, "cpu", None)
        return {
            "schema": SCHEMA_VERSION,
            "tool": "tf-autopar bench",
            "started": _now(),
            "finished": None,
            "interrupted": False,
            "host": {
                "cpu_model": getattr(cpu, "model", "unknown"),
                "cpu_vendor": getattr(cpu, "vendor", "unknown"),
                "logical_cpus": t.logical_cpus,
                "physical_cores": t.physical_cores,
                "affinity": list(t.affinity),
                "cpu_budget": t.cpu_budget,
                "quota_cpus": t.quota.cpus if t.quota else None,
                "threading_runtime": t.threading_runtime,
                "tf_version": p.get("tf_version"),
            },
            "topology": t.to_dict(),
            "options": self.options.to_dict(),
            "model": p.get("model"),
            "batch": p.get("batch", self.options.batch),
            "inputs": p.get("inputs"),
            "assumptions": p.get("assumptions"),
            "plan": {k: p.get(k) for k in ("plan_mode", "plan", "env", "explain", "profile", "profile_note")},
            "instances": self.instances,
            "scrubbed_env": self.scrubbed,
            "fill_run": None,
            "order": [],
            "configs": {},
            "summary": {},
        }

    def run(self) -> dict[str, Any]:
        """prepare() (if not done), then every round; Ctrl-C keeps what was measured (``interrupted``)."""
        if self.prepared is None:
            self.prepare()
        configs = self.configs()
        doc = self.new_document()
        doc["order"] = [c.name for c in configs]
        for c in configs:
            doc["configs"][c.name] = {**c.to_dict(), "runs": []}
        filled: str | None = None
        try:
            if any(c.kind == "enable-cached" for c in configs):
                filled, doc["fill_run"] = self._fill_cache(configs)
            for r in range(1, self.options.rounds + 1):
                for c in configs:
                    run = self._run_config(c, r, filled, doc["fill_run"])
                    doc["configs"][c.name]["runs"].append(run)
                    if self.progress is not None:
                        self.progress.update(f"round {r}/{self.options.rounds} {c.name}: {_run_label(run)}")
        except KeyboardInterrupt:
            doc["interrupted"] = True
            log.warning("interrupted: keeping what was measured so far")
        finally:
            doc["finished"] = _now()
            doc["summary"] = summarize(doc)
            if self.progress is not None:
                self.progress.close()
        return doc

    def run_once(self, cfg: BenchConfig, rnd: int) -> dict[str, Any]:
        """One run of ``cfg`` outside run()'s rounds (the tuner picks what runs in each round)."""
        return self._run_config(cfg, rnd, None, None)

    def _fill_cache(self, configs: Sequence[BenchConfig]) -> tuple[str, dict[str, Any]]:
        """One unmeasured ``enable`` start that fills a plan cache (what enable-cached starts from)."""
        cache_dir = os.path.join(self._tmp, "filled-cache")
        os.makedirs(cache_dir)
        cfg = BenchConfig("enable (filling the cache)", "enable")
        run = self._run_config(cfg, 0, None, None, cache_dir=cache_dir)
        if self.progress is not None:
            self.progress.update(f"enable-cached: cache filled ({run['status']})")
        files = sorted(os.listdir(cache_dir))
        run["cache_files"] = files
        return cache_dir, run

    def _command(self, cfg: BenchConfig) -> list[str]:
        o = self.options
        cmd = [
            *self.child,
            self.model,
            "--mode",
            "infer",
            "--batch",
            str(o.batch),
            "--steps",
            str(o.steps),
            "--size",
            o.size,
            "--warmup",
            str(o.warmup),
            "--json",
        ]
        if o.time_s is not None:
            cmd += ["--time", repr(o.time_s)]
        if cfg.enable:
            cmd += ["--enable", o.mode]
        if cfg.kind == "live":
            cmd += ["--until-tuned"]
        if cfg.frozen:
            cmd += ["--frozen", cfg.frozen]
        if cfg.engine:
            cmd += ["--engine", cfg.engine]
        return cmd + self._model_args()

    def _run_config(
        self,
        cfg: BenchConfig,
        rnd: int,
        filled: str | None,
        fill_run: Mapping[str, Any] | None,
        cache_dir: str | None = None,
    ) -> dict[str, Any]:
        """One configuration once: ``instances`` concurrent processes (1 in latency mode)."""
        self._seq += 1
        seq = self._seq
        n = self.instances
        workdir = tempfile.mkdtemp(prefix=f"run{seq}-", dir=self._tmp)
        env = {**self.env, **dict(cfg.env)}
        if cfg.enable:
            if cache_dir is None and cfg.kind == "enable-cached":
                if filled is None or not fill_run or fill_run.get("status") != OK:
                    shutil.rmtree(workdir, ignore_errors=True)
                    return _failed_run(rnd, seq, "the unmeasured enable run that fills the cache failed")
                cache_dir = os.path.join(workdir, "cache")
                shutil.copytree(filled, cache_dir)  # every run starts from the same second-start cache
            env.update(enable_env(workdir, n, cache_dir))
        cmd = self._command(cfg)
        try:
            if n == 1:
                cpus = cfg.cpus[0] if cfg.cpus else ()
                results = [run_child(cmd, env, self.options.timeout_s, cpus=cpus, validate=check_step_payload)]
            else:
                results = self._run_streams(cmd, env, cfg, n, workdir)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)  # the fill run's cache lives outside it
        return run_record(results, rnd, seq, self.options.batch)

    def _run_streams(
        self, cmd: list[str], env: dict[str, str], cfg: BenchConfig, n: int, workdir: str
    ) -> list[ChildResult]:
        """``n`` processes at once, timed loops started together; one failure aborts the others' wait."""
        barrier = os.path.join(workdir, "barrier")
        os.makedirs(barrier)
        env = {**env, "TF_AUTOPAR_BENCH_BARRIER": f"{barrier}|{n}|{BARRIER_TIMEOUT_S:g}"}

        def one(i: int) -> ChildResult:
            cpus = cfg.cpus[i] if i < len(cfg.cpus) else ()
            res = run_child(cmd, env, self.options.timeout_s, cpus=cpus, validate=check_step_payload)
            if res.status != OK:
                with open(os.path.join(barrier, "abort"), "w"):
                    pass
            return res

        pool = concurrent.futures.ThreadPoolExecutor(max_workers=n)
        try:
            futures = [pool.submit(one, i) for i in range(n)]
            return [f.result() for f in futures]
        except KeyboardInterrupt:
            for pid in list(TRACKER.live):  # each child leads its own process group (run_child)
                kill_group(pid)
            raise
        finally:
            pool.shutdown(wait=True)


def enable_env(workdir: str, instances: int, cache_dir: str | None = None) -> dict[str, str]:
    """An ``enable()`` child's own lease directory and plan cache (empty unless ``cache_dir``: a
    server's first start) under ``workdir``, and its instance count (known: no rendezvous wait,
    even for one). Nothing of the user's cache, another run's or another program's share is read."""
    lease = os.path.join(workdir, "lease")
    os.makedirs(lease)
    if cache_dir is None:
        cache_dir = os.path.join(workdir, "cache")
        os.makedirs(cache_dir)
    return {"TF_AUTOPAR_LEASE_DIR": lease, "TF_AUTOPAR_CACHE_DIR": cache_dir, "TF_AUTOPAR_INSTANCES": str(instances)}


def served_sessions(status: Mapping[str, Any] | None) -> list[str]:
    """The fast path's frozen sessions (INTERxINTRA) serving at the end of a run, from the child's
    ``tf_autopar`` status: what live tuning settled on."""
    return sorted(
        {
            f"{b.get('inter_op')}x{b.get('intra_op')}"
            for s in (status or {}).get("served") or []
            for b in s.get("buckets") or []
            if b.get("path") == "frozen session"
        }
    )


def served_engines(status: Mapping[str, Any] | None) -> list[str]:
    """The engines (each runner's ``describe()["engine"]``) of the fast path's frozen sessions
    serving at the end of a run, from the child's ``tf_autopar`` status, as status() named them."""
    return sorted(
        {
            str(b["engine"])
            for s in (status or {}).get("served") or []
            for b in s.get("buckets") or []
            if b.get("path") == "frozen session" and b.get("engine")
        }
    )


def prepare_in_child(
    model: str,
    *,
    batch: int,
    plan_mode: str = "latency",
    size: str = "tiny",
    streams: int | None = None,
    model_options: ModelOptions | None = None,
    env: Mapping[str, str] | None = None,
    child: Sequence[str] = PREPARE_CHILD,
) -> dict[str, Any]:
    """``child prepare``: load ``model`` in a fresh process, check and describe its inputs, plan it.

    ValueError with the child's own message when the input is bad (missing or corrupt file,
    no signatures, string inputs, a wrong --input-shape ...): nothing has been measured yet.
    """
    if env is None:
        env, _ = clean_env()
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    cmd = [
        *child,
        model,
        "--batch",
        str(batch),
        "--plan-mode",
        plan_mode,
        "--size",
        size,
        *(model_options or ModelOptions()).child_args(),
    ]
    if streams is not None:
        cmd += ["--streams", str(streams)]
    res = run_child(cmd, env, PREPARE_TIMEOUT_S)
    payload = res.payload
    if res.status != OK or payload is None or not payload.get("ok"):
        if res.returncode == EXIT_BAD_INPUT:  # the child's "bad input" exit: its message is the user's error
            raise ValueError(res.reported or f"{model}: the model could not be prepared")
        raise RuntimeError(f"preparing {model} failed ({res.status}: {res.error}): {_tail(res.stderr_tail)}")
    return payload


def _failed_run(rnd: int, seq: int, error: str) -> dict[str, Any]:
    return {
        "round": rnd,
        "seq": seq,
        "status": "crash",
        "error": error,
        "processes": [],
        "step_times_s": [],
        "median_s": None,
        "throughput_rps": None,
        "items_per_s": None,
    }


def run_record(results: Sequence[ChildResult], rnd: int, seq: int, batch: int) -> dict[str, Any]:
    """One configuration's run as stored: every process's raw request times and settings."""
    procs = []
    for res in results:
        p = res.payload or {}
        procs.append(
            {
                "status": res.status,
                "pid": res.pid,
                "returncode": res.returncode,
                "wall_s": round(res.wall_s, 3),
                "error": res.error,
                "stderr_tail": res.stderr_tail if res.status != OK else "",
                "step_times_s": [float(t) for t in p.get("step_times_s", [])] if res.status == OK else [],
                "requests": p.get("requests"),
                "loop_s": p.get("loop_s"),
                "throughput_rps": p.get("throughput_rps"),
                "load_s": p.get("load_s"),
                "settings": p.get("settings"),
                "tf_autopar": p.get("tf_autopar"),
                "peak_rss_mb": p.get("peak_rss_mb"),
                "barrier_wait_s": p.get("barrier_wait_s"),
            }
        )
    ok = bool(procs) and all(pr["status"] == OK for pr in procs)
    times = [t for pr in procs for t in pr["step_times_s"]] if ok else []
    rps = sum(pr["throughput_rps"] or 0.0 for pr in procs) if ok else None
    status = OK if ok else next((pr["status"] for pr in procs if pr["status"] != OK), "crash")
    error = "" if ok else next((f"process {i}: {pr['error']}" for i, pr in enumerate(procs) if pr["status"] != OK), "")
    return {
        "round": rnd,
        "seq": seq,
        "status": status,
        "error": error,
        "processes": procs,
        "step_times_s": times,
        "median_s": stats.median(times) if times else None,
        "throughput_rps": rps,
        "items_per_s": rps * batch if rps is not None else None,
    }


def _run_label(run: Mapping[str, Any]) -> str:
    if run["status"] == OK and run.get("median_s"):
        return f"{run['median_s'] * 1e3:.3g} ms"
    return run["status"].upper()


def _clean(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else x


def settings_of(config: Mapping[str, Any]) -> dict[str, Any] | None:
    """The effective settings of the first clean run's processes (inter x intra, variables, CPUs, source)."""
    for run in config.get("runs", []):
        if run.get("status") != OK:
            continue
        per = [pr.get("settings") or {} for pr in run.get("processes", [])]
        if not per:
            continue
        first = per[0]
        out = {
            "inter_op": first.get("inter_op"),
            "intra_op": first.get("intra_op"),
            "env": first.get("env", {}),
            "cpus": [pr.get("cpus") for pr in per],
            "inter_source": first.get("inter_source"),
            "intra_source": first.get("intra_source"),
            "tf_compute_threads": first.get("tf_compute_threads"),
            "openmp": first.get("openmp"),
            "processes": len(per),
        }
        if first.get("frozen_session"):
            out["frozen_session"] = first["frozen_session"]
        served = served_sessions(run["processes"][0].get("tf_autopar"))
        if served:
            out["served"] = served  # the fast path's sessions at the end of the run
        tfa = (run["processes"][0].get("tf_autopar") or {}).get("process")
        if tfa:
            out["tf_autopar"] = {
                k: tfa.get(k)
                for k in (
                    "phase",
                    "source",
                    "planned_inter",
                    "planned_intra",
                    "running_inter",
                    "running_intra",
                    "bound_cpus",
                )
            }
        return out
    return None


def summarize(doc: Mapping[str, Any]) -> dict[str, Any]:
    """Per configuration: latency quantiles over every request, throughput, speedup over default. Pure."""
    throughput_mode = doc.get("options", {}).get("mode") == "throughput"
    batch = int(doc.get("batch") or doc.get("options", {}).get("batch") or 1)
    per_round: dict[str, dict[int, float]] = {}
    out: dict[str, Any] = {}
    for name, cfg in doc["configs"].items():
        runs = cfg.get("runs", [])
        ok = [r for r in runs if r.get("status") == OK]
        times = [t for r in ok for t in r.get("step_times_s", [])]
        rps = {int(r["round"]): float(r["throughput_rps"]) for r in ok if r.get("throughput_rps")}
        med = {int(r["round"]): float(r["median_s"]) for r in ok if r.get("median_s")}
        # the per-round figure speedups pair on: median latency, or (throughput mode) seconds per request
        per_round[name] = {k: 1.0 / v for k, v in rps.items() if v > 0} if throughput_mode else med
        rps_spread = stats.Spread.of(list(rps.values()))
        out[name] = {
            "status": "not-run" if not runs else "ok" if len(ok) == len(runs) else "partial" if ok else "failed",
            "rounds": len(runs),
            "rounds_ok": len(ok),
            "requests": len(times),
            "latency_s": {
                "p50": _clean(stats.quantile(times, 0.5)),
                "p90": _clean(stats.quantile(times, 0.9)),
                "p99": _clean(stats.quantile(times, 0.99)),
                "mean": _clean(sum(times) / len(times)) if times else None,
                "min": min(times) if times else None,
            },
            "round_medians_s": stats.Spread.of(list(med.values())).to_dict(),
            "throughput_rps": rps_spread.to_dict(),
            "items_per_s": _clean(rps_spread.median * batch) if rps_spread.n else None,
            "settings": settings_of(cfg),
            "speedup_vs_default": None,
            "errors": [r.get("error") for r in runs if r.get("status") != OK][:3],
        }
    if "default" in per_round:
        for name in out:
            if name != "default" and per_round[name] and per_round["default"]:
                out[name]["speedup_vs_default"] = stats.Comparison.of(per_round["default"], per_round[name]).to_dict()
    return out


__all__ = [
    "Bench",
    "BenchConfig",
    "BenchOptions",
    "DEFAULT_COMPARE",
    "FROZEN",
    "FROZEN_ENV",
    "FROZEN_PREFIX",
    "LIVE",
    "enable_env",
    "frozen_setting",
    "parse_compare",
    "prepare_in_child",
    "run_record",
    "served_sessions",
    "summarize",
]

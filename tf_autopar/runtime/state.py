"""What enable() applied, where: plain records plus the one mutable registry that holds them.

Records are frozen dataclasses so ``status()`` hands out a consistent snapshot; the
registry (``STATE``) is the only mutable object and is guarded by a lock because sessions
and functions can be created from several threads. It is the one owner of this process's
state, the host it plans for included: the host topology (detected once) and this process's
share of it, which every plan of the process is made for (runtime/plans.py reads them).

It sits at the bottom of runtime/: of the runtime modules it imports only applied.py (the
record) and records.py (the per-session and per-function records, defined on first use), never
one that imports it.
"""

from __future__ import annotations

import dataclasses
import os
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from tf_autopar import _warn
from tf_autopar.planning.modes import INFERENCE_MODES
from tf_autopar.runtime.applied import Applied
from tf_autopar.topology import detect_topology
from tf_autopar.topology.cpulist import format_cpulist

if TYPE_CHECKING:
    from tf_autopar.graph.profile import GraphProfile
    from tf_autopar.runtime.records import FunctionRecord, LimitsRecord, MemoryRecord, ServedRecord, SessionRecord
    from tf_autopar.topology.model import Topology


@dataclass(frozen=True)
class ProcessRecord:
    """The process-wide pools: what was planned and what could really be applied."""

    phase: str  # "before-start": pools set before TF started; "after-start": too late (planned for the next start)
    planned_inter: int
    planned_intra: int
    applied: dict[str, str] = field(default_factory=dict)  # env variables tf_autopar set
    kept_user: dict[str, str] = field(default_factory=dict)  # user's variables left as they were
    not_applied: tuple[str, ...] = ()  # what could not be applied, and why
    running_inter: int = 0  # pools the process really runs with (0 = unknown)
    running_intra: int = 0
    per_session_intra: bool = False  # TF_OVERRIDE_GLOBAL_THREADPOOL was in force at start
    source: str = ""  # where the plan came from: "host", "model: ...", "cache: <fingerprint>"
    explain: str = ""
    share: dict[str, Any] | None = None  # this process's share of the host (coordination.Share.to_dict())
    bound_cpus: tuple[int, ...] = ()  # CPUs the process was bound to before TF started (() = not bound)
    tf_default: int = 0  # threads per pool TensorFlow would have picked itself (0 = unknown)
    origin: str = ""  # where the planned numbers came from: the rule, or `tune`'s measurement (its note)
    pid: int = field(default_factory=os.getpid)  # the process the record was made in


@dataclass(frozen=True)
class Status:
    enabled: bool
    mode: str = ""
    process: ProcessRecord | None = None
    sessions: tuple[SessionRecord, ...] = ()
    functions: tuple[FunctionRecord, ...] = ()
    served: tuple[ServedRecord, ...] = ()  # loaded models' functions on the fast path (fastpath.py)
    patches: tuple[str, ...] = ()  # hooks installed right now
    warnings: tuple[str, ...] = ()  # every warning tf_autopar issued in this process
    enable_ms: float = 0.0
    disabled_by: str = ""  # "TF_AUTOPAR_DISABLE=1" when the kill switch kept enable() from changing anything
    limits: LimitsRecord | None = None  # the CPU limits changed while running (quota_watch.py)
    memory: MemoryRecord | None = None  # the cgroup memory limit the fast path builds under (fastpath/memory.py)
    fast_path: bool = False  # enable()'s fast path is on (an inference mode, not optimize=False)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def text(self) -> str:
        """What was planned and applied, in which process, against TensorFlow's default, and what
        to do next, in a user's words. Hook names, phases and fingerprints stay in to_dict()."""
        from tf_autopar.runtime.records import user_function_name  # records: defined on first use (see __getattr__)

        if self.disabled_by:
            return (
                f"tf_autopar: switched off by {self.disabled_by}; enable() changed nothing and TensorFlow runs "
                "with its own settings"
            )
        if not self.enabled and not self.sessions and not self.functions:
            return "tf_autopar: not enabled (call tf_autopar.enable() before the first TensorFlow op)"
        p = self.process
        pid = p.pid if p is not None else os.getpid()
        lines = [f"tf_autopar: {'enabled' if self.enabled else 'disabled'} in process {pid}, {self.mode} mode"]
        todo: list[str] = []
        if p is not None:
            planned = _threads(p.planned_inter, p.planned_intra)
            lines.append(f"  planned: {planned}, for {_source_words(p.source)}")
            if p.origin:
                lines.append(f"    the numbers: {p.origin}")
            if p.phase == "after-start":
                lines.append("  applied: not to the process pools: TensorFlow had already started and fixed them")
                todo.append(
                    "call tf_autopar.enable() before the first TensorFlow op (after `import tensorflow` is "
                    "fine), or start the program with `tf-autopar run -- python ...`"
                )
            else:
                how = " ".join(f"{k}={v}" for k, v in sorted(p.applied.items())) or "nothing needed setting"
                lines.append(f"  applied before TensorFlow started: {how}")
                if p.applied:
                    lines.append(
                        "    (tf.config.threading.get_*_parallelism_threads() report 0 for settings made "
                        "this way: TensorFlow read them from the environment)"
                    )
            if p.kept_user:
                lines.append("  kept yours: " + " ".join(f"{k}={v}" for k, v in sorted(p.kept_user.items())))
            for item in p.not_applied:
                lines.append(f"  not applied: {item}")
            if p.running_inter:
                lines.append(
                    f"  TensorFlow runs {_threads(p.running_inter, p.running_intra)}; its default here: "
                    + (
                        _threads(p.tf_default, p.tf_default) + " (one per CPU it may use)"
                        if p.tf_default
                        else "one thread per CPU it may use, in each pool"
                    )
                )
            if p.bound_cpus:
                lines.append("  bound to CPUs " + format_cpulist(p.bound_cpus))
            if p.share is not None and p.share.get("count", 1) > 1:
                lines.append(
                    f"  one of {p.share.get('count')} processes sharing this host: worker "
                    f"{p.share.get('index')} ({p.share.get('note', '')})"
                )
            if p.source == "host" and p.phase != "after-start":
                todo.append(
                    "to plan for your model, pass it: tf_autopar.enable('path/to/saved_model'), or load it "
                    "with tf.saved_model.load / keras.models.load_model after enable(); enable(batch=N) "
                    "gives its batch"
                )
        if self.limits is not None:
            pools = self.limits.process_pools or "what TensorFlow started them with"
            lines.append(
                f"  CPU limits changed while running ({self.limits.what}, seen at {self.limits.at}): "
                f"process pools stay at {pools}; the quota is now {self.limits.quota} (plans for "
                f"{self.limits.budget} CPU{'' if self.limits.budget == 1 else 's'}); frozen sessions follow it"
            )
            todo.append("restart the process for its process pools to follow the new CPU limits")
        if self.memory is not None:
            m = self.memory
            lines.append(
                f"  memory: cgroup v{m.cgroup_version} limit {m.limit} ({m.path}); {m.room} left "
                f"(working set {m.working_set}); fast-path builds keep a {m.margin} margin"
                + (f"; builds paused and candidate sessions closed: {m.paused}" if m.paused else "")
            )
        if self.patches:
            lines.append("  watching: " + ", ".join(_HOOK_WORDS.get(h.split(" (")[0], h) for h in self.patches))
        for rec in self.sessions:
            pools = "its own pools" if rec.per_session_threads else "the process pools"
            intra = "" if rec.intra_per_session else " (intra-op: the process pool)"
            lines.append(
                f"  TF1 session {rec.session.rsplit('#', 1)[-1]}: {_ops(rec.heavy_ops)}, width {rec.avg_width} -> "
                f"{_threads(rec.inter_op, rec.intra_op)}, {pools}{intra}"
                + (f"; kept yours: {', '.join(rec.user_fields)}" if rec.user_fields else "")
                + (f"; {rec.note}" if rec.note else "")
            )
        for f in self.functions:
            best = _threads(f.planned_inter, f.planned_intra)
            if f.matches_process:
                lines.append(
                    f"  {user_function_name(f.name)}: {_ops(f.heavy_ops)}, width {f.avg_width} -> {best}, "
                    "as the process runs"
                )
                continue
            lines.append(
                f"  {user_function_name(f.name)}: {_ops(f.heavy_ops)}, width {f.avg_width} -> best at "
                f"{best}, but the process pools were already fixed"
                + ("; the plan is saved for the next start" if f.cached else "")
            )
            todo.append(
                "for inference now: fast = tf_autopar.optimize(model) runs it with its own plan"
                + ("; the next start of this program applies the saved plan" if f.cached else "")
            )
        lines.extend(_all_served_lines(self.served))
        advised = any("tf_autopar.optimize(model)" in t for t in todo)  # said once is enough
        if self.fast_path and not advised and _unrouted_keras(self.functions, self.served):
            todo.append(
                "a Keras model ran its predict/fit/evaluate step while no Keras model is on the fast path: "
                "a model loaded before tf_autopar.enable() (or by a loader it does not hook, or built in code) "
                "runs TensorFlow's usual path; for inference, fast = tf_autopar.optimize(model) serves it "
                "from a frozen graph"
            )
        for w in self.warnings:
            lines.append(f"  warning: {w}")
        for item in dict.fromkeys(todo):  # each once, in order
            lines.append(f"  next: {item}")
        return "\n".join(lines)

    __str__ = text


_HOOK_WORDS = {
    "tf.compat.v1.Session": "new TF1 sessions (each planned for its own graph)",
    "tf.function first trace": "tf.function and Keras models (each planned at its first call)",
    "model loading": "model loads (tf.saved_model.load, keras.models.load_model, keras.layers.TFSMLayer)",
}


def _all_served_lines(served: tuple[ServedRecord, ...]) -> list[str]:
    """Each routed function's lines; a model's functions never called, where another of the same
    model has calls (a Keras export's ``serve`` beside the ``serving_default`` signature the
    program calls), on one line after the others: a "no calls yet" beside thousands of calls reads
    as if the program's calls were missed."""
    called = {s.model for s in served if s.calls or s.declined}
    idle: dict[str, list[str]] = {}
    lines: list[str] = []
    for s in served:
        if s.model in called and not (s.calls or s.declined or s.stopped):
            idle.setdefault(s.model, []).append(s.function)
        else:
            lines.extend(_served_lines(s))
    for model, functions in idle.items():
        lines.append(f"  also routed, not called yet, of {model}: {', '.join(functions)}")
    return lines


def _served_lines(served: ServedRecord) -> list[str]:
    """A routed function in a user's words: per batch bucket, which path serves it, with which
    pools, planned how, and measured how much faster than the original path."""
    not_routed = sum(n for _, n in served.declined)
    head = f"  {served.function} of {served.model}: " + (
        served.batches or ("none of its calls routed" if not_routed else "no calls yet")
    )
    lines = [head]
    if served.calls or not_routed:
        lines.append(f"    calls: {_call_words(served, not_routed)}")
    if served.stopped and served.stopped != "disabled":
        return [*lines, f"    original path: {served.stopped}"]
    for b in served.buckets:
        batch = f"batch {b.batch}" if b.batch else f"bucket {b.bucket}"
        if b.path == "frozen session":
            streams = f" in {b.streams} streams" if b.streams > 1 else ""
            runner = (
                f"{b.engine} ({b.engine_detail})"
                if b.engine and b.engine != "tensorflow"
                else f"frozen session, {_threads(b.inter_op, b.intra_op)}{streams}"
            )
            speed = (
                f", {b.speedup:.2f}x the original path's speed ({b.evidence or 'paired rounds'}, spread {b.spread:.2f}x)"
                if b.speedup
                else ""
            )
            lines.append(
                f"    {batch}: {runner} "
                f"(batch {b.batch}: {b.plan_source or 'planned by the rule'}){speed}"
                + (f", switched after {b.build_s:.1f} s" if b.build_s else "")
                + (f"; {b.reason}" if b.reason else "")
            )
            if b.tuning:
                lines.append(f"      {b.tuning}")
        elif b.path == "original":
            lines.append(f"    {batch}: original path: {b.reason}")
        else:
            lines.append(f"    {batch}: original path while its frozen session is {b.path}")
    return lines


def _unrouted_keras(functions: tuple[FunctionRecord, ...], served: tuple[ServedRecord, ...]) -> bool:
    """A Keras step function was traced and no Keras model is routed: the model it belongs to was
    not seen by the load hooks (a SavedModel loaded before enable() is never traced: docs/serving.md)."""
    from tf_autopar.runtime.records import KERAS_STEPS  # records: defined on first use (see __getattr__)

    return any(f.name.startswith(KERAS_STEPS) for f in functions) and not any(
        s.convention.startswith("keras") for s in served
    )


def _call_words(served: ServedRecord, not_routed: int) -> str:
    """Every call of a routed function by the path that answered it: "4,210 served by the frozen
    session, 35 by the original path, 312 calls positionally with a Python list: not routed"."""
    parts = []
    if served.calls:
        parts.append(
            f"{served.served:,} served by the frozen session, {served.calls - served.served:,} by the original path"
        )
    parts.extend(f"{n:,} call{'' if n == 1 else 's'} {reason}: not routed" for reason, n in served.declined)
    return "; ".join(parts) if parts else f"{not_routed:,} not routed"


def _threads(inter: int, intra: int) -> str:
    return f"{inter} inter-op x {intra} intra-op threads"


def _ops(n: int) -> str:
    return f"{n} heavy op{'' if n == 1 else 's'}"


def _source_words(source: str) -> str:
    """The plan's source as a user would say it ("host" -> "this host, no model given")."""
    if source == "host":
        return "this host (no model given)"
    if source.startswith("cache:"):
        from tf_autopar.runtime.records import user_function_name  # records: defined on first use (see __getattr__)

        name = source.split(":", 1)[1].strip().split(" (")[0]
        return f"the plan this program saved last time, for {user_function_name(name)}"
    return source


class Registry:
    """Mutable state behind status(); one per process (``STATE``)."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        # the host's own lock, not ``lock``: a thread that plans (a session, a fast-path build)
        # waits for the host's detection at most, never for the work enable() does under ``lock``
        self.topology_lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        self.host: Topology | None = None  # the host as this process found it, detected once (host_topology())
        self.share: Topology | None = None  # this process's share of the host, when it shares it with other workers
        self.enabled = False
        self.mode = ""
        self.streams: int | None = None
        self.use_cache = False
        self.fast_path = False  # enable(optimize=...): loaded models served from frozen sessions (fastpath.py)
        self.tune_live = False  # enable(tune_live=...): their per-session pools tuned on live calls
        self.precision = "f32"  # enable(precision=...): "bf16" lets reduced-precision engines compete
        self.batch: int | None = None  # what a model's None batch is read as (enable(batch=...))
        self.batch_given = False  # the user gave the batch (else it is assumed: graph/dims.py)
        self.applied = Applied()  # what enable() changed, undone by disable() (applied.py)
        self.process_profile: GraphProfile | None = (
            None  # the profile the process pools were planned for (None: host only)
        )
        self.process: ProcessRecord | None = None
        self.sessions: list[SessionRecord] = []
        self.functions: dict[tuple[str, str], FunctionRecord] = {}
        self.warnings: list[str] = _warn.ISSUED  # every tf_autopar warning of this process (_warn.py)
        self.warned_keys: set[str] = _warn.SEEN
        self.session_count = 0
        self.enable_ms = 0.0
        self.pid = 0  # the process that ran enable(); another pid here is a forked child
        self.forked_from: int | None = None  # set in a child forked after enable()
        self.disabled_by = ""  # the kill switch's setting when it stopped enable()

    def snapshot(self) -> Status:
        with self.lock:
            return Status(
                enabled=self.enabled,
                mode=self.mode,
                process=self.process,
                sessions=tuple(self.sessions),
                functions=tuple(self.functions.values()),
                served=_served_records(),
                patches=tuple(self.applied.hook_names()),
                warnings=tuple(self.warnings),
                enable_ms=self.enable_ms,
                disabled_by=self.disabled_by,
                limits=_limits_record(),
                memory=_memory_record(),
                fast_path=self.fast_path and self.mode in INFERENCE_MODES,
            )

    def next_session_name(self) -> str:
        with self.lock:
            self.session_count += 1
            return f"Session#{self.session_count}"

    def host_topology(self) -> Topology:
        """The host as this process found it: detected at the first call, then kept (use_host())."""
        with self.topology_lock:
            if self.host is None:
                self.host = detect_topology(cpu_details=False)
            return self.host

    def topology(self) -> Topology:
        """What every plan of this process is made for: its share of the host, else the host."""
        share = self.share
        return share if share is not None else self.host_topology()

    def use_share(self, topology: Topology | None) -> None:
        """Plan for ``topology``, this process's share of the host (share.py); None: the whole host again."""
        self.share = topology

    def use_host(self, topology: Topology) -> None:
        """The host under CPU limits that changed while running (runtime/quota_watch.py): later plans follow it."""
        with self.topology_lock:
            self.host = topology

    def reads_cache(self) -> bool:
        """Whether plans read what ``tune`` and ``calibrate`` measured from the plan cache: always
        outside enable() (the CLI, ``tune``, optimize() alone), else as enable(cache=...) said."""
        return not (self.enabled and not self.use_cache)


#: Parts of status() that modules above this one provide, by name: "served" (the fast path's
#: records), "limits" (quota_watch.py's), "memory" (fastpath/memory.py's). Each registers itself when imported (provide), so this
#: module imports nothing above it and never imports one just to say "none".
_providers: dict[str, Callable[[], Any]] = {}


def provide(name: str, fn: Callable[[], Any]) -> None:
    """``fn()`` gives status()'s part ``name`` from now on (a later provider of it replaces this one)."""
    _providers[name] = fn


def _served_records() -> tuple[ServedRecord, ...]:
    fn = _providers.get("served")
    return fn() if fn is not None else ()


def _limits_record() -> LimitsRecord | None:
    fn = _providers.get("limits")
    return fn() if fn is not None else None


def _memory_record() -> MemoryRecord | None:
    fn = _providers.get("memory")
    return fn() if fn is not None else None


STATE = Registry()


def __getattr__(name: str) -> Any:
    # The per-session and per-function records live in records.py, imported on first use: each
    # dataclass costs ~0.7 ms to define, and enable() should not pay for records it has not made.
    if name in ("SessionRecord", "FunctionRecord", "ServedRecord", "BucketRecord"):
        from tf_autopar.runtime import records

        return getattr(records, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

"""What enable() applied, where: plain records plus the one mutable registry that holds them.

Records are frozen dataclasses so ``status()`` hands out a consistent snapshot; the
registry (``STATE``) is the only mutable object and is guarded by a lock because sessions
and functions can be created from several threads.
"""
from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tf_autopar import _warn

if TYPE_CHECKING:
    from tf_autopar.runtime.records import FunctionRecord, SessionRecord


@dataclass(frozen=True)
class ProcessRecord:
    """The process-wide pools: what was planned and what could really be applied."""

    phase: str  # "before-start": pools set before TF started; "after-start": too late; "cached": plan from the cache
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


@dataclass(frozen=True)
class Status:
    enabled: bool
    mode: str = ""
    process: ProcessRecord | None = None
    sessions: tuple[SessionRecord, ...] = ()
    functions: tuple[FunctionRecord, ...] = ()
    patches: tuple[str, ...] = ()  # hooks installed right now
    warnings: tuple[str, ...] = ()  # every warning tf_autopar issued in this process
    enable_ms: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def text(self) -> str:
        if not self.enabled and not self.sessions and not self.functions:
            return "tf_autopar: not enabled"
        lines = [f"tf_autopar: {'enabled' if self.enabled else 'disabled'} (mode {self.mode})"]
        p = self.process
        if p is not None:
            running = f"running {p.running_inter}x{p.running_intra}" if p.running_inter else "running pools unknown"
            lines.append(
                f"process pools [{p.phase}]: planned inter_op={p.planned_inter} intra_op={p.planned_intra}; "
                f"{running}; source: {p.source}"
            )
            if p.applied:
                lines.append("  set: " + " ".join(f"{k}={v}" for k, v in sorted(p.applied.items())))
            if p.kept_user:
                lines.append("  kept yours: " + " ".join(f"{k}={v}" for k, v in sorted(p.kept_user.items())))
            for item in p.not_applied:
                lines.append(f"  not applied: {item}")
            lines.append(f"  per-session intra-op pools: {'yes' if p.per_session_intra else 'no'}")
            if p.share is not None and p.share.get("count", 1) > 1:
                lines.append(f"  share: worker {p.share.get('index')} of {p.share.get('count')} "
                             f"[{p.share.get('source')}]: {p.share.get('note', '')}")
            if p.bound_cpus:
                lines.append("  bound to CPUs " + ",".join(map(str, p.bound_cpus)))
        if self.patches:
            lines.append("hooks: " + ", ".join(self.patches))
        for s in self.sessions:
            lines.append(
                f"{s.session}: {s.graph_nodes} nodes, width {s.avg_width} ({s.heavy_ops} heavy ops) -> "
                f"inter_op={s.inter_op} intra_op={s.intra_op}"
                f"{' (per-session pools)' if s.per_session_threads else ''}"
                f"{'' if s.intra_per_session else ' (intra-op is the process pool)'}"
                f"{'; kept yours: ' + ', '.join(s.user_fields) if s.user_fields else ''}"
                f"{'; ' + s.note if s.note else ''}; analysis {s.analysis_ms:.1f} ms"
            )
        for f in self.functions:
            verdict = "matches the process pools" if f.matches_process else (
                "differs from the process pools: use tf_autopar.optimize()"
                + (", plan cached for the next start" if f.cached else "")
            )
            lines.append(
                f"function {f.name}: width {f.avg_width} ({f.heavy_ops} heavy ops) -> "
                f"inter_op={f.planned_inter} intra_op={f.planned_intra}, {verdict}; {f.traces} trace(s)"
            )
        for w in self.warnings:
            lines.append(f"warning: {w}")
        return "\n".join(lines)

    __str__ = text


class Registry:
    """Mutable state behind status(); one per process (``STATE``)."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.reset()

    def reset(self) -> None:
        self.enabled = False
        self.mode = ""
        self.streams: int | None = None
        self.use_cache = False
        self.batch: int | None = None  # what a model's None batch is read as (enable(batch=...))
        self.batch_given = False  # the user gave the batch (else it is assumed: graph/dims.py)
        self.share: Any = None  # this process's share of the host (coordination.Share), if it shares
        self.process_profile: Any = None  # the profile the process pools were planned for (None: host only)
        self.process: ProcessRecord | None = None
        self.sessions: list[SessionRecord] = []
        self.functions: dict[tuple[str, str], FunctionRecord] = {}
        self.patches: list[str] = []
        self.warnings: list[str] = _warn.ISSUED  # every tf_autopar warning of this process (_warn.py)
        self.warned_keys: set[str] = _warn.SEEN
        self.session_count = 0
        self.enable_ms = 0.0
        self.pid = 0  # the process that ran enable(); another pid here is a forked child
        self.forked_from: int | None = None  # set in a child forked after enable()

    def snapshot(self) -> Status:
        with self.lock:
            return Status(
                enabled=self.enabled,
                mode=self.mode,
                process=self.process,
                sessions=tuple(self.sessions),
                functions=tuple(self.functions.values()),
                patches=tuple(self.patches),
                warnings=tuple(self.warnings),
                enable_ms=self.enable_ms,
            )

    def next_session_name(self) -> str:
        with self.lock:
            self.session_count += 1
            return f"Session#{self.session_count}"


STATE = Registry()


def __getattr__(name: str) -> Any:
    # The per-session and per-function records live in records.py, imported on first use: each
    # dataclass costs ~0.7 ms to define, and enable() should not pay for records it has not made.
    if name in ("SessionRecord", "FunctionRecord"):
        from tf_autopar.runtime import records

        return getattr(records, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

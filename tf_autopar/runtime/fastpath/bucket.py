"""One batch bucket of a served function, as a state machine.

States (the words status() shows, ``BucketRecord.path``)::

    (first call) -> QUEUED -> BUILDING -> CHECKING (live calls) -> FAST
                                 |  \\________________________/    |
                                 |   (no traffic: paired rounds)   | variables written
                                 v                                 v
                              ORIGINAL <---------------------    STALE -> QUEUED
                     (lost the check, failed; retried later)

Every transition is a method of ``Bucket``, and they are the only writers of its state; a move
the table ``ALLOWED`` does not list raises ``IllegalTransition``. The callers hold the served
function's lock where a request and the builder may race. The other fields are plain data:
the serving sessions and their setting, the switch check's and live tuning's evidence.
"""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field
from typing import Any

from tf_autopar.runtime.fastpath.pairing import Setting, Trial


class State(str, enum.Enum):
    QUEUED = "queued"  # a build is queued on the builder thread
    BUILDING = "building"  # freezing, planning, opening sessions, checking outputs
    CHECKING = "checking"  # the switch check on live calls: the frozen session takes alternate blocks
    FAST = "frozen session"  # served from its sessions
    STALE = "stale"  # its variables were written: rebuilt at its next call
    ORIGINAL = "original"  # the original path serves it (lost its check, or failed); ``reason`` says why


Q, B, C, F, S, O_ = State.QUEUED, State.BUILDING, State.CHECKING, State.FAST, State.STALE, State.ORIGINAL

#: The moves a bucket may make. ORIGINAL is reachable from everywhere (fail open); BUILDING from
#: every state but itself (a build queued before a race settled runs all the same).
ALLOWED: dict[State, frozenset[State]] = {
    Q: frozenset({Q, B, F, O_}),  # Q again: a neighbour's check queued; F: a check settled as it was re-queued
    B: frozenset({C, F, Q, O_}),
    C: frozenset({B, F, Q, S, O_}),  # B: the traffic stopped, paired rounds finish it
    F: frozenset({B, S, Q, O_}),
    S: frozenset({Q, B, O_}),
    O_: frozenset({Q, B, O_}),  # Q: checked again later; O again: a second reason
}

#: What a request does with a bucket in each state (``Bucket.route``).
SERVE, CHECK, ORIGINAL_PATH = "serve", "check", "original"


class IllegalTransition(RuntimeError):
    """A bucket was asked for a move its state machine does not allow."""


@dataclass(eq=False)
class Bucket:
    bucket: int
    batch: int = 0  # the largest batch seen in the bucket: what its plan was made for
    pool: Any = None  # the serving engine runner (engines/)
    plan: Any = None  # ThreadPlan
    generation: int = 0
    speedup: float = 0.0
    spread: float = 0.0
    evidence: str = ""  # what speedup and spread were measured on
    build_s: float = 0.0
    reason: str = ""
    verify: bool = False  # built from the cache at load: check against the original on the first call
    served: int = 0  # calls the frozen session answered
    since: float = 0.0  # when the bucket switched (monotonic)
    key: Setting = (0, 0, 0)  # the serving sessions' (inter-op, intra-op, streams)
    warm: list[Any] = field(default_factory=list)  # the build's inputs, to warm candidate sessions up
    expected: list[Any] = field(default_factory=list)  # the original's outputs for them
    candidates: list[Setting] = field(default_factory=list)  # live tuning: still to try
    trial: Trial | None = None
    tried: list[str] = field(default_factory=list)  # "2x1: lose (not faster ...)" per finished trial
    tuned: str = ""  # "done" when every candidate was tried; the evidence of a win is in ``won``
    #: the candidates (rules.label) an earlier start had still to try when it ended: a start that
    #: resumes an unfinished tuning tries only these (None: every candidate)
    pending: list[str] | None = None
    won: dict[str, Any] = field(default_factory=dict)
    by: str = ""  # who tuned it (switches.BY_LIVE, BY_TUNE), once ``tuned``
    in_flight: int = 0
    attempts: int = 0  # switch checks that found the frozen session not faster
    checking: Setting | None = None  # a neighbour's switch check under way (the plan's lost)
    checks: list[Setting] | None = None  # neighbours still to check; None: not begun
    lost: list[Setting] = field(default_factory=list)  # settings the original path beat
    retry_at: float = 0.0  # when the next one may run (monotonic; 0: never)
    faults: list[int] = field(default_factory=list)  # minor page faults of its first calls (tf_allocator.py)
    _state: State = field(default=State.QUEUED, init=False, repr=False)

    @property
    def state(self) -> State:
        return self._state

    def _move(self, to: State) -> None:
        if to not in ALLOWED[self._state]:
            raise IllegalTransition(f"bucket {self.bucket}: {self._state.value} -> {to.value}")
        self._state = to

    # ------------------------------------------------------------------ readers
    def route(self, generation: int) -> str:
        """What a request of this bucket does: SERVE from its sessions, take its part in the switch
        CHECK, or run the ORIGINAL_PATH (then ``wants_build`` says whether to queue a build)."""
        if self._state is F and self.pool is not None:
            return SERVE if self.generation == generation else ORIGINAL_PATH
        if self._state is C and self.trial is not None and self.generation == generation:
            return CHECK
        return ORIGINAL_PATH

    def wants_build(self, generation: int, now: float) -> bool:
        """A call on the original path queues a build: the bucket went stale, its variables were
        written under its sessions or its check, or its retry is due."""
        if self._state is S:
            return True
        if self._state in (F, C):
            return self.generation != generation
        return self._state is O_ and bool(self.retry_at) and now > self.retry_at

    def in_progress(self) -> bool:
        return self._state in (Q, B)

    # ------------------------------------------------------------------ the writers
    def queue(self, batch: int) -> None:
        """A build for ``batch`` is queued (first call, variables written, a retry)."""
        if self._state is C:
            self.trial = None  # the variables changed under the check: it starts again after the rebuild
        self._move(Q)
        self.batch, self.retry_at = max(self.batch, batch), 0.0

    def queue_neighbour(self, key: Setting) -> None:
        """The setting checked lost: the next neighbour's switch check is queued."""
        self.checking = key
        self._move(Q)

    def start_build(self) -> None:
        self._move(B)

    def start_check(self, trial: Trial, generation: int) -> None:
        """The switch check on live calls begins: ``trial`` takes alternate blocks of them."""
        self._move(C)
        self.trial, self.generation = trial, generation

    def check_idle(self) -> None:
        """The traffic stopped under the check: the builder finishes it alone."""
        self.trial = None
        self._move(B)

    def check_failed(self, retired: bool) -> None:
        """The check's frozen session failed on a call (or was retired by a re-freeze: STALE)."""
        self.trial = None
        self._move(S if retired else O_)

    def serve(self, pool: Any, generation: int, key: Setting) -> None:
        """The switch: calls are served from ``pool``'s sessions from now on."""
        self._move(F)
        self.pool, self.generation, self.reason, self.since = pool, generation, "", time.monotonic()
        self.key, self.checking = key, None

    def go_stale(self) -> None:
        """Re-frozen: its sessions retired; rebuilt at its next call."""
        self._move(S)
        self.pool = None

    def keep_original(self, reason: str) -> None:
        """The original path serves it, for ``reason``."""
        self._move(O_)
        self.reason, self.pool = reason, None

    @classmethod
    def serving(cls, bucket: int, pool: Any, generation: int, key: Setting, **fields: Any) -> Bucket:
        """A bucket that serves from the start: built at load from what the cache remembered."""
        reason = fields.pop("reason", "")
        b = cls(bucket, **fields)
        b._move(B)
        b.serve(pool, generation, key)
        b.reason = reason
        return b


def bucket_words(bucket: int) -> str:
    """A bucket as the text says it: "1", "3-4", "5-8"."""
    return "1" if bucket == 1 else f"{bucket // 2 + 1}-{bucket}"

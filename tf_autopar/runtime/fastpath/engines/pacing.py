"""A conversion's pace: its child stopped and continued so that the requests beside it pay a
bounded share of their time for it.

Why: ``SCHED_IDLE`` (conversion.py) does not make a conversion free. tf2onnx converting Xception
beside a frozen session serving Xception's batch-2 requests back to back (2-core EPYC), the child
stopped and continued in alternate 1.5-s slices: 218.1 ms median a call while it ran, 187.2 while
it was stopped (193.0 before it started); the 90th percentiles 263.7 and 209.3
(benchmarks/conversion_cost.py). The served calls' per-10-s medians rose up to 1.5x through
whole conversions (Xception b2, the BERT-style encoder b16, NASNetMobile b8). Whatever takes it
(caches, memory bandwidth, a hypervisor's sibling threads), stopping the child gives it back at once.

So the child runs in slices, a stopped slice after each running one while calls are being served,
and measures what it costs: each served call is timed anyway (served.py) and noted here with its
runner while a child runs; the ratio ``r`` of a runner's median call while the child ran to its
median while it was stopped, over the slices so far, interleaved as a live trial is. The child
runs a fraction ``BUDGET / (r - 1)`` of the time (between DUTY_MIN, so that a conversion always
ends, and DUTY_MAX, so that ``r`` stays measured): the served calls' time grows by at most
BUDGET on average (while ``r`` stays under 1 + BUDGET / DUTY_MIN, 2 by default; beyond, by
DUTY_MIN x (r - 1)), the conversion taking longer instead. No call served: nothing to protect, it
runs throughout.

``TF_AUTOPAR_CONVERSION_BUDGET``: the fraction (default 0.1); ``off`` never stops the child.
"""

from __future__ import annotations

import math
import os
import statistics
from collections import defaultdict, deque
from collections.abc import Hashable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from tf_autopar.runtime.safety import warn_once

BUDGET_VAR = "TF_AUTOPAR_CONVERSION_BUDGET"
DEFAULT_BUDGET = 0.10
#: The child's share of the time: at least DUTY_MIN (a conversion ends, at most 1/DUTY_MIN times
#: later), at most DUTY_MAX while calls are served (the stopped slices keep the ratio measured).
DUTY_MIN, DUTY_MAX, DUTY_START = 0.1, 0.9, 0.5
#: The shorter slice spans CALLS_PER_SLICE typical calls, and MIN_SLICE_S at least.
MIN_SLICE_S, CALLS_PER_SLICE = 0.5, 4
#: Calls kept per runner and side for the ratio; fewer than MIN_CALLS on a side: that runner not counted.
KEEP, MIN_CALLS = 64, 4

Call = tuple[Hashable, float, float]  # (runner, start on time.perf_counter, seconds)

watchers: list[deque[Call]] = []


def note(runner: Hashable, start: float, seconds: float) -> None:
    """A served call, for the conversions under way (the request path calls it only while ``watchers``)."""
    for sink in watchers:
        sink.append((runner, start, seconds))


@contextmanager
def watching() -> Iterator[deque[Call]]:
    """The calls served while a conversion runs, noted into the deque yielded."""
    sink: deque[Call] = deque(maxlen=4096)
    watchers.append(sink)
    try:
        yield sink
    finally:
        watchers.remove(sink)


def budget_from(value: str | None) -> float | None:
    """The budget ``TF_AUTOPAR_CONVERSION_BUDGET`` asks for; None (never stopped) for ``off``."""
    text = (value or "").strip().lower()
    if not text:
        return DEFAULT_BUDGET
    if text in ("off", "none", "0"):
        return None
    try:
        budget = float(text)
    except ValueError:
        budget = -1.0
    if not (0.0 < budget <= 10.0) or math.isnan(budget):
        warn_once(  # read at each conversion's start: said once
            f"conversion-budget:{text}",
            f"tf_autopar: {BUDGET_VAR}={text!r} is not a fraction above 0 (e.g. 0.1, or off); using {DEFAULT_BUDGET}",
        )
        return DEFAULT_BUDGET
    return budget


def budget() -> float | None:
    return budget_from(os.environ.get(BUDGET_VAR))


def duty_for(ratio: float, budget: float) -> float:
    """The child's share of the time when the calls take ``ratio`` times as long while it runs:
    ``budget / (ratio - 1)`` within [DUTY_MIN, DUTY_MAX] (DUTY_MAX when it costs them nothing)."""
    excess = ratio - 1.0
    return DUTY_MAX if excess <= 0 else min(DUTY_MAX, max(DUTY_MIN, budget / excess))


@dataclass(frozen=True)
class Slice:
    """The next slice: the child running or stopped, for how long."""

    running: bool
    seconds: float


class Pace:
    """Which slice comes next, from the calls seen in the slices so far: pure (the driver,
    conversion.py, sends the signals and reads the clock)."""

    def __init__(self, budget: float) -> None:
        self.budget = budget
        self.duty = DUTY_START
        self.ratio: float | None = None  # calls' median while it ran over while stopped
        self.ran_s = self.stopped_s = 0.0
        self._sides: dict[bool, defaultdict[Hashable, deque[float]]] = {
            True: defaultdict(lambda: deque(maxlen=KEEP)),
            False: defaultdict(lambda: deque(maxlen=KEEP)),
        }
        self._recent: deque[float] = deque(maxlen=KEEP)

    def first(self) -> Slice:
        return Slice(True, self._base())

    def ended(self, running: bool, start: float, end: float, calls: Iterable[Call]) -> Slice:
        """The slice from ``start`` to ``end`` ended, ``calls`` those noted during it (a call counts
        when it ran wholly inside the slice); the slice to come."""
        if running:
            self.ran_s += end - start
        else:
            self.stopped_s += end - start
        seen = False
        for runner, t0, seconds in calls:
            seen = True
            self._recent.append(seconds)
            if t0 >= start and t0 + seconds <= end:
                self._sides[running][runner].append(seconds)
        if not running:
            self._judge()
            return Slice(True, self._lengths()[0])
        if not seen:  # nothing served meanwhile: nothing to protect
            return Slice(True, self._base())
        return Slice(False, self._lengths()[1])

    def _judge(self) -> None:
        logs, weights = 0.0, 0
        for runner, ran in self._sides[True].items():
            stopped = self._sides[False].get(runner)
            if stopped is None or len(ran) < MIN_CALLS or len(stopped) < MIN_CALLS:
                continue
            weight = min(len(ran), len(stopped))
            logs += weight * math.log(statistics.median(ran) / statistics.median(stopped))
            weights += weight
        if not weights:
            return
        self.ratio = math.exp(logs / weights)
        self.duty = duty_for(self.ratio, self.budget)

    def _base(self) -> float:
        typical = statistics.median(self._recent) if self._recent else 0.0
        return max(MIN_SLICE_S, CALLS_PER_SLICE * typical)

    def _lengths(self) -> tuple[float, float]:
        """(running, stopped) seconds: the shorter one the base, their ratio the duty's."""
        base, duty = self._base(), self.duty
        if duty >= 0.5:
            return base * duty / (1.0 - duty), base
        return base, base * (1.0 - duty) / duty

    def words(self) -> str:
        """What the pacing did, in a user's words ("" before anything was measured)."""
        total = self.ran_s + self.stopped_s
        if not total or not self.stopped_s:
            return ""
        share = f"running {self.ran_s / total:.0%} of the time"
        if self.ratio is None:
            return share
        return f"{share}: the served calls {self.ratio:.2f}x as long while it ran"

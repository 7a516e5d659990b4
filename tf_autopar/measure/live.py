"""Live tuning's stopping rule: decide from paired samples of live calls, not a fixed count. Pure.

A running server serves a batch bucket from its incumbent session; a candidate session (a
neighbour of the plan, tuning/search.py) takes alternate blocks of ``BLOCK`` calls (``Turns``).
The first call of each block, right after the switch, is not timed: a session's call that
follows the other session's runs in a different state (its threads woke from idle, the other's
still spin); measured on the same two sessions in one process (benchmarks/bench_alternation.py,
results/alternation.json) strict alternation read 2x2/1x2 on LSTM at batch 32 as 0.955 where
blocks read 0.982 (DCN-V2 b2048 0.985 against 0.992, YouTube DNN b512 1.001 against 1.010).
Beside a runner whose threads spin on after its call (ONNX Runtime's), the calls of a block's
first ``washout`` seconds go untimed too: against the spinning threads a trial read TensorFlow's
session as 1.31x slower than ONNX Runtime on a GRU tagger at batch 32 where, each serving alone,
it was 1.16x faster (results/trial_carryover_epyc.json); with the washout the trial read 0.80.
Each later candidate call is paired with the incumbent call at the same place of the block just
before, under the same load (the number of calls in flight when each started; a pair is formed
only when those agree), so a busy moment hits both members of a pair. On the log-ratios r =
log(candidate / incumbent) of the pairs:

- **dropped early**: after ``EARLY`` pairs, a candidate slower by more than ``CLEARLY`` in every
  pair is dropped (a clearly worse setting costs only a few slow calls);
- **wins**: at one of the looks (``LOOKS`` pairs), when the upper end of the interval for the
  mean of r (``Z_WIN`` standard errors) is below -log(1 + NOISE): faster beyond noise;
- **loses**: when the lower end (``Z_LOSE`` standard errors) is above -log(1 + NOISE): it
  cannot be faster by NOISE;
- **undecided** after the last look, or once the pairs' calls add up to ``MAX_SECONDS`` (a slow
  model's trial bounded in traffic, not only in pairs: Xception at 0.2-0.3 s a call took 71-75 s
  to try its three neighbours without it): the incumbent stays (a change needs evidence), or, for a
  trial made with ``point_at_end`` (the fast path's switch check, frozen session against the
  original path, where "not slower" is enough), the trimmed mean decides.

The switch check uses the same rule with the bar at "not slower" (``noise`` 0: the candidate
wins when it is faster beyond its interval, loses when it is slower beyond it) and a bar of
``noise`` -1 (``SWITCH_RATIO`` infinite, in tests) lets any candidate win at the first look.

Looking at the evidence after every pair would make a false win likely on a noisy host (each
look is another chance): measured on synthetic streams, one in four equal candidates "won" with
per-call noise of 50%. So the rule looks at a few fixed counts, with a wide interval for a win
(three standard errors: 2 false wins in 300 equal trials at 8% noise over the ten looks) and a
narrower one for giving up. The ratios are winsorized (``TRIM`` of each tail clipped to the nearest kept value), so one
preempted call cannot decide a trial, and the variance is that of the winsorized sample.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Sequence

NOISE = 0.02
BLOCK = 4  # calls per turn of the incumbent or the candidate; the first of each is not timed
CALLS_PER_PAIR = 2 * BLOCK / (BLOCK - 1)  # a pair per timed place: 8 calls give 3 pairs
CLEARLY = 0.10
EARLY = 3
LOOKS = (6, 10, 16, 24, 36, 60, 100, 160, 250, 400)  # past 60 only while the time bound allows
MAX_PAIRS = LOOKS[-1]
MAX_SECONDS = 8.0  # of paired calls (both members) per trial: about 10 s of traffic with the untimed calls
Z_WIN = 3.0
Z_LOSE = 2.0
TRIM = 0.1

UNDECIDED, WIN, LOSE = "undecided", "win", "lose"


def winsorized(values: Sequence[float], share: float = TRIM) -> list[float]:
    """``values`` with ``share`` of each tail clipped to the nearest value kept."""
    xs = sorted(values)
    k = int(len(xs) * share)
    if not xs or k == 0:
        return xs
    lo, hi = xs[k], xs[len(xs) - 1 - k]
    return [min(max(x, lo), hi) for x in xs]


@dataclass
class PairedTrial:
    """One candidate against the incumbent, fed with paired seconds; ``verdict`` once decided."""

    noise: float = NOISE
    max_pairs: int = MAX_PAIRS
    point_at_end: bool = False  # undecided at ``max_pairs``: the trimmed mean decides, not the incumbent
    max_seconds: float = MAX_SECONDS
    ratios: list[float] = field(default_factory=list)  # log(candidate / incumbent) per pair
    seconds: float = 0.0  # the paired calls' time so far
    verdict: str = UNDECIDED
    why: str = ""

    def add(self, incumbent_s: float, candidate_s: float) -> str:
        """One pair; returns the verdict so far (UNDECIDED until the rule decides)."""
        if self.verdict != UNDECIDED or not (incumbent_s > 0 and candidate_s > 0):
            return self.verdict
        if not (math.isfinite(incumbent_s) and math.isfinite(candidate_s)):
            return self.verdict
        self.ratios.append(math.log(candidate_s / incumbent_s))
        self.seconds += incumbent_s + candidate_s
        last = self.max_pairs
        if self.seconds >= self.max_seconds:  # out of time: this is the last look, but never before the first
            last = min(last, max(LOOKS[0], len(self.ratios)))
        self.verdict, self.why = decide(self.ratios, self.noise, last, self.point_at_end)
        return self.verdict

    @property
    def speedup(self) -> float:
        """Incumbent / candidate time from the trimmed mean of the pairs (>1: the candidate is faster)."""
        return math.exp(-statistics.fmean(winsorized(self.ratios))) if self.ratios else math.nan

    @property
    def spread(self) -> float:
        """max/min of the pairs' ratios: how noisy the evidence was."""
        return math.exp(max(self.ratios) - min(self.ratios)) if self.ratios else math.nan


def decide(
    ratios: Sequence[float], noise: float = NOISE, max_pairs: int = MAX_PAIRS, point_at_end: bool = False
) -> tuple[str, str]:
    """(verdict, why) for log-ratios log(candidate / incumbent) of paired calls (see the module docstring)."""
    n = len(ratios)
    bar = -math.log1p(noise) if noise > -1 else math.inf  # the log-ratio a winner must be below
    if n >= EARLY and all(r > max(math.log(1 + CLEARLY), bar + math.log(1 + CLEARLY)) for r in ratios):
        return LOSE, f"slower by over {CLEARLY:.0%} in each of {n} paired calls"
    if n not in LOOKS and n < max_pairs:
        return UNDECIDED, ""
    kept = winsorized(ratios)
    mean = statistics.fmean(kept)
    se = statistics.stdev(kept) / math.sqrt(n) if n > 1 else math.inf
    if bar == math.inf:
        return WIN, f"taken at the first look ({n} paired calls, {math.exp(-mean):.3f}x): no bar set"
    if mean + Z_WIN * se < bar:
        return WIN, (
            f"faster by {math.exp(-mean) - 1:.0%} over {n} paired calls "
            f"(at least {math.exp(-(mean + Z_WIN * se)):.3f}x)"
        )
    if mean - Z_LOSE * se > bar:
        if noise <= 0:
            return LOSE, f"slower over {n} paired calls ({math.exp(-mean):.3f}x)"
        return LOSE, f"not faster by {noise:.0%} over {n} paired calls ({math.exp(-mean):.3f}x)"
    if n >= max_pairs and point_at_end:
        return (WIN if mean < bar else LOSE), f"within the noise after {n} paired calls ({math.exp(-mean):.3f}x)"
    if n >= max_pairs:
        return LOSE, f"undecided after {n} paired calls ({math.exp(-mean):.3f}x): the incumbent stays"
    return UNDECIDED, ""


class Turns:
    """Whose turn a trial's call is: alternate blocks of ``block`` calls, the incumbent's first.
    A block's first call is not timed (place 0); nor is any call that starts within ``washout``
    seconds of the block's first: what the other runner left behind still runs then (ONNX
    Runtime's spinning threads keep a core busy for about 50 ms after a call returns, and a
    TensorFlow session's calls in that time ran 1.4-1.8x slower: benchmarks/bench_trial_carryover.py).
    Pure: the caller passes the time."""

    def __init__(self, block: int = BLOCK, washout: float = 0.0) -> None:
        self.block, self.washout = block, washout
        self._candidate, self._timed, self._since = True, block - 1, 0.0  # the first call switches to the incumbent

    def take(self, now: float) -> tuple[bool, int]:
        """(the candidate serves it?, its place among the block's timed calls: 0, not timed)."""
        if self._timed >= self.block - 1:  # this block's timed calls are in: the other's turn
            self._candidate, self._timed, self._since = not self._candidate, 0, now
            return self._candidate, 0
        if now - self._since < self.washout:
            return self._candidate, 0
        self._timed += 1
        return self._candidate, self._timed


class Pairer:
    """Pairs an incumbent call with the candidate call at the same place of the next block that
    started under the same load."""

    def __init__(self) -> None:
        self._last: dict[tuple[int, int], float] = {}  # (calls in flight, place) -> the latest incumbent seconds

    def incumbent(self, in_flight: int, seconds: float, place: int = 1) -> None:
        self._last[in_flight, place] = seconds

    def candidate(self, in_flight: int, seconds: float, place: int = 1) -> tuple[float, float] | None:
        """(incumbent, candidate) seconds, or None when no incumbent call ran under this load and place."""
        before = self._last.pop((in_flight, place), None)
        return None if before is None else (before, seconds)

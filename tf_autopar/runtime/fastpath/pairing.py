"""A trial: a candidate taking alternate blocks of a bucket's calls, each timed and paired with
the incumbent's call at the same place of the block before (measure/live.py decides). A runner
whose threads stay busy after its call returns (``linger_s``: ONNX Runtime's spinning threads)
has the other's calls in that time left untimed, on either side of the trial."""

from __future__ import annotations

import threading
import time
from typing import Any

from tf_autopar.measure.live import PairedTrial, Pairer, Turns
from tf_autopar.runtime.fastpath import rules

Setting = tuple[int, int, int]  # a session setting: (inter-op, intra-op, streams)


class Trial:
    """A candidate session taking alternate blocks of a bucket's calls, and the evidence so far.
    ``switch``: the switch check (the frozen session against the original path), taken when not
    slower; otherwise live tuning (a candidate session against the serving one)."""

    def __init__(self, key: Setting, pool: Any, switch: bool = False, incumbent: Any = None) -> None:
        self.key, self.pool = key, pool
        noise = 1.0 / rules.SWITCH_RATIO - 1.0 if rules.SWITCH_RATIO > 0 else float("inf")  # 0: never taken
        self.test = (
            PairedTrial(noise=noise, max_pairs=rules.SWITCH_MAX_PAIRS, point_at_end=True)
            if switch
            else PairedTrial()
            if rules.TUNE_NOISE is None
            else PairedTrial(noise=rules.TUNE_NOISE)
        )
        self.pairer = Pairer()
        self.turns = Turns(washout=max(linger(pool), linger(incumbent)))
        self._lock = threading.Lock()
        self.done = threading.Event()  # the switch check's verdict is in (the builder waits for it)
        self.calls = 0
        self.started = time.monotonic()

    def take(self) -> tuple[bool, int]:
        """(the candidate serves this call?, its place in its block: 0, the first after a switch or
        one within the washout, is not timed)."""
        with self._lock:
            self.calls += 1
            return self.turns.take(time.monotonic())

    def paired(self, candidate: bool, place: int, level: int, seconds: float) -> bool:
        """One timed call into the pairs; True when the rule has decided."""
        if place == 0:  # the first call after the switch, or within the washout: not timed
            return False
        if not candidate:
            self.pairer.incumbent(level, seconds, place)
            return False
        pair = self.pairer.candidate(level, seconds, place)
        return pair is not None and self.test.add(*pair) != "undecided"


def linger(runner: Any) -> float:
    """Seconds a runner's threads keep a CPU busy after its call returns (0 for most)."""
    return float(getattr(runner, "linger_s", 0.0))

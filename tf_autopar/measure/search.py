"""Which settings a tune measures, and how it decides. Pure: the measuring is a callback.

The rule's thresholds were fitted on one host and one set of models; where they are unsure,
a short measurement on the host that runs the model settles it. Not the paper's exhaustive
search (884,736 configurations) but the plan's neighbourhood:

- inter-op p-1, p, p+1, within 1 and the model's maximum width (at least 2 pools stay
  possible on a multi-CPU host: two branches of a chain graph cannot run at once, but a
  second pool lets TensorFlow overlap a small op with the next one's set-up);
- intra-op: the budget, the budget divided among the inter-op threads, and 1;
- OpenMP builds (the plan sets OpenMP threads apart from TF's intra-op pool), per inter-op
  count: the plan's teams (the budget divided among the inter-op threads for the neighbours)
  with TF's pool at the plan's 1 and at the budget (DLRM at batch 2048 ran best with TF's pool
  at 2: its look-ups and element-wise ops are TF's), and teams of the budget and of 1;
- never more than ``MAX_CANDIDATES`` (12).

Decision: successive halving over interleaved rounds. Every live candidate runs once per
round (fresh process each: TensorFlow fixes its pools at start), the slower half is dropped
after each round, the plan is always kept as the reference. It stops early when, after two
rounds, the plan is within ``noise`` of the best live candidate (confirmed), or the leader beat
the plan by more than ``CLEAR_WIN`` in every round (decided). The winner
replaces the plan only when its paired per-round ratio against the plan is beyond the noise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

from tf_autopar.measure.configs import config_name
from tf_autopar.measure.stats import median, paired_ratios

MAX_CANDIDATES = 12
NOISE = 0.03  # a gap under this share of the plan's time is not worth a change
CLEAR_WIN = 0.15  # a neighbour this much faster than the plan in every round ends the search early


@dataclass(frozen=True, order=True)
class Candidate:
    inter: int
    intra: int
    omp: int | None = None  # OpenMP threads per team on OpenMP builds; None: not set apart

    @property
    def label(self) -> str:
        return config_name(self.inter, self.intra, self.omp)

    @classmethod
    def parse(cls, text: str) -> "Candidate":
        parts = [int(p) for p in text.split("x")]
        return cls(parts[0], parts[1], parts[2] if len(parts) > 2 else None)


def neighbourhood(inter: int, intra: int, budget: int, max_width: int, omp: int | None = None) -> list[Candidate]:
    """The plan first, then its neighbours (see the module docstring), at most MAX_CANDIDATES."""
    if budget < 1 or inter < 1 or intra < 1 or (omp is not None and omp < 1):
        raise ValueError(f"inter, intra, omp and budget must be positive, got {inter}, {intra}, {omp}, {budget}")
    top = max(1, min(budget, max(max_width, 2 if budget > 1 else 1)))
    inters = [p for p in (inter, inter - 1, inter + 1) if 1 <= p <= top]
    out = [Candidate(inter, intra, omp)]
    for p in inters:
        if omp is None:
            pairs = [(t, None) for t in (intra, budget, max(1, budget // p), 1)]
        else:
            teams = omp if p == inter else max(1, budget // p)  # the plan's, else the division for p
            pairs = [(intra, teams), (budget, teams), (intra, budget), (intra, 1)]
        for t, o in pairs:
            c = Candidate(p, t, o)
            if c not in out:
                out.append(c)
    return out[:MAX_CANDIDATES]


def stream_neighbourhood(
    inter: int, intra: int, streams: int, budget: int, max_width: int
) -> list[tuple[int, int, int]]:
    """(inter, intra, streams) around a setting of ``streams`` sessions, itself first, at most
    MAX_CANDIDATES. One stream: the per-session neighbourhood. Several (throughput mode): the
    per-stream neighbourhood within a stream's share of ``budget``, then one stream fewer and one
    more, each with the budget divided among its streams (the inter-op count kept within it)."""
    if streams < 1:
        raise ValueError(f"streams must be positive, got {streams}")
    share = max(1, budget // streams)
    out = [(c.inter, c.intra, streams) for c in neighbourhood(inter, intra, share, max_width)]
    for n in (streams - 1, streams + 1):
        if streams == 1 or not 1 <= n <= budget:
            continue
        per = max(1, budget // n)
        p = min(inter, per)
        key = (p, max(1, per // p), n)
        if key not in out:
            out.insert(min(len(out), 1 + (n > streams)), key)  # the stream counts right after the setting itself
    return out[:MAX_CANDIDATES]


Measure = Callable[[Sequence[Candidate], int], Mapping[Candidate, float]]


@dataclass
class SearchResult:
    plan: Candidate
    best: Candidate  # the setting to use: the plan unless another won beyond the noise
    times: dict[Candidate, dict[int, float]] = field(default_factory=dict)  # candidate -> round -> seconds
    rounds: int = 0
    runs: int = 0
    stopped: str = ""  # why the search ended

    def median(self, c: Candidate) -> float:
        return median(self.times.get(c, {}).values())

    def speedup(self) -> float:
        """The chosen setting against the plan: median of per-round ratios (>1: faster)."""
        if self.best == self.plan:
            return 1.0
        ratios = paired_ratios(self.times[self.plan], self.times[self.best])
        return median(ratios) if ratios else math.nan

    def to_dict(self) -> dict:
        return {
            "plan": self.plan.label,
            "best": self.best.label,
            "speedup_over_plan": self.speedup(),
            "rounds": self.rounds,
            "runs": self.runs,
            "stopped": self.stopped,
            "medians_s": {c.label: self.median(c) for c in self.times},
            "times_s": {c.label: {str(r): t for r, t in rs.items()} for c, rs in self.times.items()},
        }


def search(
    candidates: Sequence[Candidate], measure: Measure, *, max_runs: int, max_rounds: int = 4, noise: float = NOISE
) -> SearchResult:
    """Successive halving from ``candidates[0]`` (the plan); ``measure(live, round)`` runs each
    live candidate once, interleaved, and returns its time (lower is better; NaN = failed).
    ``max_runs`` bounds the total number of measured runs. ValueError when it cannot measure
    two candidates once."""
    if not candidates:
        raise ValueError("no candidates to measure")
    plan = candidates[0]
    if max_runs < 2 or len(candidates) < 2:
        raise ValueError(f"a budget of {max_runs} run(s) cannot compare two settings: the rule's plan is kept")
    live = list(dict.fromkeys(candidates))
    if len(live) > max_runs:  # the first round must fit: keep the plan and its nearest neighbours
        live = live[:max_runs]
    result = SearchResult(plan=plan, best=plan)
    for r in range(1, max_rounds + 1):
        if result.runs + len(live) > max_runs:
            result.stopped = f"budget: {result.runs} of {max_runs} runs used"
            break
        measured = measure(live, r)
        result.rounds, result.runs = r, result.runs + len(live)
        for c in live:
            t = measured.get(c, math.nan)
            if t is not None and math.isfinite(t) and t > 0:
                result.times.setdefault(c, {})[r] = t
        medians = {c: result.median(c) for c in live}
        ok = [c for c in live if math.isfinite(medians[c])]
        if plan not in ok or not ok:
            result.stopped = "the plan's runs failed" if plan not in ok else "every run failed"
            break
        leader = min(ok, key=lambda c: medians[c])
        if r >= 2 and medians[plan] <= medians[leader] * (1 + noise):
            result.stopped = "confirmed: the plan is within the noise of the best"
            break
        if r >= 2 and leader != plan and _winner(result, CLEAR_WIN) == leader:
            result.stopped = f"decided: {leader.label} beat the plan by over {CLEAR_WIN:.0%} in every round"
            break
        ranked = sorted(ok, key=lambda c: medians[c])
        keep = ranked[: max(2, math.ceil(len(ranked) / 2))]
        if plan not in keep:
            keep.append(plan)  # the reference every ratio is taken against
        live = [c for c in live if c in keep]
        if len(live) <= 2 and r >= 2:
            if r == max_rounds or result.runs + len(live) > max_runs:
                result.stopped = "two left, rounds done"
                break
    else:
        result.stopped = result.stopped or f"{max_rounds} rounds done"
    result.best = _winner(result, noise)
    return result


def _winner(result: SearchResult, noise: float) -> Candidate:
    """The fastest candidate measured in at least two rounds, if it beats the plan beyond noise
    in paired rounds; else the plan."""
    plan_times = result.times.get(result.plan, {})
    best, best_ratio = result.plan, 1.0 + noise
    for c, times in result.times.items():
        if c == result.plan or len(times) < 2:
            continue
        ratios = paired_ratios(plan_times, times)
        if len(ratios) >= 2 and median(ratios) > best_ratio and min(ratios) > 1.0:
            best, best_ratio = c, median(ratios)
    return best

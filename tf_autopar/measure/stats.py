"""Statistics for interleaved measurements (validate, bench, tune): pure functions on plain numbers.

Why paired ratios: every configuration runs once per round, rounds are interleaved
(A B C ... A B C ...), so a ratio taken *within* a round compares runs that saw the same
machine state (other tenants, thermal state, page cache). The median of those per-round
ratios cancels slow drift that a ratio of overall medians would keep. Both are reported.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

BELOW_OPTIMUM = 0.95  # rows whose plan reaches less than this fraction of the optimum are flagged
MIN_ROUNDS_FOR_NOISE = 3  # fewer paired rounds than this cannot show whether a gap is noise


def median(values: Iterable[float]) -> float:
    """Median of finite values; NaN for none (a config that never ran cleanly)."""
    xs = sorted(v for v in values if v is not None and math.isfinite(v))
    n = len(xs)
    if n == 0:
        return math.nan
    mid = n // 2
    return xs[mid] if n % 2 else 0.5 * (xs[mid - 1] + xs[mid])


def quantile(values: Iterable[float], q: float) -> float:
    """Linear-interpolation quantile (numpy's default), so small samples give sane spreads."""
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"quantile must be in [0, 1], got {q}")
    xs = sorted(v for v in values if v is not None and math.isfinite(v))
    if not xs:
        return math.nan
    pos = q * (len(xs) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def geomean(values: Iterable[float]) -> float:
    """Geometric mean of positive finite values (others skipped); NaN for none."""
    xs = [v for v in values if v is not None and math.isfinite(v) and v > 0]
    if not xs:
        return math.nan
    return math.exp(sum(math.log(v) for v in xs) / len(xs))


@dataclass(frozen=True)
class Spread:
    """A central value with its spread over rounds."""

    median: float
    q25: float
    q75: float
    min: float
    max: float
    n: int

    @classmethod
    def of(cls, values: Sequence[float]) -> "Spread":
        xs = [v for v in values if v is not None and math.isfinite(v)]
        return cls(
            median=median(xs),
            q25=quantile(xs, 0.25),
            q75=quantile(xs, 0.75),
            min=min(xs) if xs else math.nan,
            max=max(xs) if xs else math.nan,
            n=len(xs),
        )

    def spans(self, value: float) -> bool:
        """Whether the observed range includes ``value`` (e.g. 1.0: the difference may be noise)."""
        return self.n > 0 and self.min <= value <= self.max

    def to_dict(self) -> dict[str, float]:
        return {k: _clean(getattr(self, k)) for k in ("median", "q25", "q75", "min", "max")} | {"n": self.n}


def _clean(x: float) -> float | None:
    """JSON has no NaN: absent values become null."""
    return None if x is None or not math.isfinite(x) else x


def paired_ratios(num: Mapping[int, float], den: Mapping[int, float]) -> list[float]:
    """num[r] / den[r] for every round r where both ran cleanly (round -> per-round median)."""
    out = []
    for r in sorted(set(num) & set(den)):
        a, b = num[r], den[r]
        if a is not None and b is not None and math.isfinite(a) and math.isfinite(b) and b > 0:
            out.append(a / b)
    return out


@dataclass(frozen=True)
class Comparison:
    """How much faster ``ours`` is than ``other`` (>1 = ours faster): paired and unpaired."""

    paired: Spread  # per-round other/ours
    ratio_of_medians: float

    @classmethod
    def of(cls, other: Mapping[int, float], ours: Mapping[int, float]) -> "Comparison":
        return cls(
            paired=Spread.of(paired_ratios(other, ours)),
            ratio_of_medians=_ratio(median(other.values()), median(ours.values())),
        )

    @property
    def value(self) -> float:
        """The headline number: the paired median when any round paired, else the ratio of medians."""
        return self.paired.median if self.paired.n else self.ratio_of_medians

    def to_dict(self) -> dict:
        return {
            "value": _clean(self.value),
            "paired": self.paired.to_dict(),
            "ratio_of_medians": _clean(self.ratio_of_medians),
        }


def _ratio(a: float, b: float) -> float:
    if not (math.isfinite(a) and math.isfinite(b)) or b <= 0:
        return math.nan
    return a / b


def best(medians: Mapping[str, float]) -> str | None:
    """Name of the fastest configuration (lowest median step time); ties go to the first listed."""
    best_name, best_value = None, math.inf
    for name, value in medians.items():
        if value is not None and math.isfinite(value) and value < best_value:
            best_name, best_value = name, value
    return best_name


SAME_THREADS = "same thread counts as the optimum: other settings (binding, OpenMP) or noise"


def below_optimum_reasons(
    fraction: Comparison,
    ours_threads: tuple[int, int],
    optimum_threads: tuple[int, int],
    threshold: float = BELOW_OPTIMUM,
) -> list[str]:
    """Likely reasons why our plan reaches less than ``threshold`` of the optimum; [] when it does not.

    ``fraction`` compares optimum to ours as optimum_time/our_time (<= 1). Both facts are
    reported when both hold: a different inter-op count points at the width estimate, and a
    paired range reaching 1.0 means some round had ours as fast as the optimum (noise).
    Threads are effective (inter, intra) counts, 0 already resolved to what TF would pick.
    """
    value = fraction.value
    if not math.isfinite(value) or value >= threshold:
        return []
    reasons = []
    if fraction.paired.n and fraction.paired.max >= 1.0:
        reasons.append(f"noise (paired per-round ratios {fraction.paired.min:.2f}-{fraction.paired.max:.2f} reach 1.0)")
    if ours_threads[0] != optimum_threads[0]:
        reasons.append(f"width misjudged (optimum inter-op {optimum_threads[0]}, ours {ours_threads[0]})")
    elif ours_threads[1] != optimum_threads[1]:
        reasons.append(f"intra-op threads differ (optimum {optimum_threads[1]}, ours {ours_threads[1]})")
    if not reasons:
        reasons.append(SAME_THREADS)
    if fraction.paired.n < MIN_ROUNDS_FOR_NOISE:
        reasons.append(f"only {fraction.paired.n} paired round(s): too few to tell from noise")
    return reasons


def format_ratio(c: Mapping[str, Any] | None) -> str:
    """A Comparison.to_dict() as "1.23 (1.10-1.31)": the value and its per-round range."""
    if not c or c.get("value") is None:
        return "-"
    p = c.get("paired") or {}
    if p.get("n", 0) >= 2 and p.get("min") is not None:
        return f"{c['value']:.2f} ({p['min']:.2f}-{p['max']:.2f})"
    return f"{c['value']:.2f}"

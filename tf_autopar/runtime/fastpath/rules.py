"""The fast path's decisions, as pure functions of plain values (no TensorFlow; tested alone).

- which batch bucket a call falls in (the plan is made per bucket, not per batch size);
- whether the frozen outputs equal the original's within the documented tolerance;
- whether the frozen session, timed against the original path in paired rounds, is worth
  switching to;
- how the observed batches read in a plan's explanation.

The memory bound is memory.py's.
"""

from __future__ import annotations

import statistics
from typing import Any, Mapping, Sequence

from tf_autopar._text import is_uint

#: Outputs must agree within this: |frozen - original| <= RTOL * max|original| per output (floats),
#: exactly for integers, booleans and strings. Folding batch norm into a convolution changes the
#: order of float sums; measured differences were 0 (MobileNetV2, a BERT encoder) to 1e-7 relative
#: (NASNetMobile), so 1e-4 leaves room for larger graphs and still catches a wrong graph.
RTOL = 1e-4

#: The switch check. With no traffic beside the build: paired rounds on the builder thread
#: (original, frozen, alternating, on the first real inputs, after SWITCH_WARMUP runs of each),
#: the frozen path taken when its median paired ratio is at most SWITCH_RATIO. With traffic: on
#: the live calls, alternate blocks of them from the frozen session (after SWITCH_WARMUP runs of it),
#: decided by measure/live.py's rule with its bar at SWITCH_RATIO (paired rounds beside live
#: traffic measure the contention, not the paths: BERT at batch 16 read 0.93x there against a
#: quiet sweep's 1.10x). A bucket kept on the original path is checked again RETRY_S, then twice
#: that, later (RETRIES times in all).
SWITCH_ROUNDS = 7
SWITCH_WARMUP = 2
SWITCH_RATIO = 1.0
#: Live tuning's bar: a candidate (another setting or engine) replaces the incumbent when faster by
#: this beyond the noise (measure/live.py's NOISE); -1 lets any candidate win at the first look (tests).
TUNE_NOISE: float | None = None
#: Another engine that wins its trial and serves this much faster than TensorFlow's session (the
#: product of the wins since the plan's setting) ends the trials of TensorFlow's own session
#: settings: those differ from one another by tens of percent at most (docs/tuning.md).
ENGINE_MARGIN = 1.5
#: A check on live calls that sees no call for this long (or five of the frozen session's calls,
#: if longer) is finished alone, in paired rounds: the traffic stopped.
CHECK_IDLE_S = 1.0
#: A live check still undecided after this many pairs is settled by the trimmed mean: the two
#: paths are then within a few percent, either serves about as fast, and a 260 ms call (BERT at
#: batch 16 on the EPYC host) made the 60 pairs of live tuning's rule 31 s of checking.
SWITCH_MAX_PAIRS = 24
RETRY_S = 30.0
RETRIES = 2
#: A bucket the memory rule kept on the original path asks again this often (a room check; the
#: build runs only when it fits): another worker's copy may be gone, a container's limit raised.
MEMORY_RETRY_S = 60.0


def retry_delay(attempts: int) -> float | None:
    """Seconds until the switch check runs again after ``attempts`` verdicts of "not faster"; None: never."""
    return RETRY_S * 2 ** (attempts - 1) if 1 <= attempts <= RETRIES else None


def label(key: tuple[Any, ...]) -> str:
    """A candidate as the status text and the log say it: TensorFlow's sessions as (inter, intra,
    streams): "2x1", "1x1 in 2 streams"; another engine by name and threads: "openvino, 2 threads"."""
    streams = f" in {key[2]} streams" if key[2] > 1 else ""
    if len(key) > 3:
        return f"{key[3]}, {key[1]} thread{'s' if key[1] != 1 else ''}" + (streams and f" per stream{streams}")
    return f"{key[0]}x{key[1]}" + streams


def bucket_of(batch: int) -> int:
    """The batch bucket: the smallest power of two at or above ``batch`` (1, 2, 4, 8, ...)."""
    if batch < 1:
        raise ValueError(f"a bucket needs a batch of at least 1, got {batch}")
    return 1 << (batch - 1).bit_length()


def is_batch(value: Any) -> bool:
    """A batch size read from outside (the cache): a whole number from 1 to 2**30."""
    return isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 1 << 30


#: A bf16 engine (opted in: enable(precision="bf16")) is held to this instead, with the top-1
#: class of every row of a float output of more than one column the same as the original's.
#: OpenVINO's bf16 measured 1.6e-4 to 3.0e-2 of the largest output on the held-out models
#: (benchmarks/results/engine_settings_epyc*.json, engines_before_epyc.json).
BF16_RTOL = 5e-2


def tolerance(precision: str) -> tuple[float, bool]:
    """(relative tolerance, top-1 required) for an engine of ``precision``."""
    return (BF16_RTOL, True) if precision == "bf16" else (RTOL, False)


def outputs_differ(frozen: Sequence[Any], original: Sequence[Any], rtol: float = RTOL, top1: bool = False) -> str:
    """ "" when every output agrees within the tolerance, else what differs (for the one warning).
    Takes numpy arrays (or anything ``numpy.asarray`` reads), flat, in the same order. ``top1``:
    also the largest entry of each row of a float output of 2+ columns in the same place."""
    import numpy as np

    if len(frozen) != len(original):
        return f"{len(frozen)} outputs against the original's {len(original)}"
    for i, (a, b) in enumerate(zip(frozen, original)):
        a, b = np.asarray(a), np.asarray(b)
        if a.shape != b.shape or a.dtype != b.dtype:
            return f"output {i}: {a.dtype}{list(a.shape)} against the original's {b.dtype}{list(b.shape)}"
        if a.dtype.kind in "fc":
            if not (np.isfinite(a) == np.isfinite(b)).all() or not (np.isnan(a) == np.isnan(b)).all():
                return f"output {i}: non-finite values where the original has others"
            finite = np.isfinite(b)
            scale = float(np.max(np.abs(b[finite]))) if finite.any() else 0.0
            diff = float(np.max(np.abs(a[finite] - b[finite]))) if finite.any() else 0.0
            if diff > rtol * max(scale, 1e-30) and diff > 0:
                return (
                    f"output {i}: differs by {diff:.3g}, {diff / max(scale, 1e-30):.2g} of its largest value "
                    f"(tolerance {rtol:g})"
                )
            if top1 and a.ndim >= 2 and a.shape[-1] > 1 and finite.all():
                moved = int(np.sum(np.argmax(a, axis=-1) != np.argmax(b, axis=-1)))
                if moved:
                    return f"output {i}: the top class differs in {moved} of {a.size // a.shape[-1]} rows"
        elif not np.array_equal(a, b):
            return f"output {i}: {int(np.sum(a != b))} of {a.size} values differ"
    return ""


def switch_verdict(original_s: Sequence[float], frozen_s: Sequence[float]) -> tuple[bool, float, float]:
    """(switch?, median paired ratio original/frozen = speedup, spread of the ratios as max/min).
    Paired by round: each pair ran back to back, so a busy moment hits both."""
    pairs = [(o, f) for o, f in zip(original_s, frozen_s) if o > 0 and f > 0]
    if not pairs:
        return False, float("nan"), float("nan")
    ratios = [f / o for o, f in pairs]
    median = statistics.median(ratios)
    spread = max(ratios) / min(ratios)
    return median <= SWITCH_RATIO, 1.0 / median, spread


def batch_words(counts: Mapping[int, int]) -> str:
    """ "batch 1 in 97% of 4,212 calls" (the commonest bucket), or "" with no calls."""
    total = sum(counts.values())
    if total <= 0:
        return ""
    bucket, n = max(counts.items(), key=lambda kv: (kv[1], -kv[0]))
    label = "batch 1" if bucket == 1 else f"batch {bucket // 2 + 1}-{bucket}"
    return f"{label} in {100 * n / total:.0f}% of {total:,} calls"


def dominant_bucket(counts: Mapping[Any, Any]) -> int | None:
    """The bucket most calls fell in, from a cached (untrusted) mapping; None when there is none."""
    best: tuple[int, int] | None = None
    for key, value in counts.items():
        if not is_uint(str(key)) or isinstance(value, bool) or not isinstance(value, int):
            continue
        bucket, n = int(str(key)), value
        if bucket < 1 or bucket > 1 << 30 or bucket & (bucket - 1) or n < 1:
            continue
        if best is None or (n, -bucket) > (best[1], -best[0]):
            best = (bucket, n)
    return best[0] if best else None

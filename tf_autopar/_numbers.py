"""Numbers on the command line: ASCII digits, finite, bounded above, refused with one clear line.

argparse's ``type=int`` takes '٣' for 3 (``int()`` reads any script's digits) and ``type=float``
takes 'inf' and 'nan', which then fail late and far away ("cannot convert float NaN to
integer", a numpy traceback in a child for a batch of 10**9). These types check where the
number is read (``tf-autopar tune: error: argument --budget: 'inf' is not a finite number of
seconds``, exit status 2); each command keeps its own lower bounds and their messages.
"""

from __future__ import annotations

import argparse
import math
from typing import Any, Callable

from tf_autopar._text import shown, uint_or_none
from tf_autopar.graph.dims import MAX_BATCH

MAX_STEPS = 1_000_000  # requests, steps, rounds: a week of a 1 ms model, not a typo's 10**12
MAX_SECONDS = 7 * 86400.0
#: Why ``--batch`` has its bound, said when a batch above it is refused.
BATCH_BOUND = "the largest batch tf-autopar synthesises inputs for"


def count(hi: int = MAX_STEPS, what: str = "") -> Callable[[str], int]:
    """An argparse type: a whole number of ASCII digits, at most ``hi`` (``what``: why that bound)."""

    def parse(text: str) -> int:
        value = uint_or_none(text.strip()) if len(text) <= 32 else None
        if value is None:
            raise argparse.ArgumentTypeError(f"{shown(text)} is not a whole number (ASCII digits 0-9)")
        if value > hi:
            raise argparse.ArgumentTypeError(f"{value} is above the bound of {hi}" + (f" ({what})" if what else ""))
        return value

    return parse


def seconds(hi: float = MAX_SECONDS) -> Callable[[str], float]:
    """An argparse type: a finite, non-negative number of seconds, at most ``hi``."""

    def parse(text: str) -> float:
        try:
            value = float(text) if text.strip().isascii() else math.nan
        except ValueError:
            value = math.nan
        if not math.isfinite(value) or value < 0:
            raise argparse.ArgumentTypeError(f"{shown(text)} is not a finite number of seconds")
        if value > hi:
            raise argparse.ArgumentTypeError(f"{value:g} s is above the bound of {hi:g} s")
        return value

    return parse


def add_batch_flag(parser: Any, *, default: int | None = None, help: str | None = None) -> None:
    """``--batch`` on ``parser`` (an ArgumentParser or argument group): a whole number up to
    MAX_BATCH (graph/dims.py), refused with the same message by every command and child that
    takes one; ``default`` and ``help`` are each command's own. A batch of 0 passes here: each
    command refuses it with its own message."""
    parser.add_argument("--batch", type=count(MAX_BATCH, BATCH_BOUND), default=default, help=help)

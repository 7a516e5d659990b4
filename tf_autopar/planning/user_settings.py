"""Thread settings the user already made explicitly, read from an environment mapping.

The planner keeps these and never overrides them: a user who exported
TF_NUM_INTRAOP_THREADS=4 has a reason. This module is pure: it parses whatever Mapping
it is given (callers pass ``os.environ``); it never reads the process environment itself.

Values TensorFlow or OpenMP could not possibly honour (``TF_NUM_INTEROP_THREADS=abc``,
``OMP_NUM_THREADS=-3``) raise ValueError naming the variable, instead of being silently
kept or silently replaced.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Mapping

from tf_autopar._text import shown
import tf_autopar.planning.variables as V

# Plan field -> environment variable, in the order they are reported.
KNOBS: dict[str, str] = {
    "inter_op": V.INTEROP,
    "intra_op": V.INTRAOP,
    "omp_threads": V.OMP_THREADS,
    "mkl_threads": V.MKL_THREADS,
    "kmp_blocktime": V.KMP_BLOCKTIME,
    "kmp_affinity": V.KMP_AFFINITY,
    "kmp_hw_subset": V.KMP_HW_SUBSET,
    "override_global_threadpool": V.OVERRIDE_GLOBAL_THREADPOOL,
}
ENV_VARS: tuple[str, ...] = tuple(KNOBS.values())

_INT = re.compile(r"[+]?[0-9]+")  # ASCII digits: \d would take "٣" for 3
_BLOCKTIME = re.compile(r"([0-9]+)\s*(ms|us|s)?", re.IGNORECASE | re.ASCII)
_BOOL = {"1": True, "true": True, "0": False, "false": False}
MAX_THREADS = 1 << 20  # a thread count beyond this is a typo TensorFlow or OpenMP would fail on, not a setting
MAX_BLOCKTIME_MS = (1 << 31) - 1  # OpenMP reads KMP_BLOCKTIME as a C int


@dataclass(frozen=True)
class UserSettings:
    """The explicit settings found, parsed; ``raw`` holds them verbatim (what to_env re-emits)."""

    raw: dict[str, str] = field(default_factory=dict)
    inter_op: int | None = None  # 0 = the user explicitly asked TF to pick
    intra_op: int | None = None
    omp_threads: int | None = None  # first level of a nested OMP_NUM_THREADS list
    mkl_threads: int | None = None
    kmp_blocktime: int | str | None = None  # milliseconds, or the raw text ("infinite", "50us")
    kmp_affinity: str | None = None
    kmp_hw_subset: str | None = None
    override_global_threadpool: bool | None = None

    def value(self, knob: str) -> object:
        return getattr(self, knob)

    def is_set(self, knob: str) -> bool:
        return KNOBS[knob] in self.raw


def _bad(name: str, text: str, expected: str) -> ValueError:
    return ValueError(f"{name}={shown(text)} in the environment is not {expected}")


def _bounded(text: str, hi: int = MAX_THREADS) -> int | None:
    """The ASCII integer in ``text`` when it is at most ``hi``, else None (checked before int():
    a 5,000-digit value is refused, not converted)."""
    if not _INT.fullmatch(text) or len(text.lstrip("+").lstrip("0")) > len(str(hi)):
        return None
    value = int(text)
    return value if value <= hi else None


def _non_negative_int(name: str, text: str) -> int:
    # TensorFlow's ReadInt64FromEnvVar: a decimal integer; 0 means "let TensorFlow pick".
    value = _bounded(text)
    if value is None:
        raise _bad(name, text, f"a non-negative integer up to {MAX_THREADS} (0 lets TensorFlow pick)")
    return value


def _positive_int(name: str, text: str) -> int:
    value = _bounded(text)
    if value is None or value < 1:
        raise _bad(name, text, f"a positive integer up to {MAX_THREADS}")
    return value


def _omp_num_threads(name: str, text: str) -> int:
    # OpenMP allows a comma-separated list, one entry per nesting level; the first is the team size.
    levels = [_bounded(part.strip()) for part in text.split(",")[:16]]
    if not levels or text.count(",") >= 16 or not all(level is not None and level >= 1 for level in levels):
        raise _bad(name, text, f"a positive integer up to {MAX_THREADS} (or an OpenMP list like '8,2')")
    return int(levels[0] or 1)


def _blocktime(name: str, text: str) -> int | str:
    if text.lower() == "infinite":
        return text
    match = _BLOCKTIME.fullmatch(text)
    number = _bounded(match.group(1), MAX_BLOCKTIME_MS) if match else None
    if match is None or number is None:
        raise _bad(name, text, "a non-negative time in milliseconds (or 'infinite', '50us', '1s')")
    unit = (match.group(2) or "ms").lower()
    return number if unit == "ms" else text


def _free_text(name: str, text: str) -> str:
    return text  # KMP_AFFINITY / KMP_HW_SUBSET grammars are the OpenMP runtime's to judge


def _bool(name: str, text: str) -> bool:
    # TensorFlow's ReadBoolFromEnvVar accepts exactly these (case-insensitive).
    try:
        return _BOOL[text.lower()]
    except KeyError:
        raise _bad(name, text, "a boolean (0, 1, true or false)") from None


_PARSERS = {
    "inter_op": _non_negative_int,
    "intra_op": _non_negative_int,
    "omp_threads": _omp_num_threads,
    "mkl_threads": _positive_int,
    "kmp_blocktime": _blocktime,
    "kmp_affinity": _free_text,
    "kmp_hw_subset": _free_text,
    "override_global_threadpool": _bool,
}


def read_user_settings(env: Mapping[str, str] | None) -> UserSettings:
    """Parse the thread-related variables of ``env`` (None = no explicit settings).

    Empty or blank values count as unset, as TensorFlow treats them.
    """
    if env is None:
        return UserSettings()
    if not isinstance(env, Mapping):
        raise ValueError(f"env must be a mapping of environment variables, got {type(env).__name__}")
    raw: dict[str, str] = {}
    parsed: dict[str, object] = {}
    for knob, name in KNOBS.items():
        text = env.get(name)
        if text is None or not str(text).strip():
            continue
        text = str(text).strip()
        parsed[knob] = _PARSERS[knob](name, text)
        raw[name] = text
    return UserSettings(raw=raw, **parsed)  # type: ignore[arg-type]

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

# Plan field -> environment variable, in the order they are reported.
KNOBS: dict[str, str] = {
    "inter_op": "TF_NUM_INTEROP_THREADS",
    "intra_op": "TF_NUM_INTRAOP_THREADS",
    "omp_threads": "OMP_NUM_THREADS",
    "mkl_threads": "MKL_NUM_THREADS",
    "kmp_blocktime": "KMP_BLOCKTIME",
    "kmp_affinity": "KMP_AFFINITY",
    "kmp_hw_subset": "KMP_HW_SUBSET",
    "override_global_threadpool": "TF_OVERRIDE_GLOBAL_THREADPOOL",
}
ENV_VARS: tuple[str, ...] = tuple(KNOBS.values())

_INT = re.compile(r"[+]?[0-9]+")  # ASCII digits: \d would take "٣" for 3
_BLOCKTIME = re.compile(r"([0-9]+)\s*(ms|us|s)?", re.IGNORECASE | re.ASCII)
_BOOL = {"1": True, "true": True, "0": False, "false": False}


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
    return ValueError(f"{name}={text!r} in the environment is not {expected}")


def _non_negative_int(name: str, text: str) -> int:
    # TensorFlow's ReadInt64FromEnvVar: a decimal integer; 0 means "let TensorFlow pick".
    if not _INT.fullmatch(text):
        raise _bad(name, text, "a non-negative integer (0 lets TensorFlow pick)")
    return int(text)


def _positive_int(name: str, text: str) -> int:
    if not _INT.fullmatch(text) or int(text) < 1:
        raise _bad(name, text, "a positive integer")
    return int(text)


def _omp_num_threads(name: str, text: str) -> int:
    # OpenMP allows a comma-separated list, one entry per nesting level; the first is the team size.
    levels = [part.strip() for part in text.split(",")]
    if not levels or not all(_INT.fullmatch(level) and int(level) >= 1 for level in levels):
        raise _bad(name, text, "a positive integer (or an OpenMP list like '8,2')")
    return int(levels[0])


def _blocktime(name: str, text: str) -> int | str:
    if text.lower() == "infinite":
        return text
    match = _BLOCKTIME.fullmatch(text)
    if not match:
        raise _bad(name, text, "a non-negative time in milliseconds (or 'infinite', '50us', '1s')")
    number, unit = int(match.group(1)), (match.group(2) or "ms").lower()
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

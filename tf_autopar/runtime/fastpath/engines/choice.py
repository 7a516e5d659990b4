"""Which engines a bucket may try besides TensorFlow's sessions, and at what setting.

An engine is a candidate when it is installed (``available()``), not excluded by the user
(``TF_AUTOPAR_ENGINES``, a comma list of engine names, ``tensorflow`` alone: sessions only), not
failed already for this function, and of a precision the user opted in to: f32 always, bf16 only
with ``enable(precision="bf16")`` or ``TF_AUTOPAR_PRECISION=bf16`` and only on a CPU with bf16
arithmetic (AVX512_BF16 or AMX), where it is fast rather than emulated.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping

from tf_autopar.topology.cpuinfo import first_processor_fields

log = logging.getLogger("tf_autopar.runtime")

ENGINES_VAR = "TF_AUTOPAR_ENGINES"
PRECISION_VAR = "TF_AUTOPAR_PRECISION"
PRECISIONS = ("f32", "bf16")
BF16_FLAGS = ("avx512_bf16", "amx_bf16")


def checked_precision(value: str | None) -> str:
    """``value`` as a precision name; ValueError naming the accepted ones otherwise."""
    text = (value or "f32").strip().lower()
    if text in ("fp32", "float32"):
        text = "f32"
    if text in ("bfloat16",):
        text = "bf16"
    if text not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {value!r}")
    return text


def wanted_precision(given: str, environ: Mapping[str, str] = os.environ) -> str:
    """The precision the user opted in to: enable()'s argument, else the variable, else f32."""
    if given and given != "f32":
        return given
    value = environ.get(PRECISION_VAR, "").strip()
    if not value:
        return "f32"
    try:
        return checked_precision(value)
    except ValueError as exc:
        log.warning("tf_autopar: %s: %s; using f32", PRECISION_VAR, exc)
        return "f32"


def allowed_names(environ: Mapping[str, str] = os.environ) -> frozenset[str] | None:
    """The engines ``TF_AUTOPAR_ENGINES`` allows (None: unset, every installed one)."""
    value = environ.get(ENGINES_VAR, "").strip()
    if not value:
        return None
    return frozenset(part.strip().lower() for part in value.split(",") if part.strip())


def allows(allowed: frozenset[str] | None, name: str, engine: object) -> bool:
    """``TF_AUTOPAR_ENGINES`` (read by allowed_names) lets ``name`` in: by its name, or by its
    family's (``onnxruntime`` allows ``onnxruntime-spinning`` too)."""
    return allowed is None or name in allowed or getattr(engine, "family", name) in allowed


def bf16_capable(isa: Iterable[str]) -> bool:
    return any(flag in BF16_FLAGS for flag in isa)


def cpu_flags(path: str = "/proc/cpuinfo") -> tuple[str, ...]:
    """The first processor's flags (an empty tuple where they cannot be read)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            fields = first_processor_fields(fh.read())
    except OSError:
        return ()
    return tuple((fields.get("flags") or fields.get("Features") or "").split())


def failed_why(name: str, engine: object, failed: Mapping[str, str]) -> str:
    """Why ``name`` could not run a function's graph ("" when it could; ``failed``: its
    engine_failed): it, or its family (variants of one engine share the conversion, and fail together)."""
    return failed.get(name) or failed.get(getattr(engine, "family", name)) or ""


def failed_here(name: str, engine: object, failed: Mapping[str, str]) -> bool:
    """Whether ``name`` could not run a function's graph (failed_why, as a yes or no)."""
    return bool(failed_why(name, engine, failed))


def candidate_engines(
    engines: Mapping[str, object],
    default: str,
    precision: str,
    isa: Iterable[str],
    failed: Mapping[str, str],
    allowed: frozenset[str] | None,
) -> list[str]:
    """The engine names to try beside ``default``, in registration order (pure)."""
    capable = bf16_capable(isa)
    out = []
    for name, engine in engines.items():
        if name == default or failed_here(name, engine, failed):
            continue
        if not allows(allowed, name, engine):
            continue
        kind = getattr(engine, "precision", "f32")
        if kind == "bf16" and not (precision == "bf16" and capable):
            continue
        why = _unavailable(engine)
        if why:
            log.debug("tf_autopar: engine %s is not a candidate: %s", name, why)
            continue
        out.append(name)
    return out


def engine_setting(budget: int, streams: int) -> tuple[int, int, int]:
    """An engine's setting from the process's CPU budget: ``streams`` streams splitting it, each with
    one inter-op pool (the engines schedule their own graph's parallel branches)."""
    streams = max(1, min(streams, budget))
    return 1, max(1, budget // streams), streams


#: Engines also tried on the calling thread alone (one intra-op thread per stream) where the plan
#: gives TensorFlow's sessions one intra-op thread (ops too small to split). Measured with ONNX
#: Runtime in one process, interleaved (benchmarks/bench_engine_settings.py --configs
#: ort-spin,ort-spin-1t,ort-nospin,ort-nospin-1t, 9 rounds, 2-core EPYC): a YouTube-DNN-style
#: recommender at batch 1 0.0745 ms on one thread against 0.0909 spinning on two (1.22x), a tiny
#: MLP alike, DCN-V2 b1 0.167 against 0.159; where ops are larger two threads won by far (DLRM b64
#: 1.06 against 0.80, MobileNetV2 b1 7.8 against 4.2), so it is a candidate, not the setting.
ONE_THREAD_TOO = ("onnxruntime",)


def engine_settings(name: str, budget: int, streams: int, plan_intra: int) -> list[tuple[int, int, int]]:
    """The settings ``name`` is tried at: the budget's (engine_setting), and for ONE_THREAD_TOO
    one intra-op thread a stream where the plan gives one and the budget more (pure)."""
    at = engine_setting(budget, streams)
    if name in ONE_THREAD_TOO and plan_intra == 1 and at[1] > 1:
        return [at, (1, 1, at[2])]
    return [at]


def _unavailable(engine: object) -> str:
    check = getattr(engine, "available", None)
    if check is None:
        return ""
    try:
        return str(check() or "")
    except Exception as exc:  # an engine's own check failing: not a candidate
        return f"{type(exc).__name__}: {exc}"

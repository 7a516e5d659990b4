"""The planner's modes, defined once: every option, check and message reads them from here."""

from __future__ import annotations

LATENCY = "latency"  # one request at a time
THROUGHPUT = "throughput"  # several streams of requests, each on its slice of the cores
TRAINING = "training"  # training steps: every socket, tf.data sized

MODES = (LATENCY, THROUGHPUT, TRAINING)
INFERENCE_MODES = (LATENCY, THROUGHPUT)  # what a model file (no training step) is measured in


def check_mode(mode: str, allowed: tuple[str, ...] = MODES) -> str:
    """``mode`` if it is one of ``allowed``, else ValueError naming the choices."""
    if mode not in allowed:
        raise ValueError(f"unknown mode {mode!r}; choose from {', '.join(allowed)}")
    return mode

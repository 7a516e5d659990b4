"""Fail-open helpers: one warning per kind of trouble, never an exception into user code."""

from __future__ import annotations

import logging
import os

from tf_autopar import _warn

log = logging.getLogger("tf_autopar.runtime")

# Tests plant an exception in a named stage ("analysis", "plan", "session", "function",
# "enable", "cache") with TF_AUTOPAR_TEST_FAIL=stage[,stage...] to check fail-open behaviour.
TEST_FAIL_VAR = "TF_AUTOPAR_TEST_FAIL"


def maybe_fail(stage: str) -> None:
    planted = os.environ.get(TEST_FAIL_VAR, "")
    if planted and stage in {s.strip() for s in planted.split(",")}:
        raise RuntimeError(f"planted failure in {stage} ({TEST_FAIL_VAR})")


def warn_once(key: str, message: str) -> bool:
    """Log ``message`` as a warning the first time ``key`` is seen (tf_autopar._warn); True if logged."""
    return _warn.warn_once(key, message, log.name)


def fail_open(what: str, exc: BaseException) -> None:
    """Report an internal failure once; the caller then proceeds on TensorFlow's own settings."""
    reason = f"{type(exc).__name__}: {exc}"
    warn_once(
        f"fail:{what}",
        f"tf_autopar could not {what}; TensorFlow runs with its own settings there: {reason}",
    )
    log.debug("tf_autopar failure in %s", what, exc_info=exc)

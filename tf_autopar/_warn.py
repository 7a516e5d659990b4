"""Warnings a user sees: one line per distinct problem, on stderr unless logging says otherwise.

A library's usual ``NullHandler`` would hide every warning in a program that never
configured logging, and a warning nobody reads is no warning. So the ``tf_autopar`` logger
carries a fallback handler that writes to stderr only when no other handler would see the
record (none on the way from the emitting logger up to the root): configure logging, or
add a handler to ``tf_autopar``, and it steps aside, so nothing is printed twice.

``TF_AUTOPAR_LOG``: ``quiet`` (the fallback prints nothing), ``warning`` (default), ``info``
or ``debug`` (more detail, also through the fallback).

``warn_once(key, message)`` is the one way tf_autopar warns about a problem: the first time
a key is seen the message is logged and kept for ``status().warnings``; later times nothing.
"""

from __future__ import annotations

import logging
import os
import sys
import threading

ROOT_LOGGER = "tf_autopar"
LEVELS = {"quiet": logging.CRITICAL + 1, "warning": logging.WARNING, "info": logging.INFO, "debug": logging.DEBUG}

_lock = threading.Lock()
SEEN: set[str] = set()  # keys warned about in this process
ISSUED: list[str] = []  # their messages, in order (status().warnings)


class FallbackHandler(logging.Handler):
    """Writes tf_autopar's records to stderr when no other handler would (see module docstring)."""

    def handle(self, record: logging.LogRecord) -> bool:
        if _handled_elsewhere(record.name, self):
            return False
        return bool(super().handle(record))

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = record.getMessage()
            if not text.startswith(ROOT_LOGGER):
                text = f"{ROOT_LOGGER}: {text}"
            sys.stderr.write(text + "\n")
            sys.stderr.flush()
        except Exception:  # a closed stderr must not break the caller
            self.handleError(record)


def _handled_elsewhere(name: str, own: logging.Handler) -> bool:
    logger: logging.Logger | None = logging.getLogger(name)
    while logger is not None:
        if any(h is not own for h in logger.handlers):
            return True
        if not logger.propagate:
            return False
        logger = logger.parent  # type: ignore[assignment]
    return False


def install() -> FallbackHandler:
    """Attach the fallback handler to the ``tf_autopar`` logger (once), at TF_AUTOPAR_LOG's level."""
    logger = logging.getLogger(ROOT_LOGGER)
    for h in logger.handlers:
        if isinstance(h, FallbackHandler):
            return h
    choice = os.environ.get("TF_AUTOPAR_LOG", "").strip().lower()
    level = LEVELS.get(choice, logging.WARNING)
    handler = FallbackHandler(level)
    logger.addHandler(handler)
    if choice in ("info", "debug") and logger.level == logging.NOTSET:
        logger.setLevel(level)  # records below WARNING are not even made otherwise
    return handler


def _reinit_after_fork() -> None:
    global _lock
    _lock = threading.Lock()  # another thread may have held it when the process forked


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reinit_after_fork)


def warn_once(key: str, message: str, logger: str = ROOT_LOGGER) -> bool:
    """Log ``message`` as a warning the first time ``key`` is seen; True if it was logged."""
    with _lock:
        if key in SEEN:
            return False
        SEEN.add(key)
        ISSUED.append(message)
    logging.getLogger(logger).warning("%s", message)
    return True

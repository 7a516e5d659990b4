"""Whether the fast path and its live tuning are on, and who a bucket's tuning is recorded as."""

from __future__ import annotations

import os

from tf_autopar.planning.modes import INFERENCE_MODES
from tf_autopar.runtime.state import STATE

SWITCH_VAR = "TF_AUTOPAR_FAST_PATH"
LIVE_VAR = "TF_AUTOPAR_TUNE_LIVE"
PATCH_NAME = "fast path (loaded SavedModel signatures and restored functions)"

#: Who measured a bucket's setting (the ``by`` of its evidence): live calls, or `tf-autopar tune`'s
#: synthesised ones in a process of its own (tuning/inprocess.py passes BY_TUNE: roster.tune_as).
BY_LIVE, BY_TUNE = "live", "tune"

_OFF = ("0", "false", "no", "off")


#: os.environ's own map of encoded names (CPython on POSIX), kept current by os.environ's writes:
#: looking a name up there costs 34 ns where ``os.environ.get`` of an unset name costs 714 (its
#: KeyError), and every served call asks (2-core EPYC)
_ENVIRON_DATA = getattr(os.environ, "_data", None)
if not isinstance(_ENVIRON_DATA, dict):
    _ENVIRON_DATA = None
_SWITCH_KEY = os.fsencode(SWITCH_VAR)


def switched_off() -> str:
    """``"TF_AUTOPAR_FAST_PATH=0"`` when the environment switch turns the fast path off, else ""."""
    if _ENVIRON_DATA is not None and _SWITCH_KEY not in _ENVIRON_DATA:
        return ""
    value = os.environ.get(SWITCH_VAR, "").strip()
    return f"{SWITCH_VAR}={value}" if value.lower() in _OFF else ""


def live_wanted() -> bool:
    """Live tuning is on: the fast path is, and neither ``tune_live=False`` nor the variable turned it off."""
    value = os.environ.get(LIVE_VAR, "").strip().lower()
    return wanted() and STATE.tune_live and value not in _OFF


def wanted() -> bool:
    """The fast path is on: enabled, in an inference mode, not switched off by argument or variable."""
    return STATE.enabled and STATE.fast_path and STATE.mode in INFERENCE_MODES and not switched_off()

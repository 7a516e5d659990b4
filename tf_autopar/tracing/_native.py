"""ctypes binding to the native recorder (native/tf_autopar_trace.cc)."""

from __future__ import annotations

import ctypes
import logging
import os
import threading
from pathlib import Path

import numpy as np

from tf_autopar.tracing.build import NativeBuildError, build, open_library
from tf_autopar.tracing.model import RawChunk

log = logging.getLogger("tf_autopar.tracing")

ABI_VERSION = 1
LEVEL_OPS = 2  # TF traces expensive kernels at level 2 (kInfo) ...
LEVEL_ALL_OPS = 3  # ... and cheap, inlined ones at level 3 (kVerbose), with their input shapes
# Bit 0 of the filter mask carries TF's memory-allocation events (two per tensor, each a
# formatted string); every other TraceMe passes the default mask (all ones).
FILTER_NO_MEMORY = (1 << 64) - 2

_lib: ctypes.CDLL | None = None
_lib_error: str | None = None
_lib_lock = threading.Lock()


class TraceBusyError(RuntimeError):
    """Another recording (tf.profiler, or a trace() in another thread) is active."""


def _declare(lib: ctypes.CDLL) -> None:
    i64, p = ctypes.c_int64, ctypes.c_void_p
    sigs = {
        "tfap_abi_version": ([], ctypes.c_int),
        "tfap_now_ns": ([], i64),
        "tfap_is_recording": ([], ctypes.c_int),
        "tfap_start": ([ctypes.c_int, ctypes.c_uint64], ctypes.c_int),
        "tfap_stop": ([], p),
        "tfap_result_num_events": ([p], i64),
        "tfap_result_events": ([p], ctypes.POINTER(i64)),
        "tfap_result_num_names": ([p], i64),
        "tfap_result_names": ([p, ctypes.POINTER(i64)], ctypes.POINTER(ctypes.c_char)),
        "tfap_result_num_threads": ([p], i64),
        "tfap_result_thread_names": ([p, ctypes.POINTER(i64)], ctypes.POINTER(ctypes.c_char)),
        "tfap_result_thread_ids": ([p], ctypes.POINTER(i64)),
        "tfap_result_free": ([p], None),
    }
    for name, (args, res) in sigs.items():
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = args, res


def load() -> ctypes.CDLL:
    """The loaded library (built first if needed). Raises NativeBuildError with the reason."""
    global _lib, _lib_error
    with _lib_lock:
        if _lib is not None:
            return _lib
        if _lib_error is not None:
            raise NativeBuildError(_lib_error)
        try:
            import tensorflow  # noqa: F401  (the library resolves symbols from TF's loaded libraries)

            path = Path(os.environ["TF_AUTOPAR_NATIVE_LIB"]) if os.environ.get("TF_AUTOPAR_NATIVE_LIB") else build()
            fd = open_library(path)  # checked: owned by this user, nobody else may write it
            try:
                lib = ctypes.CDLL(f"/proc/self/fd/{fd}")
            finally:
                os.close(fd)
            _declare(lib)
            if lib.tfap_abi_version() != ABI_VERSION:
                raise NativeBuildError(f"{path} has ABI {lib.tfap_abi_version()}, expected {ABI_VERSION}")
        except NativeBuildError as exc:
            _lib_error = str(exc)
            raise
        except OSError as exc:
            _lib_error = f"loading the native tracer failed: {exc}"
            raise NativeBuildError(_lib_error) from exc
        _lib = lib
        return lib


class NativeBackend:
    """Records TF's TraceMe events with TraceMeRecorder directly (see the C++ file for why)."""

    name = "native"

    def __init__(self) -> None:
        self._lib = load()

    def now_ns(self) -> int:
        return int(self._lib.tfap_now_ns())

    def start(self, level: int) -> None:
        rc = self._lib.tfap_start(level, ctypes.c_uint64(FILTER_NO_MEMORY))
        if rc == 0:
            return
        if rc == 2:
            raise TraceBusyError(
                "another TensorFlow profiler session is active (tf.profiler.experimental.start?); "
                "stop it before tf_autopar.trace()"
            )
        if rc == 1:
            raise TraceBusyError("the native tracer is already recording")
        raise TraceBusyError("TensorFlow's TraceMe recorder refused to start (already recording?)")

    def stop(self) -> RawChunk:
        lib = self._lib
        res = lib.tfap_stop()
        if not res:
            return RawChunk((), (), (), np.zeros((0, 4), dtype=np.int64))
        try:
            n = lib.tfap_result_num_events(res)
            events = (
                np.ctypeslib.as_array(lib.tfap_result_events(res), shape=(n * 4,)).reshape(n, 4).copy()
                if n
                else np.zeros((0, 4), dtype=np.int64)
            )
            names = _split(lib.tfap_result_names, res, lib.tfap_result_num_names(res))
            n_threads = lib.tfap_result_num_threads(res)
            threads = _split(lib.tfap_result_thread_names, res, n_threads)
            tids = (
                tuple(int(x) for x in np.ctypeslib.as_array(lib.tfap_result_thread_ids(res), shape=(n_threads,)))
                if n_threads
                else ()
            )
        finally:
            lib.tfap_result_free(res)
        return RawChunk(names, threads, tids, events)


def _split(fn, res, count: int) -> tuple[str, ...]:
    size = ctypes.c_int64(0)
    ptr = fn(res, ctypes.byref(size))
    if count == 0:
        return ()
    blob = ctypes.string_at(ptr, size.value)
    parts = blob.split(b"\0")[:count]
    return tuple(p.decode("utf-8", "replace") for p in parts)

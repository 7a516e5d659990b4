"""Pure-Python fallback: tf.profiler.experimental to a temporary directory, then parse
the xplane.pb it writes. The same TraceMe events as the native recorder (host tracer,
same level), so the same structures come out; it costs more (thread-pool listener and
memory events while recording, proto serialisation and a file at stop)."""

from __future__ import annotations

import glob
import logging
import os
import shutil
import tempfile
import time

import numpy as np

from tf_autopar.tracing._native import TraceBusyError
from tf_autopar.tracing.model import RawChunk

log = logging.getLogger("tf_autopar.tracing")


def _xplane_pb2():
    """The XSpace proto module shipped in the TF pip package (location moved across releases)."""
    for mod in (
        "tensorflow.tsl.profiler.protobuf.xplane_pb2",
        "tsl.profiler.protobuf.xplane_pb2",
        "xla.tsl.profiler.protobuf.xplane_pb2",
    ):
        try:
            return __import__(mod, fromlist=["XSpace"])
        except ImportError:
            continue
    raise ImportError("no xplane_pb2 module found in this TensorFlow installation")


def parse_xspace(data: bytes, origin_ns: int = 0) -> RawChunk:
    """Host-plane events of a serialised XSpace as a RawChunk (names as in the XEventMetadata).

    tf.profiler normalises timestamps to its session start; ``origin_ns`` (the wall-clock
    time of that start) makes them absolute again.
    """
    xs = _xplane_pb2().XSpace()
    xs.ParseFromString(data)
    names: dict[str, int] = {}
    threads: list[str] = []
    tids: list[int] = []
    rows: list[np.ndarray] = []
    for plane in xs.planes:
        if not plane.name.startswith("/host:"):
            continue
        md_name = {k: v.name for k, v in plane.event_metadata.items()}
        for line in plane.lines:
            if not line.events:
                continue
            ti = len(threads)
            threads.append(line.name or line.display_name or str(line.id))
            tids.append(int(line.id))
            n = len(line.events)
            arr = np.empty((n, 4), dtype=np.int64)
            base = origin_ns + int(line.timestamp_ns)
            for j, e in enumerate(line.events):
                nm = md_name.get(e.metadata_id, "")
                nm = nm.split("#", 1)[0]
                arr[j, 0] = names.setdefault(nm, len(names))
                start = base + e.offset_ps // 1000
                arr[j, 1] = ti
                arr[j, 2] = start
                arr[j, 3] = start + e.duration_ps // 1000
            rows.append(arr)
    events = np.concatenate(rows) if rows else np.zeros((0, 4), dtype=np.int64)
    return RawChunk(tuple(names), tuple(threads), tuple(tids), events)


class ProfilerBackend:
    """tf.profiler.experimental start/stop around the window; xplane.pb parsed at stop."""

    name = "tf.profiler"

    def __init__(self) -> None:
        self._dir: str | None = None
        self._origin_ns = 0

    def now_ns(self) -> int:
        return time.time_ns()

    def start(self, level: int) -> None:
        import tensorflow as tf

        self._dir = tempfile.mkdtemp(prefix="tf_autopar_trace_")
        options = tf.profiler.experimental.ProfilerOptions(
            host_tracer_level=level, python_tracer_level=0, device_tracer_level=0
        )
        # The session takes its start time inside start(): never before this instant.
        self._origin_ns = time.time_ns()
        try:
            tf.profiler.experimental.start(self._dir, options=options)
        except (tf.errors.AlreadyExistsError, tf.errors.UnavailableError) as exc:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None
            raise TraceBusyError(f"another TensorFlow profiler session is active: {exc}") from exc

    def stop(self) -> RawChunk:
        import tensorflow as tf

        try:
            tf.profiler.experimental.stop()
            files = glob.glob(os.path.join(self._dir or "", "**", "*.xplane.pb"), recursive=True)
            if not files:
                log.warning("tf.profiler wrote no xplane.pb; the trace is empty")
                return RawChunk((), (), (), np.zeros((0, 4), dtype=np.int64))
            with open(files[0], "rb") as f:
                return parse_xspace(f.read(), self._origin_ns)
        finally:
            if self._dir:
                shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

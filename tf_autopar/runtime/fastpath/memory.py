"""The build's memory rule: does a frozen copy (and the build that makes it) fit beside the model?

The builder asks ``room_for_build(variable_bytes, sessions, opening)`` before it freezes and
before it opens each session: (ok, reason). Two rules, both must hold:

- the host rule, as before: the frozen copy within ``TF_AUTOPAR_FAST_PATH_MAX_MB`` and a quarter
  of the host's available memory, the build's moment (BUILD_FACTOR) within half of it;
- under a cgroup memory limit (topology/memory.py's reading, re-read at each question by one
  ``MemoryReader`` per process): the room is the limit less the group's working set less a
  margin (planning/memory_budget.py), and what the build adds at its peak must fit in it. A
  freeze needs ``build_need_bytes`` (the converter, the import and the first session's first
  run); each further session (a stream, a live-tuning candidate) ``session_need_bytes``.

The estimate, measured on an AMD EPYC host (2 CPUs; benchmarks/bench_build_memory.py,
results/build_memory_gc_epyc.json): the peak resident size over the served process's (loaded, one
call at batch 1, trimmed), VmHWM reset before each stage, on the build as it runs now (the
converter's function dropped before the import and its reference cycles collected after it
(``after_stage``); ``malloc_trim`` after the freeze, the import and each first run). Peak a build
adds (variables in brackets): MobileNetV2 +201 MB (13.5 MB), EfficientNet-B0 +303 MB (20.3),
NASNetMobile +343 MB (20.3), DLRM +945 MB (73.8), Xception +1,200 MB (87.4); before the collection
(results/build_memory_epyc.json) +219, +419, +511, +1,319, +1,651: the converter's garbage was
still there when grappler's first run set the peak. What a build keeps over the served process
after its first session: Xception +525 MB (+976 before, +1,460 untrimmed), DLRM +485 (+860). A
further session's first run, over the trimmed process: +186, +280, +301, +815, +1,150 MB. Fitted
from above: NEED_FACTOR 14x the variables + 100 MB per build (Xception 1,324 MB, 10% over; each
model 10-44% over), SESSION_FACTOR 13x + 96 MB per further session (7-46% over).

Without a container limit (``footprint_check``): what the fast path keeps and what a build adds at
its peak stay within FOOTPRINT_FACTOR (2) x the process's memory without the fast path (or 1.5 GB
over it, FOOTPRINT_FLOOR_MB, when that is more): its resident size less ``held_bytes`` (each
frozen graph and each open session, by the measured estimate). Eight models in one process had
peaked at 3.35x the default path's resident memory with every frozen copy built; under the bound
the ones whose build does not fit stay on the original path, said in status() with the numbers.

Workers of one memory cgroup share its limit, so one build at a time per group: ``build_lock``
(fcntl.flock on a file named from the group's directory, ``lock_path``) is held by the builder
thread from the freeze until its session has run once, and around each later session's first
run, and by the conversion thread (converting.py) while an engine's conversion child runs; the
process's threads share one hold, and a session opened beside a conversion counts the child's
estimated peak as taken (``reserving``). The room is read after the lock is taken, so each build
sees the others' finished copies. The builder waits for it; a request never does (it is answered
the original way meanwhile).

Under pressure while serving (``refresh``, called each second by quota_watch.py's thread while
the fast path has work, and by a builder waiting for room): room under the margin, or memory
PSI "some avg10" of PSI_HIGH % or more, pauses the builds and closes live-tuning candidates
(roster.py); said once (a warning) and in status(); lifted when the room comes back.
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import fcntl
import gc
import hashlib
import logging
import os
import tempfile
import threading
import time
import weakref
from typing import Any, Callable, Iterator, Mapping

from tf_autopar._text import is_uint
from tf_autopar.planning.memory_budget import budget_for, check, format_bytes
from tf_autopar.runtime import state
from tf_autopar.runtime.records import MemoryRecord
from tf_autopar.runtime.safety import warn_once
from tf_autopar.topology.memory import MemoryReader

log = logging.getLogger("tf_autopar.runtime")

#: The frozen path keeps its constants once in the imported graph and once in each session (about
#: twice the variables' bytes for one session). It is taken only while that extra memory stays
#: within MAX_EXTRA_MB (``TF_AUTOPAR_FAST_PATH_MAX_MB`` overrides) and within a quarter of the
#: memory available when the build starts.
MAX_EXTRA_MB = 2048
MAX_EXTRA_VAR = "TF_AUTOPAR_FAST_PATH_MAX_MB"
AVAILABLE_SHARE = 0.25
#: Building costs far more for a moment: TensorFlow's converter, the graph import and grappler's
#: first run each copy the graph several times. Measured peaks (peak RSS of a server process over
#: the original path's, benchmarks/bench_fastpath.py, live tuning's candidate sessions included;
#: the constants' size in brackets): MobileNetV2 +373 MB (14 MB), NASNetMobile +643 MB (21 MB),
#: DLRM +1.65 GB (74 MB), Xception +2.33 GB (88 MB): up to about 26x the constants plus 250 MB. A
#: build starts only when BUILD_FACTOR x the variables + BUILD_BASE_MB fits in half the memory
#: available, so that it cannot push the server into the kernel's out-of-memory killer.
BUILD_FACTOR = 27
BUILD_BASE_MB = 256
BUILD_SHARE = 0.5
#: Under a cgroup memory limit, the measured estimate (module docstring): a build's peak over the
#: served process is NEED_FACTOR x the variables + NEED_BASE_MB; each further session's first run
#: SESSION_FACTOR x the variables + SESSION_BASE_MB.
NEED_FACTOR = 14.0
NEED_BASE_MB = 100
SESSION_FACTOR = 13.0
SESSION_BASE_MB = 96


def frozen_extra_bytes(variable_bytes: int, sessions: int) -> int:
    """What the frozen path adds: the graph's constants plus each session's copy."""
    return variable_bytes * (1 + max(1, sessions))


def max_extra_bytes(environ: Mapping[str, str] | None = None) -> int:
    """The configured bound in bytes; ValueError naming the variable for a value that is no count."""
    env = os.environ if environ is None else environ
    text = env.get(MAX_EXTRA_VAR, "").strip()
    if not text:
        return MAX_EXTRA_MB << 20
    if not is_uint(text):
        raise ValueError(f"{MAX_EXTRA_VAR} must be a whole number of megabytes (ASCII digits), got {text!r}")
    return min(int(text), 1 << 40) << 20


def build_peak_bytes(variable_bytes: int) -> int:
    """What a build may need for a moment beside the running model (see BUILD_FACTOR)."""
    return variable_bytes * BUILD_FACTOR + (BUILD_BASE_MB << 20)


def memory_verdict(
    variable_bytes: int, sessions: int, available_bytes: int | None, bound_bytes: int
) -> tuple[bool, str]:
    """(take the fast path?, why not). ``available_bytes`` None: unknown, only the bound counts."""
    peak = build_peak_bytes(variable_bytes)
    if available_bytes is not None and peak > available_bytes * BUILD_SHARE:
        return False, (
            f"building its frozen copy may take about {_mb(peak)} for a moment (the variables' "
            f"{_mb(variable_bytes)} copied by the converter, the import and grappler), over half the "
            f"{_mb(available_bytes)} of memory available"
        )
    extra = frozen_extra_bytes(variable_bytes, sessions)
    if extra > bound_bytes:
        return False, (
            f"its frozen copy would add about {_mb(extra)} (the variables' {_mb(variable_bytes)} in the "
            f"graph and in each of {max(1, sessions)} session(s)), over the bound of {_mb(bound_bytes)} "
            f"({MAX_EXTRA_VAR})"
        )
    if available_bytes is not None and extra > available_bytes * AVAILABLE_SHARE:
        return False, (
            f"its frozen copy would add about {_mb(extra)}, over a quarter of the "
            f"{_mb(available_bytes)} of memory available"
        )
    return True, ""


def _mb(n: int) -> str:
    return f"{n / (1 << 20):,.0f} MB" if n >= 1 << 20 else f"{n / 1024:,.0f} kB"


def room_for_build(variable_bytes: int, sessions: int = 1, opening: int = 0) -> tuple[bool, str]:
    """(may the build go ahead?, why not): ``sessions`` sessions in all once it is done, over the
    variables' ``variable_bytes``, against the bound and the memory available now; under a cgroup
    memory limit, what it adds at its peak against the room left under the limit: a freeze
    (``opening`` 0) needs build_need_bytes, opening ``opening`` more sessions session_need_bytes."""
    ok, why = memory_verdict(variable_bytes, sessions, available_bytes(), max_extra_bytes())
    if not ok:
        return ok, why
    if opening:
        need, what = session_need_bytes(variable_bytes, opening), f"opening {_sessions(opening)} of its frozen copy"
    else:
        need, what = build_need_bytes(variable_bytes), "building its frozen copy"
    return _fits(need, what)


def room_for_engine(variable_bytes: int, sessions: int, need: tuple[int, int], what: str) -> tuple[bool, str]:
    """As room_for_build, for another engine's runner, by that engine's own estimate ``need``:
    (what this process adds, the peak of the child converting the graph, 0 when converted). The
    child is a process of its own: its peak counts against half the host's available memory and,
    in the same memory cgroup, against the room under the limit; the footprint bound is this
    process's."""
    available = available_bytes()
    ok, why = memory_verdict(variable_bytes, sessions, available, max_extra_bytes())
    if not ok:
        return ok, why
    process, child = need
    if child and available is not None and child > available * BUILD_SHARE:
        return False, (
            f"converting it for {what} in a child process may take about {format_bytes(child)}, over half "
            f"the {format_bytes(available)} of memory available"
        )
    reading = limit_reading()
    if reading is not None and reading.limit_bytes is not None:
        # the child ends before the runner is compiled: the peak is the larger of the two
        return _under_limit(
            reading, max(process, child), f"building {what}" + (" (its conversion)" if child > process else "")
        )
    return footprint_check(process, f"building {what}")


def _fits(need: int, what: str) -> tuple[bool, str]:
    """``need`` against the room under the container's limit, or the footprint bound without one."""
    reading = limit_reading()
    if reading is None or reading.limit_bytes is None:
        return footprint_check(need, what)
    return _under_limit(reading, need, what)


def _under_limit(reading: Any, need: int, what: str) -> tuple[bool, str]:
    """``need`` against the room under the limit of ``reading``, a conversion running beside it counted."""
    beside = reserved_bytes()
    if beside:
        what += f" (beside a conversion that may take {format_bytes(beside)})"
    return check(budget_for(reading), need + beside, what)


# ---------------------------------------------------------------------- builds beside a conversion

_reserved: dict[object, int] = {}
_reserved_lock = threading.Lock()


@contextlib.contextmanager
def reserving(nbytes: int) -> Iterator[None]:
    """While a conversion child runs beside the builder (converting.py), its estimated peak is
    counted as taken under a container's limit: the cgroup's usage holds only what the child
    has reached so far, and a session's first run beside it must still fit under its peak."""
    token = object()
    with _reserved_lock:
        _reserved[token] = max(0, int(nbytes))
    try:
        yield
    finally:
        with _reserved_lock:
            _reserved.pop(token, None)


def reserved_bytes() -> int:
    """The conversions' peaks counted as taken now (0 with none running)."""
    with _reserved_lock:
        return sum(_reserved.values())


def available_bytes() -> int | None:
    """The host's memory available now (psutil), or None when unknown (then only the bound counts)."""
    try:
        import psutil  # deferred: optional, and a build is the only reader

        return int(psutil.virtual_memory().available)
    except Exception:
        return None


def _sessions(n: int) -> str:
    return "a session" if n == 1 else f"{n} sessions"


# ---------------------------------------------------------------------- the estimate under a limit


def build_need_bytes(variable_bytes: int) -> int:
    """What a build adds at its peak over the served process: the converter, the import and the
    first session's first run (grappler), with the trims between them (measured: the module docstring)."""
    return int(variable_bytes * NEED_FACTOR) + (NEED_BASE_MB << 20)


def session_need_bytes(variable_bytes: int, sessions: int = 1) -> int:
    """What opening ``sessions`` more sessions of a frozen graph adds at their first runs."""
    return max(1, sessions) * (int(variable_bytes * SESSION_FACTOR) + (SESSION_BASE_MB << 20))


# ---------------------------------------------------------------------- without a limit: the process's footprint

#: Without a container limit, what the fast path keeps and what a build takes at its peak stay
#: within FOOTPRINT_FACTOR x the process's memory without the fast path (or FOOTPRINT_FLOOR_MB over
#: it), that is its resident size less what the fast path holds (``held_bytes``): eight models in
#: one process had peaked at 3.35x the default path's resident memory with every frozen copy built.
#: ``TF_AUTOPAR_FAST_PATH_MEMORY_FACTOR`` overrides (a number; 0 turns the bound off). Under a
#: container's limit the limit rules instead.
FOOTPRINT_FACTOR = 2.0
FOOTPRINT_VAR = "TF_AUTOPAR_FAST_PATH_MEMORY_FACTOR"
#: the share of the bound kept free for the requests' own growth while a build runs
FOOTPRINT_MARGIN = 0.05
#: ... but a small process may always grow by this much (with the factor on): without it, a single
#: BERT-sized model (0.6 GB served, a 0.96 GB build) would stay on the original path on a host
#: with gigabytes free; eight models (1.6 GB) are still held to 2x (3.2 GB > 1.6 + 1.5 GB).
FOOTPRINT_FLOOR_MB = 1536
#: What a built function keeps (results/build_memory_gc_epyc.json, over the served process after
#: each stage and a trim): the imported graph +96 MB on Xception (87 MB of variables), +78 on DLRM
#: (74); the first session after its first run +429 and +407, a second +434 and +224 (of Xception's
#: session about 80 MB are oneDNN's reordered filters: 350 MB with TF_ENABLE_ONEDNN_OPTS=0).
#: GRAPH_KEEP x the variables for the graph, SESSION_KEEP x the variables + SESSION_KEEP_BASE_MB
#: per session.
GRAPH_KEEP = 1.1
SESSION_KEEP = 5.5
SESSION_KEEP_BASE_MB = 16

_built: weakref.WeakSet[Any] = weakref.WeakSet()  # fastpath Function objects with a frozen graph


def track(fn: Any) -> None:
    """``fn`` (a fastpath Function) froze a graph: its graph and sessions count in held_bytes."""
    _built.add(fn)


def held_bytes() -> int:
    """What the fast path holds now, by the measured estimate: each frozen graph, each open session
    and each other engine's copy."""
    total = 0
    for fn in list(_built):
        if getattr(fn, "frozen", None) is None:
            continue
        v = int(getattr(fn, "variable_bytes", 0) or 0)
        runners = list(getattr(fn, "pools", {}).values())
        # another engine's runner estimates its own copy (engines/foreign.py: measured factors)
        total += sum(int(getattr(p, "bytes", 0) or 0) for p in runners)
        sessions = sum(getattr(p, "streams", 1) for p in runners if not getattr(p, "bytes", 0))
        total += int(v * GRAPH_KEEP) + sessions * (int(v * SESSION_KEEP) + (SESSION_KEEP_BASE_MB << 20))
    return total


def footprint_factor(environ: Mapping[str, str] | None = None) -> float:
    """The bound's factor (FOOTPRINT_FACTOR, or the variable's value); 0: no bound. ValueError for
    a value that is no number."""
    env = os.environ if environ is None else environ
    text = env.get(FOOTPRINT_VAR, "").strip()
    if not text:
        return FOOTPRINT_FACTOR
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{FOOTPRINT_VAR} must be a number (2 for twice the memory), got {text!r}") from None
    if value != value or value < 0:
        raise ValueError(f"{FOOTPRINT_VAR} must be a number of 0 or more, got {text!r}")
    return value


def resident_bytes() -> int | None:
    """This process's resident size (/proc/self/statm), or None where it cannot be read."""
    try:
        with open("/proc/self/statm", "rb") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def footprint_room(factor: float, rss: int, held: int) -> tuple[int, int, int]:
    """(the bound, the memory without the fast path, the room under the bound less its margin): pure.
    The bound: ``factor`` x the memory without the fast path, or that plus FOOTPRINT_FLOOR_MB when larger."""
    without = max(0, rss - held)
    bound = max(int(without * factor), without + (FOOTPRINT_FLOOR_MB << 20))
    return bound, without, max(0, bound - rss - int(bound * FOOTPRINT_MARGIN))


def footprint_check(need_bytes: int, what: str) -> tuple[bool, str]:
    """Without a container limit: does ``need_bytes`` fit under FOOTPRINT_FACTOR x the process's
    memory without the fast path? Unknown resident size, or the bound off: it fits."""
    try:
        factor = footprint_factor()
    except ValueError as exc:
        warn_once("fast-path-memory-factor", f"tf_autopar: {exc}; using {FOOTPRINT_FACTOR:g}")
        factor = FOOTPRINT_FACTOR
    rss = resident_bytes() if factor else None
    if rss is None:
        return True, ""
    bound, without, room = footprint_room(factor, rss, held_bytes())
    if need_bytes <= room:
        return True, ""
    how = (
        f"{factor:g} x {format_bytes(without)}"
        if bound == int(without * factor)
        else f"{format_bytes(without)} + {format_bytes(FOOTPRINT_FLOOR_MB << 20)}"
    )
    return False, (
        f"{what} needs about {format_bytes(need_bytes)}; {format_bytes(room)} is left under the fast path's "
        f"bound of {factor:g}x the process's memory without it ({format_bytes(bound)}, {how}; "
        f"{FOOTPRINT_VAR} sets the factor)"
    )


# ---------------------------------------------------------------------- the container's limit, re-read

_reader_lock = threading.Lock()
_reader: Any = None  # topology.memory.MemoryReader, made at the first question; False: none here


def limit_reading() -> Any:
    """This process's memory cgroup reading now (topology.MemoryLimit), or None (no memory cgroup,
    or it could not be read: then only the host rule counts). One reader per process; ~0.25 ms."""
    global _reader
    with _reader_lock:
        if _reader is None:
            try:
                _reader = MemoryReader()
            except Exception as exc:  # fail open: the host rule still holds
                log.debug("tf_autopar: no memory cgroup reader", exc_info=exc)
                _reader = False
        reader = _reader
    if reader is False:
        return None
    try:
        return reader.read()
    except Exception as exc:
        log.debug("tf_autopar: the memory cgroup could not be read", exc_info=exc)
        return None


def own_group() -> str:
    """The process's own memory group directory ("" when it has none): what names the build lock."""
    limit_reading()
    reader = _reader
    groups = getattr(reader, "groups", None) or []
    return groups[0].leaf if groups else ""


# ---------------------------------------------------------------------- one build per memory cgroup

#: the build lock's file lives here when it is a writable directory (shared memory, gone at reboot)
LOCK_DIRS = ("/dev/shm",)
LOCK_POLL_S = 0.1
#: (what, taken at, released at) of this process's last builds under the lock (time.time()); for
#: status and the tests that show two workers never build at once
held: collections.deque[tuple[str, float, float]] = collections.deque(maxlen=64)


def lock_path(group: str, dirs: tuple[str, ...] | None = None) -> str:
    """The build lock's file for memory group ``group`` (its directory; "" for none: the host's)."""
    digest = hashlib.sha256((group or "host").encode("utf-8", "surrogateescape")).hexdigest()[:16]
    where = next(
        (d for d in (LOCK_DIRS if dirs is None else dirs) if os.path.isdir(d) and os.access(d, os.W_OK)),
        tempfile.gettempdir(),
    )
    return os.path.join(where, f"tf_autopar_build_{digest}.lock")


@contextlib.contextmanager
def build_lock(what: str, exiting: Callable[[], bool] = lambda: False, wait: bool = True) -> Iterator[bool]:
    """Held while a build of this memory cgroup takes its peak: True once taken; False when
    ``exiting()`` came first, or with ``wait=False`` when another process holds it. The process's
    threads share one hold (a conversion child beside the builder: converting.py); between them
    the room checks count each other (``reserving``). Fail open: a lock file that cannot be made
    or locked is no lock (True), said at debug level."""
    while True:
        try:
            _take_group_lock()
            break
        except BlockingIOError:
            if not wait or exiting():
                yield False
                return
            time.sleep(LOCK_POLL_S)
        except OSError as exc:
            log.debug("tf_autopar: no build lock", exc_info=exc)
            yield True
            return
    log.debug("tf_autopar: build lock taken: %s", what)
    start = time.time()
    try:
        yield True
    finally:
        held.append((what, start, time.time()))
        _give_group_lock()


_group_hold = {"fd": -1, "count": 0}  # this process's hold of its group's build lock, shared by its threads
_group_lock = threading.Lock()


def _take_group_lock() -> None:
    """One more holder of this process's hold; BlockingIOError while another process holds it."""
    with _group_lock:
        if _group_hold["count"]:
            _group_hold["count"] += 1
            return
        fd = os.open(lock_path(own_group()), os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BaseException:
            os.close(fd)
            raise
        _group_hold.update(fd=fd, count=1)


def _give_group_lock() -> None:
    with _group_lock:
        _group_hold["count"] -= 1
        if _group_hold["count"] <= 0:
            fd = _group_hold["fd"]
            _group_hold.update(fd=-1, count=0)
            try:
                fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)


# ---------------------------------------------------------------------- pressure while serving

#: memory PSI "some avg10" (percent of the last 10 s some task stalled on memory) that pauses builds
PSI_HIGH = 10.0
#: once paused, builds resume when the room is this many margins (and the stalls under half PSI_HIGH)
RESUME_MARGINS = 2
#: how often a builder waiting for room looks again
WAIT_S = 0.5

_paused = ""  # why builds are paused now ("" when they are not)
_pause_lock = threading.Lock()


def pressure(reading: Any, paused: bool = False) -> str:
    """Why builds should pause under ``reading`` (a topology.MemoryLimit), or "". ``paused``: they
    are; then they resume only at RESUME_MARGINS x the margin of room (closing the candidates frees
    memory: without this the room would come back at once, and the candidates with it)."""
    if reading is None:
        return ""
    if reading.limit_bytes is not None and reading.usage_bytes is not None:
        budget = budget_for(reading)
        floor = budget.margin_bytes * (RESUME_MARGINS if paused else 1)
        if budget.room_bytes is not None and budget.room_bytes < floor:
            return (
                f"only {format_bytes(budget.room_bytes)} is left under the container's "
                f"{format_bytes(reading.limit_bytes)} memory limit (under the {format_bytes(budget.margin_bytes)} margin)"
            )
    psi = reading.psi_some_avg10
    if psi is not None and psi >= (PSI_HIGH / 2 if paused else PSI_HIGH):
        return f"memory pressure: some tasks stalled on memory {psi:.0f}% of the last 10 s"
    return ""


def refresh() -> tuple[str, bool]:
    """Read the limit again: (why builds are paused now or "", whether that changed). A change is
    said once each way (a warning on pausing, an info line on resuming)."""
    global _paused
    with _pause_lock:
        why = pressure(limit_reading(), bool(_paused))
        changed, _paused = bool(why) != bool(_paused), why
    if changed and why:
        warn_once(
            "memory-pressure",
            f"tf_autopar: fast-path builds paused and live-tuning candidate sessions closed: {why}; "
            "requests are served as before, and builds resume when memory is free again",
        )
    elif changed:
        log.info("tf_autopar: memory is free again: fast-path builds resume")
    return why, changed


def paused() -> str:
    """Why builds are paused (the last reading), or ""."""
    return _paused


def wait_for_room(exiting: Callable[[], bool]) -> bool:
    """Builder thread, before a build: wait while memory is under pressure (re-read each WAIT_S).
    False when the process exits first."""
    while refresh()[0]:
        if exiting():
            return False
        time.sleep(WAIT_S)
    return True


def record() -> MemoryRecord | None:
    """status().memory: the cgroup limit, the room, and why builds are paused; None without a limit."""
    reading = limit_reading()
    if reading is None or reading.limit_bytes is None:
        return None
    budget = budget_for(reading)
    return MemoryRecord(
        limit=format_bytes(reading.limit_bytes),
        path=reading.path,
        cgroup_version=reading.cgroup_version,
        working_set=format_bytes(reading.working_set_bytes or 0),
        room=format_bytes(budget.room_bytes or 0),
        margin=format_bytes(budget.margin_bytes),
        paused=_paused,
        builds=len(held),
    )


def _forget_in_child() -> None:
    """A forked child finds its own groups (and owns no build lock: its copy of the parent's
    descriptor is left alone, unlocking it would unlock the parent's)."""
    global _reader, _reader_lock, _pause_lock, _paused, _group_lock, _reserved_lock
    _reader, _reader_lock, _pause_lock, _paused = None, threading.Lock(), threading.Lock(), ""
    _group_lock, _reserved_lock = threading.Lock(), threading.Lock()
    _group_hold.update(fd=-1, count=0)
    _reserved.clear()
    held.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)
state.provide("memory", record)


def variable_bytes(handles: list[Any]) -> int:
    """The bytes of the variables behind ``handles`` (resource handles), from their handle data."""
    from tensorflow.python.framework import dtypes
    from tensorflow.python.ops import resource_variable_ops

    total = 0
    for h in handles:
        data = resource_variable_ops.get_eager_safe_handle_data(h)
        for st in getattr(data, "shape_and_type", ()):
            n = 1
            for d in st.shape.dim:
                n *= max(int(d.size), 1)
            total += n * dtypes.as_dtype(st.dtype).size
    return total


def after_stage(stage: str) -> None:
    """Between a build's stages (frozen.FrozenGraph's ``between``): the freed copies go back.
    After the converter, a garbage collection first: its objects (the converter's functions,
    each with the constants inside and registered with the eager context; its node wrappers)
    sit in reference cycles, so they stay until Python's own collector reaches its oldest
    generation (Xception: +543 MB kept after the freeze without it, +93 MB with it). Inside
    ``young_garbage()`` it looks only at the objects made since the build began."""
    if stage == "frozen":
        gc.collect()
    trim_heap()


@contextlib.contextmanager
def young_garbage() -> Iterator[None]:
    """The objects older than the build set aside for its collections (``gc.freeze``): a full
    collection in a TensorFlow server walks every object of the process with the interpreter
    lock held (0.4-0.6 s in an Xception server), while the build's cycles are all young: after
    a freeze in a process serving nothing, 159-519 ms for every object against 1-110 ms for the
    build's own over fifteen models (Xception 205 against 8; benchmarks/freeze_lock.py). Not
    where the program froze objects itself (a server's pre-fork ``gc.freeze()``): unfreezing
    would undo its choice."""
    mine = gc.get_freeze_count() == 0
    if mine:
        gc.freeze()
    try:
        yield
    finally:
        if mine:
            gc.unfreeze()


def trim_heap() -> None:
    """Give the build's freed temporaries back to the system. Freezing and grappler's first run
    leave 120-250 MB of freed memory in glibc's arenas on the models of docs/serving.md
    (MobileNetV2: 860 MB resident after the build, 744 MB after the trim); a server keeps it for
    its lifetime otherwise. No-op where the C library has no malloc_trim."""
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):
        pass

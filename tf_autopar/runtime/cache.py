"""A small persistent plan cache, so the next start of a program applies the right pools.

File: ``$TF_AUTOPAR_CACHE_DIR/plans.json`` (else ``$XDG_CACHE_HOME/tf_autopar`` or
``~/.cache/tf_autopar``). Layout::

    {"version": 2,
     "plans":    {"<fingerprint>|<topology key>|<mode>": {"plan": {...}, "profile": {...}, "name": ..., "updated": t}},
     "programs": {"<program key>|<topology key>|<mode>": {"fingerprint": ..., "heavy_ops": n, "name": ..., "updated": t}},
     "profiles": {"workload:<name>:<size>": {"profile": {...}, "updated": t}},
     "tuned":    {"<fingerprint>|<host key>|<mode>|<batch>": {"inter_op": 2, "intra_op": 1, "speedup": 1.2, ...}},
     "calibration": {"<host key>": {"small_op_work": 24000000, "date": ..., "cpu_model": ...}},
     "served":   {"<fingerprint>|<host key>|<mode>": {"functions": {"<function>": {"buckets": {"<bucket>":
                  {"calls": n, "path": "frozen session", "batch": 1, "speedup": 1.6, "inter_op": 2, ...}}}}}}}

A program's entry names the heaviest graph it ran, since that is the one the process
pools should fit. Writes take a file lock and replace the file atomically; a corrupt
file (or a FIFO, a device, a file over MAX_BYTES, JSON nested too deeply) is moved aside with
one warning and the cache starts empty. Reads take no lock
(the file is only ever replaced whole).

The directory may be shared (``TF_AUTOPAR_CACHE_DIR``): a file that is a symlink, belongs to
another user or can be written by group or others is not applied (one warning; the ownership
check the native tracer's library gets, _files.check_owned), and another user's is never
overwritten. Each entry is checked before use (``entry_problem``: types and bounds of what the
planner reads); one that fails is skipped with one short warning naming it, and dropped at the
next write, while every other entry keeps working. The file is bounded (MAX_BYTES, MAX_ENTRIES
per section, MAX_ENTRY_BYTES per entry written), so reading it costs milliseconds at every start.
"""

from __future__ import annotations

import contextlib
import copy
import json
import logging
import math
import os
import sys
import time
from typing import TYPE_CHECKING, Any, Callable, Iterator

from tf_autopar._files import Untrusted, read_json, write_json_atomic
from tf_autopar._keys import stable_key
from tf_autopar._paths import cache_dir
from tf_autopar.runtime.fastpath.rules import batch_words, dominant_bucket, is_batch
from tf_autopar.runtime.safety import warn_once

if TYPE_CHECKING:
    from tf_autopar.topology.model import Topology

log = logging.getLogger("tf_autopar.runtime")
FILENAME = "plans.json"
# 2: plans use each heavy op's work (the small-op rule); older entries are dropped, not reused.
VERSION = 2
MAX_ENTRIES = 500  # per section; oldest entries are dropped beyond this
MAX_ENTRY_BYTES = 16 << 10  # an entry is a plan and a profile summary: about 2 KB
MAX_BYTES = 8 << 20  # 5 full sections stay far below; a larger file is not one tf_autopar wrote
SECTIONS = ("plans", "programs", "profiles", "tuned", "calibration", "served")
MAX_THREADS = 1 << 16  # a thread count in an entry above this is not a measurement
MAX_COUNT = 1 << 48  # op counts and multiply-adds of any real graph stay below


def cache_path() -> str:
    return os.path.join(cache_dir(), FILENAME)


def topology_key(topology: Topology) -> str:
    """What of the host a plan depends on: budget, cores, sockets, NUMA, quota, runtime, the
    cache domains and core types where the host has several, and the zentf plugin when loaded."""
    facts = [
        getattr(topology, "cpu_budget", None),
        list(getattr(topology, "affinity", ())),
        getattr(topology, "physical_cores", None),
        getattr(topology, "threads_per_core", None),
        len(getattr(topology, "numa_nodes", ()) or ()),
        list(getattr(topology, "sockets", ())),
        getattr(getattr(topology, "quota", None), "cpus", None),
        getattr(topology, "threading_runtime", None),
    ]
    # Cache domains and core types move a plan's CPU sets; appended only where a host has them,
    # so that the keys of plans cached on plain hosts stay what they were.
    domains = getattr(topology, "cache_domains", ()) or ()
    if len(domains) > 1:
        facts.append(["cache domains", [list(d.cpus) for d in domains]])
    if getattr(topology, "hybrid", False):
        facts.append(["performance cores", [c.cpus[0] for c in topology.cores if c.kind == "performance"]])
    zentf = getattr(topology, "zentf", None)
    if zentf is not None:  # its kernels run on OpenMP teams: another plan
        facts.append(["zentf", zentf.version, zentf.openmp])
    return stable_key(json.dumps(facts, default=str))


def program_key(argv: list[str] | None = None) -> str:
    """The running program: $TF_AUTOPAR_PROGRAM, else the script's real path and its arguments."""
    explicit = os.environ.get("TF_AUTOPAR_PROGRAM")
    if explicit:
        return explicit
    argv = list(sys.argv if argv is None else argv) or [""]
    head = argv[0]
    if head and os.path.exists(head):
        head = os.path.realpath(head)
    return stable_key(json.dumps([head, *argv[1:]]))


def _empty() -> dict[str, Any]:
    return {
        "version": VERSION,
        "plans": {},
        "programs": {},
        "profiles": {},
        "tuned": {},
        "calibration": {},
        "served": {},
    }


def load(path: str | None = None) -> dict[str, Any]:
    """The cache's content; an unreadable, corrupt or untrusted file gives an empty cache (one
    warning), an entry that fails its check is left out (one warning naming it)."""
    return _load(path or cache_path())[0]


def _load(path: str) -> tuple[dict[str, Any], bool]:
    """(content, whether a write may replace the file): never another user's file."""
    try:
        data = read_json(path, MAX_BYTES, follow_symlinks=False, owned=True)
        if isinstance(data, dict) and isinstance(data.get("version"), int) and 0 < data["version"] < VERSION:
            log.info("plan cache %s is from an older tf_autopar (version %s): starting fresh", path, data["version"])
            return _empty(), True  # an upgrade, not corruption: replaced on the next write
        if not isinstance(data, dict) or data.get("version") != VERSION:
            raise ValueError(f"unexpected layout (version {data.get('version') if isinstance(data, dict) else '?'})")
        if not isinstance(data.get("plans"), dict) or not isinstance(data.get("programs"), dict):
            raise ValueError("missing 'plans' or 'programs'")
        if not isinstance(data.setdefault("profiles", {}), dict):
            raise ValueError("'profiles' is not a mapping")
        for section in ("tuned", "calibration", "served"):
            if not isinstance(data.setdefault(section, {}), dict):
                raise ValueError(f"{section!r} is not a mapping")
        _drop_invalid(data, path)
        return data, True
    except FileNotFoundError:
        return _empty(), True
    except Untrusted as exc:  # someone else may have written it: neither applied nor moved
        mine = _owned_by_me(path)
        warn_once(
            f"cache-untrusted:{path}",
            f"tf_autopar's plan cache {exc.strerror}: not applied" + ("" if mine else ", and left as it is"),
        )
        return _empty(), mine
    except (OSError, ValueError) as exc:
        aside = f"{path}.corrupt-{int(time.time())}"
        try:
            os.replace(path, aside)
            where = f"moved to {aside}"
        except OSError:
            where = "left in place"
        warn_once(
            f"cache-corrupt:{path}", f"tf_autopar's plan cache {path} is unreadable ({exc}); {where}, starting fresh"
        )
        return _empty(), True


def _owned_by_me(path: str) -> bool:
    try:
        return os.lstat(path).st_uid == os.getuid()
    except OSError:
        return True


def _drop_invalid(data: dict[str, Any], path: str) -> None:
    """Leave out every entry that fails its check, one short warning each (the next write drops it)."""
    for section in SECTIONS:
        entries = data[section]
        for key in list(entries):
            problem = entry_problem(section, entries[key])
            if problem:
                del entries[key]
                shown = key if len(key) <= 48 else key[:45] + "..."
                warn_once(
                    f"cache-entry:{path}:{section}:{key}",
                    f"tf_autopar's plan cache {path}: entry {section}[{shown!r}] skipped ({problem})",
                )


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _int_in(lo: int, hi: int) -> Callable[[Any], bool]:
    return lambda v: isinstance(v, int) and not isinstance(v, bool) and lo <= v <= hi


def _opt(check: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda v: v is None or check(v)


def _is_bool(v: Any) -> bool:
    return isinstance(v, bool)


def _is_str(v: Any) -> bool:
    return isinstance(v, str) and len(v) <= 4096


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and abs(v) <= 1e18


#: What the planner reads of a cached profile summary (core.CACHED_PROFILE_FIELDS): type and bounds.
PROFILE_CHECKS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "heavy_ops": (_int_in(0, MAX_COUNT), "a count"),
    "depth": (_int_in(0, MAX_COUNT), "a count"),
    "avg_width": (_int_in(0, MAX_COUNT), "a count"),
    "max_width": (_int_in(0, MAX_COUNT), "a count"),
    "nodes": (_int_in(0, MAX_COUNT), "a count"),
    "functions": (_int_in(0, MAX_COUNT), "a count"),
    "lookups": (_int_in(0, MAX_COUNT), "a count"),
    "typical_op_work": (_opt(_int_in(0, MAX_COUNT)), "a count or null"),
    "lookup_work": (_opt(_int_in(0, MAX_COUNT)), "a count or null"),
    "contraction_work": (_opt(_int_in(0, MAX_COUNT)), "a count or null"),
    "training": (_is_bool, "true or false"),
    "uses_tf_data": (_is_bool, "true or false"),
    "loops": (_is_bool, "true or false"),
    "sizes_known": (_is_bool, "true or false"),
    "source": (_is_str, "a string"),
    "fingerprint": (_is_str, "a string"),
    "assumptions": (lambda v: isinstance(v, list) and len(v) <= 64 and all(map(_is_str, v)), "a list of strings"),
}


def profile_problem(profile: Any) -> str:
    """What is wrong with a cached profile summary ("" when nothing): a missing field is an older
    tf_autopar's entry (core.cached_profile re-analyses it), a wrong-typed one is reported."""
    if not isinstance(profile, dict):
        return f"profile is {type(profile).__name__}, not an object"
    for name, (check, want) in PROFILE_CHECKS.items():
        if name in profile and not check(profile[name]):
            return f"profile {name}: {_short(profile[name])} is not {want}"
    return ""


def entry_problem(section: str, entry: Any) -> str:
    """What is wrong with one cache entry ("" when nothing): the checks the readers rely on."""
    if not isinstance(entry, dict):
        return f"{type(entry).__name__}, not an object"
    if "updated" in entry and not _is_number(entry["updated"]):
        return f"updated: {_short(entry['updated'])} is not a time"
    if section in ("plans", "profiles"):
        return profile_problem(entry.get("profile"))
    if section == "programs":
        if not _is_str(entry.get("fingerprint")):
            return f"fingerprint: {_short(entry.get('fingerprint'))} is not a string"
        if not _int_in(0, MAX_COUNT)(entry.get("heavy_ops", 0)):
            return f"heavy_ops: {_short(entry.get('heavy_ops'))} is not a count"
    if section == "tuned":
        for name in ("inter_op", "intra_op", "omp_threads"):
            if (name in entry or name != "omp_threads") and not _int_in(1, MAX_THREADS)(entry.get(name)):
                return f"{name}: {_short(entry.get(name))} is not a thread count (1..{MAX_THREADS})"
    if section == "served":  # the fast path: its readers check each bucket's values again
        functions = entry.get("functions")
        if not isinstance(functions, dict) or not all(
            isinstance(f, dict) and isinstance(f.get("buckets", {}), dict) for f in functions.values()
        ):
            return "functions: not a mapping of functions to their buckets"
    if section == "calibration" and not _int_in(1, MAX_COUNT)(entry.get("small_op_work")):
        return f"small_op_work: {_short(entry.get('small_op_work'))} is not a positive count"
    return ""


def _write(path: str, data: dict[str, Any]) -> None:
    write_json_atomic(path, data, indent=1, sort_keys=True)


class NotYours(PermissionError):
    """The plan cache file belongs to another user (or cannot be checked as ours): never replaced."""


@contextlib.contextmanager
def editing(path: str | None = None) -> Iterator[dict[str, Any]]:
    """The cache's locked read-modify-write: ``with editing(path) as data:`` takes the file lock,
    reads the content (``_load``: a corrupt file moved aside, failing entries left out) and yields
    it to change in place; on a normal exit the file is replaced atomically, if the content
    changed; on an exception nothing is written. NotYours (a PermissionError), before the body
    runs, when the file is another user's: writers that skip it say
    ``with contextlib.suppress(NotYours), editing(path) as data:``."""
    from filelock import FileLock  # imported here: only writers pay for it (enable() reads the cache)

    path = path or cache_path()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with FileLock(path + ".lock", timeout=5):
        data, writable = _load(path)
        if not writable:
            raise NotYours(f"the plan cache {path} is not this user's to change")
        before = copy.deepcopy(data)
        yield data
        if data != before:
            _write(path, data)


def _trim(entries: dict[str, Any]) -> None:
    """Drop the oldest entries beyond MAX_ENTRIES, and any entry over MAX_ENTRY_BYTES (it would be
    skipped at every read)."""
    for key in [k for k, e in entries.items() if len(json.dumps(e, default=str)) > MAX_ENTRY_BYTES]:
        del entries[key]
    if len(entries) > MAX_ENTRIES:
        for key in sorted(entries, key=lambda k: entries[k].get("updated", 0))[: len(entries) - MAX_ENTRIES]:
            del entries[key]


def store(
    fingerprint: str,
    topo_key: str,
    mode: str,
    plan: dict[str, Any],
    profile: dict[str, Any],
    name: str,
    program: str | None = None,
    path: str | None = None,
) -> None:
    """Add a graph's plan and point the program at it if it is the program's heaviest graph."""
    with contextlib.suppress(NotYours), editing(path) as data:
        now = time.time()
        data["plans"][f"{fingerprint}|{topo_key}|{mode}"] = {
            "plan": plan,
            "profile": profile,
            "name": name,
            "updated": now,
        }
        if program is not None:
            pkey = f"{program}|{topo_key}|{mode}"
            old = data["programs"].get(pkey)
            heavy = int(profile.get("heavy_ops", 0))
            if old is None or old.get("fingerprint") == fingerprint or heavy >= int(old.get("heavy_ops", 0)):
                data["programs"][pkey] = {"fingerprint": fingerprint, "heavy_ops": heavy, "name": name, "updated": now}
        _trim(data["plans"])
        _trim(data["programs"])


def lookup_program(program: str, topo_key: str, mode: str, path: str | None = None) -> dict[str, Any] | None:
    """The cached plan entry for this program on this host, or None."""
    data = load(path)
    entry = data["programs"].get(f"{program}|{topo_key}|{mode}")
    if not entry:
        return None
    found = data["plans"].get(f"{entry.get('fingerprint')}|{topo_key}|{mode}")
    if not found:
        return None
    return {"fingerprint": entry.get("fingerprint"), **found}


def lookup(fingerprint: str, topo_key: str, mode: str, path: str | None = None) -> dict[str, Any] | None:
    return load(path)["plans"].get(f"{fingerprint}|{topo_key}|{mode}")


def lookup_profile(key: str, path: str | None = None) -> dict[str, Any] | None:
    """A cached graph profile (e.g. of a bundled workload, which takes a TF process to analyse)."""
    entry = load(path)["profiles"].get(key)
    return entry.get("profile") if isinstance(entry, dict) else None


def store_profile(key: str, profile: dict[str, Any], path: str | None = None) -> None:
    _put("profiles", key, {"profile": profile}, path)


def _put(section: str, key: str, entry: dict[str, Any], path: str | None) -> None:
    """One entry into one section, under the file lock, replacing the file atomically."""
    with contextlib.suppress(NotYours), editing(path) as data:
        data[section][key] = {**entry, "updated": time.time()}
        _trim(data[section])


def host_key(topology: Topology) -> str:
    """The topology key plus the processor model: a measured setting holds for one processor
    (a threshold fitted on an AMD EPYC is a guess on an Intel Xeon), a rule-made plan for any."""
    model = getattr(getattr(topology, "cpu", None), "model", "unknown")
    return stable_key(json.dumps([topology_key(topology), model]))


def tuned_key(fingerprint: str, topo_key: str, mode: str, batch: int | None) -> str:
    return f"{fingerprint}|{topo_key}|{mode}|{batch or 1}"


def lookup_tuned(
    fingerprint: str, topo_key: str, mode: str, batch: int | None, path: str | None = None
) -> dict[str, Any] | None:
    """A setting measured by ``tune`` for this graph on this host (``host_key``), or None. An
    entry made on another host shape or processor has another key, so it is never used here."""
    entry = load(path)["tuned"].get(tuned_key(fingerprint, topo_key, mode, batch))
    ok = isinstance(entry, dict) and all(
        isinstance(entry.get(k), int) and entry[k] > 0 for k in ("inter_op", "intra_op")
    )
    return entry if ok else None


def store_tuned(
    fingerprint: str, topo_key: str, mode: str, batch: int | None, entry: dict[str, Any], path: str | None = None
) -> None:
    _put("tuned", tuned_key(fingerprint, topo_key, mode, batch), entry, path)


def served_key(fingerprint: str, host: str, mode: str) -> str:
    return f"{fingerprint}|{host}|{mode}"


def lookup_served(fingerprint: str, host: str, mode: str, path: str | None = None) -> dict[str, Any] | None:
    """What the fast path saw of this model on this host (runtime/fastpath/): calls per batch bucket, verdicts."""
    entry = load(path)["served"].get(served_key(fingerprint, host, mode))
    return entry if isinstance(entry, dict) else None


def store_served(
    fingerprint: str, host: str, mode: str, function: str, summary: dict[str, Any], path: str | None = None
) -> None:
    """One function's fast-path summary into the model's entry (the other functions' kept)."""
    key = served_key(fingerprint, host, mode)
    with contextlib.suppress(NotYours), editing(path) as data:
        entry = data["served"].get(key)
        functions = entry.get("functions") if isinstance(entry, dict) else None
        functions = dict(functions) if isinstance(functions, dict) else {}
        functions[function] = _carried(functions.get(function), summary)
        data["served"][key] = {"functions": functions, "updated": time.time()}
        _trim(data["served"])


#: Per-bucket fields a later summary may not measure, kept from the earlier one: malloc's fault
#: count is only counted under malloc, and a start under the BFC pool it led to must not forget it.
CARRIED = ("faults_per_call",)


def _carried(before: Any, summary: dict[str, Any]) -> dict[str, Any]:
    old = before.get("buckets") if isinstance(before, dict) else None
    new = summary.get("buckets")
    if not isinstance(old, dict) or not isinstance(new, dict):
        return summary
    buckets = {}
    for key, b in new.items():
        was = old.get(key)
        kept = {k: was[k] for k in CARRIED if isinstance(was, dict) and k in was and k not in b}
        buckets[key] = {**b, **kept} if isinstance(b, dict) else b
    return {**summary, "buckets": buckets}


def observed_batch(fingerprint: str, host: str, mode: str, path: str | None = None) -> tuple[int, str] | None:
    """(the batch most calls carried, "batch 1 in 97% of 4,212 calls") from what the fast path
    remembered of this model, over all its functions; None when nothing was remembered."""
    entry = lookup_served(fingerprint, host, mode, path)
    functions = entry.get("functions") if entry else None
    counts: dict[int, int] = {}
    batches: dict[int, int] = {}
    for summary in functions.values() if isinstance(functions, dict) else ():
        buckets = summary.get("buckets") if isinstance(summary, dict) else None
        for key, b in buckets.items() if isinstance(buckets, dict) else ():
            bucket = dominant_bucket({key: 1})
            calls = b.get("calls") if isinstance(b, dict) else None
            if bucket is None or not is_batch(calls):
                continue
            counts[bucket] = counts.get(bucket, 0) + calls
            if is_batch(b.get("batch")):
                batches[bucket] = max(batches.get(bucket, 0), b["batch"])
    top = dominant_bucket(counts)
    if top is None:
        return None
    return batches.get(top, top), batch_words(counts)


def lookup_calibration(host: str, path: str | None = None) -> dict[str, Any] | None:
    """This host's measured small-op threshold (tuning/calibrate.py), or None."""
    entry = load(path)["calibration"].get(host)
    ok = isinstance(entry, dict) and isinstance(entry.get("small_op_work"), int) and entry["small_op_work"] > 0
    return entry if ok else None


def store_calibration(host: str, entry: dict[str, Any], path: str | None = None) -> None:
    _put("calibration", host, entry, path)


#: What a served bucket keeps of live tuning (the fast path's summary, fastpath/report.py): dropped by ``forget_tuning``.
TUNING_FIELDS = ("tuned", "tried", "won", "by", "inter_op", "intra_op", "streams", "pending")


def forget_tuning(fingerprint: str, host: str, path: str | None = None) -> dict[str, int]:
    """``tune --live-reset``: drop what was tuned for this model on this host (``host_key``): its
    ``tuned`` entries (every mode and batch) and, in its ``served`` entries (every mode), each
    bucket's tuned setting and evidence. The calls per bucket and the frozen-or-original verdict
    stay, so the next start still plans for the observed batch and serves the frozen path at the
    rule's plan, then tunes again. Other hosts' entries are kept (a shared cache directory serves
    several hosts; their measurements are theirs). Returns how many of each were dropped;
    NotYours (a PermissionError) for another user's file."""
    path = path or cache_path()
    dropped = {"tuned": 0, "served_buckets": 0}
    if not os.path.exists(path):
        return dropped
    with editing(path) as data:  # written only when something was dropped
        for key in [k for k in data["tuned"] if k.startswith(f"{fingerprint}|{host}|")]:
            del data["tuned"][key]
            dropped["tuned"] += 1
        for key, entry in data["served"].items():
            if not key.startswith(f"{fingerprint}|{host}|"):
                continue
            for summary in (entry.get("functions") or {}).values():
                for bucket in (summary.get("buckets") or {}).values() if isinstance(summary, dict) else ():
                    if isinstance(bucket, dict) and any(f in bucket for f in ("tuned", "won", "tried")):
                        for f in TUNING_FIELDS:
                            bucket.pop(f, None)
                        dropped["served_buckets"] += 1
    return dropped

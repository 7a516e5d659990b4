"""Converted models kept on disk, so that a graph is converted once per host, not once per start.

Why: the engine a bucket won is built at the next start's load (fastpath/remembered.py), and
building it meant converting the graph again in a child: a second start's load took 4.5-19.6 s
where ONNX Runtime had won (DLRM at batch 1: 19.6 s against 0.4 s for TensorFlow's own load;
benchmarks/results/engines_pacing_routing_epyc.json.gz), and each worker of a server converts
the same graph once more. Here the converter's output is kept under the cache directory
(``conversions/KEY/``), KEY a digest of the GraphDef (in a form the same in every process that
froze the model: graph_digest), its input and output names, the engine and the versions of
everything that shaped the output (TensorFlow, the converter, this package).
A copy that does not match its recorded sizes is dropped and the graph converted again; a wrong
model could still not be served, since every candidate's outputs are checked against
TensorFlow's on live inputs before it serves (fastpath/rules.py).

``TF_AUTOPAR_CONVERSION_CACHE_MB``: the most the kept conversions take on disk (default 2048;
the least recently used go first); ``0`` keeps none.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import os
import re
import shutil
import tempfile
import time
from collections.abc import Mapping
from importlib import metadata
from typing import Any

from tf_autopar._paths import cache_dir
from tf_autopar.runtime.safety import warn_once

log = logging.getLogger("tf_autopar.runtime")

LIMIT_VAR = "TF_AUTOPAR_CONVERSION_CACHE_MB"
DEFAULT_LIMIT_MB = 2048
MANIFEST = "manifest.json"
#: what the child reads, not what it writes: never kept
INPUTS = ("graph.pb", "names.json")
#: a staging folder this old was left by a process that died while keeping a conversion
STALE_S = 3600.0
#: whose versions shape a converted model, per kind of conversion
PACKAGES = {"openvino": ("tensorflow", "openvino"), "onnx": ("tensorflow", "tf2onnx", "onnx")}


def limit_bytes(environ: Mapping[str, str] = os.environ) -> int:
    """The bound ``TF_AUTOPAR_CONVERSION_CACHE_MB`` sets (0: nothing kept); ValueError naming it if garbled."""
    text = (environ.get(LIMIT_VAR) or "").strip()
    if not text:
        return DEFAULT_LIMIT_MB << 20
    try:
        mb = float(text)
    except ValueError:
        mb = -1.0
    if not mb >= 0:
        raise ValueError(f"{LIMIT_VAR} must be a number of MB (0 keeps none), got {text!r}")
    return int(mb * (1 << 20))


def _limit() -> int:
    """limit_bytes(), 0 (nothing kept, nothing read) where the variable is garbled, said once."""
    try:
        return limit_bytes()
    except ValueError as exc:
        warn_once(f"conversion-cache:{exc}", f"tf_autopar: {exc}; no conversion kept")
        return 0


@functools.lru_cache(maxsize=None)
def _version(package: str) -> str:
    """An installed package's version (read from its metadata once: 1 ms a key otherwise, and the
    memory estimate asks for a key at each room check)."""
    for name in (package, f"{package}-cpu"):
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return "?"


#: the suffix TensorFlow's freezing gives each function it rewrites: a process-wide counter
FROZEN_SUFFIX = re.compile(r"_frozen_\d+")


def graph_digest(graph_def: Any) -> bytes:
    """A digest of ``graph_def`` (a GraphDef) that is the same in every process that froze the
    same model: each node and function serialized deterministically and digested, the digests
    sorted (the freezing lists a model's inputs in a different order from one process to the
    next), the freezing's counter dropped from function names (an LSTM's loop bodies are
    ``..._frozen_2330`` in one process and ``..._frozen_2340`` in the next). One element at a time:
    no second copy of the constants in the serving process."""
    nodes = sorted(hashlib.sha256(_canonical(n)).digest() for n in graph_def.node)
    functions = sorted(hashlib.sha256(_canonical(f)).digest() for f in graph_def.library.function)
    digest = hashlib.sha256(graph_def.versions.SerializeToString(deterministic=True))
    for part in (*nodes, b"functions", *functions):
        digest.update(part)
    return digest.digest()


def _canonical(message: Any) -> bytes:
    """A NodeDef or FunctionDef serialized, renamed on a copy where it names a frozen function
    (only control-flow nodes and loop bodies do: the large constants are serialized once)."""
    data = message.SerializeToString(deterministic=True)
    if b"_frozen_" not in data:
        return data
    copy = type(message)()
    copy.ParseFromString(data)
    if hasattr(copy, "signature"):  # a FunctionDef
        copy.signature.name = _unnumbered(copy.signature.name)
        for node in copy.node_def:
            _rename(node)
    else:
        _rename(copy)
    return copy.SerializeToString(deterministic=True)


def _unnumbered(name: str) -> str:
    return FROZEN_SUFFIX.sub("_frozen_", name)


def _rename(node: Any) -> None:
    node.op = _unnumbered(node.op)  # a function called as an op
    _rename_attrs(node.attr)


def _rename_attrs(attrs: Any) -> None:
    for value in attrs.values():
        if value.HasField("func"):
            value.func.name = _unnumbered(value.func.name)
            _rename_attrs(value.func.attr)
        for func in value.list.func:
            func.name = _unnumbered(func.name)
            _rename_attrs(func.attr)


def key(kind: str, graph: bytes, names: dict[str, list[str]]) -> str:
    """The name a conversion is kept under: the graph (its graph_digest), its names, the engine,
    the versions of the packages that shaped the output and of this one."""
    from tf_autopar import __version__

    digest = hashlib.sha256()
    versions = {p: _version(p) for p in PACKAGES.get(kind, ())}
    digest.update(json.dumps([kind, names, versions, __version__], sort_keys=True).encode())
    digest.update(graph)
    return digest.hexdigest()[:40]


def _root() -> str:
    return os.path.join(cache_dir(), "conversions")


def enabled() -> bool:
    """Whether conversions are kept at all (``TF_AUTOPAR_CONVERSION_CACHE_MB`` not 0)."""
    return bool(_limit())


def has(entry: str) -> bool:
    """Whether ``entry`` is kept (and keeping is on)."""
    return enabled() and os.path.exists(os.path.join(_root(), entry, MANIFEST))


def fetch(entry: str, directory: str, model: str) -> bool:
    """The kept conversion ``entry`` linked (or copied) into ``directory``; False where there is
    none or it is damaged (then it is dropped): a file not of its recorded size, or no ``model``
    (the file the engine reads) among them."""
    if not enabled():
        return False
    where = os.path.join(_root(), entry)
    try:
        with open(os.path.join(where, MANIFEST), encoding="utf-8") as fh:
            sizes = json.load(fh)["sizes"]
        if model not in sizes:
            raise ValueError(f"no {model}")
        for name, size in sizes.items():
            if os.path.getsize(os.path.join(where, name)) != size:
                raise ValueError(f"{name} is not {size} bytes")
    except FileNotFoundError:
        return False
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        log.warning("tf_autopar: a kept conversion at %s is damaged (%s): converting again", where, exc)
        shutil.rmtree(where, ignore_errors=True)
        return False
    try:
        for name in sizes:
            _link(os.path.join(where, name), os.path.join(directory, name))
        os.utime(where)  # its last use, for the eviction
        return True
    except OSError:  # removed meanwhile (another process's eviction): none of it is used
        for name in sizes:
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(directory, name))
        return False


def store(entry: str, directory: str) -> None:
    """What the child wrote in ``directory`` kept as ``entry``, then the oldest entries dropped
    beyond the bound. Never raises: a conversion that could not be kept is converted again next time."""
    limit = _limit()
    if not limit:
        return
    root = _root()
    try:
        names = sorted(n for n in os.listdir(directory) if n not in INPUTS)
        sizes = {n: os.path.getsize(os.path.join(directory, n)) for n in names}
        if not names or sum(sizes.values()) > limit:
            return
        os.makedirs(root, exist_ok=True)
        staging = tempfile.mkdtemp(prefix=".staging-", dir=root)
        try:
            for name in names:
                _link(os.path.join(directory, name), os.path.join(staging, name))
            with open(os.path.join(staging, MANIFEST), "w", encoding="utf-8") as fh:
                json.dump({"sizes": sizes, "kept": time.time()}, fh)
            os.rename(staging, os.path.join(root, entry))  # atomic; another worker's copy kept first wins
        except OSError:
            shutil.rmtree(staging, ignore_errors=True)
            if not os.path.isdir(os.path.join(root, entry)):
                raise
        _evict(root, limit, keep=entry)
    except OSError as exc:
        log.warning("tf_autopar: could not keep the conversion under %s (%s)", root, exc)


def _evict(root: str, limit: int, keep: str) -> None:
    """The least recently used entries removed until the rest fit in ``limit`` bytes."""
    entries = []
    for name in os.listdir(root):
        path = os.path.join(root, name)
        try:
            if name.startswith(".staging-") and time.time() - os.path.getmtime(path) > STALE_S:
                shutil.rmtree(path, ignore_errors=True)
            if name.startswith(".") or not os.path.isdir(path):
                continue
            size = sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path))
            entries.append((os.path.getmtime(path), name, path, size))
        except OSError:  # removed meanwhile by another process
            continue
    total = sum(e[3] for e in entries)
    for _, name, path, size in sorted(entries):
        if total <= limit:
            break
        if name != keep:
            shutil.rmtree(path, ignore_errors=True)
            total -= size


def _link(src: str, dst: str) -> None:
    """A hard link (the files are never written in place: a kept one is replaced whole), else a copy."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)

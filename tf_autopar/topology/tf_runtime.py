"""Which threading runtime the installed TensorFlow uses, found without importing it.

Stock pip TensorFlow links no OpenMP: oneDNN is built in and runs on TF's own Eigen thread
pool, so OMP_NUM_THREADS / KMP_* do nothing ("eigen"). Intel's builds (intel-tensorflow,
the Intel Extension for TensorFlow) run oneDNN on OpenMP ("openmp"), where OpenMP
variables matter and each inter-op thread owns an OpenMP team.

Evidence, strongest first: DT_NEEDED entries of TF's core shared libraries naming an
OpenMP runtime (libgomp, libiomp5, libomp; read from the ELF dynamic section by a small
pure-Python reader that only seeks, so the 800 MB libraries cost microseconds); an OpenMP
runtime bundled in the package (or its auditwheel ".libs" directory); an installed
Intel Extension for TensorFlow; the name of the installed distribution. Importing
TensorFlow to ask would cost ~2.5 s and fix its thread pools, which is what we plan.

The answer depends on the Python environment, not on a topology reader's root. It is
cached in-process and on disk, keyed by the package path and the mtimes of the files looked at.
"""

from __future__ import annotations

import glob
import importlib.util
import logging
import os
import struct
from dataclasses import dataclass

from ._cache import load_cache, store_cache

log = logging.getLogger("tf_autopar.topology")

OPENMP_MARKERS = ("libgomp", "libiomp5", "libiompstubs5", "libomp.", "libomp-")
# TF core libraries, relative to the tensorflow package directory
CORE_LIBS = (
    "libtensorflow_framework.so*",
    "libtensorflow_cc.so*",
    "python/_pywrap_tensorflow_internal.so",
    "python/lib_pywrap_tensorflow_common.so",
)
INTEL_DISTRIBUTIONS = ("intel-tensorflow", "intel-tensorflow-avx512", "tensorflow-intel")
TF_DISTRIBUTIONS = (
    "tensorflow",
    "tensorflow-cpu",
    "tensorflow-intel",
    "intel-tensorflow",
    "intel-tensorflow-avx512",
    "tf-nightly",
    "tf-nightly-cpu",
    "tensorflow-aarch64",
    "tensorflow-cpu-aws",
)


@dataclass(frozen=True)
class TfRuntime:
    runtime: str  # "eigen", "openmp", "unknown" (TF found, evidence unreadable), "absent" (no TF)
    evidence: str  # one line saying why
    package_dir: str | None = None
    distribution: str | None = None  # e.g. "tensorflow-cpu 2.21.0"


def elf_needed(path: str) -> list[str] | None:
    """DT_NEEDED entries of an ELF shared object, or None if it is not a readable ELF file."""
    try:
        with open(path, "rb") as fh:
            ident = fh.read(16)
            if len(ident) < 16 or ident[:4] != b"\x7fELF":
                return None
            is64 = ident[4] == 2
            end = "<" if ident[5] == 1 else ">"
            if is64:
                hdr = fh.read(48)
                phoff = struct.unpack_from(end + "Q", hdr, 16)[0]
                phentsize, phnum = struct.unpack_from(end + "HH", hdr, 38)
                ph_fmt, dyn_fmt = end + "IIQQQQQQ", end + "qQ"
            else:
                hdr = fh.read(36)
                phoff = struct.unpack_from(end + "I", hdr, 12)[0]
                phentsize, phnum = struct.unpack_from(end + "HH", hdr, 26)
                ph_fmt, dyn_fmt = end + "IIIIIIII", end + "iI"
            fh.seek(phoff)
            table = fh.read(phentsize * phnum)
            loads, dynamic = [], None
            for i in range(phnum):
                raw = struct.unpack_from(ph_fmt, table, i * phentsize)
                if is64:
                    p_type, _flags, p_offset, p_vaddr, _paddr, p_filesz = raw[:6]
                else:
                    p_type, p_offset, p_vaddr, _paddr, p_filesz = raw[:5]
                if p_type == 1:  # PT_LOAD
                    loads.append((p_vaddr, p_offset, p_filesz))
                elif p_type == 2:  # PT_DYNAMIC
                    dynamic = (p_offset, p_filesz)
            if dynamic is None:
                return []
            fh.seek(dynamic[0])
            dyn = fh.read(dynamic[1])
            step = struct.calcsize(dyn_fmt)
            needed, strtab, strsz = [], None, None
            for off in range(0, len(dyn) - step + 1, step):
                tag, val = struct.unpack_from(dyn_fmt, dyn, off)
                if tag == 0:  # DT_NULL
                    break
                if tag == 1:
                    needed.append(val)
                elif tag == 5:
                    strtab = val
                elif tag == 10:
                    strsz = val
            if strtab is None or strsz is None:
                return None
            for vaddr, offset, size in loads:
                if vaddr <= strtab < vaddr + size:
                    base = offset + strtab - vaddr
                    break
            else:
                return None
            # The dynamic string table holds every exported C++ symbol name (tens of MB
            # for TF): read only the few names we need.
            names = []
            for off in needed:
                if off >= strsz:
                    return None
                fh.seek(base + off)
                raw = fh.read(min(512, strsz - off))
                stop = raw.find(b"\0")
                names.append(raw[: stop if stop >= 0 else None].decode("utf-8", "replace"))
    except (OSError, struct.error):
        return None
    return names


def is_openmp_library(name: str) -> bool:
    """Whether a shared library's file name (or path) is an OpenMP runtime's."""
    base = os.path.basename(name)
    return any(base.startswith(m) for m in OPENMP_MARKERS)


def _core_libs(pkg: str) -> list[str]:
    found: list[str] = []
    for pattern in CORE_LIBS:
        found.extend(sorted(glob.glob(os.path.join(pkg, pattern))))
    return found


def _bundled_openmp(pkg: str) -> list[str]:
    parent = os.path.dirname(pkg)
    dirs = [pkg, os.path.join(pkg, "python")] + glob.glob(os.path.join(parent, "tensorflow*.libs"))
    hits = []
    for d in dirs:
        try:
            hits.extend(os.path.join(d, n) for n in os.listdir(d) if is_openmp_library(n) and ".so" in n)
        except OSError:
            continue
    return hits


def _distribution() -> str | None:
    import importlib.metadata  # only on a cache miss: the import costs a few ms

    for name in TF_DISTRIBUTIONS:
        try:
            return f"{name} {importlib.metadata.version(name)}"
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def decide(
    libs: dict[str, list[str] | None], bundled: list[str], itex: bool, distribution: str | None
) -> tuple[str, str]:
    """Pure decision from gathered evidence -> (runtime, evidence line)."""
    for lib, needed in libs.items():
        omp = [n for n in needed or () if is_openmp_library(n)]
        if omp:
            return "openmp", f"{os.path.basename(lib)} links {', '.join(omp)}"
    if itex:
        return "openmp", "Intel Extension for TensorFlow is installed (its CPU kernels run on OpenMP)"
    if bundled:
        return "openmp", f"OpenMP runtime bundled with TensorFlow: {os.path.basename(bundled[0])}"
    readable = [lib for lib, needed in libs.items() if needed is not None]
    if readable:
        names = ", ".join(os.path.basename(lib) for lib in readable)
        return "eigen", f"no OpenMP runtime among the libraries linked by {names} (oneDNN on TF's Eigen pool)"
    if distribution and distribution.split()[0] in INTEL_DISTRIBUTIONS:
        return "openmp", f"{distribution} is an Intel (OpenMP) build; its libraries were not readable"
    return "unknown", "TensorFlow found but none of its core libraries could be read"


_memory: dict[str, TfRuntime] = {}


def detect_tf_runtime(package_dir: str | None = None) -> TfRuntime:
    """The installed TensorFlow's threading runtime (cached; never imports TensorFlow).

    package_dir: a tensorflow package directory to examine instead of the importable one.
    """
    if package_dir is None:
        try:
            spec = importlib.util.find_spec("tensorflow")
        except (ImportError, ValueError):
            spec = None
        locations = list(spec.submodule_search_locations or []) if spec else []
        if not locations:
            return TfRuntime("absent", "no tensorflow package importable from this interpreter")
        package_dir = locations[0]
    pkg = os.path.realpath(package_dir)
    libs = _core_libs(pkg)
    itex_spec = importlib.util.find_spec("intel_extension_for_tensorflow")
    stamp = [pkg, str(_mtime(pkg)), str(bool(itex_spec))] + [f"{p}:{_mtime(p)}" for p in libs]
    key = "|".join(stamp)
    if key in _memory:
        return _memory[key]
    cached = load_cache("tf_runtime.json").get(key)
    if isinstance(cached, dict) and {"runtime", "evidence"} <= cached.keys():
        result = TfRuntime(cached["runtime"], cached["evidence"], pkg, cached.get("distribution"))
    else:
        needed = {lib: elf_needed(lib) for lib in libs}
        distribution = _distribution()
        runtime, evidence = decide(needed, _bundled_openmp(pkg), itex_spec is not None, distribution)
        result = TfRuntime(runtime, evidence, pkg, distribution)
        if runtime != "unknown":
            store_cache(
                "tf_runtime.json", key, {"runtime": runtime, "evidence": evidence, "distribution": distribution}
            )
    log.debug("TensorFlow threading runtime: %s (%s)", result.runtime, result.evidence)
    _memory[key] = result
    return result


def _mtime(path: str) -> int:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return 0

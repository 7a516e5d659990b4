"""CPU vendor, model and notable ISA extensions.

On the live host this uses py-cpuinfo, which is slow (about 1 s: it runs itself in a
subprocess), so its answer is cached in-process and on disk
(~/.cache/tf_autopar/cpuinfo.json, or $TF_AUTOPAR_CACHE_DIR / $XDG_CACHE_HOME), keyed
by a hash of the first processor's "model name"/"flags" (or aarch64 "Features") lines of
/proc/cpuinfo: the key changes when the CPU (or the VM's exposed features) changes. For a
recorded tree (root != "/") the tree's proc/cpuinfo is parsed directly. When py-cpuinfo is
missing or fails, /proc/cpuinfo is parsed directly too (with a warning).

py-cpuinfo's helper is started here, not through ``get_cpu_info()``: that one leaves it (and
its cpuid child) running when the caller is interrupted, so a command stopped by Ctrl-C in its
first second left a child behind. Ours runs in a session of its own and is killed with us.
"""

from __future__ import annotations

import importlib
import json
import logging
import subprocess
import sys
from collections.abc import Iterable

from tf_autopar._keys import stable_key
from tf_autopar._process_group import kill_group

from ._cache import load_cache, store_cache
from ._fs import HostFS, Notes
from .model import CpuInfo

log = logging.getLogger("tf_autopar.topology")

# Extensions that matter to DL kernels, in display order. Names follow /proc/cpuinfo.
# Per architecture: "sme" is AMD's memory encryption on x86 but the matrix extension on ARM.
NOTABLE_ISA = {
    "x86": (
        "sse4_2",
        "avx",
        "avx2",
        "fma",
        "f16c",
        "avx512f",
        "avx512cd",
        "avx512bw",
        "avx512dq",
        "avx512vl",
        "avx512_vnni",
        "avx512_bf16",
        "avx512_fp16",
        "avx_vnni",
        "avx_vnni_int8",
        "amx_tile",
        "amx_bf16",
        "amx_int8",
        "amx_fp16",
    ),
    "arm": ("asimd", "asimddp", "asimdhp", "i8mm", "bf16", "sve", "sve2", "svebf16", "svei8mm", "sme"),
}
# py-cpuinfo's cpuid-derived spellings -> /proc/cpuinfo spellings
_ALIASES = {
    "avx512vnni": "avx512_vnni",
    "avx512bf16": "avx512_bf16",
    "avx512fp16": "avx512_fp16",
    "avxvnni": "avx_vnni",
    "amxtile": "amx_tile",
    "amxbf16": "amx_bf16",
    "amxint8": "amx_int8",
}

_VENDORS = {"GenuineIntel": "Intel", "AuthenticAMD": "AMD", "HygonGenuine": "Hygon", "CentaurHauls": "Centaur"}
# aarch64 "CPU implementer" codes
_ARM_IMPLEMENTERS = {
    0x41: "ARM",
    0x42: "Broadcom",
    0x43: "Cavium",
    0x46: "Fujitsu",
    0x48: "HiSilicon",
    0x4E: "NVIDIA",
    0x50: "APM",
    0x51: "Qualcomm",
    0x61: "Apple",
    0xC0: "Ampere",
}
# ARM Ltd. "CPU part" codes of server cores, and the big.LITTLE partners of common boards
_ARM_PARTS = {
    0xD0C: "Neoverse-N1",
    0xD40: "Neoverse-V1",
    0xD49: "Neoverse-N2",
    0xD4F: "Neoverse-V2",
    0xD8E: "Neoverse-N3",
    0xD84: "Neoverse-V3",
    0xD08: "Cortex-A72",
    0xD0B: "Cortex-A76",
    0xD03: "Cortex-A53",
    0xD05: "Cortex-A55",
    0xD41: "Cortex-A78",
}

_memory: dict[str, CpuInfo] = {}


def notable_isa(flags: Iterable[str], arch: str = "x86") -> tuple[str, ...]:
    """The DL-relevant extensions among a CPU's flags, for arch "x86" or "arm"."""
    have = {_ALIASES.get(f.lower(), f.lower()) for f in flags}
    return tuple(f for f in NOTABLE_ISA.get(arch, ()) if f in have)


def first_processor_fields(text: str) -> dict[str, str]:
    """Key/value lines of /proc/cpuinfo up to the first blank line after a processor block.

    aarch64 kernels list per-processor blocks and then shared lines (e.g. "Hardware"); we
    only need the first block.
    """
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if fields:
                break
            continue
        key, sep, value = line.partition(":")
        if sep:
            fields.setdefault(key.strip(), value.strip())
    return fields


def parse_proc_cpuinfo(text: str) -> CpuInfo:
    """Vendor, model and ISA from /proc/cpuinfo text (x86 and aarch64 layouts)."""
    f = first_processor_fields(text)
    if "vendor_id" in f or "flags" in f:
        vendor = _VENDORS.get(f.get("vendor_id", ""), f.get("vendor_id") or "unknown")
        model = f.get("model name") or "unknown"
        return CpuInfo(vendor=vendor, model=model, isa=notable_isa(f.get("flags", "").split()))
    if "Features" in f or "CPU implementer" in f:
        vendor, model = _arm_names(f.get("CPU implementer", ""), f.get("CPU part", ""))
        model = f.get("model name") or model
        return CpuInfo(vendor=vendor, model=model, isa=notable_isa(f.get("Features", "").split(), "arm"))
    return CpuInfo()


def _arm_names(implementer: str, part: str) -> tuple[str, str]:
    try:
        impl = int(implementer, 16)
    except ValueError:
        return "unknown", "unknown"
    vendor = _ARM_IMPLEMENTERS.get(impl, f"implementer {implementer}")
    try:
        part_id = int(part, 16)
    except ValueError:
        return vendor, "unknown"
    model = _ARM_PARTS.get(part_id, f"part {part}") if impl == 0x41 else f"part {part}"
    return vendor, model


_CACHE_FORMAT = "3"  # bump when CpuInfo's content or NOTABLE_ISA changes


def _key(fields: dict[str, str]) -> str:
    basis = (
        _CACHE_FORMAT
        + "\n"
        + "\n".join(
            fields.get(k, "") for k in ("vendor_id", "model name", "flags", "CPU implementer", "CPU part", "Features")
        )
    )
    return stable_key(basis)


PY_CPUINFO_TIMEOUT_S = 60.0


def _py_cpuinfo_output() -> dict:
    """What ``cpuinfo.get_cpu_info()`` returns, from the same helper command it runs."""
    helper = importlib.import_module("cpuinfo.cpuinfo")  # py-cpuinfo; the import is not free
    if getattr(sys, "frozen", False):  # no interpreter to run the helper with: py-cpuinfo's own way
        return helper.get_cpu_info()
    proc = subprocess.Popen(
        [sys.executable, helper.__file__, "--json"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=PY_CPUINFO_TIMEOUT_S)
    except BaseException:  # a timeout, or KeyboardInterrupt: the helper's group goes with it
        kill_group(proc.pid)
        proc.wait()
        raise
    if proc.returncode != 0:
        raise RuntimeError(f"py-cpuinfo's helper exited with status {proc.returncode}")
    info = json.loads(out)
    if not isinstance(info, dict):
        raise ValueError("py-cpuinfo's helper printed no JSON object")
    return info


def _from_py_cpuinfo() -> CpuInfo:
    info = _py_cpuinfo_output()
    vendor_raw = info.get("vendor_id_raw") or ""
    vendor = _VENDORS.get(vendor_raw, vendor_raw or "unknown")
    model = info.get("brand_raw") or "unknown"
    arch = "arm" if str(info.get("arch", "")).upper().startswith("ARM") else "x86"
    return CpuInfo(vendor=vendor, model=model, isa=notable_isa(info.get("flags", []), arch))


def read_cpuinfo(fs: HostFS, notes: Notes, *, allow_slow: bool = True) -> CpuInfo:
    """Vendor, model and ISA. ``allow_slow=False`` never runs py-cpuinfo (about 1 s on a
    cache miss): callers on a program's start path (enable()) take /proc/cpuinfo instead."""
    if not fs.live:
        text = fs.read("/proc/cpuinfo")
        if text is None:
            notes.warn(f"{fs.path('/proc/cpuinfo')} missing; CPU vendor/model unknown")
            return CpuInfo()
        return parse_proc_cpuinfo(text)

    head = fs.read("/proc/cpuinfo", limit=16384) or ""  # a prefix: the kernel formats lazily
    fields = first_processor_fields(head)
    key = _key(fields)
    if key in _memory:
        return _memory[key]
    cached = load_cache("cpuinfo.json").get(key)
    if isinstance(cached, dict):
        try:
            result = CpuInfo(vendor=cached["vendor"], model=cached["model"], isa=tuple(cached["isa"]))
            _memory[key] = result
            return result
        except (KeyError, TypeError):
            pass
    if not allow_slow:
        result = parse_proc_cpuinfo(head)
        _memory[key] = result
        return result  # not written to disk: the cache holds py-cpuinfo's answers only
    try:
        result = _from_py_cpuinfo()
    except Exception as exc:  # ImportError, or py-cpuinfo's subprocess failing
        notes.warn(f"py-cpuinfo failed ({exc!r}); parsing /proc/cpuinfo directly")
        full = fs.read("/proc/cpuinfo") or head
        result = parse_proc_cpuinfo(full)
        _memory[key] = result
        return result  # not written to disk: try py-cpuinfo again next process
    if result.model == "unknown" or not result.isa:
        # py-cpuinfo knows less than /proc/cpuinfo on some ARM hosts: fill the gaps.
        own = parse_proc_cpuinfo(head)
        result = CpuInfo(
            vendor=result.vendor if result.vendor != "unknown" else own.vendor,
            model=result.model if result.model != "unknown" else own.model,
            isa=result.isa or own.isa,
        )
    _memory[key] = result
    store_cache("cpuinfo.json", key, {"vendor": result.vendor, "model": result.model, "isa": list(result.isa)})
    return result

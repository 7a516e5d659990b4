"""Host CPU topology for thread planning, read from /sys and /proc without importing TensorFlow.

detect_topology(root="/") -> Topology. Readers by concept: cpus (CPUs, affinity, cores,
NUMA), caches (last-level cache domains, hybrid core types), cgroup (quota, cpuset, the
budget rule), memory (the cgroups' memory limit and use), cpuinfo (vendor, model, ISA; cached),
tf_runtime (Eigen or OpenMP build of the installed TF; cached), zentf (AMD's ZenDNN plugin).
"""

from __future__ import annotations

from .cgroup import cpu_budget
from .cpulist import format_cpulist, parse_cpulist
from .detect import detect_topology
from .memory import MemoryReader, read_memory
from .model import (
    EFFICIENCY,
    PERFORMANCE,
    CacheDomain,
    Core,
    CpuInfo,
    CpuQuota,
    MemoryLimit,
    NumaNode,
    Topology,
    ZentfPlugin,
)
from .tf_runtime import TfRuntime, detect_tf_runtime
from .zentf import detect_zentf

__all__ = [
    "EFFICIENCY",
    "PERFORMANCE",
    "CacheDomain",
    "Core",
    "CpuInfo",
    "CpuQuota",
    "MemoryLimit",
    "MemoryReader",
    "NumaNode",
    "TfRuntime",
    "Topology",
    "ZentfPlugin",
    "cpu_budget",
    "detect_tf_runtime",
    "detect_topology",
    "detect_zentf",
    "format_cpulist",
    "parse_cpulist",
    "read_memory",
]

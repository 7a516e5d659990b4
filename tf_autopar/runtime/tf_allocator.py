"""TensorFlow's own CPU allocator: when malloc takes page faults on every call, say so and what to set.

Stock TensorFlow hands every tensor buffer to malloc and frees it when the op is done. glibc maps
a buffer above its largest mmap threshold (32 MB) afresh each time and unmaps it when freed, so a
model with such activations takes a page fault per 4 KB of them on every call: MobileNetV2 and
EfficientNet-B0 at batch 8 (38 MB activations) took 16,000-59,000 minor faults a call.
``TF_CPU_ALLOCATOR_USE_BFC=true`` makes the process's CPU allocator TensorFlow's
best-fit-with-coalescing pool, which keeps freed regions: no faults, and those two rows ran
1.77x and 1.48x faster (benchmarks/bench_cpu_allocator.py, docs/serving.md). On the rows that
did not fault it was no faster, and slower on some (DLRM at batch 1: 0.95x in every round;
DCN-V2 at batch 2048: 0.70x in two rounds of three), so enable() does not set it for every
model. TensorFlow reads the variable once, when its runtime starts; by the time a model's calls
show the faults it is too late for this process. So the fast
path counts the faults of a bucket's first calls and, where they pass FAULTS_PER_CALL, says once
what to set (``advice``) and remembers the count in the plan cache; the next start that loads the
model before TensorFlow starts sets the variable for it (``remembered_env``). The user's own
value, or a preloaded allocator, is never second-guessed.
"""

from __future__ import annotations

import resource
import statistics
from typing import Mapping, Sequence

import tf_autopar.planning.variables as V
from tf_autopar.runtime import controller
from tf_autopar.runtime.allocator import preloads_allocator

VAR = V.CPU_ALLOCATOR_BFC
#: Minor faults per call above which malloc is refaulting large buffers: 8 MB of fresh pages a call.
#: Measured: 16,000-59,000 on the two rows that faulted, at most 37 on the 16 others.
FAULTS_PER_CALL = 2000
#: Calls of a bucket whose faults are counted (the median decides: a first touch is an outlier).
SAMPLE_CALLS = 9


def minor_faults() -> int:
    """The process's minor page faults so far (every thread's)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def _chosen(environ: Mapping[str, str]) -> bool:
    """The user decided the allocator: their TF_CPU_ALLOCATOR_USE_BFC (either value), or a preloaded
    allocator (jemalloc, tcmalloc keep freed memory themselves)."""
    return VAR in environ or preloads_allocator(environ.get("LD_PRELOAD"))


def advice(faults: Sequence[int], environ: Mapping[str, str], allocator: str | None) -> str:
    """What to tell the user, or "": the faults per call (``faults``, one count per call) pass
    FAULTS_PER_CALL, the running allocator is malloc, and neither the user's ``TF_CPU_ALLOCATOR_USE_BFC``
    nor a preloaded allocator (jemalloc, tcmalloc keep freed memory themselves) has decided otherwise."""
    if not faults or allocator != "malloc" or _chosen(environ):
        return ""
    per_call = statistics.median(faults)
    if per_call < FAULTS_PER_CALL:
        return ""
    return (
        f"TensorFlow's CPU allocator (malloc) takes {per_call:,.0f} page faults a call here ({per_call * 4 / 1024:,.0f} MB "
        "of large buffers mapped afresh on every call). Start the process with TF_CPU_ALLOCATOR_USE_BFC=true "
        "(in the environment, or in os.environ before TensorFlow's first op) so that TensorFlow keeps freed "
        "memory for reuse: measured 1.5-1.8x faster on two vision models at batch 8 that faulted like this "
        "(docs/serving.md). With the plan cache on, enable() remembers it for this model and sets it at the next "
        "start that loads the model before TensorFlow starts; it is not set for every model: where malloc "
        "does not fault it was no faster, and slower on some."
    )


def remembered_env(entry: Mapping | None, runtime: str, environ: Mapping[str, str]) -> dict[str, str]:
    """The variable to set before TensorFlow starts for a model whose cached fast-path entry
    (cache.lookup_served) recorded FAULTS_PER_CALL or more on a bucket here: {} otherwise, and
    {} where the user chose (their variable, a preloaded allocator) or on OpenMP builds (not measured)."""
    functions = entry.get("functions") if isinstance(entry, Mapping) else None
    if not isinstance(functions, Mapping) or runtime == "openmp" or _chosen(environ):
        return {}
    for summary in functions.values():
        buckets = summary.get("buckets") if isinstance(summary, Mapping) else None
        for b in buckets.values() if isinstance(buckets, Mapping) else ():
            faults = b.get("faults_per_call") if isinstance(b, Mapping) else None
            if isinstance(faults, (int, float)) and not isinstance(faults, bool) and faults >= FAULTS_PER_CALL:
                return {VAR: "true"}
    return {}


def in_use() -> str | None:
    """The running CPU allocator: "bfc" (a pool: TensorFlow's BFC, or oneDNN's where its
    optimizations are on) or "malloc"; None before TensorFlow's runtime started. Only the pools
    keep statistics, so TensorFlow's memory query tells them from malloc."""
    if not controller.runtime_started():
        return None
    import tensorflow as tf

    try:
        tf.config.experimental.get_memory_info("CPU:0")
    except ValueError:  # "Allocator stats not available": malloc underneath
        return "malloc"
    return "bfc"

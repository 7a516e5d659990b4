"""The environment variables that size TensorFlow's and OpenMP's thread pools: named here once.

Every module that sets, reads, reports or scrubs one of them reads its name from here: the
plan's ``to_env()``, the user's own settings, enable()'s controller, the measuring children's
clean slate and their report of what they ran with. A misspelt name in one place would be a
setting silently not applied (or a user's setting silently not respected).
"""

from __future__ import annotations

INTEROP = "TF_NUM_INTEROP_THREADS"
INTRAOP = "TF_NUM_INTRAOP_THREADS"
OVERRIDE_GLOBAL_THREADPOOL = "TF_OVERRIDE_GLOBAL_THREADPOOL"
OMP_THREADS = "OMP_NUM_THREADS"
MKL_THREADS = "MKL_NUM_THREADS"
KMP_BLOCKTIME = "KMP_BLOCKTIME"
KMP_AFFINITY = "KMP_AFFINITY"
KMP_HW_SUBSET = "KMP_HW_SUBSET"
CPU_ALLOCATOR_BFC = "TF_CPU_ALLOCATOR_USE_BFC"  # TensorFlow's CPU allocator: its BFC pool, not malloc

POOLS = (INTEROP, INTRAOP)  # TensorFlow's two process pools
TENSORFLOW = (INTEROP, INTRAOP, OVERRIDE_GLOBAL_THREADPOOL)  # TensorFlow's own thread variables
OPENMP_PREFIXES = ("OMP_", "KMP_", "MKL_")  # every variable of the OpenMP and MKL runtimes
TF_AUTOPAR_PREFIX = "TF_AUTOPAR_"


def is_thread_setting(name: str) -> bool:
    """Whether ``name`` is one of TensorFlow's thread variables or an OpenMP/MKL runtime's."""
    return name in TENSORFLOW or name.startswith(OPENMP_PREFIXES)

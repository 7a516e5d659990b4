"""`tf-autopar run --allocator jemalloc|tcmalloc|default`: preload the system's malloc, as
PyTorch's ``run_cpu`` and ITEX's launcher do.

Pure decisions (``preload_value``) apart from the file system (``find_library``). The library is
the system's (Debian: ``libjemalloc2``, ``libtcmalloc-minimal4`` or ``google-perftools``); when
it is missing the error names the package. A user's ``LD_PRELOAD`` is kept: the allocator goes
first, the user's libraries after it; one already naming an allocator is kept as it is.

Whether it helps is measured per model (benchmarks/bench_allocator.py, paired A/B in fresh
processes): ``MEASURED`` holds what was measured, keyed by processor and the model's graph
fingerprint, and ``recommendation`` recommends an allocator only for a model and processor it was
measured on, only where it won in every round. ``tf-autopar run --model M`` says so.
"""

from __future__ import annotations

import glob
import os
import subprocess
from dataclasses import dataclass
from typing import Iterable, Mapping

CHOICES = ("default", "jemalloc", "tcmalloc")

#: allocator -> (library file names, first preferred; the Debian package(s) that install them)
LIBRARIES: dict[str, tuple[tuple[str, ...], str]] = {
    "jemalloc": (("libjemalloc.so.2", "libjemalloc.so"), "libjemalloc2"),
    "tcmalloc": (
        ("libtcmalloc_minimal.so.4", "libtcmalloc.so.4", "libtcmalloc_minimal.so", "libtcmalloc.so"),
        "libtcmalloc-minimal4 (or google-perftools)",
    ),
}
SEARCH_DIRS = (
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/lib/x86_64-linux-gnu",
    "/usr/lib64",
    "/usr/lib",
    "/usr/local/lib",
    "/lib64",
    "/lib",
)
_ALLOCATOR_MARKS = ("jemalloc", "tcmalloc", "mimalloc")


def preloads_allocator(ld_preload: str | None) -> bool:
    """Whether an ``LD_PRELOAD`` value already names an allocator library (jemalloc, tcmalloc, mimalloc)."""
    entries = (ld_preload or "").replace(":", " ").split()
    return any(mark in os.path.basename(e) for e in entries for mark in _ALLOCATOR_MARKS)


class AllocatorNotFound(FileNotFoundError):
    """The allocator asked for is not installed on this system."""


@dataclass(frozen=True)
class Recommendation:
    allocator: str
    speedup: float  # median of paired rounds, allocator against glibc malloc
    spread: tuple[float, float]  # the rounds' range
    model: str
    processor: str

    def text(self) -> str:
        return (
            f"allocator: {self.allocator} measured {self.speedup:.2f}x [{self.spread[0]:.2f}-{self.spread[1]:.2f}] "
            f"faster than glibc malloc on {self.model} on this processor: "
            f"tf-autopar run --allocator {self.allocator} -- ..."
        )


#: (processor model name, graph fingerprint) -> measured (model, allocator, median speedup, (min, max));
#: from benchmarks/results/allocator.json, only where the allocator won in every round.
MEASURED: dict[tuple[str, str], tuple[str, str, float, tuple[float, float]]] = {
    # 2-core KVM guest, tensorflow-cpu 2.21, batch 1, 3 rounds (benchmarks/results/allocator.json)
    ("Intel(R) Xeon(R) Processor", "c350db42721ec6a76f2863f5abb2d2183475228dccc54b3c2645fe9c87d70488"): (
        "mobilenet_v2",
        "tcmalloc",
        1.21,
        (1.02, 1.23),
    ),
    ("Intel(R) Xeon(R) Processor", "0f654095659a12a53b8e3d2b9145eefb6cba3d4062a05675e983b0390aa46be5"): (
        "dlrm",
        "tcmalloc",
        1.07,
        (1.04, 1.09),
    ),
}


def recommendation(processor: str, fingerprint: str, table: Mapping | None = None) -> Recommendation | None:
    """The allocator measured to help the model with ``fingerprint`` on ``processor``, or None
    (not measured there, or it did not win in every round)."""
    entry = (MEASURED if table is None else table).get((processor, fingerprint))
    if entry is None:
        return None
    model, allocator, speedup, spread = entry
    return Recommendation(allocator, speedup, spread, model, processor) if spread[0] > 1.0 else None


def _ldconfig_paths() -> list[str]:
    try:
        out = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.rsplit("=>", 1)[1].strip() for line in out.splitlines() if "=>" in line]


def find_library(allocator: str, dirs: Iterable[str] = SEARCH_DIRS, ldconfig: bool = True) -> str:
    """The path of ``allocator``'s shared library; AllocatorNotFound naming the package to install."""
    if allocator not in LIBRARIES:
        raise ValueError(f"unknown allocator {allocator!r}: choose one of {', '.join(CHOICES)}")
    names, package = LIBRARIES[allocator]
    known = _ldconfig_paths() if ldconfig else []
    for name in names:
        for path in known:
            if os.path.basename(path) == name and os.path.isfile(path):
                return path
        for d in dirs:
            for path in sorted(glob.glob(os.path.join(d, name))):
                if os.path.isfile(path):
                    return path
    raise AllocatorNotFound(
        f"--allocator {allocator}: no {' or '.join(names[:2])} on this system; install the package {package} "
        f"(Debian/Ubuntu: apt-get install {package.split(' ')[0]}), or use --allocator default"
    )


def preload_value(library: str, user_preload: str | None) -> tuple[str, str]:
    """(LD_PRELOAD to set, a note for the user or ''): ours first, the user's after it; a user's
    LD_PRELOAD that already names an allocator is kept unchanged."""
    user = (user_preload or "").strip()
    if not user:
        return library, ""
    entries = user.replace(":", " ").split()
    if preloads_allocator(user):
        return user, f"your LD_PRELOAD already preloads an allocator ({user}); kept, --allocator not applied"
    if library in entries:
        return user, ""
    return f"{library}:{user}", f"LD_PRELOAD: {library} added before yours ({user})"


def allocator_env(allocator: str, environ: Mapping[str, str]) -> tuple[dict[str, str], str]:
    """The variables to add for ``allocator`` ({} for "default") and a note."""
    if allocator not in CHOICES:
        raise ValueError(f"unknown allocator {allocator!r}: choose one of {', '.join(CHOICES)}")
    if allocator == "default":
        return {}, ""
    value, note = preload_value(find_library(allocator), environ.get("LD_PRELOAD"))
    return {"LD_PRELOAD": value}, note

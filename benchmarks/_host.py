"""What benchmarks read of the host: the processor every one records with its figures (a
threshold fitted on one is a guess on another), a process's CPU time."""

from __future__ import annotations

import os
from pathlib import Path

from tf_autopar.topology.cpuinfo import parse_proc_cpuinfo


def processor() -> str:
    """/proc/cpuinfo's model name (an Arm part's name where there is none); "unknown" without one."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            return parse_proc_cpuinfo(fh.read()).model
    except OSError:
        return "unknown"


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of one process so far, all its threads (/proc/PID/stat), None once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

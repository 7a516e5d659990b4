"""The processor every benchmark records with its figures (a threshold fitted on one is a guess on another)."""

from __future__ import annotations

from tf_autopar.topology.cpuinfo import parse_proc_cpuinfo


def processor() -> str:
    """/proc/cpuinfo's model name (an Arm part's name where there is none); "unknown" without one."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            return parse_proc_cpuinfo(fh.read()).model
    except OSError:
        return "unknown"

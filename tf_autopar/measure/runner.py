"""Run one configuration in a fresh process: environment, binding, quota group, timeout (the
parent's side of child.py's protocol).

Why fresh processes: TensorFlow fixes its thread pools when its runtime starts, so a
configuration can only be measured in a process that started with it. Each child runs in
its own session (process group) so a timeout or Ctrl-C (or SIGTERM: cli/interrupt.py) kills
it with everything it spawned; under a quota it also runs in its own cgroup, which is emptied
and removed whatever happens (the ``finally`` below runs on KeyboardInterrupt too). Its
temporary files go to a private TMPDIR removed with it: a child killed with SIGKILL cannot
clean up after itself.
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import tf_autopar
from tf_autopar._process_group import kill_group
from tf_autopar.measure.cgroup import QuotaGroup
from tf_autopar.measure.configs import is_thread_var
from tf_autopar.topology.affinity import set_affinity

log = logging.getLogger("tf_autopar.measure")

STDERR_TAIL = 2000
OK, CRASH, TIMEOUT = "ok", "crash", "timeout"


@dataclass(frozen=True)
class ChildResult:
    status: str  # "ok", "crash" (non-zero exit or unusable output) or "timeout"
    returncode: int | None
    wall_s: float
    payload: dict[str, Any] | None  # the JSON object the child printed
    stderr_tail: str = ""
    error: str = ""
    cpu_stat: dict[str, Any] | None = None  # the quota group's cpu.stat after the run
    pid: int | None = None
    reported: str = ""  # a failed child's own message (child.py's error object), for the user


@dataclass
class ChildTracker:
    """Pids of children started and not yet reaped: tests and the harness check it is empty."""

    live: set[int] = field(default_factory=set)


TRACKER = ChildTracker()


def clean_env(base: Mapping[str, str] | None = None) -> tuple[dict[str, str], list[str]]:
    """``base`` (default os.environ) without thread-count variables; also the names removed.

    The package's parent directory is put on PYTHONPATH so ``python -m tf_autopar...`` and
    ``tf_autopar_workloads`` resolve in the child exactly as in the harness.
    """
    env = dict(os.environ if base is None else base)
    removed = sorted(k for k in env if is_thread_var(k))
    for k in removed:
        del env[k]
    pkg_parent = os.path.dirname(os.path.dirname(os.path.abspath(tf_autopar.__file__)))
    parts = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    if pkg_parent not in parts:
        env["PYTHONPATH"] = os.pathsep.join([pkg_parent, *parts])
    return env, removed


def parse_payload(stdout: str) -> dict[str, Any]:
    """The child's JSON object: the whole stdout, or else its last line that is one."""
    text = stdout.strip()
    try:
        obj = json.loads(text)
        if isinstance(obj, dict):
            return obj
    except json.JSONDecodeError:
        pass
    for line in reversed(text.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(obj, dict):
                return obj
    raise ValueError("no JSON object on stdout" + (f" (got {text[-200:]!r})" if text else " (empty)"))


def _reported(stdout: str | None) -> str:
    """The message of a failed child's error object (child.fail), or ""."""
    try:
        obj = parse_payload(stdout or "")
    except ValueError:
        return ""
    return str(obj.get("error") or "")


def _preexec(cpus: Sequence[int], group: QuotaGroup | None) -> Callable[[], None] | None:
    if not cpus and group is None:
        return None

    def setup() -> None:  # runs in the child between fork and exec
        if group is not None:
            group.join()
        if cpus:
            set_affinity(cpus)

    return setup


def run_child(
    cmd: Sequence[str],
    env: Mapping[str, str],
    timeout_s: float,
    *,
    cpus: Sequence[int] = (),
    group: QuotaGroup | None = None,
    validate: Callable[[dict[str, Any]], None] | None = None,
) -> ChildResult:
    """Run ``cmd`` once; never raises for the child's failures (they become the status).

    ``group`` must be created already; the caller removes it (its cpu.stat is read here,
    after the child exits). ``validate`` checks the parsed payload (ValueError -> crash).
    """
    start = time.monotonic()
    scratch = tempfile.mkdtemp(prefix="tf_autopar_child_")
    try:
        proc = subprocess.Popen(
            list(cmd),
            env={**env, "TMPDIR": scratch},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            errors="replace",
            start_new_session=True,
            preexec_fn=_preexec(cpus, group),
        )
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    TRACKER.live.add(proc.pid)
    timed_out = False
    try:
        try:
            stdout, stderr = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            kill_group(proc.pid)
            stdout, stderr = proc.communicate()
    finally:
        # Also on KeyboardInterrupt: nothing of this child survives the harness.
        kill_group(proc.pid)
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        if group is not None:
            group.kill_all()
        TRACKER.live.discard(proc.pid)
        shutil.rmtree(scratch, ignore_errors=True)
    wall = time.monotonic() - start
    cpu_stat = None
    if group is not None:
        try:
            cpu_stat = group.stat().to_dict()
        except OSError as exc:
            log.warning("cannot read cpu.stat of %s: %s", group.path, exc)
    tail = (stderr or "")[-STDERR_TAIL:]
    common = dict(returncode=proc.returncode, wall_s=wall, stderr_tail=tail, cpu_stat=cpu_stat, pid=proc.pid)
    if timed_out:
        return ChildResult(TIMEOUT, payload=None, error=f"killed after {timeout_s:g} s", **common)
    if proc.returncode != 0:
        return ChildResult(
            CRASH, payload=None, error=f"exit status {proc.returncode}", reported=_reported(stdout), **common
        )
    try:
        payload = parse_payload(stdout or "")
        if validate is not None:
            validate(payload)
    except ValueError as exc:
        return ChildResult(CRASH, payload=None, error=f"unusable output: {exc}", **common)
    return ChildResult(OK, payload=payload, **common)


def check_step_payload(payload: dict[str, Any]) -> None:
    """The workloads runner's contract: step_times_s is a non-empty list of positive numbers."""
    times = payload.get("step_times_s")
    if not isinstance(times, list) or not times:
        raise ValueError("step_times_s missing or empty")
    for t in times:
        if not isinstance(t, (int, float)) or not math.isfinite(t) or t <= 0:
            raise ValueError(f"bad step time {t!r}")

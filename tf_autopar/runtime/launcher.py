"""`tf-autopar run`: start a program (or N copies) with the plan applied from outside.

For servers whose code cannot change. Decisions (pure: ``launch_specs``) are separated from
process handling (``run``): each instance gets os.environ + the plan's variables for its
slice of CPUs (a variable the user set is never overridden; OpenMP variables only appear
for OpenMP builds, as the planner decides), TF_AUTOPAR_INSTANCE / TF_AUTOPAR_INSTANCES, and
its own CPUs: ``numactl --physcpubind --membind`` when numactl exists and the host has
several NUMA nodes, else ``os.sched_setaffinity`` in the child before exec. Signals
SIGINT/SIGTERM/SIGHUP are forwarded to every child; the exit code is the first non-zero child
status (128+signal for a child killed by a signal), 0 when all succeed.

Output: one instance writes to the launcher's own stdout and stderr. Several would interleave,
even mid-line (each child writes whatever its buffer holds), so each one's output goes either to
its own log file (``log_dir``) or through a pipe read line by line and written whole, prefixed
``[instance i]``.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any, Mapping, Sequence

from tf_autopar.coordination.slices import bound_count, restrict, split
from tf_autopar.planning import plan as make_plan
from tf_autopar.planning.plan import plural
from tf_autopar.topology import affinity
from tf_autopar.topology.cpulist import format_cpulist

if TYPE_CHECKING:
    from tf_autopar.graph.profile import GraphProfile
    from tf_autopar.topology.model import Topology

FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
#: Names the thread variables the launcher set (not the user): controller.user_env() leaves them out.
LAUNCHER_VARS = "TF_AUTOPAR_LAUNCHER_VARS"


@dataclass(frozen=True)
class InstanceSpec:
    index: int
    cpus: tuple[int, ...]  # () = no binding
    env_set: dict[str, str]  # variables set for this instance (not the whole environment)
    env_kept: dict[str, str]  # the user's variables left as they were
    argv: tuple[str, ...]  # the full command, numactl prefix included
    binding: str  # "numactl", "sched_setaffinity", "none"
    inter_op: int = 0
    intra_op: int = 0

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class LaunchPlan:
    instances: tuple[InstanceSpec, ...]
    plan: dict[str, Any] = field(default_factory=dict)
    explain: str = ""
    warnings: tuple[str, ...] = ()  # what the person starting it should know first (shared CPUs)

    def to_dict(self) -> dict[str, Any]:
        return {
            "instances": [i.to_dict() for i in self.instances],
            "plan": self.plan,
            "explain": self.explain,
            "warnings": list(self.warnings),
        }

    def describe(self, index: int) -> str:
        """One line for instance ``index``: its CPUs, binding and threads, and the command."""
        spec = self.instances[index]
        cpus = format_cpulist(spec.cpus) if spec.cpus else "all CPUs"
        how = {"none": "not bound", "numactl": "bound with numactl", "sched_setaffinity": "bound"}[spec.binding]
        threads = f"inter_op={spec.inter_op} intra_op={spec.intra_op}"
        kept = (
            f" (yours kept: {', '.join(f'{k}={v}' for k, v in sorted(spec.env_kept.items()))})" if spec.env_kept else ""
        )
        return f"instance {spec.index} of {len(self.instances)}: CPUs {cpus} ({how}), {threads}{kept}"


def shared_cpus(slices: Sequence[Sequence[int]]) -> str:
    """A warning naming the CPUs that several instances were given ('' when the slices are disjoint)."""
    owners: dict[int, list[int]] = {}
    for i, cpus in enumerate(slices):
        for cpu in cpus:
            owners.setdefault(cpu, []).append(i)
    crowded = {cpu: who for cpu, who in sorted(owners.items()) if len(who) > 1}
    if not crowded:
        return ""

    def named(who: list[int]) -> str:  # a few, not a thousand: the warning stays one short line
        more = f" and {len(who) - 4} more" if len(who) > 4 else ""
        return ", ".join(map(str, who[:4])) + more

    shown = "; ".join(f"CPU {cpu}: instances {named(who)}" for cpu, who in list(crowded.items())[:4])
    more = f"; {len(crowded) - 4} more CPUs shared" if len(crowded) > 4 else ""
    return (
        f"{len(slices)} instances on {plural(len(owners), 'CPU')}: instances share CPUs ({shown}{more}), so they slow "
        f"each other down; at most {len(owners)} get a CPU of their own (--instances {len(owners)})"
    )


def restrict_to_cores(topology: Topology, cores: Sequence[int]) -> Topology:
    """The topology as seen by a process bound to ``cores`` (--cores): every CPU must be usable."""
    missing = sorted(set(cores) - set(topology.affinity))
    if missing:
        raise ValueError(f"--cores names CPUs this process may not use: {missing} (allowed: {list(topology.affinity)})")
    return restrict(topology, cores)


def launch_specs(
    topology: Topology,
    command: Sequence[str],
    *,
    mode: str = "latency",
    instances: int | None = None,
    environ: Mapping[str, str],
    numactl: str | None = None,
    profile: GraphProfile | None = None,
    tuned: Mapping[str, Any] | None = None,
    calibration: Mapping[str, Any] | None = None,
) -> LaunchPlan:
    """Decide each instance's CPUs, variables and command line (no side effects).

    ``profile``: the model's GraphProfile (``--model``), else the host-only plan; ``tuned``:
    its setting measured by ``tf-autopar tune`` (one instance only); ``calibration``: this
    host's measured small-op threshold. The variables
    set are named in LAUNCHER_VARS so that an enable() inside the command re-plans them for the
    model it loads instead of keeping them as the user's own."""
    if not command:
        raise ValueError("no command given: use `tf-autopar run [options] -- COMMAND ...`")
    n = instances or 1
    capped = ""
    if instances:  # bounded before anything is sized by it: never a list of 10**9 instances
        n, note = bound_count(instances, topology, f"--instances {instances}")
        capped = note if n < instances else ""
    if mode == "throughput":
        p = make_plan(
            topology, profile, "throughput", env=environ, streams=n if instances else None, calibration=calibration
        )
        n = p.instances
        slices = [tuple(c) for c in p.cpus] if p.cpus else [tuple(topology.affinity)]
        plans = [p] * n  # the plan's per-stream numbers are each instance's
    elif n == 1:
        p = make_plan(topology, profile, mode, env=environ, tuned=tuned, calibration=calibration)
        slices, plans = [tuple(p.cpus[0]) if p.cpus else tuple(topology.affinity)], [p]
    else:
        # the same slices as cooperating enable() workers get: whole cores, inside NUMA nodes
        parts = split(topology, n)
        slices = [s.cpus for s in parts]
        plans = [
            make_plan(restrict(topology, s.cpus, s.cores), profile, mode, env=environ, calibration=calibration)
            for s in parts
        ]
        p = plans[0]
    multi_numa = len(topology.numa_nodes) > 1
    specs = []
    for i, (cpus, ip) in enumerate(zip(slices, plans)):
        env_set: dict[str, str] = {}
        kept: dict[str, str] = {}
        for key, value in ip.to_env().items():
            if key in environ:
                kept[key] = environ[key]
            else:
                env_set[key] = value
        if env_set:
            env_set[LAUNCHER_VARS] = ",".join(sorted(env_set))
        env_set["TF_AUTOPAR_INSTANCE"] = str(i)
        env_set["TF_AUTOPAR_INSTANCES"] = str(n)
        bind_all = set(cpus) == set(topology.affinity) and n == 1
        argv = tuple(command)
        if not cpus or bind_all:
            binding = "none"
        elif numactl and multi_numa:
            nodes = sorted({nd.id for nd in topology.numa_nodes if set(nd.cpus) & set(cpus)})
            argv = (
                numactl,
                f"--physcpubind={','.join(map(str, cpus))}",
                f"--membind={','.join(map(str, nodes))}",
                *command,
            )
            binding = "numactl"
        else:
            binding = "sched_setaffinity"
        specs.append(InstanceSpec(i, tuple(cpus), env_set, kept, argv, binding, ip.inter_op, ip.intra_op))
    warning = shared_cpus(slices) if n > 1 and not capped else ""
    warnings = tuple(w for w in (capped, warning) if w)
    return LaunchPlan(tuple(specs), p.to_dict(), p.explain(), warnings)


def log_path(log_dir: str, index: int) -> str:
    """Where instance ``index`` writes its stdout and stderr with ``log_dir``."""
    return os.path.join(log_dir, f"instance-{index}.log")


def _relay(stream: IO[bytes], out: Any, prefix: bytes, lock: threading.Lock) -> None:
    """Copy ``stream`` to ``out`` (our stdout or stderr) whole line by whole line, each led by
    ``prefix``; bytes pass through unchanged where ``out`` has a binary buffer."""
    target = getattr(out, "buffer", None)
    for line in iter(stream.readline, b""):
        if not line.endswith(b"\n"):
            line += b"\n"  # a last line without its newline still ends before the next instance's
        with lock:
            if target is not None:
                out.flush()
                target.write(prefix + line)
                target.flush()
            else:
                out.write((prefix + line).decode(errors="replace"))
                out.flush()
    stream.close()


def run(launch: LaunchPlan, environ: Mapping[str, str] | None = None, *, log_dir: str | None = None) -> int:
    """Start every instance, forward signals, wait; the exit code as described above.

    ``log_dir``: each instance's stdout and stderr go to ``log_path(log_dir, i)``; without it,
    several instances' lines are prefixed ``[instance i]`` (see the module docstring)."""
    base = dict(os.environ if environ is None else environ)
    children: list[subprocess.Popen] = []
    relays: list[threading.Thread] = []
    files: list[IO[bytes]] = []
    previous = {}
    several = len(launch.instances) > 1
    lock = threading.Lock()
    if log_dir:
        os.makedirs(log_dir, exist_ok=True)

    def forward(signum: int, _frame: Any) -> None:
        for child in children:
            if child.poll() is None:
                try:
                    child.send_signal(signum)
                except ProcessLookupError:
                    pass

    for sig in FORWARDED:
        previous[sig] = signal.signal(sig, forward)
    try:
        for spec in launch.instances:
            env = dict(base)
            env.update(spec.env_set)
            preexec = affinity.binder(spec.cpus) if spec.binding == "sched_setaffinity" else None
            streams: dict[str, Any] = {}
            if log_dir:
                files.append(open(log_path(log_dir, spec.index), "wb"))
                streams = {"stdout": files[-1], "stderr": subprocess.STDOUT}
            elif several:
                streams = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE}
            try:
                child = subprocess.Popen(list(spec.argv), env=env, preexec_fn=preexec, **streams)
            except FileNotFoundError as exc:
                forward(signal.SIGTERM, None)
                for started in children:
                    started.wait()
                raise FileNotFoundError(f"cannot start {spec.argv[0]!r}: {exc.strerror}") from None
            children.append(child)
            if streams.get("stdout") is subprocess.PIPE:
                prefix = f"[instance {spec.index}] ".encode()
                for pipe, out in ((child.stdout, sys.stdout), (child.stderr, sys.stderr)):
                    relay = threading.Thread(target=_relay, args=(pipe, out, prefix, lock), daemon=True)
                    relay.start()
                    relays.append(relay)
        codes = [child.wait() for child in children]
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for relay in relays:
            relay.join(timeout=5)  # a grandchild may hold the pipe open: do not wait for it forever
        for fh in files:
            fh.close()
    for code in codes:
        if code != 0:
            return 128 + (-code) if code < 0 else code
    return 0


def find_numactl() -> str | None:
    return shutil.which("numactl")

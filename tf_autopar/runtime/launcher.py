"""`tf-autopar run`: start a program (or N copies) with the plan applied from outside.

For servers whose code cannot change. Decisions (pure: ``launch_specs``) are separated from
process handling (``run``): each instance gets os.environ + the plan's variables for its
slice of CPUs (a variable the user set is never overridden; OpenMP variables only appear
for OpenMP builds, as the planner decides), TF_AUTOPAR_INSTANCE / TF_AUTOPAR_INSTANCES, and
its own CPUs: ``numactl --physcpubind --membind`` when numactl exists and the host has
several NUMA nodes, else ``os.sched_setaffinity`` in the child before exec. Signals
SIGINT/SIGTERM/SIGHUP are forwarded to every child; the exit code is the first non-zero child
status (128+signal for a child killed by a signal), 0 when all succeed.
"""
from __future__ import annotations

import dataclasses
import os
import shutil
import signal
import subprocess
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

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

    def to_dict(self) -> dict[str, Any]:
        return {"instances": [i.to_dict() for i in self.instances], "plan": self.plan, "explain": self.explain}


def restrict_to_cores(topology: Any, cores: Sequence[int]) -> Any:
    """The topology as seen by a process bound to ``cores`` (--cores): every CPU must be usable."""
    from tf_autopar.coordination.slices import restrict

    missing = sorted(set(cores) - set(topology.affinity))
    if missing:
        raise ValueError(f"--cores names CPUs this process may not use: {missing} (allowed: {list(topology.affinity)})")
    return restrict(topology, cores)


def launch_specs(
    topology: Any,
    command: Sequence[str],
    *,
    mode: str = "latency",
    instances: int | None = None,
    environ: Mapping[str, str],
    numactl: str | None = None,
    profile: Any = None,
    tuned: Mapping[str, Any] | None = None,
    calibration: Mapping[str, Any] | None = None,
) -> LaunchPlan:
    """Decide each instance's CPUs, variables and command line (no side effects).

    ``profile``: the model's GraphProfile (``--model``), else the host-only plan; ``tuned``:
    its setting measured by ``tf-autopar tune`` (one instance only); ``calibration``: this
    host's measured small-op threshold. The variables
    set are named in LAUNCHER_VARS so that an enable() inside the command re-plans them for the
    model it loads instead of keeping them as the user's own."""
    from tf_autopar.planning import plan as make_plan

    if not command:
        raise ValueError("no command given: use `tf-autopar run [options] -- COMMAND ...`")
    n = instances or 1
    if mode == "throughput":
        p = make_plan(topology, profile, "throughput", env=environ, streams=n if instances else None,
                      calibration=calibration)
        n = p.instances
        slices = [tuple(c) for c in p.cpus] if p.cpus else [tuple(topology.affinity)]
        plans = [p] * n  # the plan's per-stream numbers are each instance's
    elif n == 1:
        p = make_plan(topology, profile, mode, env=environ, tuned=tuned, calibration=calibration)
        slices, plans = [tuple(p.cpus[0]) if p.cpus else tuple(topology.affinity)], [p]
    else:
        # the same slices as cooperating enable() workers get: whole cores, inside NUMA nodes
        from tf_autopar.coordination.slices import restrict, split

        parts = split(topology, n)
        slices = [s.cpus for s in parts]
        plans = [make_plan(restrict(topology, s.cpus, s.cores), profile, mode, env=environ, calibration=calibration)
                 for s in parts]
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
            argv = (numactl, f"--physcpubind={','.join(map(str, cpus))}", f"--membind={','.join(map(str, nodes))}", *command)
            binding = "numactl"
        else:
            binding = "sched_setaffinity"
        specs.append(InstanceSpec(i, tuple(cpus), env_set, kept, argv, binding, ip.inter_op, ip.intra_op))
    return LaunchPlan(tuple(specs), p.to_dict(), p.explain())


def _affinity_setter(cpus: tuple[int, ...]) -> Any:
    def bind() -> None:
        os.sched_setaffinity(0, cpus)

    return bind


def run(launch: LaunchPlan, environ: Mapping[str, str] | None = None) -> int:
    """Start every instance, forward signals, wait; the exit code as described above."""
    base = dict(os.environ if environ is None else environ)
    children: list[subprocess.Popen] = []
    previous = {}

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
            preexec = _affinity_setter(spec.cpus) if spec.binding == "sched_setaffinity" else None
            try:
                children.append(subprocess.Popen(list(spec.argv), env=env, preexec_fn=preexec))
            except FileNotFoundError as exc:
                forward(signal.SIGTERM, None)
                for child in children:
                    child.wait()
                raise FileNotFoundError(f"cannot start {spec.argv[0]!r}: {exc.strerror}") from None
        codes = [child.wait() for child in children]
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    for code in codes:
        if code != 0:
            return 128 + (-code) if code < 0 else code
    return 0


def find_numactl() -> str | None:
    return shutil.which("numactl")

"""The thread plan: numbers to apply, and the reasons behind each.

Methods that render the plan (explain, env, JSON, TF Serving flags, Python snippet)
live here; computing it is planner.py's job.

Instances: a plan with ``instances > 1`` (throughput mode) describes that many streams,
each with ``inter_op`` x ``intra_op`` threads bound to ``cpus[i]``; run them as separate
processes (the env / flags / snippet are per instance), or as separate sessions in one
process (``config_proto_fields`` then asks for per-session pools).
"""

from __future__ import annotations

import dataclasses
import json
import shlex
from dataclasses import dataclass, field
from typing import Any, Mapping

import tf_autopar.planning.variables as V
from tf_autopar.planning.user_settings import KNOBS
from tf_autopar.topology.cpulist import format_cpulist

FORMATS = ("env", "json", "tfserving", "python", "text")

_ENV_OF = KNOBS  # plan field -> environment variable

_EXPLAIN_ORDER = ("instances", "inter_op", "intra_op", *list(_ENV_OF)[2:], "tf_data_threads", "cpus")


@dataclass(frozen=True)
class Setting:
    """One value of the plan and where it came from."""

    value: Any
    source: str  # "planned", "user" (kept from the user's environment/config), "baseline"
    reason: str = ""


@dataclass(frozen=True)
class ThreadPlan:
    name: str  # "tf_autopar", "tf-default", "tf-recommended", "intel-recommended"
    mode: str  # "latency", "throughput", "training"
    inter_op: int  # per instance; 0 means "let TensorFlow pick"
    intra_op: int  # per instance; 0 means "let TensorFlow pick"
    omp_threads: int | None = None  # OMP_NUM_THREADS/MKL_NUM_THREADS; None when the runtime is not OpenMP
    kmp_blocktime: int | None = None
    kmp_affinity: str | None = None
    instances: int = 1  # processes or streams, each with inter_op x intra_op
    cpus: tuple[tuple[int, ...], ...] = ()  # logical CPUs to bind each instance to; () = no binding
    tf_data_threads: int | None = None  # tf.data private pool size; None = TF default
    settings: dict[str, Setting] = field(default_factory=dict)  # per knob: value, source, reason
    user_settings: dict[str, str] = field(default_factory=dict)  # explicit variables found and kept
    facts: tuple[str, ...] = ()  # the topology/profile facts the plan used, for explain()
    # Optional additions (defaults keep older constructors valid):
    mkl_threads: int | None = None  # MKL_NUM_THREADS when it differs from omp_threads; None = same
    kmp_hw_subset: str | None = None  # only ever the user's value
    override_global_threadpool: bool | None = None  # TF_OVERRIDE_GLOBAL_THREADPOOL; only the user's
    runtime: str = "unknown"  # threading runtime planned for: "eigen" or "openmp"
    usable_cpus: int = 0  # CPUs the plan keeps busy in total (all instances); 0 = not computed
    plugin_env: dict[str, str] = field(default_factory=dict)  # a plugin's planned variables (zentf's)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    # ---------------------------------------------------------------- serialisation

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "ThreadPlan":
        """Rebuild a plan from ``to_dict()`` / parsed ``to_json()`` output."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise ValueError(f"unknown ThreadPlan field(s): {', '.join(unknown)}")
        missing = [n for n in ("name", "mode", "inter_op", "intra_op") if n not in d]
        if missing:
            raise ValueError(f"ThreadPlan data lacks required field(s): {', '.join(missing)}")
        data = dict(d)
        data["cpus"] = tuple(tuple(int(c) for c in group) for group in data.get("cpus", ()))
        data["facts"] = tuple(data.get("facts", ()))
        data["settings"] = {
            k: v if isinstance(v, Setting) else Setting(**v) for k, v in dict(data.get("settings", {})).items()
        }
        data["user_settings"] = dict(data.get("user_settings", {}))
        data["plugin_env"] = dict(data.get("plugin_env", {}))
        return cls(**data)

    @classmethod
    def from_json(cls, text: str) -> "ThreadPlan":
        return cls.from_dict(json.loads(text))

    # ---------------------------------------------------------------- applying

    def to_env(self) -> dict[str, str]:
        """Environment variables that apply this plan (per instance), set before TF starts.

        The user's own variables are included verbatim, so applying a plan to the
        environment it was planned from changes nothing the user set.
        """
        env: dict[str, str] = {}
        if self.inter_op > 0:
            env[V.INTEROP] = str(self.inter_op)
        if self.intra_op > 0:
            env[V.INTRAOP] = str(self.intra_op)
        if self.omp_threads is not None:
            env[V.OMP_THREADS] = str(self.omp_threads)
            mkl = self.mkl_threads if self.mkl_threads is not None else self.omp_threads
            env[V.MKL_THREADS] = str(mkl)
            if self.kmp_blocktime is not None:
                env[V.KMP_BLOCKTIME] = str(self.kmp_blocktime)
            if self.kmp_affinity is not None:
                env[V.KMP_AFFINITY] = self.kmp_affinity
            if self.kmp_hw_subset is not None:
                env[V.KMP_HW_SUBSET] = self.kmp_hw_subset
        if self.override_global_threadpool is not None:
            env[V.OVERRIDE_GLOBAL_THREADPOOL] = "1" if self.override_global_threadpool else "0"
        env.update(self.plugin_env)
        env.update(self.user_settings)
        return env

    def config_proto_fields(self) -> dict[str, Any]:
        """``tf.compat.v1.ConfigProto`` fields for one instance (one session).

        Several instances in one process need one inter-op pool each, hence
        ``use_per_session_threads``; their intra-op pools are only per session when
        TF_OVERRIDE_GLOBAL_THREADPOOL=1 is set before TensorFlow starts.
        """
        return {
            "inter_op_parallelism_threads": self.inter_op,
            "intra_op_parallelism_threads": self.intra_op,
            "use_per_session_threads": self.instances > 1,
        }

    def tfserving_flags(self, batching_file: str = "batching_parameters.txt") -> list[str]:
        """Flags for ONE TensorFlow Serving process serving all of this plan's instances.

        Each of the ``instances`` concurrent batches needs its own inter-op threads, so the
        server's inter-op pool is instances x inter_op. With the Eigen runtime the intra-op
        pool is shared by every op, so it gets the cores of all instances; with OpenMP it is
        TensorFlow's own pool for the non-oneDNN ops (the plan's 1), and the OpenMP teams are
        sized by OMP_NUM_THREADS in the server's environment (``to_env()``). Throughput plans
        add batching (see batching_parameters()).
        """
        inter = self.inter_op * self.instances
        intra = self.intra_op if self.runtime == "openmp" else self.intra_op * self.instances
        flags = [
            f"--tensorflow_intra_op_parallelism={intra}",
            f"--tensorflow_inter_op_parallelism={inter}",
        ]
        if self.mode == "throughput":
            flags += ["--enable_batching", f"--batching_parameters_file={batching_file}"]
        return flags

    def batching_parameters(self, max_batch_size: int = 32, batch_timeout_micros: int = 1000) -> str:
        """Contents of a TF Serving batching parameters file (text protobuf) for this plan.

        Sizing rule: num_batch_threads = instances, so at most one batch per planned
        stream runs at a time and the streams never oversubscribe the cores;
        max_enqueued_batches = 2 x instances, so a burst waits at most about two batch
        times before being rejected instead of queueing without bound;
        max_batch_size and batch_timeout_micros are starting points to tune
        (TF Serving's guide: a small timeout on CPUs, then 1-10 ms).
        """
        if max_batch_size < 1 or batch_timeout_micros < 0:
            raise ValueError("max_batch_size must be >= 1 and batch_timeout_micros >= 0")
        return (
            f"max_batch_size {{ value: {max_batch_size} }}\n"
            f"batch_timeout_micros {{ value: {batch_timeout_micros} }}\n"
            f"num_batch_threads {{ value: {self.instances} }}\n"
            f"max_enqueued_batches {{ value: {2 * self.instances} }}\n"
        )

    def python_snippet(self) -> str:
        """Python to paste at the top of a program, before anything imports TensorFlow."""
        lines = [f"# {self.summary(cpu_lists=None)}", "# run before TensorFlow starts.", "import os", ""]
        for key, value in self.to_env().items():
            lines.append(f"os.environ.setdefault({key!r}, {value!r})")
        if self.instances == 1 and self.cpus:
            lines.append(f"os.sched_setaffinity(0, {sorted(self.cpus[0])!r})")
        elif self.instances > 1:
            lines.append(f"# {self.instances} instances: start one process per instance, bound to its CPUs:")
            for i, group in enumerate(self.cpus):
                lines.append(f"#   instance {i}: os.sched_setaffinity(0, {sorted(group)!r})")
        lines += ["", "import tensorflow as tf", ""]
        # Read back from the environment so a variable set before this snippet still wins.
        if self.inter_op > 0:
            lines.append(
                "tf.config.threading.set_inter_op_parallelism_threads(int(os.environ['TF_NUM_INTEROP_THREADS']))"
            )
        if self.intra_op > 0:
            lines.append(
                "tf.config.threading.set_intra_op_parallelism_threads(int(os.environ['TF_NUM_INTRAOP_THREADS']))"
            )
        if self.tf_data_threads is not None:
            lines += [
                "",
                "# For each tf.data pipeline:",
                "# options = tf.data.Options()",
                f"# options.threading.private_threadpool_size = {self.tf_data_threads}",
                "# dataset = dataset.with_options(options)",
            ]
        return "\n".join(lines) + "\n"

    # ---------------------------------------------------------------- explaining

    def explain(self) -> str:
        """A few lines: the plan, the facts it rests on, why each number, what was kept."""
        lines = [self.summary()]
        if self.facts:
            lines.append("facts:")
            lines += [f"  - {fact}" for fact in self.facts]
        order = {knob: i for i, knob in enumerate(_EXPLAIN_ORDER)}
        ordered = sorted(self.settings.items(), key=lambda item: order.get(item[0], len(order)))
        reasons = [(k, s) for k, s in ordered if s.reason]
        if reasons:
            lines.append("why:")
            lines += [f"  - {k} = {_shown(s.value)} [{s.source}]: {s.reason}" for k, s in reasons]
        if self.user_settings:
            kept = ", ".join(f"{k}={v}" for k, v in self.user_settings.items())
            lines.append(f"kept from your environment (never overridden): {kept}")
        return "\n".join(lines)

    def summary(self, cpu_lists: int | None = 4) -> str:
        """One line every format starts from: instances, threads per instance, CPU lists (the
        first ``cpu_lists`` of them; None = all)."""
        threads = f"inter_op={self.inter_op} intra_op={self.intra_op}"
        if self.omp_threads is not None:
            threads += f" OMP/MKL={self.omp_threads}"
            if self.mkl_threads is not None and self.mkl_threads != self.omp_threads:
                threads += f"/{self.mkl_threads}"
        head = f"{self.name} plan, {self.mode} mode: "
        head += f"{self.instances} instances, each {threads}" if self.instances > 1 else threads
        if self.cpus:
            groups = self.cpus if cpu_lists is None else self.cpus[:cpu_lists]
            shown = " | ".join(format_cpulist(group) for group in groups)
            head += ", bound to CPUs " + shown + (" | ..." if len(groups) < len(self.cpus) else "")
        return head

    def env_lines(self) -> dict[str, str]:
        """``to_env()`` plus what one process's environment cannot hold by itself: the instance
        count (TF_AUTOPAR_INSTANCES, which makes each of that many processes calling enable()
        take its own CPUs) and the CPU lists (TF_AUTOPAR_CPUS, one list per instance separated
        by ':', for ``taskset -c``). Every value is safe unquoted, so ``export $(...)`` works."""
        env = self.to_env()
        if self.instances > 1:
            env["TF_AUTOPAR_INSTANCES"] = str(self.instances)
        if self.cpus:
            env["TF_AUTOPAR_CPUS"] = ":".join(format_cpulist(group) for group in self.cpus)
        return env

    def tfserving_text(
        self, batching_file: str = "batching_parameters.txt", max_batch_size: int = 32, batching_written: bool = False
    ) -> str:
        """The server's flags, led by the plan they come from (so the totals can be checked
        against the per-instance numbers), and the batching file's content when not written."""
        lines = [f"# {self.summary(cpu_lists=None)}"]
        server_env = {k: v for k, v in self.to_env().items() if not k.startswith("TF_NUM_")}
        if server_env:
            lines.append(
                "# the server's environment: " + " ".join(f"{k}={shlex.quote(v)}" for k, v in server_env.items())
            )
        if self.instances > 1:
            intra = (
                f"intra-op {self.intra_op} (one op's OpenMP team)"
                if self.runtime == "openmp"
                else f"intra-op pool shared by every stream: {self.instances} x {self.intra_op} = "
                f"{self.intra_op * self.instances}"
            )
            lines.append(
                f"# one tensorflow_model_server serves all {self.instances} instances: inter-op "
                f"{self.instances} x {self.inter_op} = {self.inter_op * self.instances}, {intra}, "
                f"num_batch_threads {self.instances}"
            )
        if len(self.cpus) == 1 or self.instances > 1 and self.cpus:
            every = sorted({c for group in self.cpus for c in group})
            lines.append(
                f"# bind the server to its CPUs: taskset -c {format_cpulist(every)} tensorflow_model_server ..."
            )
        text = "\n".join(lines) + "\n" + " \\\n".join(self.tfserving_flags(batching_file)) + "\n"
        if self.mode == "throughput" and not batching_written:
            text += f"# {batching_file} (write it, or pass --batching-file PATH to have it written):\n"
            text += "".join(f"#   {line}\n" for line in self.batching_parameters(max_batch_size).splitlines())
        return text

    def format(self, fmt: str = "text") -> str:
        """Render as env lines, JSON, TF Serving flags, a Python snippet or explain() text."""
        if fmt == "env":
            return "".join(f"{k}={shlex.quote(v)}\n" for k, v in self.env_lines().items())
        if fmt == "json":
            return self.to_json() + "\n"
        if fmt == "tfserving":
            return self.tfserving_text()
        if fmt == "python":
            return self.python_snippet()
        if fmt == "text":
            return self.explain() + "\n"
        raise ValueError(f"unknown format {fmt!r}; choose from {', '.join(FORMATS)}")


def _shown(value: Any) -> str:
    """A setting's value as a person reads it: CPU lists joined by ' | ', not a Python list."""
    if isinstance(value, (list, tuple)):
        return " | ".join(map(str, value)) or "none"
    return str(value)


def plural(n: int, noun: str, many: str | None = None) -> str:
    """'1 CPU', '2 CPUs': counts read as English in every message."""
    return f"{n} {noun if n == 1 else many or noun + 's'}"

"""What enable() applied to each Session and each traced function (see state.py).

A module of its own so that enable() does not define these dataclasses until a session or a
function actually appears.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SessionRecord:
    session: str  # "Session#3"
    graph_nodes: int
    fingerprint: str
    avg_width: int
    heavy_ops: int
    inter_op: int  # in the ConfigProto the session was created with
    intra_op: int
    per_session_threads: bool
    intra_per_session: bool  # the intra-op value really applies to this session alone
    user_fields: tuple[str, ...] = ()  # ConfigProto fields the user set and we kept
    note: str = ""
    analysis_ms: float = 0.0


@dataclass(frozen=True)
class FunctionRecord:
    name: str
    fingerprint: str
    heavy_ops: int
    avg_width: int
    planned_inter: int
    planned_intra: int
    matches_process: bool
    traces: int = 1
    cached: bool = False  # written to the plan cache for the next start
    analysis_ms: float = 0.0


#: Names Keras gives the tf.functions behind predict(), fit() and evaluate(): internal to Keras.
KERAS_STEPS = ("one_step_on_", "multi_step_on_", "train_function", "test_function", "predict_function")


def user_function_name(name: str) -> str:
    """A traced function as its user knows it: their own tf.function by name, Keras's internal
    step functions as the model call they come from."""
    if name.startswith(KERAS_STEPS):
        return "a Keras model's predict/fit/evaluate step"
    return f"tf.function {name!r}"


@dataclass(frozen=True)
class BucketRecord:
    """One batch bucket of a routed function (fastpath/): which path serves it and why."""

    bucket: int  # calls with a batch up to this power of two, above the previous one
    batch: int  # the batch its plan was made for (the largest seen in the bucket)
    calls: int
    path: str  # "frozen session", "original", "queued", "building", "checking" (on live calls), "stale"
    served: int = 0  # of the calls, those the frozen session answered
    inter_op: int = 0
    intra_op: int = 0
    streams: int = 0
    speedup: float = 0.0  # the frozen session against the original path, from paired measurements
    spread: float = 0.0  # max/min of their ratios
    evidence: str = ""  # what the speedup was measured on: "7 paired rounds", "24 paired live calls"
    build_s: float = 0.0  # from the bucket's first call to the switch
    reason: str = ""  # why it stays on the original path
    plan_source: str = ""  # where the numbers came from: "planned by the rule", "tuned live on <date>, ..."
    tuning: str = ""  # live tuning: what is being tried, or what won and by how much
    tuned: bool = False  # live tuning (or `tune`) has tried every neighbour: the setting is final
    engine: str = ""  # what runs the frozen graph: "tensorflow" (sessions), "openvino", "onnxruntime", ...
    engine_detail: str = ""  # its configuration in a few words ("f32, 2 threads, 1 stream")


@dataclass(frozen=True)
class ServedRecord:
    """A loaded SavedModel's function served by the fast path."""

    model: str
    function: str  # "signatures['serving_default']", "serve", "__call__", "predict"
    calls: int  # the calls the fast path took (served, checked or answered the original way)
    batches: str  # "batch 1 in 97% of 4,212 calls"
    buckets: tuple[BucketRecord, ...] = ()
    stopped: str = ""  # why the whole function stays on the original path
    convention: str = ""  # how it is called: "signature", "positional", "keras call", "keras predict", ...
    served: int = 0  # of all its calls, those a frozen session answered
    declined: tuple[tuple[str, int], ...] = ()  # calls not routed, by reason (most first): the original answered


@dataclass(frozen=True)
class MemoryRecord:
    """The container's memory limit as the fast path's builds see it (status().memory)."""

    limit: str  # "1.5 GB"
    path: str  # the file that set it
    cgroup_version: int
    working_set: str  # the group's usage less its inactive page cache, now
    room: str  # the limit less the working set, now
    margin: str  # what a build leaves free under the limit
    paused: str = ""  # why builds are paused and candidates closed now ("" when they are not)
    builds: int = 0  # builds of this process that held the group's build lock


@dataclass(frozen=True)
class LimitsRecord:
    """The last change of the CPU limits seen while running (status().limits)."""

    changes: int  # changes seen since the watch started
    what: str  # "the CPU quota went from 2 CPUs to 1 CPU"
    at: str  # local time of the check that saw it ("14:03:07")
    quota: str  # the quota now, in words ("1 CPU", "no quota")
    budget: int  # whole CPUs plans are made for now (this process's share of them)
    process_pools: str  # what TensorFlow's process pools stay at ("2 inter-op x 2 intra-op threads"; "" unknown)

"""The planning rule: topology + model width + mode -> ThreadPlan. Pure: no I/O, no TF.

The rule (Wang et al., "Exploiting Parallelism Opportunities with Deep Learning
Frameworks", TACO 2021, adapted to how TensorFlow 2 really threads):

1. Budget. Usable CPUs = the topology's physical cores, one logical CPU each, limited to
   ``topology.cpu_budget`` (affinity mask and cgroup quota). Hyperthreads are left out
   unless ``use_hyperthreads``: they help little for compute-bound kernels (the paper),
   and TensorFlow's default counts them as cores. A budget smaller than the cores takes
   whole cores, filling one NUMA node (then one socket) before the next, and binds to them.
2. Pools. p = the model's average width (heavy ops / heavy depth), bounded by its maximum
   width and by the usable CPUs, at least 1. No model given: p = the usable CPUs on Eigen
   builds (TensorFlow's default within the budget: never serialises a wide graph), 1 on
   OpenMP builds; there, a model with embedding look-ups gets p = the width without them (the
   OpenMP teams that run at once: look-ups run on TF's threads, and an inter-op thread for
   them competes with a team that holds the cores). A model that
   runs tf.data gets p >= 2 (inter_op=1 can deadlock some iterator restores).
3. Intra-op. OpenMP builds run oneDNN's kernels on OpenMP teams, one per inter-op thread,
   so the paper's division applies to the teams that run at once: OMP = MKL threads =
   usable // min(p, the width without embedding look-ups), KMP_BLOCKTIME=1. TensorFlow's own
   intra-op pool is a second pool there, running the other ops: it gets 1 thread, since its
   threads competed with the teams (measured on intel-tensorflow 2.14; docs/openmp.md),
   unless embedding look-ups, which run there, take LOOKUP_BOUND_SHARE of the step or more
   (estimated from the elements they read and the other ops' multiply-adds): then it gets a
   team's threads too, so that each look-up is split rather than run on one thread. The
   small-op rule below does not apply to the
   teams (splitting small ops over a team never lost there), nor the While-loop floor (a
   second pool brings a second team). Eigen builds (stock pip TF, and "unknown") share one
   intra-op pool between all inter-op threads: intra = usable, since dividing would idle
   cores whenever one op runs alone; no OpenMP variables.
   Small ops: when the model's typical heavy op (the work-weighted median, graph/work.py,
   known only when every heavy op's shapes are static) does fewer than SMALL_OP_WORK
   multiply-adds, intra = 1: waking and joining a second thread costs more than
   such an op gains. Inter-op stays p, so a wide model still runs independent ops on the
   other CPUs (Speech's two RNN directions: 2x1). Tiny ops (under TINY_OP_WORK) get p = 1
   as well: handing an op to another inter-op thread costs about as long as running it.
   Models with While loops (RNNs) get p >= 2 unless their ops are tiny: TensorFlow overlaps
   a loop's iterations only with a second inter-op thread.
   Training graphs with a typical op under TRAIN_SMALL_OP_WORK get p >= 2 where the graph
   is 2-wide (a backward pass's input and weight gradients): 2x2 here; under SMALL_OP_WORK
   the CPUs are divided among the p inter-op threads instead (2x1 here, 2x12 on 24 cores).
4. Modes. latency: one request at a time; the plan stays on min(p, nodes) NUMA nodes
   (sockets first), since a node or socket only pays off when it can own a branch;
   restricted plans bind to their CPUs. training: every socket in the budget (large
   batches amortise cross-socket traffic); tf.data gets a private pool of the usable CPUs.
   throughput: streams (default usable // c, c = 1 up to 8 CPUs, 2 up to 32, else 4),
   each with usable // streams CPUs inside one NUMA node where possible;
   per stream inter = min(p, stream CPUs), intra as in 3 with the stream's CPUs.
5. User settings (TF_NUM_*, OMP_NUM_THREADS, MKL_NUM_THREADS, KMP_*,
   TF_OVERRIDE_GLOBAL_THREADPOOL) found in ``env`` are kept, never overridden; a kept
   inter-op value feeds the OpenMP division.
6. AMD's zentf plugin, when on: an OpenMP build (3) plus AMD's variables (planning/zentf.py).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Mapping, NamedTuple

import tf_autopar.planning.zentf as Z
from tf_autopar.planning.memory_budget import limit_fact
from tf_autopar.planning.modes import MODES
from tf_autopar.planning.plan import Setting, ThreadPlan, plural
from tf_autopar.planning.user_settings import KNOBS, UserSettings, read_user_settings
from tf_autopar.topology.cpulist import format_cpulist
from tf_autopar.topology.model import EFFICIENCY, Core, Topology, cut_nested, ordered_cores

if TYPE_CHECKING:  # the planner stays pure: no graph package (and its loaders) at import
    from tf_autopar.graph.profile import GraphProfile

log = logging.getLogger("tf_autopar.planning")

# Below this typical heavy-op size (multiply-adds), one intra-op thread beats all of them.
# Fitted on the 2-core AMD EPYC host of docs/measurements.md's validation, batch 1, no quota: DeepQ (2.7 M) ran
# 1.9x faster with one thread, Speech (1.0 M, two RNN directions) 1.6x faster at 2x1 than 2x2,
# Wide&Deep (0.9 M) 1.1x; SqueezeNet (27 M), DenseNet (48 M) and every bigger model ran
# 1.1-1.8x faster with two. 8 M is the geometric middle of the 2.7 M / 27 M gap.
SMALL_OP_WORK = 8_000_000
# Below this typical size, one inter-op thread too: an op runs in about the time a hand-off to
# another thread takes (~10-20 us here). MemNet training (32 K) ran 1.4x faster at 1x1 than at
# 2x1, Speech at batch 1 (1.0 M, long RNN branches) 1.6x faster at 2x1 than at 1x1.
TINY_OP_WORK = 200_000
# Training graphs: below this typical size, at least 2 inter-op threads where the graph is
# 2-wide. A backward pass computes each layer's input and weight gradients independently, and
# ops this size do not fill the cores alone. Fitted on docs/measurements.md's training rows (paper size,
# 2 cores): at 17-221 M (NCF, DeepQ, Wide&Deep, AutoEnc, Speech) 2x1 or 2x2 beat 1x2 by
# 1.1-1.3x; at 430 M and more (SqueezeNet, DenseNet, the conv nets) a second intra-op thread
# gained 1.6-1.9x and 1 inter-op thread did as well. 300 M is the geometric middle of the gap.
# Intra-op stays all CPUs from SMALL_OP_WORK up. 2x1 against 2x2 flipped between runs on
# DeepQ, and 2x2 lost 6-17% on AutoEnc and Speech, but 2x1 lost 18-23% on AlexNet's tiny
# training graph (54 M) in both quick runs, and 2x2 is TensorFlow's default here.
TRAIN_SMALL_OP_WORK = 300_000_000
# OpenMP builds: one element read by an embedding look-up costs about this many multiply-adds
# on one thread (random rows of a 100,000 x 32 table: 1.30 ns per element against 0.0125 ns per
# multiply-add of a oneDNN matmul; 89 and 103 in two runs). Measured apart from any model on a
# 2-core Intel Xeon with intel-tensorflow 2.14 (benchmarks/lookup_cost.py); another processor's
# ratio will differ.
LOOKUP_ELEMENT_MACS = 100
# OpenMP builds: look-ups at or above this share of the step get TensorFlow's own pool (they run
# there, not on the teams). A second thread there cost the models with small look-ups at most 5%
# (docs/openmp.md); halving a share s of the step saves s / 2, so it pays from about 10%.
LOOKUP_BOUND_SHARE = 0.10
KMP_BLOCKTIME = 1
KMP_AFFINITY = "granularity=fine,compact,1,0"
# Fractional CPU quotas (1.5, 2.5 CPUs): whether the pools get one thread more than the whole CPUs
# the quota pays for. False (today's rule): floor(quota), since a pool with more runnable threads
# than the quota is throttled for the rest of each CFS period (1x1 against TF's default under a
# 1-CPU quota: 85% of periods throttled, 6-8% slower). Whether the remainder (the .5) pays for a
# thread instead is measured by benchmarks/bench_fractional_quota.py (1x1, 1x2, 2x1, 2x2 under a
# 1.5-CPU quota, throttled periods against work done); not yet run on a quiet machine, so the rule
# stays as it was until that measurement decides.
FRACTIONAL_QUOTA_EXTRA_THREAD = False


class Unit(NamedTuple):
    """One logical CPU the plan may keep busy, with where it sits."""

    cpu: int
    socket: int
    node: int
    core: tuple[int, int]  # (socket, core_id)
    domain: int = -1  # last-level cache domain; -1 = unknown
    slow: bool = False  # an efficiency core of a hybrid host


def _place(u: Unit) -> tuple[bool, int, int, int]:
    """A unit's placement groups, coarsest first (as topology.model.place_of for cores)."""
    return (u.slow, u.socket, u.node, u.domain)


# ------------------------------------------------------------------------------ inputs


def _check_inputs(
    mode: str, profile: GraphProfile | None, width: int | None, streams: int | None
) -> GraphProfile | None:
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; choose from {', '.join(MODES)}")
    if width is not None:
        if profile is not None:
            raise ValueError("give a profile or a width, not both")
        if isinstance(width, bool) or not isinstance(width, int) or width < 1:
            raise ValueError(f"model width must be a positive integer, got {width!r}")
        from tf_autopar.graph.profile import GraphProfile

        profile = GraphProfile.from_width(width)
    if profile is not None:
        for attr in ("avg_width", "max_width"):
            if not isinstance(getattr(profile, attr, None), int):
                raise ValueError(f"profile has no integer {attr}: {profile!r}")
    if streams is not None:
        if mode != "throughput":
            raise ValueError(f"streams applies to throughput mode only, not {mode!r}")
        if isinstance(streams, bool) or not isinstance(streams, int) or streams < 1:
            raise ValueError(f"streams must be a positive integer, got {streams!r}")
    return profile


def _runtime(topology: Topology, env: Mapping[str, str] | None = None) -> tuple[str, list[str]]:
    rt = topology.threading_runtime
    zentf_on, zentf_facts = Z.runtime_facts(getattr(topology, "zentf", None), env)
    if zentf_on:
        return "openmp", zentf_facts
    if rt == "openmp":
        return "openmp", ["threading runtime: OpenMP (each inter-op thread owns an OpenMP team)", *zentf_facts]
    why = "Eigen (one intra-op pool shared by all inter-op threads)" if rt == "eigen" else f"{rt!r}: planned as Eigen"
    return "eigen", [f"threading runtime: {why}", *zentf_facts]


# ------------------------------------------------------------------------------ budget


def fractional_quota_budget(topology: Topology) -> tuple[int, str]:
    """The CPUs the pools may keep busy under the topology's quota, and what a fractional quota did.

    ``topology.cpu_budget`` is floor(quota) (and the affinity, and a worker's share). Under a
    fractional quota (1.5, 2.5 CPUs) FRACTIONAL_QUOTA_EXTRA_THREAD would add one thread for the
    remainder, where the quota is what limits the budget and the cores have room; whether that
    is better or worse is what benchmarks/bench_fractional_quota.py measures. Today: floor.
    """
    budget = max(1, int(topology.cpu_budget))
    q = topology.quota
    if q is None or q.period_us <= 0 or q.quota_us % q.period_us == 0 or budget != max(1, q.quota_us // q.period_us):
        return budget, ""
    if not FRACTIONAL_QUOTA_EXTRA_THREAD:
        return budget, (
            f"the quota's remainder ({q.cpus - budget:g} CPU) gets no thread of its own: rounded down "
            "(FRACTIONAL_QUOTA_EXTRA_THREAD; benchmarks/bench_fractional_quota.py measures the other way)"
        )
    if budget + 1 > len(topology.planning_cores()):
        return budget, ""
    return budget + 1, (
        f"fractional quota {q.cpus:g}: one thread more than the {budget} whole CPUs "
        "(FRACTIONAL_QUOTA_EXTRA_THREAD, measured by benchmarks/bench_fractional_quota.py)"
    )


def select_budget(topology: Topology, use_hyperthreads: bool) -> tuple[list[Unit], list[str]]:
    """The logical CPUs the plan may use, in fill order, and the facts that decided them."""
    cores = topology.planning_cores()
    budget, fractional = fractional_quota_budget(topology)
    facts = [_host_fact(topology, cores)]
    facts += [f"topology warning: {w}" for w in topology.warnings]
    facts += _structure_facts(topology, cores)
    if topology.quota is not None:
        facts.append(
            f"cgroup v{topology.quota.cgroup_version} quota {topology.quota.cpus:g} CPUs -> budget {budget}; "
            f"TensorFlow's default would run {len(topology.affinity)} threads per pool and be throttled"
        )
        if fractional:
            facts.append(fractional)
    elif budget < len(topology.affinity):
        facts.append(f"CPU budget {budget} of {plural(len(topology.affinity), 'CPU')} in the affinity mask")
    memory = getattr(topology, "memory", None)
    if memory is not None and memory.limit_bytes is not None:
        facts.append(limit_fact(memory.limit_bytes, memory.cgroup_version, memory.path))
    units: list[Unit] = []
    for core in ordered_cores(cores):
        per_core = core.cpus if use_hyperthreads else core.cpus[:1]
        for cpu in per_core:
            if len(units) < budget:
                units.append(
                    Unit(
                        cpu,
                        core.socket,
                        core.numa_node,
                        (core.socket, core.core_id),
                        -1 if core.cache_domain is None else core.cache_domain,
                        core.kind == EFFICIENCY,
                    )
                )
    smt = max(len(c.cpus) for c in cores)
    if use_hyperthreads:
        facts.append(f"usable: {plural(len(units), 'logical CPU')} (hyperthreads counted, as asked)")
    elif smt > 1:
        facts.append(
            f"usable: {len(units)} physical cores, one logical CPU each: hyperthreads help little "
            "for compute-bound kernels, though TensorFlow's default counts them"
        )
    else:
        facts.append(f"usable: {plural(len(units), 'core')}")
    if len(units) < len(cores) * (smt if use_hyperthreads else 1):
        facts.append(
            f"whole cores taken from as few NUMA nodes as possible: CPUs {format_cpulist([u.cpu for u in units])}"
        )
        domains = {u.domain for u in units if u.domain >= 0}
        if len(topology.cache_domains) > 1 and domains:
            facts.append(
                f"... and as few cache domains: {plural(len(domains), 'domain')} ({_domain_list(domains)})"
                + (", performance cores first" if topology.hybrid else "")
            )
        elif topology.hybrid:
            facts.append("... performance cores first")
    return units, facts


def _domain_list(domains: set[int]) -> str:
    return "L3 " + format_cpulist(domains) if len(domains) > 1 else f"L3 {min(domains)}"


def _structure_facts(topology: Topology, cores: tuple[Core, ...]) -> list[str]:
    """The cache domains and core types the plan's CPU sets respect (nothing on plain hosts)."""
    facts = []
    if len(topology.cache_domains) > 1:
        sizes = sorted({sum(1 for c in cores if c.cache_domain == d.id) for d in topology.cache_domains} - {0})
        size = f"{sizes[0]}" if len(sizes) == 1 else f"{sizes[0]}-{sizes[-1]}"
        levels = "/".join(f"L{lv}" for lv in sorted({d.level for d in topology.cache_domains}))
        facts.append(
            f"last-level cache: {len(topology.cache_domains)} {levels} domains of {size} cores; streams, "
            "instances and latency plans are cut inside one domain where they fit, across the fewest "
            "where they do not"
        )
    if topology.hybrid:
        perf = [c for c in cores if c.kind != EFFICIENCY]
        eff = [c for c in cores if c.kind == EFFICIENCY]
        facts.append(
            f"hybrid cores: {plural(len(perf), 'performance core')} (CPUs "
            f"{format_cpulist(x for c in perf for x in c.cpus)}), {plural(len(eff), 'efficiency core')} "
            f"(CPUs {format_cpulist(x for c in eff for x in c.cpus)}), from {topology.core_kinds_from}"
        )
    return facts


def performance_only(units: list[Unit]) -> tuple[list[Unit], str]:
    """A latency plan's units without the efficiency cores, when performance cores are in the budget.

    One request's ops are split into equal chunks (Eigen's shards, oneDNN's and OpenMP's static
    partitions): a chunk on an efficiency core finishes last and every other core waits for it
    (oneDNN#1844), so the slow cores lengthen the request they were meant to speed up.
    """
    fast = [u for u in units if not u.slow]
    if not fast or len(fast) == len(units):
        return units, ""
    return fast, (
        f"latency plan on the {plural(len(fast), 'performance core')}: CPUs "
        f"{format_cpulist(u.cpu for u in fast)}; the {plural(len(units) - len(fast), 'efficiency core')} "
        "left out: an op's equal chunks wait for the slowest core"
    )


def _host_fact(topology: Topology, cores: tuple[Core, ...]) -> str:
    sockets = len({c.socket for c in cores})
    nodes = len({(c.socket, c.numa_node) for c in cores})
    smt = max(len(c.cpus) for c in cores)
    return (
        f"affinity: {plural(len(topology.affinity), 'logical CPU')} on {plural(len(cores), 'physical core')} "
        f"({smt} per core), {plural(sockets, 'socket')}, {plural(nodes, 'NUMA node')}"
    )


def _groups(units: list[Unit]) -> list[list[Unit]]:
    """Units grouped by NUMA node, groups in fill order."""
    groups: dict[tuple[int, int], list[Unit]] = {}
    for u in units:
        groups.setdefault((u.socket, u.node), []).append(u)
    return list(groups.values())


def _binding(units: list[Unit], topology: Topology) -> tuple[tuple[int, ...], ...]:
    """Bind only when the plan leaves some core of the mask unused."""
    if len({u.core for u in units}) < len(topology.planning_cores()):
        return (tuple(sorted(u.cpu for u in units)),)
    return ()


# ------------------------------------------------------------------------------ pools


def model_pools(profile: GraphProfile | None, usable: int, runtime: str = "eigen") -> tuple[int, str]:
    """p from the model's width, bounded by its max width and the usable CPUs.

    No model known, or its op sizes unknown (the batch not given): on Eigen builds p = the
    usable CPUs, TensorFlow's own default sized to the budget, so that a wide graph keeps its
    branches parallel (1 pool made a wide SavedModel 1.5x slower than the default); OpenMP
    builds keep 1 pool without a model (every inter-op thread starts a whole OpenMP team) and
    the width with one."""
    unknown = profile is None or not getattr(profile, "sizes_known", True)
    if unknown and runtime != "openmp" and usable > 1:
        what = (
            "no model given"
            if profile is None
            else f"op sizes unknown (the batch is not given; model width {profile.avg_width})"
        )
        return usable, (
            f"{what}: {usable} inter-op threads, TensorFlow's default sized to the budget, "
            "so that a wide graph keeps its branches parallel (give a model or --width to plan them)"
        )
    if profile is None:
        return 1, "no model given: 1 pool (one op at a time; give --width or a model to use branches)"
    p = max(1, min(profile.avg_width, max(profile.max_width, 1), usable))
    source = getattr(profile, "source", "")
    if source == "given width":  # nothing was analysed: no heavy ops, depth or max width to report
        why = f"model width {profile.avg_width} (given, not analysed)"
    else:
        why = f"model width {profile.avg_width}"
        heavy, depth = getattr(profile, "heavy_ops", None), getattr(profile, "depth", None)
        if heavy is not None and depth:
            why += f" ({heavy} heavy ops / depth {depth})"
        why += f", max width {profile.max_width}" + (f" [{source}]" if source else "")
    if p < profile.avg_width:
        why += f", bounded to {p} by " + ("the max width" if p == profile.max_width else f"{usable} usable CPUs")
    return p, why


def onednn_width(profile: GraphProfile | None) -> int | None:
    """The width of the heavy ops that run on OpenMP teams: the model's width without its embedding
    look-ups, which run on TensorFlow's own threads (DLRM: 26 look-ups and 7 matrix multiplies in
    a chain; two teams of one thread ran it 1.3x slower than teams of two). None: no look-ups."""
    lookups = getattr(profile, "lookups", 0) if profile is not None else 0
    if not lookups:
        return None
    return max(1, (profile.heavy_ops - lookups) // max(1, profile.depth))


def lookup_share(profile: GraphProfile | None) -> float | None:
    """The estimated share of a step's one-thread time spent in embedding look-ups: the elements
    they read, each costing LOOKUP_ELEMENT_MACS multiply-adds, against the other heavy ops'
    multiply-adds. None when unknown (no look-ups, or a shape unknown)."""
    if profile is None or not getattr(profile, "lookups", 0):
        return None
    lookup, rest = getattr(profile, "lookup_work", None), getattr(profile, "contraction_work", None)
    if lookup is None or rest is None or lookup + rest <= 0:
        return None
    cost = lookup * LOOKUP_ELEMENT_MACS
    return cost / (cost + rest)


def _lookup_bound(profile: GraphProfile | None, runtime: str) -> float | None:
    """The look-ups' share of the step on OpenMP builds when it reaches LOOKUP_BOUND_SHARE, else None."""
    if runtime != "openmp":
        return None
    share = lookup_share(profile)
    return share if share is not None and share >= LOOKUP_BOUND_SHARE else None


def _tf_data_floor(p: int, uses_tf_data: bool) -> tuple[int, str]:
    if uses_tf_data and p < 2:
        return 2, "raised to 2 because the model runs tf.data: inter_op=1 can deadlock some iterator restores"
    return p, ""


def restrict_latency(units: list[Unit], p: int) -> tuple[list[Unit], str]:
    """Keep min(p, nodes) NUMA nodes; fill order keeps them on one socket first."""
    groups = _groups(units)
    if len(groups) <= 1:
        return units, ""
    sockets = len({u.socket for u in units})
    if len(groups) <= p:
        return units, f"width {p} >= {len(groups)} NUMA nodes: each node can own a branch, all kept"
    kept = [u for group in groups[:p] for u in group]
    kept_sockets = len({u.socket for u in kept})
    return kept, (
        f"latency plan kept on {p} of {len(groups)} NUMA nodes ({kept_sockets} of {sockets} sockets): "
        f"a node or socket pays off only when it can own a branch (width {p}); crossing costs memory traffic"
    )


def intra_threads(
    runtime: str,
    cpus: int,
    inter: int,
    op_work: int | None = None,
    training: bool = False,
    small_op_work: int = SMALL_OP_WORK,
    teams: int | None = None,
    lookup_bound: float | None = None,
) -> tuple[int, int | None, str]:
    """(intra_op, omp_threads, reason) for ``cpus`` CPUs shared by ``inter`` inter-op threads,
    for ops of typical size ``op_work`` multiply-adds (None: unknown).

    OpenMP builds: TF's pool 1, the teams the CPUs divided among the inter-op threads, whatever
    the op size. Eigen builds: small ops (under SMALL_OP_WORK) get one thread each in inference
    and tiny ops anywhere; in
    training they get the CPUs divided among the inter-op threads, since the gradient pairs
    keep every inter-op thread busy: 1 each at 2x1 on 2 cores, and no plan that idles most of
    a big host for an op size measured only on 2 cores.
    """
    if runtime == "openmp":
        teams = max(1, min(inter, teams or inter))
        n = max(1, cpus // teams)
        at_once = (
            f"{cpus} CPUs / {teams} = {n}"
            if teams == inter
            else f"at most {teams} of the {inter} inter-op threads run oneDNN kernels at once (the rest of the "
            f"width is embedding look-ups, on TensorFlow's threads): {cpus} CPUs / {teams} = {n}"
        )
        small = (
            f"; small ops too (typical {_mac(op_work)} multiply-adds): unlike TensorFlow's own pool, an OpenMP "
            "team did not lose on them"
            if op_work is not None and op_work < small_op_work and cpus > 1
            else ""
        )
        teams_why = (
            f"OpenMP runtime: oneDNN's kernels run on OpenMP teams, one per inter-op thread; {at_once} OpenMP "
            "thread(s) per team (the paper's rule)"
        )
        if lookup_bound is not None:
            return (
                n,
                n,
                (
                    f"{teams_why}{small}. The embedding look-ups take about {lookup_bound:.0%} of a step (elements read x "
                    f"{LOOKUP_ELEMENT_MACS} multiply-adds each, against the other ops' multiply-adds), at or above "
                    f"{LOOKUP_BOUND_SHARE:.0%}: they run on TensorFlow's own intra-op pool, which gets the team's "
                    f"{plural(n, 'thread')} too, so that each look-up is split instead of running on one thread "
                    "(docs/openmp.md)"
                ),
            )
        return (
            1,
            n,
            (
                f"{teams_why}{small}; TensorFlow's own intra-op pool runs only the other ops "
                "and gets 1 thread, since its threads competed with the teams for the cores (measured on "
                "intel-tensorflow 2.14, docs/openmp.md)"
            ),
        )
    if op_work is not None and op_work < small_op_work and cpus > 1:
        training = training and op_work >= TINY_OP_WORK  # tiny ops: one thread each in any mode
        n = max(1, cpus // inter) if training else 1
        return (
            n,
            None,
            (
                f"small ops: the typical heavy op does {_mac(op_work)} multiply-adds, under {_mac(small_op_work)}"
                + (
                    f" in training; the {cpus} CPUs are divided among the {inter} inter-op threads: {n} per op"
                    if training
                    else "; waking a second thread per op costs more than it gains, so one thread per op"
                    + (f" (the {inter} inter-op threads run independent ops on the other CPUs)" if inter > 1 else "")
                )
            ),
        )
    shared = "the inter-op thread" if inter == 1 else f"all {inter} inter-op threads"
    gets = "its CPU" if cpus == 1 else f"all {cpus} CPUs"
    return (
        cpus,
        None,
        (
            f"Eigen runtime: one intra-op pool shared by {shared}; it gets {gets} "
            "(dividing would idle cores whenever one op runs alone); no OpenMP variables"
        ),
    )


def _mac(n: int) -> str:
    return f"{n / 1e6:.1f} M" if n >= 100_000 else f"{n:,}"


# ------------------------------------------------------------------------------ throughput


def default_streams(usable: int) -> int:
    per_stream = 1 if usable <= 8 else 2 if usable <= 32 else 4
    return max(1, usable // per_stream)


def hybrid_default_streams(units: list[Unit]) -> int:
    """Default streams when performance and efficiency cores are both usable: the stream size of
    default_streams for all the usable CPUs, and as many whole streams of it as each core type
    holds, so that no stream mixes the two (a mixed stream runs at its slowest core's pace)."""
    per_stream = max(1, len(units) // default_streams(len(units)))
    slow = sum(1 for u in units if u.slow)
    return max(1, (len(units) - slow) // per_stream + slow // per_stream)


def split_streams(units: list[Unit], streams: int) -> list[list[Unit]]:
    """``streams`` equal slices of usable // streams CPUs, each inside one core type, NUMA node and
    cache domain where possible; those that must cross span as few as they can (cut_nested)."""
    size = len(units) // streams
    return cut_nested(units, [size] * streams, _place)


# ------------------------------------------------------------------------------ user settings


def _keep_user(settings: dict[str, Setting], user: UserSettings, budget: int, facts: list[str]) -> None:
    """Replace planned settings by the user's explicit ones, in place."""
    for knob, var in KNOBS.items():
        if not user.is_set(knob):
            continue
        value = user.value(knob)
        planned = settings.get(knob)
        note = f"kept: {var}={user.raw[var]} is set in your environment"
        if planned is not None and planned.value is not None and planned.value != value:
            note += f" (the rule would give {planned.value})"
        settings[knob] = Setting(value, "user", note)
        if knob in ("inter_op", "intra_op", "omp_threads") and isinstance(value, int) and value > budget:
            facts.append(f"warning: your {var}={value} exceeds the budget of {budget} CPUs")


# ------------------------------------------------------------------------------ layout


class Layout(NamedTuple):
    """How the usable CPUs are cut into instances, before any thread counts."""

    instances: int
    per_instance: int  # CPUs each instance may keep busy
    cpus: tuple[tuple[int, ...], ...]  # binding per instance; () = none
    inter: int  # inter-op threads per instance, before the tf.data floor
    inter_why: str
    instances_why: str = ""

    @property
    def total(self) -> int:
        return self.instances * self.per_instance


def throughput_layout(units: list[Unit], streams: int | None, p: int, facts: list[str]) -> Layout:
    budget = len(units)
    hybrid = any(u.slow for u in units) and not all(u.slow for u in units)
    n = streams if streams is not None else hybrid_default_streams(units) if hybrid else default_streams(budget)
    if n > budget:
        raise ValueError(f"streams={n} exceeds the budget of {budget} usable CPUs")
    slices = split_streams(units, n)
    size = len(slices[0])
    if budget - n * size:
        facts.append(f"{budget - n * size} CPU(s) left idle so that every stream gets the same {size}")
    crossing = sum(1 for s in slices if len({(u.socket, u.node) for u in s}) > 1)
    if crossing:
        facts.append(f"{crossing} stream(s) cross a NUMA node boundary: the nodes do not divide evenly")
    if any(u.domain >= 0 for u in units) and len({u.domain for u in units}) > 1:
        spans = [len({u.domain for u in s}) for s in slices]
        inside = sum(1 for k in spans if k == 1)
        low, high = min(k for k in spans if k > 1) if inside < n else 0, max(spans)
        facts.append(
            f"{inside} of {plural(n, 'stream')} inside one cache domain"
            + (
                f"; {n - inside} span {low if low == high else f'{low}-{high}'} domains: no domain "
                f"has {size} cores left for them"
                if inside < n
                else ""
            )
        )
    if hybrid:
        slow = [i for i, s in enumerate(slices) if all(u.slow for u in s)]
        mixed = [i for i, s in enumerate(slices) if any(u.slow for u in s) and i not in slow]
        where = (
            f" (instance{'s' if len(slow) > 1 else ''} {format_cpulist(slow)}: CPUs "
            f"{format_cpulist(u.cpu for i in slow for u in slices[i])})"
            if slow
            else ""
        )
        facts.append(
            f"{n - len(slow) - len(mixed)} of {plural(n, 'stream')} on performance cores, {len(slow)} on "
            f"efficiency cores{where}: streams of their own, never mixed with performance cores"
            + (
                f"; {len(mixed)} mixed (instances {format_cpulist(mixed)}): the core types do not divide "
                f"into {size}-CPU streams"
                if mixed
                else ""
            )
        )
    how = (
        "asked"
        if streams is not None
        else f"default: {plural(size, 'CPU')} per stream, as many as each core type holds"
        if hybrid
        else f"default: {budget} CPUs // {budget // n} per stream"
    )
    return Layout(
        instances=n,
        per_instance=size,
        cpus=tuple(tuple(sorted(u.cpu for u in s)) for s in slices),
        inter=min(p, size),
        inter_why=f"per stream: min(width {p}, {size} stream CPUs)",
        instances_why=f"{n} streams ({how}), {size} CPUs each, bind each to its CPUs",
    )


def single_layout(units: list[Unit], mode: str, p: int, topology: Topology, facts: list[str]) -> Layout:
    why = "p = the model's average width (the paper's rule)"
    if mode == "latency":
        units, restricted = restrict_latency(units, p)
        if restricted:
            facts.append(restricted)
        domains = {u.domain for u in units if u.domain >= 0}
        if len(topology.cache_domains) > 1 and domains:
            facts.append(
                f"latency plan inside one cache domain ({_domain_list(domains)})"
                if len(domains) == 1
                else f"latency plan across {len(domains)} cache domains ({_domain_list(domains)}): its "
                f"{plural(len(units), 'CPU')} are more than any one domain holds here"
            )
    else:
        why += "; training uses every socket in the budget (large batches amortise cross-socket traffic)"
    return Layout(instances=1, per_instance=len(units), cpus=_binding(units, topology), inter=p, inter_why=why)


# ------------------------------------------------------------------------------ settings


def planned_settings(
    layout: Layout,
    mode: str,
    runtime: str,
    uses_tf_data: bool,
    user: UserSettings,
    op_work: int | None = None,
    small_op_work: int = SMALL_OP_WORK,
    dnn_width: int | None = None,
    lookup_bound: float | None = None,
) -> dict[str, Setting]:
    """Every knob with its planned value and reason (user settings not applied yet)."""
    inter, floor_why = _tf_data_floor(layout.inter, uses_tf_data)
    settings = {
        "instances": Setting(layout.instances, "planned", layout.instances_why),
        "inter_op": Setting(inter, "planned", layout.inter_why + ("; " + floor_why if floor_why else "")),
    }
    # A user's explicit inter-op count is what shares the CPUs, so the OpenMP division uses it.
    inter_for_division = user.inter_op if user.inter_op else inter
    intra, omp, intra_why = intra_threads(
        runtime,
        layout.per_instance,
        inter_for_division,
        op_work,
        training=mode == "training",
        small_op_work=small_op_work,
        teams=dnn_width,
        lookup_bound=lookup_bound,
    )
    settings["intra_op"] = Setting(intra, "planned", intra_why)
    if omp is not None:
        settings["omp_threads"] = Setting(
            omp, "planned", "OMP_NUM_THREADS = MKL_NUM_THREADS: each OpenMP team's threads"
        )
        settings["mkl_threads"] = Setting(omp, "planned", "")
        settings["kmp_blocktime"] = Setting(
            KMP_BLOCKTIME, "planned", "idle OpenMP threads sleep after 1 ms instead of spinning 200 ms"
        )
        settings["kmp_affinity"] = Setting(
            KMP_AFFINITY, "planned", "compact: one OpenMP thread per core, a team's threads close together"
        )
    if mode == "training":
        settings["tf_data_threads"] = Setting(
            layout.total,
            "planned",
            f"training: private tf.data pool of {layout.total} threads, since input pipelines overlap compute",
        )
    else:  # TF's default: per-request inputs are small
        settings["tf_data_threads"] = Setting(None, "planned", "")
    settings["cpus"] = Setting(
        [format_cpulist(g) for g in layout.cpus],
        "planned",
        "one CPU list per instance: bind each instance to it" if layout.cpus else "",
    )
    return settings


def _small_op_threshold(calibration: Mapping[str, Any] | None, facts: list[str]) -> int:
    """This host's measured threshold when calibrated, else SMALL_OP_WORK (fitted elsewhere)."""
    measured = calibration or {}
    value = measured.get("small_op_work")
    if isinstance(value, int) and value > 0:
        facts.append(
            f"small-op threshold {_mac(value)} multiply-adds, {measured.get('where', 'calibrated on this host')} "
            f"on {measured.get('date', '?')} ({measured.get('why', '')})"
        )
        return value
    facts.append(
        f"small-op threshold {_mac(SMALL_OP_WORK)} multiply-adds, fitted on an AMD EPYC host: a guess on "
        "another processor (`tf-autopar calibrate` measures this host's)"
    )
    return SMALL_OP_WORK


def _apply_tuned(settings: dict[str, Setting], tuned: Mapping[str, Any], cpus: int, facts: list[str]) -> None:
    """A measured setting replaces the rule's inter/intra pools (in place), said with its evidence."""
    inter, intra = tuned.get("inter_op"), tuned.get("intra_op")
    omp = tuned.get("omp_threads", intra)  # OpenMP builds tune the teams apart; older entries: = intra
    if not all(isinstance(v, int) and 0 < v <= max(cpus, 2) for v in (inter, intra, omp)):
        facts.append(f"a tuned setting {inter}x{intra} (OpenMP {omp}) does not fit {cpus} usable CPUs: ignored")
        return
    rule = f"{settings['inter_op'].value}x{settings['intra_op'].value}"
    label = f"{inter}x{intra}"
    if "omp_threads" in settings:
        rule += f"x{settings['omp_threads'].value}"
        label += f"x{omp}"
    speedup = tuned.get("speedup")
    note = (
        f"tuned on {tuned.get('date', '?')}: {label}, "
        + (f"{speedup:.2f}x over the rule's plan {rule}" if isinstance(speedup, (int, float)) else f"rule: {rule}")
        + f" ({tuned.get('rounds', '?')} rounds, {tuned.get('runs', '?')} runs)"
    )
    facts.append(note)
    settings["inter_op"] = Setting(inter, "tuned", note)
    settings["intra_op"] = Setting(intra, "tuned", note)
    if "omp_threads" in settings:
        settings["omp_threads"] = Setting(omp, "tuned", "OMP_NUM_THREADS = MKL_NUM_THREADS, as tuned")
        settings["mkl_threads"] = Setting(omp, "tuned", "")


def _mkl_follows_user_omp(settings: dict[str, Setting]) -> None:
    """MKL reads OMP_NUM_THREADS when MKL_NUM_THREADS is unset: follow the user's OMP value."""
    omp, mkl = settings.get("omp_threads"), settings.get("mkl_threads")
    if mkl is not None and mkl.source != "user" and omp is not None and omp.source == "user":
        settings["mkl_threads"] = Setting(omp.value, "planned", "follows your OMP_NUM_THREADS")


def _value(settings: dict[str, Setting], knob: str) -> Any:
    setting = settings.get(knob)
    return None if setting is None else setting.value


# ------------------------------------------------------------------------------ plan


def _pools_for_op_sizes(
    p: int, profile: GraphProfile | None, op_work: float | None, mode: str, units: int, runtime: str, facts: list[str]
) -> int:
    """The width's pools, corrected for what measured faster: tiny ops on one pool, a training
    graph's paired gradients and a recurrent model's loops on two."""
    if op_work is not None:
        facts.append(f"typical heavy op: {_mac(op_work)} multiply-adds (work-weighted median, from static shapes)")
        if op_work < TINY_OP_WORK:
            if p > 1:
                p = 1
                facts.append(
                    f"tiny ops (under {_mac(TINY_OP_WORK)} multiply-adds): 1 inter-op pool, since handing an "
                    "op to another thread takes about as long as running it"
                )
        elif mode == "training" and op_work < TRAIN_SMALL_OP_WORK and profile is not None:
            pairs = min(2, profile.max_width, units)
            if pairs > p:
                p = pairs
                facts.append(
                    f"training with ops under {_mac(TRAIN_SMALL_OP_WORK)} multiply-adds: {p} inter-op pools, "
                    "so that each layer's independent input and weight gradients run side by side"
                )
    tiny = op_work is not None and op_work < TINY_OP_WORK
    if getattr(profile, "loops", False) and p < 2 <= units and not tiny:
        if runtime == "openmp":
            facts.append(
                "the model runs While loops, but on OpenMP builds it keeps 1 inter-op pool: a second "
                "owns a second OpenMP team, and an LSTM ran 1.07-1.4x slower with it (docs/openmp.md)"
            )
        else:
            p = 2
            facts.append(
                "the model runs While loops (recurrent layers): 2 inter-op pools, so that the loop's "
                "iterations and bookkeeping overlap (an LSTM at batch 32 ran 1.15x faster with 2 than 1)"
            )
    return p


def plan(
    topology: Topology,
    profile: GraphProfile | None = None,
    mode: str = "latency",
    *,
    width: int | None = None,
    env: Mapping[str, str] | None = None,
    streams: int | None = None,
    use_hyperthreads: bool = False,
    tf_data: bool | None = None,
    tuned: Mapping[str, Any] | None = None,
    calibration: Mapping[str, Any] | None = None,
) -> ThreadPlan:
    """Plan TensorFlow's threads for ``topology`` and a model (see the module docstring for the rule).

    ``profile``: a GraphProfile (or None; ``width=W`` is GraphProfile.from_width(W)).
    ``env``: the user's environment (pass ``os.environ``); explicit thread settings in it
    are kept. ``tf_data`` overrides ``profile.uses_tf_data`` when not None. ``tuned``: a
    setting measured on this host for this model (tuning/, the plan cache's "tuned" entry:
    inter_op, intra_op, speedup, rounds, date), which replaces the rule's pools.
    ``calibration``: this host's measured small-op threshold (``small_op_work``, ``date``),
    used instead of SMALL_OP_WORK, which was fitted on another processor.
    Raises ValueError naming the problem on invalid input.
    """
    profile = _check_inputs(mode, profile, width, streams)
    user = read_user_settings(env)
    runtime, runtime_facts = _runtime(topology, env)
    units, facts = select_budget(topology, use_hyperthreads)
    facts += runtime_facts
    if tf_data is None:
        tf_data = bool(getattr(profile, "uses_tf_data", False))

    if mode == "latency":
        units, fast_why = performance_only(units)
        if fast_why:
            facts.append(fast_why)
    p, p_why = model_pools(profile, len(units), runtime)
    facts.append(p_why)
    op_work = getattr(profile, "typical_op_work", None)
    facts += [f"assumed: {a}" for a in getattr(profile, "assumptions", ())]
    p = _pools_for_op_sizes(p, profile, op_work, mode, len(units), runtime, facts)
    dnn_width = onednn_width(profile) if runtime == "openmp" else None
    lookup_bound = _lookup_bound(profile, runtime)
    if dnn_width is not None and p > dnn_width:
        p = dnn_width
        facts.append(
            f"{plural(p, 'inter-op pool')}, one per OpenMP team that runs at once: the rest of the width is "
            "embedding look-ups, which run on TensorFlow's own threads, and an inter-op thread for them "
            "competes with a team that holds the cores (DLRM and DCN-V2 at batch 2048, docs/openmp.md)"
        )
    if mode == "throughput":
        layout = throughput_layout(units, streams, p, facts)
    else:
        layout = single_layout(units, mode, p, topology, facts)
    small_op_work = SMALL_OP_WORK
    if op_work is not None:
        small_op_work = _small_op_threshold(calibration, facts)
    settings = planned_settings(layout, mode, runtime, tf_data, user, op_work, small_op_work, dnn_width, lookup_bound)
    if tuned is not None and mode != "throughput":
        _apply_tuned(settings, tuned, layout.per_instance, facts)
    _keep_user(settings, user, len(units), facts)
    _mkl_follows_user_omp(settings)

    plugin_env, kept = Z.plan_zentf(topology, profile, env, mode, layout.instances, settings, user.raw, facts)
    omp, mkl, blocktime = (
        _value(settings, "omp_threads"),
        _value(settings, "mkl_threads"),
        _value(settings, "kmp_blocktime"),
    )
    result = ThreadPlan(
        name="tf_autopar",
        mode=mode,
        inter_op=settings["inter_op"].value,
        intra_op=settings["intra_op"].value,
        omp_threads=omp,
        mkl_threads=mkl if mkl != omp else None,
        kmp_blocktime=blocktime if isinstance(blocktime, int) else None,
        kmp_affinity=_value(settings, "kmp_affinity"),
        kmp_hw_subset=user.kmp_hw_subset,
        override_global_threadpool=user.override_global_threadpool,
        instances=layout.instances,
        cpus=layout.cpus,
        tf_data_threads=settings["tf_data_threads"].value,
        settings=settings,
        user_settings=kept,
        facts=tuple(facts),
        runtime=runtime,
        usable_cpus=layout.total,
        plugin_env=plugin_env,
    )
    log.info(
        "plan %s: inter=%s intra=%s omp=%s instances=%s", mode, result.inter_op, result.intra_op, omp, result.instances
    )
    return result

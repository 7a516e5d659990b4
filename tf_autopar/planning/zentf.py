"""AMD's recommended variables for the zentf plugin (ZenDNN for TensorFlow), planned. Pure.

When zentf is loaded, its ZenDNN kernels (matrix multiplies, convolutions) run on the LLVM OpenMP
runtime it bundles, one team per inter-op thread that runs them, as oneDNN does on Intel's OpenMP
builds; so the planner sizes the teams with the OpenMP rule (planner.py) and this module adds the
variables AMD recommends for zentf. Source: AMD ZenDNN User Guide (UG 57300, revision 5.2.1,
2026-04-13), "Optimal Environment Variable Settings for zentf" and "Environment Variables":

- OMP_DYNAMIC=FALSE (the common table's value), OMP_PROC_BIND=FALSE.
- With LLVM OpenMP (every model but recommenders, for which the guide uses GNU OpenMP instead;
  the zentf wheel links LLVM's libiomp5, so its KMP_* settings apply to what is loaded):
  KMP_BLOCKTIME=1, KMP_TPAUSE=0, KMP_{FORKJOIN,PLAIN,REDUCTION}_BARRIER_PATTERN=dist,dist,
  KMP_AFFINITY=granularity=fine,compact,1,0. KMP_BLOCKTIME=1 is already the OpenMP rule's; the
  compact pinning is not planned (NO_PINNING_WHY: measured slower here).
- USE_ZENDNN_MATMUL_DIRECT=1, ZENDNNL_MATMUL_WEIGHT_CACHE=1.
- ZENDNNL_MATMUL_ALGO for FP32 NLP models: 1 for latency, 2 for throughput; DIEN (recommender)
  models: 1. The plan takes 2 in throughput mode, else 1, and 1 for models with embedding look-ups.
- OMP_WAIT_POLICY: the guide's table gives ACTIVE (threads spin while waiting). A process that
  shares the host (a CPU budget below the host's CPUs: a worker's slice, a cpuset or a quota; or
  several planned instances) gets PASSIVE instead, so that waiting threads yield the cores to the
  other workers; KMP_BLOCKTIME=1 still lets them spin 1 ms first.
- TF_NUM_INTEROP_THREADS=1 (CNN and NLP models) is what the OpenMP rule gives a one-wide model;
  a wider one keeps its measured pools and its teams divide the CPUs (reported as a fact).
  TF_NUM_INTRAOP_THREADS = cores (128 on Turin): the plan gives TensorFlow's pool the team's size
  (INTRA_WHY), which is the instance's CPUs for a one-wide model.

Variables the user set are kept, never overridden, and reported (``kept``).
"""

from __future__ import annotations

from typing import Mapping

from tf_autopar.planning.plan import Setting
from tf_autopar.topology.model import Topology, ZentfPlugin

GUIDE = "AMD ZenDNN User Guide 57300 (5.2.1), 'Optimal Environment Variable Settings for zentf'"

# zentf's graph rewrite (its kernels) runs only when this is true: installed and loaded alone, the
# plugin leaves TensorFlow's graph as it is (measured with zentf 2.21.0.0: no rewrite, and its
# OpenMP runtime never starts). Turning it on is the user's choice of engine; the plan never sets it.
ENABLE = "TF_ENABLE_ZENDNN_OPTS"

OMP_DYNAMIC = "OMP_DYNAMIC"
OMP_PROC_BIND = "OMP_PROC_BIND"
OMP_WAIT_POLICY = "OMP_WAIT_POLICY"
KMP_TPAUSE = "KMP_TPAUSE"
BARRIER_PATTERNS = (
    "KMP_FORKJOIN_BARRIER_PATTERN",
    "KMP_PLAIN_BARRIER_PATTERN",
    "KMP_REDUCTION_BARRIER_PATTERN",
)
MATMUL_DIRECT = "USE_ZENDNN_MATMUL_DIRECT"
MATMUL_WEIGHT_CACHE = "ZENDNNL_MATMUL_WEIGHT_CACHE"
MATMUL_ALGO = "ZENDNNL_MATMUL_ALGO"
VARIABLES = (
    OMP_DYNAMIC,
    OMP_PROC_BIND,
    OMP_WAIT_POLICY,
    KMP_TPAUSE,
    *BARRIER_PATTERNS,
    MATMUL_DIRECT,
    MATMUL_WEIGHT_CACHE,
    MATMUL_ALGO,
)
# The guide's KMP_AFFINITY=granularity=fine,compact,1,0 is not planned: it binds each TensorFlow
# thread that starts a team (and the team) to fixed CPUs, and MobileNetV2 at batch 1 took 2.6x as
# long with it as without (1.6-3.3x over 4 rounds; 2-core EPYC shared with other work:
# benchmarks/results/zentf_ablation2_epyc.json). A user's KMP_AFFINITY is kept as ever.
NO_PINNING_WHY = (
    "zentf: no pinning (the guide gives compact): it binds the TensorFlow threads that start OpenMP teams to "
    "single CPUs, and MobileNetV2 took 2.6x as long with it on a shared 2-core EPYC (docs/openmp.md)"
)
# TensorFlow's own intra-op pool: the team's size, as the guide's TF_NUM_INTRAOP_THREADS = cores (for
# one team), not the OpenMP rule's 1 (measured on intel-tensorflow). Under zentf, MobileNetV2 at
# batch 1 ran faster with it in each of 10 paired rounds over three runs: 1.36-3.0x (median 1.6x)
# in the 3 rounds of the plan as it is (benchmarks/results/zentf_epyc.json), 1.07-4.3x in the 7
# with compact pinning (zentf_ablation*_epyc.json).
INTRA_WHY = (
    "zentf: TensorFlow's own pool gets the team's {team} thread(s), as the guide's TF_NUM_INTRAOP_THREADS = "
    "cores; with 1 thread (the OpenMP rule, measured on intel-tensorflow) MobileNetV2 ran 1.6x slower "
    "under zentf (docs/openmp.md)"
)
MATMUL_ALGO_LATENCY = "1"  # the guide: NLP FP32 latency, and DIEN (recommenders) in any mode
MATMUL_ALGO_THROUGHPUT = "2"  # the guide: NLP FP32 throughput


def enabled(env: Mapping[str, str] | None) -> bool:
    """Whether the user turned zentf's kernels on (TensorFlow's boolean: 1 or true)."""
    return str((env or {}).get(ENABLE, "")).strip().lower() in ("1", "true")


def shares_host(budget: int, host_cpus: int, instances: int) -> bool:
    """Whether waiting OpenMP threads would hold cores another worker could use: the process may
    use fewer CPUs than the host has, or the plan runs several instances."""
    return instances > 1 or budget < host_cpus


def zentf_settings(
    zentf: ZentfPlugin, mode: str, shared: bool, recommender: bool, env: Mapping[str, str] | None
) -> tuple[dict[str, Setting], dict[str, str]]:
    """(settings by variable name, the user's own values of them, kept verbatim).

    ``shared``: see shares_host(); ``recommender``: the model has embedding look-ups.
    """
    planned: dict[str, tuple[str, str]] = {
        OMP_DYNAMIC: ("FALSE", "a fixed team size, as planned"),
        OMP_PROC_BIND: ("FALSE", "the guide's zentf setting; pinning is KMP_AFFINITY's"),
        OMP_WAIT_POLICY: (
            ("PASSIVE", "this process shares the host's CPUs: waiting OpenMP threads yield them")
            if shared
            else ("ACTIVE", "the guide's value: this process has the host's CPUs to itself")
        ),
        MATMUL_DIRECT: ("1", "ZenDNN's direct matmul path"),
        MATMUL_WEIGHT_CACHE: ("1", "reordered weights are cached between calls"),
    }
    if recommender:
        planned[MATMUL_ALGO] = (MATMUL_ALGO_LATENCY, "the guide's value for recommenders (DIEN), FP32")
    elif mode == "throughput":
        planned[MATMUL_ALGO] = (MATMUL_ALGO_THROUGHPUT, "the guide's value for throughput (NLP, FP32)")
    else:
        planned[MATMUL_ALGO] = (MATMUL_ALGO_LATENCY, "the guide's value for latency (NLP, FP32)")
    if zentf.llvm_openmp:
        planned[KMP_TPAUSE] = ("0", f"LLVM OpenMP ({zentf.openmp}): no TPAUSE wait while spinning")
        for name in BARRIER_PATTERNS:
            planned[name] = ("dist,dist", "LLVM OpenMP's distributed barrier")
    env = env or {}
    settings: dict[str, Setting] = {}
    kept: dict[str, str] = {}
    for name, (value, why) in planned.items():
        mine = str(env.get(name, "")).strip()
        if mine:
            kept[name] = mine
            note = f"kept: {name}={mine} is set in your environment"
            settings[name] = Setting(mine, "user", note + (f" (the guide gives {value})" if mine != value else ""))
        else:
            settings[name] = Setting(value, "planned", f"zentf: {why} (ZenDNN guide 57300)")
    return settings, kept


def runtime_facts(zentf: ZentfPlugin | None, env: Mapping[str, str] | None) -> tuple[bool, list[str]]:
    """(whether zentf's kernels will run, the facts the plan states about it)."""
    if zentf is None:
        return False, []
    if not enabled(env):
        return False, [
            f"zentf {zentf.version} is installed but off ({ENABLE} is not 1): its kernels do not run, "
            "so nothing zentf-specific is planned"
        ]
    return True, [
        zentf.describe(),
        f"zentf {zentf.version} is on ({ENABLE}): ZenDNN plans its OpenMP threads. Its kernels run on OpenMP "
        "teams, one per inter-op thread that runs them, as oneDNN's do on Intel's OpenMP builds, and are "
        f"planned as those are (docs/openmp.md), with AMD's recommended variables for zentf ({GUIDE})",
    ]


def plan_zentf(
    topology: Topology,
    profile: object,
    env: Mapping[str, str] | None,
    mode: str,
    instances: int,
    settings: dict[str, Setting],
    user_raw: Mapping[str, str],
    facts: list[str],
) -> tuple[dict[str, str], dict[str, str]]:
    """(the planned zentf variables, the user's variables to keep: ``user_raw`` and the user's values
    of zentf's, ENABLE among them). Its settings join the plan's ``settings`` in place.
    ``profile``: the model's GraphProfile (or None); embedding look-ups make it a recommender."""
    kept = dict(user_raw)
    zentf = getattr(topology, "zentf", None)
    if zentf is None or not enabled(env):
        return {}, kept
    shared = shares_host(topology.cpu_budget, topology.host_cpus, instances)
    recommender = bool(getattr(profile, "lookups", 0))
    planned, mine = zentf_settings(zentf, mode, shared, recommender, env)
    settings.update(planned)
    kept.update(mine)
    kept.setdefault(ENABLE, str((env or {}).get(ENABLE, "")).strip())
    affinity = settings.get("kmp_affinity")
    if affinity is not None and affinity.source == "planned":
        settings["kmp_affinity"] = Setting(None, "planned", NO_PINNING_WHY)
    intra, team = settings.get("intra_op"), settings.get("omp_threads")
    planned_intra = intra is not None and intra.source == "planned"
    if planned_intra and team is not None and isinstance(team.value, int) and intra.value != team.value:
        settings["intra_op"] = Setting(team.value, "planned", INTRA_WHY.format(team=team.value))
    inter = settings["inter_op"].value if "inter_op" in settings else 1
    if isinstance(inter, int) and inter > 1:
        facts.append(
            f"zentf: the guide gives TF_NUM_INTEROP_THREADS=1 for CNN and NLP models; this model's width "
            f"keeps {inter} inter-op threads, and the OpenMP teams divide the CPUs among them"
        )
    return zentf_env(planned), kept


def zentf_env(settings: Mapping[str, Setting]) -> dict[str, str]:
    """The planned (not the user's) zentf variables, for the plan's environment."""
    return {name: str(s.value) for name, s in settings.items() if name in VARIABLES and s.source == "planned"}

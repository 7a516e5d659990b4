"""Which worker of how many this process is, from what its launcher already put in the environment.

Pure: reads only the ``env`` mapping (and the local host names it is given). Sources, first
complete one wins:

=====================================  ==========================================  ==============
variables                               set by                                      gives
=====================================  ==========================================  ==============
TF_AUTOPAR_INSTANCE / _INSTANCES        ``tf-autopar run`` (already bound)           rank, size
LOCAL_RANK / LOCAL_WORLD_SIZE           torchrun, Horovod (``horovodrun``), Accelerate rank, size
HOROVOD_LOCAL_RANK / HOROVOD_LOCAL_SIZE Horovod's gloo launcher                      rank, size
OMPI_COMM_WORLD_LOCAL_RANK / _SIZE      Open MPI (``mpirun``, Horovod over MPI)      rank, size
MPI_LOCALRANKID / MPI_LOCALNRANKS       MPICH, Intel MPI                            rank, size
SLURM_LOCALID / SLURM_NTASKS_PER_NODE   ``srun --ntasks-per-node``                   rank, size
TF_CONFIG                               tf.distribute multi-worker jobs             rank, size
TF_AUTOPAR_INSTANCES alone              the user, for workers without ranks         size only
WEB_CONCURRENCY                         gunicorn, uvicorn, Heroku-style hosts        size only
=====================================  ==========================================  ==============

TF_CONFIG: the tasks on this host are the cluster entries (chief, then worker, then ps, then
any other job, each in index order) whose host part is ``localhost``, a 127.x.x.x or ::1
address, or one of this host's names; the rank is this task's position among them.
A rank without its size (LOCAL_RANK alone) is skipped; a garbled value (not an integer,
rank >= size, bad JSON) is reported in ``warnings`` and the next source is tried.
"""

from __future__ import annotations

import json
from typing import Any, Iterable, Mapping, NamedTuple

from tf_autopar._files import parse_json
from tf_autopar._text import shown, uint_or_none

# (rank variable, size variable, source label); "" rank = count only.
PAIRS: tuple[tuple[str, str], ...] = (
    ("TF_AUTOPAR_INSTANCE", "TF_AUTOPAR_INSTANCES"),
    ("LOCAL_RANK", "LOCAL_WORLD_SIZE"),
    ("HOROVOD_LOCAL_RANK", "HOROVOD_LOCAL_SIZE"),
    ("OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"),
    ("MPI_LOCALRANKID", "MPI_LOCALNRANKS"),
    ("SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"),
)
COUNTS: tuple[str, ...] = ("TF_AUTOPAR_INSTANCES", "WEB_CONCURRENCY")
LAUNCHER = "env:TF_AUTOPAR_INSTANCE"
JOB_ORDER = ("chief", "master", "worker", "ps")


class Ranks(NamedTuple):
    """This process's local rank among ``size`` workers on this host; rank None = count only."""

    rank: int | None
    size: int | None
    source: str  # "env:LOCAL_RANK", "env:TF_CONFIG", "env:WEB_CONCURRENCY", ..., or "none"
    warnings: tuple[str, ...] = ()

    @property
    def complete(self) -> bool:
        return self.rank is not None and self.size is not None


def _int(env: Mapping[str, str], name: str, minimum: int, warnings: list[str]) -> int | None:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return None
    text = raw.strip()
    value = uint_or_none(text.removeprefix("-"))
    if value is None:
        warnings.append(f"{name}={shown(raw)} is not an integer: ignored")
        return None
    value = -value if text.startswith("-") else value
    if value < minimum:
        warnings.append(f"{name}={shown(raw)} is below {minimum}: ignored")
        return None
    return value


def is_local_host(host: str, local_names: Iterable[str] = ()) -> bool:
    """True for localhost, loopback addresses and this host's names (case-insensitive)."""
    h = host.strip().strip("[]").lower()
    if h in ("localhost", "::1", "0.0.0.0", "ip6-localhost") or h.startswith("127."):
        return True
    names = {n.lower() for n in local_names if n}
    return h in names or h.split(".")[0] in {n.split(".")[0] for n in names if not n[0].isdigit()}


def _host_of(address: Any) -> str | None:
    if not isinstance(address, str) or not address:
        return None
    if address.startswith("["):  # [::1]:port
        return address[1 : address.find("]")] if "]" in address else None
    return address.rsplit(":", 1)[0] if address.count(":") == 1 else address


def tf_config_ranks(text: str, local_names: Iterable[str] = ()) -> tuple[int, int]:
    """(local rank, local size) from a TF_CONFIG value; ValueError naming what is wrong."""
    try:
        cfg = parse_json(text, "TF_CONFIG")
    except json.JSONDecodeError as exc:
        raise ValueError(f"TF_CONFIG is not JSON ({exc.msg})") from None
    if not isinstance(cfg, dict) or not isinstance(cfg.get("cluster"), dict) or not isinstance(cfg.get("task"), dict):
        raise ValueError("TF_CONFIG needs a 'cluster' object and a 'task' object")
    cluster, task = cfg["cluster"], cfg["task"]
    ttype, tindex = task.get("type"), task.get("index", 0)
    if not isinstance(ttype, str) or isinstance(tindex, bool) or not isinstance(tindex, int):
        raise ValueError(f"TF_CONFIG task needs a string 'type' and an integer 'index', got {task!r}")
    jobs = sorted(cluster, key=lambda j: (JOB_ORDER.index(j) if j in JOB_ORDER else len(JOB_ORDER), j))
    names = tuple(local_names)
    local: list[tuple[str, int]] = []
    for job in jobs:
        addresses = cluster[job]
        if isinstance(addresses, dict):  # sparse form {"0": "host:port"}
            items = sorted((int(k), v) for k, v in addresses.items())
        elif isinstance(addresses, list):
            items = list(enumerate(addresses))
        else:
            raise ValueError(f"TF_CONFIG cluster job {job!r} is neither a list nor an object")
        for i, address in items:
            host = _host_of(address)
            if host is None:
                raise ValueError(f"TF_CONFIG cluster {job}[{i}] is not a 'host:port' string: {address!r}")
            if is_local_host(host, names):
                local.append((job, i))
    if (ttype, tindex) not in local:
        if ttype not in cluster:
            raise ValueError(f"TF_CONFIG task type {ttype!r} is not in the cluster (an evaluator?)")
        raise ValueError(f"TF_CONFIG task {ttype}[{tindex}] is not on this host")
    return local.index((ttype, tindex)), len(local)


def detect_ranks(env: Mapping[str, str], local_names: Iterable[str] = ()) -> Ranks:
    """The first complete rank source in ``env`` (see the module docstring), else a count, else none."""
    warnings: list[str] = []
    for rank_var, size_var in PAIRS:
        if rank_var not in env:
            continue
        rank = _int(env, rank_var, 0, warnings)
        size = _int(env, size_var, 1, warnings)
        if rank is None or size is None:
            continue
        if rank >= size:
            warnings.append(f"{rank_var}={shown(rank)} is not below {size_var}={shown(size)}: ignored")
            continue
        return Ranks(rank, size, f"env:{rank_var}", tuple(warnings))
    if env.get("TF_CONFIG", "").strip():
        try:
            rank, size = tf_config_ranks(env["TF_CONFIG"], local_names)
            return Ranks(rank, size, "env:TF_CONFIG", tuple(warnings))
        except ValueError as exc:
            warnings.append(f"{exc}: TF_CONFIG ignored")
    for count_var in COUNTS:
        size = _int(env, count_var, 1, warnings)
        if size is not None:
            return Ranks(None, size, f"env:{count_var}", tuple(warnings))
    return Ranks(None, None, "none", tuple(warnings))

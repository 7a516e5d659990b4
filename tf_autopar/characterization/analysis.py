"""The four analyses from measured runs. Pure: numpy and scipy, no TensorFlow.

A *run* is one child process: one workload, mode, intra-op and inter-op pool size and round,
summarised by ``summarize_payload`` from what ``tf-autopar trace --json`` printed. Everything
here works on those summaries, so tests feed it synthetic runs.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from tf_autopar.characterization.classes import OP_CLASSES, class_times, shares

#: Profiles closer than this cosine distance (1 - similarity) are reported as one group.
GROUP_DISTANCE = 0.2
#: A class must hold at least this share of a run's kernel time to get a per-class speedup.
MIN_CLASS_SHARE = 0.05


@dataclass(frozen=True)
class Run:
    """One measurement (a child process). Times are seconds per step."""

    workload: str
    mode: str
    intra: int
    inter: int
    round: int = 0
    ok: bool = True
    error: str = ""
    batch: int | None = None
    step_s: float = math.nan
    type_s: dict[str, float] = field(default_factory=dict)
    class_s: dict[str, float] = field(default_factory=dict)
    unknown_types: tuple[str, ...] = ()
    tax_fraction: float = math.nan
    heavy_fraction: float = math.nan
    backend: str = ""

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["unknown_types"] = list(self.unknown_types)
        return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in d.items()}


def summarize_payload(
    payload: Mapping[str, Any], workload: str, mode: str, intra: int, inter: int, rnd: int = 0
) -> Run:
    """A ``tf-autopar trace --json`` object -> Run (per-step times by op type and by class)."""
    steps = int(payload.get("steps") or 0)
    if steps < 1:
        raise ValueError("trace payload without a step count")
    type_s: dict[str, float] = {}
    for r in payload.get("by_type", []):
        type_s[str(r["type"])] = type_s.get(str(r["type"]), 0.0) + float(r["total_s"]) / steps
    cls, unknown = class_times(type_s)
    hs = payload.get("heavy_share") or {}
    return Run(
        workload=workload,
        mode=mode,
        intra=intra,
        inter=inter,
        round=rnd,
        batch=payload.get("batch"),
        step_s=float(payload["wall_s"]) / steps,
        type_s=type_s,
        class_s=cls,
        unknown_types=tuple(unknown),
        tax_fraction=float(hs.get("tax_fraction", math.nan)),
        heavy_fraction=float(hs.get("heavy_fraction", math.nan)),
        backend=str(payload.get("backend", "")),
    )


def _median(xs: Iterable[float]) -> float:
    xs = [x for x in xs if not math.isnan(x)]
    return statistics.median(xs) if xs else math.nan


@dataclass(frozen=True)
class Point:
    """The median over rounds of one (workload, mode, intra, inter)."""

    step_s: float
    class_s: dict[str, float]
    type_s: dict[str, float]
    tax_fraction: float
    heavy_fraction: float
    rounds: int
    batch: int | None = None

    @property
    def class_shares(self) -> dict[str, float]:
        return shares(self.class_s)


def aggregate(runs: Sequence[Run]) -> dict[tuple[str, str, int, int], Point]:
    """Successful runs grouped by configuration, medians over rounds."""
    groups: dict[tuple[str, str, int, int], list[Run]] = {}
    for r in runs:
        if r.ok:
            groups.setdefault((r.workload, r.mode, r.intra, r.inter), []).append(r)
    out = {}
    for key, rs in groups.items():
        types = sorted({t for r in rs for t in r.type_s})
        out[key] = Point(
            step_s=_median(r.step_s for r in rs),
            class_s={c: _median(r.class_s.get(c, 0.0) for r in rs) for c in OP_CLASSES},
            type_s={t: _median(r.type_s.get(t, 0.0) for r in rs) for t in types},
            tax_fraction=_median(r.tax_fraction for r in rs),
            heavy_fraction=_median(r.heavy_fraction for r in rs),
            rounds=len(rs),
            batch=rs[0].batch,
        )
    return out


def dominant_types(type_s: Mapping[str, float], cover: float = 0.9) -> list[tuple[str, float]]:
    """The fewest op types that hold ``cover`` of the kernel time, with their shares."""
    total = sum(type_s.values())
    out: list[tuple[str, float]] = []
    if total <= 0:
        return out
    acc = 0.0
    for t, s in sorted(type_s.items(), key=lambda kv: -kv[1]):
        out.append((t, s / total))
        acc += s / total
        if acc >= cover - 1e-12:
            break
    return out


def cosine_matrix(vectors: Sequence[Sequence[float]]) -> np.ndarray:
    """Pairwise cosine similarity; exactly symmetric, ones on the diagonal (a zero vector: 0 off it)."""
    m = np.asarray(vectors, dtype=float)
    if m.ndim != 2:
        raise ValueError("vectors must be a 2-D sequence")
    norms = np.linalg.norm(m, axis=1)
    safe = np.where(norms > 0, norms, 1.0)
    unit = m / safe[:, None]
    sim = np.clip(unit @ unit.T, -1.0, 1.0)
    sim = (sim + sim.T) / 2
    np.fill_diagonal(sim, 1.0)
    return sim


@dataclass(frozen=True)
class Similarity:
    labels: list[str]
    matrix: np.ndarray
    linkage: np.ndarray | None  # scipy linkage on 1 - similarity (average), None below 2 labels
    groups: list[list[str]]  # clusters cut at GROUP_DISTANCE, largest first
    nearest: dict[str, tuple[str, float]]  # label -> (most similar other label, similarity)

    def to_dict(self) -> dict[str, Any]:
        return {
            "labels": self.labels,
            "matrix": self.matrix.round(6).tolist(),
            "linkage": None if self.linkage is None else self.linkage.round(6).tolist(),
            "groups": self.groups,
            "group_distance": GROUP_DISTANCE,
            "nearest": {k: {"label": v[0], "similarity": round(v[1], 6)} for k, v in self.nearest.items()},
        }


def similarity(profiles: Mapping[str, Mapping[str, float]], distance: float = GROUP_DISTANCE) -> Similarity:
    """Cosine similarity of op-class share profiles, average-linkage clustering of 1 - similarity."""
    labels = list(profiles)
    sim = cosine_matrix([[profiles[k].get(c, 0.0) for c in OP_CLASSES] for k in labels])
    nearest = {}
    for i, k in enumerate(labels):
        others = [(sim[i, j], labels[j]) for j in range(len(labels)) if j != i]
        if others:
            s, other = max(others)
            nearest[k] = (other, float(s))
    if len(labels) < 2:
        return Similarity(labels, sim, None, [labels] if labels else [], nearest)
    from scipy.cluster.hierarchy import fcluster, linkage
    from scipy.spatial.distance import squareform

    dist = np.clip(1.0 - sim, 0.0, None)
    np.fill_diagonal(dist, 0.0)
    z = linkage(squareform(dist, checks=False), method="average")
    ids = fcluster(z, t=distance, criterion="distance")
    by_id: dict[int, list[str]] = {}
    for label, gid in zip(labels, ids):
        by_id.setdefault(int(gid), []).append(label)
    groups = sorted(by_id.values(), key=lambda g: (-len(g), g))
    return Similarity(labels, sim, z, groups, nearest)


def reference_intra(points: Mapping[tuple[str, str, int, int], Point], workload: str, mode: str) -> int | None:
    """The largest intra-op count measured with one inter-op thread: the breakdown's configuration."""
    xs = [k[2] for k in points if k[0] == workload and k[1] == mode and k[3] == 1]
    return max(xs) if xs else None


def _measured(
    points: Mapping[tuple[str, str, int, int], Point], workloads: Sequence[str], modes: Sequence[str]
) -> Iterable[tuple[str, str, int]]:
    """(workload, mode, reference intra-op count) for every pair that has a reference run."""
    for w in workloads:
        for m in modes:
            intra = reference_intra(points, w, m)
            if intra is not None:
                yield w, m, intra


def breakdown(
    points: Mapping[tuple[str, str, int, int], Point], workloads: Sequence[str], modes: Sequence[str]
) -> dict[str, dict[str, dict[str, Any]]]:
    """Where the time goes: class shares, tax, dominant types per workload and mode."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for w, m, intra in _measured(points, workloads, modes):
        p = points[(w, m, intra, 1)]
        out.setdefault(w, {})[m] = {
            "intra": intra,
            "inter": 1,
            "batch": p.batch,
            "step_s": p.step_s,
            "kernel_s": sum(p.class_s.values()),
            "shares": p.class_shares,
            "tax_fraction": p.tax_fraction,
            "heavy_fraction": p.heavy_fraction,
            "dominant_types": dominant_types(p.type_s),
            "n_types": sum(1 for s in p.type_s.values() if s > 0),
        }
    return out


def train_vs_infer(bd: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Per workload with both modes: train/infer step-time ratio and the class share shift (train - infer)."""
    out = {}
    for w, modes in bd.items():
        if "infer" in modes and "train" in modes:
            i, t = modes["infer"], modes["train"]
            shift = {c: t["shares"].get(c, 0.0) - i["shares"].get(c, 0.0) for c in OP_CLASSES}
            ratio = t["step_s"] / i["step_s"] if i["step_s"] > 0 else math.nan
            out[w] = {
                "infer_step_s": i["step_s"],
                "train_step_s": t["step_s"],
                "ratio": ratio,
                "shift": shift,
                "batch_infer": i.get("batch"),
                "batch_train": t.get("batch"),
            }
    return out


def scaling(
    points: Mapping[tuple[str, str, int, int], Point], workloads: Sequence[str], modes: Sequence[str]
) -> dict[str, dict[str, dict[str, Any]]]:
    """Speedup over one intra-op thread (inter-op 1) of the step and of each op class."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for w in workloads:
        for m in modes:
            threads = sorted(k[2] for k in points if k[0] == w and k[1] == m and k[3] == 1)
            if not threads:
                continue
            base = points[(w, m, threads[0], 1)]
            step = [points[(w, m, n, 1)].step_s for n in threads]
            entry: dict[str, Any] = {
                "threads": threads,
                "step_s": step,
                "speedup": [base.step_s / s if s > 0 else math.nan for s in step],
                "class_speedup": {},
            }
            base_shares = base.class_shares
            for c in OP_CLASSES:
                if base_shares.get(c, 0.0) >= MIN_CLASS_SHARE and base.class_s[c] > 0:
                    entry["class_speedup"][c] = [
                        base.class_s[c] / points[(w, m, n, 1)].class_s[c]
                        if points[(w, m, n, 1)].class_s[c] > 0
                        else math.nan
                        for n in threads
                    ]
            out.setdefault(w, {})[m] = entry
    return out


def inter_pools(
    points: Mapping[tuple[str, str, int, int], Point], workloads: Sequence[str], modes: Sequence[str]
) -> dict[str, dict[str, dict[str, Any]]]:
    """At the largest intra-op count: step time per inter-op pool size, and speedup over inter-op 1."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for w, m, intra in _measured(points, workloads, modes):
        inters = sorted(k[3] for k in points if k[0] == w and k[1] == m and k[2] == intra)
        if len(inters) < 2:
            continue
        base = points[(w, m, intra, 1)].step_s
        step = [points[(w, m, intra, i)].step_s for i in inters]
        out.setdefault(w, {})[m] = {
            "intra": intra,
            "inter": inters,
            "step_s": step,
            "speedup": [base / s if s > 0 else math.nan for s in step],
        }
    return out


def analyze(runs: Sequence[Run], workloads: Sequence[str], modes: Sequence[str]) -> dict[str, Any]:
    """All four analyses from the runs, JSON-ready except the Similarity objects (one per mode)."""
    points = aggregate(runs)
    bd = breakdown(points, workloads, modes)
    sims = {m: similarity({w: bd[w][m]["shares"] for w in workloads if m in bd.get(w, {})}) for m in modes}
    unknown = sorted({t for r in runs if r.ok for t in r.unknown_types})
    return {
        "breakdown": bd,
        "similarity": sims,
        "train_vs_infer": train_vs_infer(bd),
        "scaling": scaling(points, workloads, modes),
        "inter_pools": inter_pools(points, workloads, modes),
        "unknown_types": unknown,
    }

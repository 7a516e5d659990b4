"""report.md and the PNGs of a characterization. Pure: matplotlib (Agg) and scipy, no TensorFlow.

matplotlib and scipy are the ``characterize`` extra: imported where a figure is drawn, so the
report's text and this module load without them.

The report must read on its own: every figure has a table with the same numbers next to it, so
it stays useful where images do not render.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from tf_autopar.characterization.analysis import GROUP_DISTANCE, MIN_CLASS_SHARE
from tf_autopar.characterization.classes import OP_CLASSES, SHORT

if TYPE_CHECKING:
    from tf_autopar.characterization.result import Result


def _pct(x: float | None) -> str:
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x * 100:.0f}%"


def _ms(x: float | None) -> str:
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x * 1e3:.2f}"


def _x(x: float | None) -> str:
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.2f}x"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)] + ["| " + " | ".join(r) + " |" for r in rows]


def _scaling_classes(result: Result) -> list[str]:
    if result.settings.classes:
        return list(result.settings.classes)
    seen = {c for modes in result.analyses["scaling"].values() for e in modes.values() for c in e["class_speedup"]}
    return [c for c in OP_CLASSES if c in seen]


def _scaling_table(result: Result, img: set[str]) -> list[str]:
    s, a = result.settings, result.analyses
    lines: list[str] = []
    for name, alt in (("scaling.png", "step speedup"), ("scaling_by_class.png", "speedup by op class")):
        if name in img:
            lines += [f"![{alt}]({name})", ""]
    classes = _scaling_classes(result)
    rows = []
    for w in s.workloads:
        for m in s.modes:
            e = a["scaling"].get(w, {}).get(m)
            if e is None:
                continue
            rows.append(
                [w, m]
                + [f"{_ms(t)} ({_x(x)})" for t, x in zip(e["step_s"], e["speedup"])][-4:]
                + [_x(e["class_speedup"][c][-1]) if c in e["class_speedup"] else "–" for c in classes]
            )
    if rows:
        ths = [str(n) for n in s.threads][-4:]
        lines += _table(
            ["workload", "mode"]
            + [f"{n} thr ms (speedup)" for n in ths]
            + [f"{SHORT[c]} at {max(s.threads)}" for c in classes],
            rows,
        )
    return lines


def render(result: Result, images: Sequence[str] = ()) -> str:
    """The Markdown report; ``images`` are the PNG names written next to it."""
    img = set(images)
    lines = _intro(result)
    lines += _breakdown_section(result, img)
    lines += _similarity_section(result, img)
    lines += _train_vs_infer_section(result, img)
    lines += _scaling_section(result, img)
    lines += [""]
    if result.failures:
        lines += (
            ["## Failed runs", ""]
            + [
                f"- {r.workload} {r.mode} intra {r.intra} inter {r.inter} round {r.round}: {r.error}"
                for r in result.failures
            ]
            + [""]
        )
    lines += ["The numbers behind every table and figure: `characterize.json`.", ""]
    return "\n".join(lines)


def _intro(result: Result) -> list[str]:
    """The title, the host, what was measured and how."""
    s, h = result.settings, result.host
    ok = [r for r in result.runs if r.ok]
    return [
        "# Workload characterization (Fathom's four analyses)",
        "",
        f"Host: {h.get('processor', 'unknown')}, CPU budget {h.get('cpu_budget')}; TensorFlow "
        f"{h.get('tensorflow', '?')}, Python {h.get('python', '?')}.  ",
        f"Workloads ({len(s.workloads)}): {', '.join(s.workloads)}.  ",
        f"Size {s.size}{'' if s.batch is None else f', batch {s.batch}'}; modes {', '.join(s.modes)}; intra-op "
        f"threads {', '.join(map(str, s.threads))} (inter-op 1); inter-op pools {', '.join(map(str, s.inter))} at "
        f"intra-op {max(s.threads)}; {s.steps} traced steps after {s.warmup} warm-up, {s.rounds} round(s).  ",
        f"{len(result.runs)} runs, each in a fresh process ({len(ok)} ok, {len(result.failures)} failed); "
        f"wall time {result.wall_s:.0f} s.",
        "",
        "Kernel time is what the native tracer recorded (`tf_autopar.trace()`); shares are of the summed kernel "
        "time of one step at the largest intra-op count with one inter-op thread. Method and the comparison with "
        "Fathom's published findings: docs/characterization.md in tf_autopar.",
        "",
    ]


def _breakdown_row(w: str, m: str, e: dict[str, Any] | None) -> list[str]:
    """A workload and mode's step, kernel time, class shares, tax and dominant op types."""
    if e is None:
        return [w, m, "no data"] + [""] * (len(OP_CLASSES) + 3)
    dom = ", ".join(f"{t} {_pct(x)}" for t, x in e["dominant_types"])
    return (
        [w, m, _ms(e["step_s"]), _ms(e.get("kernel_s"))]
        + [_pct(e["shares"][c]) for c in OP_CLASSES]
        + [_pct(e["tax_fraction"]), f"{len(e['dominant_types'])} of {e['n_types']}: {dom}"]
    )


def _breakdown_section(result: Result, img: set[str]) -> list[str]:
    """1. Where the time goes: the table per workload and mode, and the op types no rule placed."""
    s, a = result.settings, result.analyses
    bd = a["breakdown"]
    lines = ["## 1. Where the time goes", ""]
    if "time_by_class.png" in img:
        lines += ["![kernel time by op class](time_by_class.png)", ""]
    rows = [_breakdown_row(w, m, bd.get(w, {}).get(m)) for w in s.workloads for m in s.modes]
    lines += _table(
        ["workload", "mode", "ms/step", "kernel ms/step"]
        + [SHORT[c] for c in OP_CLASSES]
        + ["tax", "op types for 90% of kernel time"],
        rows,
    )
    lines += [
        "",
        "*kernel ms/step*: the summed time of the kernels traced in one step (can exceed the step "
        "on several threads, or be a small part of it when framework overhead dominates). "
        "*tax*: the programmability tax, the share of wall time during which no heavy kernel "
        "(convolution, matmul, embedding look-up, recurrent cell) runs (`heavy_share().tax_fraction`).",
        "",
    ]
    unknown = a.get("unknown_types") or []
    lines += [
        f"Op types no rule placed (counted as *other*): {', '.join(unknown)}."
        if unknown
        else "Every recorded op type was placed by the op-class table (none fell to *other* unknown).",
        "",
    ]
    return lines


def _similarity_section(result: Result, img: set[str]) -> list[str]:
    """2. Similarity: per mode, the groups and each workload's nearest."""
    lines = [
        "## 2. Similarity",
        "",
        "Cosine similarity of the op-class share profiles, clustered by average linkage on "
        f"1 - similarity; groups are cut at distance {GROUP_DISTANCE} (similarity {1 - GROUP_DISTANCE:.1f}).",
        "",
    ]
    for m, sim in result.analyses["similarity"].items():
        lines += [f"### {m}", ""]
        name = f"similarity_{m}.png"
        if name in img:
            lines += [f"![similarity, {m}]({name})", ""]
        multi = [g for g in sim.groups if len(g) > 1]
        single = [g[0] for g in sim.groups if len(g) == 1]
        if multi:
            lines += [
                "Groups: "
                + "; ".join("{" + ", ".join(g) + "}" for g in multi)
                + (f"; alone: {', '.join(single)}." if single else ".")
            ]
        elif sim.labels:
            lines += [f"No two workloads group together at this distance ({', '.join(single)})."]
        if sim.nearest:
            lines += ["", "Nearest: " + "; ".join(f"{k} -> {v[0]} ({v[1]:.2f})" for k, v in sim.nearest.items()) + "."]
        lines += [""]
    return lines


def _train_vs_infer_section(result: Result, img: set[str]) -> list[str]:
    """3. Training vs inference: step times, their ratio and the largest share shifts."""
    tvi = result.analyses["train_vs_infer"]
    lines = ["## 3. Training vs inference", ""]
    if not tvi:
        return lines + ["Not measured: needs both modes (`--modes infer,train`).", ""]
    if "train_vs_infer.png" in img:
        lines += ["![training vs inference](train_vs_infer.png)", ""]
    rows = []
    for w, e in tvi.items():
        moves = sorted(e["shift"].items(), key=lambda kv: -abs(kv[1]))[:3]
        rows.append(
            [
                w,
                _ms(e["infer_step_s"]),
                _ms(e["train_step_s"]),
                _x(e["ratio"]),
                ", ".join(f"{SHORT[c]} {v * 100:+.0f} pp" for c, v in moves if abs(v) >= 0.005) or "none",
            ]
        )
    lines += _table(
        ["workload", "infer ms/step", "train ms/step", "train/infer", "largest share shifts (train - infer)"], rows
    )
    return lines + ["", "Both modes at each workload's own batch (the table in section 1 has it per run).", ""]


def _scaling_section(result: Result, img: set[str]) -> list[str]:
    """4. Parallel scaling: intra-op speedups (overall and per op class), then the inter-op pools."""
    s = result.settings
    lines = ["## 4. Parallel scaling", ""]
    if len(s.threads) < 2:
        lines += ["Intra-op scaling not measured: it needs two or more intra-op counts (`--threads 1,2,...`).", ""]
    else:
        lines += [
            f"Speedup over {min(s.threads)} intra-op thread(s), inter-op 1; per op class: that class's kernel "
            "time per step at the smallest count over its time at n (classes holding at least "
            f"{MIN_CLASS_SHARE:.0%} of it).",
            "",
        ]
        lines += _scaling_table(result, img)
    ip = result.analyses["inter_pools"]
    if ip:
        lines += ["", f"Inter-op pools at intra-op {max(s.threads)} (speedup over one inter-op thread):", ""]
        rows = [
            [w, m] + [f"{i}: {_ms(t)} ms ({_x(x)})" for i, t, x in zip(e["inter"], e["step_s"], e["speedup"])]
            for w, modes in ip.items()
            for m, e in modes.items()
        ]
        width = max(len(r) for r in rows)
        lines += _table(
            ["workload", "mode"] + [f"inter-op {i}" for i in range(1, width - 1)],
            [r + [""] * (width - len(r)) for r in rows],
        )
    return lines


def _save(fig: Any, path: Path, **kw: Any) -> bool:
    import matplotlib.pyplot as plt

    if not kw:
        fig.tight_layout()
    fig.savefig(path, dpi=110, **kw)
    plt.close(fig)
    return True


def _colors() -> dict[str, Any]:
    import matplotlib

    cmap = matplotlib.colormaps["tab10"]
    return {c: cmap(i) for i, c in enumerate(OP_CLASSES)}


def _annotate(ax: Any, mat: Any, *, fontsize: int, light_below: float, skip_nan: bool = False) -> None:
    """Each cell of a heat map's matrix written on it to two decimals: white on the dark cells
    (below ``light_below``), black on the light ones; NaN cells left blank with ``skip_nan``."""
    for i in range(mat.shape[0]):
        for j in range(mat.shape[1]):
            if skip_nan and np.isnan(mat[i, j]):
                continue
            ax.text(
                j,
                i,
                f"{mat[i, j]:.2f}",
                ha="center",
                va="center",
                fontsize=fontsize,
                color="white" if mat[i, j] < light_below else "black",
            )


def plot_time_by_class(result: Result, path: Path) -> bool:
    import matplotlib.pyplot as plt

    bd, s = result.analyses["breakdown"], result.settings
    modes = [m for m in s.modes if any(m in bd.get(w, {}) for w in s.workloads)]
    if not modes:
        return False
    colors = _colors()
    fig, axes = plt.subplots(
        len(modes), 1, figsize=(max(6, 0.6 * len(s.workloads) + 3), 3.6 * len(modes)), squeeze=False
    )
    for ax, m in zip(axes[:, 0], modes):
        ws = [w for w in s.workloads if m in bd.get(w, {})]
        bottom = [0.0] * len(ws)
        for c in OP_CLASSES:
            vals = [bd[w][m]["shares"][c] for w in ws]
            ax.bar(ws, vals, bottom=bottom, color=colors[c], label=c)
            bottom = [b + v for b, v in zip(bottom, vals)]
        ax.plot(ws, [bd[w][m]["tax_fraction"] for w in ws], "kD", label="programmability tax (of wall time)")
        ax.set_ylim(0, 1.02)
        ax.set_ylabel("share of kernel time")
        ax.set_title(f"{m}: kernel time by op class")
        ax.tick_params(axis="x", rotation=45)
    axes[0, 0].legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    return _save(fig, path)


def plot_similarity(sim: Any, mode: str, path: Path) -> bool:
    if sim.linkage is None or len(sim.labels) < 2:
        return False
    import matplotlib.pyplot as plt
    from scipy.cluster.hierarchy import dendrogram

    n = len(sim.labels)
    fig = plt.figure(figsize=(3 + 0.45 * n + 2, 1 + 0.45 * n + 1))
    ax_d = fig.add_axes((0.02, 0.1, 0.18, 0.78))
    dn = dendrogram(
        sim.linkage, orientation="left", labels=sim.labels, ax=ax_d, no_labels=True, color_threshold=GROUP_DISTANCE
    )
    ax_d.set_axis_off()
    order = dn["leaves"][::-1]  # top to bottom as drawn
    ax = fig.add_axes((0.28, 0.1, 0.55, 0.78))
    mat = sim.matrix[order][:, order]
    im = ax.imshow(mat, vmin=0, vmax=1, cmap="viridis")
    names = [sim.labels[i] for i in order]
    ax.set_xticks(range(n), names, rotation=90, fontsize=8)
    ax.set_yticks(range(n), names, fontsize=8)
    if n <= 16:
        _annotate(ax, mat, fontsize=6, light_below=0.6)
    ax.set_title(f"{mode}: cosine similarity of op-class profiles")
    fig.colorbar(im, cax=fig.add_axes((0.86, 0.1, 0.02, 0.78)))
    return _save(fig, path, bbox_inches="tight")


def plot_train_vs_infer(result: Result, path: Path) -> bool:
    tvi = result.analyses["train_vs_infer"]
    if not tvi:
        return False
    import matplotlib.pyplot as plt

    ws = list(tvi)
    fig, (ax1, ax2) = plt.subplots(
        1, 2, figsize=(12, max(3.5, 0.35 * len(ws) + 1.5)), gridspec_kw={"width_ratios": [1, 2]}
    )
    ax1.barh(ws, [tvi[w]["ratio"] for w in ws], color="tab:gray")
    ax1.invert_yaxis()
    ax1.axvline(1, color="k", lw=0.8)
    ax1.set_xlabel("train / infer step time")
    shift = np.array([[tvi[w]["shift"][c] * 100 for c in OP_CLASSES] for w in ws])
    lim = max(1.0, float(np.nanmax(np.abs(shift))))
    im = ax2.imshow(shift, cmap="RdBu_r", vmin=-lim, vmax=lim, aspect="auto")
    ax2.set_xticks(range(len(OP_CLASSES)), [SHORT[c] for c in OP_CLASSES], rotation=45, ha="right", fontsize=8)
    ax2.set_yticks(range(len(ws)), ws, fontsize=8)
    for i in range(len(ws)):
        for j in range(len(OP_CLASSES)):
            if abs(shift[i, j]) >= 0.5:
                ax2.text(j, i, f"{shift[i, j]:+.0f}", ha="center", va="center", fontsize=7)
    ax2.set_title("share shift, train - infer (percentage points)")
    fig.colorbar(im, ax=ax2)
    return _save(fig, path)


def plot_scaling(result: Result, path: Path) -> bool:
    sc, s = result.analyses["scaling"], result.settings
    modes = [m for m in s.modes if any(m in sc.get(w, {}) for w in s.workloads)]
    if not modes or len(s.threads) < 2:
        return False
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(modes), figsize=(5.5 * len(modes), 4), squeeze=False)
    for ax, m in zip(axes[0], modes):
        for w in s.workloads:
            e = sc.get(w, {}).get(m)
            if e:
                ax.plot(e["threads"], e["speedup"], marker="o", label=w)
        ax.plot(s.threads, s.threads, "k--", lw=0.8, label="linear")
        ax.set_xlabel("intra-op threads (inter-op 1)")
        ax.set_ylabel("speedup over 1 thread")
        ax.set_title(f"{m}: step speedup")
        ax.set_xticks(list(s.threads))
    axes[0, -1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return _save(fig, path)


def plot_scaling_by_class(result: Result, path: Path) -> bool:
    sc, s = result.analyses["scaling"], result.settings
    classes = _scaling_classes(result)
    rows = [(f"{w} {m}", sc[w][m]) for w in s.workloads for m in s.modes if m in sc.get(w, {})]
    if not rows or not classes or len(s.threads) < 2:
        return False
    import matplotlib.pyplot as plt

    mat = np.array(
        [[e["class_speedup"][c][-1] if c in e["class_speedup"] else np.nan for c in classes] for _, e in rows],
        dtype=float,
    )
    fig, ax = plt.subplots(figsize=(2 + 1.1 * len(classes), 1 + 0.35 * len(rows)))
    im = ax.imshow(mat, cmap="viridis", vmin=0, vmax=max(s.threads), aspect="auto")
    ax.set_xticks(range(len(classes)), [SHORT[c] for c in classes], rotation=45, ha="right", fontsize=8)
    ax.set_yticks(range(len(rows)), [r[0] for r in rows], fontsize=8)
    _annotate(ax, mat, fontsize=7, light_below=max(s.threads) * 0.6, skip_nan=True)
    ax.set_title(f"speedup by op class at {max(s.threads)} intra-op threads")
    fig.colorbar(im, ax=ax)
    return _save(fig, path)


def write_files(result: Result, folder: Path) -> list[str]:
    """All outputs into ``folder``; the names written."""
    import matplotlib

    matplotlib.use("Agg")
    images = []
    for name, fn in (
        ("time_by_class.png", plot_time_by_class),
        ("train_vs_infer.png", plot_train_vs_infer),
        ("scaling.png", plot_scaling),
        ("scaling_by_class.png", plot_scaling_by_class),
    ):
        if fn(result, folder / name):
            images.append(name)
    for m, sim in result.analyses["similarity"].items():
        name = f"similarity_{m}.png"
        if plot_similarity(sim, m, folder / name):
            images.append(name)
    (folder / "report.md").write_text(render(result, images), encoding="utf-8")
    (folder / "characterize.json").write_text(dumps(result) + "\n", encoding="utf-8")
    return ["report.md", "characterize.json", *images]


def write_all(result: Result, out_dir: Path) -> list[str]:
    """Everything, published into ``out_dir`` at once (stage_and_publish)."""
    return stage_and_publish(out_dir, lambda folder: write_files(result, folder))


def result_json(result: Result) -> dict[str, Any]:
    """characterize.json: settings, host, every run, and the analyses."""
    a = result.analyses

    def clean(x: Any) -> Any:
        if isinstance(x, float):
            return None if math.isnan(x) else x
        if isinstance(x, dict):
            return {str(k): clean(v) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return [clean(v) for v in x]
        return x

    return clean(
        {
            "settings": result.settings.to_dict(),
            "host": result.host,
            "wall_s": result.wall_s,
            "breakdown": a["breakdown"],
            "similarity": {m: sim.to_dict() for m, sim in a["similarity"].items()},
            "train_vs_infer": a["train_vs_infer"],
            "scaling": a["scaling"],
            "inter_pools": a["inter_pools"],
            "unknown_types": a["unknown_types"],
            "runs": [r.to_dict() for r in result.runs],
        }
    )


def stage_and_publish(out_dir: Path, write: Callable[[Path], list[str]]) -> list[str]:
    """Write everything into a staging directory inside ``out_dir`` and move it in at the end, so
    a failure leaves ``out_dir`` as it was (and removes it if this call created it)."""
    created = not out_dir.exists()
    out_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".characterize-", dir=out_dir))
    try:
        names = write(staging)
        for name in names:
            os.replace(staging / name, out_dir / name)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        if created:
            shutil.rmtree(out_dir, ignore_errors=True)
        raise
    shutil.rmtree(staging, ignore_errors=True)
    return names


def dumps(result: Result) -> str:
    return json.dumps(result_json(result), indent=2)


__all__ = ["dumps", "render", "result_json", "stage_and_publish", "write_all", "write_files"]

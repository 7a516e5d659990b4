"""Fathom's characterization as one call: measure every (workload, mode, threads) in a fresh
process, analyse, and write DIR/report.md, DIR/characterize.json and the PNGs.

Why fresh processes: TensorFlow fixes its thread pools when its runtime starts, so each
intra-op / inter-op setting is measured in a child started with TF_NUM_INTRAOP_THREADS and
TF_NUM_INTEROP_THREADS set; the child is ``tf-autopar trace WORKLOAD --json`` (the native
tracer, the workload's graph for embedding look-ups), and this process never imports
TensorFlow. Which names are workloads is the caller's business (``known``): this module does
not import the workloads package.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import platform
import sys
import tempfile
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, Callable, Sequence

import tf_autopar
from tf_autopar.characterization.analysis import Run, analyze, summarize_payload
from tf_autopar.characterization.classes import check_classes
from tf_autopar.characterization.report import write_all
from tf_autopar.characterization.result import MODES, SIZES, Result, Settings
from tf_autopar.measure.progress import Progress
from tf_autopar.measure.runner import OK, clean_env, run_child

log = logging.getLogger("tf_autopar.characterization")


@dataclass(frozen=True)
class Spec:
    """One child process."""

    workload: str
    mode: str
    intra: int
    inter: int
    round: int

    @property
    def label(self) -> str:
        return f"{self.workload} {self.mode} intra {self.intra} inter {self.inter}"


def _positive(name: str, values: Sequence[int]) -> None:
    bad = [v for v in values if not isinstance(v, int) or v < 1]
    if bad:
        raise ValueError(f"{name} must be positive integers, got {', '.join(map(str, bad))}")


def check_settings(s: Settings, known: Sequence[str], budget: int) -> Settings:
    """ValueError for anything a run would only discover later; the settings, deduplicated."""
    if not s.workloads:
        raise ValueError("name at least one workload")
    bad = [w for w in s.workloads if w not in known]
    if bad:
        raise ValueError(f"unknown workload {', '.join(repr(b) for b in bad)}; choose from {', '.join(sorted(known))}")
    if s.size not in SIZES:
        raise ValueError(f"unknown size {s.size!r}; choose from {', '.join(SIZES)}")
    bad = [m for m in s.modes if m not in MODES]
    if bad or not s.modes:
        raise ValueError(f"unknown mode {', '.join(repr(b) for b in bad) or '(none)'}; choose from {', '.join(MODES)}")
    if not s.threads:
        raise ValueError("give at least one intra-op thread count")
    _positive("thread counts", s.threads)
    _positive("inter-op pool sizes", s.inter)
    over = [n for n in s.threads if n > budget]
    if over:
        raise ValueError(
            f"thread count {', '.join(map(str, over))} is above this host's CPU budget of {budget} "
            "(tf_autopar.detect_topology().cpu_budget): the extra threads would only time-share"
        )
    over = [n for n in s.inter if n > budget]
    if over:
        raise ValueError(f"inter-op pool size {', '.join(map(str, over))} is above the CPU budget of {budget}")
    for ok, message in (
        (
            not isinstance(s.steps, bool) and isinstance(s.steps, int) and s.steps >= 1,
            f"--steps must be a positive integer, got {s.steps}",
        ),
        (s.warmup >= 0, f"--warmup must be zero or more, got {s.warmup}"),
        (s.rounds >= 1, f"--rounds must be a positive integer, got {s.rounds}"),
        (s.batch is None or s.batch >= 1, f"--batch must be a positive integer, got {s.batch}"),
        (s.timeout_s > 0, f"--timeout must be positive, got {s.timeout_s}"),
    ):
        if not ok:
            raise ValueError(message)
    classes = tuple(check_classes(s.classes)) if s.classes else ()
    dedup = lambda xs: tuple(dict.fromkeys(xs))  # noqa: E731
    return Settings(
        workloads=dedup(s.workloads),
        threads=tuple(sorted(set(s.threads))),
        size=s.size,
        modes=dedup(s.modes),
        inter=tuple(sorted(set(s.inter) | {1})),
        steps=s.steps,
        warmup=s.warmup,
        rounds=s.rounds,
        batch=s.batch,
        timeout_s=s.timeout_s,
        classes=classes,
    )


def default_threads(budget: int) -> tuple[int, ...]:
    """1, 2, 4, ... up to the budget, and the budget itself."""
    out, n = [], 1
    while n < budget:
        out.append(n)
        n *= 2
    return tuple(out + [budget])


def plan_runs(s: Settings) -> list[Spec]:
    """Every child, interleaved: each round visits every workload and mode, and within one the
    configurations alternate direction from round to round (drift hits all of them alike)."""
    top = max(s.threads)
    configs = [(n, 1) for n in s.threads] + [(top, i) for i in s.inter if i != 1]
    specs = []
    for rnd in range(s.rounds):
        order = configs if rnd % 2 == 0 else configs[::-1]
        for w in s.workloads:
            for m in s.modes:
                specs += [Spec(w, m, intra, inter, rnd) for intra, inter in order]
    return specs


def check_out_dir(out: str | os.PathLike[str]) -> Path:
    """The output directory, refused now (ValueError / PermissionError) if it cannot be written;
    nothing is created here."""
    p = Path(out).expanduser()
    if p.exists() and not p.is_dir():
        raise ValueError(f"--out {p}: exists and is not a directory")
    anchor = p
    while not anchor.exists():
        if anchor.parent == anchor:
            break
        anchor = anchor.parent
    if not anchor.is_dir():
        raise ValueError(f"--out {p}: {anchor} is not a directory")
    try:
        probe = tempfile.mkdtemp(prefix=".characterize-probe-", dir=anchor)
    except OSError as exc:
        raise PermissionError(f"--out {p}: cannot write in {anchor}: {exc.strerror or exc}") from None
    os.rmdir(probe)
    return p


def check_dependencies() -> None:
    """scipy and matplotlib are needed only at the end: say so before an hour of measuring."""
    missing = [m for m in ("scipy", "matplotlib") if importlib.util.find_spec(m) is None]
    if missing:
        raise ValueError(f"characterize needs {' and '.join(missing)}: pip install 'tf_autopar[characterize]'")


def child_command(spec: Spec, s: Settings) -> list[str]:
    cmd = [
        sys.executable,
        "-m",
        "tf_autopar.cli.main",
        "trace",
        spec.workload,
        "--json",
        "--mode",
        spec.mode,
        "--size",
        s.size,
        "--steps",
        str(s.steps),
        "--warmup",
        str(s.warmup),
    ]
    if s.batch is not None:
        cmd += ["--batch", str(s.batch)]
    return cmd


def child_env(spec: Spec) -> dict[str, str]:
    """The parent's environment without thread variables, plus this run's pools."""
    env, _ = clean_env()
    env.update(
        TF_NUM_INTRAOP_THREADS=str(spec.intra),
        TF_NUM_INTEROP_THREADS=str(spec.inter),
        OMP_NUM_THREADS=str(spec.intra),
        TF_CPP_MIN_LOG_LEVEL=env.get("TF_CPP_MIN_LOG_LEVEL", "2"),
    )
    return env


def _check_payload(payload: dict[str, Any]) -> None:
    if not isinstance(payload.get("by_type"), list) or not payload.get("steps") or not payload.get("wall_s"):
        raise ValueError("not a trace result (by_type, steps, wall_s)")


def measure(spec: Spec, s: Settings) -> Run:
    """One child; its failure becomes a Run with ok=False and the reason."""
    res = run_child(child_command(spec, s), child_env(spec), s.timeout_s, validate=_check_payload)
    if res.status != OK or res.payload is None:
        tail = res.stderr_tail.strip().splitlines()[-1:] if res.stderr_tail else []
        error = res.error + (f": {tail[0]}" if tail else "")
        log.warning("characterize: %s failed: %s", spec.label, error)
        return Run(spec.workload, spec.mode, spec.intra, spec.inter, spec.round, ok=False, error=error)
    return summarize_payload(res.payload, spec.workload, spec.mode, spec.intra, spec.inter, spec.round)


def host_info(budget: int) -> dict[str, Any]:
    """Processor, budget and versions, without importing TensorFlow."""
    info: dict[str, Any] = {"cpu_budget": budget, "python": platform.python_version(), "machine": platform.machine()}
    try:
        info["processor"] = tf_autopar.detect_topology().cpu.model
    except Exception as exc:  # noqa: BLE001 - the report says unknown
        log.info("processor model unknown: %s", exc)
        info["processor"] = "unknown"
    for dist in ("tensorflow-cpu", "tensorflow"):
        try:
            info["tensorflow"] = metadata.version(dist)
            break
        except metadata.PackageNotFoundError:
            continue
    return info


def characterize(
    workloads: Sequence[str],
    out: str | os.PathLike[str],
    *,
    known: Sequence[str],
    size: str = "tiny",
    modes: Sequence[str] = MODES,
    threads: Sequence[int] | None = None,
    inter: Sequence[int] = (1, 2),
    steps: int = 10,
    warmup: int = 2,
    rounds: int = 1,
    batch: int | None = None,
    timeout_s: float = 600.0,
    classes: Sequence[str] = (),
    progress: bool = True,
    budget: int | None = None,
    measure_fn: Callable[[Spec, Settings], Run] | None = None,
) -> Result:
    """Measure, analyse and write the report into ``out``. Bad input raises ValueError (or
    PermissionError for ``out``) before anything runs; files appear in ``out`` only at the end,
    all together. ``known``: the valid workload names (the caller's catalogue)."""
    if budget is None:
        budget = tf_autopar.detect_topology().cpu_budget
    s = check_settings(
        Settings(
            workloads=tuple(workloads),
            threads=tuple(threads or default_threads(budget)),
            size=size,
            modes=tuple(modes),
            inter=tuple(inter),
            steps=steps,
            warmup=warmup,
            rounds=rounds,
            batch=batch,
            timeout_s=timeout_s,
            classes=tuple(classes),
        ),
        known,
        budget,
    )
    out_dir = check_out_dir(out)
    check_dependencies()
    specs = plan_runs(s)
    log.info("characterize: %d runs in fresh processes", len(specs))
    bar = Progress(len(specs), enabled=progress)
    bar.show("starting (each run imports TensorFlow: seconds)")
    start = time.monotonic()
    runs = []
    do = measure_fn or measure
    try:
        for spec in specs:
            run = do(spec, s)
            runs.append(run)
            bar.update(f"{spec.label}: " + (f"{run.step_s * 1e3:.2f} ms/step" if run.ok else "failed"))
    finally:
        bar.close()
    wall = time.monotonic() - start
    analyses = analyze(runs, s.workloads, s.modes)
    result = Result(settings=s, runs=runs, analyses=analyses, host=host_info(budget), wall_s=wall)
    result.files = write_all(result, out_dir)
    return result

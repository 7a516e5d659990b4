"""The child functions of ``bench``, ``validate`` and ``tune`` for a user's model or a bundled workload.

Each runs in a fresh process under measure/child.py's protocol (``python -m
tf_autopar.measure.child tf_autopar.models.child:FUNCTION ARG ...``: one JSON object on stdout,
or its error object; TensorFlow's logging goes to stderr):

- ``run MODEL --mode infer --batch B --steps S --size SIZE --warmup W --json [--time T]
  [--enable MODE] [model flags]``: the ``workloads run`` contract (``step_times_s``, one
  request per step, fetched to numpy), so the validation harness can run it as a row's
  runner; plus the effective thread settings the process ran with. ``--enable MODE`` calls
  ``tf_autopar.enable(mode=MODE)`` with no model before anything else, as a user's server
  would. With ``TF_AUTOPAR_BENCH_BARRIER=DIR|COUNT|TIMEOUT`` in the environment, the timed
  loop starts only when COUNT sibling processes have finished warming up (throughput mode:
  the streams must overlap to be summed).
- ``prepare MODEL --batch B --plan-mode latency|throughput [model flags]``: load the model,
  check and describe its inputs, analyse it and plan it; on bad input the protocol's error
  object and exit status 2, so the parent can report it before measuring anything.
- ``steps WORKLOAD --mode infer|train --batch B --steps S --size SIZE --warmup W [--json]``: a
  bundled workload's steps timed by its runner (what ``tf-autopar workloads run --json``
  prints): the validation harness's runner for workload rows, and ``tune --mode training``'s.
- ``export WORKLOAD --batch B --size SIZE --out DIR``: a bundled workload's inference function
  as a SavedModel (``DIR/saved_model``, signature ``serving_default``) and its synthetic batch
  as ``DIR/inputs.npz``, named as the signature's inputs. Why: the frozen path is a loaded
  SavedModel's (``enable()``'s fast path routes ``tf.saved_model.load``'s signatures, not a
  tf.function), so ``validate`` measures a workload's frozen sessions and live tuning by
  running ``run`` on this export with ``--inputs``: the same weights and the same batch as
  ``steps`` times.

Run only in a fresh process: loading the model starts TensorFlow, which fixes its pools.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any, Callable

import tf_autopar
import tf_autopar.planning.variables as V
import tf_autopar_workloads as workloads
from tf_autopar._model_path import looks_like_model
from tf_autopar._numbers import add_batch_flag, count, seconds
from tf_autopar.graph import analyze
from tf_autopar.measure.child import ChildError, command
from tf_autopar.models.load import prepare_model
from tf_autopar.models.options import add_model_flags, from_args
from tf_autopar.planning import plan
from tf_autopar.planning.modes import INFERENCE_MODES, MODES
from tf_autopar.runtime.plans import calibration_for
from tf_autopar.runtime.openmp import openmp_state
from tf_autopar.runtime.streams import StreamPool
from tf_autopar.topology import detect_topology

# TensorFlow, numpy and the workloads' runner (which imports numpy) are imported where a child
# uses them: this module is imported by the parents too (the CLI, bench), which never start them.

BARRIER_VAR = "TF_AUTOPAR_BENCH_BARRIER"
EXIT_BARRIER = 3
RUN, PREPARE, STEPS, EXPORT = (f"{__name__}:{f}" for f in ("run", "prepare", "steps", "export"))
RUN_CHILD = tuple(command(RUN))  # the command prefixes, for the parents
PREPARE_CHILD = tuple(command(PREPARE))
STEPS_CHILD = tuple(command(STEPS))
EXPORT_CHILD = tuple(command(EXPORT))
EXPORT_SIGNATURE = "serving_default"


def _affinity() -> list[int]:
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return list(range(os.cpu_count() or 1))


def tf_compute_threads() -> int:
    """Inter-op pool threads alive now (TensorFlow names them tf_Compute)."""
    n = 0
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return 0
    for t in tasks:
        try:
            with open(f"/proc/self/task/{t}/comm") as f:
                n += f.read().strip() == "tf_Compute"
        except OSError:
            continue
    return n


def effective_settings() -> dict[str, Any]:
    """The thread settings this process runs with, after its run (what the report prints).

    inter/intra: the tf.config.threading value when set, else TF_NUM_* from the environment,
    else TensorFlow's own choice (the CPUs in the affinity mask).
    """
    env = {k: v for k, v in os.environ.items() if V.is_thread_setting(k)}
    cpus = _affinity()
    api = (0, 0)
    if "tensorflow" in sys.modules:
        import tensorflow as tf

        api = (
            tf.config.threading.get_inter_op_parallelism_threads(),
            tf.config.threading.get_intra_op_parallelism_threads(),
        )
    counts: list[int] = []
    sources: list[str] = []
    for value, var in zip(api, V.POOLS):
        text = env.get(var, "")
        if value:
            count, source = int(value), "tf.config.threading"
        elif text.isascii() and text.isdigit() and int(text) > 0:
            count, source = int(text), var
        else:
            count, source = len(cpus), "TensorFlow default (CPUs in the affinity mask)"
        counts.append(count)
        sources.append(source)
    return {
        "inter_op": counts[0],
        "intra_op": counts[1],
        "inter_source": sources[0],
        "intra_source": sources[1],
        "env": dict(sorted(env.items())),
        "cpus": cpus,
        "tf_compute_threads": tf_compute_threads(),
        "openmp": openmp_state(),
        "pid": os.getpid(),
    }


def _barrier() -> float:
    """Wait for every sibling stream (see the module docstring); returns the seconds waited."""
    spec = os.environ.get(BARRIER_VAR)
    if not spec:
        return 0.0
    directory, count, timeout = spec.split("|")
    t0 = time.monotonic()
    with open(os.path.join(directory, f"ready-{os.getpid()}"), "w"):
        pass
    while True:
        names = os.listdir(directory)
        if "abort" in names:
            raise ChildError("a sibling stream failed before the timed loop", EXIT_BARRIER)
        if sum(n.startswith("ready-") for n in names) >= int(count):
            return time.monotonic() - t0
        if time.monotonic() - t0 > float(timeout):
            raise ChildError(
                f"only {sum(n.startswith('ready-') for n in names)} of {count} streams were ready after {timeout} s",
                EXIT_BARRIER,
            )
        time.sleep(0.002)


def measure(step: Callable[[], Any], warmup: int, steps: int, time_s: float | None) -> dict[str, Any]:
    """Warm up, wait at the barrier, then time requests: ``steps`` of them, or for ``time_s`` seconds."""
    for _ in range(warmup):
        step()
    waited = _barrier()
    times: list[float] = []
    start = time.perf_counter()
    while True:
        t0 = time.perf_counter()
        step()
        t1 = time.perf_counter()
        times.append(t1 - t0)
        if (time_s is not None and t1 - start >= time_s) or (time_s is None and len(times) >= steps):
            break
    loop = time.perf_counter() - start
    return {
        "step_times_s": times,
        "requests": len(times),
        "loop_s": loop,
        "throughput_rps": len(times) / loop if loop > 0 else None,
        "barrier_wait_s": waited,
    }


def _summary(times: list[float]) -> dict[str, float]:
    import numpy as np

    p10, p50, p90, p99 = np.percentile(np.asarray(times, dtype=float), [10, 50, 90, 99])
    return {"median_s": float(p50), "p10_s": float(p10), "p90_s": float(p90), "p99_s": float(p99)}


def _workload_step(name: str, size: str, batch: int) -> tuple[Callable[[], None], dict[str, Any]]:
    """A bundled workload's inference request, built by the workloads runner (its function path)."""
    import tensorflow as tf
    from tf_autopar_workloads import runner

    built = runner.build(name, size=size, batch=batch)
    fn = built.infer_function()
    args = [tf.constant(a) for a in tf.nest.flatten(built.inputs)]

    def step() -> None:
        for o in fn(*args):
            o.numpy()

    info = {
        "model": {"kind": "workload", "path": name, "size": size, "signature": None},
        "inputs": [
            {"name": f"input_{i}", "dtype": str(a.dtype), "shape": list(a.shape), "source": "workload"}
            for i, a in enumerate(tf.nest.flatten(built.inputs))
        ],
        "build_s": built.build_s,
    }
    return step, info


TUNED_CHECK_S = 0.25  # --until-tuned: how often it asks status() whether tuning is done
LIVE_LIMIT_S = 300.0  # --until-tuned: the longest a child feeds live tuning before it measures anyway


def _until_served(step: Callable[[], Any]) -> float | None:
    """With enable(), a loaded SavedModel switches to its frozen session after its first call (built
    in the background, runtime/fastpath/): one call, then the wait for the build, so that the
    measured calls are the steady state a server reaches. Seconds it took (None: no fast path)."""
    if "tf_autopar.runtime.fastpath.roster" not in sys.modules:  # nothing was routed
        return None
    fastpath = sys.modules["tf_autopar.runtime.fastpath"]
    t0 = time.perf_counter()
    step()
    fastpath.wait_idle(600)
    return round(time.perf_counter() - t0, 3)


def _until_tuned(step: Callable[[], Any], limit_s: float = LIVE_LIMIT_S) -> float | None:
    """With enable(), live tuning measures the served setting's neighbours on the calls it gets:
    calls until every bucket has tried them all (or ``limit_s``), so that the measured calls are
    what a server settles on. Seconds it took (None: nothing was tuned)."""
    t0 = time.perf_counter()
    checked = t0 - TUNED_CHECK_S  # the first check right after the first call
    while time.perf_counter() - t0 < limit_s:
        step()
        if time.perf_counter() - checked < TUNED_CHECK_S:
            continue  # status() builds every record: not once per call
        checked = time.perf_counter()
        buckets = [b for s in tf_autopar.status().served for b in s.buckets if b.calls]
        if buckets and all(b.path != "frozen session" or b.tuned for b in buckets):
            return round(checked - t0, 3)
    return None


def frozen_pools(setting: str) -> tuple[int, int]:
    """'2x1' -> (2, 1): a frozen session's own pools (bench's ``frozen:INTERxINTRA``); ValueError
    naming the problem."""
    parts = setting.split("x")
    if len(parts) != 2 or not all(p.isascii() and p.isdigit() and int(p) >= 1 for p in parts):
        raise ValueError(f"a frozen session's pools are INTERxINTRA of positive integers (e.g. 2x1), got {setting!r}")
    return int(parts[0]), int(parts[1])


def _frozen_step(prepared: Any, setting: str, engine: str = "") -> Callable[[], Any]:
    """The prepared model's frozen graph in one session with ``setting`` ("INTERxINTRA") as its
    own pools (TF_OVERRIDE_GLOBAL_THREADPOOL=1, set by the parent): the fast path's call; or run
    by another ``engine`` (runtime/fastpath/engines/) at that setting."""
    try:
        inter, intra = frozen_pools(setting)
    except ValueError as exc:
        raise ChildError(f"--frozen: {exc}") from None
    frozen, feeds = prepared.frozen()
    if engine and engine != "tf-frozen":
        from tf_autopar.runtime.fastpath import engines

        try:
            chosen = engines.get(engine)
        except KeyError as exc:
            raise ChildError(f"--engine: {exc.args[0]}") from None
        why = chosen.available()
        if why:
            raise ChildError(f"--engine {engine}: {why}")
        convert = getattr(chosen, "convert", None)
        if convert is not None:
            convert(frozen)
        runner = chosen.build(frozen, (inter, intra, 1))
        arrays = [feeds[name] for name in frozen.inputs]
        return lambda: runner.run(arrays)
    pool = StreamPool(frozen.open_sessions(inter, intra, 1))
    return lambda: pool.run(frozen.outputs, feeds)


def frozen_sweep(prepared: Any, settings: list[str], warmup: int, steps: int) -> dict[str, Any]:
    """``--sweep``: the prepared model's frozen graph in a session of its own at each setting
    ("INTERxINTRA"), one after the other in this process (per-session pools, as live tuning
    measures its candidates): each warmed up, then ``steps`` calls timed, then closed. Setting ->
    its ``measure`` result. Per-session intra-op pools need TF_OVERRIDE_GLOBAL_THREADPOOL=1 at
    start (the parent's, or enable()'s)."""
    try:
        pools = [(s, frozen_pools(s)) for s in settings]
    except ValueError as exc:
        raise ChildError(f"--sweep: {exc}") from None
    frozen, feeds = prepared.frozen()
    out: dict[str, Any] = {}
    for label, (inter, intra) in pools:
        pool = StreamPool(frozen.open_sessions(inter, intra, 1))
        try:
            out[label] = measure(lambda p=pool: p.run(frozen.outputs, feeds), warmup + 1, steps, None)
        finally:
            pool.retire()
    return out


def run(argv: list[str]) -> dict[str, Any]:
    """Time requests (the workloads-runner contract); see the module docstring."""
    args = _run_parser().parse_args(argv)
    if args.frozen and (args.enable or not looks_like_model(args.model)):
        raise ChildError("--frozen measures a model file's frozen graph, without --enable")
    if args.sweep and not looks_like_model(args.model):
        raise ChildError("--sweep measures a model file's frozen graph")
    t_start = time.perf_counter()
    status = None
    cache_at_start = None
    if args.enable:
        cache_dir = os.environ.get("TF_AUTOPAR_CACHE_DIR")  # a first start finds it empty, a second one not
        cache_at_start = sorted(os.listdir(cache_dir)) if cache_dir and os.path.isdir(cache_dir) else None

        tf_autopar.enable(mode=args.enable)  # no model: the loader hooks (if any) see the load below
    if args.mode != "infer":
        raise ChildError(f"a model file is measured for inference only (--mode infer), got --mode {args.mode}")
    if args.steps < 1 or args.warmup < 0 or args.batch < 1 or (args.time is not None and args.time <= 0):
        raise ChildError("--steps and --batch must be positive, --warmup >= 0, --time > 0")
    try:
        options = from_args(args)
        if looks_like_model(args.model):
            prepared = prepare_model(args.model, args.batch, options)
            step = (
                _frozen_step(prepared, args.frozen, args.engine)
                if args.frozen
                else prepared.model.step(prepared.arrays)
            )
            info: dict[str, Any] = prepared.describe()
        else:
            if options.given:
                raise ChildError("--signature/--input-shape/--int-max/--inputs apply to model files, not workloads")
            step, info = _workload_step(args.model, args.size, args.batch)
    except ValueError as exc:
        raise ChildError(str(exc)) from None
    load_s = time.perf_counter() - t_start
    switch_s = _until_served(step) if args.enable else None
    tuned_s = _until_tuned(step) if args.enable and args.until_tuned else None
    result = measure(step, args.warmup, args.steps, args.time)
    sweep = frozen_sweep(prepared, args.sweep.split(","), args.warmup, args.steps) if args.sweep else None
    settings = effective_settings()
    if args.frozen:
        settings["frozen_session"] = args.frozen  # the session's own pools; the process's are above
        if args.engine:
            settings["engine"] = args.engine
    if args.enable:
        st = tf_autopar.status().to_dict()
        status = {
            "process": st.get("process"),
            "warnings": st.get("warnings"),
            "enable_ms": st.get("enable_ms"),
            "cache_files_at_start": cache_at_start,
            "served": st.get("served"),
            "switch_s": switch_s,
            "tuned_s": tuned_s,
        }
    import tensorflow as tf

    payload = {
        "workload": args.model,
        "mode": "infer",
        "size": args.size,
        "batch": args.batch,
        "steps": result["requests"],
        "path": "function",
        **result,
        **_summary(result["step_times_s"]),
        "load_s": load_s,
        "settings": settings,
        "tf_autopar": status,
        "tf_version": tf.__version__,
        **info,
    }
    if sweep is not None:
        payload["sweep"] = sweep
    try:
        from tf_autopar_workloads.runner import peak_rss_mb

        payload["peak_rss_mb"] = peak_rss_mb()
    except ImportError:
        pass
    return payload


def prepare(argv: list[str]) -> dict[str, Any]:
    """Describe, check and plan (see the module docstring)."""
    args = _prepare_parser().parse_args(argv)
    try:
        options = from_args(args)
        if args.batch < 1:
            raise ValueError(f"--batch must be a positive integer, got {args.batch}")
        if looks_like_model(args.model):
            prepared = prepare_model(args.model, args.batch, options)
            info = prepared.describe()
            profile, note = prepared.profile()
        else:
            if options.given:
                raise ValueError("--signature/--input-shape/--int-max/--inputs apply to model files, not workloads")
            from tf_autopar_workloads import runner

            workloads.module_path(args.model)  # ValueError listing the names
            built = runner.build(args.model, size=args.size, batch=args.batch)
            profile = analyze(built.graph_def("infer"))
            note = f"workload {args.model} ({args.size}) analysed at batch {args.batch}"
            import tensorflow as tf

            info = {
                "model": {"kind": "workload", "path": args.model, "size": args.size, "signature": None},
                "batch": args.batch,
                "assumptions": [],
                "inputs": [
                    {
                        "name": f"input_{i}",
                        "dtype": str(a.dtype),
                        "shape": list(a.shape),
                        "source": "workload",
                        "values": "the workload's synthetic batch",
                    }
                    for i, a in enumerate(tf.nest.flatten(built.inputs))
                ],
            }
    except ValueError as exc:
        raise ChildError(str(exc)) from None
    topology = detect_topology()
    # env={}: the plan under test must not inherit thread settings from the caller's shell. It is the
    # rule's plan with this host's calibration (what enable() applies before any tune).
    the_plan = plan(
        topology, profile, args.plan_mode, env={}, streams=args.streams, calibration=calibration_for(topology)
    )
    import tensorflow as tf

    out = {
        "ok": True,
        "tf_version": tf.__version__,
        **info,
        "profile": profile.to_dict(),
        "profile_note": note,
        "plan_mode": args.plan_mode,
        "plan": the_plan.to_dict(),
        "env": the_plan.to_env(),
        "explain": the_plan.explain(),
        "topology": topology.to_dict(),
    }
    return out


def steps(argv: list[str]) -> dict[str, Any]:
    """A bundled workload's steps, timed by its runner (``tf-autopar workloads run --json``'s object)."""
    parser = argparse.ArgumentParser(prog=STEPS)
    add_steps_flags(parser)
    return run_steps(parser.parse_args(argv))


def run_steps(args: argparse.Namespace) -> dict[str, Any]:
    """``steps`` on parsed flags (also ``tf-autopar workloads run``); ChildError for an unknown name."""
    from tf_autopar_workloads import runner

    try:
        workloads.module_path(args.name)  # ValueError listing the bundled names
    except ValueError as exc:
        raise ChildError(str(exc)) from None
    return runner.run(
        args.name,
        mode=args.mode,
        batch=args.batch,
        steps=args.steps,
        size=args.size,
        path=args.path,
        warmup=args.warmup,
        seed=args.seed,
    )


def export_args(workload: str, batch: int, size: str, out: str) -> list[str]:
    """The arguments of ``export`` (the parent's side)."""
    return [workload, "--batch", str(batch), "--size", size, "--out", out]


def export(argv: list[str]) -> dict[str, Any]:
    """A bundled workload as a SavedModel and an .npz of its batch (see the module docstring)."""
    parser = argparse.ArgumentParser(prog=EXPORT)
    parser.add_argument("name")
    add_batch_flag(parser)
    parser.add_argument("--size", choices=("tiny", "paper"), default="tiny")
    parser.add_argument("--out", required=True, help="an existing empty directory")
    args = parser.parse_args(argv)
    try:
        workloads.module_path(args.name)  # ValueError listing the bundled names
    except ValueError as exc:
        raise ChildError(str(exc)) from None
    import numpy as np
    import tensorflow as tf
    from tf_autopar_workloads import runner

    t0 = time.perf_counter()
    built = runner.build(args.name, size=args.size, batch=args.batch)
    fn = built.infer_function()
    flat = [np.asarray(a) for a in tf.nest.flatten(built.inputs)]
    names = [f"input_{i}" for i in range(len(flat))]  # as _workload_step describes them

    def serve(*xs: Any) -> dict[str, Any]:
        return {f"output_{i}": t for i, t in enumerate(fn(*xs))}

    specs = [tf.TensorSpec(a.shape, a.dtype, name=n) for a, n in zip(flat, names)]
    module = tf.Module()
    module.model = built.model  # tracked: its variables are saved
    module.serve = tf.function(serve, input_signature=specs, autograph=False)
    path = os.path.join(args.out, "saved_model")
    inputs = os.path.join(args.out, "inputs.npz")
    tf.saved_model.save(module, path, signatures={EXPORT_SIGNATURE: module.serve.get_concrete_function()})
    np.savez(inputs, **dict(zip(names, flat)))
    return {
        "ok": True,
        "workload": args.name,
        "size": args.size,
        "batch": built.batch,
        "path": path,
        "inputs": inputs,
        "signature": EXPORT_SIGNATURE,
        "input_shapes": {n: list(a.shape) for n, a in zip(names, flat)},
        "export_s": round(time.perf_counter() - t0, 3),
        "tf_version": tf.__version__,
    }


def runner_args(
    workload: str, mode: str, batch: int, steps: int, size: str, warmup: int, model: Any = None
) -> list[str]:
    """The runner contract's arguments (``run`` and ``steps`` here, or a stand-in runner);
    ``model``: a model file's ModelOptions, whose input flags follow."""
    args = [
        workload,
        "--mode",
        mode,
        "--batch",
        str(batch),
        "--steps",
        str(steps),
        "--size",
        size,
        "--warmup",
        str(warmup),
        "--json",
    ]
    return args + (model.child_args() if model is not None else [])


def add_steps_flags(parser: Any) -> None:
    """The workloads runner's flags (``steps`` here, ``tf-autopar workloads run``)."""
    parser.add_argument("name", help="workload name (see `tf-autopar workloads list`)")
    parser.add_argument("--mode", choices=("infer", "train"), default="infer")
    add_batch_flag(parser, default=None, help="batch size (default: the published one)")
    parser.add_argument("--steps", type=count(), default=10, help="timed steps")
    parser.add_argument("--warmup", type=count(), default=2, help="untimed steps first (tracing, allocation)")
    parser.add_argument("--size", choices=("tiny", "paper"), default="tiny")
    parser.add_argument("--path", choices=("function", "session"), default="function")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print only a JSON object on stdout")


def _run_parser() -> argparse.ArgumentParser:
    rp = argparse.ArgumentParser(prog=RUN, description="time requests (the workloads-runner JSON contract)")
    rp.add_argument("model", help="SavedModel directory, .keras file or bundled workload name")
    rp.add_argument("--mode", default="infer")
    add_batch_flag(rp, default=1)
    rp.add_argument("--steps", type=count(), default=10, help="timed requests (ignored with --time)")
    rp.add_argument("--time", type=seconds(), default=None, help="time requests for this many seconds instead")
    rp.add_argument("--warmup", type=count(), default=2)
    rp.add_argument("--size", default="tiny", help="bundled workloads only")
    rp.add_argument("--json", action="store_true", help="accepted for the runner contract; output is always JSON")
    rp.add_argument(
        "--enable", choices=MODES, default=None, help="call tf_autopar.enable(mode=...) first, with no model"
    )
    rp.add_argument("--until-tuned", action="store_true", help="with --enable: call until live tuning is done first")
    rp.add_argument(
        "--frozen", metavar="INTERxINTRA", default=None, help="time the frozen graph in a session with these pools"
    )
    rp.add_argument(
        "--engine", default="", help="with --frozen: run the frozen graph on this engine (openvino, onnxruntime, ...)"
    )
    rp.add_argument(
        "--sweep",
        metavar="IxJ,...",
        default=None,
        help="after the timed requests, time the frozen graph in a session of its own at each setting, in this process",
    )
    add_model_flags(rp)
    return rp


def _prepare_parser() -> argparse.ArgumentParser:
    pp = argparse.ArgumentParser(prog=PREPARE, description="describe the inputs and plan")
    pp.add_argument("model")
    add_batch_flag(pp, default=1)
    pp.add_argument("--plan-mode", choices=INFERENCE_MODES, default=INFERENCE_MODES[0])
    pp.add_argument("--streams", type=count(4096), default=None)
    pp.add_argument("--size", default="tiny")
    add_model_flags(pp)
    return pp

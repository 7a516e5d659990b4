"""Converting a frozen graph for another engine, in a child process.

Why a child: OpenVINO's ``convert_model`` holds the interpreter lock for long stretches, so in
the serving process every request waits behind it (a small recommender's p99 went from 10 ms to
860 ms while MobileNetV2 converted beside it, 2-core EPYC); tf2onnx is Python throughout (p99
24 -> 64 ms). In a child at the lowest priority the requests keep the CPU and the lock, and a
converter that crashes or hangs takes nothing with it. The serving process only reads the
result (an OpenVINO IR or an ONNX file) and compiles it, which releases the lock. While requests
are served, the child is stopped and continued so that they pay a bounded share (pacing.py). A
graph converted before on this host is not converted again (conversion_cache.py).

The child: ``python -m tf_autopar.runtime.fastpath.engines.conversion KIND DIR [--guarded]`` reads
``DIR/graph.pb`` and ``DIR/names.json`` (input and output tensor names) and writes
``DIR/model.xml`` (+ .bin) or ``DIR/model.onnx``; its last stderr line says why it failed.
``--guarded``: tf2onnx's optimizers each on a copy of the graph (onnx_from_graph_def says why
not by default).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from typing import Any

from tf_autopar.runtime.fastpath.engines import conversion_cache, foreign, pacing

log = logging.getLogger("tf_autopar.runtime")

OPENVINO, ONNX = "openvino", "onnx"
RESULT = {OPENVINO: "model.xml", ONNX: "model.onnx"}
#: A conversion that has run this long is stopped (tf2onnx took up to 66 s on the held-out
#: models; a model ten times larger gets the same room); its stopped slices (pacing.py) not counted.
TIMEOUT_S = 900.0
ONNX_OPSET = 17
PARENT_VAR = "TF_AUTOPAR_CONVERSION_PARENT"
PR_SET_PDEATHSIG = 1
#: tf2onnx's switch for its copy of the graph before each optimizer, read as set or not (tf2onnx
#: 1.17 compares the variable's name, not its value, to "TRUE"; "false" means off either way)
UNGUARDED_VAR, UNGUARDED = "TF2ONNX_CATCH_ERRORS", "false"
GUARDED_FLAG = "--guarded"
#: the child's exit code when one of tf2onnx's optimizers failed on the graph itself: the parent
#: converts again with each optimizer on a copy, where a failing one is skipped
OPTIMIZER_FAILED = 3


class ConversionError(RuntimeError):
    """The converter could not convert the graph: its own words, shortened."""


class Converted:
    """A converted model on disk; ``close()`` (or the context) removes it."""

    def __init__(self, directory: str, kind: str) -> None:
        self.directory, self.kind = directory, kind
        self.path = os.path.join(directory, RESULT[kind])

    def close(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> Converted:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def convert(kind: str, frozen: Any, timeout: float = TIMEOUT_S) -> Converted:
    """``frozen`` (runtime/frozen.py's FrozenGraph) converted for ``kind`` in a child process at
    the lowest priority; ConversionError naming the cause when it fails or times out."""
    if kind not in RESULT:
        raise ValueError(f"no conversion for {kind!r}; known: {', '.join(RESULT)}")
    directory = tempfile.mkdtemp(prefix=f"tf_autopar-{kind}-")
    try:
        graph_def = foreign.graph_def(frozen)
        names = _names(frozen)
        entry = _entry(kind, frozen, graph_def) if conversion_cache.enabled() else ""
        out = Converted(directory, kind)
        if entry and conversion_cache.fetch(entry, directory, RESULT[kind]):
            log.info("tf_autopar: the %s conversion of this graph was kept from an earlier one", kind)
            return out
        with open(os.path.join(directory, "graph.pb"), "wb") as fh:
            fh.write(graph_def.SerializeToString())
        del graph_def
        with open(os.path.join(directory, "names.json"), "w", encoding="utf-8") as fh:
            json.dump(names, fh)
        try:
            _run_child(kind, directory, timeout)
        except _OptimizerFailed:
            log.info("tf_autopar: a tf2onnx optimizer failed on the graph; converting again with each on a copy")
            _run_child(kind, directory, timeout, guarded=True)
        if not os.path.exists(out.path):
            raise ConversionError(f"{kind} conversion wrote no {RESULT[kind]}")
        if entry:
            conversion_cache.store(entry, directory)
        return out
    except BaseException:
        shutil.rmtree(directory, ignore_errors=True)
        raise


def kept(kind: str, frozen: Any) -> bool:
    """Whether ``frozen``'s conversion for ``kind`` is kept on disk (conversion_cache.py): then
    convert() starts no child, and the engines' memory estimate counts none."""
    try:
        return conversion_cache.enabled() and conversion_cache.has(_entry(kind, frozen))
    except Exception:  # ours: as if not kept (the estimate stays the larger)
        return False


_digests: weakref.WeakKeyDictionary[Any, bytes] = weakref.WeakKeyDictionary()


def _names(frozen: Any) -> dict[str, list[str]]:
    return {"inputs": list(frozen.inputs), "outputs": list(frozen.outputs)}


def _entry(kind: str, frozen: Any, graph_def: Any = None) -> str:
    """conversion_cache's key of ``frozen`` for ``kind``; its graph digested once per graph (a
    serialization of every constant: a fifth to a third of a second on models of 40-90 MB)."""
    digest = _digests.get(frozen)
    if digest is None:
        digest = conversion_cache.graph_digest(graph_def if graph_def is not None else foreign.graph_def(frozen))
        _digests[frozen] = digest
    return conversion_cache.key(kind, digest, _names(frozen))


class _OptimizerFailed(ConversionError):
    """One of tf2onnx's optimizers failed on the graph itself (not on a copy): convert guarded."""


def child_command(kind: str, directory: str, guarded: bool = False) -> tuple[list[str], dict[str, str]]:
    """The child's command line and environment (benchmarks/bench_conversion.py runs it too)."""
    cmd = [sys.executable, "-m", __name__, kind, directory] + ([GUARDED_FLAG] if guarded else [])
    env = {k: v for k, v in os.environ.items() if not k.startswith("TF_AUTOPAR_") and k != UNGUARDED_VAR}
    if kind == ONNX and not guarded:
        env[UNGUARDED_VAR] = UNGUARDED
    env["TF_AUTOPAR_DISABLE"] = "1"  # the child converts; it plans nothing
    env[PARENT_VAR] = str(os.getpid())
    env.setdefault("CI", "true")  # no usage event from OpenVINO's import there either (foreign.telemetry_off)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    # the child imports this very tf_autopar, wherever the parent found it (not only an installed one)
    root = os.path.dirname(os.path.dirname(os.path.abspath(sys.modules["tf_autopar"].__file__ or ".")))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    return cmd, env


def _run_child(kind: str, directory: str, timeout: float, guarded: bool = False) -> None:
    cmd, env = child_command(kind, directory, guarded)
    # no preexec_fn: Python code in the forked child would run the process's at-fork handlers
    # (runtime/fork.py warns there); the child lowers its own priority first (main)
    proc = subprocess.Popen(
        cmd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    budget = pacing.budget()
    pace = pacing.Pace(budget) if budget is not None else None
    with _children_lock:
        _children[proc] = pace
    try:
        stderr = _paced(proc, pace, timeout) if pace is not None else proc.communicate(timeout=timeout)[1]
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise ConversionError(f"{kind} conversion still running after {timeout:.0f} s: stopped") from None
    finally:
        with _children_lock:
            _children.pop(proc, None)
    if pace is not None and pace.words():
        log.info("tf_autopar: the %s conversion took %.0f s, %s", kind, pace.ran_s + pace.stopped_s, pace.words())
    if proc.returncode == -signal.SIGKILL:
        if _stopping:
            raise ConversionError(f"{kind} conversion stopped: the process is exiting")
        raise ConversionError(f"{kind} conversion killed (SIGKILL: the kernel's out-of-memory killer, most likely)")
    if proc.returncode != 0:
        lines = [line for line in (stderr or "").strip().splitlines() if line.strip()]
        why = lines[-1] if lines else f"exit code {proc.returncode}"
        error = _OptimizerFailed if proc.returncode == OPTIMIZER_FAILED and not guarded else ConversionError
        raise error(f"{kind} conversion failed: {why[:300]}")


def _paced(proc: subprocess.Popen, pace: pacing.Pace, timeout: float) -> str:
    """The child's stderr when it ends, stopped and continued meanwhile as ``pace`` says
    (pacing.py); TimeoutExpired after ``timeout`` seconds of its running."""
    with pacing.watching() as calls:
        step, start = pace.first(), time.perf_counter()
        try:
            while True:
                left = timeout - pace.ran_s
                try:
                    return proc.communicate(timeout=min(step.seconds, left) if step.running else step.seconds)[1]
                except subprocess.TimeoutExpired:
                    if step.running and step.seconds >= left:
                        raise
                now = time.perf_counter()
                noted = [calls.popleft() for _ in range(len(calls))]
                following = pace.ended(step.running, start, now, noted)
                if following.running != step.running:
                    _signal(proc, signal.SIGCONT if following.running else signal.SIGSTOP)
                step, start = following, now
        finally:
            if not step.running:
                _signal(proc, signal.SIGCONT)


def _signal(proc: subprocess.Popen, sig: int) -> None:
    try:
        proc.send_signal(sig)
    except OSError:  # ended meanwhile: communicate says so
        pass


def pace_words() -> str:
    """How the conversion running now is paced ("" when it is not, or not yet)."""
    with _children_lock:
        paces = [p for p in _children.values() if p is not None]
    return paces[0].words() if paces else ""


_children: dict[subprocess.Popen, pacing.Pace | None] = {}
_children_lock = threading.Lock()
_stopping = False


def stop_children() -> None:
    """At exit: the conversions still running are killed (a child outlives its parent otherwise,
    converting for no one). Their callers see ConversionError."""
    global _stopping
    _stopping = True
    with _children_lock:
        running = list(_children)
    for proc in running:
        try:
            proc.kill()
        except OSError:
            pass


def _lowest_priority() -> None:
    """The child's CPU priority at the lowest, and it the kernel's first choice when memory runs out
    (oom_score_adj 1000; raising it needs no privilege): tf2onnx's copies of the constants reach
    37-65x their size (onnxruntime_engine.CHILD), and a server's workers must not be the ones
    killed for them. SCHED_IDLE, not only nice 19: at nice 19 tf2onnx's conversion of Xception
    beside a saturating stream of its requests (2-core EPYC) slowed them 1.3-1.5x while it ran
    (99-104 -> 134-152 ms a call); under SCHED_IDLE 1.0-1.1x (93-105 -> 96-113), the conversion
    taking longer instead. Measured again, interleaved in one process (benchmarks/conversion_cost.py
    --priority): nice 19 alone cost the calls of a TensorFlow session less (1.10x as long against
    1.16-1.22x) but those of OpenVINO's runner far more (1.51-1.77x against 1.14-1.22x). (An
    A/B in the fast path's first minute read 1.25x against 1.15x; which code its arms ran is not
    recorded: docs/serving.md, "The child's priority".)"""
    try:
        os.nice(19)
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except (OSError, AttributeError):
        pass
    try:
        with open("/proc/self/oom_score_adj", "w", encoding="ascii") as fh:
            fh.write("1000")
    except OSError:
        pass


# ------------------------------------------------------------------------------ the child
def openvino_from_file(path: str, names: dict[str, list[str]]) -> Any:
    """OpenVINO's TensorFlow frontend on a GraphDef file, then the transformations
    ``convert_model`` applies (openvino_engine.py says why not ``convert_model`` itself). The
    child's conversion, and openvino_engine's in-process one of a graph with loops."""
    import openvino as ov

    try:
        from openvino._offline_transformations import apply_moc_transformations
        from openvino.frontend import FrontEndManager
    except ImportError:
        return ov.convert_model(path, input=names["inputs"], output=names["outputs"])
    frontend = FrontEndManager().load_by_framework("tf")
    model = frontend.convert(frontend.load(path))
    apply_moc_transformations(model, cf=False, smart_reshape=True)
    return model


def _openvino(directory: str, names: dict[str, list[str]]) -> None:
    import openvino as ov

    model = openvino_from_file(os.path.join(directory, "graph.pb"), names)
    ov.save_model(model, os.path.join(directory, RESULT[OPENVINO]), compress_to_fp16=False)


def _onnx(directory: str, names: dict[str, list[str]]) -> None:
    import tensorflow as tf

    graph_def = tf.compat.v1.GraphDef()
    with open(os.path.join(directory, "graph.pb"), "rb") as fh:
        graph_def.ParseFromString(fh.read())
    onnx_from_graph_def(graph_def, names, output_path=os.path.join(directory, RESULT[ONNX]))


def in_optimizer(exc: BaseException) -> bool:
    """Whether ``exc`` was raised inside one of tf2onnx's optimizers (a frame of tf2onnx.optimizer)."""
    tb = exc.__traceback__
    while tb is not None:
        if str(tb.tb_frame.f_globals.get("__name__", "")).startswith("tf2onnx.optimizer"):
            return True
        tb = tb.tb_next
    return False


def onnx_from_graph_def(graph_def: Any, names: dict[str, list[str]], output_path: str | None = None) -> Any:
    """tf2onnx on a GraphDef at ONNX_OPSET, with the ops it lacks (``_erfc``); the
    ONNX ModelProto. The child's conversion, and onnxruntime_engine's in-process one.

    tf2onnx deep-copies the whole graph, weights included, before each of its optimizers, so that
    one that fails can be skipped; the child runs them on the graph itself (UNGUARDED_VAR, set in
    its environment) and converts again guarded only when one fails (OPTIMIZER_FAILED). Measured
    (benchmarks/bench_conversion.py, 2-core EPYC): the copies were about half of a conversion's
    time on the models with large weights (Xception 19.8 -> 11.2 s, DLRM 17.2 -> 10.1 s) and of
    its peak memory (6.9 -> 3.8 GB, 6.8 -> 3.3 GB), with the same ONNX graph (same ops, outputs
    equal); in-process (no child) the copies stay: the variable would be set under running threads."""
    logging.getLogger("tf2onnx").setLevel(logging.ERROR)
    import tf2onnx

    model, _ = tf2onnx.convert.from_graph_def(
        graph_def,
        input_names=names["inputs"],
        output_names=names["outputs"],
        opset=ONNX_OPSET,
        custom_op_handlers={"Erfc": (_erfc, [])},
        output_path=output_path,
    )
    return model


def _erfc(ctx: Any, node: Any, name: str, args: list[Any]) -> None:
    """``Erfc(x)`` as ``1 - Erf(x)``: ONNX has no Erfc and tf2onnx leaves it unconverted ("No Op
    registered for Erfc"), and Keras' exact GELU, ``0.5 x erfc(-x / sqrt 2)``, is made of it (every
    BERT- and GPT-style model built with ``gelu``). The subtraction loses erfc's relative precision
    where erfc is below float32's epsilon (about 6e-8 absolute), far inside the 1e-4 the
    candidate's outputs are checked to."""
    import numpy as np
    from tf2onnx import utils

    dtype = utils.map_onnx_to_numpy_type(ctx.get_dtype(node.input[0]))
    one = ctx.make_const(utils.make_name(f"{node.name}_one"), np.array(1, dtype=dtype))
    erf = ctx.make_node("Erf", [node.input[0]], op_name_scope=node.name)
    node.type = "Sub"
    ctx.replace_inputs(node, [one.output[0], erf.output[0]])


def _die_with_parent() -> None:
    """The child killed when the process that started it dies: a stopped child (pacing) would
    otherwise stay stopped, holding its memory, after its parent was killed."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        return
    if os.environ.get(PARENT_VAR, str(os.getppid())) != str(os.getppid()):  # it died before the prctl
        os._exit(1)


def main(argv: list[str]) -> int:
    _die_with_parent()
    _lowest_priority()
    kind, directory = argv[:2]
    guarded = GUARDED_FLAG in argv[2:]
    with open(os.path.join(directory, "names.json"), encoding="utf-8") as fh:
        names = json.load(fh)
    try:
        (_openvino if kind == OPENVINO else _onnx)(directory, names)
    except Exception as exc:  # the parent reads the last line
        text = " ".join(str(exc).split())
        print(f"{type(exc).__name__}: {text[:500]}", file=sys.stderr)
        return OPTIMIZER_FAILED if kind == ONNX and not guarded and in_optimizer(exc) else 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

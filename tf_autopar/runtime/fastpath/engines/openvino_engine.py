"""OpenVINO's engine: the frozen graph converted in memory (OpenVINO's TensorFlow frontend, as
``openvino.convert_model`` uses it: its placeholders the model's inputs, their free dimensions
left free) and compiled for the CPU at the setting.

How the setting maps to OpenVINO's CPU plugin:
- ``NUM_STREAMS`` = the setting's streams, ``INFERENCE_NUM_THREADS`` = intra-op x streams (each
  stream gets the intra-op share; OpenVINO has no inter-op pool: its streams are that), capped
  at the process's affinity (os.sched_getaffinity), so never more threads than the share;
- ``INFERENCE_PRECISION_HINT`` given explicitly: f32, or bf16 for the "openvino-bf16" variant.
  Not left to OpenVINO: on a CPU with AVX512_BF16 or AMX its default is bf16 (differences up to
  3e-2 of the largest output measured on MobileNetV2, against 3e-6 for f32; issue 46);
- ``ENABLE_CPU_PINNING`` off and ``ENABLE_HYPER_THREADING`` off: pinned threads would claim
  CPUs by number whatever the worker's share (another worker's, under gunicorn), and the share is
  already counted in threads;
- one InferRequest per stream, handed to concurrent callers first come, first served
  (streams.StreamPool, as TensorFlow's sessions are); a closed runner raises ``Retired``.

Converted once per FrozenGraph (foreign.Conversions), compiled once per setting.
"""

from __future__ import annotations

import functools
import logging
import os
import tempfile
import threading
from typing import TYPE_CHECKING, Any

from tf_autopar.runtime.fastpath.engines import conversion, foreign
from tf_autopar.runtime.streams import StreamPool

if TYPE_CHECKING:
    from tf_autopar.runtime.frozen import FrozenGraph

NAME, NAME_BF16 = "openvino", "openvino-bf16"

#: what a build adds to the process's RSS, per byte of the frozen constants: the largest of
#: four models measured (benchmarks/bench_engine_settings.py --memory,
#: results/engine_memory_epyc.json; RSS after malloc_trim, the libraries loaded beforehand):
#: a compiled copy 2.06 (MobileNetV2), 1.92 (EfficientNet-B0), 0.79 (BERT-style encoder), 0.11
#: (DLRM: its embedding tables are not repacked); the conversion 2.0, 1.83, 1.36, 1.17. So an
#: over-estimate on the recommenders (DLRM: 4x), never an under-estimate on those measured.
COMPILE_FACTOR, CONVERT_FACTOR = 2.1, 2.0
#: the first build in a process loads OpenVINO's CPU plugin and makes its pools (27.5-27.8 MB)
LIBRARY_BYTES = 28 << 20
#: the conversion child's peak RSS (TensorFlow and OpenVINO imported, the frontend's model and its
#: IR written): 545 MB on a tiny MLP, then per MB of constants 19x (MobileNetV2, 0.80 GB), 21x
#: (EfficientNet-B0, 0.97 GB), 12x (BERT-style encoder, 1.07 GB), 11x (DLRM, 1.39 GB), 13x
#: (Xception, 1.68 GB) (2-core EPYC, peak RSS from wait4)
CHILD = (550 << 20, 22.0)

log = logging.getLogger("tf_autopar.runtime")

_core: Any = None
_core_lock = threading.Lock()
_conversions: foreign.Conversions[Any] = foreign.Conversions()


def core() -> Any:
    """The process's one ``openvino.Core`` (made on first use: creating one loads the plugins)."""
    global _core
    with _core_lock:
        if _core is None:
            _core = foreign.openvino_module().Core()
        return _core


def _convert(frozen: FrozenGraph) -> Any:
    """The frozen tf.Graph through OpenVINO's TensorFlow frontend, then the transformations
    ``convert_model`` applies (tools/ovc/moc_frontend/moc_emit_ir.py).

    Not ``openvino.convert_model`` itself: it sends telemetry unless the user has opted out
    (openvino_telemetry: no consent file counts as consent, from a server's process too) and
    starts six threads for it, and it took 5.0 s against 1.0 s on MobileNetV2 here (it imports
    the GraphDef into a graph of its own first). The outputs are the same (the check compares
    them with TensorFlow's anyway). Where those internals are missing (another OpenVINO
    version), ``convert_model`` on the GraphDef it is.
    """
    ov = foreign.openvino_module()  # first: its import with telemetry off
    try:
        from openvino._offline_transformations import apply_moc_transformations
        from openvino.frontend import FrontEndManager
        from openvino.frontend.tensorflow.graph_iterator import GraphIteratorTFGraph
    except ImportError:
        with foreign.telemetry_off():
            return ov.convert_model(foreign.graph_def(frozen))
    functional = frozen.functional_graph_def()
    if functional is not None:
        # loops: the functional ones (foreign.graph_def), from a file as the child converts them
        # (the graph iterator finds no body graph in a GraphDef's functions; TF1 loops leave
        # undeclared parameters)
        with tempfile.TemporaryDirectory(prefix="tf_autopar-openvino-") as directory:
            path = os.path.join(directory, "graph.pb")
            with open(path, "wb") as fh:
                fh.write(functional.SerializeToString())
            with foreign.telemetry_off():  # where its fallback is convert_model
                return conversion.openvino_from_file(path, {"inputs": frozen.inputs, "outputs": frozen.outputs})
    frontend = FrontEndManager().load_by_framework("tf")
    iterator = GraphIteratorTFGraph(frozen.graph, False)  # kept alive until converted: its decoders are Python
    loaded = frontend.load(iterator)
    model = frontend.convert(loaded)
    del loaded, iterator
    apply_moc_transformations(model, cf=False, smart_reshape=True)
    return model


def _convert_in_child(frozen: FrozenGraph) -> Any:
    """The conversion in a child process (conversion.py: OpenVINO's converter holds the
    interpreter lock for long stretches); the model read back here."""
    with conversion.convert(conversion.OPENVINO, frozen) as converted:
        return core().read_model(converted.path)  # a mapped weights file stays readable once removed


def _port_index(ports: Any, name: str) -> int:
    """The index of the port called ``name`` ("x:0"; OpenVINO may also know it as "x")."""
    bare = name.split(":")[0]
    for i, port in enumerate(ports):
        names = port.get_names()
        if name in names:
            return i
    for i, port in enumerate(ports):
        if bare in port.get_names():
            return i
    raise KeyError(f"no port named {name!r} among {[sorted(p.get_names()) for p in ports]}")


class _Compiled:
    """A compiled model's ports in the frozen graph's order."""

    def __init__(self, compiled: Any, frozen: FrozenGraph) -> None:
        self.compiled = compiled
        self.inputs = [_port_index(compiled.inputs, n) for n in frozen.inputs]
        self.outputs = [compiled.outputs[_port_index(compiled.outputs, n)] for n in frozen.outputs]


class _Request:
    """One stream's InferRequest (and its static-shape one, where there is one), in a StreamPool,
    which feeds it through ``run_values`` (streams.direct_run)."""

    def __init__(
        self, dynamic: _Compiled, static: _Compiled | None, shapes: list[tuple[int, ...]], dtypes: list[Any]
    ) -> None:
        self.dynamic, self.static, self.shapes, self.dtypes = dynamic, static, shapes, dtypes
        self.requests = {id(c): c.compiled.create_infer_request() for c in (dynamic, static) if c is not None}

    def run_values(self, arrays: list[Any]) -> list[Any]:
        """The feeds in the frozen graph's input order."""
        which = self.dynamic
        if self.static is not None and all(a.shape == s for a, s in zip(arrays, self.shapes)):
            which = self.static
        # share_outputs=False: OpenVINO copies its output buffers out (the next call reuses them)
        result = self.requests[id(which)].infer(dict(zip(which.inputs, arrays)), share_outputs=False)
        return [foreign.as_tf_dtype(result[port], want) for port, want in zip(which.outputs, self.dtypes)]

    def close(self) -> None:
        self.requests.clear()


class _FirstComeFirstServed(StreamPool):
    """A StreamPool that gates even one stream: an InferRequest takes one call at a time."""

    @property
    def gated(self) -> bool:
        return True


class OpenVINORunner:
    """A compiled model at one setting, its InferRequests in a first-come-first-served pool.

    ``shapes`` (the inputs' shapes of the calls it will mostly serve: the fast path passes the
    bucket's first call's, pools.static_shapes): a second copy compiled for exactly those shapes
    serves them, the free-shape one every other call. Why: with free dimensions OpenVINO infers
    shapes node by node on every call. Measured (benchmarks/bench_engine_settings.py,
    results/engine_static_shapes_epyc.json: 2-core EPYC, 9 interleaved rounds, 2 threads, 28
    rows of the held-out models at batch 1 and a serving batch) the static copy against the free
    one: faster on 25 rows (geometric mean 1.08x over all 28; GRU tagger b1 1.30x, ViT-Tiny b1
    1.24x, MobileNetV2 b1 1.10x), 0.90x on DCN-v2 b2048 (again 0.90x in 15 rounds,
    results/engine_static_shapes_recheck_epyc.json), Xception b1 0.99x then 0.92x (compute-bound:
    shape inference is little of an 85 ms call), NASNetMobile b8 0.73x then 1.10x (noise). The
    runner as a whole is what live tuning weighs against the other engines. It costs a second
    compiled copy (``bytes`` counts it; the memory rule drops the static copy first).
    """

    def __init__(
        self,
        frozen: FrozenGraph,
        setting: tuple[int, int, int],
        precision: str,
        name: str,
        shapes: list[tuple[int, ...]] | None = None,
    ) -> None:
        inter, intra, streams = (max(1, int(v)) for v in setting)
        self.setting, self.precision, self.name = (inter, intra, streams), precision, name
        self.threads = min(intra * streams, len(os.sched_getaffinity(0)))
        try:
            model, converted = _conversions.get(frozen, _convert)
        except Exception as exc:
            raise foreign.EngineError(name, "conversion (OpenVINO's TensorFlow frontend)", exc) from exc
        config = {
            "NUM_STREAMS": streams,
            "INFERENCE_NUM_THREADS": self.threads,
            "INFERENCE_PRECISION_HINT": precision,
            "ENABLE_CPU_PINNING": False,
            "ENABLE_HYPER_THREADING": False,
        }
        self.shapes = [tuple(int(d) for d in s) for s in shapes] if shapes else []
        try:
            dynamic = _Compiled(core().compile_model(model, "CPU", config), frozen)
            static = self._static(model, config, frozen, dynamic) if self.shapes else None
            self.compiled = dynamic.compiled
            dtypes = foreign.output_dtypes(frozen)
            requests = [_Request(dynamic, static, self.shapes, dtypes) for _ in range(streams)]
        except Exception as exc:
            raise foreign.EngineError(name, "compilation for CPU", exc) from exc
        self.pool = _FirstComeFirstServed(requests)
        self.outputs = list(frozen.outputs)
        self._run = self.pool.bind(self.outputs, range(len(frozen.inputs)))
        constants = foreign.constant_bytes(frozen)
        #: estimated memory of this copy (the conversion counted in the build that made it)
        self.bytes = foreign.estimate_bytes(
            constants,
            COMPILE_FACTOR,
            CONVERT_FACTOR,
            2 if self.shapes else 1,
            converted,
            LIBRARY_BYTES if foreign.first_use(NAME) else 0,
        )

    def _static(self, model: Any, config: dict[str, Any], frozen: FrozenGraph, dynamic: _Compiled) -> _Compiled | None:
        """The copy for ``self.shapes``; None (and no shapes) where OpenVINO cannot make it: the
        free-shape copy serves every call then, a missing speed-up and not the engine's failure."""
        try:
            fixed = model.clone()
            fixed.reshape({fixed.inputs[i]: list(s) for i, s in zip(dynamic.inputs, self.shapes)})
            return _Compiled(core().compile_model(fixed, "CPU", config), frozen)
        except Exception as exc:
            log.info(
                "tf_autopar: %s: no copy for the shapes %s (%s); the free-shape copy serves",
                self.name,
                self.shapes,
                exc,
            )
            self.shapes = []
            return None

    @property
    def streams(self) -> int:
        return len(self.pool.sessions)

    def run(self, arrays: list[Any]) -> list[Any]:
        return self._run(arrays)

    def describe(self) -> dict[str, Any]:
        info: dict[str, Any] = {
            "engine": self.name,
            "inter_op": self.setting[0],
            "intra_op": self.setting[1],
            "streams": self.streams,
            "threads": self.threads,
            "precision": self.precision,
            "static_shapes": [list(s) for s in self.shapes],
        }
        for key, prop in (
            ("ov_streams", "NUM_STREAMS"),
            ("ov_threads", "INFERENCE_NUM_THREADS"),
            ("ov_precision", "INFERENCE_PRECISION_HINT"),
            ("pinning", "ENABLE_CPU_PINNING"),
        ):
            try:
                value = self.compiled.get_property(prop)
                info[key] = value.to_string() if hasattr(value, "to_string") else str(value)
            except Exception:  # a property this OpenVINO version does not report
                continue
        return info

    def close(self) -> None:
        self.pool.retire()


class OpenVINO:
    """The engine (f32 by default; ``precision="bf16"`` for the opt-in variant)."""

    family = NAME  # the variants share the conversion: one failing to convert fails both
    static_shapes = True  # build takes ``shapes=``: a second copy compiled for the bucket's calls

    def __init__(self, precision: str = "f32") -> None:
        if precision not in ("f32", "bf16"):
            raise ValueError(f"precision must be 'f32' or 'bf16', got {precision!r}")
        self.precision = precision
        self.name = NAME if precision == "f32" else NAME_BF16

    def available(self) -> str:
        """ "" when OpenVINO imports (and, for bf16, the CPU computes bf16 natively); else why not."""
        why = foreign.missing("openvino")
        if why or self.precision != "bf16":
            return why
        try:
            caps = [str(c).lower() for c in core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")]
        except Exception as exc:
            return f"{self.name}: OpenVINO could not report the CPU's capabilities ({exc})"
        return "" if "bf16" in caps else f"{self.name}: this CPU has no native bf16 (OpenVINO reports {caps})"

    def convert(self, frozen: FrozenGraph) -> None:
        """The conversion, once per frozen graph, in a child process (the fast path calls this
        before ``build``; ``build`` alone converts in this process)."""
        try:
            _conversions.get(frozen, _convert_in_child)
        except Exception as exc:
            raise foreign.EngineError(
                self.name, "conversion (OpenVINO's TensorFlow frontend, in a child)", exc
            ) from exc

    def converted(self, frozen: FrozenGraph) -> bool:
        """Whether ``convert`` has made this graph's conversion (the variants share it)."""
        return _conversions.has(frozen)

    def need_bytes(self, frozen: FrozenGraph, static: bool = False) -> tuple[int, int]:
        """What building a runner will add at its peak: (this process, the conversion child);
        ``static``: with its copy for the call's shapes (``build(..., shapes=)``)."""
        kept = functools.partial(conversion.kept, conversion.OPENVINO, frozen)
        return foreign.need_bytes(
            frozen, _conversions, NAME, COMPILE_FACTOR, LIBRARY_BYTES, CHILD, kept, 2 if static else 1
        )

    def build(
        self, frozen: FrozenGraph, setting: tuple[int, int, int], shapes: list[tuple[int, ...]] | None = None
    ) -> OpenVINORunner:
        """``shapes``: optional, the input shapes to compile a static copy for (OpenVINORunner)."""
        why = foreign.missing("openvino")
        if why:
            raise foreign.EngineError(self.name, "import", why)
        return OpenVINORunner(frozen, setting, self.precision, self.name, shapes)

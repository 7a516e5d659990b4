"""ONNX Runtime's engine: the frozen GraphDef converted in memory by tf2onnx (opset 17) and run
by one ``InferenceSession`` at the setting.

How the setting maps to ONNX Runtime:
- ``intra_op_num_threads`` = intra-op (ONNX Runtime counts the calling thread among them),
  ``inter_op_num_threads`` = inter-op, the parallel execution mode only when inter-op > 1;
- streams: one session serves concurrent ``run`` calls (``InferenceSession.run`` is
  thread-safe); concurrent calls share its intra-op pool, as concurrent calls share one
  TensorFlow session's pools; ``streams`` is reported as 1;
- spinning (``session.intra_op.allow_spinning``): off by default, see SPIN;
- no thread affinity is set (ONNX Runtime pins only when it sizes its pool itself).

tf2onnx logs every step of a conversion (and TensorFlow's deprecation notices on the way):
both are held at ERROR for the conversion. Converted once per FrozenGraph (foreign.Conversions:
the serialized model), one session per setting.
"""

from __future__ import annotations

import functools
import logging
from typing import TYPE_CHECKING, Any

from tf_autopar.runtime.fastpath.engines import conversion, foreign
from tf_autopar.runtime.streams import StreamPool

if TYPE_CHECKING:
    from tf_autopar.runtime.frozen import FrozenGraph

NAME = "onnxruntime"
NAME_SPINNING = "onnxruntime-spinning"
OPSET = conversion.ONNX_OPSET

#: whether ONNX Runtime's intra-op threads spin waiting for work. Both are candidates, the live
#: trial decides: spinning keeps a process's threads busy between calls, which costs every call
#: when other work shares the CPUs and saves a wake-up per parallel step when none does. Measured
#: at (1, 2, 1), ``onnxruntime`` off, ``onnxruntime-spinning`` on: on the 2-core EPYC shared with
#: other jobs (load average 9-11; benchmarks/bench_engine_settings.py,
#: results/engine_settings_epyc.json, median of 7 interleaved rounds) off won every row
#: (MobileNetV2 b1 8.2 against 48.1 ms, EfficientNet-B0 b1 51 against 86, DLRM b64 1.19 against
#: 1.51); on the same host quiet (load average 0.7-1.2; ``bench_engine_settings.py --rows
#: mobilenet_v2,lstm_classifier,tiny_mlp,dlrm,efficientnet_b0 --configs ort-nospin,ort-spin``,
#: results/engine_spinning_epyc.json) on won every row: an LSTM classifier b1 2.32 against
#: 1.17 ms (a loop of small steps), MobileNetV2 b1 5.35 against 4.81, EfficientNet-B0 b1 9.55
#: against 7.79, DLRM b64 0.84 against 0.73, a tiny MLP 0.016 both.
SPIN = False
#: ``session.force_spinning_stop``: the threads spin inside a call and sleep as soon as it returns.
#: Not used: it lost to spinning between calls on 6 of 8 rows at back-to-back calls (YouTube-DNN
#: b1 0.089 against 0.061 ms, MobileNetV2 b1 6.50 against 5.29; results/engine_spin_stop_epyc.json).
STOP = False
#: how long the spinning threads keep a core busy once a call returns: each worker spins 2**20
#: times before it sleeps (ONNX Runtime's thread pool), about 50 ms on the EPYC, when a TensorFlow
#: session's calls ran 1.4-1.8x slower (benchmarks/bench_trial_carryover.py,
#: results/trial_carryover_epyc.json); a live trial leaves the other's calls in that time untimed
SPIN_LINGER_S = 0.1

#: what a build adds to the process's RSS, per byte of the frozen constants, the largest of the
#: models measured (benchmarks/bench_engine_settings.py --memory, results/engine_memory_epyc.json):
#: a session 1.69 (MobileNetV2), 1.73 (EfficientNet-B0), 1.02 (DLRM); the conversion (tf2onnx's
#: working copies, the serialized model kept) 3.54, 3.07, 1.52
SESSION_FACTOR, CONVERT_FACTOR = 1.8, 3.6
#: the first build in a process loads ONNX Runtime and tf2onnx (31.6-32.9 MB)
LIBRARY_BYTES = 33 << 20
#: the conversion child's peak RSS (TensorFlow and tf2onnx imported, then tf2onnx's copies of the
#: constants through its passes, its optimizers on the graph itself: conversion.onnx_from_graph_def):
#: 595 MB on a tiny MLP, 670-835 MB on models of 2-5 MB of constants, then 1.1-1.7 GB at 13-22 MB
#: (MobileNetV2, EfficientNet-B0, GPT-style decoder), 2.0-2.7 GB at 39-42 MB (YouTube-DNN, DCN-V2,
#: BERT-style encoder), 3.3 GB (DLRM, 74 MB), 3.8 GB (Xception, 87 MB), 6.0 GB (ConvNeXt-Tiny,
#: 109 MB) (benchmarks/bench_conversion.py, results/conversion_epyc.json, 2-core EPYC, wait4). The
#: guarded conversion, only after an optimizer failed, reaches 45-107x the constants: beyond this
#: estimate, where the child is the kernel's first choice (conversion._lowest_priority). Under a
#: memory limit the child counts in the serving process's group.
CHILD = (650 << 20, 50.0)

_conversions: foreign.Conversions[bytes] = foreign.Conversions()


def name_of(spin: bool) -> str:
    """The engine's name for the variant with (or without) spinning threads."""
    return NAME_SPINNING if spin else NAME


def _convert(frozen: FrozenGraph) -> bytes:
    with foreign.quiet("tf2onnx", "tensorflow", "absl"):
        import tf2onnx

        tf2onnx.logging.set_level(logging.ERROR)
        names = {"inputs": list(frozen.inputs), "outputs": list(frozen.outputs)}
        model = conversion.onnx_from_graph_def(foreign.graph_def(frozen), names)
    return model.SerializeToString()


def _convert_in_child(frozen: FrozenGraph) -> bytes:
    """The conversion in a child process (conversion.py: tf2onnx is Python throughout and would
    hold the interpreter lock from the requests for seconds to a minute)."""
    with conversion.convert(conversion.ONNX, frozen) as converted, open(converted.path, "rb") as fh:
        return fh.read()


class _Session:
    """The session in a StreamPool, which feeds it through ``run_values`` (streams.direct_run)."""

    def __init__(self, session: Any, inputs: list[str], outputs: list[str], dtypes: list[Any]) -> None:
        self.session, self.inputs, self.outputs, self.dtypes = session, inputs, outputs, dtypes
        # InferenceSession.run checks that every input is fed (a search of a list per input: 11 us
        # a call on DCN-V2's 27) before its C session's run; every input always is here
        inner = getattr(session, "_sess", None)
        self._c = inner if callable(getattr(inner, "run", None)) else None

    def run_values(self, values: list[Any]) -> list[Any]:
        """The feeds in the frozen graph's input order."""
        feed = dict(zip(self.inputs, values))
        c = self._c
        out = c.run(self.outputs, feed, None) if c is not None else self.session.run(self.outputs, feed)
        return [foreign.as_tf_dtype(v, want) for v, want in zip(out, self.dtypes)]

    def close(self) -> None:
        self.session = self._c = None  # ONNX Runtime frees it with the last reference


class OnnxRuntimeRunner:
    """One InferenceSession at one setting."""

    def __init__(
        self, frozen: FrozenGraph, setting: tuple[int, int, int], spin: bool = SPIN, stop: bool = STOP
    ) -> None:
        inter, intra, _streams = (max(1, int(v)) for v in setting)
        self.setting, self.spin, self.precision = (inter, intra, 1), spin, "f32"
        self.name = name_of(spin)
        self.threads = intra + (inter if inter > 1 else 0)
        self.linger_s = SPIN_LINGER_S if spin and not stop else 0.0
        try:
            serialized, converted = _conversions.get(frozen, _convert)
        except Exception as exc:
            raise foreign.EngineError(self.name, f"conversion (tf2onnx, opset {OPSET})", exc) from exc
        try:
            import onnxruntime as ort

            options = ort.SessionOptions()
            options.intra_op_num_threads = intra
            options.inter_op_num_threads = inter
            options.execution_mode = ort.ExecutionMode.ORT_PARALLEL if inter > 1 else ort.ExecutionMode.ORT_SEQUENTIAL
            options.add_session_config_entry("session.intra_op.allow_spinning", "1" if spin else "0")
            options.add_session_config_entry("session.inter_op.allow_spinning", "1" if spin else "0")
            options.add_session_config_entry("session.force_spinning_stop", "1" if stop else "0")
            options.log_severity_level = 3  # errors only
            session = ort.InferenceSession(serialized, options, providers=["CPUExecutionProvider"])
            names = {i.name for i in session.get_inputs()}
            absent = [n for n in frozen.inputs if n not in names]
            if absent:
                raise ValueError(f"the converted model has inputs {sorted(names)}, not {absent}")
        except Exception as exc:
            raise foreign.EngineError(self.name, "session creation", exc) from exc
        self.pool = StreamPool(
            [_Session(session, list(frozen.inputs), list(frozen.outputs), foreign.output_dtypes(frozen))]
        )
        self.outputs = list(frozen.outputs)
        self._run = self.pool.bind(self.outputs, range(len(frozen.inputs)))
        constants = foreign.constant_bytes(frozen)
        #: estimated memory of this copy (the conversion counted in the build that made it)
        self.bytes = foreign.estimate_bytes(
            constants, SESSION_FACTOR, CONVERT_FACTOR, 1, converted, LIBRARY_BYTES if foreign.first_use(NAME) else 0
        )

    @property
    def streams(self) -> int:
        return 1

    def run(self, arrays: list[Any]) -> list[Any]:
        return self._run(arrays)

    def describe(self) -> dict[str, Any]:
        return {
            "engine": self.name,
            "inter_op": self.setting[0],
            "intra_op": self.setting[1],
            "streams": 1,
            "threads": self.threads,
            "precision": self.precision,
            "spinning": self.spin,
            "execution_mode": "parallel" if self.setting[0] > 1 else "sequential",
            "opset": OPSET,
        }

    def close(self) -> None:
        self.pool.retire()


class OnnxRuntime:
    """The engine; ``spin=True``: the variant whose threads spin between steps (ONNX Runtime's own default)."""

    family = NAME  # the variants share the conversion: one failing to convert fails both
    precision = "f32"

    def __init__(self, spin: bool = SPIN) -> None:
        self.spin = spin
        self.name = name_of(spin)

    def available(self) -> str:
        """ "" when onnxruntime and tf2onnx import; else why not."""
        return foreign.missing("onnxruntime") or foreign.missing("tf2onnx")

    def convert(self, frozen: FrozenGraph) -> None:
        """The conversion, once per frozen graph, in a child process (the fast path calls this
        before ``build``; ``build`` alone converts in this process)."""
        try:
            _conversions.get(frozen, _convert_in_child)
        except Exception as exc:
            raise foreign.EngineError(self.name, f"conversion (tf2onnx, opset {OPSET}, in a child)", exc) from exc

    def converted(self, frozen: FrozenGraph) -> bool:
        """Whether ``convert`` has made this graph's conversion (the variants share it)."""
        return _conversions.has(frozen)

    def need_bytes(self, frozen: FrozenGraph) -> tuple[int, int]:
        """What building a runner will add at its peak: (this process, the conversion child)."""
        kept = functools.partial(conversion.kept, conversion.ONNX, frozen)
        return foreign.need_bytes(frozen, _conversions, NAME, SESSION_FACTOR, LIBRARY_BYTES, CHILD, kept)

    def build(self, frozen: FrozenGraph, setting: tuple[int, int, int]) -> OnnxRuntimeRunner:
        why = self.available()
        if why:
            raise foreign.EngineError(self.name, "import", why)
        return OnnxRuntimeRunner(frozen, setting, self.spin)

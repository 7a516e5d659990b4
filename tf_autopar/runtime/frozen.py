"""optimize(): run a model's inference graph in a session with pools planned for it.

Once the process pools are fixed, the only way to give one model its own thread counts is
a session of its own: the function is traced, its variables frozen into constants
(``convert_variables_to_constants_v2``), the graph imported into a fresh tf.Graph and run by
a ``tf.compat.v1.Session`` whose ConfigProto carries the model's plan and
``use_per_session_threads`` (and its own intra-op pool when TF_OVERRIDE_GLOBAL_THREADPOOL
was in force at start). The graph is the one the traced function runs, so outputs match the
function (and Keras 3's predict, which runs the same traced call) bit for bit.
Inference only: frozen variables do not train.

Throughput mode (``mode="throughput"``, optional ``streams=N``): the plan's streams become
that many sessions over the same frozen graph, each with the stream's inter-op and intra-op
pools; concurrent callers each take an idle stream (and wait when all are busy), so N
requests run at once without oversubscribing the cores.
"""
from __future__ import annotations

import queue
import threading
from typing import Any, Sequence

from tf_autopar.runtime import controller, core, sessions
from tf_autopar.runtime.safety import fail_open
from tf_autopar.runtime.state import STATE


class OptimizedFunction:
    """Callable: numpy arrays / tensors in (positional, as the model takes them), numpy out.

    Compiled per input signature (shapes with a free batch dimension) on first call unless
    ``input_signature`` was given or the Keras model declares its inputs. Thread-safe.
    """

    def __init__(
        self, target: Any, mode: str = "latency", input_signature: Sequence[Any] | None = None,
        streams: int | None = None,
    ) -> None:
        if mode not in ("latency", "throughput", "training"):
            raise ValueError(f"mode must be 'latency', 'throughput' or 'training', got {mode!r}")
        if streams is not None and (mode != "throughput" or isinstance(streams, bool)
                                    or not isinstance(streams, int) or streams < 1):
            raise ValueError(f"streams must be a positive integer with mode='throughput', got {streams!r} ({mode})")
        self._target = target
        self._mode = mode
        self._streams = streams
        self._lock = threading.Lock()
        self._compiled: dict[Any, _Compiled] = {}
        self._signature = list(input_signature) if input_signature is not None else _keras_signature(target)
        self.plan: Any = None
        self.profile: Any = None
        self._failed = False
        if self._signature is not None:
            try:
                with self._lock:
                    self._compile(tuple(self._signature))
            except Exception as exc:  # fail open: calls run the model itself
                fail_open("build a tuned session for optimize()", exc)
                self._failed = True

    # --------------------------------------------------------------------------- calling
    def __call__(self, *args: Any) -> Any:
        import numpy as np

        if len(args) == 1 and isinstance(args[0], (list, tuple)) and self._signature is not None and len(self._signature) > 1:
            args = tuple(args[0])  # model([a, b]) style
        arrays = [a if not hasattr(a, "numpy") else a.numpy() for a in args]
        arrays = [np.asarray(a) for a in arrays]
        if self._failed:
            return self._fallback(arrays)
        try:
            compiled = self._for(arrays)
        except Exception as exc:  # fail open: run the model as TensorFlow would
            fail_open("build a tuned session for optimize()", exc)
            self._failed = True
            return self._fallback(arrays)
        return compiled.run(arrays)

    def _fallback(self, arrays: list[Any]) -> Any:
        import tensorflow as tf

        target = self._target
        module = type(target).__module__ or ""
        if module.startswith(("keras", "tf_keras")):
            out = target(arrays[0] if len(arrays) == 1 else arrays, training=False)
        else:
            out = target(*arrays)
        return tf.nest.map_structure(lambda t: t.numpy() if hasattr(t, "numpy") else t, out)

    def _for(self, arrays: list[Any]) -> "_Compiled":
        if self._signature is not None:
            key = tuple(self._signature)
        else:
            import tensorflow as tf

            key = tuple(tf.TensorSpec([None, *a.shape[1:]] if a.ndim else [], tf.as_dtype(a.dtype)) for a in arrays)
        with self._lock:
            compiled = self._compiled.get(key)
            if compiled is None:
                compiled = self._compile(key)
            return compiled

    def _compile(self, signature: tuple[Any, ...]) -> "_Compiled":
        compiled = _Compiled.build(self._target, signature, self._mode, self._streams)
        self._compiled[signature] = compiled
        self.plan, self.profile = compiled.plan, compiled.profile
        return compiled

    @property
    def session(self) -> Any:
        return self.sessions[0] if self.sessions else None

    @property
    def sessions(self) -> list[Any]:
        """The tuned sessions of the first compiled signature: one per stream."""
        return list(next(iter(self._compiled.values())).sessions) if self._compiled else []

    def close(self) -> None:
        with self._lock:
            for c in self._compiled.values():
                for session in c.sessions:
                    session.close()
            self._compiled.clear()


class _Compiled:
    def __init__(self, sessions: list[Any], inputs: list[str], outputs: list[str], structure: Any, plan: Any,
                 profile: Any) -> None:
        self.sessions, self.inputs, self.outputs = sessions, inputs, outputs
        self.structure, self.plan, self.profile = structure, plan, profile
        self._idle: queue.SimpleQueue[Any] = queue.SimpleQueue()
        for session in sessions:
            self._idle.put(session)

    def run(self, arrays: list[Any]) -> Any:
        import tensorflow as tf

        if len(arrays) != len(self.inputs):
            raise ValueError(f"expected {len(self.inputs)} input(s), got {len(arrays)}")
        session = self._idle.get()  # one request per stream at a time
        try:
            values = session.run(self.outputs, dict(zip(self.inputs, arrays)))
        finally:
            self._idle.put(session)
        return tf.nest.pack_sequence_as(self.structure, values)

    @classmethod
    def build(cls, target: Any, signature: tuple[Any, ...], mode: str, streams: int | None = None) -> "_Compiled":
        import tensorflow as tf
        from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

        with sessions.bypass():  # our own trace: no tf.function hook, no session patch
            concrete = _concrete(target, signature)
        frozen = convert_variables_to_constants_v2(concrete)
        graph_def = frozen.graph.as_graph_def()
        graph = tf.Graph()
        with graph.as_default():
            tf.graph_util.import_graph_def(graph_def, name="")
        inputs = [t.name for t in frozen.inputs]
        outputs = [t.name for t in frozen.outputs]
        structure = concrete.structured_outputs  # freezing flattens it to a list
        profile, ms = core.analyze_graph(graph_def, f"optimize({getattr(concrete, 'name', 'function')})")
        plan = core.plan_for(profile, mode, streams=streams)
        fields = plan.config_proto_fields()
        config = tf.compat.v1.ConfigProto(
            inter_op_parallelism_threads=fields["inter_op_parallelism_threads"],
            intra_op_parallelism_threads=fields["intra_op_parallelism_threads"],
            use_per_session_threads=True,
        )
        with sessions.bypass():
            tuned = [tf.compat.v1.Session(graph=graph, config=config) for _ in range(max(1, plan.instances))]
        graph.finalize()
        from tf_autopar.runtime.records import SessionRecord

        with STATE.lock:
            for i in range(len(tuned)):
                stream = f" stream {i + 1}/{len(tuned)}" if len(tuned) > 1 else ""
                STATE.sessions.append(SessionRecord(
                    session=STATE.next_session_name() + " (optimize)", graph_nodes=len(graph_def.node),
                    fingerprint=profile.fingerprint, avg_width=profile.avg_width, heavy_ops=profile.heavy_ops,
                    inter_op=config.inter_op_parallelism_threads, intra_op=config.intra_op_parallelism_threads,
                    per_session_threads=True, intra_per_session=controller.per_session_intra(),
                    note="frozen inference graph" + stream, analysis_ms=round(ms, 3),
                ))
        return cls(tuned, inputs, outputs, structure, plan, profile)


def _keras_signature(target: Any) -> list[Any] | None:
    module = type(target).__module__ or ""
    if not module.startswith(("keras", "tf_keras")):
        return None
    inputs = getattr(target, "inputs", None)
    if not inputs:
        return None
    import tensorflow as tf

    return [tf.TensorSpec([None, *list(t.shape)[1:]], tf.as_dtype(getattr(t, "dtype", "float32"))) for t in inputs]


def _concrete(target: Any, signature: tuple[Any, ...]) -> Any:
    """A ConcreteFunction of the target's inference call for ``signature``."""
    import tensorflow as tf

    if hasattr(target, "function_def") and hasattr(target, "graph"):  # already concrete
        return target
    if hasattr(target, "get_concrete_function"):  # tf.function
        return target.get_concrete_function(*signature)
    module = type(target).__module__ or ""
    if module.startswith(("keras", "tf_keras")):
        model = target
        single = len(signature) == 1

        @tf.function(autograph=False)
        def serve(*xs: Any) -> Any:
            return model(xs[0] if single else list(xs), training=False)

        return serve.get_concrete_function(*signature)
    if callable(target):
        return tf.function(target).get_concrete_function(*signature)
    raise TypeError(f"optimize() needs a Keras model, a tf.function or a ConcreteFunction, got {type(target).__name__}")


def optimize(
    fn_or_model: Any, *, mode: str = "latency", input_signature: Sequence[Any] | None = None,
    streams: int | None = None,
) -> OptimizedFunction:
    """A callable running ``fn_or_model``'s frozen inference graph in a session planned for it
    (in throughput mode, one session per planned stream)."""
    return OptimizedFunction(fn_or_model, mode=mode, input_signature=input_signature, streams=streams)

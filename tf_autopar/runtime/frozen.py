"""optimize(): run a model's inference graph in a session with pools planned for it.

Once the process pools are fixed, the only way to give one model its own thread counts is
a session of its own: the function is traced, its variables frozen into constants
(``convert_variables_to_constants_v2``'s steps: freezing.py), the graph imported into a fresh
tf.Graph and run by a ``tf.compat.v1.Session`` whose ConfigProto carries the model's plan and
``use_per_session_threads`` (and its own intra-op pool when TF_OVERRIDE_GLOBAL_THREADPOOL
was in force at start). The graph is the one the traced function runs, so outputs match the
function (and Keras 3's predict, which runs the same traced call) bit for bit.

What it takes, and how the result is called (the way the user would call the model):
- a Keras model (built in code or ``keras.models.load_model("m.keras")``): arrays
  positionally (a list for several inputs); returns what the model returns, as numpy;
- a SavedModel loaded with ``tf.saved_model.load``: its ``serving_default`` signature
  (``signature="name"`` for another); a signature ConcreteFunction
  (``loaded.signatures["serving_default"]``) likewise: keyword arguments by input name
  (positional too when there is a single input); returns a dict of numpy arrays keyed by
  output name;
- a tf.function, a ConcreteFunction or a plain callable: arguments positionally.
A free batch dimension is fine: signatures compile once (their placeholders keep None);
other functions compile per input signature (batch left free) on first use.

Stale constants: freezing copies the variables, so a later ``v.assign(...)`` or
``model.fit(...)`` would leave the session computing with the old weights. The variables the
frozen graph read are watched for writes (watch.py: eager assign/scatter/restore ops and
every tf.function run that may write them, e.g. fit's train step); a write moves the watch's
generation, and the next call re-freezes that input signature before running (logged once at
INFO). Why not compare values: a checksum per call costs a pass over every weight, and a
sample misses a write to an unsampled variable. Measured (benchmarks/bench_optimize_watch.py,
Dense 32-64-10 at batch 1, this shared 2-core host; results/optimize_watch.json): the per-call
check is one integer comparison, 0.03 us of a 130 us call; while a watch lives, each
tf.function call and eager write op in the process pays 0.2-0.4 us for the hooks (measured
alone; end to end, 229 us calls and 53 us assigns, the difference is below the noise); a
re-freeze costs 23 ms. ``refresh()`` re-freezes by hand, for writes the watch
cannot see (``tf.raw_ops``, tf.data functions). If the watch cannot be installed, the
callable runs the model itself rather than risk stale outputs.
Inference only: frozen variables do not train.

Throughput mode (``mode="throughput"``, optional ``streams=N``): the plan's streams become
that many sessions over the same frozen graph, each with the stream's inter-op and intra-op
pools; concurrent callers each take an idle stream (and wait, first come first served, when
all are busy: streams.py), so N requests run at once without oversubscribing the cores. In
latency mode concurrent callers share the one session's pools, as they share the process pools
on the original path.

Fail-open: if tf_autopar's own code fails, calls run the model itself on TensorFlow's
settings (one warning). Input that is no model, or a SavedModel without the signature asked
for, is a clear error at optimize() time.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Callable, Sequence

from tf_autopar.planning.modes import MODES
from tf_autopar.runtime import controller, freezing, model_sources, plans, sessions, watch
from tf_autopar.runtime.records import SessionRecord
from tf_autopar.runtime.streams import Retired, StreamPool
from tf_autopar.runtime.safety import fail_open
from tf_autopar.runtime.state import STATE

if TYPE_CHECKING:
    from tf_autopar.graph.profile import GraphProfile
    from tf_autopar.planning.plan import ThreadPlan

log = logging.getLogger("tf_autopar.runtime")

KERAS, SIGNATURE, POSITIONAL = "keras", "signature", "positional"  # calling conventions


class OptimizedFunction:
    """Callable with the model's calling convention, numpy out (see the module docstring).

    Compiled per input signature (shapes with a free batch dimension) on first call unless
    ``input_signature`` was given, the Keras model declares its inputs, or the target is a
    signature. Re-freezes by itself after the model's variables are written. Thread-safe.
    """

    def __init__(
        self,
        target: Any,
        mode: str = "latency",
        input_signature: Sequence[Any] | None = None,
        streams: int | None = None,
        signature: str | None = None,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be 'latency', 'throughput' or 'training', got {mode!r}")
        if streams is not None and (
            mode != "throughput" or isinstance(streams, bool) or not isinstance(streams, int) or streams < 1
        ):
            raise ValueError(f"streams must be a positive integer with mode='throughput', got {streams!r} ({mode})")
        self._tuned_fingerprint = model_sources.source_fingerprint(target)  # a model loaded after enable(): its tune
        self._target, self._kind = _resolve(target, signature)
        self._input_names: list[str] = _signature_inputs(self._target) if self._kind == SIGNATURE else []
        self._mode = mode
        self._streams = streams
        self._lock = threading.Lock()
        self._compiled: dict[Any, _Compiled] = {}
        self._concretes: dict[Any, Any] = {}  # traced once per key, re-frozen on refresh
        self._watch = watch.Watch()
        self._refreshes = 0
        if input_signature is not None:
            self._signature: list[Any] | None = list(input_signature)
        elif self._kind == KERAS:
            self._signature = keras_signature(self._target)
        else:
            self._signature = None
        # one graph when the input specs are known (a signature keeps its None batch); a str key
        # hashes once, a tuple of TensorSpecs would hash on every call
        self._fixed_key = "fixed" if self._kind == SIGNATURE or self._signature is not None else None
        self.plan: ThreadPlan | None = None
        self.profile: GraphProfile | None = None
        self._failed = False
        if self._signature is not None or self._kind == SIGNATURE:
            try:
                with self._lock:
                    self._compile(self._key([]))
            except Exception as exc:  # fail open: calls run the model itself
                self._fail(exc)

    # --------------------------------------------------------------------------- calling
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        arrays = self._flatten(args, kwargs)
        if self._failed:
            return self._fallback(arrays)
        while True:
            try:
                compiled = self._for(arrays)
            except Exception as exc:  # fail open: run the model as TensorFlow would
                self._fail(exc)
                return self._fallback(arrays)
            try:
                return compiled.run(arrays)
            except _Retired:  # refreshed by another thread between lookup and run
                continue

    def _fail(self, exc: Exception) -> None:
        """From now on every call runs the model itself (always fresh): no watch needed."""
        fail_open("build a tuned session for optimize()", exc)
        self._failed = True
        try:
            self._watch.close()
        except Exception as close_exc:
            log.debug("closing the variable watch failed", exc_info=close_exc)

    def refresh(self) -> None:
        """Re-freeze every compiled input signature from the variables' current values.

        Needed only after writes the watch cannot see (tf.raw_ops, tf.data functions);
        assign/fit/restore are detected and re-frozen on the next call by themselves.
        """
        try:
            with self._lock:
                for key in list(self._compiled):
                    self._compile(key, refresh=True, why="refresh() asked for it")
        except Exception as exc:  # fail open: calls run the model itself, fresh by definition
            self._fail(exc)

    @property
    def refreshes(self) -> int:
        """How many times stale constants were re-frozen (by the watch or refresh())."""
        return self._refreshes

    def _flatten(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any]:
        """The call's inputs as a flat list of numpy arrays, in the frozen graph's input order."""
        import numpy as np

        if self._kind == SIGNATURE:
            names = self._input_names
            if args:
                if len(args) != 1 or len(names) != 1 or kwargs:
                    raise TypeError(
                        f"this signature takes keyword arguments {names}"
                        + (" (a single positional argument only when it has one input)" if len(names) > 1 else "")
                        + f"; got {len(args)} positional and {sorted(kwargs)} keyword"
                    )
                kwargs = {names[0]: args[0]}
            missing = [n for n in names if n not in kwargs]
            unknown = sorted(set(kwargs) - set(names))
            if missing or unknown:
                raise TypeError(f"this signature takes inputs {names}: missing {missing}, unexpected {unknown}")
            values = [kwargs[n] for n in names]
        else:
            if kwargs:
                raise TypeError(f"this model takes its inputs positionally; got keyword arguments {sorted(kwargs)}")
            values = list(args)
            if (
                len(values) == 1
                and isinstance(values[0], (list, tuple))
                and self._signature is not None
                and len(self._signature) > 1
            ):
                values = list(values[0])  # model([a, b]) style
        return [np.asarray(v.numpy() if hasattr(v, "numpy") else v) for v in values]

    def _fallback(self, arrays: list[Any]) -> Any:
        import tensorflow as tf

        target = self._target
        if self._kind == KERAS:
            out = target(arrays[0] if len(arrays) == 1 else arrays, training=False)
        elif self._kind == SIGNATURE:
            out = target(**dict(zip(self._input_names, arrays)))
        else:
            out = target(*arrays)
        return tf.nest.map_structure(lambda t: t.numpy() if hasattr(t, "numpy") else t, out)

    def _key(self, arrays: list[Any]) -> Any:
        """Which compiled graph serves these inputs: the fixed one, else one per input spec (batch free)."""
        if self._fixed_key is not None:
            return self._fixed_key
        import tensorflow as tf

        return tuple(tf.TensorSpec([None, *a.shape[1:]] if a.ndim else [], tf.as_dtype(a.dtype)) for a in arrays)

    def _for(self, arrays: list[Any]) -> "_Compiled":
        key = self._key(arrays)
        compiled = self._compiled.get(key)
        if compiled is not None and compiled.generation == self._watch.generation:
            return compiled  # the per-call cost of the stale check: this comparison
        with self._lock:
            compiled = self._compiled.get(key)
            if compiled is None:
                return self._compile(key)
            if compiled.generation != self._watch.generation:
                return self._compile(key, refresh=True)
            return compiled

    def _compile(
        self, key: Any, refresh: bool = False, why: str = "the model's variables were written since they were frozen"
    ) -> "_Compiled":
        """Trace (once per key), freeze and open the sessions; the caller holds the lock."""
        t0 = time.perf_counter()
        generation = self._watch.generation  # read before the values: a write during freezing shows next call
        concrete = self._concretes.get(key)
        if concrete is None:
            with sessions.bypass():  # our own trace: no tf.function hook, no session patch
                concrete = concrete_for(self._target, key if isinstance(key, tuple) else tuple(self._signature or ()))
            self._watch.add(watch.resource_handles(concrete))  # raises if the watch cannot be installed
            self._concretes[key] = concrete
        old = self._compiled.get(key)
        compiled = _Compiled.build(
            concrete,
            self._mode,
            self._streams,
            self._input_names,
            reuse=old if refresh else None,
            tuned_fingerprint=self._tuned_fingerprint,
        )
        compiled.generation = generation
        self._compiled[key] = compiled
        if old is not None:
            old.retire()
        if refresh:
            self._refreshes += 1
            ms = (time.perf_counter() - t0) * 1e3
            level = logging.INFO if self._refreshes == 1 else logging.DEBUG
            log.log(
                level, "optimize(%s): %s; re-froze them (%.0f ms; %d so far)", compiled.name, why, ms, self._refreshes
            )
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
                c.retire()
            self._compiled.clear()
            self._concretes.clear()
            self._watch.close()


class FrozenGraph:
    """A concrete function's inference graph with its variables folded into constants, imported
    into a graph of its own (finalized once its sessions are open): what a session runs."""

    def __init__(self, concrete: Any, between: Callable[[str], None] | None = None) -> None:
        """``between(stage)``: called after "frozen" (the converter ran) and "imported" (the graph
        is in its own tf.Graph); the fast path gives freed memory back there (fastpath/memory.py)."""
        import tensorflow as tf

        frozen = freezing.freeze(concrete)
        self.inputs, self.outputs = frozen.inputs, frozen.outputs
        graph_def = frozen.graph_def
        del frozen
        if between is not None:
            between("frozen")
        self.graph = tf.Graph()
        with self.graph.as_default():
            tf.graph_util.import_graph_def(graph_def, name="")
        del graph_def  # the graph holds its own copy of the constants now
        # with each node's output shapes: the analysis sizes every op from them (without, every op
        # size is unknown and the plan keeps TensorFlow's default pool sizes: NASNetMobile at batch
        # 1 got 2x2 instead of 2x1, 55 against 26 ms per request)
        self.graph_def = self.graph.as_graph_def(add_shapes=True)
        if between is not None:
            between("imported")
        self.structure = concrete.structured_outputs  # freezing flattens it to a list
        # the function, for a converter that needs its loops as functional While ops
        # (functional_graph_def); the routed function holds it all the same
        self._concrete = concrete
        self.profiles: dict[tuple[Any, ...], GraphProfile] = {}  # (batch, input shapes) -> its analysis
        name = getattr(concrete, "name", "function")
        self.name = name.decode() if isinstance(name, bytes) else str(name)

    def functional_graph_def(self) -> Any:
        """The graph with its control flow as functional While/If ops, for another engine's
        converter; None when it has no lowered loops or conditionals (the frozen GraphDef serves).
        ``convert_variables_to_constants_v2`` lowers them to TF1's
        Switch/Merge/Enter/Exit by default, which TensorFlow's sessions run but tf2onnx turns into
        a model ONNX Runtime refuses ("Invalid tensor data type 0": an LSTM classifier)."""
        nodes = self.graph_def.node if self.graph_def is not None else self.graph.as_graph_def().node
        if not any(n.op in freezing.LOWERED_CONTROL_FLOW for n in nodes):
            return None
        frozen = freezing.freeze(self._concrete, lower_control_flow=False)
        if frozen.inputs != self.inputs or frozen.outputs != self.outputs:
            return None  # the converter names the tensors as the sessions do, or not at all
        return frozen.graph_def

    def open_sessions(self, inter_op: int, intra_op: int, count: int = 1) -> list[Any]:
        """``count`` sessions with their own pools (intra-op too where TF_OVERRIDE_GLOBAL_THREADPOOL
        was in force at start); sessions made here are not re-planned by the session hook."""
        import tensorflow as tf

        config = tf.compat.v1.ConfigProto(
            inter_op_parallelism_threads=inter_op, intra_op_parallelism_threads=intra_op, use_per_session_threads=True
        )
        with sessions.bypass():
            return [tf.compat.v1.Session(graph=self.graph, config=config) for _ in range(max(1, count))]

    def record_sessions(
        self,
        opened: Sequence[Any],
        profile: GraphProfile,
        inter_op: int,
        intra_op: int,
        note: str,
        analysis_ms: float = 0.0,
    ) -> None:
        """One status() record per session."""
        with STATE.lock:
            for i in range(len(opened)):
                stream = f" stream {i + 1}/{len(opened)}" if len(opened) > 1 else ""
                STATE.sessions.append(
                    SessionRecord(
                        session=STATE.next_session_name() + " (optimize)",
                        graph_nodes=len(self.graph_def.node),
                        fingerprint=profile.fingerprint,
                        avg_width=profile.avg_width,
                        heavy_ops=profile.heavy_ops,
                        inter_op=inter_op,
                        intra_op=intra_op,
                        per_session_threads=True,
                        intra_per_session=controller.per_session_intra(),
                        note=note + stream,
                        analysis_ms=round(analysis_ms, 3),
                    )
                )


class _Compiled:
    def __init__(self, pool: StreamPool, frozen: FrozenGraph, plan: ThreadPlan, profile: GraphProfile) -> None:
        self.pool, self.inputs, self.outputs = pool, frozen.inputs, frozen.outputs
        self.structure, self.plan, self.profile, self.name = frozen.structure, plan, profile, frozen.name
        self.sessions = pool.sessions
        self.generation = 0
        self._run = pool.bind(self.outputs, self.inputs)

    def run(self, arrays: list[Any]) -> Any:
        import tensorflow as tf

        if len(arrays) != len(self.inputs):
            raise ValueError(f"expected {len(self.inputs)} input(s), got {len(arrays)}")
        try:
            values = self._run(arrays)
        except Retired:
            raise _Retired() from None
        return tf.nest.pack_sequence_as(self.structure, values)

    def retire(self) -> None:
        """Close idle sessions now and busy ones when their call returns; later callers retry."""
        self.pool.retire()

    @classmethod
    def build(
        cls,
        concrete: Any,
        mode: str,
        streams: int | None = None,
        input_names: Sequence[str] = (),
        reuse: "_Compiled | None" = None,
        tuned_fingerprint: str | None = None,
    ) -> "_Compiled":
        """Freeze ``concrete`` and open its sessions; ``reuse``: a stale build whose plan still holds
        (same graph, new constants), so no new analysis and no new session records."""
        frozen = FrozenGraph(concrete)
        if input_names and len(input_names) != len(frozen.inputs):
            raise RuntimeError(f"frozen graph has {len(frozen.inputs)} inputs for signature inputs {list(input_names)}")
        if reuse is not None:
            profile, plan, ms = reuse.profile, reuse.plan, 0.0
        else:
            profile, ms = plans.analyze_graph(frozen.graph_def, f"optimize({frozen.name})")
            plan = plans.plan_for(profile, mode, streams=streams, tuned_fingerprint=tuned_fingerprint)
        fields = plan.config_proto_fields()
        inter, intra = fields["inter_op_parallelism_threads"], fields["intra_op_parallelism_threads"]
        tuned = frozen.open_sessions(inter, intra, plan.instances)
        frozen.graph.finalize()
        if reuse is None:
            frozen.record_sessions(tuned, profile, inter, intra, "frozen inference graph", ms)
        return cls(StreamPool(tuned), frozen, plan, profile)


class _Retired(Exception):
    """A compiled graph was replaced by a fresh one while a caller was about to use it."""


def _is_keras(target: Any) -> bool:
    return (type(target).__module__ or "").startswith(("keras", "tf_keras"))


def _is_concrete(target: Any) -> bool:
    return hasattr(target, "function_def") and hasattr(target, "graph") and hasattr(target, "structured_outputs")


def _resolve(target: Any, signature: str | None) -> tuple[Any, str]:
    """(what to trace or freeze, calling convention); TypeError/ValueError for what is no model."""
    if _is_keras(target):
        if signature is not None:
            raise ValueError(
                "signature= selects a signature of a SavedModel loaded with tf.saved_model.load; "
                f"got a Keras {type(target).__name__}"
            )
        return target, KERAS
    if _is_concrete(target):
        if signature is not None:
            raise ValueError("signature= selects a signature of a loaded SavedModel; got a ConcreteFunction")
        return target, SIGNATURE if _keyword_only(target) else POSITIONAL
    signatures = getattr(target, "signatures", None)
    if isinstance(signatures, Mapping) and not hasattr(target, "get_concrete_function"):
        names = sorted(signatures)
        wanted = "serving_default" if signature is None else signature
        if wanted not in signatures:
            functions = sorted(
                n
                for n in dir(target)
                if not n.startswith("_") and hasattr(getattr(target, n, None), "get_concrete_function")
            )
            if not names:
                raise ValueError(
                    "this SavedModel has no signatures, so optimize() does not know which inputs it serves"
                    + (
                        f"; pass one of its tf.functions instead, e.g. optimize(loaded.{functions[0]}) "
                        f"(it has: {', '.join(functions)})"
                        if functions
                        else ""
                    )
                    + ", or export it with signatures (model.export(path) for Keras; "
                    "tf.saved_model.save(obj, path, signatures=...))"
                )
            raise ValueError(f"this SavedModel has no signature {wanted!r}; its signatures: {', '.join(names)}")
        return signatures[wanted], SIGNATURE
    if signature is not None:
        raise ValueError(f"signature= needs a SavedModel loaded with tf.saved_model.load, got {type(target).__name__}")
    if isinstance(target, (str, bytes, os.PathLike)):
        raise TypeError(
            f"optimize() takes a model object, not a path ({target!r}): load it first with "
            "tf.saved_model.load(path) or keras.models.load_model(path)"
        )
    if hasattr(target, "get_concrete_function") or callable(target):
        return target, POSITIONAL
    raise TypeError(
        "optimize() takes a Keras model, a SavedModel loaded with tf.saved_model.load (or one of its "
        f"signatures), a tf.function, a ConcreteFunction or a callable; got {type(target).__name__}"
    )


def _keyword_only(concrete: Any) -> bool:
    """True for a signature-style ConcreteFunction: inputs by keyword only, as SavedModel signatures take."""
    spec = getattr(concrete, "structured_input_signature", None)
    return bool(isinstance(spec, tuple) and len(spec) == 2 and not spec[0] and isinstance(spec[1], Mapping) and spec[1])


def _signature_inputs(concrete: Any) -> list[str]:
    """Input names in the order the function's flat inputs (and the frozen placeholders) take them."""
    import tensorflow as tf

    specs = concrete.structured_input_signature[1]
    return tf.nest.flatten({k: k for k in specs})  # TF flattens a dict in sorted key order


def keras_signature(target: Any) -> list[Any] | None:
    inputs = getattr(target, "inputs", None)
    if not inputs:
        return None
    import tensorflow as tf

    return [tf.TensorSpec([None, *list(t.shape)[1:]], tf.as_dtype(getattr(t, "dtype", "float32"))) for t in inputs]


def concrete_for(target: Any, signature: tuple[Any, ...]) -> Any:
    """A ConcreteFunction of the target's inference call for ``signature``."""
    import tensorflow as tf

    if _is_concrete(target):  # a signature or a ConcreteFunction the user traced
        return target
    if hasattr(target, "get_concrete_function"):  # tf.function
        return target.get_concrete_function(*signature)
    if _is_keras(target):
        model = target
        single = len(signature) == 1
        struct = getattr(model, "_inputs_struct", None)  # a Functional model's inputs as declared (a dict, ...)
        nested = struct is not None and not single and len(tf.nest.flatten(struct)) == len(signature)

        @tf.function(autograph=False)
        def serve(*xs: Any) -> Any:
            if nested:
                return model(tf.nest.pack_sequence_as(struct, list(xs)), training=False)
            return model(xs[0] if single else list(xs), training=False)

        return serve.get_concrete_function(*signature)
    return tf.function(target).get_concrete_function(*signature)


def optimize(
    fn_or_model: Any,
    *,
    mode: str = "latency",
    input_signature: Sequence[Any] | None = None,
    streams: int | None = None,
    signature: str | None = None,
) -> OptimizedFunction:
    """A callable running the model's frozen inference graph in a session planned for it.

    For when the process pools are already fixed and the model's plan differs (see status()).
    Takes a Keras model (also from ``keras.models.load_model``), a SavedModel from
    ``tf.saved_model.load`` (its ``serving_default``, or ``signature="name"``), a signature
    ConcreteFunction, a tf.function or a callable; call the result as you would call the model
    (signatures: inputs by keyword, dict of numpy out). Outputs match the model's traced call
    (bit for bit for Keras models). Writes to the model's variables (assign, fit, restore) are
    watched, and the next call re-freezes, so outputs are never stale; ``.refresh()`` for writes
    the watch cannot see. ``mode="throughput"``: one session per planned stream (``streams`` to
    choose how many); concurrent callers run on separate streams. Thread-safe.
    """
    return OptimizedFunction(
        fn_or_model, mode=mode, input_signature=input_signature, streams=streams, signature=signature
    )

"""Build and run any registered workload the same way: tf.function, TF1 Session, graph export.

Why two paths: per-session thread pools (``use_per_session_threads``,
``session_inter_op_thread_pool``) only act on a ``tf.compat.v1.Session``, while most
users run tf.functions; every workload therefore runs both ways on the same weights.

- Inference, function path: a tf.function with a fixed input signature (the flattened
  inputs of one batch) calling ``model(x, training=False)``.
- Inference, session path: that function's concrete function frozen with
  ``convert_variables_to_constants_v2``, its GraphDef imported into a fresh tf.Graph and
  run in a ``tf.compat.v1.Session`` built with the caller's ConfigProto.
- Training, both paths: one step = forward with ``model.stateless_call(..., training=True)``,
  the workload's loss, gradients with ``tf.GradientTape``, and a hand-written Adam update
  (lr from the workload, beta1 0.9, beta2 0.999, eps 1e-7) plus the model's non-trainable
  state updates (BatchNorm moving statistics, seed-generator states) written back with
  assign ops. ``stateless_call`` is used because Keras 3 layers called in a TF1 graph
  would create their state-update assigns outside any fetched op; with the updates as
  explicit ops the same step function runs in a tf.function and in a real TF1 graph.
  The session path rebuilds the Keras model inside ``tf.Graph().as_default()`` (Keras 3
  accepts graph mode: its variables become graph ResourceVariables), feeds the batch
  through ``tf.compat.v1.placeholder``s, and starts from the eager model's current weights
  (copied in with assign ops), so both paths compute the same losses.
"""

from __future__ import annotations

import logging
import math
import resource
import time
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from tf_autopar_workloads.base import MODES, SIZES, Workload

log = logging.getLogger("tf_autopar.workloads")

PATHS = ("function", "session")
ADAM_BETA1 = 0.9
ADAM_BETA2 = 0.999
ADAM_EPS = 1e-7


def _resolve(workload_or_name: Workload | str) -> Workload:
    if isinstance(workload_or_name, Workload):
        return workload_or_name
    import tf_autopar_workloads as workloads

    return workloads.get(workload_or_name)


def _check(size: str, mode: str | None = None, path: str | None = None) -> None:
    if size not in SIZES:
        raise ValueError(f"unknown size {size!r}; choose from {', '.join(SIZES)}")
    if mode is not None and mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; choose from {', '.join(MODES)}")
    if path is not None and path not in PATHS:
        raise ValueError(f"unknown path {path!r}; choose from {', '.join(PATHS)}")


def peak_rss_mb() -> float:
    """Process-wide peak resident set size in MiB (ru_maxrss; Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _specs(flat: list[np.ndarray]) -> list[Any]:
    import tensorflow as tf

    return [tf.TensorSpec(shape=a.shape, dtype=tf.as_dtype(a.dtype)) for a in flat]


def _adam_slots(variables: list[Any]) -> tuple[list[Any], list[Any], Any]:
    """Zero Adam moments and a step counter, created in the current (eager or graph) context."""
    import tensorflow as tf

    m = [tf.Variable(tf.zeros(v.shape, v.dtype), trainable=False, name="adam_m") for v in variables]
    v2 = [tf.Variable(tf.zeros(v.shape, v.dtype), trainable=False, name="adam_v") for v in variables]
    t = tf.Variable(0.0, trainable=False, name="adam_t", dtype=tf.float32)
    return m, v2, t


def _train_step_ops(model: Any, loss_fn: Any, x: Any, y: Any, slots: tuple, lr: float) -> Any:
    """One training step as TF ops; returns the loss tensor, gated on every update.

    Works unchanged inside a tf.function and inside a TF1 graph (see the module docstring).
    """
    import tensorflow as tf

    train_vars = [v.value for v in model.trainable_variables]
    state_vars = [v.value for v in model.non_trainable_variables]
    m_slots, v_slots, t_var = slots
    with tf.GradientTape() as tape:
        values = [v.read_value() for v in train_vars]
        tape.watch(values)
        state = [v.read_value() for v in state_vars]
        y_pred, new_state = model.stateless_call(values, state, x, training=True)
        loss = tf.cast(loss_fn(y, y_pred), tf.float32)
    grads = tape.gradient(loss, values)
    t_new = t_var.read_value() + 1.0
    lr_t = lr * tf.sqrt(1.0 - tf.pow(ADAM_BETA2, t_new)) / (1.0 - tf.pow(ADAM_BETA1, t_new))
    updates = [t_var.assign(t_new)]
    for var, grad, m, v in zip(train_vars, grads, m_slots, v_slots):
        if grad is None:
            continue
        if isinstance(grad, tf.IndexedSlices):
            grad = tf.convert_to_tensor(grad)
        m_new = ADAM_BETA1 * m.read_value() + (1.0 - ADAM_BETA1) * grad
        v_new = ADAM_BETA2 * v.read_value() + (1.0 - ADAM_BETA2) * tf.square(grad)
        updates += [
            m.assign(m_new),
            v.assign(v_new),
            var.assign_sub(tf.cast(lr_t, var.dtype) * m_new / (tf.sqrt(v_new) + ADAM_EPS)),
        ]
    for var, new in zip(state_vars, new_state):
        updates.append(var.assign(tf.cast(new, var.dtype)))
    with tf.control_dependencies(updates):
        return tf.identity(loss)


class InferSession:
    """The frozen inference graph in a tf.compat.v1.Session; ``run(inputs=None)`` -> outputs."""

    def __init__(self, built: "Built", config: Any = None) -> None:
        import tensorflow as tf
        from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

        self._built = built
        frozen = convert_variables_to_constants_v2(built.infer_concrete())
        self.graph_def = frozen.graph.as_graph_def()
        self.graph = tf.Graph()
        with self.graph.as_default():
            tf.graph_util.import_graph_def(self.graph_def, name="")
        self.input_names = [t.name for t in frozen.inputs]
        self.output_names = [t.name for t in frozen.outputs]
        self.session = tf.compat.v1.Session(graph=self.graph, config=config)

    def run(self, inputs: Any = None, run_options: Any = None) -> Any:
        import tensorflow as tf

        flat = self._built._flat_inputs if inputs is None else [np.asarray(a) for a in tf.nest.flatten(inputs)]
        out = self.session.run(self.output_names, dict(zip(self.input_names, flat)), options=run_options)
        return tf.nest.pack_sequence_as(self._built._out_struct, out)

    def close(self) -> None:
        self.session.close()

    def __enter__(self) -> "InferSession":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class TrainSession:
    """A real graph-mode training step in a tf.compat.v1.Session; ``run(inputs, targets)`` -> loss."""

    def __init__(self, built: "Built", config: Any = None) -> None:
        import keras
        import tensorflow as tf

        self._built = built
        self.graph = tf.Graph()
        with self.graph.as_default():
            keras.utils.set_random_seed(built.seed)
            model = built.workload.build_model(built.hparams)
            self._x_ph = [
                tf.compat.v1.placeholder(s.dtype, s.shape, name=f"input_{i}")
                for i, s in enumerate(_specs(built._flat_inputs))
            ]
            self._y_ph = [
                tf.compat.v1.placeholder(s.dtype, s.shape, name=f"target_{i}")
                for i, s in enumerate(_specs(built._flat_targets))
            ]
            x = tf.nest.pack_sequence_as(built._in_struct, self._x_ph)
            y = tf.nest.pack_sequence_as(built._tgt_struct, self._y_ph)
            slots = _adam_slots([v.value for v in model.trainable_variables])
            self.loss = _train_step_ops(model, built.workload.loss, x, y, slots, built.lr)
            init = tf.compat.v1.global_variables_initializer()
            # Start from the eager model's current weights so both paths agree.
            graph_vars = [v.value for v in model.variables]
            eager_vars = list(built.model.variables)
            if [tuple(v.shape) for v in graph_vars] != [tuple(v.shape) for v in eager_vars]:
                raise RuntimeError(f"workload {built.workload.name}: graph-mode rebuild has different variables")
            feeds = [tf.compat.v1.placeholder(v.dtype, v.shape) for v in graph_vars]
            load = tf.group(*[v.assign(p) for v, p in zip(graph_vars, feeds)])
        self.graph.finalize()
        self.session = tf.compat.v1.Session(graph=self.graph, config=config)
        self.session.run(init)
        self.session.run(load, dict(zip(feeds, [np.asarray(v.numpy()) for v in eager_vars])))

    def run(self, inputs: Any = None, targets: Any = None, run_options: Any = None) -> float:
        import tensorflow as tf

        b = self._built
        xs = b._flat_inputs if inputs is None else [np.asarray(a) for a in tf.nest.flatten(inputs)]
        ys = b._flat_targets if targets is None else [np.asarray(a) for a in tf.nest.flatten(targets)]
        feed = dict(zip(self._x_ph, xs))
        feed.update(zip(self._y_ph, ys))
        return float(self.session.run(self.loss, feed, options=run_options))

    def close(self) -> None:
        self.session.close()

    def __enter__(self) -> "TrainSession":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


@dataclass
class Built:
    """A workload's model at one size and batch, with one synthetic batch and its run paths."""

    workload: Workload
    size: str
    batch: int
    seed: int
    hparams: Mapping[str, Any]
    model: Any
    inputs: Any
    targets: Any
    build_s: float = 0.0
    _flat_inputs: list = field(default_factory=list, repr=False)
    _flat_targets: list = field(default_factory=list, repr=False)
    _in_struct: Any = field(default=None, repr=False)
    _tgt_struct: Any = field(default=None, repr=False)
    _out_struct: Any = field(default=None, repr=False)
    _infer_fn: Any = field(default=None, repr=False)
    _train_fn: Any = field(default=None, repr=False)
    _slots: Any = field(default=None, repr=False)

    @property
    def lr(self) -> float:
        return self.workload.lr(self.size)

    # ---- tf.function path -------------------------------------------------------------
    def infer_function(self) -> Any:
        """tf.function(flat inputs...) -> flat outputs list, with a fixed input signature."""
        if self._infer_fn is None:
            import tensorflow as tf

            model, struct = self.model, self._in_struct

            def infer(*flat):
                out = model(tf.nest.pack_sequence_as(struct, list(flat)), training=False)
                self._out_struct = tf.nest.map_structure(lambda _: None, out)  # structure only
                return tf.nest.flatten(out)

            self._infer_fn = tf.function(infer, input_signature=_specs(self._flat_inputs), autograph=False)
        return self._infer_fn

    def infer_concrete(self) -> Any:
        """The ConcreteFunction of infer_function() (what graph analysis and freezing use)."""
        return self.infer_function().get_concrete_function()

    def train_function(self) -> Any:
        """tf.function(flat inputs..., flat targets...) -> loss; forward, loss, gradients, Adam update."""
        if self._train_fn is None:
            import tensorflow as tf

            b = self
            n_in = len(self._flat_inputs)
            self._slots = _adam_slots([v.value for v in self.model.trainable_variables])

            def train(*flat):
                x = tf.nest.pack_sequence_as(b._in_struct, list(flat[:n_in]))
                y = tf.nest.pack_sequence_as(b._tgt_struct, list(flat[n_in:]))
                return _train_step_ops(b.model, b.workload.loss, x, y, b._slots, b.lr)

            self._train_fn = tf.function(
                train, input_signature=_specs(self._flat_inputs + self._flat_targets), autograph=False
            )
        return self._train_fn

    def train_concrete(self) -> Any:
        return self.train_function().get_concrete_function()

    def infer(self, inputs: Any = None) -> Any:
        """Outputs (numpy, the model's output structure) for ``inputs`` (default: the built batch)."""
        import tensorflow as tf

        flat = self._flat_inputs if inputs is None else tf.nest.flatten(inputs)
        out = self.infer_function()(*flat)
        return tf.nest.pack_sequence_as(self._out_struct, [o.numpy() for o in out])

    def train_step(self, inputs: Any = None, targets: Any = None) -> float:
        """One training step on ``inputs``/``targets`` (default: the built batch); returns the loss."""
        import tensorflow as tf

        xs = self._flat_inputs if inputs is None else tf.nest.flatten(inputs)
        ys = self._flat_targets if targets is None else tf.nest.flatten(targets)
        return float(self.train_function()(*xs, *ys).numpy())

    # ---- graph export and session path ------------------------------------------------
    def graph_def(self, mode: str = "infer") -> Any:
        """The tf.function's graph as a GraphDef, function library included (for analysis)."""
        _check(self.size, mode)
        concrete = self.infer_concrete() if mode == "infer" else self.train_concrete()
        return concrete.graph.as_graph_def(add_shapes=True)  # shapes give each heavy op's work

    def session(self, mode: str = "infer", config: Any = None) -> InferSession | TrainSession:
        """The same computation in a tf.compat.v1.Session built with ``config`` (a ConfigProto)."""
        _check(self.size, mode)
        if mode == "infer":
            self.infer_concrete()  # traces, records the output structure
            return InferSession(self, config)
        return TrainSession(self, config)


def build(workload_or_name: Workload | str, size: str = "tiny", batch: int | None = None, seed: int = 0) -> Built:
    """Build the model and one synthetic batch, deterministically from ``seed``. A bad name, size
    or batch is refused before TensorFlow is imported (seconds)."""
    workload = _resolve(workload_or_name)
    _check(size)
    hparams = workload.hyperparameters(size)
    batch = workload.default_batch if batch is None else int(batch)
    if batch < 1:
        raise ValueError(f"batch must be a positive integer, got {batch}")
    import keras
    import tensorflow as tf

    start = time.perf_counter()
    keras.utils.set_random_seed(seed)
    model = workload.build_model(hparams)
    inputs, targets = workload.make_data(hparams, batch, np.random.default_rng(seed))
    flat_in = [np.asarray(a) for a in tf.nest.flatten(inputs)]
    flat_tg = [np.asarray(a) for a in tf.nest.flatten(targets)]
    built = Built(
        workload=workload,
        size=size,
        batch=batch,
        seed=seed,
        hparams=hparams,
        model=model,
        inputs=inputs,
        targets=targets,
        _flat_inputs=flat_in,
        _flat_targets=flat_tg,
        _in_struct=inputs,
        _tgt_struct=targets,
    )
    if not model.built:
        model(inputs, training=False)  # subclassed models create their variables on the first (eager) call
    built.build_s = time.perf_counter() - start
    log.info("built %s (%s, batch %d) in %.2f s", workload.name, size, batch, built.build_s)
    return built


def summarize(times: list[float]) -> dict[str, float]:
    """Median and p10/p90 of step times (seconds)."""
    if not times:
        return {"median_s": math.nan, "p10_s": math.nan, "p90_s": math.nan}
    p10, p50, p90 = np.percentile(np.asarray(times, dtype=float), [10, 50, 90])
    return {"median_s": float(p50), "p10_s": float(p10), "p90_s": float(p90)}


def run(
    name: Workload | str,
    mode: str = "infer",
    batch: int | None = None,
    steps: int = 10,
    size: str = "tiny",
    path: str = "function",
    warmup: int = 2,
    config: Any = None,
    seed: int = 0,
) -> dict[str, Any]:
    """Time ``steps`` steps (after ``warmup`` untimed ones) on the built batch; JSON-ready dict.

    Each timed step includes fetching the result to numpy. ``losses`` lists the timed
    training steps' losses (empty for inference). ``peak_rss_mb`` is the process-wide peak.
    """
    _check(size, mode, path)
    if steps < 1:
        raise ValueError(f"steps must be a positive integer, got {steps}")
    if warmup < 0:
        raise ValueError(f"warmup must be zero or more, got {warmup}")
    built = build(name, size=size, batch=batch, seed=seed)
    closer = None
    if path == "function":
        if mode == "infer":
            import tensorflow as tf

            fn = built.infer_function()
            args = [tf.constant(a) for a in built._flat_inputs]

            def step() -> float | None:
                for o in fn(*args):
                    o.numpy()
                return None
        else:
            import tensorflow as tf

            fn = built.train_function()
            args = [tf.constant(a) for a in built._flat_inputs + built._flat_targets]

            def step() -> float | None:
                return float(fn(*args).numpy())
    else:
        sess = built.session(mode, config)
        closer = sess.close
        step = sess.run  # type: ignore[assignment]
    try:
        for _ in range(warmup):
            step()
        times: list[float] = []
        losses: list[float] = []
        for _ in range(steps):
            t0 = time.perf_counter()
            result = step()
            times.append(time.perf_counter() - t0)
            if mode == "train":
                losses.append(float(result))  # type: ignore[arg-type]
    finally:
        if closer is not None:
            closer()
    return {
        "workload": built.workload.name,
        "mode": mode,
        "size": size,
        "batch": built.batch,
        "steps": steps,
        "path": path,
        "step_times_s": times,
        **summarize(times),
        "losses": losses,
        "peak_rss_mb": peak_rss_mb(),
        "build_s": built.build_s,
    }


def graph_def(name: Workload | str, mode: str = "infer", size: str = "tiny", batch: int | None = None) -> Any:
    """Convenience: build ``name`` at ``size`` (and ``batch``, default: the published one) and
    return its GraphDef for ``mode``, with static shapes."""
    return build(name, size=size, batch=batch).graph_def(mode)

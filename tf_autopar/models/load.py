"""Load a user's model (SavedModel directory or .keras file), describe its inputs, run one request.

Meant for child processes: ``load()`` imports TensorFlow (and Keras for .keras files),
which fixes the thread pools of the process that calls it. ``model_kind()`` (and
``tf_autopar._model_path.looks_like_model()``) are pure, for the parents (bench, validate) that
must not import TF.

- SavedModel: ``tf.saved_model.load(path).signatures[NAME]`` (default ``serving_default``):
  what a Python server calls. Inputs are the signature's keyword arguments.
- .keras: ``keras.models.load_model(path, compile=False)``, called through one tf.function
  traced at the request's shapes: what ``model.predict`` runs per batch, without its
  per-call data-adapter overhead.
"""

from __future__ import annotations

import logging
import os
import zipfile
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from tf_autopar.graph import analyze
from tf_autopar.models.options import ModelOptions

# The parents import this module for model_kind(): TensorFlow, numpy (it starts BLAS threads) and
# models/inputs.py (numpy) are imported where a child uses them, and runtime/frozen.py where a
# frozen graph is built (the CLI's start need not import it).
if TYPE_CHECKING:
    import numpy as np

    from tf_autopar.graph.profile import GraphProfile
    from tf_autopar.models.inputs import InputSpec

log = logging.getLogger("tf_autopar.models")

SAVEDMODEL, KERAS = "savedmodel", "keras"
DEFAULT_SIGNATURE = "serving_default"
KIND_TEXT = {SAVEDMODEL: "SavedModel", KERAS: "Keras file"}


def model_kind(path: str) -> str:
    """SAVEDMODEL or KERAS, from the file system alone; ValueError naming what is wrong."""
    path = os.path.expanduser(path)
    if not os.path.exists(path):
        raise ValueError(f"{path}: no such file or directory (expected a SavedModel directory or a .keras file)")
    if os.path.isdir(path):
        if any(os.path.isfile(os.path.join(path, f)) for f in ("saved_model.pb", "saved_model.pbtxt")):
            return SAVEDMODEL
        raise ValueError(f"{path} is a directory but not a SavedModel: it has no saved_model.pb")
    if os.path.basename(path) in ("saved_model.pb", "saved_model.pbtxt"):
        raise ValueError(f"{path}: pass the SavedModel directory ({os.path.dirname(path) or '.'}), not its .pb file")
    if path.endswith(".keras"):
        if not zipfile.is_zipfile(path):
            raise ValueError(
                f"{path} is not a valid .keras file (a .keras file is a zip archive; this one is corrupt "
                f"or something else)"
            )
        return KERAS
    raise ValueError(f"{path} is neither a SavedModel directory nor a .keras file")


def tf_version() -> str:
    import tensorflow as tf

    return str(tf.__version__)


class LoadedModel:
    """A loaded model: its input specs, and a step that runs one request on given arrays."""

    def __init__(
        self,
        kind: str,
        path: str,
        signature: str | None,
        inputs: tuple[InputSpec, ...],
        outputs: tuple[str, ...],
        obj: Any,
        fn: Any,
    ) -> None:
        self.kind = kind
        self.path = path
        self.signature = signature
        self.inputs = inputs
        self.outputs = outputs
        self._obj = obj  # the loaded root (SavedModel) or the Keras model: keeps the variables alive
        self._fn = fn  # the signature's ConcreteFunction (SavedModel); None for Keras
        self._keras_fn: Any = None

    def describe(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "path": self.path,
            "signature": self.signature,
            "inputs": [s.to_dict() for s in self.inputs],
            "outputs": list(self.outputs),
        }

    # ------------------------------------------------------------------ running

    def _tensors(self, arrays: Mapping[str, np.ndarray]) -> dict[str, Any]:
        import tensorflow as tf

        out = {}
        for s in self.inputs:
            t = tf.constant(arrays[s.name])
            if t.dtype.name != s.dtype:
                t = tf.cast(t, s.dtype)  # bfloat16 inputs are made as float32 (numpy has no bfloat16)
            out[s.name] = t
        return out

    def step(self, arrays: Mapping[str, np.ndarray]) -> Callable[[], None]:
        """A no-argument callable running one request and fetching every output to numpy."""
        tensors = self._tensors(arrays)
        if self.kind == SAVEDMODEL:
            fn = self._fn

            def run() -> None:
                for v in fn(**tensors).values():
                    v.numpy()

            return run
        flat = [tensors[s.name] for s in self.inputs]
        concrete = self._keras_concrete(flat)

        def run_keras() -> None:
            for v in concrete(*flat):
                v.numpy()

        return run_keras

    def serving_call(self, arrays: Mapping[str, np.ndarray]) -> Callable[[], Any]:
        """A no-argument callable making the call a server makes, with numpy in: the signature by
        keyword (a SavedModel), ``predict`` of one batch (Keras). Under enable() the fast path
        serves these calls (runtime/fastpath/); ``step`` runs the model's own function instead."""
        if self.kind == SAVEDMODEL:
            fn, kwargs = self._fn, {s.name: arrays[s.name] for s in self.inputs}
            return lambda: fn(**kwargs)
        model = self._obj
        flat = [arrays[s.name] for s in self.inputs]
        x = flat[0] if len(flat) == 1 else flat
        return lambda: model.predict(x, verbose=0, batch_size=max(32, len(flat[0])))

    def _keras_concrete(self, flat: Sequence[Any]) -> Any:
        """model(x, training=False) as one tf.function traced at these shapes (flat outputs)."""
        import tensorflow as tf

        model = self._obj
        structure = _keras_structure(model)

        def call(*xs: Any) -> Any:
            return tf.nest.flatten(model(tf.nest.pack_sequence_as(structure, list(xs)), training=False))

        specs = [tf.TensorSpec(t.shape, t.dtype, name=s.name) for t, s in zip(flat, self.inputs)]
        self._keras_fn = tf.function(call, input_signature=specs)
        return self._keras_fn.get_concrete_function()

    # ------------------------------------------------------------------ graph facts

    def concrete_function(self, arrays: Mapping[str, np.ndarray] | None = None) -> Any:
        """The graph one request runs: the signature's function, or the Keras call traced at the arrays' shapes."""
        if self.kind == SAVEDMODEL:
            return self._fn
        import tensorflow as tf

        if arrays is None:
            specs = [tf.TensorSpec(s.shape, s.dtype, name=s.name) for s in self.inputs]
            structure = _keras_structure(self._obj)
            model = self._obj
            fn = tf.function(
                lambda *xs: tf.nest.flatten(model(tf.nest.pack_sequence_as(structure, list(xs)), training=False)),
                input_signature=specs,
            )
            return fn.get_concrete_function()
        return self._keras_concrete([self._tensors(arrays)[s.name] for s in self.inputs])

    def int_bounds(self) -> dict[str, tuple[int, str]]:
        """Per integer input: (rows, description) of the smallest table it indexes; {} when none is seen.

        Never raises: the bound is a convenience, and 1000 (or --int-max) is the fallback.
        """
        wanted = [s for s in self.inputs if s.dtype.startswith(("int", "uint"))]
        if not wanted:
            return {}
        try:
            cf = self.concrete_function()
            placeholders = _input_placeholders(cf, [s.name for s in self.inputs])
            return table_bounds(
                cf.graph, {name: t for name, t in placeholders.items() if name in {s.name for s in wanted}}
            )
        except Exception as exc:  # noqa: BLE001 - see docstring
            log.info("could not read embedding table sizes from the graph: %s", exc)
            return {}

    def profile(self, batch: int, shapes: Mapping[str, Sequence[int]]) -> tuple[GraphProfile, str]:
        """The GraphProfile the plan is made from, at ``batch`` and the shapes that run; and a note.

        SavedModel: ``tf_autopar.graph.analyze(path, batch=, input_shapes=)`` reads the
        protobuf with every input's full shape given, so the analysis assumes what the
        measured runs do. Keras: analyze(model, input_signature=[specs at these shapes]).
        """
        full = {k: tuple(int(d) for d in v) for k, v in shapes.items()}
        note = f"analysed at batch {batch}, shapes {_shapes_text(full)}"
        if self.kind == SAVEDMODEL:
            return analyze(self.path, signature=self.signature, batch=batch, input_shapes=full), note
        import tensorflow as tf

        structure = _keras_structure(self._obj)
        specs = tf.nest.pack_sequence_as(
            structure, [tf.TensorSpec(full[s.name], s.dtype, name=s.name) for s in self.inputs]
        )
        return analyze(self._obj, input_signature=[specs], batch=batch, input_shapes=full), note


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"


def _shapes_text(shapes: Mapping[str, Sequence[int]]) -> str:
    return ", ".join(f"{k}=[{','.join(map(str, v))}]" for k, v in sorted(shapes.items()))


def _keras_structure(model: Any) -> Any:
    """The structure model(x) takes (one tensor, a list or a dict of its inputs)."""
    try:
        return model.input
    except (AttributeError, ValueError):
        inputs = getattr(model, "inputs", None)
        if not inputs:
            raise ValueError(
                f"the Keras model {getattr(model, 'name', '?')!r} has no known inputs (a subclassed "
                f"model never built?): save a functional or built model"
            ) from None
        return inputs[0] if len(inputs) == 1 else list(inputs)


def load(path: str, signature: str | None = None) -> LoadedModel:
    """Load ``path``; ValueError naming the problem (missing, corrupt, no signatures, unknown signature)."""
    kind = model_kind(path)
    path = os.path.abspath(os.path.expanduser(path))
    if kind == SAVEDMODEL:
        return _load_saved_model(path, signature)
    if signature is not None:
        raise ValueError(f"--signature applies to SavedModels; {path} is a .keras file")
    return _load_keras(path)


def _load_saved_model(path: str, signature: str | None) -> LoadedModel:
    import tensorflow as tf

    from tf_autopar.models.inputs import InputSpec

    try:
        obj = tf.saved_model.load(path)
    except Exception as exc:  # noqa: BLE001 - any loader failure is a bad model file for the user
        raise ValueError(
            f"cannot load the SavedModel {path} (corrupt or not a SavedModel): {_first_line(exc)}"
        ) from None
    sigs = dict(getattr(obj, "signatures", {}) or {})
    if not sigs:
        functions = _restored_functions(obj)
        has = f"it has functions: {', '.join(functions)}" if functions else "it has no functions either"
        raise ValueError(
            f"the SavedModel {path} has no signatures ({has}). tf-autopar runs a signature, as a server does: "
            f"re-export it with one, e.g. tf.saved_model.save(obj, path, signatures={{'serving_default': "
            f"obj.f.get_concrete_function(tf.TensorSpec([None, ...], tf.float32))}})"
        )
    name = signature or DEFAULT_SIGNATURE
    if name not in sigs:
        which = "has no signature" if signature else "has no 'serving_default' signature"
        raise ValueError(
            f"the SavedModel {path} {which} {name!r}; its signatures are: {', '.join(sorted(sigs))} "
            f"(choose one with --signature)"
        )
    fn = sigs[name]
    args, kwargs = fn.structured_input_signature
    if args:
        raise ValueError(f"signature {name!r} of {path} takes positional inputs; signatures take named ones")
    specs = tuple(
        InputSpec(str(k), spec.dtype.name, None if spec.shape.rank is None else tuple(spec.shape.as_list()))
        for k, spec in sorted(kwargs.items())
    )
    outputs = tuple(sorted(fn.structured_outputs)) if isinstance(fn.structured_outputs, dict) else ()
    return LoadedModel(SAVEDMODEL, path, name, specs, outputs, obj, fn)


def _restored_functions(obj: Any) -> list[str]:
    out = []
    for attr in sorted(dir(obj)):
        if attr.startswith("_") and attr != "__call__":
            continue
        try:
            value = getattr(obj, attr)
        except Exception:  # noqa: BLE001 - a broken attribute is not a function to list
            continue
        concrete = getattr(value, "concrete_functions", None)
        if concrete:
            sig = concrete[0].structured_input_signature
            try:
                text = ", ".join(
                    f"{getattr(s, 'name', None) or '?'}: {s.dtype.name}{s.shape.as_list()}" for s in _flat_specs(sig)
                )
            except Exception:  # noqa: BLE001
                text = "..."
            out.append(f"{attr}({text})")
    return out


def _flat_specs(structure: Any) -> list[Any]:
    import tensorflow as tf

    return [s for s in tf.nest.flatten(structure) if hasattr(s, "dtype") and hasattr(s, "shape")]


def _load_keras(path: str) -> LoadedModel:
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    import keras

    try:
        model = keras.models.load_model(path, compile=False)
    except Exception as exc:  # noqa: BLE001
        raise ValueError(f"cannot load the Keras file {path}: {_first_line(exc)}") from None
    import tensorflow as tf

    from tf_autopar.models.inputs import InputSpec

    structure = _keras_structure(model)
    specs = []
    for i, t in enumerate(tf.nest.flatten(structure)):
        name = getattr(t, "name", None) or f"input_{i}"
        dtype = tf.as_dtype(getattr(t, "dtype", "float32")).name
        shape = getattr(t, "shape", None)
        specs.append(InputSpec(str(name), dtype, None if shape is None else tuple(shape)))
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise ValueError(f"the Keras model in {path} has duplicate input names {names}")
    outputs = tuple(getattr(t, "name", f"output_{i}") for i, t in enumerate(getattr(model, "outputs", None) or []))
    return LoadedModel(KERAS, path, None, tuple(specs), outputs, model, None)


# ------------------------------------------------------------------ embedding tables in the graph

_INDEX_OPS = {"GatherV2": 1, "ResourceGather": 1}  # op type -> position of the indices input
_SHAPE_ONLY = {"Shape", "ShapeN", "Size", "Rank"}  # their outputs describe a shape, not the input's values
_FUNC_ATTRS = {"f": 0, "then_branch": 1, "else_branch": 1, "body": 0, "cond": 0}  # attr -> offset of the first arg


def _input_placeholders(cf: Any, names: Sequence[str]) -> dict[str, Any]:
    """Input name -> its placeholder in ``cf.graph`` (signature inputs are ordered by sorted names)."""
    import tensorflow as tf

    flat = tf.nest.flatten(cf.structured_input_signature)
    out = {}
    for spec, tensor in zip(flat, cf.inputs):
        name = getattr(spec, "name", None)
        if name in names:
            out[name] = tensor
    if len(out) != len(names):  # names differ from the specs': fall back on order
        out = dict(zip(names, cf.inputs[: len(names)]))
    return out


def _table_rows(op: Any) -> int | None:
    """Rows of the table a gather reads along axis 0, if the graph knows them."""
    try:
        if op.get_attr("batch_dims") != 0:
            return None
    except ValueError:
        pass
    if op.type == "GatherV2":
        from tensorflow.python.framework import tensor_util

        axis = tensor_util.constant_value(op.inputs[2])
        if axis is None or int(axis) != 0:
            return None
        dims = op.inputs[0].shape
        if dims.rank is None or dims.rank < 1 or dims[0] is None:
            return None
        return int(dims[0])
    from tensorflow.python.ops import handle_data_util

    data = handle_data_util.get_resource_handle_data(op.inputs[0])
    if not data.is_set or not data.shape_and_type:
        return None
    dims = data.shape_and_type[0].shape.dim
    return int(dims[0].size) if dims and dims[0].size > 0 else None


def _function_graph(graphs: Sequence[Any], name: str) -> Any:
    for g in reversed(graphs):
        fn = getattr(g, "_functions", {}).get(name)
        if fn is not None:
            return getattr(fn, "graph", None)
    return None


def table_bounds(graph: Any, inputs: Mapping[str, Any]) -> dict[str, tuple[int, str]]:
    """Input name -> (rows, description) of the smallest table a gather reads with indices fed by it.

    A forward walk from each input placeholder through integer-valued ops (a Cast, Reshape,
    SelectV2 of the ids still carries them; Shape/Size do not), into called functions
    (PartitionedCall, If/While bodies: their argument placeholders), to GatherV2 along axis 0
    and ResourceGather, whose table size the graph knows (static shape, resource handle data).
    """
    found: dict[str, tuple[int, str]] = {}
    visited: set[tuple[int, frozenset]] = set()

    def walk(g: Any, taint: dict[str, frozenset[str]], stack: list[Any]) -> dict[str, frozenset[str]]:
        for op in g.get_operations():
            ins = [taint.get(t.name, frozenset()) for t in op.inputs]
            if not any(ins):
                continue
            pos = _INDEX_OPS.get(op.type)
            if pos is not None and pos < len(ins) and ins[pos]:
                rows = _table_rows(op)
                if rows:
                    for name in ins[pos]:
                        if name not in found or rows < found[name][0]:
                            found[name] = (rows, f"embedding table ({rows} rows, read by {op.type} {op.name})")
            if op.type in _SHAPE_ONLY:
                continue
            called = False
            for attr, offset in _FUNC_ATTRS.items():
                try:
                    fname = op.get_attr(attr).name
                except (ValueError, AttributeError):
                    continue
                fg = _function_graph([*stack, g], fname)
                if fg is None:
                    continue
                args = {
                    fg.inputs[i - offset].name: ins[i]
                    for i in range(offset, len(ins))
                    if ins[i] and i - offset < len(fg.inputs)
                }
                key = (id(fg), frozenset(args.items()))
                if key in visited:
                    sub = {}
                else:
                    visited.add(key)
                    sub = walk(fg, dict(args), [*stack, g])
                if attr == "f" and len(fg.outputs) == len(op.outputs):
                    for out, inner in zip(op.outputs, fg.outputs):
                        if sub.get(inner.name):
                            taint[out.name] = sub[inner.name]
                    called = True
            if called:
                continue
            union = frozenset().union(*ins)
            for out in op.outputs:
                if out.dtype.is_integer:
                    taint[out.name] = union
        return taint

    walk(graph, {t.name: frozenset([name]) for name, t in inputs.items()}, [])
    return found


# ------------------------------------------------------------------ a model ready to run


class Prepared:
    """A loaded model with the inputs every child runs it on (same seed, same shapes everywhere)."""

    def __init__(
        self, model: LoadedModel, batch: int, arrays: dict[str, np.ndarray], infos: list[Any], assumptions: list[str]
    ) -> None:
        self.model = model
        self.batch = batch
        self.arrays = arrays
        self.infos = infos
        self.assumptions = assumptions

    @property
    def shapes(self) -> dict[str, tuple[int, ...]]:
        return {k: tuple(int(d) for d in v.shape) for k, v in self.arrays.items()}

    def profile(self) -> tuple[GraphProfile, str]:
        """The GraphProfile at the shapes that run (see LoadedModel.profile)."""
        return self.model.profile(self.batch, self.shapes)

    def frozen(self) -> tuple[Any, dict[Any, np.ndarray]]:
        """The model's inference graph with its variables folded into constants, as the fast path
        serves it (runtime/frozen.py), and the feeds of these inputs: what ``bench``'s frozen
        configurations and ``tune`` measure."""
        from tf_autopar.runtime.frozen import FrozenGraph, concrete_for, keras_signature

        if self.model.kind == SAVEDMODEL:
            frozen = FrozenGraph(self.model.concrete_function())
        else:
            target = self.model._obj  # the Keras model
            frozen = FrozenGraph(concrete_for(target, tuple(keras_signature(target) or ())))
        feeds = dict(zip(frozen.inputs, [self.arrays[s.name] for s in self.model.inputs]))  # sorted, as TF flattens
        return frozen, feeds

    def describe(self) -> dict[str, Any]:
        return {
            "model": self.model.describe(),
            "batch": self.batch,
            "inputs": [i.to_dict() for i in self.infos],
            "assumptions": list(self.assumptions),
        }


def prepare_model(path: str, batch: int, options: Any = None) -> Prepared:
    """Load ``path`` and build its inputs from ``options`` (a ModelOptions); ValueError on bad input."""
    from tf_autopar.models import inputs as inp

    options = options or ModelOptions()
    model = load(path, options.signature)
    inp.check_input_shapes(model.inputs, options.shapes)
    bounds = {} if (options.int_max is not None or options.inputs) else model.int_bounds()
    arrays, infos, assumptions = inp.prepare(
        model.inputs,
        batch,
        input_shapes=options.shapes,
        int_max=options.int_max,
        int_bounds=bounds,
        inputs_file=options.inputs,
    )
    return Prepared(model, batch, arrays, infos, assumptions)

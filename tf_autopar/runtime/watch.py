"""Write watch on a model's variables: tells optimize() when its frozen constants went stale.

TensorFlow's resource variables carry no version counter, and comparing values per call
costs as much as reading the model. So the writes themselves are watched, in the two places
every write from Python passes through:

- eager writes: the generated op wrappers (``assign_variable_op``, ``assign_add/sub``,
  ``resource_scatter_*``, strided-slice assign, ``resource_apply_*``) that
  ``tf.Variable.assign*``/``scatter_*``, Keras ``set_weights``/``load_weights``, eager
  optimizer steps and checkpoint restores call;
- tf.function executions (``model.fit``, custom training steps): ``AtomicFunction.call_flat``
  (``__call__`` in TF 2.14).
  Which resource arguments a function may write is read once per function from its
  FunctionDef with TensorFlow's own rule for automatic control dependencies (an input is
  read-only only if every consumer is a registered read op or lists it in
  ``_read_only_resource_inputs``; anything else counts as a write).

A write to a watched handle gives the watch a new generation number (unique values from a
global counter, so no lost update can leave an old value in place). The per-call check is
one integer comparison. Not seen: writes through ``tf.raw_ops`` or inside tf.data functions;
for those, ``refresh()`` by hand. The hooks are installed with the first watch and removed
with the last one.
"""

from __future__ import annotations

import importlib
import itertools
import logging
import threading
import weakref
from typing import Any, Callable, Iterable

log = logging.getLogger("tf_autopar.runtime")

_counter = itertools.count(1)
_lock = threading.RLock()  # re-entrant: a watch collected while the lock is held calls back
_by_handle: dict[int, list["weakref.ReferenceType[Watch]"]] = {}  # id(handle) -> watches
_writes_of: dict[bytes, tuple[int, ...]] = {}  # function name -> argument indices it may write
_patches: list[tuple[Any, str, Any]] = []  # (owner, attribute, original)
_EAGER_WRITE_PREFIXES = (
    "assign_variable_op",
    "assign_add_variable_op",
    "assign_sub_variable_op",
    "resource_scatter_",
    "resource_strided_slice_assign",
    "resource_apply_",
    "resource_sparse_apply_",
)
_HANDLE_KWARGS = ("resource", "ref", "var")
_MAX_FUNCTIONS = 10000
_DT_RESOURCE = 20  # types_pb2.DT_RESOURCE


class Watch:
    """The variables (resource handles) behind one optimize() callable.

    ``generation`` changes whenever one of them may have been written; holding the handles
    keeps their ids unique while watched.
    """

    __slots__ = ("generation", "_handles", "_ref", "__weakref__")

    def __init__(self) -> None:
        self.generation = next(_counter)
        self._handles: dict[int, Any] = {}
        self._ref = weakref.ref(self, _forget_dead)

    def add(self, handles: Iterable[Any]) -> None:
        """Watch these eager resource handles too (installs the hooks with the first one)."""
        new = [h for h in handles if id(h) not in self._handles]
        if not new:
            return
        with _lock:
            _install()
            for h in new:
                self._handles[id(h)] = h
                _by_handle.setdefault(id(h), []).append(self._ref)

    def __len__(self) -> int:
        return len(self._handles)

    def bump(self) -> None:
        self.generation = next(_counter)

    def close(self) -> None:
        """Stop watching; the hooks go when no watch is left."""
        with _lock:
            _drop(self, list(self._handles))
            self._handles.clear()


def installed() -> bool:
    return bool(_patches)


def resource_handles(concrete: Any) -> list[Any]:
    """The eager resource handles a ConcreteFunction captures: the variables freezing reads."""
    from tensorflow.python.framework import dtypes

    return [t for t in concrete.captured_inputs if getattr(t, "dtype", None) == dtypes.resource]


# ------------------------------------------------------------------------------ internals


def _notify(handle: Any) -> None:
    refs = _by_handle.get(id(handle))
    if refs:
        for ref in list(refs):
            watch = ref()
            if watch is not None:
                watch.bump()


def _forget_dead(ref: "weakref.ReferenceType[Watch]") -> None:
    with _lock:
        for key in [k for k, refs in _by_handle.items() if ref in refs]:
            _by_handle[key] = [r for r in _by_handle[key] if r is not ref]
            if not _by_handle[key]:
                del _by_handle[key]
        if not _by_handle:
            _uninstall()


def _drop(watch: Watch, ids: list[int]) -> None:
    for key in ids:
        refs = [r for r in _by_handle.get(key, []) if r() is not watch and r() is not None]
        if refs:
            _by_handle[key] = refs
        else:
            _by_handle.pop(key, None)
    if not _by_handle:
        _uninstall()


def _written_indices(fdef: Any) -> tuple[int, ...]:
    """Indices of the resource arguments a FunctionDef may write (TF's read-only rule, on the proto)."""
    from tensorflow.python.framework import auto_control_deps_utils as acd

    read_ops = acd.RESOURCE_READ_OPS
    attr = acd.READ_ONLY_RESOURCE_INPUTS_ATTR
    args = {a.name: i for i, a in enumerate(fdef.signature.input_arg) if a.type == _DT_RESOURCE}
    if not args:
        return ()
    written: set[int] = set()
    for node in fdef.node_def:
        data_inputs = [s for s in node.input if not s.startswith("^")]
        read_only = None
        for pos, name in enumerate(data_inputs):
            index = args.get(name[:-2] if name.endswith(":0") else name)  # an argument: "x" (or "x:0")
            if index is None or index in written or node.op in read_ops:
                continue
            if read_only is None:
                read_only = set(node.attr[attr].list.i) if attr in node.attr else set()
            if pos not in read_only:
                written.add(index)
    return tuple(sorted(written))


def _function_writes(function: Any) -> tuple[int, ...]:
    name = function.name
    found = _writes_of.get(name)
    if found is None:
        try:
            found = _written_indices(function.cached_definition)
        except Exception:  # unknown shape of the function: assume it writes every resource it gets
            log.debug("write analysis failed for %r; treating its resource inputs as written", name, exc_info=True)
            found = (-1,)
        if len(_writes_of) > _MAX_FUNCTIONS:
            _writes_of.clear()
        _writes_of[name] = found
    return found


def _after_function(function: Any, args: tuple[Any, ...]) -> None:
    """A tf.function ran: bump the watches of the watched handles it may have written."""
    try:
        written = _function_writes(function)
        if not written:
            return
        for i in range(len(args)) if written == (-1,) else written:
            if i < len(args) and id(args[i]) in _by_handle and function._bound_context.executing_eagerly():
                _notify(args[i])
    except Exception:  # never break the user's call; unsure whether it wrote: assume it did
        log.debug("variable write watch failed after a function call; treating it as a write", exc_info=True)
        _bump_all()


def _after_write(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """An eager write op ran: bump the watches of its handle."""
    try:
        handle = args[0] if args else next((kwargs[k] for k in _HANDLE_KWARGS if k in kwargs), None)
        if id(handle) in _by_handle:
            from tensorflow.python.eager import context

            if context.executing_eagerly():  # while tracing, the function's run counts instead
                _notify(handle)
    except Exception:
        log.debug("variable write watch failed after a write op; treating it as a write", exc_info=True)
        _bump_all()


def _bump_all() -> None:
    for refs in list(_by_handle.values()):
        for ref in list(refs):
            watch = ref()
            if watch is not None:
                watch.bump()


def _wrap_call_flat(original: Callable[..., Any]) -> Callable[..., Any]:
    def call_flat(self: Any, *args: Any) -> Any:
        try:
            return original(self, *args)
        finally:
            if _by_handle:
                _after_function(self, args)

    call_flat.__wrapped__ = original  # type: ignore[attr-defined]
    return call_flat


def _wrap_eager_write(original: Callable[..., Any]) -> Callable[..., Any]:
    def write_op(*args: Any, **kwargs: Any) -> Any:
        try:
            return original(*args, **kwargs)
        finally:
            if _by_handle:
                _after_write(args, kwargs)

    write_op.__wrapped__ = original  # type: ignore[attr-defined]
    write_op.__name__ = getattr(original, "__name__", "write_op")
    write_op.__doc__ = getattr(original, "__doc__", None)
    return write_op


def _install() -> None:
    """Patch the write paths (caller holds _lock). Raises if TensorFlow's internals moved."""
    if _patches:
        return
    from tensorflow.python.eager.polymorphic_function import atomic_function

    plan: list[tuple[Any, str, Any]] = []
    # every flat call of a traced function: call_flat since TF 2.15, __call__ (same arguments) in 2.14
    flat = "call_flat" if hasattr(atomic_function.AtomicFunction, "call_flat") else "__call__"
    original = getattr(atomic_function.AtomicFunction, flat)
    plan.append((atomic_function.AtomicFunction, flat, _wrap_call_flat(original)))
    wrapped: dict[int, Any] = {}
    for module_name in (
        "tensorflow.python.ops.gen_resource_variable_ops",
        "tensorflow.python.ops.gen_state_ops",
        "tensorflow.python.ops.gen_array_ops",
        "tensorflow.python.ops.gen_training_ops",
        "tensorflow.python.training.training_ops",
    ):
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        for attr, fn in list(vars(module).items()):
            if (
                callable(fn)
                and attr.startswith(_EAGER_WRITE_PREFIXES)
                and not attr.endswith("_eager_fallback")
                and getattr(fn, "__module__", "").startswith("tensorflow.python.ops.gen_")
            ):
                if id(fn) not in wrapped:
                    wrapped[id(fn)] = _wrap_eager_write(fn)
                plan.append((module, attr, wrapped[id(fn)]))
    if not any(attr == "assign_variable_op" for _, attr, _ in plan):
        raise RuntimeError("TensorFlow's assign_variable_op wrapper was not found: cannot watch variable writes")
    for owner, attr, replacement in plan:
        _patches.append((owner, attr, getattr(owner, attr)))
        setattr(owner, attr, replacement)
    log.debug("variable write watch installed (%d patches)", len(_patches))


def _uninstall() -> None:
    """Restore every patched attribute (caller holds _lock)."""
    while _patches:
        owner, attr, original = _patches.pop()
        setattr(owner, attr, original)
    _writes_of.clear()
    log.debug("variable write watch removed")

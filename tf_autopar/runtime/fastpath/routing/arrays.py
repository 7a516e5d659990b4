"""A call's inputs as arrays: checked against the function's input specs without converting.

Shared by the calling conventions: what a value must be to feed a placeholder as it is (``Feed``,
read off the TensorSpec once), the check per value (``exact_array``), the loop over a call's
values (``arrays_of``), and inputs made up for a remembered batch (``synthetic``).
"""

from __future__ import annotations

from typing import Any

from tf_autopar.runtime.fastpath.routing import reasons

MISSING = object()


class Feed:
    """What a call's input must be to feed one placeholder as it is, read off its TensorSpec once:
    the per-call check (27 inputs on DLRM) then compares plain values. Reading the spec's dtype
    and shape on every call took 40% of the fast path's own time per call there."""

    __slots__ = ("tf_dtype", "np_dtype", "string", "dims", "spec", "batched", "fits")

    def __init__(self, spec: Any) -> None:
        import numpy as np
        import tensorflow as tf  # deferred: startup cost (here and below)

        self.spec, self.tf_dtype = spec, spec.dtype
        self.string = spec.dtype == tf.string
        # a dtype, not its scalar type: comparing an array's dtype with a type converts the type each time
        self.np_dtype = None if self.string else np.dtype(spec.dtype.as_numpy_dtype)
        #: the last shape that fitted: a server's calls mostly repeat it, and one tuple comparison
        #: then stands for the loop over the dimensions (27 inputs a call on DCN-V2)
        self.fits: tuple[int, ...] | None = None
        # TensorShape keeps its dims as a tuple of ints and None (None: unknown rank); compared
        # directly: is_compatible_with builds a TensorShape of the array's shape on every call.
        dims = getattr(spec.shape, "_dims", MISSING)
        self.dims = dims if dims is None or isinstance(dims, tuple) else MISSING
        self.batched = bool(spec.shape.rank) and spec.shape[0] is None  # a free batch dimension first


def exact_array(value: Any, feed: Feed, np: Any, tf: Any) -> Any:
    """``value`` as a numpy array when it is one (or an eager tensor) of the input's dtype and a
    compatible shape; None otherwise (the original then converts it or raises its own error).
    ``np`` and ``tf``: the modules, passed in by the caller's loop."""
    if isinstance(value, np.ndarray):
        array = value
        if feed.string:
            if array.dtype.kind not in "SO":
                return None
        elif array.dtype != feed.np_dtype:
            return None
    elif tf.is_tensor(value) and hasattr(value, "numpy"):
        if value.dtype != feed.tf_dtype:
            return None
        # the tensor's own buffer, not numpy()'s copy (118 us for a batch of eight 224x224 images):
        # the engines only read their inputs, and the caller holds the tensor for the call
        view = getattr(value, "_numpy", None)
        array = view() if view is not None else value.numpy()
    else:
        return None
    shape = array.shape
    if shape == feed.fits:
        return array
    dims = feed.dims
    if dims is MISSING:
        return array if feed.spec.shape.is_compatible_with(shape) else None
    if dims is not None:
        if len(dims) != len(shape):
            return None
        for d, n in zip(dims, shape):  # a loop, not any(): no generator per input per call
            if d is not None and d != n:
                return None
    feed.fits = shape  # one assignment: a concurrent call's own fitting shape is as good
    return array


def arrays_of(values: list[Any], feeds: list[Feed]) -> tuple[list[Any], int] | str:
    """The values as arrays and the call's batch, or why not (reasons.py) when one is not an exact input."""
    import numpy as np
    import tensorflow as tf

    ndarray = np.ndarray
    arrays = []
    batch = 0
    for value, feed in zip(values, feeds):
        # a server's usual call: an array of the input's dtype in the shape that fitted last time
        if value.__class__ is ndarray and value.dtype is feed.np_dtype and value.shape == feed.fits:
            array = value
        else:
            array = exact_array(value, feed, np, tf)
            if array is None:
                return reasons.MISSING if value is MISSING else reasons.of_value(value, feed, np, tf)
        if feed.batched:
            if batch and array.shape[0] != batch:
                return reasons.BATCHES
            batch = array.shape[0]
        arrays.append(array)
    if batch < 1:
        if any(feed.batched for feed in feeds):
            return reasons.SHAPE  # an empty batch: the original's to answer
        batch = 1
    return arrays, batch


def eager() -> bool:
    """The call runs eagerly (a call inside a tf.function being traced is a graph call: not ours)."""
    global _executing_eagerly
    if _executing_eagerly is None:  # imported once: an import statement per call cost a microsecond
        from tensorflow.python.eager import context

        _executing_eagerly = context.executing_eagerly
    return _executing_eagerly()


_executing_eagerly: Any = None


def tensor_specs(flat: list[tuple[str, Any]]) -> list[tuple[str, Any]] | None:
    """``flat`` when every input is a TensorSpec (a flat set of tensors), else None."""
    import tensorflow as tf

    return flat if all(isinstance(s, tf.TensorSpec) for _, s in flat) else None


def as_tensors(structure: Any, values: list[Any]) -> Any:
    """Flat numpy outputs as eager tensors in ``structure``."""
    # EagerTensor(value, device): what tf.constant does for a numpy array (convert_to_eager_tensor)
    # without its two Python wrappers; a flat dict or a single tensor packed without tf.nest
    # (tf.nest.flatten orders a dict by its sorted keys). The request path's own cost per call.
    global _eager_parts
    if _eager_parts is None:  # one assignment: a concurrent first call makes the same pair
        from tensorflow.python.eager import context
        from tensorflow.python.framework import ops

        _eager_parts = (ops.EagerTensor, context.context)
    tensor, context_of = _eager_parts
    ctx = context_of()
    ctx.ensure_initialized()
    # The context's device name is "" outside any device scope: EagerTensor then parses it and
    # copies to it (6.8 us per output on the EPYC host); None places it on the host CPU (1.3 us).
    device = ctx.device_name or None
    tensors = [tensor(v, device) for v in values]
    packed = _packers.get(id(structure))
    if packed is None or packed[0] is not structure:
        packed = _packers[id(structure)] = (structure, _packer(structure))
    return packed[1](tensors)


_packers: dict[int, tuple[Any, Any]] = {}  # id(structure) -> (structure, its packer); a few per process
_eager_parts: tuple[Any, Any] | None = None  # (EagerTensor, context.context), imported at the first output


def _packer(structure: Any) -> Any:
    """How flat tensors become ``structure``: by hand for a flat dict or one tensor, else tf.nest."""
    import tensorflow as tf

    if type(structure) is dict and not any(tf.nest.is_nested(v) for v in structure.values()):
        keys = sorted(structure)
        return lambda tensors: dict(zip(keys, tensors))
    if not tf.nest.is_nested(structure):
        return lambda tensors: tensors[0]
    return lambda tensors: tf.nest.pack_sequence_as(structure, tensors)


def synthetic(spec: Any, batch: int) -> Any:
    """Zeros (empty strings) of ``spec``'s dtype, ``batch`` in its free first dimension, 1 in others."""
    import numpy as np
    import tensorflow as tf

    shape = [batch if i == 0 and d is None else (d if d is not None else 1) for i, d in enumerate(spec.shape)]
    if spec.dtype == tf.string:
        return np.full(shape, b"", dtype=object)
    return np.zeros(shape, dtype=spec.dtype.as_numpy_dtype)

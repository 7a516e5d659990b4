"""Why a call was not routed: constants in a few words, counted per function on the request path
(a Counter increment, no formatting) and shown by status() as "312 calls <reason>: not routed".

``ADVICE``: the reasons a user would want to hear about (a common call that could be routed if
written another way), with what to change; said once per function and reason (warn_once). The
others are calls the fast path must leave to the original (training, a gradient tape, a graph
being traced): counted, never warned about.
"""

from __future__ import annotations

from typing import Any

OFF = "while the fast path was off or stopped"
GRAPH = "inside a tf.function being traced (graph calls stay TensorFlow's)"
TRAINING = "with training=True"
TAPE = "under a recording GradientTape"
NESTED = "inside another Keras layer's call"
ARGUMENTS = "with arguments the fast path does not take (other keywords or a wrong count)"
PYTHON = "with a Python list or scalar as an input"
NUMPY_POSITIONAL = "positionally with a numpy array (the original takes tensors there)"
DTYPE = "with an input of another dtype than the function's"
SHAPE = "with an input of a shape the function does not take"
BATCHES = "with inputs of different batches"
MISSING = "without every input"
OTHER = "with an input that is not an array or a tensor"
NO_MATCH = "matching none of the function's input signatures"
BIG_BATCH = "with more rows than predict's batch_size"
FAILED = "whose inputs the fast path failed to read"

ADVICE = {
    PYTHON: "pass numpy arrays (or tensors) of the input's dtype, e.g. np.asarray(x, np.float32)",
    NUMPY_POSITIONAL: "pass tf.constant(x), or call it by keyword: f(name=x)",
    DTYPE: "pass arrays of the dtype the function declares (the original casts them; the fast path "
    "serves exact dtypes only)",
}


def of_value(value: Any, feed: Any, np: Any, tf: Any) -> str:
    """Why ``value`` is not an exact input for ``feed`` (arrays.exact_array said no): the decline
    path only, so this may look closer than the check did."""
    if value is None or isinstance(value, (list, tuple, int, float, bool, str, bytes)):
        return PYTHON if value is not None else MISSING
    if isinstance(value, np.ndarray) or tf.is_tensor(value):
        dtype = value.dtype
        if feed.string:
            text = dtype == tf.string if tf.is_tensor(value) else dtype.kind in ("S", "O")
            return SHAPE if text else DTYPE
        if dtype != feed.np_dtype and dtype != feed.tf_dtype:
            return DTYPE
        return SHAPE
    return OTHER

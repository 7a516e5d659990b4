"""Routing: how a call reaches the fast path, one module per calling convention.

- signature.py: ``loaded.signatures[name](**inputs)``, by keyword;
- positional.py: a restored function with one input signature, ``loaded.serve(x)``;
- keras_predict.py: a Keras model's ``predict`` of one batch.

Eager calls whose inputs are numpy arrays or tensors of exactly the function's dtypes and
compatible shapes are served; anything else (a cast the original would make, a wrong shape, a
call inside a tf.function) goes to the original, which gives its own result or its own error.

To add a calling convention (e.g. positional signature calls, a Keras model's ``__call__``): one
module here with a class that meets base.Convention, one ``register(...)`` line below, and its
test.
"""

from __future__ import annotations

from tf_autopar.runtime.fastpath.routing.base import (
    ATTR,
    KERAS_MODEL,
    SAVED_MODEL,
    Convention,
    for_source,
    get,
    register,
    routed,
)
from tf_autopar.runtime.fastpath.routing.keras_predict import KerasPredict
from tf_autopar.runtime.fastpath.routing.positional import RestoredFunctionCalls
from tf_autopar.runtime.fastpath.routing.signature import SignatureCalls

__all__ = ["ATTR", "KERAS_MODEL", "SAVED_MODEL", "Convention", "for_source", "get", "register", "routed"]

register(SignatureCalls())  # signatures first, then restored functions: the order route() finds them
register(RestoredFunctionCalls())
register(KerasPredict())

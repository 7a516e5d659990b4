"""Routing: how a call reaches the fast path, one module per calling convention.

- signature.py: ``loaded.signatures[name](**inputs)``, by keyword, and positionally with tensors, ``infer(tf.constant(x))``;
- positional.py: a restored function, ``loaded.serve(x)``, with one input signature or several
  (the concrete function the original picks);
- keras_call.py: a Keras model's ``__call__`` in inference, ``model(x)``, ``model(x, training=False)``;
- keras_predict.py: a Keras model's ``predict`` of one batch, and its ``predict_on_batch``;
- reasons.py: why a call was not routed, in a few words (status() counts them).

Eager calls whose inputs are numpy arrays or tensors of exactly the function's dtypes and
compatible shapes are served; anything else (a cast the original would make, a wrong shape, a
call inside a tf.function) goes to the original, which gives its own result or its own error.

To add a calling convention: one module here with a class that meets base.Convention, one
``register(...)`` line below, and its test.
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
from tf_autopar.runtime.fastpath.routing.keras_call import KerasCall
from tf_autopar.runtime.fastpath.routing.keras_predict import KerasPredict, KerasPredictOnBatch
from tf_autopar.runtime.fastpath.routing.positional import RestoredFunctionCalls
from tf_autopar.runtime.fastpath.routing.signature import SignatureCalls

__all__ = ["ATTR", "KERAS_MODEL", "SAVED_MODEL", "Convention", "for_source", "get", "register", "routed"]

register(SignatureCalls())  # signatures first, then restored functions: the order route() finds them
register(RestoredFunctionCalls())
register(KerasCall())
register(KerasPredict())
register(KerasPredictOnBatch())

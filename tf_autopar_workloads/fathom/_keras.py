"""Small Keras pieces shared by the Fathom modules (imported lazily, inside build_model/loss)."""

from __future__ import annotations

from typing import Any


def sparse_xent(y_true: Any, y_pred: Any) -> Any:
    """Mean sparse softmax cross-entropy from logits (integer labels)."""
    import keras
    from keras import ops

    return ops.mean(keras.losses.sparse_categorical_crossentropy(y_true, y_pred, from_logits=True))

"""Pieces shared by the paper's vision workloads: synthetic images and the classification loss.

Kept here so the four vision modules make their data the same way. Nothing here imports
TensorFlow or Keras at module import time.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Mapping

import numpy as np

TEMPLATE_GRID = 8  # class templates are drawn on an 8x8 grid and upsampled (keeps 1000 templates small)
TEMPLATE_SEED = 20_190_813  # fixed: the same class always gets the same template, batch after batch


@lru_cache(maxsize=8)
def _templates(num_classes: int, image_size: int, channels: int) -> np.ndarray:
    """Low-resolution class templates, upsampled lazily per batch (1000 x 299x299x3 would be 1 GB)."""
    rng = np.random.default_rng(TEMPLATE_SEED + num_classes)
    return rng.standard_normal((num_classes, TEMPLATE_GRID, TEMPLATE_GRID, channels)).astype(np.float32)


def make_image_data(hparams: Mapping[str, Any], batch: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Images = (fixed template of the label) + Gaussian noise, NHWC float32; labels int32.

    The label is recoverable from the coarse colour layout, so a classifier's loss falls
    within a few steps, yet every pixel carries noise so no two images are equal.
    """
    if batch < 1:
        raise ValueError(f"batch must be a positive integer, got {batch}")
    size = int(hparams["image_size"])
    classes = int(hparams["num_classes"])
    channels = int(hparams.get("channels", 3))
    labels = rng.integers(0, classes, size=batch).astype(np.int32)
    coarse = _templates(classes, size, channels)[labels]  # (B, g, g, C)
    reps = -(-size // TEMPLATE_GRID)  # ceil
    images = np.repeat(np.repeat(coarse, reps, axis=1), reps, axis=2)[:, :size, :size, :]
    noise = rng.standard_normal((batch, size, size, channels), dtype=np.float32)
    images = images + float(hparams.get("noise", 0.5)) * noise
    return np.ascontiguousarray(images, dtype=np.float32), labels


def sparse_ce_from_logits(y_true: Any, y_pred: Any) -> Any:
    """Mean softmax cross-entropy; the models output logits (softmax left to the consumer)."""
    import keras

    return keras.ops.mean(keras.losses.sparse_categorical_crossentropy(y_true, y_pred, from_logits=True))

"""Synthetic data helpers shared by the Fathom modules (numpy only; no TensorFlow).

Why templates: a classifier trained on pure noise cannot lower its loss reliably in a few
steps; images drawn as a class template plus noise can. Templates come from a fixed seed
(not the caller's Generator) so every batch, fresh or not, shares the same classes, and
they are stored at low resolution and upsampled so 1000 classes at 224x224 cost little.
"""

from __future__ import annotations

import numpy as np

TEMPLATE_SEED = 20160917  # fixed: the classes must not change between batches


def class_images(
    rng: np.random.Generator,
    batch: int,
    height: int,
    width: int,
    channels: int,
    classes: int,
    noise: float = 0.5,
    cells: int = 8,
) -> tuple[np.ndarray, np.ndarray]:
    """(images float32 [batch, h, w, c], labels int32 [batch]): per-class coarse template + noise."""
    cells_h, cells_w = min(cells, height), min(cells, width)
    templates = (
        np.random.default_rng(TEMPLATE_SEED).standard_normal((classes, cells_h, cells_w, channels)).astype(np.float32)
    )
    labels = rng.integers(0, classes, size=batch).astype(np.int32)
    rep_h, rep_w = -(-height // cells_h), -(-width // cells_w)
    coarse = templates[labels]
    images = np.repeat(np.repeat(coarse, rep_h, axis=1), rep_w, axis=2)[:, :height, :width, :]
    images = images + noise * rng.standard_normal(images.shape).astype(np.float32)
    return images.astype(np.float32), labels

"""Fathom ``residual``: the residual network of Fathom's ``fathom/residual/residual.py``.

Its shape (kept here): 7x7/64 stride-2 stem, 3x3/2 max pool, a 1x1 conv to 128 channels,
then four stages of three bottleneck units (1x1 -> 3x3 -> 1x1, ReLU after each, identity
shortcut) with (out, bottleneck) channels (128, 32), (256, 64), (512, 128), (1024, 256), a
bias-free 1x1 "upscale" conv between stages, no further downsampling (every unit runs at
56x56 for 224x224 input), global average pool, linear classifier. That is deliberately
unlike the paper's ResNet-50 (which downsamples per stage and uses batch norm).
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from tf_autopar_workloads.base import Workload
from tf_autopar_workloads.fathom._data import class_images
from tf_autopar_workloads.fathom._keras import sparse_xent

SIZES = {
    "paper": {
        "image": 224,
        "classes": 1000,
        "stem": 64,
        "stages": ((128, 32), (256, 64), (512, 128), (1024, 256)),
        "repeats": 3,
    },
    "tiny": {"image": 32, "classes": 10, "stem": 8, "stages": ((16, 4), (32, 8), (64, 16), (128, 32)), "repeats": 1},
}


def build_model(hp: Mapping[str, Any]) -> Any:
    import keras
    from keras import layers

    x = keras.Input((hp["image"], hp["image"], 3), name="image")
    net = layers.Conv2D(hp["stem"], 7, strides=2, padding="same", activation="relu", name="conv1")(x)
    net = layers.MaxPooling2D(3, strides=2, padding="same", name="pool1")(net)
    stages = hp["stages"]
    net = layers.Conv2D(stages[0][0], 1, name="conv2")(net)
    for i, (filters, bottleneck) in enumerate(stages):
        for r in range(hp["repeats"]):
            name = f"block{i}_repeat{r}"
            h = layers.Conv2D(bottleneck, 1, activation="relu", name=name + "_in")(net)
            h = layers.Conv2D(bottleneck, 3, padding="same", activation="relu", name=name + "_bottleneck")(h)
            h = layers.Conv2D(filters, 1, activation="relu", name=name + "_out")(h)
            net = layers.Add(name=name + "_add")([h, net])
        if i + 1 < len(stages):
            net = layers.Conv2D(stages[i + 1][0], 1, use_bias=False, name=f"block{i}_upscale")(net)
    net = layers.GlobalAveragePooling2D(name="avg_pool")(net)
    logits = layers.Dense(hp["classes"], use_bias=False, name="logits")(net)
    return keras.Model(x, logits, name="residual")


def make_data(hp: Mapping[str, Any], batch: int, rng: np.random.Generator) -> tuple[Any, Any]:
    return class_images(rng, batch, hp["image"], hp["image"], 3, hp["classes"])


WORKLOAD = Workload(
    name="residual",
    family="fathom",
    task="vision",
    description="Fathom's residual net: 7x7/64 stem, 4x3 bottleneck units at 56x56, 224x224 input",
    default_batch=16,
    sizes=SIZES,
    build_model=build_model,
    make_data=make_data,
    loss=sparse_xent,
    departures=(
        "Synthetic ImageNet-shaped images (per-class coarse template + noise) instead of ImageNet. "
        "Keras default initialisers (Fathom: truncated normal, stddev 0.02) and Adam instead of Fathom's "
        "optimizer; dropout placeholder of the original was unused and is omitted."
    ),
    references=("He et al., Deep Residual Learning, 2015", "rdadolf/fathom: fathom/residual/residual.py"),
)

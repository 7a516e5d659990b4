"""Fathom ``vgg``: VGG-19 (Simonyan & Zisserman 2014, configuration E).

Five blocks of 3x3 convolutions (2, 2, 4, 4, 4 convs of 64, 128, 256, 512, 512 channels),
each followed by 2x2 max pooling, then fully connected 4096 -> 4096 -> classes with dropout.
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
        "blocks": ((2, 64), (2, 128), (4, 256), (4, 512), (4, 512)),
        "fc": 4096,
        "dropout": 0.5,
    },
    "tiny": {
        "image": 32,
        "classes": 10,
        "blocks": ((2, 4), (2, 8), (4, 8), (4, 16), (4, 16)),
        "fc": 32,
        "dropout": 0.5,
    },
}


def build_model(hp: Mapping[str, Any]) -> Any:
    import keras
    from keras import layers

    x = keras.Input((hp["image"], hp["image"], 3), name="image")
    net = x
    for b, (convs, filters) in enumerate(hp["blocks"], start=1):
        for c in range(1, convs + 1):
            net = layers.Conv2D(filters, 3, padding="same", activation="relu", name=f"block{b}_conv{c}")(net)
        net = layers.MaxPooling2D(2, name=f"block{b}_pool")(net)
    net = layers.Flatten(name="flatten")(net)
    for i in (1, 2):
        net = layers.Dense(hp["fc"], activation="relu", name=f"fc{i}")(net)
        net = layers.Dropout(hp["dropout"], name=f"drop{i}")(net)
    logits = layers.Dense(hp["classes"], name="logits")(net)
    return keras.Model(x, logits, name="vgg")


def make_data(hp: Mapping[str, Any], batch: int, rng: np.random.Generator) -> tuple[Any, Any]:
    return class_images(rng, batch, hp["image"], hp["image"], 3, hp["classes"])


WORKLOAD = Workload(
    name="vgg",
    family="fathom",
    task="vision",
    description="VGG-19: 16 3x3 convs in 5 blocks, fc 4096x2, 224x224",
    default_batch=8,
    sizes=SIZES,
    build_model=build_model,
    make_data=make_data,
    loss=sparse_xent,
    departures=(
        "Synthetic ImageNet-shaped images (per-class coarse template + noise) instead of ImageNet; "
        "Keras default initialisers; Adam. Tiny size keeps all 16 convs and 3 dense layers, narrowed."
    ),
    references=("Simonyan & Zisserman, Very Deep Convolutional Networks, 2014", "rdadolf/fathom: fathom/vgg/vgg.py"),
)

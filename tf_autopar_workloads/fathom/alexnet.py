"""Fathom ``alexnet``: AlexNet (Krizhevsky et al. 2012), single-tower.

conv 11x11/4 (96) -> LRN -> max pool 3/2 -> conv 5x5 (256) -> LRN -> max pool ->
conv 3x3 (384) -> conv 3x3 (384) -> conv 3x3 (256) -> max pool -> fc 4096 -> fc 4096 -> classes,
dropout 0.5 on the fully connected layers.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from tf_autopar_workloads.base import Workload
from tf_autopar_workloads.fathom._data import class_images
from tf_autopar_workloads.fathom._keras import sparse_xent

SIZES = {
    "paper": {"image": 224, "classes": 1000, "convs": (96, 256, 384, 384, 256), "fc": 4096, "dropout": 0.5},
    "tiny": {"image": 67, "classes": 10, "convs": (8, 16, 16, 16, 16), "fc": 32, "dropout": 0.5},
}


def build_model(hp: Mapping[str, Any]) -> Any:
    import keras
    import tensorflow as tf
    from keras import layers

    class LRN(layers.Layer):
        """Local response normalisation (depth radius 2, bias 1, alpha 2e-5, beta 0.75; AlexNet's)."""

        def call(self, x: Any) -> Any:
            return tf.nn.local_response_normalization(x, depth_radius=2, bias=1.0, alpha=2e-5, beta=0.75)

    c = hp["convs"]
    x = keras.Input((hp["image"], hp["image"], 3), name="image")
    net = layers.Conv2D(c[0], 11, strides=4, padding="same", activation="relu", name="conv1")(x)
    net = LRN(name="lrn1")(net)
    net = layers.MaxPooling2D(3, strides=2, name="pool1")(net)
    net = layers.Conv2D(c[1], 5, padding="same", activation="relu", name="conv2")(net)
    net = LRN(name="lrn2")(net)
    net = layers.MaxPooling2D(3, strides=2, name="pool2")(net)
    net = layers.Conv2D(c[2], 3, padding="same", activation="relu", name="conv3")(net)
    net = layers.Conv2D(c[3], 3, padding="same", activation="relu", name="conv4")(net)
    net = layers.Conv2D(c[4], 3, padding="same", activation="relu", name="conv5")(net)
    net = layers.MaxPooling2D(3, strides=2, name="pool5")(net)
    net = layers.Flatten(name="flatten")(net)
    for i in (6, 7):
        net = layers.Dense(hp["fc"], activation="relu", name=f"fc{i}")(net)
        net = layers.Dropout(hp["dropout"], name=f"drop{i}")(net)
    logits = layers.Dense(hp["classes"], name="logits")(net)
    return keras.Model(x, logits, name="alexnet")


def make_data(hp: Mapping[str, Any], batch: int, rng: np.random.Generator) -> tuple[Any, Any]:
    return class_images(rng, batch, hp["image"], hp["image"], 3, hp["classes"])


WORKLOAD = Workload(
    name="alexnet",
    family="fathom",
    task="vision",
    description="AlexNet: conv 11x11/4 ... fc 4096x2, LRN, 224x224",
    default_batch=64,
    sizes=SIZES,
    build_model=build_model,
    make_data=make_data,
    loss=sparse_xent,
    departures=(
        "Synthetic ImageNet-shaped images (per-class coarse template + noise) instead of ImageNet; "
        "single tower (no two-GPU split, no grouped convolutions); 224x224 input with SAME padding on "
        "conv1 (the original's 227 VALID gives the same 55x55 map); Keras default initialisers; Adam."
    ),
    references=(
        "Krizhevsky et al., ImageNet Classification with Deep CNNs, 2012",
        "rdadolf/fathom: fathom/alexnet/alexnet.py",
    ),
)

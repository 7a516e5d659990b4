"""DenseNet-121 (Huang et al., CVPR 2017), ImageNet classification.

Dense blocks of BN-ReLU-Conv1x1(4k)-BN-ReLU-Conv3x3(k) layers, each concatenating its k
new feature maps onto everything before it; transitions halve the channels (compression
0.5) and the grid (2x2 average pool). Every layer depends on the previous one, so the
graph is a long chain (width about 1) despite its many concatenations.
"""

from __future__ import annotations

from typing import Any, Mapping

from tf_autopar_workloads.base import Workload
from tf_autopar_workloads.paper._common import make_image_data, sparse_ce_from_logits


def build_model(hp: Mapping[str, Any]) -> Any:
    import keras
    from keras import layers

    growth = int(hp["growth"])

    def bn_relu(x: Any) -> Any:
        return layers.Activation("relu")(layers.BatchNormalization(epsilon=1.001e-5)(x))

    def dense_layer(x: Any) -> Any:
        y = layers.Conv2D(4 * growth, 1, use_bias=False)(bn_relu(x))
        y = layers.Conv2D(growth, 3, padding="same", use_bias=False)(bn_relu(y))
        return layers.Concatenate()([x, y])

    def transition(x: Any) -> Any:
        channels = int(x.shape[-1] * float(hp["compression"]))
        x = layers.Conv2D(channels, 1, use_bias=False)(bn_relu(x))
        return layers.AveragePooling2D(2, strides=2)(x)

    size = int(hp["image_size"])
    inputs = keras.Input((size, size, 3), name="image")
    x = layers.Conv2D(int(hp["stem"]), 7, strides=2, padding="same", use_bias=False)(inputs)
    x = bn_relu(x)
    x = layers.MaxPooling2D(3, strides=2, padding="same")(x)
    blocks = hp["blocks"]
    for b, n in enumerate(blocks):
        for _ in range(int(n)):
            x = dense_layer(x)
        if b < len(blocks) - 1:
            x = transition(x)
    x = layers.GlobalAveragePooling2D()(bn_relu(x))
    outputs = layers.Dense(int(hp["num_classes"]), name="logits")(x)
    return keras.Model(inputs, outputs, name="densenet121")


WORKLOAD = Workload(
    name="densenet",
    family="paper",
    task="vision",
    description="DenseNet-121: growth rate 32, dense blocks [6, 12, 24, 16], 224x224 ImageNet",
    default_batch=16,
    sizes={
        "paper": {
            "image_size": 224,
            "num_classes": 1000,
            "growth": 32,
            "stem": 64,
            "compression": 0.5,
            "blocks": (6, 12, 24, 16),
        },
        "tiny": {
            "image_size": 64,
            "num_classes": 10,
            "growth": 8,
            "stem": 16,
            "compression": 0.5,
            "blocks": (2, 2, 2, 2),
        },
    },
    build_model=build_model,
    make_data=make_image_data,
    loss=sparse_ce_from_logits,
    departures=(
        "Outputs logits; softmax folded into the loss. Batch 16 (the paper's per-model batch is not restated here). "
        "Synthetic images: fixed coarse class template plus noise. Tiny: 64x64 input, growth 8, stem 16, two "
        "layers per dense block, 10 classes."
    ),
    references=(
        "Huang, Liu, van der Maaten, Weinberger. Densely Connected Convolutional Networks. CVPR 2017. arXiv:1608.06993",
    ),
)

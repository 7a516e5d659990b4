"""ResNet-50 v1 (He et al., CVPR 2016), ImageNet classification.

Our own functional implementation rather than keras.applications.ResNet50 so that the
tiny size is the same code with fewer/narrower blocks. v1 layout: the stride sits on the
first 1x1 of a stage's first bottleneck, projection shortcut (1x1 conv) on that block.
Convolutions carry no bias (BatchNorm follows), as in the torchvision/TF-official models.
The projection shortcut is the only branch parallel to the main path, so the width
stays close to 1.
"""

from __future__ import annotations

from typing import Any, Mapping

from tf_autopar_workloads.base import Workload
from tf_autopar_workloads.paper._common import make_image_data, sparse_ce_from_logits


def build_model(hp: Mapping[str, Any]) -> Any:
    import keras
    from keras import layers

    def conv_bn(x: Any, filters: int, kernel: int, strides: int = 1, relu: bool = True) -> Any:
        x = layers.Conv2D(filters, kernel, strides=strides, padding="same", use_bias=False)(x)
        x = layers.BatchNormalization(epsilon=1.001e-5)(x)
        return layers.Activation("relu")(x) if relu else x

    def bottleneck(x: Any, filters: int, strides: int, project: bool) -> Any:
        shortcut = conv_bn(x, 4 * filters, 1, strides, relu=False) if project else x
        y = conv_bn(x, filters, 1, strides)
        y = conv_bn(y, filters, 3)
        y = conv_bn(y, 4 * filters, 1, relu=False)
        return layers.Activation("relu")(layers.Add()([shortcut, y]))

    size = int(hp["image_size"])
    base = int(hp["base_width"])
    inputs = keras.Input((size, size, 3), name="image")
    x = conv_bn(inputs, base, 7, strides=2)
    x = layers.MaxPooling2D(3, strides=2, padding="same")(x)
    for stage, blocks in enumerate(hp["blocks"]):
        filters = base * (2**stage)
        for i in range(int(blocks)):
            x = bottleneck(x, filters, strides=(2 if stage > 0 and i == 0 else 1), project=(i == 0))
    x = layers.GlobalAveragePooling2D()(x)
    outputs = layers.Dense(int(hp["num_classes"]), name="logits")(x)
    return keras.Model(inputs, outputs, name="resnet50")


WORKLOAD = Workload(
    name="resnet50",
    family="paper",
    task="vision",
    description="ResNet-50 v1: bottleneck residual blocks [3, 4, 6, 3], 224x224 ImageNet",
    default_batch=16,
    sizes={
        "paper": {"image_size": 224, "num_classes": 1000, "base_width": 64, "blocks": (3, 4, 6, 3)},
        "tiny": {"image_size": 64, "num_classes": 10, "base_width": 8, "blocks": (2, 2, 2, 2)},
    },
    build_model=build_model,
    make_data=make_image_data,
    loss=sparse_ce_from_logits,
    departures=(
        "Convolutions without bias (BatchNorm follows): 25.56M trainable weights as in torchvision (25.61M with the "
        "BatchNorm moving statistics) instead of keras.applications' 25.64M, which keeps the redundant biases. "
        "Outputs logits; softmax folded into the loss. Batch 16 (the paper's "
        "per-model batch is not restated here). Synthetic images: fixed coarse class template plus noise. Tiny: "
        "64x64 input, base width 8 instead of 64, two bottlenecks per stage (a projection and an identity block), "
        "10 classes."
    ),
    references=("He, Zhang, Ren, Sun. Deep Residual Learning for Image Recognition. CVPR 2016. arXiv:1512.03385",),
)

"""Inception v3 (Szegedy et al., CVPR 2016), ImageNet classification.

Written out module by module (not keras.applications) so the tiny size keeps the same
branch structure: Inception-A (four parallel branches), grid reduction A (three),
Inception-B with factorized 1x7/7x1 convolutions (four), grid reduction B (three),
Inception-C with the expanded 1x3/3x1 filter bank (four branches, six leaves). The
parallel branches are real independent subgraphs joined by a Concat, which is what gives
this model an average width above 1 in the paper's guideline.
"""

from __future__ import annotations

from typing import Any, Mapping

from tf_autopar_workloads.base import Workload
from tf_autopar_workloads.paper._common import make_image_data, sparse_ce_from_logits

# Channel counts of the published network (TF-slim / keras.applications layout).
_POOL_A = (32, 64, 64)  # pool-projection filters of mixed0..2
_C7_B = (128, 160, 160, 192)  # 7x7-factorized bottleneck of mixed4..7


def build_model(hp: Mapping[str, Any]) -> Any:
    import keras
    from keras import layers

    width = float(hp["width"])

    def ch(c: int) -> int:
        return max(8, int(round(c * width)))

    def conv_bn(x: Any, filters: int, kh: int, kw: int, strides: int = 1, padding: str = "same") -> Any:
        x = layers.Conv2D(ch(filters), (kh, kw), strides=strides, padding=padding, use_bias=False)(x)
        x = layers.BatchNormalization(scale=False, epsilon=1e-3)(x)
        return layers.Activation("relu")(x)

    def avg_pool(x: Any) -> Any:
        return layers.AveragePooling2D(3, strides=1, padding="same")(x)

    def inception_a(x: Any, pool_features: int) -> Any:
        b1 = conv_bn(x, 64, 1, 1)
        b5 = conv_bn(conv_bn(x, 48, 1, 1), 64, 5, 5)
        b3 = conv_bn(conv_bn(conv_bn(x, 64, 1, 1), 96, 3, 3), 96, 3, 3)
        bp = conv_bn(avg_pool(x), pool_features, 1, 1)
        return layers.Concatenate()([b1, b5, b3, bp])

    def reduction_a(x: Any) -> Any:
        b3 = conv_bn(x, 384, 3, 3, strides=2, padding="valid")
        bd = conv_bn(conv_bn(conv_bn(x, 64, 1, 1), 96, 3, 3), 96, 3, 3, strides=2, padding="valid")
        bp = layers.MaxPooling2D(3, strides=2)(x)
        return layers.Concatenate()([b3, bd, bp])

    def inception_b(x: Any, c: int) -> Any:
        b1 = conv_bn(x, 192, 1, 1)
        b7 = conv_bn(conv_bn(conv_bn(x, c, 1, 1), c, 1, 7), 192, 7, 1)
        bd = conv_bn(x, c, 1, 1)
        bd = conv_bn(bd, c, 7, 1)
        bd = conv_bn(bd, c, 1, 7)
        bd = conv_bn(bd, c, 7, 1)
        bd = conv_bn(bd, 192, 1, 7)
        bp = conv_bn(avg_pool(x), 192, 1, 1)
        return layers.Concatenate()([b1, b7, bd, bp])

    def reduction_b(x: Any) -> Any:
        b3 = conv_bn(conv_bn(x, 192, 1, 1), 320, 3, 3, strides=2, padding="valid")
        b7 = conv_bn(x, 192, 1, 1)
        b7 = conv_bn(b7, 192, 1, 7)
        b7 = conv_bn(b7, 192, 7, 1)
        b7 = conv_bn(b7, 192, 3, 3, strides=2, padding="valid")
        bp = layers.MaxPooling2D(3, strides=2)(x)
        return layers.Concatenate()([b3, b7, bp])

    def inception_c(x: Any) -> Any:
        b1 = conv_bn(x, 320, 1, 1)
        b3 = conv_bn(x, 384, 1, 1)
        b3 = layers.Concatenate()([conv_bn(b3, 384, 1, 3), conv_bn(b3, 384, 3, 1)])
        bd = conv_bn(conv_bn(x, 448, 1, 1), 384, 3, 3)
        bd = layers.Concatenate()([conv_bn(bd, 384, 1, 3), conv_bn(bd, 384, 3, 1)])
        bp = conv_bn(avg_pool(x), 192, 1, 1)
        return layers.Concatenate()([b1, b3, bd, bp])

    size = int(hp["image_size"])
    inputs = keras.Input((size, size, 3), name="image")
    x = conv_bn(inputs, 32, 3, 3, strides=2, padding="valid")
    x = conv_bn(x, 32, 3, 3, padding="valid")
    x = conv_bn(x, 64, 3, 3)
    x = layers.MaxPooling2D(3, strides=2)(x)
    x = conv_bn(x, 80, 1, 1, padding="valid")
    x = conv_bn(x, 192, 3, 3, padding="valid")
    x = layers.MaxPooling2D(3, strides=2)(x)
    for i in range(int(hp["blocks_a"])):
        x = inception_a(x, _POOL_A[min(i, len(_POOL_A) - 1)])
    x = reduction_a(x)
    n_b = int(hp["blocks_b"])
    for i in range(n_b):
        # the last B module always widens to 192, as in the published mixed7
        x = inception_b(x, _C7_B[-1] if i == n_b - 1 else _C7_B[min(i, len(_C7_B) - 2)])
    x = reduction_b(x)
    for _ in range(int(hp["blocks_c"])):
        x = inception_c(x)
    x = layers.GlobalAveragePooling2D()(x)
    outputs = layers.Dense(int(hp["num_classes"]), name="logits")(x)
    return keras.Model(inputs, outputs, name="inception_v3")


WORKLOAD = Workload(
    name="inception_v3",
    family="paper",
    task="vision",
    description="Inception v3: factorized-convolution Inception modules with 3-4 parallel branches, 299x299 ImageNet",
    default_batch=16,
    sizes={
        "paper": {"image_size": 299, "num_classes": 1000, "width": 1.0, "blocks_a": 3, "blocks_b": 4, "blocks_c": 2},
        "tiny": {"image_size": 75, "num_classes": 10, "width": 0.125, "blocks_a": 1, "blocks_b": 1, "blocks_c": 1},
    },
    build_model=build_model,
    make_data=make_image_data,
    loss=sparse_ce_from_logits,
    departures=(
        "No auxiliary classifier and no label smoothing (the auxiliary head only exists in training; leaving it out "
        "keeps one model for both modes, and it matches keras.applications' 23.8M-parameter count). Outputs logits; "
        "softmax is folded into the loss. Batch 16: the parallelism paper's per-model evaluation batch is not "
        "restated here, 16 is a typical CPU inference/training batch. Synthetic images: a fixed coarse template per "
        "class plus Gaussian noise. Tiny: 75x75 input (the smallest the stem accepts), channels x1/8, one module of "
        "each kind, 10 classes."
    ),
    references=(
        "Szegedy, Vanhoucke, Ioffe, Shlens, Wojna. Rethinking the Inception Architecture for Computer Vision. "
        "CVPR 2016. arXiv:1512.00567",
        "keras.applications.InceptionV3 (layer layout and channel counts)",
    ),
)

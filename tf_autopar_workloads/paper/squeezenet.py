"""SqueezeNet v1.1 (Iandola et al. 2016; v1.1 from the authors' repository), ImageNet classification.

Fire modules: a 1x1 "squeeze" convolution feeding two PARALLEL "expand" convolutions
(1x1 and 3x3) whose outputs are concatenated, so each module has a two-wide stage.
No batch normalization, as published.
"""

from __future__ import annotations

from typing import Any, Mapping

from tf_autopar_workloads.base import Workload
from tf_autopar_workloads.paper._common import make_image_data, sparse_ce_from_logits

# (squeeze, expand) filters of fire2..fire9 in v1.1; a max pool follows fire3 and fire5.
_FIRES = ((16, 64), (16, 64), (32, 128), (32, 128), (48, 192), (48, 192), (64, 256), (64, 256))
_POOL_AFTER = (1, 3)  # indices into _FIRES


def build_model(hp: Mapping[str, Any]) -> Any:
    import keras
    from keras import layers

    width = float(hp["width"])

    def ch(c: int) -> int:
        return max(4, int(round(c * width)))

    def fire(x: Any, squeeze: int, expand: int) -> Any:
        s = layers.Conv2D(ch(squeeze), 1, activation="relu")(x)
        e1 = layers.Conv2D(ch(expand), 1, activation="relu")(s)
        e3 = layers.Conv2D(ch(expand), 3, padding="same", activation="relu")(s)
        return layers.Concatenate()([e1, e3])

    size = int(hp["image_size"])
    inputs = keras.Input((size, size, 3), name="image")
    x = layers.Conv2D(ch(64), 3, strides=2, activation="relu")(inputs)
    x = layers.MaxPooling2D(3, strides=2)(x)
    for i, (squeeze, expand) in enumerate(_FIRES):
        x = fire(x, squeeze, expand)
        if i in _POOL_AFTER:
            x = layers.MaxPooling2D(3, strides=2)(x)
    x = layers.Dropout(float(hp["dropout"]))(x)
    x = layers.Conv2D(int(hp["num_classes"]), 1, activation="relu")(x)
    outputs = layers.GlobalAveragePooling2D(name="logits")(x)
    return keras.Model(inputs, outputs, name="squeezenet_v1_1")


WORKLOAD = Workload(
    name="squeezenet",
    family="paper",
    task="vision",
    description="SqueezeNet v1.1: eight fire modules (1x1 squeeze, parallel 1x1 and 3x3 expand), 224x224 ImageNet",
    default_batch=16,
    sizes={
        "paper": {"image_size": 224, "num_classes": 1000, "width": 1.0, "dropout": 0.5},
        "tiny": {"image_size": 64, "num_classes": 10, "width": 0.25, "dropout": 0.0},
    },
    build_model=build_model,
    make_data=make_image_data,
    loss=sparse_ce_from_logits,
    departures=(
        "The classifier's ReLU'd, globally pooled conv10 outputs are used as logits; softmax folded into the loss. "
        "Batch 16 (the paper's per-model batch is not restated here). Synthetic images: fixed coarse class template "
        "plus noise. Tiny: 64x64 input, channels x1/4, no dropout (keeps a few-step loss curve smooth), 10 classes."
    ),
    references=(
        "Iandola, Han, Moskewicz, Ashraf, Dally, Keutzer. SqueezeNet: AlexNet-level accuracy with 50x fewer "
        "parameters and <0.5MB model size. arXiv:1602.07360",
        "forresti/SqueezeNet, SqueezeNet_v1.1 (the v1.1 layout: 3x3/64 conv1, pools after fire3 and fire5)",
    ),
)

"""Fathom ``autoenc``: a variational autoencoder (Kingma & Welling 2014) on MNIST-shaped data.

As in Fathom's ``fathom/autoenc/variational.py``: linear encoder 784 -> (mean, log-variance)
of a 200-d latent, linear decoder 200 -> 784; loss = 0.5 * squared reconstruction error +
KL divergence to N(0, I); Adam 1e-3.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from tf_autopar_workloads.base import Workload

SIZES = {
    "paper": {"input": 784, "hidden": 200, "layers": 0, "latent": 200},
    "tiny": {"input": 64, "hidden": 32, "layers": 0, "latent": 16},
}


def build_model(hp: Mapping[str, Any]) -> Any:
    import keras

    class Sample(keras.layers.Layer):
        """z = mean + exp(logvar / 2) * eps while training; z = mean at inference (deterministic)."""

        def __init__(self, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.seed_generator = keras.random.SeedGenerator(1)

        def call(self, mean: Any, logvar: Any, training: bool = False) -> Any:
            if not training:
                return mean
            eps = keras.random.normal(keras.ops.shape(mean), seed=self.seed_generator)
            return mean + keras.ops.exp(0.5 * logvar) * eps

    x = keras.Input((hp["input"],), name="image")
    h = x
    for i in range(hp["layers"]):
        h = keras.layers.Dense(hp["hidden"], activation="softplus", name=f"enc_{i}")(h)
    mean = keras.layers.Dense(hp["latent"], name="z_mean")(h)
    logvar = keras.layers.Dense(hp["latent"], name="z_logvar")(h)
    z = Sample(name="sample")(mean, logvar)
    h = z
    for i in range(hp["layers"]):
        h = keras.layers.Dense(hp["hidden"], activation="softplus", name=f"dec_{i}")(h)
    logits = keras.layers.Dense(hp["input"], name="recon_logits")(h)
    out = keras.layers.Concatenate(name="logits_mean_logvar")([logits, mean, logvar])
    return keras.Model(x, out, name="autoenc")


def make_data(hp: Mapping[str, Any], batch: int, rng: np.random.Generator) -> tuple[Any, Any]:
    """MNIST-like: one of 10 fixed binary 'digit' patterns with 10% of pixels flipped; target = input."""
    n = hp["input"]
    patterns = (np.random.default_rng(784).random((10, n)) < 0.3).astype(np.float32)
    digits = rng.integers(0, 10, size=batch)
    flip = rng.random((batch, n)) < 0.1
    images = np.abs(patterns[digits] - flip.astype(np.float32))
    return images, images.copy()


def loss(y_true: Any, y_pred: Any) -> Any:
    from keras import ops

    n = ops.shape(y_true)[-1]
    latent = (ops.shape(y_pred)[-1] - n) // 2
    logits, mean, logvar = y_pred[:, :n], y_pred[:, n : n + latent], y_pred[:, n + latent :]
    recon = 0.5 * ops.sum(ops.square(logits - y_true), axis=-1)
    kl = -0.5 * ops.sum(1.0 + logvar - ops.square(mean) - ops.exp(logvar), axis=-1)
    return ops.mean(recon + kl)


WORKLOAD = Workload(
    name="autoenc",
    family="fathom",
    task="generative",
    description="Variational autoencoder, 784-200 linear encoder/decoder (MNIST shape)",
    default_batch=128,
    sizes=SIZES,
    build_model=build_model,
    make_data=make_data,
    loss=loss,
    departures=(
        "Synthetic MNIST-like binary images (10 fixed patterns, 10% pixels flipped) instead of MNIST. "
        "Shape as Fathom's variational.py (linear 784 -> 200-d latent -> 784; the size's 'layers' "
        "entry could add softplus hidden layers, 0 here). The three outputs "
        "(reconstruction logits, latent mean, log-variance) are concatenated into one tensor so the "
        "generic loss(y_true, y_pred) can compute reconstruction + KL. Fathom averages the KL per example "
        "but sums the reconstruction error over the whole batch; we average both per example. Fathom samples "
        "z in its forward-only run too; our inference uses z = mean (deterministic, so the session and "
        "tf.function paths can be compared)."
    ),
    references=("Kingma & Welling, Auto-Encoding Variational Bayes, 2014", "rdadolf/fathom: fathom/autoenc"),
    learning_rate=1e-3,
)

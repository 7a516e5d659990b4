"""Neural Collaborative Filtering: NeuMF (He et al., WWW 2017), implicit-feedback recommendation.

Two towers over SEPARATE user and item embeddings: GMF (element-wise product of 64-dim
embeddings) and an MLP (concatenated 128-dim embeddings through 256-128-64 ReLU layers),
joined by a single logistic output. The four embedding look-ups and the GMF product are
independent of the MLP tower, which is the model's parallelism.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Mapping

import numpy as np

from tf_autopar_workloads.base import Workload

LATENT_SEED = 20_170_403  # fixed: the "true" preferences are the same in every batch
LATENT_RANK = 8


def build_model(hp: Mapping[str, Any]) -> Any:
    import keras
    from keras import layers

    users, items = int(hp["num_users"]), int(hp["num_items"])
    mf_dim, mlp_layers = int(hp["mf_dim"]), tuple(int(u) for u in hp["mlp_layers"])
    mlp_embed = mlp_layers[0] // 2  # the first MLP layer's input is the user+item concatenation
    user = keras.Input((), dtype="int32", name="user")
    item = keras.Input((), dtype="int32", name="item")

    def embed(ids: Any, rows: int, dim: int, name: str) -> Any:
        init = keras.initializers.RandomNormal(stddev=0.01)
        return layers.Embedding(rows, dim, embeddings_initializer=init, name=name)(ids)

    gmf = layers.Multiply(name="gmf")([embed(user, users, mf_dim, "mf_user"), embed(item, items, mf_dim, "mf_item")])
    mlp = layers.Concatenate()([embed(user, users, mlp_embed, "mlp_user"), embed(item, items, mlp_embed, "mlp_item")])
    for units in mlp_layers:
        mlp = layers.Dense(units, activation="relu")(mlp)
    joint = layers.Concatenate()([gmf, mlp])
    logits = layers.Dense(1, name="logits")(joint)
    return keras.Model([user, item], logits, name="neumf")


@lru_cache(maxsize=4)
def _latent(users: int, items: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(LATENT_SEED)
    u = rng.standard_normal((users, LATENT_RANK)).astype(np.float32)
    v = rng.standard_normal((items, LATENT_RANK)).astype(np.float32)
    item_bias = rng.standard_normal(items).astype(np.float32)
    return u, v, item_bias


def make_data(
    hp: Mapping[str, Any], batch: int, rng: np.random.Generator
) -> tuple[tuple[np.ndarray, np.ndarray], np.ndarray]:
    """(user ids, item ids) -> 1.0 where a fixed rank-8 preference model says "interacted".

    Deterministic labels (score > 0), so the target is a fixed function of the ids; items are
    drawn with a popularity skew (a few items appear often), as in MovieLens.
    """
    if batch < 1:
        raise ValueError(f"batch must be a positive integer, got {batch}")
    users, items = int(hp["num_users"]), int(hp["num_items"])
    u, v, item_bias = _latent(users, items)
    user = rng.integers(0, users, size=batch).astype(np.int32)
    item = np.minimum((items * rng.random(batch) ** 2).astype(np.int64), items - 1).astype(np.int32)
    score = np.einsum("bk,bk->b", u[user], v[item]) / np.sqrt(LATENT_RANK) + item_bias[item]
    label = (score > 0).astype(np.float32)[:, None]
    return (user, item), label


def loss(y_true: Any, y_pred: Any) -> Any:
    import keras

    return keras.ops.mean(keras.losses.binary_crossentropy(y_true, y_pred, from_logits=True))


WORKLOAD = Workload(
    name="ncf",
    family="paper",
    task="recommendation",
    description="NeuMF (GMF + MLP towers over separate user/item embeddings), MovieLens-20M-sized tables",
    default_batch=256,
    sizes={
        "paper": {"num_users": 138_493, "num_items": 26_744, "mf_dim": 64, "mlp_layers": (256, 128, 64)},
        "tiny": {
            "num_users": 1_000,
            "num_items": 500,
            "mf_dim": 8,
            "mlp_layers": (32, 16, 8),
            "lr": 0.01,
        },  # Adam 1e-3 (He et al.) moves 0.01-scale embeddings slowly in a few steps
    },
    build_model=build_model,
    make_data=make_data,
    loss=loss,
    departures=(
        "Hyperparameters of the MLPerf/TF-official NCF on MovieLens-20M (138,493 users, 26,744 items, GMF dim 64, "
        "MLP embeddings 128 per side so their concatenation is the first 256-wide layer, then 128 and 64). "
        "Batch 256 as in He et al.'s code (MLPerf trains with much larger batches). Outputs a logit; the sigmoid is "
        "folded into the loss. Synthetic interactions: a fixed rank-8 user/item latent model with item bias, "
        "label = score > 0, popularity-skewed item draws; no negative-sampling pipeline. Tiny: 1000 users, 500 items, "
        "GMF dim 8, MLP 32-16-8."
    ),
    references=(
        "He, Liao, Zhang, Nie, Hu, Chua. Neural Collaborative Filtering. WWW 2017. arXiv:1708.05031",
        "MLPerf training v0.5 recommendation reference (NCF on MovieLens-20M)",
    ),
)

"""Wide & Deep (Cheng et al., DLRS 2016) for click-through prediction, on Criteo-shaped features.

WIDE: a linear model over every categorical feature (one weight per value, i.e. an
embedding of dimension 1) plus hashed cross-product features of chosen feature pairs,
plus the dense features. DEEP: one embedding table per categorical feature, concatenated
with the dense features, through 1024-512-256 ReLU layers. The logits of both parts are
summed (joint training). Each categorical column is its own table and its own look-up,
so the look-ups (52 plus the crosses) are all independent: the widest of the paper's
models.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Mapping

import numpy as np

from tf_autopar_workloads.base import Workload

# Cardinalities of the 26 categorical columns of the Criteo Kaggle display-advertising set.
CRITEO_CARDINALITIES = (
    1460,
    583,
    10_131_227,
    2_202_608,
    305,
    24,
    12_517,
    633,
    3,
    93_145,
    5_683,
    8_351_593,
    3_194,
    27,
    14_992,
    5_461_306,
    10,
    5_652,
    2_173,
    4,
    7_046_547,
    18,
    15,
    286_181,
    105,
    142_572,
)
# Feature pairs crossed in the wide part (low/medium-cardinality columns, as one would pick by hand).
CROSSES = ((0, 1), (4, 5), (6, 8), (13, 16), (19, 21), (22, 24), (1, 7), (10, 18))
TRUTH_SEED = 20_160_615  # fixed: the "true" click model is the same in every batch


def cardinalities(hp: Mapping[str, Any]) -> tuple[int, ...]:
    """Per-column table sizes: the Criteo counts capped by hashing to at most ``max_cardinality`` ids."""
    cap = int(hp["max_cardinality"])
    return tuple(min(c, cap) for c in CRITEO_CARDINALITIES[: int(hp["num_categorical"])])


def _cross_pairs(hp: Mapping[str, Any]) -> tuple[tuple[int, int], ...]:
    n = int(hp["num_categorical"])
    return tuple(p for p in CROSSES[: int(hp["num_crosses"])] if max(p) < n)


def _cross_ids_np(cat: np.ndarray, i: int, j: int, cards: tuple[int, ...], buckets: int) -> np.ndarray:
    return ((cat[:, i].astype(np.int64) * cards[j] + cat[:, j]) % buckets).astype(np.int32)


def build_model(hp: Mapping[str, Any]) -> Any:
    import keras
    from keras import layers, ops

    cards = cardinalities(hp)
    n_dense, dim, buckets = int(hp["num_dense"]), int(hp["embed_dim"]), int(hp["cross_buckets"])
    dense_in = keras.Input((n_dense,), dtype="float32", name="dense_features")
    cat_in = keras.Input((len(cards),), dtype="int32", name="categorical_ids")
    columns = [cat_in[:, i] for i in range(len(cards))]

    # wide: one scalar weight per categorical value and per hashed cross, plus the dense features
    wide_terms = [
        layers.Embedding(c, 1, embeddings_initializer="zeros", name=f"wide_c{i}")(col)
        for i, (c, col) in enumerate(zip(cards, columns))
    ]
    for i, j in _cross_pairs(hp):
        ids = ops.cast((ops.cast(columns[i], "int64") * cards[j] + ops.cast(columns[j], "int64")) % buckets, "int32")
        wide_terms.append(layers.Embedding(buckets, 1, embeddings_initializer="zeros", name=f"wide_x{i}_{j}")(ids))
    wide_terms.append(layers.Dense(1, name="wide_dense")(dense_in))
    wide = layers.Add(name="wide_logit")(wide_terms)

    # deep: one embedding table per column, concatenated with the dense features, then the MLP
    deep = [layers.Embedding(c, dim, name=f"deep_c{i}")(col) for i, (c, col) in enumerate(zip(cards, columns))]
    x = layers.Concatenate()(deep + [dense_in])
    for units in hp["hidden"]:
        x = layers.Dense(int(units), activation="relu")(x)
    deep_logit = layers.Dense(1, name="deep_logit")(x)
    logits = layers.Add(name="logits")([wide, deep_logit])
    return keras.Model([dense_in, cat_in], logits, name="wide_deep")


@lru_cache(maxsize=4)
def _truth(cards: tuple[int, ...], n_dense: int, pairs: tuple[tuple[int, int], ...], buckets: int) -> tuple[Any, ...]:
    rng = np.random.default_rng(TRUTH_SEED)
    per_column = tuple(0.35 * rng.standard_normal(c).astype(np.float32) for c in cards)
    per_cross = tuple(0.35 * rng.standard_normal(buckets).astype(np.float32) for _ in pairs)
    dense_w = (0.3 * rng.standard_normal(n_dense)).astype(np.float32)
    return per_column, per_cross, dense_w


def make_data(
    hp: Mapping[str, Any], batch: int, rng: np.random.Generator
) -> tuple[tuple[np.ndarray, np.ndarray], np.ndarray]:
    """Criteo-shaped rows; clicks drawn from a fixed, known logistic model of the same features.

    The true model is itself a wide model (per-value weights, cross weights, dense weights),
    so it is exactly representable and the loss falls towards its Bernoulli entropy.
    Categorical ids are popularity-skewed (small ids frequent), as in click logs.
    """
    if batch < 1:
        raise ValueError(f"batch must be a positive integer, got {batch}")
    cards, n_dense = cardinalities(hp), int(hp["num_dense"])
    pairs, buckets = _cross_pairs(hp), int(hp["cross_buckets"])
    per_column, per_cross, dense_w = _truth(cards, n_dense, pairs, buckets)
    dense = rng.standard_normal((batch, n_dense), dtype=np.float32)
    u = rng.random((batch, len(cards)))
    cat = np.minimum((u**3 * np.array(cards)).astype(np.int64), np.array(cards) - 1).astype(np.int32)
    z = dense @ dense_w - 0.5
    for i, w in enumerate(per_column):
        z = z + w[cat[:, i]]
    for (i, j), w in zip(pairs, per_cross):
        z = z + w[_cross_ids_np(cat, i, j, cards, buckets)]
    click = (rng.random(batch) < 1.0 / (1.0 + np.exp(-z))).astype(np.float32)[:, None]
    return (dense, cat), click


def loss(y_true: Any, y_pred: Any) -> Any:
    import keras

    return keras.ops.mean(keras.losses.binary_crossentropy(y_true, y_pred, from_logits=True))


WORKLOAD = Workload(
    name="wide_deep",
    family="paper",
    task="recommendation",
    description=(
        "Wide & Deep: linear model over categorical values and hashed crosses "
        "+ per-column embeddings into a 1024-512-256 MLP"
    ),
    default_batch=256,
    sizes={
        "paper": {
            "num_dense": 13,
            "num_categorical": 26,
            "max_cardinality": 100_000,
            "embed_dim": 32,
            "num_crosses": 8,
            "cross_buckets": 100_000,
            "hidden": (1024, 512, 256),
        },
        "tiny": {
            "num_dense": 13,
            "num_categorical": 26,
            "max_cardinality": 64,
            "embed_dim": 4,
            "num_crosses": 8,
            "cross_buckets": 128,
            "hidden": (32, 16, 8),
        },
    },
    build_model=build_model,
    make_data=make_data,
    loss=loss,
    departures=(
        "Criteo-shaped inputs (13 dense, 26 categorical columns with the Kaggle set's cardinalities, hashed down to "
        "at most 100,000 ids per column) instead of the paper's Google Play features. 32-dim embeddings and the "
        "1024-512-256 ReLU tower follow Cheng et al.; eight hand-picked crossed pairs hashed into 100,000 buckets. "
        "One optimizer for both parts (the paper used FTRL+L1 for wide, AdaGrad for deep). Outputs a logit; the "
        "sigmoid is folded into the loss. Batch 256 (the paper gives none). Synthetic clicks: Bernoulli draws from "
        "a fixed logistic model over the same values, crosses and dense features. Tiny: tables capped at 64 ids, "
        "128 cross buckets, 4-dim embeddings, MLP 32-16-8 (same 26 columns and 8 crosses)."
    ),
    references=(
        "Cheng et al. Wide & Deep Learning for Recommender Systems. DLRS 2016. arXiv:1606.07792",
        "Criteo Display Advertising Challenge (Kaggle 2014) column cardinalities, as listed by facebookresearch/dlrm",
    ),
)

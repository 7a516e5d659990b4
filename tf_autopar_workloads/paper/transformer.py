"""Transformer base (Vaswani et al., NeurIPS 2017) for translation, trained with teacher forcing.

Encoder-decoder, post-layer-norm as published: 6+6 layers, d_model 512, 8 heads, FFN 2048,
one source/target vocabulary whose embedding matrix is shared by both embeddings and the
pre-softmax projection, sinusoidal positions. Attention is written out with Dense and
matmul ops (not keras.layers.MultiHeadAttention, which lowers to Einsum) so the graph has
ordinary MatMul/BatchMatMul ops; the Q, K and V projections are three independent
MatMuls and the encoder runs independently of the decoder's first self-attention, which
is all the parallelism this model has.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from tf_autopar_workloads.base import Workload

PAD, BOS, FIRST_TOKEN = 0, 1, 3  # ids below FIRST_TOKEN are reserved


def _positions(length: int, d_model: int) -> np.ndarray:
    pos = np.arange(length)[:, None]
    i = np.arange(d_model // 2)[None, :]
    angle = pos / np.power(10_000.0, 2 * i / d_model)
    enc = np.zeros((length, d_model), dtype=np.float32)
    enc[:, 0::2], enc[:, 1::2] = np.sin(angle), np.cos(angle)
    return enc


def build_model(hp: Mapping[str, Any]) -> Any:
    import keras
    from keras import layers, ops

    d, heads, ff = int(hp["d_model"]), int(hp["heads"]), int(hp["ff"])
    vocab, length, rate = int(hp["vocab"]), int(hp["seq_len"]), float(hp["dropout"])
    dk = d // heads

    class SharedEmbedding(layers.Layer):
        """One matrix for source embedding, target embedding and output projection (paper section 3.4)."""

        def build(self, input_shape: Any) -> None:
            init = keras.initializers.RandomNormal(stddev=d**-0.5)
            self.embeddings = self.add_weight(shape=(vocab, d), initializer=init, name="embeddings")

        def call(self, x: Any, logits: bool = False) -> Any:
            if logits:
                return ops.matmul(x, ops.transpose(self.embeddings))
            return ops.take(self.embeddings, x, axis=0) * (d**0.5)

    shared = SharedEmbedding(name="shared_embedding")
    pos = _positions(length, d)
    causal = (np.triu(np.ones((length, length), dtype=np.float32), k=1) * -1e9)[None, None]

    def split_heads(x: Any) -> Any:
        return ops.transpose(ops.reshape(x, (-1, length, heads, dk)), (0, 2, 1, 3))

    def attention(q_in: Any, kv_in: Any, mask: np.ndarray | None) -> Any:
        q = split_heads(layers.Dense(d)(q_in))
        k = split_heads(layers.Dense(d)(kv_in))
        v = split_heads(layers.Dense(d)(kv_in))
        scores = ops.matmul(q, ops.transpose(k, (0, 1, 3, 2))) * (dk**-0.5)
        if mask is not None:
            scores = scores + mask
        weights = layers.Dropout(rate)(ops.softmax(scores, axis=-1))
        out = ops.reshape(ops.transpose(ops.matmul(weights, v), (0, 2, 1, 3)), (-1, length, d))
        return layers.Dense(d)(out)

    def add_norm(x: Any, y: Any) -> Any:
        return layers.LayerNormalization(epsilon=1e-6)(layers.Add()([x, layers.Dropout(rate)(y)]))

    def feed_forward(x: Any) -> Any:
        return layers.Dense(d)(layers.Dense(ff, activation="relu")(x))

    src = keras.Input((length,), dtype="int32", name="source")
    tgt = keras.Input((length,), dtype="int32", name="target_in")
    x = layers.Dropout(rate)(shared(src) + pos)
    for _ in range(int(hp["encoder_layers"])):
        x = add_norm(x, attention(x, x, None))
        x = add_norm(x, feed_forward(x))
    memory = x
    y = layers.Dropout(rate)(shared(tgt) + pos)
    for _ in range(int(hp["decoder_layers"])):
        y = add_norm(y, attention(y, y, causal))
        y = add_norm(y, attention(y, memory, None))
        y = add_norm(y, feed_forward(y))
    logits = shared(y, logits=True)
    return keras.Model([src, tgt], logits, name="transformer")


def make_data(
    hp: Mapping[str, Any], batch: int, rng: np.random.Generator
) -> tuple[tuple[np.ndarray, np.ndarray], np.ndarray]:
    """Source: random tokens; target: the source reversed with every id shifted by one.

    A fixed, deterministic "translation" that attention can learn; the decoder input is
    the target shifted right behind BOS (teacher forcing). No padding: every sentence
    has the full length.
    """
    if batch < 1:
        raise ValueError(f"batch must be a positive integer, got {batch}")
    vocab, length = int(hp["vocab"]), int(hp["seq_len"])
    src = rng.integers(FIRST_TOKEN, vocab - 1, size=(batch, length)).astype(np.int32)
    tgt = src[:, ::-1] + 1
    tgt_in = np.concatenate([np.full((batch, 1), BOS, np.int32), tgt[:, :-1]], axis=1)
    return (src, np.ascontiguousarray(tgt_in, dtype=np.int32)), np.ascontiguousarray(tgt, dtype=np.int32)


def loss(y_true: Any, y_pred: Any) -> Any:
    import keras

    return keras.ops.mean(keras.losses.sparse_categorical_crossentropy(y_true, y_pred, from_logits=True))


WORKLOAD = Workload(
    name="transformer",
    family="paper",
    task="translation",
    description="Transformer base encoder-decoder (6+6 layers, d 512, 8 heads, FFN 2048, shared 37k vocabulary)",
    default_batch=64,
    sizes={
        "paper": {
            "vocab": 37_000,
            "seq_len": 50,
            "d_model": 512,
            "heads": 8,
            "ff": 2048,
            "encoder_layers": 6,
            "decoder_layers": 6,
            "dropout": 0.1,
        },
        "tiny": {
            "vocab": 256,
            "seq_len": 12,
            "d_model": 64,
            "heads": 4,
            "ff": 128,
            "encoder_layers": 2,
            "decoder_layers": 2,
            "dropout": 0.0,
        },
    },
    build_model=build_model,
    make_data=make_data,
    loss=loss,
    departures=(
        "Fixed sentence length 50 without padding masks; batch 64 sentences (3,200 tokens) instead of the published "
        "~25,000 source + 25,000 target tokens per batch, which is a multi-GPU batch (TF-official's per-device base "
        "batch is 4,096 tokens). No label smoothing; plain cross-entropy over all target positions. Vocabulary "
        "37,000 as in the WMT'14 EN-DE BPE setting; 63.1M parameters against the published ~65M (the paper does not "
        "list its exact bias/vocabulary accounting). Inference is one teacher-forced forward pass (no beam "
        "search). Synthetic task: reverse the source "
        "and shift every id by one. Tiny: vocabulary 256, length 12, 2+2 layers, d 64, 4 heads, FFN 128, no dropout."
    ),
    references=(
        "Vaswani, Shazeer, Parmar, Uszkoreit, Jones, Gomez, Kaiser, Polosukhin. Attention Is All You Need. "
        "NeurIPS 2017. arXiv:1706.03762",
    ),
)

#!/usr/bin/env python
"""Real model architectures that are NOT bundled workloads, saved as users bring them (issue 15).

The plan's thresholds were fitted on the bundled workloads (Fathom's eight and the paper's
models). This script builds a separate set of real architectures, none of those, with fixed
seeds and random weights (no downloads), and saves each as a SavedModel directory
``OUTDIR/NAME/`` whose ``serving_default`` signature has a free (None) batch dimension and
named inputs, as a server would load it with ``tf.saved_model.load``.

    python benchmarks/user_models.py OUTDIR                      # build and save all
    python benchmarks/user_models.py OUTDIR --only dlrm,bert_encoder --keras
    python benchmarks/user_models.py OUTDIR --check              # load each, run batch 1 and the serving batch

| name            | architecture                                                            | inputs |
|-----------------|-------------------------------------------------------------------------|--------|
| mobilenet_v2    | keras.applications.MobileNetV2, 224x224 (depthwise convs: mobile case)  | images [None,224,224,3] f32 |
| nasnet_mobile   | keras.applications.NASNetMobile, 224x224 (many parallel branches)       | images [None,224,224,3] f32 |
| efficientnet_b0 | keras.applications.EfficientNetB0, 224x224 (depthwise + squeeze-excite) | images [None,224,224,3] f32 |
| xception        | keras.applications.Xception, 299x299 (large vision net, separable convs) | images [None,299,299,3] f32 |
| convnext_tiny   | keras.applications.ConvNeXtTiny, 224x224 (28M parameters, LayerNorm)   | images [None,224,224,3] f32 |
| dlrm            | DLRM (Naumov 2019), Criteo shape: 13 dense features -> MLP 512-256-32;  | dense_features [None,13] f32, |
|                 | 26 tables of 1e3..1e5 rows x 32; pairwise dot interaction; MLP 512-256-1 | cat_00..cat_25 [None] i64 |
| bert_encoder    | BERT-style encoder: 4 layers, hidden 256, 4 heads, FFN 1024, seq 128,   | input_ids, attention_mask |
|                 | vocab 30522 (Keras MultiHeadAttention/LayerNormalization/Dense)         | [None,128] i32 |
| lstm_classifier | Embedding 20000x128, 2 x LSTM 256, softmax over 4 classes, seq 64       | input_ids [None,64] i32 |
| youtube_dnn     | YouTube DNN candidate generation (Covington 2016): mean of 50 watched   | watch_history [None,50] i32, |
|                 | videos' and 20 search tokens' 64-d embeddings, geo, ReLU 1024-512-256   | search_tokens [None,20] i32, geo, user_features |
| dcn_v2          | DCN-V2 (Wang 2021), Criteo shape: DLRM's 26 tables x 16, 3 full-rank     | dense_features [None,13] f32, |
|                 | cross layers (429 wide), then ReLU 512-256, sigmoid                     | cat_00..cat_25 [None] i64 |

Added for issue 46's engine benchmark (benchmarks/bench_engines.py), unlike the nine above:

| name            | architecture                                                            | inputs |
|-----------------|-------------------------------------------------------------------------|--------|
| unet_small      | U-Net, 128x128: 3 levels 16-32-64 + 128 bottleneck, Conv2DTranspose     | images [None,128,128,3] f32 |
|                 | upsampling, skip concats, 4-class per-pixel softmax                     | |
| tiny_mlp        | MLP 32 -> 64 -> 64 -> 1 (sigmoid): per-call overhead dominates          | features [None,32] f32 |
| gru_tagger      | Embedding 10000x64, bidirectional GRU 128, per-token softmax over 16    | input_ids [None,48] i32 |
| gpt_decoder     | GPT-style decoder: 2 pre-LN layers, 256 wide, 4 heads, causal mask,     | input_ids [None,64] i32 |
|                 | FFN 1024, next-token softmax over 8000 from the last position           | |
| vit_tiny        | ViT-style: 96x96 in 8x8 patches (144), 192 wide, 4 pre-LN layers,       | images [None,96,96,3] f32 |
|                 | 3 heads, MLP 384, mean-pooled, softmax over 100                         | |

The module is importable without TensorFlow (the benchmark driver imports ``SERVING``,
``INPUTS`` and ``make_inputs``); TensorFlow and Keras are imported inside functions.
Model files are large (xception 88 MB, dlrm 76 MB): write them outside the repository.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

SEED = 1234

#: Models in build order.
MODELS = (
    "mobilenet_v2",
    "nasnet_mobile",
    "efficientnet_b0",
    "xception",
    "dlrm",
    "bert_encoder",
    "lstm_classifier",
    "youtube_dnn",
    "dcn_v2",
    "convnext_tiny",
)

# DLRM sizes (Criteo Terabyte/Kaggle shape, scaled): 13 dense features, 26 categorical ones.
DLRM_DENSE = 13
DLRM_DIM = 32
#: Rows per table: log-spaced from 1e3 to 1e5, in a fixed shuffled order (real Criteo tables
#: are not sorted by size).
_DLRM_ORDER = (7, 19, 2, 24, 11, 0, 16, 5, 21, 13, 9, 25, 3, 18, 14, 1, 22, 8, 20, 6, 12, 23, 4, 17, 10, 15)
DLRM_TABLES = tuple(int(round(10 ** (3 + 2 * i / 25))) for i in _DLRM_ORDER)

BERT_SEQ, BERT_VOCAB, BERT_HIDDEN, BERT_LAYERS, BERT_HEADS, BERT_FFN = 128, 30522, 256, 4, 4, 1024
LSTM_SEQ, LSTM_VOCAB, LSTM_EMBED, LSTM_UNITS, LSTM_CLASSES = 64, 20000, 128, 256, 4
# YouTube DNN candidate generation (Covington et al. 2016): watch history and search tokens.
YT_HISTORY, YT_VIDEOS, YT_TOKENS, YT_VOCAB, YT_GEOS, YT_DIM = 50, 100_000, 20, 50_000, 1000, 64
DCN_DIM = 16  # DCN-V2 on the Criteo shape: DLRM's tables, 16-wide

#: The Criteo-shaped inputs of DLRM and DCN-V2: 13 dense features and 26 ids, one per table.
_CRITEO_INPUTS = [("dense_features", "float32", (DLRM_DENSE,), None)] + [
    (f"cat_{i:02d}", "int64", (), rows) for i, rows in enumerate(DLRM_TABLES)
]

#: Signature inputs per model: (name, dtype, shape without the batch dimension, exclusive
#: upper bound of the values for integer ids or None for floats). Pure Python, no TF.
INPUTS: dict[str, list[tuple[str, str, tuple[int, ...], int | None]]] = {
    "mobilenet_v2": [("images", "float32", (224, 224, 3), None)],
    "nasnet_mobile": [("images", "float32", (224, 224, 3), None)],
    "efficientnet_b0": [("images", "float32", (224, 224, 3), None)],
    "xception": [("images", "float32", (299, 299, 3), None)],
    "dlrm": _CRITEO_INPUTS,
    "bert_encoder": [("input_ids", "int32", (BERT_SEQ,), BERT_VOCAB), ("attention_mask", "int32", (BERT_SEQ,), 2)],
    "lstm_classifier": [("input_ids", "int32", (LSTM_SEQ,), LSTM_VOCAB)],
    "youtube_dnn": [
        ("watch_history", "int32", (YT_HISTORY,), YT_VIDEOS),
        ("search_tokens", "int32", (YT_TOKENS,), YT_VOCAB),
        ("geo", "int32", (), YT_GEOS),
        ("user_features", "float32", (4,), None),
    ],
    "dcn_v2": _CRITEO_INPUTS,
    "convnext_tiny": [("images", "float32", (224, 224, 3), None)],
}
#: Output key of single-output models (default "probabilities").
OUTPUT_KEYS = {"dlrm": "click_probability", "dcn_v2": "click_probability", "youtube_dnn": "user_embedding"}

#: Batch sizes per model: "batch1" (latency) and "serving" (a batch a server would use, chosen
#: so one request takes roughly 20-300 ms on this 2-core host).
#: Measured once with ``--check`` (one process, default threads, the loaded
#: ``serving_default`` signature, median of 5 calls after 2 warm-up calls) on
#: "Intel(R) Xeon(R) Processor" (/proc/cpuinfo; KVM, 2 vCPUs, AVX-512), TF 2.21 CPU, Keras 3.15,
#: host shared with other jobs (load average ~1.5 during the run; spread 10-30%):
#:   model             batch 1      serving batch
#:   mobilenet_v2       25 ms       8:     96 ms
#:   nasnet_mobile      54 ms       8:    147 ms
#:   efficientnet_b0    38 ms       8:    137 ms
#:   xception          120 ms       2:    224 ms   (8.4 G MACs per example: batch 8, ~1 s)
#:   dlrm               1.9 ms   2048:     30 ms   (256: 6.7 ms, 1024: 11 ms, 4096: 30 ms; of
#:                                                  these 2048 is the first above 20 ms)
#:   bert_encoder       17 ms      16:    109 ms
#:   lstm_classifier    10 ms      32:     45 ms
SERVING: dict[str, dict[str, int]] = {
    "mobilenet_v2": {"batch1": 1, "serving": 8},
    "nasnet_mobile": {"batch1": 1, "serving": 8},
    "efficientnet_b0": {"batch1": 1, "serving": 8},
    "xception": {"batch1": 1, "serving": 2},
    "dlrm": {"batch1": 1, "serving": 2048},
    "bert_encoder": {"batch1": 1, "serving": 16},
    "lstm_classifier": {"batch1": 1, "serving": 32},
    # added later as held-out rows for the OpenMP look-up rule (docs/openmp.md); not timed above
    "youtube_dnn": {"batch1": 1, "serving": 512},
    "dcn_v2": {"batch1": 1, "serving": 2048},
    # added for the memory-limit rows (docs/serving.md): a third model of tens of millions of parameters
    "convnext_tiny": {"batch1": 1, "serving": 2},
}

# ------------------------------------------------------------------------------ architectures for the engines' rows

UNET_SIZE, UNET_WIDTHS, UNET_CLASSES = 128, (16, 32, 64), 4
MLP_FEATURES, MLP_UNITS = 32, (64, 64)
GRU_SEQ, GRU_VOCAB, GRU_EMBED, GRU_UNITS, GRU_TAGS = 48, 10000, 64, 128, 16
GPT_SEQ, GPT_VOCAB, GPT_HIDDEN, GPT_LAYERS, GPT_HEADS, GPT_FFN = 64, 8000, 256, 2, 4, 1024
VIT_SIZE, VIT_PATCH, VIT_DIM, VIT_LAYERS, VIT_HEADS, VIT_MLP, VIT_CLASSES = 96, 8, 192, 4, 3, 384, 100

#: Kept in a block of their own (dict updates, not edits of the tables above) so that other
#: additions to this file merge without touching the same lines.
ENGINE_MODELS = ("unet_small", "tiny_mlp", "gru_tagger", "gpt_decoder", "vit_tiny")
MODELS = MODELS + ENGINE_MODELS
INPUTS.update(
    {
        "unet_small": [("images", "float32", (UNET_SIZE, UNET_SIZE, 3), None)],
        "tiny_mlp": [("features", "float32", (MLP_FEATURES,), None)],
        "gru_tagger": [("input_ids", "int32", (GRU_SEQ,), GRU_VOCAB)],
        "gpt_decoder": [("input_ids", "int32", (GPT_SEQ,), GPT_VOCAB)],
        "vit_tiny": [("images", "float32", (VIT_SIZE, VIT_SIZE, 3), None)],
    }
)
OUTPUT_KEYS.update(
    {
        "unet_small": "segmentation",
        "tiny_mlp": "score",
        "gru_tagger": "tag_probabilities",
        "gpt_decoder": "next_token_probabilities",
    }
)
#: Serving batches: measured once with ``--check --calls 9`` (as above: one process, default
#: threads, median after 2 warm-up calls) on "AMD EPYC" (2 vCPUs, AVX-512), TF 2.21, host shared
#: (load average ~2.4):
#:   model          batch 1     serving batch
#:   unet_small     14.9 ms      4:   52 ms
#:   tiny_mlp        0.3 ms    256:  0.6 ms   (overhead-bound at any batch a server would use)
#:   gru_tagger      4.7 ms     32:   12 ms
#:   gpt_decoder     8.0 ms      8:   27 ms
#:   vit_tiny       11.3 ms      8:   44 ms
SERVING.update(
    {
        "unet_small": {"batch1": 1, "serving": 4},
        "tiny_mlp": {"batch1": 1, "serving": 256},
        "gru_tagger": {"batch1": 1, "serving": 32},
        "gpt_decoder": {"batch1": 1, "serving": 8},
        "vit_tiny": {"batch1": 1, "serving": 8},
    }
)


def make_inputs(name: str, batch: int, seed: int = 0) -> dict:
    """Synthetic inputs for ``serving_default`` of NAME at BATCH: numpy arrays keyed by
    signature input name (floats ~ N(0,1); ids uniform below the table/vocabulary size;
    attention masks with a random valid length >= 1)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    out = {}
    for inp, dtype, shape, high in INPUTS[name]:
        full = (batch,) + tuple(shape)
        if inp == "attention_mask":
            lengths = rng.integers(1, shape[0] + 1, size=batch)
            out[inp] = (np.arange(shape[0])[None, :] < lengths[:, None]).astype(dtype)
        elif high is None:
            out[inp] = rng.standard_normal(full).astype(dtype)
        else:
            out[inp] = rng.integers(0, high, size=full).astype(dtype)
    return out


# ------------------------------------------------------------------------------ builders


def _vision(name: str):
    import keras

    apps = {
        "mobilenet_v2": (keras.applications.MobileNetV2, 224),
        "nasnet_mobile": (keras.applications.NASNetMobile, 224),
        "efficientnet_b0": (keras.applications.EfficientNetB0, 224),
        "xception": (keras.applications.Xception, 299),
        "convnext_tiny": (keras.applications.ConvNeXtTiny, 224),
    }
    ctor, size = apps[name]
    return ctor(weights=None, input_shape=(size, size, 3), include_top=True, classes=1000, name=name)


def _dlrm():
    """DLRM (Naumov et al. 2019): bottom MLP on dense features, one embedding table per
    categorical feature, pairwise dot products of the 27 vectors (strict lower triangle),
    concatenated with the bottom MLP's output, top MLP, sigmoid click probability."""
    import keras
    from keras import layers, ops

    dense_in = keras.Input((DLRM_DENSE,), name="dense_features")
    cat_in = [keras.Input((), dtype="int64", name=f"cat_{i:02d}") for i in range(len(DLRM_TABLES))]
    x = dense_in
    for units in (512, 256):
        x = layers.Dense(units, activation="relu")(x)
    bottom = layers.Dense(DLRM_DIM, activation="relu", name="bottom_out")(x)
    embs = [
        layers.Embedding(rows, DLRM_DIM, name=f"table_{i:02d}")(c)
        for i, (rows, c) in enumerate(zip(DLRM_TABLES, cat_in))
    ]
    n = len(embs) + 1
    z = ops.stack([bottom] + embs, axis=1)  # [B, 27, D]
    dots = ops.matmul(z, ops.transpose(z, (0, 2, 1)))  # [B, 27, 27]
    flat = ops.reshape(dots, (-1, n * n))
    tril = [i * n + j for i in range(n) for j in range(i)]  # 351 pairs
    inter = ops.take(flat, ops.convert_to_tensor(tril, dtype="int32"), axis=1)
    x = layers.Concatenate()([bottom, inter])
    for units in (512, 256):
        x = layers.Dense(units, activation="relu")(x)
    out = layers.Dense(1, activation="sigmoid", name="click_probability")(x)
    inputs = {"dense_features": dense_in, **{t.name: t for t in cat_in}}
    return keras.Model(inputs, out, name="dlrm")


def _youtube_dnn():
    """YouTube DNN candidate generation (Covington et al. 2016), serving side: the average of
    the watched videos' embeddings and of the search tokens' embeddings, a geography
    embedding and dense user features, through a ReLU tower 1024-512-256 to the user vector
    that a nearest-neighbour index is queried with."""
    import keras
    from keras import layers, ops

    hist = keras.Input((YT_HISTORY,), dtype="int32", name="watch_history")
    tokens = keras.Input((YT_TOKENS,), dtype="int32", name="search_tokens")
    geo = keras.Input((), dtype="int32", name="geo")
    dense = keras.Input((4,), name="user_features")
    watched = ops.mean(layers.Embedding(YT_VIDEOS, YT_DIM, name="videos")(hist), axis=1)
    searched = ops.mean(layers.Embedding(YT_VOCAB, YT_DIM, name="tokens")(tokens), axis=1)
    where = layers.Embedding(YT_GEOS, 16, name="geos")(geo)
    x = layers.Concatenate()([watched, searched, where, dense])
    for units in (1024, 512):
        x = layers.Dense(units, activation="relu")(x)
    out = layers.Dense(256, activation="relu", name="user_embedding")(x)
    return keras.Model(
        {"watch_history": hist, "search_tokens": tokens, "geo": geo, "user_features": dense}, out, name="youtube_dnn"
    )


def _dcn_v2():
    """DCN-V2 (Wang et al. 2021), stacked: the dense features and 26 embeddings (429 values)
    through three full-rank cross layers x_{l+1} = x_0 * (W x_l + b) + x_l, then a deep
    ReLU tower 512-256 and a sigmoid click probability."""
    import keras
    from keras import layers

    dense_in = keras.Input((DLRM_DENSE,), name="dense_features")
    cat_in = [keras.Input((), dtype="int64", name=f"cat_{i:02d}") for i in range(len(DLRM_TABLES))]
    embs = [
        layers.Embedding(rows, DCN_DIM, name=f"table_{i:02d}")(c)
        for i, (rows, c) in enumerate(zip(DLRM_TABLES, cat_in))
    ]
    x0 = layers.Concatenate()([dense_in] + embs)
    x = x0
    width = DLRM_DENSE + DCN_DIM * len(DLRM_TABLES)
    for i in range(3):
        x = x0 * layers.Dense(width, name=f"cross_{i}")(x) + x
    for units in (512, 256):
        x = layers.Dense(units, activation="relu")(x)
    out = layers.Dense(1, activation="sigmoid", name="click_probability")(x)
    inputs = {"dense_features": dense_in, **{t.name: t for t in cat_in}}
    return keras.Model(inputs, out, name="dcn_v2")


def _bert_encoder():
    """BERT-style post-LN encoder from Keras layers; position ids are derived from the token
    ids (cumsum of ones) so that the .keras file needs no custom objects."""
    import keras
    from keras import layers, ops

    ids = keras.Input((BERT_SEQ,), dtype="int32", name="input_ids")
    mask = keras.Input((BERT_SEQ,), dtype="int32", name="attention_mask")
    pos = ops.cumsum(ops.ones_like(ids), axis=1) - 1
    x = layers.Embedding(BERT_VOCAB, BERT_HIDDEN, name="word_embeddings")(ids)
    x = x + layers.Embedding(BERT_SEQ, BERT_HIDDEN, name="position_embeddings")(pos)
    x = layers.LayerNormalization(epsilon=1e-12, name="embeddings_ln")(x)
    att_mask = ops.expand_dims(ops.cast(mask, "bool"), 1)  # [B, 1, S]
    for i in range(BERT_LAYERS):
        a = layers.MultiHeadAttention(BERT_HEADS, BERT_HIDDEN // BERT_HEADS, name=f"layer_{i}_attention")(
            x, x, attention_mask=att_mask
        )
        x = layers.LayerNormalization(epsilon=1e-12, name=f"layer_{i}_attention_ln")(x + a)
        h = layers.Dense(BERT_FFN, activation="gelu", name=f"layer_{i}_intermediate")(x)
        h = layers.Dense(BERT_HIDDEN, name=f"layer_{i}_output")(h)
        x = layers.LayerNormalization(epsilon=1e-12, name=f"layer_{i}_output_ln")(x + h)
    cls = x[:, 0, :]
    pooled = layers.Dense(BERT_HIDDEN, activation="tanh", name="pooler")(cls)
    return keras.Model(
        {"input_ids": ids, "attention_mask": mask}, {"sequence_output": x, "pooled_output": pooled}, name="bert_encoder"
    )


def _lstm_classifier():
    import keras
    from keras import layers

    ids = keras.Input((LSTM_SEQ,), dtype="int32", name="input_ids")
    x = layers.Embedding(LSTM_VOCAB, LSTM_EMBED)(ids)
    x = layers.LSTM(LSTM_UNITS, return_sequences=True)(x)
    x = layers.LSTM(LSTM_UNITS)(x)
    out = layers.Dense(LSTM_CLASSES, activation="softmax", name="probabilities")(x)
    return keras.Model(ids, out, name="lstm_classifier")


def _unet_small():
    """A small U-Net: two 3x3 convs per level, max-pool down, Conv2DTranspose up, the encoder's
    output of the same level concatenated before each decoder level (conv + transposed conv +
    skip concat: the segmentation shape)."""
    import keras
    from keras import layers

    def block(x, width, tag):
        for k in range(2):
            x = layers.Conv2D(width, 3, padding="same", activation="relu", name=f"{tag}_conv{k}")(x)
        return x

    images = keras.Input((UNET_SIZE, UNET_SIZE, 3), name="images")
    x, skips = images, []
    for i, width in enumerate(UNET_WIDTHS):
        x = block(x, width, f"down{i}")
        skips.append(x)
        x = layers.MaxPooling2D(2, name=f"pool{i}")(x)
    x = block(x, 2 * UNET_WIDTHS[-1], "bottleneck")
    for i, width in reversed(list(enumerate(UNET_WIDTHS))):
        x = layers.Conv2DTranspose(width, 2, strides=2, name=f"up{i}")(x)
        x = layers.Concatenate(name=f"skip{i}")([x, skips[i]])
        x = block(x, width, f"dec{i}")
    out = layers.Conv2D(UNET_CLASSES, 1, activation="softmax", name="segmentation")(x)
    return keras.Model(images, out, name="unet_small")


def _tiny_mlp():
    """A tiny MLP (32 features, two ReLU layers of 64, a sigmoid): a few microseconds of math,
    so what a call costs is the serving stack's own overhead."""
    import keras
    from keras import layers

    x = features = keras.Input((MLP_FEATURES,), name="features")
    for i, units in enumerate(MLP_UNITS):
        x = layers.Dense(units, activation="relu", name=f"hidden_{i}")(x)
    out = layers.Dense(1, activation="sigmoid", name="score")(x)
    return keras.Model(features, out, name="tiny_mlp")


def _gru_tagger():
    """A sequence tagger: embeddings, a bidirectional GRU over the whole sequence, a softmax per
    token (recurrent: a While loop that engines convert or unroll differently)."""
    import keras
    from keras import layers

    ids = keras.Input((GRU_SEQ,), dtype="int32", name="input_ids")
    x = layers.Embedding(GRU_VOCAB, GRU_EMBED, name="embeddings")(ids)
    x = layers.Bidirectional(layers.GRU(GRU_UNITS, return_sequences=True), name="bigru")(x)
    out = layers.Dense(GRU_TAGS, activation="softmax", name="tag_probabilities")(x)
    return keras.Model(ids, out, name="gru_tagger")


def _transformer_layer(x, heads: int, width: int, ffn: int, tag: str, causal: bool):
    """One pre-LN transformer layer (attention and a GELU FFN, each with a residual)."""
    from keras import layers

    h = layers.LayerNormalization(epsilon=1e-6, name=f"{tag}_ln1")(x)
    h = layers.MultiHeadAttention(heads, width // heads, name=f"{tag}_attention")(h, h, use_causal_mask=causal)
    x = x + h
    h = layers.LayerNormalization(epsilon=1e-6, name=f"{tag}_ln2")(x)
    h = layers.Dense(ffn, activation="gelu", name=f"{tag}_ffn_in")(h)
    return x + layers.Dense(width, name=f"{tag}_ffn_out")(h)


def _positions(x):
    """Position ids 0..n-1 of x's second axis, derived from x (cumsum of ones) so that the
    .keras file needs no custom objects."""
    from keras import ops

    return ops.cast(ops.cumsum(ops.ones_like(x), axis=1) - 1, "int32")


def _gpt_decoder():
    """A GPT-style decoder (causal self-attention) returning the next token's distribution from
    the last position: the generation step of a small language model."""
    import keras
    from keras import layers

    ids = keras.Input((GPT_SEQ,), dtype="int32", name="input_ids")
    x = layers.Embedding(GPT_VOCAB, GPT_HIDDEN, name="token_embeddings")(ids)
    x = x + layers.Embedding(GPT_SEQ, GPT_HIDDEN, name="position_embeddings")(_positions(ids))
    for i in range(GPT_LAYERS):
        x = _transformer_layer(x, GPT_HEADS, GPT_HIDDEN, GPT_FFN, f"layer_{i}", causal=True)
    x = layers.LayerNormalization(epsilon=1e-6, name="final_ln")(x)
    out = layers.Dense(GPT_VOCAB, activation="softmax", name="next_token_probabilities")(x[:, -1, :])
    return keras.Model(ids, out, name="gpt_decoder")


def _vit_tiny():
    """A ViT-style classifier: 8x8 patches embedded by a strided conv, learned position
    embeddings, pre-LN transformer layers, mean pooling (no class token: no custom layer)."""
    import keras
    from keras import layers, ops

    images = keras.Input((VIT_SIZE, VIT_SIZE, 3), name="images")
    n = (VIT_SIZE // VIT_PATCH) ** 2
    x = layers.Conv2D(VIT_DIM, VIT_PATCH, strides=VIT_PATCH, name="patch_embedding")(images)
    x = layers.Reshape((n, VIT_DIM), name="patches")(x)
    x = x + layers.Embedding(n, VIT_DIM, name="position_embeddings")(_positions(ops.sum(x, axis=-1)))
    for i in range(VIT_LAYERS):
        x = _transformer_layer(x, VIT_HEADS, VIT_DIM, VIT_MLP, f"layer_{i}", causal=False)
    x = layers.LayerNormalization(epsilon=1e-6, name="final_ln")(x)
    x = layers.GlobalAveragePooling1D(name="pool")(x)
    out = layers.Dense(VIT_CLASSES, activation="softmax", name="probabilities")(x)
    return keras.Model(images, out, name="vit_tiny")


def build(name: str):
    """The Keras model NAME, built with fixed seeds and random weights."""
    import keras

    keras.utils.set_random_seed(SEED)
    if name in ENGINE_MODELS:
        return globals()[f"_{name}"]()
    if name in ("mobilenet_v2", "nasnet_mobile", "efficientnet_b0", "xception", "convnext_tiny"):
        return _vision(name)
    return {
        "dlrm": _dlrm,
        "bert_encoder": _bert_encoder,
        "lstm_classifier": _lstm_classifier,
        "youtube_dnn": _youtube_dnn,
        "dcn_v2": _dcn_v2,
    }[name]()


# ------------------------------------------------------------------------------ export


def _serving_function(name: str, model, batch: int | None = None):
    """tf.function over named TensorSpecs (batch None): the signature's input keys are the
    spec names; outputs are a dict (single-output models: OUTPUT_KEYS, else 'probabilities').
    BATCH fixes the batch dimension (for counting MACs with static shapes only)."""
    import tensorflow as tf

    specs = [
        tf.TensorSpec((batch,) + tuple(shape), tf.as_dtype(dtype), name=inp) for inp, dtype, shape, _ in INPUTS[name]
    ]
    names = [s.name for s in specs]
    single = len(specs) == 1 and not isinstance(model.input, dict)
    out_key = OUTPUT_KEYS.get(name, "probabilities")

    @tf.function(input_signature=specs)
    def serve(*args):
        y = model(args[0] if single else dict(zip(names, args)), training=False)
        return y if isinstance(y, dict) else {out_key: y}

    return serve


def save(name: str, model, path: Path) -> None:
    import tensorflow as tf

    class Served(tf.Module):
        def __init__(self, m):
            super().__init__()
            self.model = m

    module = Served(model)
    module.serve = _serving_function(name, model)
    concrete = module.serve.get_concrete_function()
    tf.saved_model.save(module, str(path), signatures={"serving_default": concrete})


def signature_of(path: Path, key: str = "serving_default"):
    """(inputs, outputs) of a SavedModel signature read from saved_model.pb, as
    saved_model_cli shows them: [(name, dtype, dims)] with -1 for unknown dimensions."""
    from tensorflow.core.protobuf import saved_model_pb2
    from tensorflow.python.framework import dtypes

    sm = saved_model_pb2.SavedModel()
    sm.ParseFromString((Path(path) / "saved_model.pb").read_bytes())
    sig = sm.meta_graphs[0].signature_def[key]

    def rows(m):
        return [
            (k, dtypes.as_dtype(v.dtype).name, tuple(d.size for d in v.tensor_shape.dim)) for k, v in sorted(m.items())
        ]

    return rows(sig.inputs), rows(sig.outputs)


# ------------------------------------------------------------------------------ MACs


def _dims(shape):
    """Static dims with an unknown (batch) dimension read as 1; None if the rank is unknown."""
    if shape.rank is None:
        return None
    return [1 if d is None else d for d in shape.as_list()]


def _prod(xs):
    p = 1
    for x in xs:
        p *= x
    return p


def _einsum_macs(eq: str, ins) -> int | None:
    lhs, _, _ = eq.replace(" ", "").partition("->")
    terms = lhs.split(",")
    if "." in lhs or len(terms) != len(ins):
        return None
    size = {}
    for term, dims in zip(terms, ins):
        if dims is None or len(term) != len(dims):
            return None
        size.update(zip(term, dims))
    return _prod(size.values())


def _func_graph(graph, fname: str):
    fn = graph._get_function(fname)  # noqa: SLF001 (private, diagnostic only)
    return getattr(fn, "graph", None) if fn is not None else None


def _static_int(t):
    """A scalar's static value; also through Max/Min of a constant (Keras' RNN loop bound)."""
    import numpy as np
    import tensorflow as tf

    v = tf.get_static_value(t)
    if v is None and t.op.type in ("Max", "Min"):
        x = tf.get_static_value(t.op.inputs[0])
        if x is not None:
            v = np.max(x) if t.op.type == "Max" else np.min(x)
    return None if v is None else int(v)


def graph_macs(graph) -> int | None:
    """Multiply-accumulates of one example through a tf.function graph traced at batch 1:
    convolutions, depthwise convolutions, MatMul/BatchMatMul/Einsum; While bodies times their
    static trip count; PartitionedCall bodies once. None if some heavy op's size cannot be read.
    (Keras' RNN also traces one cell step outside its loop, only for shapes: counted, +1/64.)"""
    total = 0
    for op in graph.get_operations():
        t = op.type
        try:
            if t in ("Conv2D", "Conv3D"):
                out, f = _dims(op.outputs[0].shape), _dims(op.inputs[1].shape)
                total += _prod(out) * _prod(f[:-1])
            elif t == "DepthwiseConv2dNative":
                out, f = _dims(op.outputs[0].shape), _dims(op.inputs[1].shape)
                total += _prod(out) * f[0] * f[1]
            elif t == "MatMul":
                a, out = _dims(op.inputs[0].shape), _dims(op.outputs[0].shape)
                k = a[0] if op.get_attr("transpose_a") else a[1]
                total += _prod(out) * k
            elif t.startswith("BatchMatMul"):
                a, out = _dims(op.inputs[0].shape), _dims(op.outputs[0].shape)
                k = a[-2] if op.get_attr("adj_x") else a[-1]
                total += _prod(out) * k
            elif t == "Einsum":
                m = _einsum_macs(op.get_attr("equation").decode(), [_dims(i.shape) for i in op.inputs])
                if m is None:
                    return None
                total += m
            elif t in ("While", "StatelessWhile"):
                body = _func_graph(graph, op.get_attr("body").name)
                trips = _static_int(op.inputs[1])
                sub = graph_macs(body) if body is not None else None
                if sub is None or trips is None or trips < 0:
                    if sub:  # heavy work inside a loop of unknown length
                        return None
                    continue
                total += sub * int(trips)
            elif t in ("PartitionedCall", "StatefulPartitionedCall"):
                body = _func_graph(graph, op.get_attr("f").name)
                sub = graph_macs(body) if body is not None else None
                if sub is None:
                    return None
                total += sub
        except (TypeError, ValueError, IndexError):
            return None
    return total


# ------------------------------------------------------------------------------ commands


def _fmt_inputs(rows) -> str:
    return ", ".join(f"{n}:{d}[{','.join('None' if s < 0 else str(s) for s in dims)}]" for n, d, dims in rows)


def _fmt_inputs_compact(rows) -> str:
    """Collapse runs of same-typed cat_NN inputs (dlrm) to 'cat_00..cat_25 (26)'."""
    cats = [r for r in rows if r[0].startswith("cat_")]
    rest = [r for r in rows if not r[0].startswith("cat_")]
    s = _fmt_inputs(rest)
    if cats:
        n, d, dims = cats[0]
        shape = ",".join("None" if x < 0 else str(x) for x in dims)
        s += f", {cats[0][0]}..{cats[-1][0]} ({len(cats)}):{d}[{shape}]"
    return s


def cmd_build(outdir: Path, names, keras_too: bool) -> int:
    import tensorflow as tf  # noqa: F401  (import time excluded from build times)

    outdir.mkdir(parents=True, exist_ok=True)
    rows, bad = [], []
    for name in names:
        t0 = time.perf_counter()
        model = build(name)
        t_build = time.perf_counter() - t0
        path = outdir / name
        save(name, model, path)
        t_save = time.perf_counter() - t0 - t_build
        if keras_too:
            model.save(str(outdir / f"{name}.keras"))
        t1 = time.perf_counter()
        macs = graph_macs(_serving_function(name, model, batch=1).get_concrete_function().graph)
        t_macs = time.perf_counter() - t1
        ins, outs = signature_of(path)
        problems = [
            f"{n}: batch dim {dims[0] if dims else 'scalar'}" for n, _, dims in ins if not dims or dims[0] != -1
        ]
        expected = sorted(i[0] for i in INPUTS[name])
        if [n for n, _, _ in ins] != expected:
            problems.append(f"input names {[n for n, _, _ in ins]} != {expected}")
        if problems:
            bad.append((name, problems))
        rows.append(
            (
                name,
                model.count_params(),
                _fmt_inputs_compact(ins),
                ", ".join(n for n, _, _ in outs),
                macs,
                t_build,
                t_save,
            )
        )
        print(
            f"saved {path}{' and ' + name + '.keras' if keras_too else ''} "
            f"(build {t_build:.1f} s, save {t_save:.1f} s, MAC count {t_macs:.1f} s)",
            flush=True,
        )
    print()
    print(f"{'name':16} {'params':>11} {'MACs/example':>13} {'build s':>7} {'save s':>6}  inputs -> outputs")
    for name, params, ins, outs, macs, tb, ts in rows:
        m = "?" if macs is None else f"{macs / 1e6:,.0f} M" if macs >= 1e7 else f"{macs / 1e6:.2f} M"
        print(f"{name:16} {params:>11,} {m:>13} {tb:>7.1f} {ts:>6.1f}  {ins} -> {outs}")
    for name, problems in bad:
        print(f"SIGNATURE PROBLEM {name}: {'; '.join(problems)}", file=sys.stderr)
    return 1 if bad else 0


def cmd_check(outdir: Path, names, calls: int, keras_too: bool) -> int:
    """Load each SavedModel's serving_default (and NAME.keras with --keras), run it at batch 1
    and the serving batch, print the median ms per request (default threads)."""
    import statistics
    import tensorflow as tf

    failed = 0
    print(f"{'name':16} {'load s':>6} {'b1 ms':>8} {'serving':>7} {'ms':>8}  outputs")
    for name in names:
        t0 = time.perf_counter()
        fn = tf.saved_model.load(str(outdir / name)).signatures["serving_default"]
        t_load = time.perf_counter() - t0
        res = []
        for batch in (SERVING[name]["batch1"], SERVING[name]["serving"]):
            feed = {k: tf.constant(v) for k, v in make_inputs(name, batch).items()}
            for _ in range(2):
                out = fn(**feed)
            times = []
            for _ in range(calls):
                t = time.perf_counter()
                out = fn(**feed)
                times.append((time.perf_counter() - t) * 1e3)
            shapes = {k: tuple(v.shape) for k, v in out.items()}
            if any(s[0] != batch for s in shapes.values()):
                print(f"  {name}: output batch mismatch at batch {batch}: {shapes}")
                failed += 1
            res.append((statistics.median(times), shapes))
        print(
            f"{name:16} {t_load:>6.1f} {res[0][0]:>8.1f} {SERVING[name]['serving']:>7} {res[1][0]:>8.1f}  {res[1][1]}",
            flush=True,
        )
        if keras_too:
            import keras

            km = keras.models.load_model(str(outdir / f"{name}.keras"))
            feed = make_inputs(name, SERVING[name]["batch1"])
            x = feed[INPUTS[name][0][0]] if len(INPUTS[name]) == 1 else feed
            y = km(x, training=False)
            y = y if isinstance(y, dict) else {"output": y}
            print(f"  {name}.keras loads and runs: { {k: tuple(v.shape) for k, v in y.items()} }")
    return 1 if failed else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("outdir", type=Path, help="directory for OUTDIR/NAME/ SavedModels (outside the repo)")
    ap.add_argument("--only", default="", help=f"comma-separated subset of {','.join(MODELS)}")
    ap.add_argument("--keras", action="store_true", help="also save (with --check: load) OUTDIR/NAME.keras")
    ap.add_argument(
        "--check",
        action="store_true",
        help="do not build: load the saved models and time batch 1 and the serving batch",
    )
    ap.add_argument("--calls", type=int, default=5, help="timed calls per batch with --check")
    args = ap.parse_args(argv)
    names = [n for n in args.only.split(",") if n] or list(MODELS)
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        ap.error(f"unknown model(s) {unknown}; choose from {', '.join(MODELS)}")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if args.check:
        return cmd_check(args.outdir, names, args.calls, args.keras)
    return cmd_build(args.outdir, names, args.keras)


if __name__ == "__main__":
    sys.exit(main())

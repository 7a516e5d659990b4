"""Fathom ``memnet``: an end-to-end memory network (Sukhbaatar et al. 2015) on bAbI-shaped data.

Like Fathom's ``fathom/memnet/memnet.py``: word embeddings A (memory, used as both input and
output memory) and B (query) with position encoding, a temporal embedding TA added to each
memory, ``hops`` rounds of softmax attention u_{k+1} = H u_k + sum_i p_i m_i, and a final
projection W onto the vocabulary; loss = softmax cross-entropy on the answer word.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from tf_autopar_workloads.base import Workload
from tf_autopar_workloads.fathom._keras import sparse_xent

SIZES = {
    "paper": {"vocab": 20, "sentence": 7, "memory": 50, "embed": 20, "hops": 3},
    "tiny": {"vocab": 12, "sentence": 4, "memory": 8, "embed": 8, "hops": 3},
}


def position_encoding(sentence: int, embed: int) -> np.ndarray:
    """Section 4.1 of the paper: l_kj = (1 - j/J) - (k/d)(1 - 2j/J), shape [sentence, embed]."""
    j = np.arange(1, sentence + 1, dtype=np.float32)[:, None]
    k = np.arange(1, embed + 1, dtype=np.float32)[None, :]
    return (1.0 - j / sentence) - (k / embed) * (1.0 - 2.0 * j / sentence)


def build_model(hp: Mapping[str, Any]) -> Any:
    import keras
    from keras import layers, ops

    class MemN2N(layers.Layer):
        def __init__(self, hp: Mapping[str, Any], **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.hp = dict(hp)
            init = keras.initializers.RandomNormal(stddev=0.1)
            v, d, m = hp["vocab"], hp["embed"], hp["memory"]
            self.A = self.add_weight(shape=(v, d), initializer=init, name="A")
            self.B = self.add_weight(shape=(v, d), initializer=init, name="B")
            self.TA = self.add_weight(shape=(m, d), initializer=init, name="TA")
            self.H = self.add_weight(shape=(d, d), initializer=init, name="H")
            self.W = self.add_weight(shape=(d, v), initializer=init, name="W")
            self.encoding = position_encoding(hp["sentence"], d)

        def call(self, stories: Any, queries: Any) -> Any:
            enc = ops.convert_to_tensor(self.encoding)
            u = ops.sum(ops.take(self.B, queries, axis=0) * enc, axis=1)  # [b, d]
            mem = ops.sum(ops.take(self.A, stories, axis=0) * enc, axis=2) + self.TA  # [b, m, d]
            for _ in range(self.hp["hops"]):
                probs = ops.softmax(ops.einsum("bmd,bd->bm", mem, u), axis=-1)
                o = ops.einsum("bm,bmd->bd", probs, mem)
                u = ops.matmul(u, self.H) + o
            return ops.matmul(u, self.W)

    stories = keras.Input((hp["memory"], hp["sentence"]), dtype="int32", name="stories")
    queries = keras.Input((hp["sentence"],), dtype="int32", name="queries")
    logits = MemN2N(hp, name="memn2n")(stories, queries)
    return keras.Model([stories, queries], logits, name="memnet")


def make_data(hp: Mapping[str, Any], batch: int, rng: np.random.Generator) -> tuple[Any, Any]:
    """bAbI-like: a story of random sentences; the query names one sentence's first word and the
    answer is that sentence's last word (word 0 is the nil/padding word)."""
    v, s, m = hp["vocab"], hp["sentence"], hp["memory"]
    stories = rng.integers(1, v, size=(batch, m, s)).astype(np.int32)
    slot = rng.integers(0, m, size=batch)
    queries = np.zeros((batch, s), dtype=np.int32)
    queries[:, 0] = stories[np.arange(batch), slot, 0]
    answers = stories[np.arange(batch), slot, s - 1].astype(np.int32)
    return (stories, queries), answers


WORKLOAD = Workload(
    name="memnet",
    family="fathom",
    task="qa",
    description="End-to-end memory network: embed 20, 3 hops, memory 50 sentences (bAbI shape)",
    default_batch=32,
    sizes=SIZES,
    build_model=build_model,
    make_data=make_data,
    loss=sparse_xent,
    departures=(
        "Synthetic bAbI-shaped stories (answer = last word of the sentence whose first word the query "
        "names) instead of bAbI task 1; vocabulary 20 and sentence length 7 chosen to match task 1's "
        "scale (Fathom derives them from the data and caps memory at min(50, longest story)). Mean instead "
        "of summed cross-entropy; integer answers instead of one-hot. No gradient clipping (40), gradient "
        "noise, or nil-slot zeroing of Fathom's training step; the runner's Adam is used."
    ),
    references=("Sukhbaatar et al., End-To-End Memory Networks, 2015", "rdadolf/fathom: fathom/memnet/memnet.py"),
    learning_rate=1e-2,
)

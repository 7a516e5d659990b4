"""Fathom ``speech``: Deep Speech (Hannun et al. 2014) as in Fathom's ``fathom/speech/speech.py``.

Three time-distributed dense layers (26 MFCC-like features -> 1024 -> 1024 -> 1024, clipped
ReLU at 20), a bidirectional simple RNN (1024 units each way, clipped ReLU), and a dense
output layer over 61 TIMIT phonemes + the CTC blank; CTC loss on phoneme label sequences.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from tf_autopar_workloads.base import Workload

SIZES = {
    "paper": {"features": 26, "frames": 1566, "hidden": 1024, "labels": 62, "max_labels": 75, "segment": 20},
    "tiny": {"features": 8, "frames": 40, "hidden": 16, "labels": 10, "max_labels": 8, "segment": 5},
}


def build_model(hp: Mapping[str, Any]) -> Any:
    import keras
    from keras import layers, ops

    def clipped_relu(x: Any) -> Any:
        return ops.clip(x, 0.0, 20.0)  # = min(relu(x), 20); a Relu inside the RNN loop trips a grappler error log

    x = keras.Input((hp["frames"], hp["features"]), name="spectrogram")
    h = x
    for i in range(1, 4):
        h = layers.Dense(hp["hidden"], activation=clipped_relu, name=f"dense{i}")(h)
    # Two explicit directions (keras.layers.Bidirectional clones its layer through a config,
    # which cannot carry the local clipped_relu); outputs summed per time step.
    fw = layers.SimpleRNN(hp["hidden"], activation=clipped_relu, return_sequences=True, name="rnn_fw")(h)
    bw = layers.SimpleRNN(
        hp["hidden"], activation=clipped_relu, return_sequences=True, go_backwards=True, name="rnn_bw"
    )(h)
    bw = layers.Lambda(lambda t: ops.flip(t, axis=1), name="rnn_bw_reverse")(bw)
    h = layers.Add(name="birnn_sum")([fw, bw])
    logits = layers.Dense(hp["labels"], name="logits")(h)  # last class = CTC blank
    return keras.Model(x, logits, name="speech")


def make_data(hp: Mapping[str, Any], batch: int, rng: np.random.Generator) -> tuple[Any, Any]:
    """Utterances as phoneme segments: each segment's frames = that phoneme's feature template + noise.

    Targets: (labels int32 [batch, max_labels] padded with 0, label lengths int32 [batch]).
    """
    f, t, seg, n_ph = hp["features"], hp["frames"], hp["segment"], hp["labels"] - 1
    templates = np.random.default_rng(6126).standard_normal((n_ph, f)).astype(np.float32)
    n_seg = min(t // seg, hp["max_labels"])
    phones = np.zeros((batch, n_seg), dtype=np.int32)
    phones[:, 0] = rng.integers(0, n_ph, size=batch)
    for j in range(1, n_seg):  # consecutive phonemes differ, so CTC needs no blank between them
        step = rng.integers(1, n_ph, size=batch)
        phones[:, j] = (phones[:, j - 1] + step) % n_ph
    frame_phone = np.repeat(phones, seg, axis=1)
    pad = t - frame_phone.shape[1]
    frame_phone = np.concatenate([frame_phone, np.repeat(phones[:, -1:], pad, axis=1)], axis=1)
    feats = templates[frame_phone] + 0.3 * rng.standard_normal((batch, t, f)).astype(np.float32)
    labels = np.zeros((batch, hp["max_labels"]), dtype=np.int32)
    labels[:, :n_seg] = phones
    lengths = np.full((batch,), n_seg, dtype=np.int32)
    return feats.astype(np.float32), (labels, lengths)


def loss(y_true: Any, y_pred: Any) -> Any:
    import tensorflow as tf

    labels, lengths = y_true
    batch, frames = tf.shape(y_pred)[0], tf.shape(y_pred)[1]
    per_example = tf.nn.ctc_loss(
        labels=labels,
        logits=y_pred,
        label_length=lengths,
        logit_length=tf.fill([batch], frames),
        logits_time_major=False,
        blank_index=-1,
    )
    return tf.reduce_mean(per_example)


WORKLOAD = Workload(
    name="speech",
    family="fathom",
    task="speech",
    description="Deep Speech: 3 dense 1024 + bidirectional RNN 1024 + dense, 1566 frames x 26, CTC",
    default_batch=32,
    sizes=SIZES,
    build_model=build_model,
    make_data=make_data,
    loss=loss,
    departures=(
        "Synthetic utterances (phoneme feature templates + noise, 20 frames per phoneme, 75 labels at most) "
        "instead of TIMIT; every utterance uses all 1566 frames (Fathom pads to 1566 and passes true lengths). "
        "Fathom's bidirectional layer returned only the last time step's output to the final layer (a bug "
        "for CTC); here every time step goes through the output layer and the two directions are summed, as "
        "in Deep Speech. Keras default initialisers (Fathom: zeros); Adam instead of SGD 0.01. Heavy at paper "
        "size: 1566 sequential RNN steps per direction; on a busy 2-core host one training step at batch 32 "
        "took about 2 minutes and 5.8 GB peak RSS, inference at batch 1 about 1.3 s."
    ),
    references=("Hannun et al., Deep Speech, 2014", "rdadolf/fathom: fathom/speech/speech.py"),
)

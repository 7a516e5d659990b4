"""Fathom ``deepq``: the DQN network of Mnih et al. 2015 trained with a Q-learning-style regression.

Input 84x84x4 (four stacked frames), conv 8x8/4 (32) -> conv 4x4/2 (64) -> conv 3x3/1 (64)
-> fc 512 -> one Q-value per action. The training step regresses Q(s, a) of the taken action
onto a target return with the Huber loss, as DQN does.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from tf_autopar_workloads.base import Workload

SIZES = {
    "paper": {"frame": 84, "history": 4, "convs": ((32, 8, 4), (64, 4, 2), (64, 3, 1)), "fc": 512, "actions": 18},
    "tiny": {"frame": 36, "history": 4, "convs": ((8, 8, 4), (16, 4, 2), (16, 3, 1)), "fc": 32, "actions": 6},
}


def build_model(hp: Mapping[str, Any]) -> Any:
    import keras
    from keras import layers

    x = keras.Input((hp["frame"], hp["frame"], hp["history"]), name="frames")
    net = x
    for i, (filters, kernel, stride) in enumerate(hp["convs"], start=1):
        net = layers.Conv2D(filters, kernel, strides=stride, activation="relu", name=f"conv{i}")(net)
    net = layers.Flatten(name="flatten")(net)
    net = layers.Dense(hp["fc"], activation="relu", name="fc")(net)
    q = layers.Dense(hp["actions"], name="q_values")(net)
    return keras.Model(x, q, name="deepq")


def make_data(hp: Mapping[str, Any], batch: int, rng: np.random.Generator) -> tuple[Any, Any]:
    """Frames with a bright 'object' whose position sets the return; targets (action, return).

    The return of the taken action is a fixed function of where the object is (no emulator),
    so Q(s, a) can learn it.
    """
    f, h = hp["frame"], hp["history"]
    frames = 0.1 * rng.random((batch, f, f, h), dtype=np.float32)
    rows = rng.integers(0, f - 8, size=batch)
    cols = rng.integers(0, f - 8, size=batch)
    for i in range(batch):
        for t in range(h):  # object drifts right across the frame stack
            c = min(cols[i] + t, f - 8)
            frames[i, rows[i] : rows[i] + 8, c : c + 8, t] = 1.0
    actions = rng.integers(0, hp["actions"], size=batch).astype(np.int32)
    returns = (rows / f - cols / f + 0.1 * (actions % 3)).astype(np.float32)
    return frames, (actions, returns)


def loss(y_true: Any, y_pred: Any) -> Any:
    from keras import ops

    actions, returns = y_true
    q_taken = ops.take_along_axis(y_pred, ops.expand_dims(ops.cast(actions, "int32"), -1), axis=1)[:, 0]
    err = ops.abs(q_taken - returns)
    huber = ops.where(err < 1.0, 0.5 * ops.square(err), err - 0.5)
    return ops.mean(huber)


WORKLOAD = Workload(
    name="deepq",
    family="fathom",
    task="rl",
    description="DQN: 84x84x4 frames, convs 8x8/4, 4x4/2, 3x3/1, fc 512, Q-value per action",
    default_batch=32,
    sizes=SIZES,
    build_model=build_model,
    make_data=make_data,
    loss=loss,
    departures=(
        "No Atari emulator or replay memory: synthetic frame stacks (a moving bright square on noise) "
        "and a target return that is a fixed function of the square's position and the action, in place "
        "of r + gamma * max Q_target(s'). No separate target network. 18 actions (the full Atari set). "
        "Adam instead of RMSProp."
    ),
    references=(
        "Mnih et al., Human-level control through deep RL, Nature 2015",
        "rdadolf/fathom: fathom/deepq/deepq.py",
    ),
)

"""A real tf.distribute MultiWorkerMirroredStrategy run: two workers on this host over loopback.

Each worker calls tf_autopar.enable(mode="training") before TensorFlow starts: enable() finds
the rank in TF_CONFIG, claims that share of the cores, binds to it and plans the pools for it;
then the worker trains a tiny two-layer model for 12 synchronous steps
(gradients all-reduced over gRPC on 127.0.0.1). Checks: both finish, the loss goes down, both
see the same losses, the two workers' CPU masks are disjoint, TF started with the slice's plan.

Not Keras ``model.fit``: with Keras 3.15 and two or more workers, fit() fails inside Keras
(``_maybe_symbolic_build`` passes the nested first batch to ``strategy.reduce``, which the
collective all-reduce rejects, and its metric reduction then fails on a scalar), so the step
is a tf.function run with ``strategy.run``; what is under test (placement) is the same.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.tf

ROOT = Path(__file__).resolve().parents[1]

WORKER = textwrap.dedent(r"""
    import json, os, sys
    import tf_autopar

    st = tf_autopar.enable(mode="training")        # rank and count from TF_CONFIG; before TF starts
    proc = st.process

    import numpy as np
    import tensorflow as tf

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    rng = np.random.default_rng(0)
    x = rng.normal(size=(256, 8)).astype("float32")
    y = (x @ rng.normal(size=(8, 1))).astype("float32")
    with strategy.scope():
        w1 = tf.Variable(rng.normal(size=(8, 16)).astype("float32") * 0.3)
        b1 = tf.Variable(tf.zeros(16))
        w2 = tf.Variable(rng.normal(size=(16, 1)).astype("float32") * 0.3)
        variables = [w1, b1, w2]
    it = iter(strategy.experimental_distribute_dataset(tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(32)))

    @tf.function
    def step(batch):
        def replica(xb, yb):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean((tf.nn.relu(xb @ w1 + b1) @ w2 - yb) ** 2)
            grads = tf.distribute.get_replica_context().all_reduce("MEAN", tape.gradient(loss, variables))
            for v, g in zip(variables, grads):
                v.assign_sub(0.05 * g)
            return loss
        return strategy.reduce("MEAN", strategy.run(replica, args=batch), axis=None)

    losses = [float(step(next(it))) for _ in range(12)]
    hist = {"loss": [sum(losses[i:i + 4]) / 4 for i in (0, 4, 8)]}
    print(json.dumps({
        "share": proc.share, "bound": list(proc.bound_cpus), "affinity": sorted(os.sched_getaffinity(0)),
        "loss": hist["loss"], "inter": proc.planned_inter, "intra": proc.planned_intra,
        "env_inter": os.environ.get("TF_NUM_INTEROP_THREADS"), "env_intra": os.environ.get("TF_NUM_INTRAOP_THREADS"),
    }), flush=True)
""")


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def test_two_workers_train_on_disjoint_cores(tmp_path):
    ports = _free_ports(2)
    cluster = {"worker": [f"127.0.0.1:{p}" for p in ports]}
    procs = []
    try:
        for i in range(2):
            env = dict(os.environ)
            env.update(
                PYTHONPATH=str(ROOT) + os.pathsep + env.get("PYTHONPATH", ""),
                TF_CONFIG=json.dumps({"cluster": cluster, "task": {"type": "worker", "index": i}}),
                TF_CPP_MIN_LOG_LEVEL="2",
                CUDA_VISIBLE_DEVICES="",
                TF_AUTOPAR_CACHE_DIR=str(tmp_path / "cache"),
                TF_AUTOPAR_LEASE_DIR=str(tmp_path / "lease"),
            )
            for var in (
                "TF_NUM_INTEROP_THREADS",
                "TF_NUM_INTRAOP_THREADS",
                "TF_AUTOPAR_INSTANCE",
                "TF_AUTOPAR_INSTANCES",
                "LOCAL_RANK",
                "LOCAL_WORLD_SIZE",
                "WEB_CONCURRENCY",
            ):
                env.pop(var, None)
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-c", WORKER],
                    env=env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                    cwd=tmp_path,
                )
            )
        outs = []
        for p in procs:
            out, err = p.communicate(timeout=240)
            assert p.returncode == 0, f"worker failed ({p.returncode}):\n{err[-3000:]}"
            outs.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(30)

    host = sorted(os.sched_getaffinity(0))
    assert [o["share"]["index"] for o in outs] == [0, 1]
    assert all(o["share"]["source"] == "env:TF_CONFIG" and o["share"]["count"] == 2 for o in outs)
    for o in outs:
        losses = o["loss"]
        assert len(losses) == 3 and losses[-1] < losses[0], losses
        if len(host) >= 2:
            assert o["affinity"] == o["share"]["cpus"] == o["bound"]  # really bound
        assert (o["env_inter"], o["env_intra"]) == (
            str(o["inter"]),
            str(o["intra"]),
        )  # TF started with the slice's plan
        assert o["intra"] <= len(o["affinity"])
    a, b = (set(o["affinity"]) for o in outs)
    if len(host) >= 2:
        assert a and b and a.isdisjoint(b), (a, b)
        assert a | b <= set(host)
    # same model, same data, synchronous all-reduce: both workers saw the same losses
    assert outs[0]["loss"] == pytest.approx(outs[1]["loss"], rel=1e-5)

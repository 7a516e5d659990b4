"""Fathom's eight workloads at tiny size: both modes, both run paths, learnable data."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.tf

FATHOM = ("seq2seq", "memnet", "speech", "autoenc", "residual", "vgg", "alexnet", "deepq")


@pytest.fixture(scope="module", params=FATHOM)
def built(request):
    from tf_autopar_workloads import runner

    return runner.build(request.param, size="tiny", seed=0)


def _flat(x):
    import tensorflow as tf

    return [np.asarray(a) for a in tf.nest.flatten(x)]


def test_registered_with_published_facts(built):
    w = built.workload
    assert w.family == "fathom"
    assert built.batch == w.default_batch
    assert set(w.sizes) == {"tiny", "paper"}
    assert w.departures and w.references


def test_infer_session_matches_function(built):
    """Same weights, frozen graph in a TF1 Session vs the tf.function: same outputs."""
    out_fn = _flat(built.infer())
    with built.session("infer") as sess:
        out_sess = _flat(sess.run())
    assert len(out_fn) == len(out_sess) >= 1
    for a, b in zip(out_fn, out_sess):
        assert a.shape == b.shape and a.shape[0] == built.batch
        assert np.all(np.isfinite(a))
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)


def test_train_lowers_loss_and_session_agrees(built):
    """A few Adam steps on the batch lower the loss; the graph-mode step computes the same losses."""
    from tf_autopar_workloads import runner

    # Session first, from the initial weights: the session copies the eager model's weights and
    # trains its own copy, so the module's model serves while it never trained (no Adam slots
    # yet); otherwise a fresh build of the same seed (a second build costs seconds).
    twin = built if built._slots is None else runner.build(built.workload, size="tiny", seed=0)
    with twin.session("train") as sess:
        session_losses = [sess.run() for _ in range(2)]
    losses = [built.train_step() for _ in range(4)]
    assert all(np.isfinite(losses))
    assert losses[-1] < losses[0], losses
    np.testing.assert_allclose(session_losses, losses[:2], rtol=1e-4)


def test_fresh_batch_has_same_structure(built):
    """make_data is deterministic in the seed and learnable across batches (same classes/templates)."""
    w, hp = built.workload, built.hparams
    a = w.make_data(hp, 4, np.random.default_rng(1))
    b = w.make_data(hp, 4, np.random.default_rng(1))
    for x, y in zip(_flat(a), _flat(b)):
        np.testing.assert_array_equal(x, y)
    c = w.make_data(hp, 4, np.random.default_rng(2))
    assert any(not np.array_equal(x, y) for x, y in zip(_flat(a), _flat(c)))


def test_graph_defs_for_analysis(built):
    infer_gd = built.graph_def("infer")
    train_gd = built.graph_def("train")
    assert len(train_gd.node) > len(infer_gd.node)
    ops = {n.op for n in infer_gd.node} | {n.op for f in infer_gd.library.function for n in f.node_def}
    assert ops & {"MatMul", "BatchMatMulV2", "Conv2D", "Einsum"}, sorted(ops)

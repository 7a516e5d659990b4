"""The parallelism paper's seven workloads at tiny size: both modes, both run paths,
learnable data, and the graph structure (parallel branches) the planner measures."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

pytestmark = pytest.mark.tf

PAPER = ("inception_v3", "resnet50", "densenet", "squeezenet", "ncf", "transformer", "wide_deep")
VISION = ("inception_v3", "resnet50", "densenet", "squeezenet")
# Models whose graphs use hand-written ops (custom layer, slicing, integer hashing) in the
# graph-mode rebuild, plus two cheap plain ones; the conv nets' session training step is
# the same generic code path and costs 10-25 s each to build, so it is left to the runner tests.
TRAIN_SESSION = ("squeezenet", "ncf", "transformer", "wide_deep")


@pytest.fixture(scope="module")
def builds():
    """Each tiny model built once for the whole module (lazily, on first use)."""
    from tf_autopar_workloads import runner

    cache: dict = {}

    def get(name):
        if name not in cache:
            cache[name] = runner.build(name, size="tiny", seed=0)
        return cache[name]

    return get


def _flat(x):
    import tensorflow as tf

    return [np.asarray(a) for a in tf.nest.flatten(x)]


def _ops(graph_def) -> dict[str, int]:
    """Op-type histogram over the graph and its function library."""
    counts: dict[str, int] = {}
    nodes = list(graph_def.node)
    for f in graph_def.library.function:
        nodes.extend(f.node_def)
    for n in nodes:
        counts[n.op] = counts.get(n.op, 0) + 1
    return counts


def test_modules_import_without_tensorflow():
    code = (
        "import sys\n"
        + "".join(f"import tf_autopar_workloads.paper.{n}\n" for n in PAPER)
        + "bad = [m for m in ('tensorflow', 'keras') if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


@pytest.mark.parametrize("name", PAPER)
def test_registered_with_published_facts(name):
    import tf_autopar_workloads as workloads

    w = workloads.get(name)
    assert w.name == name and w.family == "paper"
    assert set(w.sizes) == {"tiny", "paper"}
    assert w.default_batch >= 1 and w.departures and w.references
    assert set(w.sizes["tiny"]) - {"lr"} == set(w.sizes["paper"]) - {"lr"}  # same structure, other numbers


def test_paper_sizes_are_the_published_shapes():
    import tf_autopar_workloads as workloads

    def hp(name):
        return workloads.get(name).sizes["paper"]

    assert hp("inception_v3")["image_size"] == 299
    assert (hp("inception_v3")["blocks_a"], hp("inception_v3")["blocks_b"], hp("inception_v3")["blocks_c"]) == (3, 4, 2)
    assert hp("resnet50")["blocks"] == (3, 4, 6, 3) and hp("resnet50")["image_size"] == 224
    assert hp("densenet")["blocks"] == (6, 12, 24, 16) and hp("densenet")["growth"] == 32
    assert hp("squeezenet")["image_size"] == 224
    assert (hp("ncf")["num_users"], hp("ncf")["num_items"], hp("ncf")["mf_dim"]) == (138_493, 26_744, 64)
    t = hp("transformer")
    assert (t["encoder_layers"], t["decoder_layers"], t["d_model"], t["heads"], t["ff"]) == (6, 6, 512, 8, 2048)
    wd = hp("wide_deep")
    assert (wd["num_dense"], wd["num_categorical"], tuple(wd["hidden"])) == (13, 26, (1024, 512, 256))


@pytest.mark.parametrize("name", PAPER)
def test_paper_size_data_has_published_shapes_and_is_seeded(name):
    """make_data at paper size (no model needed): shapes, dtypes, id ranges, determinism."""
    import tf_autopar_workloads as workloads

    w = workloads.get(name)
    hp = w.sizes["paper"]
    x1, y1 = w.make_data(hp, 2, np.random.default_rng(7))
    x2, y2 = w.make_data(hp, 2, np.random.default_rng(7))
    for a, b in zip(_flat((x1, y1)), _flat((x2, y2))):
        np.testing.assert_array_equal(a, b)
    if name in VISION:
        size = hp["image_size"]
        assert x1.shape == (2, size, size, 3) and x1.dtype == np.float32
        assert y1.shape == (2,) and 0 <= y1.min() and y1.max() < hp["num_classes"]
    elif name == "ncf":
        user, item = x1
        assert user.max() < hp["num_users"] and item.max() < hp["num_items"] and y1.shape == (2, 1)
    elif name == "transformer":
        src, tgt_in = x1
        assert src.shape == tgt_in.shape == y1.shape == (2, hp["seq_len"])
        assert src.max() < hp["vocab"] and y1.max() < hp["vocab"]
    else:
        from tf_autopar_workloads.paper.wide_deep import cardinalities

        dense, cat = x1
        assert dense.shape == (2, 13) and cat.shape == (2, 26) and y1.shape == (2, 1)
        assert np.all(cat < np.array(cardinalities(hp)))


def test_synthetic_targets_are_functions_of_the_inputs():
    """The learnable structure: the same input always gets the same target."""
    import tf_autopar_workloads as workloads

    ncf = workloads.get("ncf")
    hp = ncf.sizes["tiny"]
    (u1, i1), y1 = ncf.make_data(hp, 4000, np.random.default_rng(1))
    (u2, i2), y2 = ncf.make_data(hp, 4000, np.random.default_rng(2))
    first = {(a, b): c for a, b, c in zip(u1, i1, y1[:, 0])}
    shared = [(a, b, c) for a, b, c in zip(u2, i2, y2[:, 0]) if (a, b) in first]
    assert shared and all(first[(a, b)] == c for a, b, c in shared)
    assert 0.2 < y1.mean() < 0.8  # both classes present

    tr = workloads.get("transformer")
    (src, tgt_in), tgt = tr.make_data(tr.sizes["tiny"], 3, np.random.default_rng(0))
    np.testing.assert_array_equal(tgt, src[:, ::-1] + 1)
    np.testing.assert_array_equal(tgt_in[:, 1:], tgt[:, :-1])

    inc = workloads.get("inception_v3")
    x, y = inc.make_data(inc.sizes["tiny"], 64, np.random.default_rng(0))
    # images of the same class are closer to each other than to other classes
    flat = x.reshape(len(x), -1)
    same = [np.linalg.norm(flat[i] - flat[j]) for i in range(20) for j in range(i + 1, 64) if y[i] == y[j]]
    diff = [np.linalg.norm(flat[i] - flat[j]) for i in range(20) for j in range(i + 1, 64) if y[i] != y[j]]
    assert np.mean(same) < np.mean(diff)


@pytest.mark.parametrize("name", PAPER)
def test_infer_session_matches_function(builds, name):
    """Frozen graph in a TF1 Session vs the tf.function, same weights: same outputs."""
    b = builds(name)
    out_fn = _flat(b.infer())
    with b.session("infer") as sess:
        out_sess = _flat(sess.run())
    assert len(out_fn) == len(out_sess) == 1
    a, c = out_fn[0], out_sess[0]
    assert a.shape == c.shape and a.shape[0] == b.batch
    assert np.all(np.isfinite(a))
    np.testing.assert_allclose(a, c, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", PAPER)
def test_training_lowers_the_loss(builds, name):
    b = builds(name)
    losses = [b.train_step() for _ in range(4)]
    assert all(np.isfinite(losses)), losses
    assert losses[-1] < losses[0], losses


@pytest.mark.parametrize("name", TRAIN_SESSION)
def test_graph_mode_training_step_matches_function(name):
    """The model rebuilt in a tf.Graph trains in a TF1 Session with the function path's losses."""
    from tf_autopar_workloads import runner

    b = runner.build(name, size="tiny", seed=0)
    with b.session("train") as sess:
        session_losses = [sess.run() for _ in range(2)]
    losses = [b.train_step() for _ in range(2)]
    np.testing.assert_allclose(session_losses, losses, rtol=1e-4)


def test_convolution_counts_follow_the_architectures(builds):
    """Tiny graphs keep the paper models' layer structure: count Conv2D ops per model."""
    counts = {n: _ops(builds(n).graph_def("infer")).get("Conv2D", 0) for n in VISION}
    # stem 5 + Inception-A 7 + reduction-A 4 + Inception-B 10 + reduction-B 6 + Inception-C 9
    assert counts["inception_v3"] == 41
    assert counts["resnet50"] == 1 + 4 * (2 * 3 + 1)  # stem + per stage two blocks of 3 + a projection
    assert counts["densenet"] == 1 + 4 * 2 * 2 + 3  # stem + 2 convs per dense layer + transitions
    assert counts["squeezenet"] == 1 + 8 * 3 + 1  # conv1 + fire modules (squeeze, two expands) + conv10


def test_parallel_branches_show_in_the_width(builds):
    """What the planner reads: Inception and Wide&Deep have parallel heavy ops, DenseNet none."""
    from tf_autopar.graph import analyze

    from tf_autopar_workloads import runner

    prof = {n: analyze(builds(n).graph_def("infer")) for n in ("inception_v3", "densenet", "squeezenet")}
    # recommenders at a batch whose look-ups read >= MIN_LOOKUP_ELEMENTS (fewer are light: heavy_ops.py)
    prof.update({n: analyze(runner.graph_def(n, "infer", "tiny", batch=8192)) for n in ("wide_deep", "ncf")})
    assert prof["inception_v3"].max_width >= 4  # four-branch Inception modules
    assert prof["densenet"].max_width == 1  # a single chain despite the concatenations
    assert prof["squeezenet"].max_width == 2  # the two expand convolutions
    assert prof["ncf"].level_widths[0] == 4  # four independent embedding look-ups
    assert prof["wide_deep"].avg_width > 1
    # deep and wide look-ups of the 26 columns, the 8 crosses and the wide part's dense-feature MatMul
    assert prof["wide_deep"].level_widths[0] == 26 * 2 + 8 + 1


# Parameter counts at paper size (weights incl. BatchNorm moving statistics, as Keras counts them).
# Published: Inception v3 23.8M (keras.applications: 23,851,784), ResNet-50 25.6M (25,557,032
# trainable as in torchvision), DenseNet-121 8.0M (keras.applications: 8,062,504), SqueezeNet
# v1.1 1.2M (torchvision: 1,235,496), Transformer base ~65M (ours 63.1M: no biases in the
# tied output projection, vocabulary 37,000).
PAPER_PARAMS = {
    "inception_v3": 23_851_784,
    "resnet50": 25_610_152,
    "densenet": 8_062_504,
    "squeezenet": 1_235_496,
    "ncf": 31_832_577,
    "transformer": 63_082_496,
    "wide_deep": 30_060_622,
}


@pytest.mark.slow
@pytest.mark.parametrize("name", PAPER)
def test_paper_size_parameter_counts(name):
    import keras

    import tf_autopar_workloads as workloads

    w = workloads.get(name)
    keras.utils.set_random_seed(0)
    model = w.build_model(w.sizes["paper"])
    assert model.count_params() == PAPER_PARAMS[name]

"""What unknown dimensions are read as (graph/dims.py): pure, no TensorFlow."""

import pytest

from tf_autopar.graph.dims import (
    DEFAULT_OTHER_DIM,
    Assumed,
    assumed_dims,
    describe_assumptions,
    fill_unknown,
    parse_input_shape,
    read_batching_file,
    typical_batch,
)


def test_fill_unknown_reads_the_leading_dimension_as_the_batch_and_others_as_one_size():
    assert fill_unknown([-1, 128, 768], Assumed(4)) == ((4, 128, 768), frozenset({"batch"}))
    assert fill_unknown([-1, -1], Assumed(1, 50)) == ((1, 50), frozenset({"batch", "other"}))
    assert fill_unknown([2, 3], None) == ((2, 3), frozenset())
    assert fill_unknown([-1, 3], None)[0] is None  # nothing assumed: stays unknown
    assert fill_unknown([-1, -1], Assumed(1, None))[0] is None


def test_assumed_dims_defaults_and_given_shapes():
    inputs = {"ids": (-1, -1), "mask": (-1, -1), "image": (-1, 224, 224, 3)}
    assert assumed_dims(inputs) == Assumed(1, DEFAULT_OTHER_DIM)
    assert assumed_dims(inputs, batch=8) == Assumed(8, DEFAULT_OTHER_DIM)
    assert assumed_dims(inputs, input_shapes={"ids": (16, 40)}) == Assumed(16, 40)
    assert assumed_dims(inputs, batch=16, input_shapes={"ids": (16, 40)}) == Assumed(16, 40)
    assert assumed_dims(inputs, input_shapes={"ids": (2, 40), "mask": (2, 60)}) == Assumed(2, 60)  # largest


@pytest.mark.parametrize(
    "shapes,batch,message",
    [
        ({"nope": (1, 2)}, None, "'nope', which is not an input of the model; its inputs: ids"),
        ({"ids": (1, 2, 3)}, None, "rank 2"),
        ({"ids": (1, 0)}, None, "must be positive"),
        ({"ids": (4, 10)}, 8, "--input-shape says batch 4, --batch says 8"),
    ],
)
def test_assumed_dims_names_the_problem(shapes, batch, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        assumed_dims({"ids": (-1, -1)}, batch, shapes)


def test_a_fixed_dimension_must_match():
    with pytest.raises(ValueError, match=r"dimension 1 is fixed at 224 in the model \(\[None, 224, 224, 3\]\)"):
        assumed_dims({"image": (-1, 224, 224, 3)}, input_shapes={"image": (1, 200, 224, 3)})


def test_parse_input_shape():
    assert parse_input_shape("input_ids=1,128") == ("input_ids", (1, 128))
    assert parse_input_shape("x=2x3x4") == ("x", (2, 3, 4))
    for bad in ("ids", "ids=", "=1,2", "ids=1,a", "ids=1,-2", "ids=0", "ids=1,²"):
        with pytest.raises(ValueError, match="NAME=D1,D2"):
            parse_input_shape(bad)


def test_typical_batch_by_mode_and_batching_file(tmp_path):
    f = tmp_path / "batching.config"
    f.write_text("max_batch_size { value: 32 }\nbatch_timeout_micros { value: 1000 }\n")
    assert typical_batch("latency") == 1
    assert typical_batch("latency", batching_file=str(f)) == 1  # one request at a time
    assert typical_batch("throughput", batching_file=str(f)) == 32
    assert typical_batch("throughput", 8, str(f)) == 8  # the batch given wins
    assert typical_batch("throughput") == 1
    with pytest.raises(ValueError, match="positive integer"):
        typical_batch("latency", 0)
    g = tmp_path / "garbled.config"
    g.write_text("max_batch_size: lots")
    with pytest.raises(ValueError, match="no positive max_batch_size"):
        read_batching_file(str(g))
    with pytest.raises(FileNotFoundError, match="does not exist"):
        read_batching_file(str(tmp_path / "missing"))


def test_describe_assumptions():
    assert describe_assumptions(Assumed(1), {"batch"}) == ("unknown batch dimension read as 1",)
    assert describe_assumptions(Assumed(1), set()) == ()
    assert len(describe_assumptions(Assumed(2, 64), {"batch", "other"})) == 2


def test_an_unknown_batch_silences_the_small_op_rule():
    from tf_autopar.graph.dims import for_unknown_batch
    from tf_autopar.graph.profile import GraphProfile

    at_one = GraphProfile(
        heavy_ops=53,
        depth=53,
        avg_width=1,
        max_width=1,
        typical_op_work=10_800_000,
        assumptions=("unknown batch dimension read as 1",),
    )
    merged = for_unknown_batch(at_one)
    assert merged.typical_op_work is None and merged.avg_width == 1 and not merged.sizes_known
    assert merged.assumptions[0] == "unknown batch dimension read as 1" and "not given" in merged.assumptions[1]
    from tf_autopar.planning import plan

    try:
        from test_planner_hosts import hosts
    except ImportError:
        from tests.test_planner_hosts import hosts
    this, skylake = hosts()["this"], hosts()["skylake"]
    assert (plan(this, merged, env={}).inter_op, plan(this, merged, env={}).intra_op) == (2, 2)
    assert plan(skylake, merged, env={}).inter_op == 24  # the budget's physical cores, as without a model
    assert "the batch is not given" in plan(this, merged, env={}).explain()

"""GraphDef/FunctionDef protobufs -> GraphProfile, on hand-built graphs with known answers.

Uses TensorFlow's protobuf classes (importing them imports the tensorflow package), so
these tests are marked tf; no op is run."""

from __future__ import annotations

import random

import pytest

pytestmark = pytest.mark.tf

from tensorflow.core.framework import graph_pb2  # noqa: E402

from tf_autopar.graph import analyze, analyze_graph_def  # noqa: E402
from tf_autopar.graph import heavy_ops  # noqa: E402


def node(container, name, op, *inputs, **funcs):
    n = container.add()
    n.name, n.op = name, op
    n.input.extend(inputs)
    for key, value in funcs.items():
        if isinstance(value, list):
            for v in value:
                n.attr[key].list.func.add().name = v
        else:
            n.attr[key].func.name = value
    return n


def const(container, name, rank):
    n = node(container, name, "Const")
    shape = n.attr["value"].tensor.tensor_shape
    for _ in range(rank):
        shape.dim.add().size = 4
    return n


def matmul_function(lib, fname, length, passthrough=False):
    """fname(x[, y]) -> (chain of `length` MatMuls on x[, y unchanged])."""
    f = lib.function.add()
    f.signature.name = fname
    f.signature.input_arg.add().name = "x"
    f.signature.output_arg.add().name = "out"
    prev = "x"
    for i in range(length):
        node(f.node_def, f"mm{i}", "MatMul", prev, prev)
        prev = f"mm{i}:product:0"
    f.ret["out"] = prev
    if passthrough:
        f.signature.input_arg.add().name = "y"
        f.signature.output_arg.add().name = "same"
        node(f.node_def, "id", "Identity", "y")
        f.ret["same"] = "id:output:0"
    return f


def test_parallel_calls_of_one_function_are_spliced_and_memoised():
    g = graph_pb2.GraphDef()
    matmul_function(g.library, "chain2", 2)
    node(g.node, "x", "Placeholder")
    node(g.node, "c1", "StatefulPartitionedCall", "x", f="chain2")
    node(g.node, "c2", "PartitionedCall", "x", f="chain2")
    node(g.node, "add", "AddV2", "c1", "c2:0")
    node(g.node, "head", "MatMul", "add", "add")
    p = analyze_graph_def(g)
    assert (p.heavy_ops, p.depth, p.level_widths) == (5, 3, (2, 2, 1))
    assert (p.avg_width, p.max_width, p.functions) == (1, 2, 1)
    assert p.op_types["MatMul"] == 5 and p.nodes == 5 + 2 * 2


def test_call_outputs_leave_at_their_own_heavy_level():
    g = graph_pb2.GraphDef()
    matmul_function(g.library, "f", 3, passthrough=True)
    node(g.node, "x", "Placeholder")
    node(g.node, "call", "StatefulPartitionedCall", "x", "x", f="f")
    node(g.node, "after_passthrough", "MatMul", "call:1", "call:1")  # reads y, untouched by the chain
    node(g.node, "after_chain", "MatMul", "call:0", "call:0")
    node(g.node, "after_all", "MatMul", "^call", "x")  # a control edge waits for the whole body
    p = analyze_graph_def(g)
    assert p.heavy_ops == 6 and p.depth == 4
    assert p.level_widths == (2, 1, 1, 2)


def test_direct_function_call_by_op_type_and_function_format_ports():
    g = graph_pb2.GraphDef()
    matmul_function(g.library, "inner", 2, passthrough=True)
    outer = g.library.function.add()
    outer.signature.name = "outer"
    outer.signature.input_arg.add().name = "a"
    outer.signature.output_arg.add().name = "r"
    node(outer.node_def, "call", "inner", "a", "a")  # op type = function name
    node(outer.node_def, "mm", "MatMul", "call:same:0", "call:same:0")
    outer.ret["r"] = "mm:product:0"
    node(g.node, "x", "Placeholder")
    node(g.node, "c", "PartitionedCall", "x", f="outer")
    node(g.node, "m", "MatMul", "c", "c")
    p = analyze_graph_def(g)
    # inner's chain (2) runs beside mm (reads the passthrough); m waits for mm only
    assert (p.heavy_ops, p.depth, p.functions) == (4, 2, 2)
    assert p.level_widths == (2, 2)


def test_while_body_counts_once_and_if_takes_the_heaviest_branch():
    g = graph_pb2.GraphDef()
    matmul_function(g.library, "body", 2)
    matmul_function(g.library, "cond", 0)
    matmul_function(g.library, "then", 3)
    matmul_function(g.library, "else", 1)
    node(g.node, "x", "Placeholder")
    node(g.node, "loop", "While", "x", cond="cond", body="body")
    node(g.node, "branch", "StatelessIf", "x", "loop", then_branch="else", else_branch="then")
    node(g.node, "case", "Case", "x", branches=["else", "body"])
    p = analyze_graph_def(g)
    # loop: depth 2; if: heaviest branch (3) after the loop; case: body branch (2) in parallel
    assert (p.heavy_ops, p.depth) == (2 + 3 + 2, 5)
    assert p.level_widths == (2, 2, 1, 1, 1)
    assert p.functions == 4


def test_tf1_while_loop_back_edge_is_dropped():
    g = graph_pb2.GraphDef()
    node(g.node, "x", "Placeholder")
    node(g.node, "enter", "Enter", "x")
    node(g.node, "merge", "Merge", "enter", "next")
    node(g.node, "switch", "Switch", "merge", "pred")
    node(g.node, "pred", "LoopCond", "merge")
    node(g.node, "body_mm", "MatMul", "switch:1", "switch:1")
    node(g.node, "body_mm2", "MatMul", "body_mm", "body_mm")
    node(g.node, "next", "NextIteration", "body_mm2")
    node(g.node, "exit", "Exit", "switch")
    node(g.node, "head", "MatMul", "exit", "exit")
    p = analyze_graph_def(g)
    assert (p.heavy_ops, p.depth) == (3, 3)


def test_embedding_gathers_are_heavy_only_on_tables():
    g = graph_pb2.GraphDef()
    node(g.node, "ids", "Placeholder")
    node(g.node, "var", "VarHandleOp")
    node(g.node, "read", "ReadVariableOp", "var")
    node(g.node, "axis", "Const")
    node(g.node, "g_var", "GatherV2", "read", "ids", "axis")
    node(g.node, "v1", "VariableV2")
    node(g.node, "v1/read", "Identity", "v1")
    node(g.node, "g_tf1", "Gather", "v1/read", "ids")
    const(g.node, "table", 2)
    node(g.node, "g_frozen", "GatherV2", "table", "ids", "axis")
    node(g.node, "shape", "Shape", "ids")
    node(g.node, "g_shape", "GatherV2", "shape", "ids", "axis")
    const(g.node, "vec", 1)
    node(g.node, "g_vec", "GatherV2", "vec", "ids", "axis")
    node(g.node, "rg", "ResourceGather", "var", "ids")
    node(g.node, "seg", "SparseSegmentMean", "g_var", "ids", "ids")
    p = analyze_graph_def(g)
    assert p.heavy_op_types == {"GatherV2": 2, "Gather": 1, "ResourceGather": 1, "SparseSegmentMean": 1}
    assert (p.depth, p.level_widths) == (2, (4, 1))


def test_gradient_ops_count_unless_excluded():
    g = graph_pb2.GraphDef()
    node(g.node, "x", "Placeholder")
    node(g.node, "conv", "Conv2D", "x", "x")
    node(g.node, "gradient_tape/conv/Conv2DBackpropInput", "Conv2DBackpropInput", "conv", "x")
    node(g.node, "gradient_tape/conv/Conv2DBackpropFilter", "Conv2DBackpropFilter", "conv", "x")
    node(g.node, "gradients/dense/MatMul_1", "MatMul", "conv", "x")
    matmul_function(g.library, "__inference___backward_f_12", 2)
    node(g.node, "bwd", "PartitionedCall", "conv", f="__inference___backward_f_12")
    p = analyze_graph_def(g)
    assert p.training and (p.heavy_ops, p.depth, p.level_widths) == (6, 3, (1, 4, 1))
    q = analyze_graph_def(g, include_gradients=False)
    assert q.training and (q.heavy_ops, q.depth) == (1, 1)
    assert q.fingerprint == p.fingerprint  # same structure, different counting


def test_forward_graph_is_not_training_and_tf_data_is_detected():
    g = graph_pb2.GraphDef()
    node(g.node, "it", "IteratorV2")
    node(g.node, "next", "IteratorGetNext", "it")
    node(g.node, "mm", "MatMul", "next", "next")
    p = analyze_graph_def(g)
    assert not p.training and p.uses_tf_data
    assert not analyze_graph_def(graph_pb2.GraphDef()).uses_tf_data


def test_fingerprint_ignores_node_order_but_not_structure():
    def build(order, rewire=False):
        g = graph_pb2.GraphDef()
        spec = [("x", "Placeholder", []), ("a", "MatMul", ["x", "x"]), ("b", "MatMul", ["x", "a" if rewire else "x"])]
        for i in order:
            node(g.node, spec[i][0], spec[i][1], *spec[i][2])
        return analyze_graph_def(g)

    base = build([0, 1, 2])
    assert build([2, 0, 1]).fingerprint == base.fingerprint
    assert build([2, 0, 1]).depth == base.depth == 1
    changed = build([0, 1, 2], rewire=True)
    assert changed.fingerprint != base.fingerprint and changed.depth == 2


def test_no_heavy_ops_gives_width_one():
    g = graph_pb2.GraphDef()
    node(g.node, "x", "Placeholder")
    node(g.node, "y", "Relu", "x")
    p = analyze_graph_def(g)
    assert (p.heavy_ops, p.depth, p.avg_width, p.max_width) == (0, 0, 1, 1)


def test_graph_def_passed_to_analyze_and_outputs_prune():
    g = graph_pb2.GraphDef()
    node(g.node, "x", "Placeholder")
    node(g.node, "a", "MatMul", "x", "x")
    node(g.node, "unused", "MatMul", "x", "x")
    assert analyze(g).heavy_ops == 2
    assert analyze_graph_def(g, outputs=["a:0"]).heavy_ops == 1
    with pytest.raises(ValueError, match="'nope:0' is not a node"):
        analyze_graph_def(g, outputs=["nope:0"])


def test_synthetic_graph_invariants():
    rng = random.Random(7)
    g = graph_pb2.GraphDef()
    for i in range(3000):
        ins = [f"n{rng.randrange(max(0, i - 20), i)}" for _ in range(2)] if i else []
        node(g.node, f"n{i}", rng.choice(["MatMul", "Relu", "AddV2", "Conv2D"]), *ins)
    p = analyze_graph_def(g)
    assert sum(p.level_widths) == p.heavy_ops == p.op_types.get("MatMul", 0) + p.op_types.get("Conv2D", 0)
    assert len(p.level_widths) == p.depth and p.nodes == 3000


def test_every_heavy_op_type_is_registered_in_tensorflow():
    from tensorflow.core.framework import op_def_pb2
    from tensorflow.python.client import pywrap_tf_session as c_api

    buf = c_api.TF_GetAllOpList()
    ops = op_def_pb2.OpList()
    ops.ParseFromString(c_api.TF_GetBuffer(buf))
    registered = {o.name for o in ops.op}
    missing = sorted(set(heavy_ops.HEAVY_OP_TYPES) - registered)
    assert not missing, f"not TF 2.21 op types: {missing}"
    assert heavy_ops.CONDITIONAL_GATHER_OP_TYPES <= registered


# --- each heavy op's work, from recorded shapes (graph/work.py)


def shaped(container, name, op, shape, *inputs, **attrs):
    """A node with a recorded output shape (as add_shapes=True writes it)."""
    n = node(container, name, op, *inputs)
    s = n.attr["_output_shapes"].list.shape.add()
    for d in shape:
        s.dim.add().size = d
    for key, value in attrs.items():
        if isinstance(value, bool):
            n.attr[key].b = value
        else:
            n.attr[key].s = value.encode()
    return n


@pytest.mark.parametrize(
    "op, a, b, out, attrs, expected",
    [
        ("MatMul", (8, 64), (64, 32), (8, 32), {}, 8 * 32 * 64),
        ("MatMul", (64, 8), (64, 32), (8, 32), {"transpose_a": True}, 8 * 32 * 64),
        ("BatchMatMulV2", (4, 8, 16), (4, 16, 8), (4, 8, 8), {}, 4 * 8 * 8 * 16),
        ("BatchMatMulV2", (4, 16, 8), (4, 16, 8), (4, 8, 8), {"adj_x": True}, 4 * 8 * 8 * 16),
        ("Einsum", (2, 5, 7), (7, 3), (2, 5, 3), {"equation": "bij,jk->bik"}, 2 * 5 * 3 * 7),
        ("Einsum", (2, 5, 7), (7, 3), (2, 5, 3), {"equation": "...j,jk->...k"}, 2 * 5 * 3 * 7),
        # Conv2D: output x kh*kw*cin (filter HWIO)
        ("Conv2D", (1, 32, 32, 3), (3, 3, 3, 16), (1, 32, 32, 16), {}, 32 * 32 * 16 * 27),
        ("DepthwiseConv2dNative", (1, 32, 32, 8), (3, 3, 8, 1), (1, 32, 32, 8), {}, 32 * 32 * 8 * 9),
        ("MatMul", (-1, 64), (64, 32), (-1, 32), {}, None),  # a None batch: unknown
        # an input of unknown shape (a TensorList pop in a loop's gradient): K from the other input
        ("MatMul", (-1, 16), (4, 8), (16, 8), {"transpose_a": True}, 16 * 8 * 4),
        ("MatMul", (-1, -1), (8, 4), (16, 8), {"transpose_b": True}, 16 * 8 * 4),
        ("BatchMatMulV2", (-1, 8, 16), (4, 8, 16), (4, 8, 8), {"adj_y": True}, 4 * 8 * 8 * 16),
    ],
)
def test_op_work_of_contractions(op, a, b, out, attrs, expected):
    g = graph_pb2.GraphDef()
    shaped(g.node, "a", "Placeholder", a)
    shaped(g.node, "b", "Placeholder", b)
    shaped(g.node, "op", op, out, "a", "b", **attrs)
    assert analyze_graph_def(g).typical_op_work == expected


def test_conv_backprops_do_the_forward_work():
    g = graph_pb2.GraphDef()
    shaped(g.node, "x", "Placeholder", (2, 16, 16, 4))
    shaped(g.node, "w", "Placeholder", (3, 3, 4, 8))
    shaped(g.node, "dy", "Placeholder", (2, 16, 16, 8))
    shaped(g.node, "sizes", "Const", (4,))
    shaped(g.node, "dx", "Conv2DBackpropInput", (2, 16, 16, 4), "sizes", "w", "dy")
    shaped(g.node, "dw", "Conv2DBackpropFilter", (3, 3, 4, 8), "x", "sizes", "dy")
    forward = 2 * 16 * 16 * 8 * (3 * 3 * 4)
    p = analyze_graph_def(g)
    assert p.heavy_ops == 2 and p.typical_op_work == forward


def test_typical_work_is_the_work_weighted_median():
    from tf_autopar.graph.work import typical_work

    assert typical_work([(10, 1), (100, 1)]) == 100
    assert typical_work([(10, 1)] * 9 + [(1000, 1)]) == 1000  # one op holds most of the work
    assert typical_work([(10, 50), (100, 1)]) == 10  # a loop body running 50 times
    assert typical_work([(10, 1), (None, 1)]) is None and typical_work([]) is None


def test_lookup_of_a_few_rows_is_light_and_a_loop_counts_its_trips():
    """A gather of one 32-wide row is bookkeeping; a While whose maximum_iterations is
    Max(Const 40) runs its body's matmul 40 times per step."""
    g = graph_pb2.GraphDef()
    shaped(g.node, "ids", "Placeholder", (1,))
    shaped(g.node, "table", "ReadVariableOp", (1000, 32))
    shaped(g.node, "emb", "GatherV2", (1, 32), "table", "ids")
    shaped(g.node, "w", "ReadVariableOp", (32, 32))
    shaped(g.node, "head", "MatMul", (1, 32), "emb", "w")  # 1024 MACs, once
    n = node(g.node, "n", "Const")
    n.attr["value"].tensor.dtype = 3  # int32
    n.attr["value"].tensor.int_val.append(40)
    node(g.node, "max_iter", "Max", "n", "axis")
    node(g.node, "loop", "StatelessWhile", "counter", "max_iter", "head", cond="cond", body="body")
    lib = g.library
    for fname in ("cond", "body"):
        f = lib.function.add()
        f.signature.name = fname
        for arg in ("counter", "max_iter", "h"):
            f.signature.input_arg.add().name = arg
        h_shape = f.arg_attr[2].attr["_output_shapes"].list.shape.add()  # arguments carry their shapes
        for d in (1, 16):
            h_shape.dim.add().size = d
        if fname == "body":
            shaped(f.node_def, "v", "ReadVariableOp", (16, 16))
            shaped(f.node_def, "mm", "MatMul", (1, 16), "h", "v:value:0")  # 256 MACs, 40 times
            f.signature.output_arg.add().name = "h_next"
            f.ret["h_next"] = "mm:product:0"
    p = analyze_graph_def(g)
    assert p.heavy_op_types == {"MatMul": 2}  # the one-row gather is not heavy
    assert p.typical_op_work == 256  # 40 x 256 = 10240 MACs outweigh the head's 1024
    # per step: the head once and the body's matmul 40 times; no heavy look-up
    assert (p.lookups, p.lookup_work, p.contraction_work) == (0, 0, 1024 + 40 * 256)


def test_a_function_body_counts_only_what_feeds_its_outputs():
    """Keras RNN layers trace one cell step outside their loop only to learn its shapes: those
    ops are in the function but feed no output (nor a control output), so they never run."""
    g = graph_pb2.GraphDef()
    shaped(g.node, "x", "Placeholder", (1, 16))
    node(g.node, "call", "StatefulPartitionedCall", "x", f="f")
    f = g.library.function.add()
    f.signature.name = "f"
    f.signature.input_arg.add().name = "x"
    f.signature.output_arg.add().name = "y"
    shaped(f.node_def, "w", "ReadVariableOp", (16, 16))
    shaped(f.node_def, "probe", "MatMul", (1, 16), "x", "w:value:0")  # dead: feeds nothing
    shaped(f.node_def, "live", "MatMul", (1, 16), "x", "w:value:0")
    shaped(f.node_def, "update", "AssignVariableOp", (), "w:value:0", "live:product:0")
    f.ret["y"] = "live:product:0"
    assert analyze_graph_def(g).heavy_ops == 1
    shaped(f.node_def, "probe2", "MatMul", (1, 16), "probe:product:0", "w:value:0")
    f.control_ret["side_effect"] = "probe2"  # a control output runs, with what feeds it
    assert analyze_graph_def(g).heavy_ops == 3


def test_lookup_of_many_rows_stays_heavy():
    from tf_autopar.graph.heavy_ops import MIN_LOOKUP_ELEMENTS

    g = graph_pb2.GraphDef()
    shaped(g.node, "ids", "Placeholder", (MIN_LOOKUP_ELEMENTS,))
    shaped(g.node, "table", "ReadVariableOp", (10**6, 1))
    shaped(g.node, "emb", "GatherV2", (MIN_LOOKUP_ELEMENTS, 1), "table", "ids")
    p = analyze_graph_def(g)
    assert p.heavy_op_types == {"GatherV2": 1} and p.typical_op_work == MIN_LOOKUP_ELEMENTS
    assert (p.lookups, p.lookup_work, p.contraction_work) == (1, MIN_LOOKUP_ELEMENTS, 0)


def test_lookup_and_contraction_work_are_summed_apart_and_unknown_stays_unknown():
    """The OpenMP rule weighs the elements the look-ups read (TensorFlow's pool) against the
    other heavy ops' multiply-adds (OpenMP teams): two tables of 8192 x 32 rows read, then a
    matmul of 8192 x 64 @ 64 x 16."""
    g = graph_pb2.GraphDef()
    for i in range(2):
        shaped(g.node, f"ids{i}", "Placeholder", (8192,))
        shaped(g.node, f"table{i}", "ReadVariableOp", (10**5, 32))
        shaped(g.node, f"emb{i}", "GatherV2", (8192, 32), f"table{i}", f"ids{i}")
    shaped(g.node, "cat", "ConcatV2", (8192, 64), "emb0", "emb1")
    shaped(g.node, "w", "ReadVariableOp", (64, 16))
    shaped(g.node, "mm", "MatMul", (8192, 16), "cat", "w")
    p = analyze_graph_def(g)
    assert (p.lookups, p.lookup_work, p.contraction_work) == (2, 2 * 8192 * 32, 8192 * 64 * 16)
    shaped(g.node, "x", "Placeholder", (-1, 64))
    shaped(g.node, "mm2", "MatMul", (-1, 16), "x", "w")  # a batch unknown: the sum is unknown
    p = analyze_graph_def(g)
    assert p.lookup_work == 2 * 8192 * 32 and p.contraction_work is None


def test_dense_on_a_sequence_counts_every_row_through_its_reshape():
    """Keras' Dense on [batch, seq, d] reshapes to a matrix with a computed shape ([-1, -1]):
    the MatMul's rows are the Reshape input's elements / K, not the batch."""
    from tf_autopar.graph.dims import Assumed

    g = graph_pb2.GraphDef()
    shaped(g.node, "x", "Placeholder", (-1, 128, 256))
    shaped(g.node, "flat", "Reshape", (-1, -1), "x", "shape")
    shaped(g.node, "w", "ReadVariableOp", (256, 1024))
    shaped(g.node, "ffn", "MatMul", (-1, 1024), "flat", "w")
    p = analyze_graph_def(g, assumed=Assumed(2))
    assert p.typical_op_work == 2 * 128 * 256 * 1024
    assert p.assumptions == ("unknown batch dimension read as 2",)  # no guessed sequence length
    assert analyze_graph_def(g).typical_op_work is None  # nothing assumed: unknown


def test_functions_nested_too_deeply_are_a_clear_value_error():
    from tf_autopar.graph.reduction import MAX_FUNCTION_NESTING

    def nested(depth):
        g = graph_pb2.GraphDef()
        matmul_function(g.library, f"f{depth}", 1)
        for i in range(depth - 1, -1, -1):
            f = g.library.function.add()
            f.signature.name = f"f{i}"
            f.signature.input_arg.add().name = "x"
            f.signature.output_arg.add().name = "out"
            node(f.node_def, "call", "PartitionedCall", "x", f=f"f{i + 1}")
            f.ret["out"] = "call:output:0"
        node(g.node, "x", "Placeholder")
        node(g.node, "c", "PartitionedCall", "x", f="f0")
        return g

    assert analyze_graph_def(nested(MAX_FUNCTION_NESTING - 2)).heavy_ops == 1
    with pytest.raises(ValueError, match="nested more than"):
        analyze_graph_def(nested(5000))  # used to end in RecursionError

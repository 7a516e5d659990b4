"""Pure parts of the tracer: event parsing, type names, aggregation (no TensorFlow)."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest

from tf_autopar.tracing import model
from tf_autopar.tracing.model import RawChunk


def _chunk(rows: list[tuple[str, str, int, int]]) -> RawChunk:
    names: dict[str, int] = {}
    threads: dict[str, int] = {}
    ev = [(names.setdefault(n, len(names)), threads.setdefault(t, len(threads)), s, e) for n, t, s, e in rows]
    return RawChunk(
        tuple(names), tuple(threads), tuple(range(len(threads))), np.array(ev, dtype=np.int64).reshape(-1, 4)
    )


@pytest.mark.parametrize(
    "kernel,expected",
    [
        ("_MklNativeConv2D", "Conv2D"),
        ("_MklMatMul", "MatMul"),
        ("_MklNativeFusedMatMul", "_FusedMatMul"),
        ("_MklNativeFusedConv2D", "_FusedConv2D"),
        ("_MklFusedBatchNormV3", "FusedBatchNormV3"),
        ("_MklSoftmax", "Softmax"),
        ("MatMul", "MatMul"),
        ("_FusedMatMul", "_FusedMatMul"),
        ("_Mkl", "_Mkl"),
    ],
)
def test_normalize_type(kernel: str, expected: str) -> None:
    assert model.normalize_type(kernel) == expected


@pytest.mark.parametrize(
    "name,expected",
    [
        ("sequential/dense/MatMul:MatMul", ("sequential/dense/MatMul", "MatMul")),
        ("MatMul_1:_MklMatMul", ("MatMul_1", "_MklMatMul")),
        ("ExecutorState::Process", None),
        ("MakeIterator::PrefetchDataset", None),
        ("EagerLocalExecute: MatMul", None),
        ("EagerKernelExecute", None),
        ("a:b:c", None),
    ],
)
def test_parse_op_event(name: str, expected) -> None:
    assert model.parse_op_event(name) == expected


def test_op_table_filters_and_windows() -> None:
    ch = _chunk(
        [
            ("x:_Arg", "tf_Compute/1", 100, 110),
            ("MatMul:_MklMatMul", "tf_Compute/1", 120, 220),
            ("ExecutorState::Process", "tf_Compute/1", 100, 400),
            ("call:StatefulPartitionedCall", "python", 90, 500),
            ("Relu:Relu", "tf_Compute/2", 230, 250),
            ("MatMul:_MklMatMul", "tf_Compute/2", 1000, 1400),  # outside the window below
            ("out:_Retval", "tf_Compute/1", 260, 261),
        ]
    )
    table = model.op_table([ch], 100, 900)
    evs = table.events()
    assert [(e.name, e.type, e.kernel, e.thread) for e in evs] == [
        ("MatMul", "MatMul", "_MklMatMul", "tf_Compute/1"),
        ("Relu", "Relu", "Relu", "tf_Compute/2"),
    ]
    assert (evs[0].start_ns, evs[0].end_ns) == (20, 120)  # relative to the window start


def test_eager_ops_take_their_type_from_the_enclosing_dispatch() -> None:
    ch = _chunk(
        [
            ("EagerLocalExecute: MatMul", "python", 0, 100),
            ("EagerKernelExecute", "python", 10, 90),
            ("EagerLocalExecute: __inference_f_12", "python", 200, 400),
            ("EagerKernelExecute", "python", 210, 390),  # a tf.function call: its ops are traced separately
            ("f/MatMul:MatMul", "tf_Compute/1", 220, 300),
            ("EagerLocalExecute: Relu", "python", 500, 520),
            ("EagerKernelExecute", "python", 505, 515),
        ]
    )
    recs = {r.name: r for r in model.aggregate_ops(model.op_table([ch], 0, 10_000))}
    assert set(recs) == {"eager/MatMul", "eager/Relu", "f/MatMul"}
    assert recs["eager/MatMul"].total_s == pytest.approx(80e-9)
    assert recs["eager/Relu"].thread == "python"


def test_aggregation_counts_totals_medians_and_main_thread() -> None:
    rows = []
    durations = [5, 1, 9, 3]  # median 4
    for i, d in enumerate(durations):
        rows.append(("conv:_MklNativeConv2D", "tf_Compute/1" if i < 3 else "tf_Compute/2", 1000 * i, 1000 * i + d))
    rows.append(("add:AddV2", "tf_Compute/2", 50, 57))
    table = model.op_table([_chunk(rows)], 0, 10**6)
    ops = model.aggregate_ops(table)
    assert [r.name for r in ops] == ["conv", "add"]
    conv = ops[0]
    assert (conv.type, conv.kernel, conv.count, conv.threads, conv.thread) == (
        "Conv2D",
        "_MklNativeConv2D",
        4,
        2,
        "tf_Compute/1",
    )
    assert conv.total_s == pytest.approx(18e-9)
    assert conv.median_s == pytest.approx(4e-9)
    types = model.aggregate_types(table, model.heavy_classifier())
    assert [(t.type, t.count, t.ops, t.heavy) for t in types] == [
        ("Conv2D", 4, 1, "convolution"),
        ("AddV2", 1, 1, None),
    ]
    assert sum(t.share for t in types) == pytest.approx(1.0)
    hs = model.heavy_share(table, wall_s=1e-6, classify=model.heavy_classifier())
    assert hs.heavy_s == pytest.approx(18e-9) and hs.other_s == pytest.approx(7e-9)
    assert hs.heavy_fraction == pytest.approx(18 / 25)
    assert hs.heavy_busy_s == pytest.approx(18e-9)  # no overlap between the conv runs
    assert hs.tax_fraction == pytest.approx(1 - 18e-9 / 1e-6)
    assert hs.by_class == {"convolution": pytest.approx(18e-9)}


def test_heavy_busy_time_counts_overlaps_once() -> None:
    rows = [
        ("a:MatMul", "tf_Compute/1", 0, 100),
        ("b:MatMul", "tf_Compute/2", 50, 150),  # overlaps a
        ("c:Conv2D", "tf_Compute/1", 300, 400),
        ("r:Relu", "tf_Compute/1", 150, 300),  # light: not busy
    ]
    table = model.op_table([_chunk(rows)], 0, 10**6)
    hs = model.heavy_share(table, wall_s=500e-9, classify=model.heavy_classifier())
    assert hs.heavy_s == pytest.approx(300e-9) and hs.heavy_busy_s == pytest.approx(250e-9)
    assert hs.tax_fraction == pytest.approx(0.5)
    assert model.union_length(np.array([0, 10, 5, 30]), np.array([10, 20, 6, 31])) == 21


def test_group_medians_match_numpy() -> None:
    rng = np.random.default_rng(0)
    g = rng.integers(0, 7, size=500)
    d = rng.exponential(10.0, size=500)
    count, total, median = model._group_stats(g, d, 8)
    for k in range(8):
        sel = d[g == k]
        assert count[k] == len(sel)
        if len(sel):
            assert total[k] == pytest.approx(sel.sum())
            assert median[k] == pytest.approx(np.median(sel))


def test_embedding_gathers_count_as_heavy_by_name() -> None:
    classify = model.heavy_classifier()
    assert classify("GatherV2", "GatherV2", "model/embedding/GatherV2") == "embedding"
    assert classify("GatherV2", "GatherV2", "model/strided/GatherV2") is None
    assert classify("_FusedMatMul", "_MklNativeFusedMatMul", "dense/BiasAdd") == "matmul"


def test_chrome_trace_format() -> None:
    table = model.op_table([_chunk([("MatMul:MatMul", "tf_Compute/1", 1000, 3000)])], 0, 10**6)
    doc = model.chrome_trace(table.events(), [("ExecutorState::Process", "tf_Compute/1", 500, 4000)])
    json.dumps(doc)
    xs = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert {e["cat"] for e in xs} == {"op", "runtime"}
    op = next(e for e in xs if e["cat"] == "op")
    assert (op["name"], op["ts"], op["dur"], op["args"]["type"]) == ("MatMul", 1.0, 2.0, "MatMul")
    names = [e for e in doc["traceEvents"] if e["ph"] == "M" and e["name"] == "thread_name"]
    assert names[0]["args"]["name"] == "tf_Compute/1"


def test_importing_tracing_does_not_import_tensorflow() -> None:
    import subprocess

    code = "import sys, tf_autopar.tracing, tf_autopar.cli.trace_cmd; print('tensorflow' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"

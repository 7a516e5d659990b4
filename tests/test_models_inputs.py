"""Inputs for a user's model, the bench options and summary, model rows of the harness: pure, no TensorFlow."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from tf_autopar.models import inputs as inp
from tf_autopar.models.bench import BenchOptions, parse_compare, summarize
from tf_autopar.models.inputs import InputSpec
from tf_autopar.models.options import ModelOptions
from tf_autopar.validation.harness import (
    DEFAULT_RUNNER,
    MODEL_RUNNER,
    Options,
    RowSpec,
    make_model_rows,
    runner_command,
)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SPECS = (
    InputSpec("feats", "float32", (None, 4)),
    InputSpec("ids", "int32", (None, None)),
    InputSpec("mask", "bool", (None, 3)),
)


def test_synthesised_inputs_have_the_signature_dtypes_and_fill_the_batch():
    arrays, infos, assumed = inp.synthesize(SPECS, batch=3)
    assert arrays["feats"].dtype == np.float32 and arrays["feats"].shape == (3, 4)
    assert arrays["ids"].dtype == np.int32 and arrays["ids"].shape == (3, inp.DEFAULT_DIM)
    assert arrays["mask"].dtype == np.bool_ and arrays["mask"].shape == (3, 3)
    assert abs(float(arrays["feats"].mean())) < 1.5 and arrays["feats"].std() > 0  # standard normal, not constant
    assert arrays["ids"].min() >= 0 and arrays["ids"].max() < inp.DEFAULT_INT_MAX
    # the sequence length was assumed, and the report says so (with the flag that changes it)
    assert len(assumed) == 1 and "ids" in assumed[0] and "128" in assumed[0] and "--input-shape" in assumed[0]
    assert [i.shape for i in infos] == [(3, 4), (3, 128), (3, 3)]


def test_synthesis_is_deterministic_so_every_child_runs_the_same_inputs():
    a, _, _ = inp.synthesize(SPECS, batch=2)
    b, _, _ = inp.synthesize(SPECS, batch=2)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])


def test_integer_inputs_stay_below_the_table_size_or_int_max():
    big = InputSpec("ids", "int64", (None, 50))
    arrays, infos, _ = inp.synthesize([big], batch=64, int_bounds={"ids": (7, "embedding table (7 rows)")})
    assert arrays["ids"].max() < 7 and arrays["ids"].max() >= 5  # 3200 draws cover the range
    assert infos[0].int_max == 7 and "embedding table" in infos[0].values
    arrays, infos, _ = inp.synthesize([big], batch=64, int_max=3, int_bounds={"ids": (7, "table")})
    assert arrays["ids"].max() == 2 and infos[0].int_max == 3 and "--int-max" in infos[0].values  # the flag wins
    arrays, _, _ = inp.synthesize([InputSpec("b", "int8", (None, 400))], batch=8)
    assert arrays["b"].max() <= 127 and arrays["b"].min() >= 0  # clipped to what the dtype holds


def test_input_shape_sets_the_free_dimensions():
    shapes = inp.parse_input_shapes(["ids=2,16"])
    assert shapes == {"ids": (2, 16)}
    arrays, _, assumed = inp.synthesize(SPECS, batch=2, input_shapes=shapes)
    assert arrays["ids"].shape == (2, 16) and assumed == []


@pytest.mark.parametrize(
    "items, batch, message",
    [
        (["ids=2,16,1"], 2, "rank 3"),  # wrong rank
        (["feats=2,5"], 2, "fixed at 4"),  # contradicts a fixed dimension
        (["ids=4,16"], 2, "--batch is 2"),  # contradicts the batch
        (["idz=2,16"], 2, "its inputs are: feats, ids, mask"),  # unknown name, the names listed
    ],
)
def test_wrong_input_shape_is_a_clear_error(items, batch, message):
    with pytest.raises(ValueError, match="--input-shape") as err:
        inp.synthesize(SPECS, batch=batch, input_shapes=inp.parse_input_shapes(items))
    assert message in str(err.value)


@pytest.mark.parametrize("item", ["ids", "ids=", "ids=2,a", "ids=0,3", "=2,3"])
def test_malformed_input_shape_names_the_format(item):
    with pytest.raises(ValueError, match="NAME=D1,D2"):
        inp.parse_input_shapes([item])


def test_duplicate_input_shape_is_an_error():
    with pytest.raises(ValueError, match="twice"):
        inp.parse_input_shapes(["ids=1,2", "ids=1,3"])


def test_string_inputs_cannot_be_synthesised_and_the_message_says_how_to_pass_them():
    with pytest.raises(ValueError) as err:
        inp.synthesize([InputSpec("text", "string", (None,))], batch=1)
    msg = str(err.value)
    assert "cannot synthesise strings" in msg and "--inputs" in msg and ".npz" in msg and "text" in msg


def test_unknown_rank_needs_an_input_shape():
    spec = InputSpec("x", "float32", None)
    with pytest.raises(ValueError, match="unknown rank"):
        inp.synthesize([spec], batch=1)
    arrays, _, _ = inp.synthesize([spec], batch=2, input_shapes={"x": (2, 3)})
    assert arrays["x"].shape == (2, 3)


def test_a_fixed_batch_dimension_refuses_another_batch():
    with pytest.raises(ValueError, match="fixed batch dimension of 1"):
        inp.synthesize([InputSpec("x", "float32", (1, 4))], batch=8)


def test_npz_inputs_are_checked_by_name_dtype_and_shape(tmp_path):
    specs = [InputSpec("text", "string", (None,)), InputSpec("n", "int64", (None, 2))]
    good = tmp_path / "good.npz"
    np.savez(good, text=np.array(["a b", "c"]), n=np.zeros((2, 2), np.int64))
    arrays, infos = inp.load_npz(str(good), specs, batch=2)
    assert arrays["text"].shape == (2,) and infos[0].source == "file"
    cases = {
        "missing": ({"text": np.array(["a"])}, "missing n"),
        "extra": (
            {"text": np.array(["a"]), "n": np.zeros((1, 2), np.int64), "z": np.zeros(1)},
            "not inputs of the model: z",
        ),
        "dtype": ({"text": np.array(["a"]), "n": np.zeros((1, 2), np.int32)}, "the signature wants int64"),
        "shape": ({"text": np.array(["a"]), "n": np.zeros((1, 3), np.int64)}, "dimension 1 must be 2"),
        "batch": ({"text": np.array(["a", "b", "c"]), "n": np.zeros((3, 2), np.int64)}, "--batch 3"),
    }
    for name, (data, message) in cases.items():
        path = tmp_path / f"{name}.npz"
        np.savez(path, **data)
        with pytest.raises(ValueError, match="--inputs") as err:
            inp.load_npz(str(path), specs, batch=1)
        assert message in str(err.value), (name, str(err.value))
    with pytest.raises(ValueError, match="no such file"):
        inp.load_npz(str(tmp_path / "none.npz"), specs, batch=1)


def test_model_options_travel_to_children_as_flags(tmp_path):
    npz = tmp_path / "in.npz"
    np.savez(npz, x=np.zeros(1))
    o = ModelOptions.from_flags("serve", ["ids=1,64"], 300, None)
    assert o.child_args() == ["--signature", "serve", "--input-shape", "ids=1,64", "--int-max", "300"]
    assert o.plan_args() == ["--signature", "serve", "--input-shape", "ids=1,64"]  # int-max does not change a plan
    assert ModelOptions.from_dict(o.to_dict()) == o
    f = ModelOptions.from_flags(inputs=str(npz))
    assert f.child_args() == ["--inputs", str(npz)] and f.given
    assert not ModelOptions().given
    with pytest.raises(ValueError, match="exclude each other"):
        ModelOptions.from_flags(input_shape=["x=1"], inputs=str(npz))
    with pytest.raises(ValueError, match="--int-max"):
        ModelOptions.from_flags(int_max=0)


def test_compare_names_are_checked():
    assert parse_compare("default,plan,enable,enable-cached,1x2") == (
        "default",
        "plan",
        "enable",
        "enable-cached",
        "1x2",
    )
    assert parse_compare("1x1x2,2x1x1:bt1,1X2X2:BT200") == ("1x1x2", "2x1x1:bt1", "1x2x2:bt200")
    for bad, msg in (
        ("default,2by2", "unknown thread setting '2by2'"),
        ("0x1", "unknown thread setting"),
        ("1x1x0", "positive"),
        ("1x1:bt", "unknown"),
        ("plan,plan", "twice"),
        ("", "at least one"),
    ):
        with pytest.raises(ValueError, match=msg):
            parse_compare(bad)
    with pytest.raises(ValueError, match="no OpenMP"):  # OpenMP settings would change nothing on stock TF
        parse_compare("default,1x1x2", openmp=False)
    assert parse_compare("default,1x2", openmp=False) == ("default", "1x2")


def test_openmp_settings_reach_the_child_environment():
    from tf_autopar.measure.configs import parse_config

    c = parse_config("1x1x2:bt1", openmp=True)
    assert c.env_dict == {
        "TF_NUM_INTEROP_THREADS": "1",
        "TF_NUM_INTRAOP_THREADS": "1",
        "OMP_NUM_THREADS": "2",
        "MKL_NUM_THREADS": "2",
        "KMP_BLOCKTIME": "1",
    }
    assert (c.inter, c.intra, c.omp, c.blocktime, c.name) == (1, 1, 2, 1, "1x1x2:bt1")
    # INTERxINTRA on an OpenMP build: the OpenMP teams follow TF's intra-op count, as in validate's sweep
    assert parse_config("2x1", openmp=True).env_dict["OMP_NUM_THREADS"] == "1"
    assert "OMP_NUM_THREADS" not in parse_config("2x1", openmp=False).env_dict


def test_bench_options_reject_bad_input_before_any_process(tmp_path):
    with pytest.raises(ValueError, match="no such file or directory"):
        BenchOptions(model=str(tmp_path / "missing_model")).check()
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="not a SavedModel"):
        BenchOptions(model=str(tmp_path / "empty")).check()
    bad = tmp_path / "bad.keras"
    bad.write_bytes(b"not a zip")
    with pytest.raises(ValueError, match="not a valid .keras file"):
        BenchOptions(model=str(bad)).check()
    with pytest.raises(ValueError, match="unknown workload"):
        BenchOptions(model="no_such_workload").check()
    with pytest.raises(ValueError, match="apply to model files"):
        BenchOptions(model="alexnet", model_options=ModelOptions(int_max=5)).check()
    for kw, msg in (
        ({"batch": 0}, "--batch"),
        ({"requests": 3, "time_s": 1.0}, "not both"),
        ({"rounds": 0}, "--rounds"),
        ({"streams": 2}, "throughput"),
    ):
        with pytest.raises(ValueError, match=msg):
            BenchOptions(model="alexnet", **kw).check()


def test_the_parent_side_imports_no_tensorflow_and_no_numpy(tmp_path):
    # the bench/validate parents would compete with the processes they measure (numpy starts BLAS threads)
    (tmp_path / "sm").mkdir()
    (tmp_path / "sm" / "saved_model.pb").write_bytes(b"")
    code = (
        "import sys\nfrom tf_autopar.cli.main import build_parser\n"
        "from tf_autopar.models.bench import Bench, BenchOptions\nfrom tf_autopar.models.options import ModelOptions\n"
        "from tf_autopar.validation.harness import make_model_rows\nbuild_parser()\n"
        "o = BenchOptions(model=sys.argv[1], compare=('default', 'plan', '1x1'), "
        "model_options=ModelOptions.from_flags(None, ['x=1,2'], 5, None))\n"
        "Bench(o).close()\nmake_model_rows([sys.argv[1]], None, 2, o.model_options)\n"
        "print('tensorflow' in sys.modules, 'keras' in sys.modules, 'numpy' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "sm")], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "False", "False"]


def _doc(mode: str, per_round: dict[str, list[float]]) -> dict:
    configs = {}
    for name, values in per_round.items():
        runs = []
        for r, v in enumerate(values, 1):
            runs.append(
                {
                    "round": r,
                    "seq": r,
                    "status": "ok",
                    "step_times_s": [v, v],
                    "median_s": v,
                    "throughput_rps": 1.0 / v,
                    "processes": [{"settings": {"inter_op": 1, "intra_op": 2, "env": {}, "cpus": [0, 1]}}],
                }
            )
        configs[name] = {"kind": name, "env": {}, "cpus": [], "runs": runs}
    return {"options": {"mode": mode, "batch": 4}, "batch": 4, "configs": configs}


def test_summary_pairs_rounds_for_the_speedup_over_default():
    # round 2 is twice as slow for everyone (machine drift): per-round pairing cancels it
    s = summarize(_doc("latency", {"default": [0.002, 0.004], "plan": [0.001, 0.002]}))
    assert s["plan"]["speedup_vs_default"]["value"] == pytest.approx(2.0)
    assert s["plan"]["speedup_vs_default"]["paired"]["min"] == pytest.approx(2.0)
    assert s["default"]["speedup_vs_default"] is None
    assert s["plan"]["latency_s"]["p50"] == pytest.approx(0.0015)
    assert s["plan"]["items_per_s"] == pytest.approx(4 * stats_median([1000.0, 500.0]))
    t = summarize(_doc("throughput", {"default": [0.002, 0.004], "plan": [0.004, 0.008]}))
    assert t["plan"]["speedup_vs_default"]["value"] == pytest.approx(0.5)


def stats_median(xs):
    return float(np.median(xs))


def test_model_rows_run_the_model_child_with_their_flags():
    o = ModelOptions.from_flags(None, ["ids=8,32"], 100, None)
    rows = make_model_rows(["/m/sm"], None, 8, o)
    assert [(r.workload, r.mode, r.batch) for r in rows] == [("/m/sm", "infer", 8)]
    cmd = runner_command(DEFAULT_RUNNER, rows[0], Options(steps=4, warmup=1))
    assert cmd[: len(MODEL_RUNNER)] == list(MODEL_RUNNER)
    assert cmd[len(MODEL_RUNNER) :] == [
        "/m/sm",
        "--mode",
        "infer",
        "--batch",
        "8",
        "--steps",
        "4",
        "--size",
        "model",
        "--warmup",
        "1",
        "--json",
        "--input-shape",
        "ids=8,32",
        "--int-max",
        "100",
    ]
    # a workload row keeps the workloads runner, unchanged
    w = runner_command(DEFAULT_RUNNER, RowSpec("alexnet", "infer1", 1, "tiny"), Options(steps=4, warmup=1))
    assert w == [
        *DEFAULT_RUNNER,
        "alexnet",
        "--mode",
        "infer",
        "--batch",
        "1",
        "--steps",
        "4",
        "--size",
        "tiny",
        "--warmup",
        "1",
        "--json",
    ]
    assert [r.batch for r in make_model_rows(["/m/a"], None, None)] == [1]
    assert [(r.mode, r.batch) for r in make_model_rows(["/m/a"], ["infer1", "infer"], 4)] == [
        ("infer1", 1),
        ("infer", 4),
    ]
    with pytest.raises(ValueError, match="inference only"):
        make_model_rows(["/m/a"], ["train"], 4)
    with pytest.raises(ValueError, match="needs --batch"):
        make_model_rows(["/m/a"], ["infer"], None)


def test_inputs_too_large_to_synthesise_are_a_clear_error_before_any_allocation():
    """bench --batch 1000000000 used to end in the child's numpy MemoryError traceback."""
    big = (InputSpec("image", "float32", (None, 224, 224, 3)),)
    with pytest.raises(ValueError, match=r"--batch 100000 would take 56\.1 GiB .*smaller --batch"):
        inp.synthesize(big, batch=100_000)
    arrays, _, _ = inp.synthesize(big, batch=2)
    assert arrays["image"].shape == (2, 224, 224, 3)

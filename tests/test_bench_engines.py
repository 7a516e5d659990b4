"""bench_engines.py's verdicts from saved runs: the figures docs/serving.md quotes are computed here.

Pure: synthetic runs in the shape the benchmark's child records, no TensorFlow, no engine.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
_spec = importlib.util.spec_from_file_location("bench_engines", ROOT / "benchmarks" / "bench_engines.py")
bench_engines = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench_engines)
import user_models  # noqa: E402


def served(cfg: str, ms: list[float], **kw) -> dict:
    """A default/enable run: calls one per 0.1 s."""
    return dict(config=cfg, times_ms=ms, stamps_s=[0.1 * i for i in range(len(ms))], **kw)


def engine(cfg: str, ms: float, diff: float | str, **kw) -> dict:
    return dict(config=cfg, samples_ms=[ms] * 5, max_rel_diff=diff, peak_rss_mb=500.0, **kw)


def row(**configs) -> dict:
    return {"model": "m", "batch": 1, "rounds": [{k.replace("_", "-"): v for k, v in configs.items()}]}


def test_enable_steady_state_is_the_last_third_and_the_window_holds_the_start() -> None:
    run = served("enable", [50.0, 9.0, 9.0, 9.0, 9.0, 9.0, 2.0, 2.0, 2.0, 2.0])
    assert bench_engines.steady(run)[0] == 2.0  # stamps 0.6-0.9 of a run that ends at 0.9
    p50, p99, mean = bench_engines.window(run, 0.35)  # calls at 0.0-0.3
    assert (p50, p99, mean) == (9.0, 50.0, 19.25)


def test_fastest_engine_is_the_fastest_within_tolerance() -> None:
    r = row(
        default=served("default", [10.0] * 10),
        default_again=served("default-again", [10.0] * 10),
        enable=served("enable", [8.0] * 10, max_rel_diff=1e-7),
        tf_frozen=engine("tf-frozen", 6.0, 1e-7, setting="1x2"),
        openvino=engine("openvino", 4.0, 1e-6),
        openvino_bf16=engine("openvino-bf16", 1.0, 3e-2),  # faster, but bf16: not the f32 bar
        onnxruntime=engine("onnxruntime", 2.0, 5e-3),  # faster, but outside 1e-4
    )
    s = bench_engines.row_summary(r, 60.0)
    assert s["fastest"] == ["openvino", 4.0]
    assert s["enable_vs_fastest"] == pytest.approx(0.5)
    assert s["enable_vs_default"] == pytest.approx(1.25)
    assert s["tf-frozen"]["setting"] == "1x2"


def test_bf16_is_judged_against_openvinos_bf16_only_where_its_outputs_pass() -> None:
    def bf16_row(ov_diff: float) -> dict:
        return row(
            default=served("default", [10.0] * 10),
            enable=served("enable", [8.0] * 10),
            openvino_bf16=engine("openvino-bf16", 3.0, ov_diff),
            enable_bf16=served("enable-bf16", [4.0] * 10, runners=[{"engine": "openvino-bf16", "served": 1}]),
        )

    s = bench_engines.row_summary(bf16_row(1e-2), 60.0)
    assert s["bf16_vs_openvino"] == pytest.approx(0.75)
    assert s["enable-bf16"]["engine_end"].startswith("openvino-bf16")
    assert "bf16_vs_openvino" not in bench_engines.row_summary(bf16_row(0.2), 60.0)  # outside the tolerance
    host = {"cpu_model": "X", "cpus": 2, "tf_version": "2", "date": "d"}
    text = bench_engines.summarise({"host": host, "rows": [bf16_row(1e-2), bf16_row(0.2)]})
    assert "OpenVINO's bf16 alone on 0 of 1 rows where OpenVINO bf16's outputs are within 0.05" in text
    # within the relative bound but the top class moved in a row: the fast path would reject it, so no bar
    moved = bf16_row(1e-2)
    moved["rounds"][0]["openvino-bf16"]["bf16_differs"] = "output 1: the top class differs in 1 of 128 rows"
    s = bench_engines.row_summary(moved, 60.0)
    assert "bf16_vs_openvino" not in s and s["openvino-bf16"]["bf16_fails"].endswith("1 of 128 rows")
    text = bench_engines.summarise({"host": host, "rows": [moved]})
    assert "OpenVINO bf16 outside the bf16 check (not a bar): m b1 (output 1: the top class" in text


def test_the_bf16_check_is_the_fast_paths_own(tmp_path: Path) -> None:
    ref = np.array([[0.1, 0.50, 0.49], [0.3, 0.2, 0.1]], dtype=np.float32)
    np.savez(tmp_path / "ref.npz", logits=ref)
    np.savez(tmp_path / "close.npz", logits=ref + 0.004)
    swapped = ref.copy()
    swapped[0, 1:] = [0.49, 0.50]  # 0.02 of the largest value, and the top class moved
    np.savez(tmp_path / "swapped.npz", logits=swapped)
    assert bench_engines.bf16_differs(str(tmp_path / "close.npz"), str(tmp_path / "ref.npz")) == ""
    why = bench_engines.bf16_differs(str(tmp_path / "swapped.npz"), str(tmp_path / "ref.npz"))
    assert why == "output 0: the top class differs in 1 of 2 rows"


def test_a_conversion_failure_is_the_rows_result_not_a_crash() -> None:
    r = row(
        default=served("default", [10.0] * 10),
        enable=served("enable", [8.0] * 10),
        onnxruntime={"config": "onnxruntime", "failed": "conversion or session: InvalidGraph: Erfc"},
        enable_bf16={"config": "enable-bf16", "skipped": "tf_autopar.enable() takes no precision argument"},
    )
    s = bench_engines.row_summary(r, 60.0)
    assert s["onnxruntime"]["failed"].endswith("Erfc")
    assert "fastest" not in s
    text = bench_engines.summarise({"host": {"cpu_model": "X", "cpus": 2, "tf_version": "2", "date": "d"}, "rows": [r]})
    assert "| fails: InvalidGraph |" in text  # the table's cell; the whole line under "failures:"
    assert "- m b1 onnxruntime: conversion or session: InvalidGraph: Erfc" in text
    assert "skipped: tf_autopar.enable() takes no precision argument" in text


def test_the_pacing_ab_compares_the_two_enable_runs_of_a_round() -> None:
    r = row(
        default=served("default", [10.0] * 10),
        enable=served("enable", [6.0] * 5 + [4.0] * 5),
        enable_unpaced=served("enable-unpaced", [9.0] * 5 + [4.0] * 5),
    )
    s = bench_engines.row_summary(r, 0.45)  # the window: the first 5 calls
    assert s["enable"]["mean_window"] == 6.0 and s["enable-unpaced"]["mean_window"] == 9.0
    text = bench_engines.summarise(
        {"host": {"cpu_model": "X", "cpus": 2, "tf_version": "2", "date": "d"}, "rows": [r], "window_s": 0.45}
    )
    assert "| m | 1 | 6.00 / 9.00 | 6.00 / 9.00 | 6.00 / 9.00 | 4.00 / 4.00 |" in text
    assert "first-window mean 1.50x, p99 1.50x, steady state 1.00x" in text


def test_the_best_reachable_is_the_fastest_alone_per_row_capped_by_a_measured_call_ceiling() -> None:
    def model(name: str, ov: float, ort: float) -> dict:
        r = row(
            default=served("default", [10.0] * 10),
            enable=served("enable", [5.0] * 10),
            openvino=engine("openvino", ov, 1e-6),
            onnxruntime=engine("onnxruntime", ort, 1e-6),
        )
        r["model"] = name
        return r

    data = {"host": {"cpu_model": "X", "cpus": 2, "tf_version": "2", "date": "d"}}
    data["rows"] = [model("tiny", 4.0, 2.0), model("big", 4.0, 8.0)]  # ONNX Runtime fastest, then OpenVINO

    def reach(text: str) -> str:
        return next(ln for ln in text.splitlines() if ln.startswith("the most a per-row choice"))

    # against ONNX Runtime alone: 1.0 on its own row, 2.0 on the other: 1.41x at best
    assert "onnxruntime 1.41x over 2" in reach(bench_engines.summarise(data))
    # a wrapper can reach half of ONNX Runtime alone on the tiny row: 0.5 there, 1.0x at best
    capped = reach(bench_engines.summarise(data, {("tiny", 1): 0.5}))
    assert "capped by the measured call ceiling on tiny b1" in capped and "onnxruntime 1.00x over 2" in capped
    assert "openvino 1.41x over 2" in reach(bench_engines.summarise(data))  # 4/2 and 4/4


def test_second_start_names_the_engine_of_its_first_call() -> None:
    run = served("enable-2nd", [3.0, 3.0], fast=[True, True], first_call_runners=[{"engine": "openvino", "served": 1}])
    assert bench_engines.first_call(run) == "fast path: openvino"
    assert bench_engines.first_call(served("enable-2nd", [3.0], fast=[False])) == "original path"
    end = {"runners": [{"engine": "tensorflow", "inter_op": 1, "intra_op": 2, "served": 40}]}
    assert bench_engines.end_engine(end) == "tensorflow 1x2"
    assert bench_engines.end_engine({"buckets": [{"path": "original", "reason": "not faster"}]}) == (
        "not served: original (not faster)"
    )


def test_max_rel_diff_is_relative_to_the_largest_reference_output(tmp_path: Path) -> None:
    ref, other = tmp_path / "ref.npz", tmp_path / "other.npz"
    np.savez(ref, a=np.array([10.0, -20.0]), b=np.array([1.0]))
    np.savez(other, a=np.array([10.0, -19.8]), b=np.array([1.0]))
    assert bench_engines.max_rel_diff(str(other), str(ref)) == pytest.approx(0.01)
    np.savez(other, a=np.array([10.0]), b=np.array([1.0]))
    assert "shape" in bench_engines.max_rel_diff(str(other), str(ref))


@pytest.mark.parametrize("name", user_models.ENGINE_MODELS)
def test_new_architectures_are_declared_everywhere_the_drivers_read(name: str) -> None:
    assert name in user_models.MODELS and name in user_models.SERVING
    for which in ("batch1", "serving"):
        batch = user_models.SERVING[name][which]
        arrays = user_models.make_inputs(name, batch)
        assert sorted(arrays) == sorted(i[0] for i in user_models.INPUTS[name])
        assert all(a.shape[0] == batch for a in arrays.values())


def test_without_a_second_default_run_the_noise_floor_is_two_percent() -> None:
    faster = row(default=served("default", [10.0] * 10), enable=served("enable", [5.0] * 10))
    slower = row(default=served("default", [10.0] * 10), enable=served("enable", [10.5] * 10))
    host = {"cpu_model": "X", "cpus": 2, "tf_version": "2", "date": "d"}
    text = bench_engines.summarise({"host": host, "rows": [faster, slower]})
    assert "not slower than default beyond its noise on 1 of 2" in text
    assert "second start's first call not measured (no enable-2nd)" in text
    assert bench_engines.not_slower(bench_engines.row_summary(faster, 60.0))
    assert not bench_engines.not_slower(bench_engines.row_summary(slower, 60.0))


def test_a_benchmark_child_imports_the_checkout_it_is_given_not_the_working_directorys(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An A/B of two checkouts started from inside one of them measured that one twice: ``-c``
    had put the working directory first on the child's path (bench_fastpath.run_script)."""
    import bench_fastpath

    for where in ("here", "given"):
        (tmp_path / where / "tf_autopar").mkdir(parents=True)
        (tmp_path / where / "tf_autopar" / "__init__.py").write_text(f"WHERE = {where!r}\n")
    monkeypatch.chdir(tmp_path / "here")
    script = "import json, tf_autopar; print('RESULT ' + json.dumps({'where': tf_autopar.WHERE}))"
    res = bench_fastpath.run_script(script, [], bench_fastpath.child_env(root=str(tmp_path / "given")), timeout=60)
    assert res == {"where": "given"}, res


def test_the_p99_ratio_says_when_the_default_ran_a_shorter_window() -> None:
    r = row(default=served("default", [10.0] * 10), enable=served("enable", [8.0] * 10))
    host = {"cpu_model": "X", "cpus": 2, "tf_version": "2", "date": "d"}
    base = {"host": host, "rows": [r], "window_s": 60.0, "engine_seconds": 10.0}
    assert "the p99 ratio is not like for like" in bench_engines.summarise(base)  # older runs: default at 10 s
    assert "not like for like" not in bench_engines.summarise({**base, "default_seconds": 60.0})


def test_several_runs_summarise_each_row_from_the_last_that_measured_it() -> None:
    host = {"cpu_model": "X", "cpus": 2, "tf_version": "2", "date": "d"}
    old = row(default=served("default", [10.0] * 10), enable=served("enable", [8.0] * 10))
    again = {**old, "rounds": old["rounds"] * 3}
    again["rounds"] = [{**r, "enable": served("enable", [5.0] * 10)} for r in again["rounds"]]
    other = {**old, "model": "n"}
    merged = bench_engines.latest_rows(
        [("a.json", {"host": host, "rows": [old, other]}), ("b.json", {"host": host, "rows": [again]})]
    )
    assert [(r["model"], len(r["rounds"])) for r in merged["rows"]] == [("m", 3), ("n", 1)]  # m replaced whole
    assert bench_engines.row_summary(merged["rows"][0], 60.0)["enable_vs_default"] == pytest.approx(2.0)
    assert "rows (rounds) from b.json: m b1 (3)" in bench_engines.summarise(merged)
    with pytest.raises(ValueError, match="different processors"):
        bench_engines.latest_rows(
            [("a", {"host": host, "rows": []}), ("b", {"host": {**host, "cpu_model": "Y"}, "rows": []})]
        )

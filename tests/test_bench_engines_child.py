"""bench_engines.py's ``onnxruntime`` arm, run for real: ONNX Runtime alone on a SavedModel
converted the way tf2onnx's README shows a user (its command line on the SavedModel). The Python
API alone failed on two held-out models whose command-line conversion serves, which made ONNX
Runtime look absent on rows where a user would have had it."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnxruntime")
pytest.importorskip("tf2onnx")
tf = pytest.importorskip("tensorflow")

pytestmark = pytest.mark.tf

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
_spec = importlib.util.spec_from_file_location("bench_engines", ROOT / "benchmarks" / "bench_engines.py")
bench_engines = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench_engines)


class _Scorer(tf.Module):
    def __init__(self) -> None:
        rng = np.random.default_rng(3)
        self.w = tf.Variable(rng.standard_normal((6, 4)).astype(np.float32))
        self.b = tf.Variable(rng.standard_normal(4).astype(np.float32))

    @tf.function(input_signature=[tf.TensorSpec([None, 6], tf.float32, name="features")])
    def serve(self, features):
        return {"scores": tf.nn.softmax(tf.matmul(features, self.w) + self.b)}


def test_onnxruntime_alone_serves_the_command_line_conversion_with_the_signatures_outputs(tmp_path: Path) -> None:
    model = _Scorer()
    tf.saved_model.save(model, str(tmp_path / "scorer"), signatures={"serving_default": model.serve})
    rowdir = tmp_path / "row"
    rowdir.mkdir()
    features = np.random.default_rng(4).standard_normal((3, 6)).astype(np.float32)
    np.savez(rowdir / "inputs.npz", features=features)

    res = bench_engines.run_child(
        "onnxruntime", str(tmp_path), "scorer", 3, 0.2, str(tmp_path / "cache"), str(rowdir), "r0"
    )

    assert "failed" not in res and "error" not in res, res
    assert res["converter"] == "tf2onnx command line, --saved-model"
    assert "converter_failures" not in res
    assert res["samples_ms"] and res["convert_s"] > 0
    with np.load(res["outputs_file"]) as out:
        expected = model.serve(tf.constant(features))["scores"].numpy()
        np.testing.assert_allclose(out["scores"], expected, rtol=1e-5, atol=1e-6)
    assert not list(rowdir.glob("*.onnx"))  # the converted file is not left in the row's directory

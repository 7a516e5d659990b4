"""SavedModel analysis without starting TensorFlow's runtime; bad input; the CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.tf

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

from tf_autopar.cli.main import main  # noqa: E402
from tf_autopar.graph import analyze  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CHILD = textwrap.dedent(
    """
    import json, sys
    from tf_autopar.graph import analyze
    profiles = [analyze(path) for path in sys.argv[1:]]
    from tensorflow.python.eager import context
    unstarted = context.context()._context_handle is None
    import tensorflow as tf
    tf.config.threading.set_inter_op_parallelism_threads(3)
    tf.config.threading.set_intra_op_parallelism_threads(1)
    print(json.dumps({"profiles": [{"heavy": p.heavy_ops, "depth": p.depth, "widths": list(p.level_widths),
                                    "source": p.source} for p in profiles],
                      "unstarted": unstarted, "inter": tf.config.threading.get_inter_op_parallelism_threads()}))
    """
)


def analyze_in_fresh_process(*paths):
    env = {
        **os.environ,
        "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
        "TF_CPP_MIN_LOG_LEVEL": "2",
    }
    out = subprocess.run(
        [sys.executable, "-c", CHILD, *map(str, paths)], capture_output=True, text=True, env=env, timeout=300
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


class Branchy(tf.Module):
    def __init__(self):
        super().__init__()
        self.w = [tf.Variable(tf.eye(4)) for _ in range(3)]

    @tf.function(input_signature=[tf.TensorSpec((None, 4))])
    def helper(self, x):
        return tf.matmul(tf.matmul(x, self.w[0]), self.w[0])

    # two signed functions: tf.saved_model.save makes no default signature then
    @tf.function(input_signature=[tf.TensorSpec((None, 4))])
    def run(self, x):
        a = self.helper(x)
        b = tf.matmul(x, self.w[1])
        c = tf.matmul(x, self.w[2])
        return tf.matmul(a + b + c, self.w[1])


def test_saved_model_round_trip_without_starting_the_runtime(tmp_path):
    module = Branchy()
    expected = analyze(module.run)
    assert (expected.heavy_ops, expected.depth, expected.level_widths) == (5, 3, (3, 1, 1))
    tf.saved_model.save(module, str(tmp_path / "plain"))  # no signature: the entry function
    tf.saved_model.save(module, str(tmp_path / "sig"), signatures=module.run)
    got = analyze_in_fresh_process(tmp_path / "plain", tmp_path / "sig")
    assert got["unstarted"] and got["inter"] == 3, got
    for profile in got["profiles"]:
        assert (profile["heavy"], profile["depth"], tuple(profile["widths"])) == (5, 3, (3, 1, 1)), got
    assert "entry function" in got["profiles"][0]["source"]
    assert "signature serving_default" in got["profiles"][1]["source"]


def test_keras_model_export_matches_predict_analysis(tmp_path):
    inp = keras.Input((8,))
    a = keras.layers.Dense(4)(inp)
    b = keras.layers.Dense(4)(keras.layers.Dense(4)(inp))
    model = keras.Model(inp, keras.layers.Dense(1)(keras.layers.Concatenate()([a, b])))
    expected = analyze(model)
    model.export(str(tmp_path / "k"), verbose=False)
    got = analyze(str(tmp_path / "k"))
    assert (got.heavy_ops, got.depth, got.level_widths) == (expected.heavy_ops, expected.depth, expected.level_widths)
    assert (got.heavy_ops, got.depth) == (4, 3)


def test_bad_paths(tmp_path):
    with pytest.raises(FileNotFoundError, match="no_such_dir"):
        analyze(str(tmp_path / "no_such_dir"))
    with pytest.raises(
        FileNotFoundError, match=r"neither an existing path nor a bundled workload \(workloads: alexnet, .*wide_deep\)"
    ):
        analyze("surely_not_a_workload_name")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="has no saved_model.pb/saved_model.pbtxt"):
        analyze(str(tmp_path / "empty"))
    module = Branchy()
    tf.saved_model.save(module, str(tmp_path / "sm"))
    pb = tmp_path / "sm" / "saved_model.pb"
    pb.write_bytes(pb.read_bytes()[:-37])
    with pytest.raises(ValueError, match="corrupt SavedModel protobuf .*saved_model.pb"):
        analyze(str(tmp_path / "sm"))
    pb.write_bytes(b"")
    with pytest.raises(ValueError, match="corrupt SavedModel protobuf .*no MetaGraph"):
        analyze(str(tmp_path / "sm"))


def test_signature_selection_errors(tmp_path):
    module = Branchy()
    tf.saved_model.save(module, str(tmp_path / "sig"), signatures=module.run)
    with pytest.raises(ValueError, match=r"no signature 'nope'; it has \['serving_default'\]"):
        analyze(str(tmp_path / "sig"), signature="nope")


def test_graph_def_file(tmp_path):
    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, (2, 2))
        tf.matmul(tf.matmul(x, x), tf.matmul(x, x))
    tf.io.write_graph(g.as_graph_def(), str(tmp_path), "g.pb", as_text=False)
    tf.io.write_graph(g.as_graph_def(), str(tmp_path), "g.pbtxt", as_text=True)
    for name in ("g.pb", "g.pbtxt"):
        p = analyze(str(tmp_path / name))
        assert (p.heavy_ops, p.depth, p.max_width) == (3, 2, 2)


def test_cli_analyze_json_text_and_plot(tmp_path, capsys):
    module = Branchy()
    tf.saved_model.save(module, str(tmp_path / "sm"))
    assert main(["analyze", str(tmp_path / "sm"), "--json", "--plot", str(tmp_path / "w.png")]) == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["heavy_ops"], data["depth"], data["avg_width"], data["max_width"]) == (5, 3, 1, 3)
    assert (tmp_path / "w.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main(["analyze", str(tmp_path / "sm")]) == 0
    text = capsys.readouterr().out
    assert "heavy ops:     5" in text and "maximum width: 3" in text and "MatMul 5" in text
    assert main(["analyze", str(tmp_path / "missing")]) == 2
    assert "missing" in capsys.readouterr().err

"""Plan rendering: env lines, JSON round-trip, TF Serving flags, Python snippet, text. No TensorFlow."""
from __future__ import annotations

import json
import shlex
import subprocess
import sys

import pytest

from tf_autopar.planning import BASELINES, FORMATS, ThreadPlan, baseline_plan, plan

try:
    from test_planner_hosts import hosts
except ImportError:  # tests/ imported as a package
    from tests.test_planner_hosts import hosts


def _all_plans():
    for runtime in ("eigen", "openmp"):
        for name, t in hosts(runtime).items():
            for mode in ("latency", "throughput", "training"):
                yield f"{runtime}-{name}-{mode}", plan(t, mode=mode, width=3, env={"KMP_HW_SUBSET": "1s"})
            for b in BASELINES:
                yield f"{runtime}-{name}-{b}", baseline_plan(b, t)


PLANS = dict(_all_plans())


def test_env_eigen_has_only_tf_variables():
    p = plan(hosts("eigen")["skylake"], width=3)
    assert p.to_env() == {"TF_NUM_INTEROP_THREADS": "3", "TF_NUM_INTRAOP_THREADS": "24"}


def test_env_openmp_has_omp_mkl_kmp():
    p = plan(hosts("openmp")["skylake"], width=3)
    assert p.to_env() == {
        "TF_NUM_INTEROP_THREADS": "3", "TF_NUM_INTRAOP_THREADS": "8", "OMP_NUM_THREADS": "8",
        "MKL_NUM_THREADS": "8", "KMP_BLOCKTIME": "1", "KMP_AFFINITY": "granularity=fine,compact,1,0",
    }


def test_env_lines_parse_back():
    p = plan(hosts("openmp")["arm"], width=2, env={"KMP_HW_SUBSET": "1s, 8c"})
    text = p.format("env")
    parsed = dict(shlex.split(line)[0].split("=", 1) for line in text.splitlines())
    assert parsed == p.to_env() and parsed["KMP_HW_SUBSET"] == "1s, 8c"


@pytest.mark.parametrize("key", sorted(PLANS))
def test_json_round_trip(key):
    p = PLANS[key]
    again = ThreadPlan.from_json(p.to_json())
    assert again == p
    assert json.loads(p.format("json"))["inter_op"] == p.inter_op
    assert again.explain() == p.explain()


def test_from_dict_rejects_unknown_and_missing_fields():
    d = plan(hosts()["this"]).to_dict()
    with pytest.raises(ValueError, match="unknown ThreadPlan field"):
        ThreadPlan.from_dict({**d, "threads": 3})
    del d["intra_op"]
    with pytest.raises(ValueError, match="intra_op"):
        ThreadPlan.from_dict(d)


def test_config_proto_fields():
    p = plan(hosts()["skylake"], width=3)
    assert p.config_proto_fields() == {
        "inter_op_parallelism_threads": 3, "intra_op_parallelism_threads": 24, "use_per_session_threads": False}
    t = plan(hosts()["this"], mode="throughput")
    assert t.config_proto_fields()["use_per_session_threads"] is True


def test_tfserving_flags_latency():
    p = plan(hosts("openmp")["skylake"], width=3)
    assert p.tfserving_flags() == ["--tensorflow_intra_op_parallelism=8", "--tensorflow_inter_op_parallelism=3"]


def test_tfserving_flags_and_batching_for_throughput():
    p = plan(hosts("eigen")["epyc"], mode="throughput", width=1)
    # 16 streams of 1 x 4 in one server: inter 16 x 1, shared Eigen intra pool 16 x 4 = 64
    assert p.tfserving_flags() == [
        "--tensorflow_intra_op_parallelism=64", "--tensorflow_inter_op_parallelism=16",
        "--enable_batching", "--batching_parameters_file=batching_parameters.txt",
    ]
    params = p.batching_parameters()
    assert "num_batch_threads { value: 16 }" in params and "max_enqueued_batches { value: 32 }" in params
    assert "max_batch_size { value: 32 }" in params
    assert "# batching_parameters.txt:" in p.format("tfserving")
    q = plan(hosts("openmp")["epyc"], mode="throughput", width=2)
    # OpenMP: the intra flag is one op's team (4 // 2 = 2); inter 16 streams x 2
    assert q.tfserving_flags()[:2] == ["--tensorflow_intra_op_parallelism=2", "--tensorflow_inter_op_parallelism=32"]
    with pytest.raises(ValueError):
        p.batching_parameters(max_batch_size=0)


@pytest.mark.parametrize("key", sorted(PLANS))
def test_python_snippet_compiles(key):
    snippet = PLANS[key].python_snippet()
    compile(snippet, f"<snippet {key}>", "exec")
    assert "import tensorflow as tf" in snippet


def test_python_snippet_content():
    p = plan(hosts("openmp")["skylake"], mode="training", width=3)
    s = p.python_snippet()
    assert "tf.config.threading.set_inter_op_parallelism_threads(int(os.environ['TF_NUM_INTEROP_THREADS']))" in s
    assert "tf.config.threading.set_intra_op_parallelism_threads(int(os.environ['TF_NUM_INTRAOP_THREADS']))" in s
    assert "os.environ.setdefault('TF_NUM_INTEROP_THREADS', '3')" in s
    assert "os.environ.setdefault('OMP_NUM_THREADS', '8')" in s
    assert "private_threadpool_size = 24" in s
    bound = plan(hosts()["skylake"], width=1).python_snippet()
    assert "os.sched_setaffinity(0, [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11])" in bound
    assert "tf.config.threading" not in baseline_plan("tf-default", hosts()["this"]).python_snippet()


def test_python_snippet_environment_part_runs():
    """Run the snippet up to the TensorFlow import in a fresh interpreter: it sets the variables."""
    p = plan(hosts("openmp")["this"], width=1, env={"KMP_HW_SUBSET": "1s"})
    head = p.python_snippet().split("import tensorflow as tf")[0]
    code = head + "import json\nprint(json.dumps({k: os.environ[k] for k in %r}))\n" % sorted(p.to_env())
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env={"PATH": "/usr/bin:/bin"}, check=True)
    assert json.loads(out.stdout) == p.to_env()


def test_text_format_and_unknown_format():
    p = plan(hosts()["this"])
    assert p.format("text") == p.explain() + "\n"
    assert set(FORMATS) == {"env", "json", "tfserving", "python", "text"}
    with pytest.raises(ValueError, match="unknown format 'yaml'"):
        p.format("yaml")


def test_explain_is_a_few_lines_naming_mode_and_numbers():
    text = plan(hosts("openmp")["skylake"], width=3).explain()
    assert text.startswith("tf_autopar plan, latency mode: inter_op=3 intra_op=8 OMP/MKL=8")
    assert len(text.splitlines()) <= 16


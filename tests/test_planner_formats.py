"""Plan rendering: env lines, JSON round-trip, TF Serving flags, Python snippet, text. No TensorFlow."""

from __future__ import annotations

import ast
import dataclasses
import json
import re
import shlex
import subprocess
import sys

import pytest

from tf_autopar.planning import FORMATS, ThreadPlan, baseline_names, baseline_plan, plan
from tf_autopar.topology.cpulist import format_cpulist

try:
    from test_planner_hosts import hosts
except ImportError:  # tests/ imported as a package
    from tests.test_planner_hosts import hosts


def _all_plans():
    for runtime in ("eigen", "openmp"):
        for name, t in hosts(runtime).items():
            for mode in ("latency", "throughput", "training"):
                yield f"{runtime}-{name}-{mode}", plan(t, mode=mode, width=3, env={"KMP_HW_SUBSET": "1s"})
            for b in baseline_names():
                yield f"{runtime}-{name}-{b}", baseline_plan(b, t)


PLANS = dict(_all_plans())


def test_env_eigen_has_only_tf_variables():
    p = plan(hosts("eigen")["skylake"], width=3)
    assert p.to_env() == {"TF_NUM_INTEROP_THREADS": "3", "TF_NUM_INTRAOP_THREADS": "24"}


def test_env_openmp_has_omp_mkl_kmp():
    p = plan(hosts("openmp")["skylake"], width=3)
    assert p.to_env() == {
        "TF_NUM_INTEROP_THREADS": "3",
        "TF_NUM_INTRAOP_THREADS": "1",
        "OMP_NUM_THREADS": "8",
        "MKL_NUM_THREADS": "8",
        "KMP_BLOCKTIME": "1",
        "KMP_AFFINITY": "granularity=fine,compact,1,0",
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
        "inter_op_parallelism_threads": 3,
        "intra_op_parallelism_threads": 24,
        "use_per_session_threads": False,
    }
    t = plan(hosts()["this"], mode="throughput")
    assert t.config_proto_fields()["use_per_session_threads"] is True


def test_tfserving_flags_latency():
    p = plan(hosts("openmp")["skylake"], width=3)
    # OpenMP: TF's own pool gets 1 thread; the teams' 8 threads come from OMP_NUM_THREADS
    assert p.tfserving_flags() == ["--tensorflow_intra_op_parallelism=1", "--tensorflow_inter_op_parallelism=3"]
    assert "OMP_NUM_THREADS=8" in p.format("tfserving")


def test_tfserving_flags_and_batching_for_throughput():
    p = plan(hosts("eigen")["epyc"], mode="throughput", width=1)
    # 16 streams of 1 x 4 in one server: inter 16 x 1, shared Eigen intra pool 16 x 4 = 64
    assert p.tfserving_flags() == [
        "--tensorflow_intra_op_parallelism=64",
        "--tensorflow_inter_op_parallelism=16",
        "--enable_batching",
        "--batching_parameters_file=batching_parameters.txt",
    ]
    params = p.batching_parameters()
    assert "num_batch_threads { value: 16 }" in params and "max_enqueued_batches { value: 32 }" in params
    assert "max_batch_size { value: 32 }" in params
    assert "# batching_parameters.txt (write it" in p.format("tfserving")
    q = plan(hosts("openmp")["epyc"], mode="throughput", width=2)
    # OpenMP: TF's own pool 1 thread, teams of 4 // 2 = 2 (OMP_NUM_THREADS); inter 16 streams x 2
    assert q.tfserving_flags()[:2] == ["--tensorflow_intra_op_parallelism=1", "--tensorflow_inter_op_parallelism=32"]
    assert q.omp_threads == 2
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
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin"},
        check=True,
    )
    assert json.loads(out.stdout) == p.to_env()


def test_text_format_and_unknown_format():
    p = plan(hosts()["this"])
    assert p.format("text") == p.explain() + "\n"
    assert set(FORMATS) == {"env", "json", "tfserving", "python", "text"}
    with pytest.raises(ValueError, match="unknown format 'yaml'"):
        p.format("yaml")


def test_explain_is_a_few_lines_naming_mode_and_numbers():
    text = plan(hosts("openmp")["skylake"], width=3).explain()
    assert text.startswith("tf_autopar plan, latency mode: inter_op=3 intra_op=1 OMP/MKL=8")
    assert len(text.splitlines()) <= 16


# ---------------------------------------------------------------- every format, the same plan

_SUMMARY = re.compile(r"plan, \w+ mode: (?:(\d+) instances, each )?inter_op=(\d+) intra_op=(\d+)(?: OMP/MKL=(\d+))?")
_OMP_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "KMP_BLOCKTIME", "KMP_AFFINITY")


def _from_summary(text: str) -> dict:
    m = _SUMMARY.search(text)
    assert m, text
    return {"instances": int(m.group(1) or 1), "inter": int(m.group(2)), "intra": int(m.group(3))}


def _facts(fmt: str, text: str) -> dict:
    """(instances, inter, intra, CPU lists, OpenMP variables) read back from one rendering, by
    that format's own syntax, as a person or a script would read it."""
    if fmt == "json":
        d = json.loads(text)
        env = ThreadPlan.from_dict(d).to_env()
        return {
            "instances": d["instances"],
            "inter": d["inter_op"],
            "intra": d["intra_op"],
            "cpus": [format_cpulist(g) for g in d["cpus"]],
            "omp": {k: env[k] for k in _OMP_VARS if k in env},
        }
    if fmt == "env":
        env = dict(shlex.split(line)[0].split("=", 1) for line in text.splitlines())
        return {
            "instances": int(env.get("TF_AUTOPAR_INSTANCES", "1")),
            "inter": int(env["TF_NUM_INTEROP_THREADS"]),
            "intra": int(env["TF_NUM_INTRAOP_THREADS"]),
            "cpus": env["TF_AUTOPAR_CPUS"].split(":") if "TF_AUTOPAR_CPUS" in env else [],
            "omp": {k: env[k] for k in _OMP_VARS if k in env},
        }
    facts = _from_summary(text)
    if fmt == "text":
        listed = re.search(r"^  - cpus = (.+) \[planned\]", text, re.M)
        facts["cpus"] = listed.group(1).split(" | ") if listed else []
        why = dict(re.findall(r"^  - (\w+) = (.+?) \[\w+\]", text, re.M))
        omp = {
            "OMP_NUM_THREADS": why.get("omp_threads"),
            "KMP_BLOCKTIME": why.get("kmp_blocktime"),
            "KMP_AFFINITY": why.get("kmp_affinity"),
        }
        if omp["OMP_NUM_THREADS"]:
            omp["MKL_NUM_THREADS"] = re.search(r"OMP/MKL=\d+/?(\d+)?", text).group(1) or omp["OMP_NUM_THREADS"]
        facts["omp"] = {k: v for k, v in omp.items() if v}
    elif fmt == "python":
        facts["cpus"] = [
            format_cpulist(ast.literal_eval(g)) for g in re.findall(r"sched_setaffinity\(0, (\[[\d, ]*\])\)", text)
        ]
        env = dict(re.findall(r"os\.environ\.setdefault\('(\w+)', '([^']*)'\)", text))
        facts["omp"] = {k: env[k] for k in _OMP_VARS if k in env}
        assert (int(env["TF_NUM_INTEROP_THREADS"]), int(env["TF_NUM_INTRAOP_THREADS"])) == (
            facts["inter"],
            facts["intra"],
        )
    elif fmt == "tfserving":
        head = text.splitlines()[0]
        facts["cpus"] = head.split("bound to CPUs ")[1].split(" | ") if "bound to CPUs " in head else []
        served = re.search(r"^# the server's environment: (.+)$", text, re.M)
        env = dict(w.split("=", 1) for w in shlex.split(served.group(1))) if served else {}
        facts["omp"] = {k: env[k] for k in _OMP_VARS if k in env}
        # the one server's flags are the instances' totals, as the plan's runtime shares them
        flags = dict(re.findall(r"--tensorflow_(\w+)_op_parallelism=(\d+)", text))
        n = facts["instances"]
        assert int(flags["inter"]) == n * facts["inter"]
        assert int(flags["intra"]) == (facts["intra"] if facts["omp"] else n * facts["intra"])
    return facts


def _fixture_topology(root: str, runtime: str):
    from tf_autopar.topology import detect_topology

    return dataclasses.replace(detect_topology(root=root), threading_runtime=runtime)


@pytest.mark.parametrize("runtime", ["eigen", "openmp"])
@pytest.mark.parametrize("mode", ["throughput", "latency", "training"])
@pytest.mark.parametrize("host", ["skylake-2s-24c-48t", "epyc-4numa-64c", "this-host-2c"])
def test_every_format_carries_the_same_plan(host, mode, runtime, host_root):
    """A person reading any one format learns the same plan: instances, each one's CPUs and
    threads, and the OpenMP variables (recorded many-core hosts, every mode)."""
    p = plan(_fixture_topology(host_root(host), runtime), mode=mode, width=1 if mode == "latency" else None)
    expected = {
        "instances": p.instances,
        "inter": p.inter_op,
        "intra": p.intra_op,
        "cpus": [format_cpulist(g) for g in p.cpus],
        "omp": {k: v for k, v in p.to_env().items() if k in _OMP_VARS},
    }
    if host != "this-host-2c" and mode == "throughput":
        assert p.instances > 1 and len(p.cpus) == p.instances  # the case the formats used to lose
    if runtime == "openmp":
        assert expected["omp"]  # the OpenMP variables are part of what must agree
    for fmt in FORMATS:
        assert _facts(fmt, p.format(fmt)) == expected, fmt


def test_cli_tfserving_writes_the_batching_file(tmp_path, capsys, host_root):
    from tf_autopar.cli.main import main

    root = host_root("skylake-2s-24c-48t")
    path = tmp_path / "batching.txt"
    assert (
        main(
            [
                "plan",
                "--root",
                root,
                "--mode",
                "throughput",
                "--format",
                "tfserving",
                "--batching-file",
                str(path),
                "--batch",
                "8",
            ]
        )
        == 0
    )
    out, err = capsys.readouterr()
    assert f"--batching_parameters_file={path}" in out and f"wrote {path}" in err
    written = path.read_text()
    instances = int(_from_summary(out)["instances"])
    assert "max_batch_size { value: 8 }" in written and f"num_batch_threads {{ value: {instances} }}" in written
    assert "max_batch_size" not in out  # the content is in the file, not repeated as comments
    # given again, the file is the user's: read for the batch, never overwritten
    path.write_text("max_batch_size { value: 16 }\n")
    assert (
        main(["plan", "--root", root, "--mode", "throughput", "--format", "tfserving", "--batching-file", str(path)])
        == 0
    )
    assert path.read_text() == "max_batch_size { value: 16 }\n" and "kept" in capsys.readouterr().err
    # a latency plan does not batch: a missing file is an error naming why
    assert main(["plan", "--root", root, "--format", "tfserving", "--batching-file", str(tmp_path / "no")]) == 2
    assert "only a throughput plan batches" in capsys.readouterr().err

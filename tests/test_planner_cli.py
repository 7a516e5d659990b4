"""`tf-autopar plan`: argument handling on hand-built topologies, and the whole command on the
recorded fixture hosts (tests/fixtures/hosts) read by the real topology reader. No TensorFlow."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tf_autopar.cli.main import build_parser, main
from tf_autopar.cli.plan_cmd import build_plan
from tf_autopar.planning.user_settings import ENV_VARS

try:
    from test_planner_hosts import hosts, make_topology
except ImportError:  # tests/ imported as a package
    from tests.test_planner_hosts import hosts, make_topology

FIXTURES = Path(__file__).parent / "fixtures" / "hosts"


def _args(*argv):
    return build_parser().parse_args(["plan", *argv])


def test_build_plan_from_arguments():
    p = build_plan(_args("--width", "3", "--mode", "training"), hosts("openmp")["skylake"], {})
    assert (p.mode, p.inter_op, p.omp_threads, p.tf_data_threads) == ("training", 3, 8, 24)
    t = build_plan(_args("--mode", "throughput", "--streams", "2"), hosts()["skylake"], {})
    assert t.instances == 2 and t.intra_op == 12
    h = build_plan(_args("--hyperthreads", "--mode", "training"), hosts()["skylake"], {})
    assert h.intra_op == 48
    d = build_plan(_args("--tf-data"), hosts()["this"], {})
    assert d.inter_op == 2


def test_build_plan_baseline_and_env():
    b = build_plan(_args("--baseline", "intel-recommended"), hosts()["skylake"], {"OMP_NUM_THREADS": "3"})
    assert (b.name, b.inter_op, b.omp_threads) == ("intel-recommended", 2, 24)
    p = build_plan(_args("--width", "2"), hosts()["arm"], {"TF_NUM_INTRAOP_THREADS": "5"})
    assert p.intra_op == 5 and p.user_settings == {"TF_NUM_INTRAOP_THREADS": "5"}


def test_model_and_width_together_is_an_error():
    with pytest.raises(ValueError, match="not both"):
        build_plan(_args("resnet50", "--width", "2"), hosts()["this"], {})


def test_model_that_is_neither_path_nor_workload():
    with pytest.raises(FileNotFoundError, match="neither an existing path nor a bundled workload"):
        build_plan(_args("no_such_model_xyz"), hosts()["this"], {})


def test_json_flag_equals_format_json():
    assert _args("--json").json and _args("--format", "json").format == "json"


# ---------------------------------------------------------------- whole command on fixture hosts


@pytest.fixture
def clean_env(monkeypatch):
    for name in ENV_VARS:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def _fixture(name):
    path = FIXTURES / name
    assert path.is_dir(), f"no recorded host {name!r} in {FIXTURES}"
    return str(path)


def _run_json(capsys, *argv):
    assert main(["plan", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_cli_skylake_fixture(clean_env, capsys):
    root = _fixture("skylake-2s-24c-48t")
    out = _run_json(capsys, "--root", root, "--width", "1")
    # 24 physical cores on 2 sockets; width 1 -> socket 0 (12 cores, CPUs 0-11)
    assert out["inter_op"] == 1 and out["intra_op"] == 12 and out["cpus"] == [list(range(12))]
    wide = _run_json(capsys, "--root", root, "--width", "3")
    expected = (3, 8) if wide["runtime"] == "openmp" else (3, 24)
    assert (wide["inter_op"], wide["intra_op"]) == expected and wide["cpus"] == []


def test_cli_quota_fixture(clean_env, capsys):
    root = _fixture("container-v2-quota-2.5")
    out = _run_json(capsys, "--root", root, "--width", "2")
    assert (out["inter_op"], out["usable_cpus"], out["cpus"]) == (2, 2, [[0, 1]])
    assert main(["plan", "--root", root]) == 0
    assert "throttled" in capsys.readouterr().out


def test_cli_epyc_throughput_fixture(clean_env, capsys):
    out = _run_json(capsys, "--root", _fixture("epyc-4numa-64c"), "--mode", "throughput")
    assert out["instances"] == 16 and all(len(c) == 4 for c in out["cpus"])


def test_cli_env_format_and_user_settings(clean_env, capsys):
    root = _fixture("this-host-2c")
    assert main(["plan", "--root", root, "--format", "env"]) == 0
    assert capsys.readouterr().out == "TF_NUM_INTEROP_THREADS=2\nTF_NUM_INTRAOP_THREADS=2\n"  # no model: TF's default
    clean_env.setenv("TF_NUM_INTRAOP_THREADS", "1")
    out = _run_json(capsys, "--root", root)
    assert out["intra_op"] == 1 and out["user_settings"] == {"TF_NUM_INTRAOP_THREADS": "1"}


def test_cli_other_formats(clean_env, capsys):
    root = _fixture("skylake-2s-24c-48t")
    assert main(["plan", "--root", root, "--format", "python", "--width", "2"]) == 0
    compile(capsys.readouterr().out, "<plan>", "exec")
    assert main(["plan", "--root", root, "--format", "tfserving", "--mode", "throughput"]) == 0
    assert "--enable_batching" in capsys.readouterr().out
    assert main(["plan", "--root", root, "--baseline", "tf-default"]) == 0
    assert "TensorFlow picks: 48 threads" in capsys.readouterr().out


def test_cli_bad_input_exit_code(clean_env, capsys):
    root = _fixture("this-host-2c")
    assert main(["plan", "--root", root, "--width", "0"]) == 2
    assert "width must be a positive integer" in capsys.readouterr().err
    assert main(["plan", "--root", root, "--mode", "throughput", "--streams", "9"]) == 2
    assert "exceeds the budget of 2" in capsys.readouterr().err
    clean_env.setenv("TF_NUM_INTEROP_THREADS", "abc")
    assert main(["plan", "--root", root]) == 2
    assert "TF_NUM_INTEROP_THREADS='abc'" in capsys.readouterr().err


def test_cli_does_not_import_tensorflow():
    root = _fixture("this-host-2c")
    code = (
        "import sys\nfrom tf_autopar.cli.main import main\n"
        f"assert main(['plan', '--root', {root!r}, '--width', '2', '--json']) == 0\n"
        "assert 'tensorflow' not in sys.modules, 'tensorflow imported'\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ENV_VARS}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[1]) + os.pathsep + env.get("PYTHONPATH", "")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120, env=env, capture_output=True)


def test_text_reports_a_given_width_as_given_and_counts_in_english(clean_env, capsys):
    from tf_autopar.planning import plan

    text = plan(hosts()["this"], width=3).explain()
    assert "model width 3 (given, not analysed)" in text
    assert "heavy ops" not in text and "depth" not in text and "max width" not in text  # nothing was analysed
    one = plan(make_topology(1, 1, 1, 1), width=1).explain()
    assert "1 logical CPU on 1 physical core (1 per core), 1 socket, 1 NUMA node" in one
    assert "usable: 1 core\n" in one + "\n" and "it gets its CPU" in one
    assert not re.search(r"\b1 (CPUs|cores|sockets)\b", one), one
    bound = plan(hosts()["skylake"], mode="throughput", streams=2).explain()
    assert "cpus = 0-11 | 12-23 [planned]" in bound and "['" not in bound


def test_size_is_a_choice_and_a_misspelt_workload_lists_the_names(clean_env, capsys):
    assert _args("--size", "paper").size == "paper" and _args().size == "tiny"
    with pytest.raises(SystemExit):
        _args("--size", "huge")
    assert "invalid choice: 'huge'" in capsys.readouterr().err
    for command in (["plan", "inceptoin_v3"], ["analyze", "inceptoin_v3"]):
        assert main(command) == 2
        err = capsys.readouterr().err
        assert "'inceptoin_v3' is neither an existing path nor a bundled workload" in err
        assert "inception_v3" in err.split("workloads:")[1], err

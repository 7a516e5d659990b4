"""`tf-autopar run` with real child processes (no TensorFlow needed)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def launcher(args, env=None, **kw):
    full = {
        k: v for k, v in os.environ.items() if not k.startswith(("TF_NUM_", "TF_AUTOPAR")) or k == "TF_AUTOPAR_ENGINES"
    }
    full["PYTHONPATH"] = ROOT
    full.update(env or {})
    return subprocess.Popen(
        [sys.executable, "-m", "tf_autopar.cli.main", "run", *args],
        env=full,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kw,
    )


REPORT = (
    "import os, json; print(json.dumps({'i': os.environ['TF_AUTOPAR_INSTANCE'], "
    "'n': os.environ['TF_AUTOPAR_INSTANCES'], 'cpus': sorted(os.sched_getaffinity(0)), "
    "'inter': os.environ.get('TF_NUM_INTEROP_THREADS'), 'intra': os.environ.get('TF_NUM_INTRAOP_THREADS'), "
    "'omp': os.environ.get('OMP_NUM_THREADS')}))"
)


def test_instances_are_pinned_to_disjoint_cpus_and_user_variables_survive():
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs 2 CPUs")
    p = launcher(["--instances", "2", "--", sys.executable, "-c", REPORT], env={"TF_NUM_INTEROP_THREADS": "7"})
    out, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
    # several instances: every line whole, led by its instance (they never share a line)
    assert out.splitlines() and all(re.match(r"\[instance [01]\] \{.*\}$", line) for line in out.splitlines()), out
    rows = sorted((json.loads(line.split("] ", 1)[1]) for line in out.splitlines()), key=lambda r: r["i"])
    assert [r["i"] for r in rows] == ["0", "1"] and all(r["n"] == "2" for r in rows)
    assert all(line.startswith(f"[instance {r['i']}] ") for line, r in zip(sorted(out.splitlines()), rows))
    # one line per instance started, on stderr: its CPUs and threads
    for r in rows:
        assert re.search(
            rf"instance {r['i']} of 2: CPUs {r['cpus'][0]}\S* \(bound\), inter_op=\d+ intra_op={r['intra']}", err
        ), err
    a, b = set(rows[0]["cpus"]), set(rows[1]["cpus"])
    assert a and b and not (a & b)  # really bound, to distinct CPUs
    assert all(r["inter"] == "7" for r in rows)  # the user's variable, never overridden
    assert all(r["intra"] == str(len(a)) for r in rows)  # planned for the instance's own slice
    assert all(r["omp"] is None for r in rows)  # stock TF is not an OpenMP build


def test_exit_code_is_the_first_failing_childs():
    p = launcher(
        [
            "--instances",
            "2",
            "--",
            sys.executable,
            "-c",
            "import os, sys; sys.exit(3 if os.environ['TF_AUTOPAR_INSTANCE'] == '1' else 0)",
        ]
    )
    p.communicate(timeout=60)
    assert p.returncode == 3
    p = launcher(["--", sys.executable, "-c", "pass"])
    p.communicate(timeout=60)
    assert p.returncode == 0


def test_signals_are_forwarded_to_every_child(tmp_path):
    child = (
        "import os, signal, sys, time\n"
        f"d = {str(tmp_path)!r}\n"
        "def h(sig, frame):\n"
        "    open(os.path.join(d, 'got-' + os.environ['TF_AUTOPAR_INSTANCE']), 'w').write(str(sig))\n"
        "    sys.exit(5)\n"
        "signal.signal(signal.SIGTERM, h)\n"
        "open(os.path.join(d, 'ready-' + os.environ['TF_AUTOPAR_INSTANCE']), 'w').close()\n"
        "time.sleep(60)\n"
    )
    n = 2 if len(os.sched_getaffinity(0)) >= 2 else 1
    p = launcher(["--instances", str(n), "--", sys.executable, "-c", child])
    deadline = time.time() + 30
    while len(list(tmp_path.glob("ready-*"))) < n and time.time() < deadline:
        time.sleep(0.1)
    p.send_signal(signal.SIGTERM)
    p.communicate(timeout=30)
    assert sorted(f.name for f in tmp_path.glob("got-*")) == [f"got-{i}" for i in range(n)]
    assert all(f.read_text() == str(int(signal.SIGTERM)) for f in tmp_path.glob("got-*"))
    assert p.returncode == 5


def test_dry_run_json_and_bad_input():
    p = launcher(["--dry-run", "--json", "--", "true"])
    out, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
    data = json.loads(out)
    assert data["instances"][0]["argv"] == ["true"] and "inter_op" in data["plan"]
    p = launcher(["--cores", "9999", "--", "true"])
    _, err = p.communicate(timeout=60)
    assert p.returncode == 2 and "--cores" in err
    p = launcher(["--", "/nonexistent/prog"])
    _, err = p.communicate(timeout=60)
    assert p.returncode == 2 and "cannot start" in err


def test_instances_get_disjoint_whole_core_slices_each_planned_for_its_slice(host_root):
    from tf_autopar.runtime.launcher import launch_specs
    from tf_autopar.topology import detect_topology

    topo = detect_topology(host_root("skylake-2s-24c-48t"))
    launch = launch_specs(topo, ["true"], mode="latency", instances=4, environ={})
    slices = [set(spec.cpus) for spec in launch.instances]
    assert [len(s) for s in slices] == [12, 12, 12, 12]  # 6 cores x 2 hyperthreads each
    assert set().union(*slices) == set(topo.affinity) and sum(map(len, slices)) == 48
    for spec in launch.instances:
        # a slice stays on one socket, and each instance plans for its own 6 cores
        assert len({c.socket for c in topo.cores if set(c.cpus) <= set(spec.cpus)}) == 1
        assert (spec.inter_op, spec.intra_op) == (6, 6)  # no model: TF's default sized to its 6 cores
    # more instances than cores: the sharing rule, not an error
    crowded = launch_specs(topo, ["true"], mode="latency", instances=30, environ={})
    assert len(crowded.instances) == 30 and all(spec.intra_op == 1 for spec in crowded.instances)


def test_log_dir_gets_one_file_per_instance_and_the_terminal_none_of_their_output(tmp_path):
    logs = tmp_path / "logs"
    p = launcher(
        [
            "--instances",
            "2",
            "--log-dir",
            str(logs),
            "--",
            sys.executable,
            "-c",
            "import os, sys; i = os.environ['TF_AUTOPAR_INSTANCE']; print('out', i); print('err', i, file=sys.stderr)",
        ]
    )
    out, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
    assert out == ""
    for i in ("0", "1"):
        assert sorted((logs / f"instance-{i}.log").read_text().split("\n")) == ["", f"err {i}", f"out {i}"]
        assert f"log {logs}/instance-{i}.log" in err


def test_instances_sharing_cpus_are_warned_about():
    p = launcher(["--cores", "0", "--instances", "2", "--", sys.executable, "-c", "pass"])
    _, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
    assert "warning: 2 instances on 1 CPUs" not in err  # counts in English
    assert "warning: 2 instances on 1 CPU: instances share CPUs (CPU 0: instances 0, 1)" in err, err


def test_refusals_name_the_problem_and_the_way_out():
    p = launcher(["--json", "--", "true"])
    _, err = p.communicate(timeout=60)
    assert p.returncode == 2 and err.startswith(
        "tf-autopar run: error: --json prints the launch plan and needs --dry-run"
    )
    p = launcher(["--instances", "0", "--", "true"])
    _, err = p.communicate(timeout=60)
    assert p.returncode == 2 and err.startswith(
        "tf-autopar run: error: --instances must be at least 1"
    )  # not the command
    if len(os.sched_getaffinity(0)) >= 2:  # the throughput plan has several instances here
        p = launcher(["--mode", "throughput", "--", "true"])
        _, err = p.communicate(timeout=60)
        assert p.returncode == 2 and "would start COMMAND" in err and "--instances" in err, err
        p = launcher(["--mode", "throughput", "--instances", "2", "--", sys.executable, "-c", "pass"])
        _, err = p.communicate(timeout=60)
        assert p.returncode == 0 and "starting 2 instances" in err, err


def test_shared_cpus_warning_in_the_launch_plan(host_root):
    from tf_autopar.runtime.launcher import launch_specs
    from tf_autopar.topology import detect_topology

    topo = detect_topology(host_root("this-host-2c"))
    assert launch_specs(topo, ["true"], instances=2, environ={}).warnings == ()
    crowded = launch_specs(topo, ["true"], instances=5, environ={})
    assert crowded.warnings == (
        "5 instances on 2 CPUs: instances share CPUs (CPU 0: instances 0, 1, 2, 3 and 1 more; CPU 1: "
        "instances 0, 1, 2, 3 and 1 more), so they slow each other down; at most 2 get a CPU of their own "
        "(--instances 2)",
    )


def test_a_huge_instance_count_is_capped_with_one_short_warning(host_root):
    """--instances 1000000000 (a typo) once built a billion specs (MemoryError); 1000 on 2 CPUs
    printed a 5,000-character warning listing every instance."""
    from tf_autopar.coordination.slices import MAX_WORKERS_PER_CORE
    from tf_autopar.runtime.launcher import launch_specs, shared_cpus
    from tf_autopar.topology import detect_topology

    from test_coordination_slices import deadline

    topo = detect_topology(host_root("this-host-2c"))
    with deadline(5):  # the old code looped over a billion instances
        launch = launch_specs(topo, ["true"], instances=10**9, environ={})
    assert len(launch.instances) == 2 * MAX_WORKERS_PER_CORE
    assert len(launch.warnings) == 1 and "--instances 1000000000" in launch.warnings[0]
    assert len(launch.warnings[0]) < 200
    many = shared_cpus([[i % 2] for i in range(1000)])
    assert len(many) < 300 and "CPU 0: instances 0, 2, 4, 6 and 496 more" in many


def test_dry_run_with_a_billion_instances_says_one_short_thing():
    p = launcher(["--instances", "1000000000", "--dry-run", "--", "true"])
    try:
        out, err = p.communicate(timeout=20)  # the old code filled memory until MemoryError
    finally:
        p.kill()
    assert p.returncode == 0, err
    warnings = [line for line in out.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and len(warnings[0]) < 200 and "MemoryError" not in out + err

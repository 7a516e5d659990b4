"""Real CPU-quota groups (needs root and a writable cgroup cpu controller; skips otherwise)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tf_autopar.validation import results
from tf_autopar.measure.cgroup import (
    CgroupUnavailable,
    CpuController,
    QuotaGroup,
    check_writable,
    find_cpu_controller,
    leftover_groups,
    parse_cpu_stat,
)
from tf_autopar.validation.harness import Harness, Options, RowSpec, fixed_plan_provider
from tf_autopar.measure.runner import run_child
from tf_autopar.measure.configs import thread_config

from test_validation_harness import RUNNER
from test_validation_stats import topo


def writable_controller() -> CpuController:
    try:
        controller = find_cpu_controller()
        check_writable(controller)
    except CgroupUnavailable as exc:
        pytest.skip(f"no writable cgroup cpu controller: {exc}")
    return controller


def test_cpu_stat_parsing_v1_and_v2():
    v1 = parse_cpu_stat("nr_periods 10\nnr_throttled 4\nthrottled_time 2500000\n", 1)
    assert (v1.nr_periods, v1.nr_throttled, v1.throttled_us, v1.throttled_fraction) == (10, 4, 2500.0, 0.4)
    v2 = parse_cpu_stat("usage_usec 5\nnr_periods 8\nnr_throttled 2\nthrottled_usec 300\n", 2)
    assert (v2.nr_periods, v2.nr_throttled, v2.throttled_us) == (8, 2, 300.0)


def test_missing_controller_is_a_clear_error(tmp_path):
    with pytest.raises(CgroupUnavailable, match="no cgroup v1 cpu controller"):
        find_cpu_controller(str(tmp_path))
    (tmp_path / "cgroup.controllers").write_text("memory pids\n")
    with pytest.raises(CgroupUnavailable, match="has no cpu controller"):
        find_cpu_controller(str(tmp_path))


@pytest.mark.root
def test_child_under_half_a_cpu_is_throttled_and_the_group_is_removed():
    controller = writable_controller()
    # two busy processes: a single one is throttled in only a few periods on recent kernels
    burn = (
        "import os, time\npid = os.fork()\nend = time.monotonic() + 1.0\nwhile time.monotonic() < end: pass\n"
        "if pid: os.waitpid(pid, 0); print('{}')\nelse: os._exit(0)"
    )
    with QuotaGroup(controller, 0.5, "test") as group:
        path = group.path
        assert os.path.isdir(path)
        # a heavy weight so the group gets its half CPU even on a busy host (otherwise the
        # scheduler, not the quota, limits it and nothing is throttled)
        weight = ("cpu.shares", "262144") if controller.version == 1 else ("cpu.weight", "10000")
        with open(os.path.join(path, weight[0]), "w") as f:
            f.write(weight[1])
        res = run_child([sys.executable, "-c", burn], dict(os.environ), 30, group=group)
        assert res.status == "ok"
    assert res.cpu_stat["nr_periods"] > 0 and res.cpu_stat["nr_throttled"] > 0
    assert not os.path.exists(path)
    assert leftover_groups(controller, os.getpid()) == []


@pytest.mark.root
def test_group_with_a_stray_process_is_still_removed():
    controller = writable_controller()
    group = QuotaGroup(controller, 1.0, "stray").create()
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], preexec_fn=group.join)
    try:
        assert group.pids() == [proc.pid]
        group.remove()
        assert proc.wait(timeout=10) != 0
        assert not os.path.exists(group.path)
    finally:
        if proc.poll() is None:
            proc.kill()


@pytest.mark.root
def test_harness_under_a_quota_records_throttling_per_run(standin_log, monkeypatch):
    controller = writable_controller()
    # two processes busy for 0.1 s ask for 40 times the quota: every run is throttled (0.3 s only took longer)
    monkeypatch.setenv("STANDIN_BURN_S", "0.1")
    provider = fixed_plan_provider(thread_config(1, 1, openmp=False, name="tf_autopar", kind="plan"))
    # 0.05 CPU: below what even a loaded host's scheduler grants a busy group, so it is throttled
    h = Harness(
        topo(),
        Options(
            rounds=1,
            steps=2,
            warmup=0,
            runner=RUNNER,
            model_runner=RUNNER,
            export_runner=RUNNER,
            space="none",
            cpu_quota=0.05,
        ),
        plan_provider=provider,
        controller=controller,
    )
    doc = h.run([RowSpec("wa", "infer1", 1, "tiny")])
    row = doc["rows"][0]
    for name in row["order"]:
        stat = row["configs"][name]["runs"][0]["cpu_stat"]
        assert stat["nr_periods"] > 0 and stat["nr_throttled"] > 0
        assert row["summary"]["configs"][name]["throttling"]["throttled_fraction"] > 0
    assert doc["cgroup"]["version"] in (1, 2)
    assert leftover_groups(controller, os.getpid()) == []
    results.validate_document(json.loads(json.dumps(doc)))

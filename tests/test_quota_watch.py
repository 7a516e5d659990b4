"""CPU limits that change while running: the readings (topology/limits.py), the share cut again
(coordination/reshare.py) and one check of the watch (runtime/quota_watch.py), on recorded host
trees whose files are rewritten between checks. The real cgroup, under a serving process, is
tests/test_quota_change.py."""

from __future__ import annotations

import dataclasses
import os

import pytest

from tf_autopar.coordination import Share, split
from tf_autopar.coordination.reshare import NOTE, reshare
from tf_autopar.runtime.applied import Applied
from tf_autopar.runtime import quota_watch
from tf_autopar.runtime.state import STATE
from tf_autopar.runtime.state import ProcessRecord
from tf_autopar.topology import detect_topology
from tf_autopar.topology._fs import HostFS
from tf_autopar.topology.limits import Limits, LimitsReader, follow, what_changed
from tf_autopar.topology.model import CpuQuota

LEAF = "/sys/fs/cgroup/cri-containerd-3f4e5d6c.scope/cpu.max"  # the container's group in that tree


def _quota(cpus: float, period: int = 100_000) -> CpuQuota:
    return CpuQuota(cpus, int(cpus * period), period, 2, "/x/cpu.max")


def _rewrite(root: str, path: str, text: str) -> None:
    with open(os.path.join(root, path.lstrip("/")), "w") as fh:
        fh.write(text)


def test_the_reader_sees_a_rewritten_quota_through_the_topology_readers(host_variant):
    root = host_variant("container-v2-quota-2.5")
    reader = LimitsReader(HostFS(root))
    before = reader.read()
    assert before.quota.cpus == 2.5 and before.budget == 2 and len(before.affinity) == 128
    _rewrite(root, LEAF, "100000 100000\n")
    after = reader.read()
    assert after.quota.cpus == 1.0 and after.budget == 1
    assert what_changed(before, after) == "the CPU quota went from 2.5 CPUs to 1 CPU"
    _rewrite(root, LEAF, "max 100000\n")  # the pod's own limit (4 CPUs, another period) is then the tightest
    assert reader.read().quota.cpus == 4.0


def test_what_changed_ignores_another_period_for_the_same_cpus_and_names_cpu_changes():
    a = Limits(_quota(2), (0, 1, 2, 3), (0, 1, 2, 3))
    assert what_changed(a, dataclasses.replace(a, quota=_quota(2, 50_000))) == ""
    assert what_changed(a, dataclasses.replace(a, quota=None)) == "the CPU quota went from 2 CPUs to no quota"
    moved = Limits(_quota(2), (0, 1), (0, 1))
    assert what_changed(a, moved) == ("the cpuset went from 0-3 to 0-1; the affinity mask went from CPUs 0-3 to 0-1")
    unreadable = Limits(_quota(2), None, ())  # a failed read is no change
    assert what_changed(a, unreadable) == ""


def test_follow_keeps_the_cores_for_a_quota_change_and_asks_for_detection_when_cpus_change(host_root):
    topo = detect_topology(host_root("container-v2-quota-2.5"), cpu_details=False)
    old = Limits(topo.quota, None, topo.affinity)
    smaller = follow(topo, old, dataclasses.replace(old, quota=_quota(1)))
    assert smaller.cpu_budget == 1 and smaller.quota.cpus == 1 and smaller.cores == topo.cores
    assert follow(topo, old, dataclasses.replace(old, quota=None)).cpu_budget == len(topo.affinity)
    assert follow(topo, old, dataclasses.replace(old, affinity=topo.affinity[:4])) is None


def test_reshare_cuts_the_same_worker_again_under_the_new_quota(host_root):
    host = detect_topology(host_root("skylake-2s-24c-48t"), cpu_details=False)
    four = dataclasses.replace(host, cpu_budget=4)
    s = split(four, 2)[1]
    share = Share(1, 2, s.cpus, "env:LOCAL_RANK", budget=s.cores, pin=True, note="rank 1 of 2")
    two = reshare(share, dataclasses.replace(host, cpu_budget=2))
    assert (two.index, two.count, two.source, two.budget) == (1, 2, "env:LOCAL_RANK", 1)
    assert two.cpus == split(dataclasses.replace(host, cpu_budget=2), 2)[1].cpus and two.pin
    assert two.note == f"rank 1 of 2; {NOTE}" and reshare(two, four).note == two.note  # said once
    assert reshare(two, four).budget == 2
    whole = Share(0, 1, host.affinity, "single", budget=host.cpu_budget)
    assert reshare(whole, dataclasses.replace(host, cpu_budget=3)).budget == 3
    even = Share(None, 4, host.affinity, "even-split", budget=6)
    assert reshare(even, dataclasses.replace(host, cpu_budget=8)).budget == 2
    extra = Share(2, 2, s.cpus, "lease", budget=1, pin=True)  # a third process on a count of 2: doubles up
    assert reshare(extra, four).budget == 1 and reshare(extra, four).shared_with == 2


@pytest.fixture
def watched(host_variant, monkeypatch):
    """A watch over a rewritable recorded container, with the runtime's host set to that tree."""
    root = host_variant("container-v2-quota-2.5")
    monkeypatch.setattr(STATE, "host", detect_topology(root, cpu_details=False))
    monkeypatch.setattr(STATE, "share", None)
    monkeypatch.setattr(STATE, "applied", Applied())
    monkeypatch.setattr(STATE, "enabled", True)
    monkeypatch.setattr(STATE, "mode", "latency")
    monkeypatch.setattr(
        STATE,
        "process",
        ProcessRecord(phase="before-start", planned_inter=2, planned_intra=2, running_inter=2, running_intra=2),
    )
    watch = quota_watch.QuotaWatch(LimitsReader(HostFS(root)))
    monkeypatch.setattr(quota_watch, "_watch", watch)
    return root, watch


def test_a_check_replans_what_can_change_and_status_says_the_process_pools_stay(watched):
    root, watch = watched
    calls = []
    watch.listeners.append(lambda: calls.append(STATE.topology().cpu_budget))
    assert watch.check() == "" and calls == []  # unchanged: nothing happens
    _rewrite(root, LEAF, "100000 100000\n")
    assert watch.check() == "the CPU quota went from 2.5 CPUs to 1 CPU"
    assert calls == [1] and STATE.host_topology().quota.cpus == 1.0
    assert watch.check() == "" and calls == [1]  # one change, one re-plan
    rec = STATE.snapshot().limits
    assert (rec.changes, rec.quota, rec.budget) == (1, "1 CPU", 1)
    text = STATE.snapshot().text()
    assert "process pools stay at 2 inter-op x 2 intra-op threads; the quota is now 1 CPU" in text, text
    _rewrite(root, LEAF, "300000 100000\n")
    assert watch.check() and calls == [1, 3] and STATE.snapshot().limits.changes == 2


def test_a_share_follows_the_quota(watched, monkeypatch):
    root, watch = watched
    host = STATE.host_topology()
    s = split(host, 2)[0]
    share = Share(0, 2, s.cpus, "env:LOCAL_RANK", budget=s.cores, pin=False, note="rank 0 of 2")
    STATE.applied.hold(share)
    STATE.use_share(share.topology(host))
    assert STATE.topology().cpu_budget == 2  # 2.5 CPUs for two workers: ceil = 3 cores, cut 2 + 1
    bound = []  # the re-bind of a pinned share whose CPUs moved: recorded, not done to the test process
    monkeypatch.setattr(quota_watch, "apply_affinity", lambda share, all_threads: bound.append(share.cpus))
    _rewrite(root, LEAF, "100000 100000\n")  # 1 CPU: both workers share its one core
    watch.check()
    now = STATE.applied.share
    assert now.budget == 1 and STATE.topology().cpu_budget == 1 and now.index == 0 and now.shared_with == 2
    assert bound == [now.cpus] and len(now.cpus) < len(s.cpus)


def test_a_pinned_share_that_becomes_unpinned_widens_its_mask(watched, monkeypatch):
    """Four workers under a 1-CPU quota share one core, bound to it; when the quota is lifted on a
    host whose cores are one group, the sharing rule's new share is the whole host, unpinned: the
    old mask must widen, or the worker stays on the one core."""
    root, watch = watched
    host = STATE.host_topology()
    old = Share(0, 4, host.affinity[:1], "lease", budget=1, pin=True, shared_with=4)
    whole = Share(0, 4, host.affinity, "lease", budget=1, pin=False, shared_with=4)
    STATE.applied.hold(old)
    monkeypatch.setattr(quota_watch, "reshare", lambda share, new_host: whole)
    bound = []
    monkeypatch.setattr(quota_watch, "apply_affinity", lambda share, all_threads: bound.append(share.cpus))
    quota_watch._reshare(host)
    assert bound == [host.affinity] and STATE.applied.share.pin is False
    bound.clear()
    quota_watch._reshare(host)  # unpinned to unpinned, same CPUs: nothing to move
    assert bound == []

"""The host-wide lease in real processes: simultaneous starts, killed workers, broken lease directories."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tf_autopar.coordination import claim_share
from tf_autopar.coordination.lease import LeaseError, acquire, group_key, lease_status
from tf_autopar.topology.model import Core, NumaNode, Topology

ROOT = Path(__file__).resolve().parents[1]
GROUP_ENV = {"TF_AUTOPAR_GROUP": "coordination-test"}

# argv: lease_dir, count ("-" = unknown), cores ("real" = this host, applied with apply_affinity), go-file;
# DELAY in the environment (not argv: workers of one program share a command line): a delay before the
# claim, after the go-file: "burn:S" (busy, as a worker still importing) or "sleep:S"
CHILD = textwrap.dedent(r"""
    import json, logging, os, sys, time
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
    from tf_autopar.coordination import apply_affinity, claim_share
    from tf_autopar.topology.model import Core, NumaNode, Topology
    lease_dir, count, cores, go = sys.argv[1:5]
    if cores == "real":
        from tf_autopar.topology import detect_topology
        topo = detect_topology()
    else:
        n = int(cores)
        topo = Topology(host_cpus=n, affinity=tuple(range(n)), cores=tuple(Core(0, i, (i,)) for i in range(n)),
                        numa_nodes=(NumaNode(0, tuple(range(n))),), cpu_budget=n)
    while go != "-" and not os.path.exists(go):
        time.sleep(0.001)
    how, _, seconds = os.environ.get("DELAY", "-").partition(":")
    if how == "burn":
        end = time.time() + float(seconds)
        while time.time() < end:
            pass
    elif how == "sleep":
        time.sleep(float(seconds))
    share = claim_share(topo, {"TF_AUTOPAR_GROUP": "coordination-test"}, lease_dir=lease_dir,
                        count=None if count == "-" else int(count))
    out = share.to_dict()
    out["pid"] = os.getpid()
    if cores == "real":
        out["bound"] = apply_affinity(share)
        out["affinity"] = sorted(os.sched_getaffinity(0))
    print(json.dumps(out), flush=True)
    sys.stdin.read()  # hold the lease until the test closes stdin
""")


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("TF_AUTOPAR_LEASE_DIR", None)
    return env


class Workers:
    """Child processes holding leases; all killed at the end of the test."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen] = []

    def start(self, lease_dir, count, cores, go="-", delay="-") -> subprocess.Popen:
        p = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(lease_dir), str(count), str(cores), str(go)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**_env(), "DELAY": delay},
        )
        self.procs.append(p)
        return p

    @staticmethod
    def result(p: subprocess.Popen, timeout: float = 60) -> dict:
        import selectors

        sel = selectors.DefaultSelector()
        sel.register(p.stdout, selectors.EVENT_READ)
        if not sel.select(timeout):
            raise AssertionError(f"worker {p.pid} printed nothing within {timeout} s")
        line = p.stdout.readline()
        if not line:
            raise AssertionError(f"worker {p.pid} exited: {p.wait(10)} {p.stderr.read()}")
        return json.loads(line)

    @staticmethod
    def stderr_after_exit(p: subprocess.Popen) -> str:
        p.stdin.close()
        p.wait(30)
        return p.stderr.read()

    def close(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
            p.wait(30)
            for f in (p.stdin, p.stdout, p.stderr):
                try:
                    f.close()
                except Exception:
                    pass


@pytest.fixture
def workers():
    w = Workers()
    yield w
    w.close()


def _start_together(workers, tmp_path, n, count, cores, delays=()):
    go = tmp_path / "go"
    delays = list(delays) + ["-"] * (n - len(delays))
    procs = [workers.start(tmp_path / "lease", count, cores, go, delays[i]) for i in range(n)]
    time.sleep(0.3)  # let every child reach the barrier (they poll for the go file)
    go.touch()
    return procs, [workers.result(p) for p in procs]


def test_four_workers_at_once_get_disjoint_slices(workers, tmp_path):
    _, shares = _start_together(workers, tmp_path, 4, 4, 8)
    assert sorted(s["index"] for s in shares) == [0, 1, 2, 3]
    assert all(s["source"] == "lease" and s["pin"] and s["shared_with"] == 1 for s in shares)
    cpus = [c for s in shares for c in s["cpus"]]
    assert sorted(cpus) == list(range(8)), "slices overlap or leave cores out"
    assert all(len(s["cpus"]) == 2 and s["budget"] == 2 for s in shares)
    status = lease_status(str(tmp_path / "lease" / group_key(GROUP_ENV, None, range(8))))
    assert [(x["slot"], x["held"]) for x in status] == [(0, True), (1, True), (2, True), (3, True)]
    assert {x["status"]["pid"] for x in status} == {s["pid"] for s in shares}


def test_four_workers_on_this_host_follow_the_sharing_rule(workers, tmp_path):
    host = sorted(os.sched_getaffinity(0))
    _, shares = _start_together(workers, tmp_path, 4, 4, "real")
    assert sorted(s["index"] for s in shares) == [0, 1, 2, 3]
    if len(host) >= 4:
        pytest.skip("this host has enough cores for four disjoint slices; the fake 8-core test covers that")
    for s in shares:
        # the sharing rule: not pinned to one core each but floating over the host's cores (one
        # cache domain here), one thread each, so whichever workers are busy get every core
        assert s["affinity"] == s["cpus"] == host, s
        assert s["budget"] == 1 and s["shared_with"] == 4 and "sharing rule" in s["note"]


def test_killed_worker_slot_is_reused_by_the_next(workers, tmp_path):
    procs, shares = _start_together(workers, tmp_path, 4, 4, 8)
    victim_i = next(i for i, s in enumerate(shares) if s["index"] == 2)
    victim = procs[victim_i]
    os.kill(victim.pid, signal.SIGKILL)
    victim.wait(30)
    newcomer = workers.result(workers.start(tmp_path / "lease", 4, 8))
    assert newcomer["index"] == 2 and newcomer["cpus"] == shares[victim_i]["cpus"]
    assert f"reclaimed from pid {victim.pid}" in newcomer["note"]
    # while the others live, a fifth process is beyond the count: it doubles up, never errors
    fifth = workers.result(workers.start(tmp_path / "lease", 4, 8))
    assert (
        fifth["index"] == 4
        and fifth["cpus"] == shares[next(i for i, s in enumerate(shares) if s["index"] == 0)]["cpus"]
    )
    assert fifth["shared_with"] == 2 and fifth["budget"] == 1 and "more processes than the count" in fifth["note"]


def test_without_a_count_later_workers_see_the_earlier_ones(workers, tmp_path):
    first = workers.start(tmp_path / "lease", "-", 8)
    a = workers.result(first)
    assert (a["source"], a["pin"], a["cpus"]) == ("single", False, list(range(8)))
    assert "no other worker and no sibling process" in a["note"]  # started alone: no rendezvous wait
    second = workers.start(tmp_path / "lease", "-", 8)
    b = workers.result(second)
    assert (b["source"], b["index"], b["count"], b["cpus"]) == ("lease", 1, 2, [4, 5, 6, 7])
    err = workers.stderr_after_exit(second)
    assert err.count("WARNING") == 1, err
    assert f"pid {a['pid']} started" in err and "took the whole host" in err and "no worker count is known" in err
    assert "TF_AUTOPAR_INSTANCES=N" in err


def test_workers_started_together_without_a_count_meet_and_split_the_host(workers, tmp_path):
    """Item 5: no ranks, no count: the rendezvous makes them see each other (they used to overlap)."""
    procs, shares = _start_together(workers, tmp_path, 3, "-", 8)
    assert sorted(s["index"] for s in shares) == [0, 1, 2]
    assert all((s["source"], s["count"], s["pin"], s["shared_with"]) == ("rendezvous", 3, True, 1) for s in shares)
    cpus = [c for s in shares for c in s["cpus"]]
    assert sorted(cpus) == list(range(8)), "slices overlap or leave cores out"
    assert all(workers.stderr_after_exit(p).count("WARNING") == 0 for p in procs)


def test_a_sibling_still_starting_when_the_window_closes_is_waited_for(workers, tmp_path):
    """A worker busy for 2.5 s after its sibling claimed (gunicorn's second worker, still importing
    under a CPU quota on a loaded host): it used to arrive late and overlap the first, which had
    taken the whole host. The first now holds the window open for it; an idle sibling is not waited for."""
    t0 = time.monotonic()
    procs, shares = _start_together(workers, tmp_path, 2, "-", 8, delays=["-", "burn:2.5"])
    assert time.monotonic() - t0 < 2.5 + 8, "held the window open far beyond the sibling's claim"
    assert sorted(s["index"] for s in shares) == [0, 1]
    assert all((s["source"], s["count"], s["pin"]) == ("rendezvous", 2, True) for s in shares), shares
    assert sorted(c for s in shares for c in s["cpus"]) == list(range(8))
    assert any("held open" in s["note"] for s in shares), [s["note"] for s in shares]
    assert all(workers.stderr_after_exit(p).count("WARNING") == 0 for p in procs)

    idle = tmp_path / "idle"
    idle.mkdir()
    procs, shares = _start_together(workers, idle, 2, "-", 8, delays=["-", "sleep:2.5"])
    assert [s["source"] for s in shares] == ["single", "lease"], shares  # the sleeper came late, as before
    assert "no other worker started within 1 s" in shares[0]["note"]


def test_a_restarted_worker_takes_the_rank_its_predecessor_left(workers, tmp_path):
    procs, shares = _start_together(workers, tmp_path, 3, "-", 8)
    victim = next(i for i, s in enumerate(shares) if s["index"] == 1)
    os.kill(procs[victim].pid, signal.SIGKILL)
    procs[victim].wait(30)
    p = workers.start(tmp_path / "lease", "-", 8)
    s = workers.result(p)
    assert (s["index"], s["count"], s["cpus"]) == (1, 3, shares[victim]["cpus"])
    assert "was free" in s["note"]
    assert "WARNING" not in workers.stderr_after_exit(p)


@pytest.mark.parametrize(
    "text, want, warned",
    [
        ("", 1.0, False),
        ("0", 0.0, False),
        ("0.25", 0.25, False),
        ("1e9", 10.0, False),
        ("soon", 1.0, True),
        ("-1", 1.0, True),
        ("nan", 1.0, True),
    ],
)
def test_the_rendezvous_window_is_bounded_and_a_bad_value_is_said(text, want, warned):
    from tf_autopar import _warn
    from tf_autopar.coordination.rendezvous import window_s

    before = len(_warn.ISSUED)
    assert window_s({"TF_AUTOPAR_RENDEZVOUS_S": text}) == want
    assert (len(_warn.ISSUED) > before) == warned


def test_unwritable_lease_dir_falls_back_to_even_split(workers, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    p = workers.start(blocker / "lease", 4, 8)
    s = workers.result(p)
    assert (s["source"], s["index"], s["pin"], s["budget"], s["cpus"]) == ("even-split", None, False, 2, list(range(8)))
    err = workers.stderr_after_exit(p)
    assert err.count("WARNING") == 1 and "falling back to an even split" in err


def test_corrupt_lease_dir_falls_back_and_garbled_status_is_repaired(workers, tmp_path):
    group = tmp_path / "lease" / group_key(GROUP_ENV, None, range(8))
    group.mkdir(parents=True)
    (group / "slot-0.lock").mkdir()  # a directory where a slot file belongs
    p = workers.start(tmp_path / "lease", 4, 8)
    s = workers.result(p)
    assert s["source"] == "even-split" and s["budget"] == 2
    err = workers.stderr_after_exit(p)
    assert err.count("WARNING") == 1 and "is a directory" in err

    (group / "slot-0.lock").rmdir()
    (group / "slot-0.lock").write_bytes(b"\x00\xff{garbage")  # torn status write in a free slot
    s = workers.result(workers.start(tmp_path / "lease", 4, 8))
    assert (s["source"], s["index"]) == ("lease", 0) and "garbled" in s["note"]
    assert json.loads((group / "slot-0.lock").read_text())["pid"] == s["pid"]


def test_lease_root_owned_by_someone_else_is_refused(tmp_path):
    if os.getuid() != 0:
        pytest.skip("needs root to chown")
    root = tmp_path / "root"
    root.mkdir(mode=0o700)
    os.chown(root, 65534, 65534)
    with pytest.raises(LeaseError, match="belongs to uid 65534"):
        acquire(str(root / "g"), strict_root=str(root))


def test_forked_child_takes_its_own_slot(tmp_path):
    topo = Topology(
        host_cpus=4,
        affinity=(0, 1, 2, 3),
        cores=tuple(Core(0, i, (i,)) for i in range(4)),
        numa_nodes=(NumaNode(0, (0, 1, 2, 3)),),
        cpu_budget=4,
    )
    parent = claim_share(topo, GROUP_ENV, lease_dir=str(tmp_path), count=2)
    try:
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # child: must not believe it holds the parent's slot
            try:
                child = claim_share(topo, GROUP_ENV, lease_dir=str(tmp_path), count=2)
                os.write(w, json.dumps(child.to_dict()).encode())
            finally:
                os._exit(0)
        os.close(w)
        data = b""
        while chunk := os.read(r, 65536):
            data += chunk
        os.waitpid(pid, 0)
        child = json.loads(data)
        assert (parent.lease_slot, child["lease_slot"]) == (0, 1)
        assert set(parent.cpus).isdisjoint(child["cpus"])
        # the child's exit (closing its inherited copy) did not free the parent's slot
        again = claim_share(topo, GROUP_ENV, lease_dir=str(tmp_path), count=2)
        assert again.lease_slot == 1
        again.release()
    finally:
        parent.release()
    with claim_share(topo, GROUP_ENV, lease_dir=str(tmp_path), count=2) as s:
        assert s.lease_slot == 0  # released slots are free again


def test_a_live_process_that_released_its_slot_no_longer_holds_it(tmp_path):
    """Held means the named process's descriptor still has the flock, not merely that its pid lives."""
    d = str(tmp_path / "g")
    first, second = acquire(d), acquire(d)
    try:
        assert (first.index, second.index, second.active) == (0, 1, 2)
        assert [x["held"] for x in lease_status(d)] == [True, True]
        first.release()
        assert [x["held"] for x in lease_status(d)] == [False, True]
        third = acquire(d)
        assert (third.index, third.active) == (0, 2)
        third.release()
    finally:
        first.release()
        second.release()


def test_a_slow_member_never_takes_a_rank_a_latecomer_took(tmp_path):
    """Under load a member may decide after a latecomer took a rank whose worker exited (soak finding)."""
    from tf_autopar.coordination.rendezvous import _decide

    d = str(tmp_path / "g")
    a, b, c = acquire(d), acquire(d), acquire(d)
    try:
        now = time.time()
        a.update(time=now - 5, rank=0, cohort=3)  # a member that decided
        b.update(time=now - 5)  # a member descheduled until now: its position among the members is 1
        c.update(time=now - 1, rank=1, cohort=3)  # a latecomer that took rank 1
        assert _decide(b, now - 4) == (2, 3)
        assert json.loads(open(b.path).read())["rank"] == 2  # recorded, padded JSON still parses
    finally:
        for x in (a, b, c):
            x.release()


def test_the_group_lock_keeps_two_latecomers_apart_and_never_blocks_for_good(tmp_path):
    from tf_autopar.coordination.lease import group_lock

    d = tmp_path / "g"
    d.mkdir()
    probe = (
        "import sys; from tf_autopar.coordination.lease import group_lock\n"
        "with group_lock(sys.argv[1], timeout=0.2) as taken: print(taken)"
    )
    with group_lock(str(d)) as taken:
        assert taken
        other = subprocess.run(
            [sys.executable, "-c", probe, str(d)], env=_env(), capture_output=True, text=True, timeout=60
        )
        assert other.stdout.strip() == "False", other.stderr  # waited its bound, then went on
    other = subprocess.run(
        [sys.executable, "-c", probe, str(d)], env=_env(), capture_output=True, text=True, timeout=60
    )
    assert other.stdout.strip() == "True"
    assert [x["slot"] for x in lease_status(str(d))] == []  # the lock file is no slot


def test_siblings_are_processes_of_the_same_executable_under_the_same_parent(tmp_path):
    from tf_autopar.coordination.rendezvous import siblings_likely

    proc, ppid, me = tmp_path / "proc", os.getppid(), os.getpid()
    (proc / "self").mkdir(parents=True)
    (proc / "self" / "exe").symlink_to("/usr/bin/python3")
    task = proc / str(ppid) / "task" / str(ppid)
    task.mkdir(parents=True)
    (proc / "4242").mkdir()
    (task / "children").write_text(f"{me} 4242 ")
    (proc / "4242" / "exe").symlink_to("/bin/bash")
    assert not siblings_likely(str(proc))  # the parent's other child runs another program
    (proc / "4242" / "exe").unlink()
    (proc / "4242" / "exe").symlink_to("/usr/bin/python3")
    assert siblings_likely(str(proc))  # started together with a process of the same executable
    (task / "children").unlink()
    assert siblings_likely(str(proc))  # no children list (kernel without it): cannot tell, so wait


def _fake_proc(root: Path, me_start: int, uptime: float, siblings: dict[int, tuple[str, str, int, str]]) -> str:
    """A /proc with this process and its parent's other children: pid -> (exe, state, start tick, cmdline)."""
    proc = root / "proc"

    def process(name: str, exe: str, state: str, start: int, cmd: str) -> None:
        (proc / name).mkdir(parents=True)
        (proc / name / "exe").symlink_to(exe)
        fields = [state, "1"] + ["0"] * 17 + [str(start)] + ["0"] * 10  # start time: field 22
        (proc / name / "stat").write_text(f"{name} (py (x)) " + " ".join(fields))
        (proc / name / "cmdline").write_bytes(cmd.replace(" ", "\0").encode())

    process("self", "/usr/bin/python3", "R", me_start, "gunicorn -w 2 -b 127.0.0.1:8000 app")
    task = proc / str(os.getppid()) / "task" / str(os.getppid())
    task.mkdir(parents=True)
    (task / "children").write_text(" ".join(str(x) for x in [os.getpid(), *siblings]))
    for pid, (exe, state, start, cmd) in siblings.items():
        process(str(pid), exe, state, start, cmd)
    (proc / "uptime").write_text(f"{uptime} 0.0")
    return str(proc)


def test_a_starting_sibling_is_a_busy_young_twin_that_holds_no_slot(tmp_path):
    from tf_autopar.coordination.rendezvous import starting_siblings

    hz = os.sysconf("SC_CLK_TCK")
    twin = "gunicorn -w 2 -b 127.0.0.1:8000 app"
    start = 1000 * hz  # this process forked at 1000 s after boot
    proc = _fake_proc(
        tmp_path,
        start,
        1003.0,
        {
            11: ("/usr/bin/python3", "R", start + hz // 10, twin),  # running, forked 0.1 s later: on its way
            12: ("/usr/bin/python3", "D", start, twin),  # in I/O (importing): on its way
            13: ("/usr/bin/python3", "S", start, twin),  # idle: a worker that never calls enable()
            14: ("/usr/bin/python3", "R", start, "python -c from multiprocessing.resource_tracker import main"),
            15: ("/bin/bash", "R", start, twin),  # another program
            16: ("/usr/bin/python3", "R", start + 3 * hz, twin),  # forked 3 s later: not started with it
            17: ("/usr/bin/python3", "R", start, twin.replace("8000", "8001")),  # numbers differ only
        },
    )
    assert starting_siblings([], 1.0, proc) == {11, 12, 17}
    assert starting_siblings([11, 17], 1.0, proc) == {12}  # holding a slot: arrived
    old = _fake_proc(tmp_path / "old", start, 1000.0 + 11, {11: ("/usr/bin/python3", "R", start, twin)})
    assert starting_siblings([], 1.0, old) == set()  # 11 s after its fork: not waited for any more
    assert starting_siblings([], 1.0, str(tmp_path / "nowhere")) == set()  # no /proc: nothing to wait for


def test_a_member_holds_the_window_open_until_the_starting_sibling_claims(tmp_path):
    """The sibling claims 2 s after the window closed; both count it, and the other member, deciding
    later, agrees. Without a sibling on its way the window closes on time (the tests above)."""
    from tf_autopar.coordination.rendezvous import GRACE_S, HOLD_S, meet

    d = str(tmp_path / "g")
    a = acquire(d)
    held = [a]
    try:
        now = time.time()
        a.update(time=now)
        clock = _Clock(now)
        arrive_at = now + 1.0 + 2.0

        def starting(holders, window):
            if clock.now < arrive_at:
                return (4242,)
            if len(held) == 1:  # the sibling claims its slot
                x = acquire(d)
                x.update(time=clock.now)
                held.append(x)
            return ()

        got = meet(a, 1.0, clock=clock, sleep=clock.sleep, starting=starting)
        assert (got.rank, got.count) == (0, 2), got
        assert "held open" in got.note, got.note
        assert arrive_at <= clock.now <= arrive_at + HOLD_S + GRACE_S
        status = json.loads(open(a.path).read())
        assert arrive_at <= status["open_until"] <= clock.now  # cut back to when it stopped holding
        other = meet(held[1], 1.0, clock=clock, sleep=clock.sleep, starting=_none_starting)
        assert (other.rank, other.count) == (1, 2), other  # a member: it claimed while the window was held
    finally:
        for x in held:
            x.release()


def _none_starting(holders, window) -> tuple[int, ...]:
    """No sibling on its way: the fake-clock tests must not see pytest's own busy workers."""
    return ()


class _Clock:
    """A fake clock for rendezvous.meet: each sleep runs the next scripted event (peers exiting or
    arriving while the worker waits), then advances the time by what was asked."""

    def __init__(self, now: float, events=()) -> None:
        self.now, self.events = now, list(events)

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        if self.events:
            self.events.pop(0)()
        self.now += seconds


def test_a_latecomer_whose_peers_all_exited_opens_a_fresh_window(tmp_path):
    """Late on arrival (a cohort held ranks), alone at the lock (the cohort exited meanwhile): it used
    to warn about overlapping 0 other workers; it opens a window that a sibling restarted with it joins."""
    from tf_autopar.coordination.rendezvous import GRACE_S, meet

    d = str(tmp_path / "g")
    a, b, w = acquire(d), acquire(d), acquire(d)
    held = [a, b, w]
    try:
        now = time.time()
        a.update(time=now - 0.5, rank=0, cohort=2)
        b.update(time=now - 0.5, rank=1, cohort=2)
        w.update(time=now)

        def sibling_arrives() -> None:
            x = acquire(d)  # slot 0, freed by the cohort
            x.update(time=clock.now)
            held.append(x)

        clock = _Clock(now, [lambda: (a.release(), b.release()), sibling_arrives])
        got = meet(w, 1.0, clock=clock, sleep=clock.sleep, starting=_none_starting)
        assert (got.rank, got.count) == (1, 2), got  # the sibling in slot 0 is worker 0
        assert clock.now >= now + 1.0 + GRACE_S  # it waited out the window it opened, from its claim
        status = json.loads(open(w.path).read())
        assert (status["rank"], status["cohort"], status.get("late")) == (1, 2, None)
        other = meet(
            held[-1], 1.0, clock=clock, sleep=clock.sleep, starting=_none_starting
        )  # the sibling decides after it
        assert (other.rank, other.count) == (0, 2), other
    finally:
        for x in held:
            x.release()


def test_a_group_whose_ranked_workers_all_exited_re_forms_around_the_next_worker(workers, tmp_path):
    """Only a latecomer left running: the next worker used to be late as well (and every one after
    it, for as long as any latecomer lived), told that its peers 'had shared the host out'."""
    first = workers.start(tmp_path / "lease", "-", 8)
    a = workers.result(first)
    assert a["source"] == "single"
    b = workers.result(workers.start(tmp_path / "lease", "-", 8))
    assert (b["source"], b["count"]) == ("lease", 2)  # late: the first took the whole host
    workers.stderr_after_exit(first)  # the only worker holding a rank exits; the latecomer runs on
    third = workers.start(tmp_path / "lease", "-", 8)
    c = workers.result(third)
    assert (c["source"], c["count"], c["cpus"]) == ("single", 1, list(range(8))), c
    assert "no other worker started within 1 s" in c["note"] and "1 worker(s) that came too late" in c["note"]
    fourth = workers.start(tmp_path / "lease", "-", 8)
    d = workers.result(fourth)
    assert d["source"] == "lease"  # late for the re-formed group: told who took the host
    status = {
        x["status"]["pid"]: x["status"]
        for x in lease_status(str(tmp_path / "lease" / group_key(GROUP_ENV, None, range(8))))
    }
    err = workers.stderr_after_exit(fourth)
    assert err.count("WARNING") == 1 and f"pid {c['pid']} started" in err and "took the whole host" in err, err
    ago = float(re.search(r"started (\d+\.\d) s earlier", err)[1])  # since the third's claim, not the latecomer's
    assert abs(ago - (status[d["pid"]]["time"] - status[c["pid"]]["time"])) <= 0.06, (ago, err)
    assert "WARNING" not in workers.stderr_after_exit(third)


def test_a_slow_member_adopts_the_count_a_latecomer_holds_a_rank_of(tmp_path):
    """The members that decided exited; a latecomer took a free rank of their count before the last
    member decided: that member used to count only itself and take the whole host, over the latecomer."""
    from tf_autopar.coordination.rendezvous import _decide

    d = str(tmp_path / "g")
    b, x = acquire(d), acquire(d)
    try:
        now = time.time()
        b.update(time=now - 5)  # a member descheduled until now
        x.update(time=now - 1, rank=0, cohort=3)  # a latecomer that took rank 0 of the 3 that met
        assert _decide(b, now - 4) == (1, 3)
    finally:
        b.release()
        x.release()


def test_a_latecomer_to_a_window_nobody_decided_is_told_so(tmp_path):
    """No live worker holds a rank, but the oldest one's window closed before this one claimed: late,
    and the message names that worker's window, not workers that 'had shared the host out'."""
    from tf_autopar.coordination.rendezvous import Late, meet

    d = str(tmp_path / "g")
    a, w = acquire(d), acquire(d)
    try:
        now = time.time()
        a.update(time=now - 5)  # e.g. a worker whose rendezvous failed: no rank, not late
        w.update(time=now)
        clock = _Clock(now)
        got = meet(w, 1.0, clock=clock, sleep=clock.sleep, starting=_none_starting)
        assert isinstance(got, Late), got
        assert f"5.0 s after pid {os.getpid()}, whose rendezvous window of 1 s had closed" in got.message
        assert "shared the host out" not in got.message and "TF_AUTOPAR_INSTANCES=N" in got.message
        assert json.loads(open(w.path).read())["late"] is True
    finally:
        a.release()
        w.release()


# ---------------------------------------------------------------- hostile and garbled lease directories


def _topo(n: int = 4) -> Topology:
    return Topology(
        host_cpus=n,
        affinity=tuple(range(n)),
        cores=tuple(Core(0, i, (i,)) for i in range(n)),
        numa_nodes=(NumaNode(0, tuple(range(n))),),
        cpu_budget=n,
    )


def test_unlocked_phantom_slots_are_no_peers(tmp_path):
    """{"pid": 1, "time": now} in a file nobody locked once counted as a live peer forever (pid 1
    lives, and a record without its descriptor was trusted): the victim planned for a third of the host."""
    d = tmp_path / "g"
    d.mkdir(mode=0o700)
    now = time.time()
    (d / "slot-1.lock").write_text(json.dumps({"pid": 1, "time": now}))
    (d / "slot-2.lock").write_text(json.dumps({"pid": os.getpid(), "time": now}))  # alive, but holds no lock
    (d / "slot-3.lock").write_text(json.dumps({"pid": 1, "fd": 3, "time": now}))
    lease = acquire(str(d))
    try:
        assert (lease.index, lease.active) == (0, 1)
        assert [x["held"] for x in lease_status(str(d))] == [True, False, False, False]
    finally:
        lease.release()


def test_a_held_slot_counts_whatever_its_content_says(tmp_path):
    """Liveness is the lock: a holder whose record is empty (between locking and writing) or
    names no descriptor still counts."""
    import fcntl

    from tf_autopar.coordination.lease import live_peers

    d = tmp_path / "g"
    d.mkdir(mode=0o700)
    held = []
    for i, content in ((1, ""), (2, json.dumps({"pid": 999999, "time": 1.0}))):
        path = d / f"slot-{i}.lock"
        path.write_text(content)
        fd = os.open(path, os.O_RDWR)
        fcntl.flock(fd, fcntl.LOCK_EX)
        held.append(fd)
    lease = acquire(str(d))
    try:
        assert lease.index == 0
        assert [i for i, _ in live_peers(str(d), lease.fd)] == [1, 2]
    finally:
        lease.release()
        for fd in held:
            os.close(fd)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -1.0, True, "1", 10**400])
def test_a_claim_time_that_is_no_time_is_not_believed(value):
    from tf_autopar.coordination.rendezvous import _claim_time, _decided

    assert _claim_time({"time": value}) is None
    assert _claim_time({"time": 1700000000.5}) == 1700000000.5
    assert _decided({"rank": 0, "cohort": 10**12}) is None  # no group has more workers than slots
    assert _decided({"rank": 1, "cohort": 3}) == (1, 3)


def test_an_explicit_root_gets_the_default_roots_checks(tmp_path):
    """TF_AUTOPAR_LEASE_DIR shared (1777): another user's symlink as the group directory once made
    this process create its slot files wherever it pointed."""
    from tf_autopar import _warn

    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    target = tmp_path / "target"
    target.mkdir()
    group = shared / group_key(GROUP_ENV, None, range(4))
    group.symlink_to(target)
    if os.geteuid() == 0:
        os.lchown(group, 65534, 65534)
    before = len(_warn.ISSUED)
    share = claim_share(_topo(), GROUP_ENV, lease_dir=str(shared), count=2)
    assert share.source == "even-split" and list(target.iterdir()) == []
    assert len(_warn.ISSUED) == before + 1 and "is a symlink" in _warn.ISSUED[-1] and len(_warn.ISSUED[-1]) < 300
    group.unlink()
    with claim_share(_topo(), GROUP_ENV, lease_dir=str(shared), count=2) as ok:  # sticky and shared: fine
        assert ok.source == "lease" and ok.lease_slot == 0
    open_root = tmp_path / "open"
    open_root.mkdir()
    os.chmod(open_root, 0o777)  # anyone may replace what is in it
    assert claim_share(_topo(), GROUP_ENV, lease_dir=str(open_root), count=2).source == "even-split"
    assert "writable by group or others" in _warn.ISSUED[-1]
    if os.geteuid() == 0:
        theirs = tmp_path / "theirs"
        theirs.mkdir(mode=0o700)
        os.chown(theirs, 65534, 65534)
        assert claim_share(_topo(), GROUP_ENV, lease_dir=str(theirs), count=2).source == "even-split"
        assert "belongs to uid 65534" in _warn.ISSUED[-1]


def test_thousands_of_planted_slot_files_cost_little(tmp_path):
    """3,000 empty slot files made every start wait a millisecond per file, several times over
    (7 s); slots beyond MAX_SLOTS are not even looked at."""
    from tf_autopar.coordination.lease import MAX_SLOTS, live_peers

    d = tmp_path / "g"
    d.mkdir(mode=0o700)
    for i in range(3000):
        (d / f"slot-{i}.lock").write_bytes(b"")
    (d / f"slot-{10**30}.lock").write_bytes(b"")
    t0 = time.perf_counter()
    lease = acquire(str(d))
    try:
        assert lease.index == 0 and lease.active == 1
        assert live_peers(str(d), lease.fd) == []
        assert len(lease_status(str(d))) == MAX_SLOTS
    finally:
        lease.release()
    assert time.perf_counter() - t0 < 1.5


def test_a_decision_lock_held_for_good_delays_a_start_only_briefly(tmp_path, monkeypatch):
    """Holding decide.lock once delayed every start by its 2 s timeout, twice for a latecomer."""
    from tf_autopar.coordination import rendezvous
    from tf_autopar.coordination.lease import group_lock

    monkeypatch.setattr(rendezvous, "siblings_likely", lambda: True)
    # pytest's other worker, busy and as young as this one early in a run, is no worker on its way here
    monkeypatch.setattr(rendezvous, "starting_siblings", lambda holders, window: ())
    root = tmp_path / "lease"
    env = {**GROUP_ENV, "TF_AUTOPAR_RENDEZVOUS_S": "0.2"}
    with claim_share(_topo(), env, lease_dir=str(root)) as first:  # a live peer: the next one meets it
        with group_lock(first.lease.directory) as taken:  # held through another descriptor: for good
            assert taken
            t0 = time.perf_counter()
            with claim_share(_topo(), env, lease_dir=str(root)) as second:
                elapsed = time.perf_counter() - t0
    assert second.source in ("rendezvous", "lease")
    assert elapsed < 0.2 + 0.6, elapsed  # the window, one bounded wait for the lock, and slack

"""Workers started together without a count find each other: a short window in the lease.

Without ranks or a count (TF_AUTOPAR_INSTANCES, WEB_CONCURRENCY), the first worker of a
program to start would see no peer and take the whole host, and its peers, a few
milliseconds later, slices that overlap it. So a worker that holds a lease slot but knows no
count waits for the others:

- The window opens at the claim time of the oldest live slot holder of the group (latecomers,
  below, aside) and lasts ``TF_AUTOPAR_RENDEZVOUS_S`` seconds (default 1; 0 turns the
  rendezvous off). Every worker that claims a slot while it is open is a member; all members
  wait until it closes (plus a short grace for a peer still writing its slot), then count the
  members holding a slot, in slot order: worker ``rank`` of ``count``. Each records (rank,
  count) in its slot's JSON.
- A sibling still starting when the window closes holds it open: a process of the same
  parent, executable and command line (but for its numbers), forked within the window of this
  one, busy (running or in I/O), younger than ``SIBLING_START_S`` and holding no slot yet is a
  worker on its way (gunicorn's second worker under a CPU quota on a loaded host can claim
  seconds after the first). A member that sees one records ``open_until`` a little ahead in its
  slot and looks again; every worker reads the window's end as the latest of the oldest claim
  plus the window and the members' ``open_until``, so the sibling, when it claims, is a member.
  An idle sibling (a finished worker that never calls ``enable()``) is not waited for.
- Only a worker that may have company waits: one that sees a peer in the lease, or whose
  parent runs other processes of the same executable (siblings: a shell loop, a supervisor,
  a multiprocessing pool; ``siblings_likely``), or that its parent forked without exec (a
  forking master whose next worker may not exist yet; ``forked_by_own_program``). A process
  started alone (a script, a notebook) is none of these, records itself as worker 0 of 1 and takes the host at once, so it never pays
  the window. Nothing waits when a count, ranks or a narrowed CPU mask decide the share
  (claim.py returns before the lease is asked).
- A worker that arrives after the window closed, or while a live worker holds a rank, is
  late. If a member exited and left its rank free (a restarted worker), it takes that rank of
  the recorded count: no overlap. Otherwise it is told what happened and what to do
  (``Late``), records ``late`` and the caller falls back to a slice of the slots held now,
  which overlaps the earlier workers. Such a latecomer holds no rank: it neither opens nor
  joins a later window.
- Once no live worker holds a rank (the workers that met have all exited, whether or not
  latecomers still run), the group re-forms: the next worker opens a fresh window, as at a
  first start, so that workers restarted together meet again instead of all arriving late.
  Latecomers still running keep their overlapping slices (they warned when they started).

Best effort by design: a worker descheduled for longer than the grace between locking its
slot and writing its claim time may be counted by some members and not by others. A count
is the exact answer; this is the safety net for when none is given.
"""

from __future__ import annotations

import math
import os
import re
import time
from typing import Any, Callable, Collection, Mapping, NamedTuple

from tf_autopar import _warn
from tf_autopar._text import shown
from tf_autopar.coordination.lease import LOCK_WAIT_S, MAX_SLOTS, Lease, group_lock, live_peers

WINDOW_VAR = "TF_AUTOPAR_RENDEZVOUS_S"
DEFAULT_WINDOW_S = 1.0
MAX_WINDOW_S = 10.0  # a typo must not stall start-up for minutes
GRACE_S = 0.05  # after the window closes: time for a peer that locked its slot to write its claim
SIBLING_START_S = 10.0  # a sibling not holding a slot this long after its fork is not waited for
HOLD_S = 0.3  # how far ahead a member holds the window open for a starting sibling
POLL_S = 0.05  # how often a member holding the window open looks for the sibling again


class Met(NamedTuple):
    """This worker's rank among the workers that met (or took a freed rank), of ``count``."""

    rank: int
    count: int
    note: str


class Late(NamedTuple):
    """Arrived after the window closed and no rank was free: why, in the user's words."""

    message: str


def _siblings(proc: str) -> set[int] | None:
    """The other children of this process's parent that run this executable; None when it cannot
    tell (no /proc, or a kernel without CONFIG_PROC_CHILDREN's children lists)."""
    try:
        exe = os.readlink(f"{proc}/self/exe")
        ppid = os.getppid()
        tasks = os.listdir(f"{proc}/{ppid}/task")
    except OSError:
        return None
    kids: set[int] = set()
    seen_list = False
    for tid in tasks:
        try:
            with open(f"{proc}/{ppid}/task/{tid}/children", "rb") as fh:
                text = fh.read(1 << 20)
        except OSError:
            continue
        seen_list = True
        kids.update(int(x) for x in text.split() if x.isdigit())
    if not seen_list:
        return None
    out = set()
    for pid in kids - {os.getpid()}:
        try:
            if os.readlink(f"{proc}/{pid}/exe") == exe:
                out.add(pid)
        except OSError:
            continue
    return out


def siblings_likely(proc: str = "/proc") -> bool:
    """Whether this process's parent runs other processes of this executable (workers started
    together). True when it cannot tell (no /proc, no children lists): waiting is the safe side."""
    kids = _siblings(proc)
    return kids is None or bool(kids)


def _stat(proc: str, pid: int | str) -> tuple[str, int] | None:
    """(state, start time in clock ticks since boot) from /proc/PID/stat; None if gone or garbled."""
    try:
        with open(f"{proc}/{pid}/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
        return fields[0].decode(), int(fields[19])
    except (OSError, IndexError, ValueError):
        return None


def _command(proc: str, pid: int | str) -> bytes | None:
    """The command line with its numbers blanked: workers of one program differ only in those (a
    port, multiprocessing's pipe handles), a helper such as multiprocessing's resource tracker does not."""
    try:
        with open(f"{proc}/{pid}/cmdline", "rb") as fh:
            return re.sub(rb"\d+", b"#", fh.read())
    except OSError:
        return None


def starting_siblings(holders: Collection[int], window: float, proc: str = "/proc") -> set[int]:
    """Siblings on their way to a slot: same parent, executable and command line (but for numbers),
    forked within ``window`` s of this process, younger than SIBLING_START_S, busy (running or in
    I/O) and not among ``holders`` (the pids holding slots). Empty when /proc cannot tell."""
    kids = _siblings(proc)
    me, command = _stat(proc, "self"), _command(proc, "self")
    if not kids or me is None or command is None:
        return set()
    try:
        hz = os.sysconf("SC_CLK_TCK")
        with open(f"{proc}/uptime", "rb") as fh:
            uptime = float(fh.read().split()[0])
    except (OSError, ValueError, IndexError):
        return set()
    out = set()
    for pid in kids - set(holders):
        st = _stat(proc, pid)
        if st is None or st[0] not in ("R", "D") or abs(st[1] - me[1]) > window * hz:
            continue
        if uptime - st[1] / hz < SIBLING_START_S and _command(proc, pid) == command:
            out.add(pid)
    return out


def alone(lease: Lease) -> bool:
    """No peer in the lease and no sibling of this executable: the whole host without waiting.
    Recorded as worker 0 of 1, so a process arriving later is late (told), not a member.

    A slot handed over by this process's parent is never alone: the parent is a master that
    released its slot to fork workers (gunicorn ``--preload``), and its next worker may not
    have been forked yet when this one looks for siblings. Nor is a process its parent forked
    without exec (forked_by_own_program): gunicorn's first worker reaches ``enable()`` before the
    master forks the second (it sleeps up to 0.1 s between forks)."""
    if live_peers(lease.directory, lease.fd) or siblings_likely() or handed_by_parent(lease) or forked_by_own_program():
        return False
    lease.update(rank=0, cohort=1)
    return True


def forked_by_own_program(proc: str = "/proc") -> bool:
    """Whether this process is its parent's fork, not a program it started: the same executable and
    command line (a forking master: gunicorn, a multiprocessing fork pool), or a parent that
    setproctitle renamed to gunicorn's master. False when /proc cannot tell."""
    try:
        ppid = os.getppid()
        if os.readlink(f"{proc}/self/exe") != os.readlink(f"{proc}/{ppid}/exe"):
            return False
        with open(f"{proc}/self/cmdline", "rb") as fh:
            mine = fh.read()
        with open(f"{proc}/{ppid}/cmdline", "rb") as fh:
            parent = fh.read()
    except OSError:
        return False
    return mine == parent or parent.startswith(b"gunicorn: master")


def handed_by_parent(lease: Lease) -> bool:
    """Whether the slot's previous holder is this process's parent (a forking master)."""
    prev = lease.previous
    return bool(prev) and prev.get("pid") == os.getppid()


def window_s(env: Mapping[str, str]) -> float:
    """TF_AUTOPAR_RENDEZVOUS_S in seconds, bounded to [0, MAX_WINDOW_S]; garbled: the default, one warning."""
    text = env.get(WINDOW_VAR, "").strip()
    if not text:
        return DEFAULT_WINDOW_S
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value == value or value < 0:  # NaN or negative
        _warn.warn_once(
            f"rendezvous-var:{text}",
            (f"tf_autopar: {WINDOW_VAR}={shown(text)} is not a number of seconds >= 0; using {DEFAULT_WINDOW_S:g}"),
            "tf_autopar.coordination",
        )
        return DEFAULT_WINDOW_S
    return min(value, MAX_WINDOW_S)


def _claim_time(data: Mapping[str, Any], key: str = "time") -> float | None:
    """A slot's claim time (or another of its times, Unix seconds); None unless a finite,
    non-negative number (NaN is not believed)."""
    t = data.get(key)
    if isinstance(t, bool) or not isinstance(t, (int, float)):
        return None
    try:
        value = float(t)
    except OverflowError:  # an integer beyond a float
        return None
    return value if math.isfinite(value) and value >= 0 else None


def _decided(data: Mapping[str, Any]) -> tuple[int, int] | None:
    """(rank, cohort) a slot recorded; None unless 0 <= rank < cohort <= MAX_SLOTS (no group has
    more workers than slots: a cohort of 10**12 would be a range of that size below)."""
    rank, count = data.get("rank"), data.get("cohort")
    if (
        isinstance(rank, int)
        and isinstance(count, int)
        and not isinstance(rank, bool)
        and not isinstance(count, bool)
        and 0 <= rank < count <= MAX_SLOTS
    ):
        return rank, count
    return None


def meet(
    lease: Lease,
    window: float,
    *,
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
    starting: Callable[[Collection[int], float], Collection[int]] | None = None,
) -> Met | Late:
    """Wait for the workers starting with this one (module docstring); record and return the outcome.

    ``starting(holders, window)``: the siblings still on their way to a slot (default starting_siblings).
    Raises OSError when the slot cannot be written (the caller fails open)."""
    starting = starting_siblings if starting is None else starting
    own = _claim_time(lease.status) or clock()
    peers = live_peers(lease.directory, lease.fd)
    end, member = _window(peers, own, window)
    wait = LOCK_WAIT_S  # once the lock was not had within it, the next try does not wait again
    if not member:
        if clock() < end + 2 * GRACE_S:  # the members are deciding: wait to see what they decide
            sleep(max(0.0, end + 2 * GRACE_S - clock()))
        with group_lock(lease.directory, wait) as taken:  # two latecomers must not both take the same free rank
            wait = wait if taken else 0.0
            peers = live_peers(lease.directory, lease.fd)
            end, member = _window(peers, own, window)  # the workers holding ranks may have exited since
            if not member:
                return _late(lease, peers, own, window)
        # nobody holds a rank any more: the group re-forms, this worker is a member of a fresh window
    sleep(max(0.0, end + GRACE_S - clock()))
    closed = end
    end = _hold_open(lease, end, window, clock, sleep, starting)
    with group_lock(lease.directory, wait):
        peers = live_peers(lease.directory, lease.fd)
        end = max(end, _window(peers, own, window)[0])
        decision = _decide(lease, end, peers)
        if decision is None:  # more members than the first to decide saw: late after all
            lease.update(late=True)
            return Late(_late_message(peers, own, window))
    rank, count = decision
    note = (
        f"no other worker started within {window:g} s: the whole host"
        if count == 1
        else f"{count} workers started within {window:g} s of each other: worker {rank} of {count}"
    )
    if end > closed + GRACE_S:
        note += f" (the window was held open {end - closed:.1f} s longer for a sibling still starting)"
    stragglers = sum(1 for _, d in peers if d.get("late"))
    if stragglers:  # they warned when they started; the new members cannot move them
        note += (
            f"; {stragglers} worker(s) that came too late for an earlier rendezvous still run on CPUs "
            "that overlap this group's"
        )
    return Met(rank, count, note)


def _hold_open(
    lease: Lease,
    end: float,
    window: float,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
    starting: Callable[[Collection[int], float], Collection[int]],
) -> float:
    """Keep the closed window open while a sibling is still starting (module docstring), and while
    another member holds it open; the window's end then (this member's last hold included)."""
    held = False
    while True:
        peers = live_peers(lease.directory, lease.fd)
        now = clock()
        if starting([d.get("pid") for _, d in peers if isinstance(d.get("pid"), int)] + [os.getpid()], window):
            held = True
            lease.update(open_until=now + HOLD_S)
            sleep(POLL_S)
            continue
        if held:  # the sibling claimed its slot (or stopped starting): the window ends now
            lease.update(open_until=now)
            end, held = max(end, now), False
        others = _held_until(peers)
        end = max(end, others)
        if others <= now:
            return end
        sleep(min(POLL_S, others - now + GRACE_S))


def _held_until(peers: list[tuple[int, dict[str, Any]]]) -> float:
    """The latest ``open_until`` a member (not a latecomer) holds the window open to; 0 when none."""
    return max(
        (t for _, d in peers if not d.get("late") and (t := _claim_time(d, "open_until")) is not None), default=0.0
    )


def _window(peers: list[tuple[int, dict[str, Any]]], own: float, window: float) -> tuple[float, bool]:
    """(end of the window, whether this worker is a member of it).

    The window opens at the oldest claim among this worker and its live peers that are not
    latecomers (a latecomer holds a fallback slice, no rank: it neither opens nor joins one),
    and ends ``window`` s later or when the last member holding it open for a starting sibling
    stops (``open_until``), whichever is later.
    This worker is late once a peer holds a rank (a window closed and decided, and its workers
    still run) or when it claimed after the window closed; with no rank held, a fresh window
    opens, so a group whose workers all exited re-forms instead of leaving every later worker late."""
    times = [t for _, d in peers if not d.get("late") and (t := _claim_time(d)) is not None]
    end = max(min(times + [own]) + window, _held_until(peers))
    return end, own <= end and not any(_decided(d) for _, d in peers)


def _late(lease: Lease, peers: list[tuple[int, dict[str, Any]]], own: float, window: float) -> Met | Late:
    """A rank a worker left free (of the count recorded by the workers still holding one), else Late.
    Call under the group lock: two latecomers must not both take the same free rank."""
    decided = {x for _, d in peers if (x := _decided(d)) is not None}
    count = max((c for _, c in decided), default=0)
    free = sorted(set(range(count)) - {r for r, _ in decided})
    if free:
        lease.update(rank=free[0], cohort=count)
        return Met(
            free[0],
            count,
            f"rank {free[0]} of {count} was free (its worker exited, or this one decided after the others): taken",
        )
    lease.update(late=True)  # holds a fallback slice: opens and joins no window; its overlap is announced
    return Late(_late_message(peers, own, window))


def _decide(
    lease: Lease, deadline: float, peers: list[tuple[int, dict[str, Any]]] | None = None
) -> tuple[int, int] | None:
    """This member's (rank, count), recorded in its slot; call under the group lock.

    The first member to decide fixes the count (the members alive then); a member deciding
    later (descheduled under load, while a member that decided has since exited) adopts the
    count any live worker holds a rank of (a latecomer's too: it took a rank of that count)
    and takes its own position if free, else the lowest free rank: never a rank already taken,
    by a member or by a latecomer that took a rank whose worker exited.
    None when every rank is taken (a member the first one did not see): the caller is late.
    ``peers``: live_peers() read under the lock (read here when not given)."""
    if peers is None:
        peers = live_peers(lease.directory, lease.fd)
    mine = [i for i, d in peers if not d.get("late") and (t := _claim_time(d)) is not None and t <= deadline]
    members = sorted([lease.index] + mine)
    decided = [x for _, d in peers if (x := _decided(d)) is not None]
    count = max(c for _, c in decided) if decided else len(members)
    # every live rank, a latecomer's too: one may have taken a free rank before this member decided
    used = {r for r, c in decided if c == count}
    rank = members.index(lease.index)
    if rank in used or rank >= count:
        free = set(range(count)) - used
        if not free:
            return None
        rank = min(free)
    lease.update(rank=rank, cohort=count)
    return rank, count


def _late_message(peers: list[tuple[int, dict[str, Any]]], own: float, window: float) -> str:
    """What a latecomer is told: who holds the CPUs it overlaps, and the fix."""
    holders = [(d, x) for _, d in peers if (x := _decided(d)) is not None]
    whole = [d for d, x in holders if x == (0, 1)]  # "single": it kept every CPU

    def ago(ds: list[dict[str, Any]]) -> float:
        return max(0.0, own - min((t for d in ds if (t := _claim_time(d)) is not None), default=own))

    if whole:
        what = (
            f"pid {whole[0].get('pid')} started {ago(whole[:1]):.1f} s earlier, saw no other worker within "
            f"{window:g} s and took the whole host"
        )
    elif holders:
        count = max(c for _, (_, c) in holders)
        what = (
            f"this process started {ago([d for d, _ in holders]):.1f} s after {count} workers had shared the "
            f"host out among themselves, and none of their {count} slices is free"
        )
    else:  # nobody holds a rank: the oldest live worker's window closed before this one claimed its slot
        opener = [d for _, d in peers if not d.get("late")] or [d for _, d in peers]
        first = min(opener, key=lambda d: _claim_time(d) or own, default={})
        what = (
            f"this process started {ago([first]):.1f} s after pid {first.get('pid')}, whose rendezvous window "
            f"of {window:g} s had closed"
        )
    return (
        f"tf_autopar: {what}; no worker count is known, so this process's CPUs overlap theirs. Set "
        "TF_AUTOPAR_INSTANCES=N (or WEB_CONCURRENCY) to the number of workers for disjoint slices, or start "
        f"them within {WINDOW_VAR}={window:g} s of each other."
    )

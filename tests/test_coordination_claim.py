"""The share claim's readers, each alone (coordination/claim.py), and claim_share's first-match loop."""

from __future__ import annotations

import json

import pytest

from test_coordination_slices import make_topology
from tf_autopar import _warn
from tf_autopar.coordination import claim
from tf_autopar.coordination.claim import (
    READERS,
    Request,
    Slot,
    claim_share,
    count_share,
    placed_share,
    ranks_share,
    ray_share,
    rendezvous_share,
    slot_share,
    take_slot,
)
from tf_autopar.coordination.lease import acquire, group_key
from tf_autopar.coordination.ranks import LAUNCHER
from tf_autopar.coordination.ray_grant import RayGrant
from tf_autopar.coordination.share import Share
from tf_autopar.coordination.slices import doubled_up, restrict, slice_for

GROUP = {"TF_AUTOPAR_GROUP": "claim-readers"}


def request(topology=None, env=None, **given) -> Request:
    """A request as claim_share builds it; no Ray here unless a grant is given."""
    return Request.of(topology or make_topology(), {**GROUP, **(env or {})}, argv=["prog"], **given)


@pytest.fixture
def held():
    """Shares that hold lease slots, released at the end of the test."""
    shares: list[Share] = []
    yield shares
    for s in shares:
        s.release()


def keep(held: list[Share], share: Share | None) -> Share:
    assert share is not None
    held.append(share)
    return share


def test_the_readers_and_their_order():
    assert READERS == (placed_share, ranks_share, ray_share, count_share, rendezvous_share)


def test_claim_share_takes_the_first_reader_that_has_a_share_and_asks_no_later_one(monkeypatch):
    asked = []
    share = Share(0, 1, (0,), "second")

    def reader(name, answer):
        def read(req):
            asked.append(name)
            return answer

        return read

    monkeypatch.setattr(claim, "READERS", (reader("a", None), reader("b", share), reader("c", Share(1, 1, (1,), "c"))))
    assert claim_share(make_topology(), {}) is share
    assert asked == ["a", "b"]


def test_a_bad_count_is_refused_before_any_reader():
    for bad in (0, -1, True, 1.5, "2"):
        with pytest.raises(ValueError, match="count must be a positive integer"):
            Request.of(make_topology(), {}, count=bad)


def test_placed_share_keeps_a_placement_and_is_none_otherwise():
    t = make_topology(cores_per_node=8)
    assert placed_share(request(t, {"LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"})) is None
    s = placed_share(request(restrict(t, (2, 3)), {"LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}))
    assert (s.source, s.index, s.count, s.cpus, s.pin, s.budget) == ("placed", 1, 2, (2, 3), False, 2)
    assert s.note == "placement kept: its affinity mask (2 CPUs) was already narrowed by its launcher"
    s = placed_share(request(t, {"TF_AUTOPAR_INSTANCE": "1", "TF_AUTOPAR_INSTANCES": "2"}))
    assert (s.source, s.index, s.count, s.cpus, s.pin) == (LAUNCHER, 1, 2, t.affinity, False)
    assert "started by `tf-autopar run`" in s.note


def test_ranks_share_is_slice_rank_of_size_when_the_count_agrees():
    t = make_topology(cores_per_node=4)
    env = {"LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}
    assert ranks_share(request(t, {})) is None
    assert ranks_share(request(t, {"WEB_CONCURRENCY": "2"})) is None  # a count, no rank
    assert ranks_share(request(t, env, count=3)) is None  # the caller's count says otherwise
    for count in (None, 2):
        s = ranks_share(request(t, env, count=count))
        assert (s.source, s.index, s.count, s.cpus, s.pin, s.budget) == ("env:LOCAL_RANK", 1, 2, (2, 3), True, 2)
        assert s.note == "rank 1 of 2 from env:LOCAL_RANK" and s.lease is None
    s = ranks_share(request(t, {"LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1"}))
    assert (s.index, s.count, s.cpus, s.pin, s.note) == (0, 1, t.affinity, False, "the only local worker")


def test_ranks_share_says_once_when_the_ranks_outnumber_the_cores():
    t = make_topology(cores_per_node=2)
    before = len(_warn.ISSUED)
    s = ranks_share(request(t, {"SLURM_LOCALID": "4", "SLURM_NTASKS_PER_NODE": "7"}))
    want = slice_for(t, 4, 7)
    assert (s.index, s.count, s.cpus, s.shared_with, s.budget) == (4, 7, want.cpus, want.shared_with, 1)
    assert "sharing rule" in s.note
    assert _warn.ISSUED[before:] == [
        "tf_autopar: SLURM_NTASKS_PER_NODE=7: 7 workers for the 2 usable cores: they share cores, 1 x 1 threads each"
    ]


def test_ray_share_needs_a_grant_and_no_count_or_rank(tmp_path, held):
    t = make_topology(cores_per_node=8)
    assert ray_share(request(t, {}, lease_dir=str(tmp_path))) is None  # not a Ray worker
    grant = RayGrant(2.0, "node")
    assert ray_share(request(t, {}, lease_dir=str(tmp_path), grant=grant, count=4)) is None
    assert ray_share(request(t, {"LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2"}, grant=grant, count=4)) is None
    first = keep(held, ray_share(request(t, {"WEB_CONCURRENCY": "3"}, lease_dir=str(tmp_path), grant=grant)))
    second = keep(held, ray_share(request(t, {}, lease_dir=str(tmp_path), grant=grant)))
    for k, s in enumerate((first, second)):
        assert (s.source, s.index, s.count, s.budget, s.pin, s.lease_slot) == ("ray", k, 4, 2, True, k)
        assert "Ray granted 2 CPUs: a budget of 2, 4 slots of the 8 usable cores" in s.note
    assert set(first.cpus).isdisjoint(second.cpus)


def test_ray_share_plans_for_a_fractional_grants_floor(tmp_path, held):
    t = make_topology(cores_per_node=8)
    s = keep(held, ray_share(request(t, {}, lease_dir=str(tmp_path), grant=RayGrant(1.5))))
    assert (s.count, s.budget, len(s.cpus)) == (5, 1, 2)  # 8 cores / 1.5 = 5 slots; slice 0 has 2 cores


def test_the_grant_is_asked_of_ray_once_and_only_when_reached(monkeypatch, tmp_path, held):
    asked = []

    def read_grant(env):
        asked.append(dict(env))
        return RayGrant(4.0)

    monkeypatch.setattr(claim, "read_grant", read_grant)
    t = make_topology(cores_per_node=8)
    claim_share(t, {**GROUP, "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2"})  # ranks decide: Ray is not asked
    assert asked == []
    s = keep(held, claim_share(t, GROUP, lease_dir=str(tmp_path), argv=["prog"]))
    assert (s.source, s.count, s.budget) == ("ray", 2, 4) and len(asked) == 1
    monkeypatch.setattr(claim, "read_grant", lambda env: asked.append(env))  # no grant: the rendezvous decides
    s = keep(held, claim_share(t, {**GROUP, "TF_AUTOPAR_RENDEZVOUS_S": "0"}, lease_dir=str(tmp_path / "r")))
    assert s.source == "single" and len(asked) == 2  # asked by ray_share, remembered for rendezvous_share


def test_count_share_takes_a_slot_of_the_count(tmp_path, held):
    t = make_topology(cores_per_node=4)
    assert count_share(request(t, {}, lease_dir=str(tmp_path))) is None
    shares = [keep(held, count_share(request(t, {"WEB_CONCURRENCY": "2"}, lease_dir=str(tmp_path)))) for _ in range(3)]
    assert [(s.source, s.index, s.count, s.cpus, s.budget) for s in shares] == [
        ("lease", 0, 2, (0, 1), 2),
        ("lease", 1, 2, (2, 3), 2),
        ("lease", 2, 2, (0, 1), 1),  # more processes than the count: doubles up on slice 0, half its budget
    ]
    assert shares[0].note.endswith("; count from env:WEB_CONCURRENCY")
    assert "; more processes than the count 2: shares slice 0 with its holder; " in shares[2].note


def test_count_share_the_callers_count_wins_and_one_worker_has_the_host(tmp_path, held):
    t = make_topology(cores_per_node=4)
    s = keep(held, count_share(request(t, {"WEB_CONCURRENCY": "4"}, lease_dir=str(tmp_path), count=1)))
    assert (s.source, s.index, s.count, s.cpus, s.pin, s.budget) == ("lease", 0, 1, t.affinity, False, 4)
    assert s.note.endswith("; count given; the only worker")


def test_count_share_caps_a_count_no_deployment_has(tmp_path, held):
    t = make_topology(cores_per_node=2)
    s = keep(held, count_share(request(t, {"WEB_CONCURRENCY": str(10**9)}, lease_dir=str(tmp_path / "c"))))
    assert (s.count, s.shared_with, s.budget) == (16, 16, 1)


def test_rendezvous_share_only_without_any_count(tmp_path):
    t = make_topology(cores_per_node=4)
    for env, given in (({"WEB_CONCURRENCY": "2"}, {}), ({}, {"count": 2}), ({}, {"grant": RayGrant(1.0)})):
        assert rendezvous_share(request(t, env, lease_dir=str(tmp_path), **given)) is None


def test_rendezvous_share_without_a_window_counts_the_slots_held(tmp_path, held):
    t = make_topology(cores_per_node=4)
    env = {"TF_AUTOPAR_RENDEZVOUS_S": "0"}
    first = keep(held, rendezvous_share(request(t, env, lease_dir=str(tmp_path))))
    assert (first.source, first.index, first.count, first.cpus, first.pin) == ("single", 0, 1, t.affinity, False)
    assert first.note.endswith("; no count known; no other worker holds a slot: the whole host")
    second = keep(held, rendezvous_share(request(t, env, lease_dir=str(tmp_path))))
    assert (second.source, second.index, second.count, second.cpus) == ("lease", 1, 2, (2, 3))
    assert second.note.endswith("; 2 slots held at claim time")
    assert any("2 cooperating processes seen but no worker count is known" in w for w in _warn.ISSUED)


def test_the_lease_readers_fall_back_to_an_even_split(tmp_path):
    t = make_topology(cores_per_node=8)
    unusable = tmp_path / "a-file"
    unusable.write_text("not a directory")
    cases = (
        (count_share, {"WEB_CONCURRENCY": "4"}, {}, 4, 2),
        (ray_share, {}, {"grant": RayGrant(4.0)}, 2, 4),
        (rendezvous_share, {}, {}, 1, 8),
    )
    for reader, env, given, count, budget in cases:
        s = reader(request(t, env, lease_dir=str(unusable), **given))
        assert (s.source, s.index, s.count, s.budget, s.pin, s.lease) == (
            "even-split",
            None,
            count,
            budget,
            False,
            None,
        )
        assert s.note.startswith("lease unusable: ")


def test_take_slot_says_where_and_what_happened_to_the_slot(tmp_path):
    t = make_topology(cores_per_node=4)
    req = request(t, {}, lease_dir=str(tmp_path))
    directory = tmp_path / group_key(req.env, ["prog"], t.affinity)
    directory.mkdir(mode=0o700)
    slot0 = directory / "slot-0.lock"
    slot0.write_text(json.dumps({"pid": 4_000_000 - 1, "time": 1.0}))  # a pid no process has
    slot0.chmod(0o600)
    slot = take_slot(req, 2, "count given")
    try:
        assert isinstance(slot, Slot) and slot.directory == str(directory) and slot.lease.index == 0
        assert slot.note == f"lease slot 0 in {directory}; count given; reclaimed from pid 3999999 (exited)"
    finally:
        slot.lease.release()


def test_slot_share_doubles_up_beyond_the_count_and_caps_a_budget(tmp_path):
    t = make_topology(cores_per_node=4)
    leases = [acquire(str(tmp_path / "g"), count=3, strict_root=str(tmp_path)) for _ in range(3)]
    try:
        slots = [Slot(lease, str(tmp_path / "g"), "n") for lease in leases]
        s = slot_share(t, slots[2], 2, "lease")
        assert (s.index, s.cpus, s.budget, s.shared_with) == (2, (0, 1), 1, 2)
        assert s.note.startswith("n; more processes than the count 2: shares slice 0 with its holder; ")
        s = slot_share(t, slots[1], 2, "ray", budget=1)
        assert (s.index, s.cpus, s.budget, s.source) == (1, (2, 3), 1, "ray")
        s = slot_share(t, slots[0], 1, "lease", budget=3)
        assert (s.cpus, s.budget, s.pin, s.note) == (t.affinity, 3, False, "n; the only worker")
    finally:
        for lease in leases:
            lease.release()


def test_doubled_up_shares_slice_index_mod_count():
    t = make_topology(cores_per_node=4)
    assert doubled_up(t, 3, 2) == (3, slice_for(t, 1, 2).cpus, 1, 2)
    small = make_topology(cores_per_node=2)  # 4 workers on 2 cores: the sharing rule already
    base = slice_for(small, 1, 4)
    assert doubled_up(small, 5, 4) == (5, base.cpus, 1, base.shared_with + 1)


def test_each_reader_is_named_in_the_module_docstring():
    text = claim.__doc__ or ""
    positions = [text.index(f"``{reader.__name__}``") for reader in READERS]
    assert positions == sorted(positions)

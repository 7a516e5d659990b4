"""Local rank and worker count from launcher variables (pure: env mappings built by hand)."""

from __future__ import annotations

import json

import pytest

from tf_autopar.coordination.ranks import detect_ranks, is_local_host, tf_config_ranks


@pytest.mark.parametrize(
    "env, expected",
    [
        ({"LOCAL_RANK": "3", "LOCAL_WORLD_SIZE": "4"}, (3, 4, "env:LOCAL_RANK")),
        ({"HOROVOD_LOCAL_RANK": "1", "HOROVOD_LOCAL_SIZE": "2"}, (1, 2, "env:HOROVOD_LOCAL_RANK")),
        (
            {"OMPI_COMM_WORLD_LOCAL_RANK": "0", "OMPI_COMM_WORLD_LOCAL_SIZE": "8"},
            (0, 8, "env:OMPI_COMM_WORLD_LOCAL_RANK"),
        ),
        ({"MPI_LOCALRANKID": "2", "MPI_LOCALNRANKS": "3"}, (2, 3, "env:MPI_LOCALRANKID")),
        ({"SLURM_LOCALID": "1", "SLURM_NTASKS_PER_NODE": "2"}, (1, 2, "env:SLURM_LOCALID")),
        ({"TF_AUTOPAR_INSTANCE": "1", "TF_AUTOPAR_INSTANCES": "2"}, (1, 2, "env:TF_AUTOPAR_INSTANCE")),
        ({"WEB_CONCURRENCY": "4"}, (None, 4, "env:WEB_CONCURRENCY")),
        ({"TF_AUTOPAR_INSTANCES": "3", "WEB_CONCURRENCY": "4"}, (None, 3, "env:TF_AUTOPAR_INSTANCES")),
        ({}, (None, None, "none")),
        # a rank without its size is skipped, the next source is used
        ({"LOCAL_RANK": "0", "WEB_CONCURRENCY": "2"}, (None, 2, "env:WEB_CONCURRENCY")),
        # the launcher's own variables win over torchrun's
        (
            {"TF_AUTOPAR_INSTANCE": "0", "TF_AUTOPAR_INSTANCES": "2", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4"},
            (0, 2, "env:TF_AUTOPAR_INSTANCE"),
        ),
    ],
)
def test_sources(env, expected):
    r = detect_ranks(env)
    assert (r.rank, r.size, r.source) == expected
    assert r.warnings == ()


@pytest.mark.parametrize(
    "env, fragment",
    [
        ({"LOCAL_RANK": "x", "LOCAL_WORLD_SIZE": "2"}, "LOCAL_RANK='x' is not an integer"),
        ({"LOCAL_RANK": "2", "LOCAL_WORLD_SIZE": "2"}, "is not below LOCAL_WORLD_SIZE=2"),
        ({"LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "0"}, "LOCAL_WORLD_SIZE='0' is below 1"),
        ({"WEB_CONCURRENCY": "four"}, "WEB_CONCURRENCY='four' is not an integer"),
        ({"TF_CONFIG": "{not json"}, "TF_CONFIG is not JSON"),
        ({"TF_CONFIG": '{"cluster": {}}'}, "needs a 'cluster' object and a 'task' object"),
    ],
)
def test_garbled_values_warn_and_are_ignored(env, fragment):
    r = detect_ranks({**env, "WEB_CONCURRENCY": env.get("WEB_CONCURRENCY", "3")})
    assert any(fragment in w for w in r.warnings), r.warnings
    if "WEB_CONCURRENCY" in env:
        assert (r.rank, r.size, r.source) == (None, None, "none")
    else:  # falls through to the next valid source
        assert (r.rank, r.size, r.source) == (None, 3, "env:WEB_CONCURRENCY")


def _tf_config(cluster, ttype, index):
    return json.dumps({"cluster": cluster, "task": {"type": ttype, "index": index}})


def test_tf_config_counts_local_tasks_only():
    cluster = {
        "worker": ["localhost:2000", "otherhost:2000", "127.0.0.1:2001", "myhost.example.com:2002"],
        "chief": ["localhost:1999"],
        "ps": ["remote:3000"],
    }
    # local tasks in order: chief0, worker0, worker2, worker3 (myhost matches by short name)
    assert tf_config_ranks(_tf_config(cluster, "chief", 0), ["myhost"]) == (0, 4)
    assert tf_config_ranks(_tf_config(cluster, "worker", 0), ["myhost"]) == (1, 4)
    assert tf_config_ranks(_tf_config(cluster, "worker", 2), ["myhost"]) == (2, 4)
    assert tf_config_ranks(_tf_config(cluster, "worker", 3), ["myhost"]) == (3, 4)
    # without the host name, worker 3 is remote
    assert tf_config_ranks(_tf_config(cluster, "worker", 2), []) == (2, 3)
    with pytest.raises(ValueError, match=r"task worker\[1\] is not on this host"):
        tf_config_ranks(_tf_config(cluster, "worker", 1), ["myhost"])
    with pytest.raises(ValueError, match="not in the cluster"):
        tf_config_ranks(_tf_config(cluster, "evaluator", 0), [])


def test_tf_config_in_detect_ranks():
    env = {"TF_CONFIG": _tf_config({"worker": ["127.0.0.1:1", "127.0.0.1:2"]}, "worker", 1)}
    r = detect_ranks(env)
    assert (r.rank, r.size, r.source) == (1, 2, "env:TF_CONFIG")
    remote = {"TF_CONFIG": _tf_config({"worker": ["a:1", "b:2"]}, "worker", 1), "WEB_CONCURRENCY": "2"}
    r = detect_ranks(remote, ["c"])
    assert (r.rank, r.size, r.source) == (None, 2, "env:WEB_CONCURRENCY")
    assert any("not on this host" in w for w in r.warnings)


@pytest.mark.parametrize(
    "host, local",
    [
        ("localhost", True),
        ("127.0.0.1", True),
        ("127.1.2.3", True),
        ("[::1]", True),
        ("::1", True),
        ("box", True),
        ("box.lan", True),
        ("10.0.0.1", False),
        ("other", False),
    ],
)
def test_is_local_host(host, local):
    assert is_local_host(host, ["box"]) is local

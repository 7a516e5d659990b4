"""`tf-autopar run --allocator`: the system's jemalloc/tcmalloc preloaded, clear errors when missing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tf_autopar.cli.main import main
from tf_autopar.runtime import allocator
from tf_autopar.runtime.allocator import AllocatorNotFound, allocator_env, find_library, preload_value, recommendation

from test_launcher_run import launcher


def test_find_library_in_the_given_dirs_and_the_error_names_the_package(tmp_path):
    (tmp_path / "libjemalloc.so.2").write_bytes(b"\x7fELF")
    assert find_library("jemalloc", dirs=[str(tmp_path)], ldconfig=False) == str(tmp_path / "libjemalloc.so.2")
    with pytest.raises(
        AllocatorNotFound,
        match=r"install the package libtcmalloc-minimal4.*apt-get install "
        r"libtcmalloc-minimal4",
    ):
        find_library("tcmalloc", dirs=[str(tmp_path)], ldconfig=False)
    with pytest.raises(ValueError, match="unknown allocator 'mimalloc'"):
        find_library("mimalloc")
    with pytest.raises(ValueError, match="choose one of default, jemalloc, tcmalloc"):
        allocator_env("glibc", {})
    assert allocator_env("default", {"LD_PRELOAD": "/x.so"}) == ({}, "")


def test_a_users_ld_preload_is_kept():
    assert preload_value("/lib/libjemalloc.so.2", None) == ("/lib/libjemalloc.so.2", "")
    value, note = preload_value("/lib/libjemalloc.so.2", "/opt/libtrace.so")
    assert value == "/lib/libjemalloc.so.2:/opt/libtrace.so" and "added before yours" in note
    value, note = preload_value("/lib/libjemalloc.so.2", "/usr/lib/libtcmalloc.so.4")
    assert value == "/usr/lib/libtcmalloc.so.4" and "already preloads an allocator" in note


def test_recommendation_only_where_measured_and_won_every_round():
    table = {
        ("cpu A", "f1"): ("dlrm", "jemalloc", 1.08, (1.03, 1.12)),
        ("cpu A", "f2"): ("bert", "tcmalloc", 1.02, (0.97, 1.05)),
    }
    rec = recommendation("cpu A", "f1", table)
    assert rec is not None and rec.allocator == "jemalloc" and "--allocator jemalloc" in rec.text()
    assert "dlrm" in rec.text() and "1.08x" in rec.text()
    assert recommendation("cpu A", "f2", table) is None  # a round it lost: not recommended
    assert recommendation("cpu B", "f1", table) is None  # not measured on this processor
    assert recommendation("cpu A", "f3", table) is None


def test_missing_library_is_a_clear_cli_error(monkeypatch, capsys):
    monkeypatch.setitem(allocator.LIBRARIES, "jemalloc", (("libjemalloc_not_here.so.9",), "libjemalloc2"))
    monkeypatch.setattr(allocator, "_ldconfig_paths", lambda: [])
    assert main(["run", "--allocator", "jemalloc", "--", "true"]) == 2
    err = capsys.readouterr().err
    assert "tf-autopar run: error: --allocator jemalloc" in err and "apt-get install libjemalloc2" in err


@pytest.mark.parametrize("name", ["jemalloc", "tcmalloc"])
def test_the_system_library_is_preloaded_into_the_command(name):
    try:
        path = find_library(name)
    except AllocatorNotFound as exc:
        pytest.skip(str(exc))
    proc = launcher(["--allocator", name, "--", "sh", "-c", "echo PRELOAD=$LD_PRELOAD"])
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert f"PRELOAD={path}" in out


def test_run_with_a_model_recommends_only_what_was_measured_for_it(user_models, monkeypatch, capsys):
    from tf_autopar.graph import analyze
    from tf_autopar.topology import detect_topology

    fingerprint = analyze(user_models["SM"], batch=1).fingerprint
    cpu = detect_topology().cpu.model
    assert main(["run", "--model", user_models["SM"], "--dry-run", "--", "true"]) == 0
    assert "allocator:" not in capsys.readouterr().err  # nothing measured for it: nothing said
    monkeypatch.setitem(allocator.MEASURED, (cpu, fingerprint), ("small", "jemalloc", 1.10, (1.05, 1.20)))
    assert main(["run", "--model", user_models["SM"], "--dry-run", "--", "true"]) == 0
    assert "allocator: jemalloc measured 1.10x [1.05-1.20] faster than glibc malloc on small" in capsys.readouterr().err


def test_every_measured_entry_is_the_committed_measurement():
    """MEASURED is copied from benchmarks/results/allocator.json: each entry is there, won every
    round, and is the fastest allocator that did for that model."""
    doc = json.loads((Path(__file__).resolve().parents[1] / "benchmarks/results/allocator.json").read_text())
    assert allocator.MEASURED
    for (processor, fingerprint), (model, chosen, speedup, spread) in allocator.MEASURED.items():
        assert processor == doc["processor"] and doc["fingerprints"][model] == fingerprint
        winners = [r for r in doc["rows"] if r["model"] == model and r["wins_every_round"]]
        best = max(winners, key=lambda r: r["speedup"][0])
        assert best["allocator"] == chosen
        assert (
            round(best["speedup"][0], 2) == speedup
            and (round(best["speedup"][1], 2), round(best["speedup"][2], 2)) == spread
        )

"""bench_http.py's ceilings from saved runs: the figures docs/serving.md quotes are computed here.

Pure: synthetic runs in the shape one_server() records, no server, no TensorFlow.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("bench_http", ROOT / "benchmarks" / "bench_http.py")
bench_http = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench_http)

CPUS = len(os.sched_getaffinity(0))


def run(config: str, workers: int, throughput: float, cpu_ms: float, busy: list[float], **kw) -> dict:
    base = {"model": "m", "kind": bench_http.GUNICORN, "workers": workers, "quota": None, "round": 0}
    return dict(
        base,
        config=config,
        throughput=throughput,
        cpu_ms_per_request=cpu_ms,
        worker_cpus=busy,
        wrk_cpus=kw.pop("wrk_cpus", 0.0),
        p50_ms=1.0,
        p99_ms=2.0,
        errors=0,
        non2xx=0,
        **kw,
    )


def test_http_ceiling_charges_the_model_the_http_path_and_wrk() -> None:
    # model 1.0 - 0.4 = 0.6 ms, HTTP at this row 0.5 ms, wrk 0.1 CPUs at 1000 req/s = 0.1 ms a request
    echo = [run(bench_http.ECHO, 2, 1000.0, 0.5, [0.5, 0.5], wrk_cpus=0.1)]
    c = bench_http.http_ceiling([1.0], [run(bench_http.ECHO_SOLO, 1, 2500.0, 0.4, [1.0])], echo, 2, 2)
    assert c["model_cpu_ms"] == pytest.approx(0.6) and c["wrk_cpu_ms"] == pytest.approx(0.1)
    assert c["throughput"] == pytest.approx(2000 / 1.2)  # the host's 2 CPUs, shared with wrk, bind first
    # under a quota wrk is outside it: the workers' 1.5 CPUs bind
    assert bench_http.http_ceiling([1.0], [run(bench_http.ECHO_SOLO, 1, 2500.0, 0.4, [1.0])], echo, 1.5, 2)[
        "throughput"
    ] == pytest.approx(1500 / 1.1)


@pytest.mark.skipif(CPUS < 2, reason="the rows need two usable CPUs")
def test_busy_workers_ceiling_counts_only_the_workers_that_got_connections() -> None:
    runs = [
        run("solo", 1, 100.0, 10.0, [1.0]),
        run("enable", 2, 95.0, 10.0, [0.02, 0.99]),  # one worker idle: one core's worth was reachable
        run("default", 2, 60.0, 15.0, [0.9, 0.9]),
    ]
    (row,) = [r for r in bench_http.summarize(runs) if r["workers"] == 2]
    assert row["enable"]["of_ceiling"] == pytest.approx(95.0 / 200.0)
    assert row["enable"]["of_busy_ceiling"][0] == pytest.approx(0.95)
    assert row["enable"]["busy_of_usable"][0] == pytest.approx(1.01)
    assert row["enable"]["idle_workers"] == [1]


@pytest.mark.skipif(CPUS != 2, reason="four workers are two per core only on two CPUs")
def test_two_per_core_ceiling_pairs_rounds_and_drops_a_shared_run_with_an_idle_worker() -> None:
    rows = [run("enable", 4, 150.0, 12.0, [0.5] * 4), run("default", 4, 50.0, 30.0, [0.5] * 4)]
    ceilings = [
        run("solo", 1, 100.0, 10.0, [1.0], source=1),
        run(bench_http.SHARED, 2, 80.0, 12.5, [0.5, 0.5], source=1),
        run("solo", 1, 50.0, 20.0, [1.0], source=1, round=1),
        run(bench_http.SHARED, 2, 50.0, 20.0, [0.02, 0.98], source=1, round=1),  # one worker alone: dropped
    ]
    solo = [run("solo", 1, 90.0, 10.0, [1.0])]
    (row,) = [r for r in bench_http.summarize(rows + solo + ceilings) if r["workers"] == 4]
    assert row["ceiling"]["solo_rps"] == 90.0  # the row's own run's solo, not the other run's
    assert row["shared_ceiling"]["per_core_ratio"] == [0.8, 0.8, 0.8]
    assert row["enable"]["of_shared_ceiling"] == pytest.approx(150.0 / (90.0 * 0.8 * 2))

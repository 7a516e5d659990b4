"""`tf-autopar bench MODEL` and `tf-autopar validate PATH` on small user models, as a user runs them.

The models are made once in a child process (the test process never imports TensorFlow): a
Keras model with a free batch and a free sequence length, an embedding table of 37 rows,
exported as a SavedModel and saved as a .keras file; a SavedModel without signatures; one
whose signature takes strings. No timed assertions: only what ran, where, with what.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tf_autopar.models.bench import parse_compare
from tf_autopar.validation import results

pytestmark = pytest.mark.tf

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TABLE_ROWS = 37

MAKE = f"""
import os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
import keras, tensorflow as tf
out = sys.argv[1]
keras.utils.set_random_seed(0)
ids = keras.Input((None,), dtype="int32", name="ids")
feats = keras.Input((4,), name="feats")
e = keras.layers.GlobalAveragePooling1D()(keras.layers.Embedding({TABLE_ROWS}, 8)(ids))
y = keras.layers.Dense(3)(keras.layers.Concatenate()([e, keras.layers.Dense(8)(feats)]))
model = keras.Model([ids, feats], y)
model.export(os.path.join(out, "sm"), verbose=False)
model.save(os.path.join(out, "m.keras"))

class NoSig(tf.Module):
    def __init__(self):
        self.v = tf.Variable(tf.ones([4, 3]))
    @tf.function
    def f(self, x):
        return tf.matmul(x, self.v)
m = NoSig()
m.f.get_concrete_function(tf.TensorSpec([None, 4]))
tf.saved_model.save(m, os.path.join(out, "nosig"), signatures={{}})

class Text(tf.Module):
    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="text")])
    def f(self, text):
        return {{"n": tf.strings.length(text)}}
t = Text()
tf.saved_model.save(t, os.path.join(out, "text"), signatures={{"serving_default": t.f}})
"""


def _env(tmp) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("TF_NUM_", "TF_OVERRIDE", "TF_AUTOPAR", "OMP_", "KMP_")) or k == "TF_AUTOPAR_ENGINES"
    }
    env["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, env.get("PYTHONPATH", "")) if p)
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    env["TF_AUTOPAR_CACHE_DIR"] = str(tmp)  # nothing of the user's cache is read or written
    env["TF_AUTOPAR_LEASE_DIR"] = str(tmp)
    return env


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    out = tmp_path_factory.mktemp("models")
    proc = subprocess.run(
        [sys.executable, "-c", MAKE, str(out)], env=_env(out), capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


def cli(*args, tmp, timeout=600):
    return subprocess.run(
        [sys.executable, "-m", "tf_autopar.cli.main", *map(str, args)],
        env=_env(tmp),
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=tmp,
    )


def snapshot(path) -> list:
    """Every file under ``path`` with its size and modification time: 'nothing changed' is this, unchanged."""
    out = []
    for root, _, files in os.walk(path):
        for f in files:
            st = os.stat(os.path.join(root, f))
            out.append((os.path.relpath(os.path.join(root, f), path), st.st_size, st.st_mtime_ns))
    return sorted(out)


def pids(config) -> list[int]:
    return [p["pid"] for run in config["runs"] for p in run["processes"]]


def test_bench_savedmodel_runs_each_configuration_in_its_own_fresh_process(models, tmp_path):
    out = tmp_path / "b.json"
    proc = cli(
        "bench",
        models / "sm",
        "--compare",
        "default,1x1",
        "--rounds",
        2,
        "--requests",
        3,
        "--warmup",
        1,
        "--json-out",
        out,
        "--no-progress",
        tmp=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(out.read_text())
    assert doc["order"] == ["default", "1x1"] and set(doc["configs"]) == {"default", "1x1"}
    runs = sorted((r["seq"], name, r["round"]) for name, c in doc["configs"].items() for r in c["runs"])
    assert [(n, r) for _, n, r in runs] == [("default", 1), ("1x1", 1), ("default", 2), ("1x1", 2)]  # interleaved
    for name, c in doc["configs"].items():  # noqa: B007
        assert [r["status"] for r in c["runs"]] == ["ok", "ok"], c["runs"]
        for r in c["runs"]:
            assert len(r["step_times_s"]) == 3 and all(t > 0 for t in r["step_times_s"])
            assert r["throughput_rps"] > 0 and r["items_per_s"] == pytest.approx(r["throughput_rps"])
    all_pids = pids(doc["configs"]["default"]) + pids(doc["configs"]["1x1"])
    assert len(set(all_pids)) == 4  # one fresh process per run
    default = doc["summary"]["default"]["settings"]
    one = doc["summary"]["1x1"]["settings"]
    assert default["env"] == {} and "TensorFlow default" in default["inter_source"]
    assert one["env"] == {"TF_NUM_INTEROP_THREADS": "1", "TF_NUM_INTRAOP_THREADS": "1"}
    assert (one["inter_op"], one["intra_op"], one["tf_compute_threads"]) == (1, 1, 1)
    ncpu = len(doc["host"]["affinity"])
    assert (default["inter_op"], default["intra_op"]) == (ncpu, ncpu)
    s = doc["summary"]["1x1"]
    assert s["speedup_vs_default"]["paired"]["n"] == 2 and s["latency_s"]["p99"] >= s["latency_s"]["p50"] > 0
    assert doc["host"]["cpu_model"] and doc["host"]["tf_version"].startswith("2.")
    # the integer ids were kept below the embedding table's size, read from the graph
    ids = next(i for i in doc["inputs"] if i["name"] == "ids")
    assert ids["int_max"] == TABLE_ROWS and "embedding table" in ids["values"]
    assert ids["shape"] == [1, 128] and any("128 assumed" in a for a in doc["assumptions"])
    text = proc.stdout
    assert "p50 ms" in text and "speedup vs default" in text and "1x1 (TF_NUM_INTEROP_THREADS=1" in text
    assert doc["host"]["cpu_model"] in text and doc["host"]["tf_version"] in text


def test_bench_keras_file_with_the_plan_at_a_batch_and_input_shape(models, tmp_path):
    # one round: interleaved rounds and their pairing are the SavedModel test's; this one is about the plan
    proc = cli(
        "bench",
        models / "m.keras",
        "--batch",
        2,
        "--input-shape",
        "ids=2,16",
        "--compare",
        "default,plan",
        "--rounds",
        1,
        "--requests",
        3,
        "--warmup",
        1,
        "--json",
        "--no-progress",
        tmp=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(proc.stdout)  # --json: only JSON on stdout, the report on stderr
    assert "speedup vs default" in proc.stderr
    assert doc["model"]["kind"] == "keras" and doc["batch"] == 2
    assert {i["name"]: i["shape"] for i in doc["inputs"]} == {"ids": [2, 16], "feats": [2, 4]}
    assert doc["plan"]["plan"]["mode"] == "latency" and doc["plan"]["profile"]["heavy_ops"] >= 2
    plan_env = doc["plan"]["env"]
    assert doc["configs"]["plan"]["env"] == plan_env
    got = doc["summary"]["plan"]["settings"]
    assert got["env"] == plan_env  # the plan's variables are what its processes ran with
    for name in ("default", "plan"):
        (run,) = doc["configs"][name]["runs"]
        assert run["status"] == "ok" and len(run["step_times_s"]) == 3
    assert doc["summary"]["plan"]["speedup_vs_default"]["value"] > 0


def test_bench_enable_first_and_second_start_the_frozen_path_at_a_setting_and_live(models, tmp_path):
    # One bench for the configurations that need no 'default' (each would otherwise prepare the
    # model in its own bench): enable's first and second start, frozen:1x1 (the model's frozen
    # graph in a session of its own pools, no tf_autopar in the child) and live (enable() once
    # live tuning has tried the served setting's neighbours).
    out = tmp_path / "e.json"
    proc = cli(
        "bench",
        models / "sm",
        "--compare",
        "enable,enable-cached,frozen:1x1,live",
        "--rounds",
        1,
        "--requests",
        3,
        "--warmup",
        1,
        "--json-out",
        out,
        "--no-progress",
        tmp=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(out.read_text())
    assert doc["order"] == ["enable", "enable-cached", "frozen:1x1", "live"]
    assert doc["fill_run"]["status"] == "ok" and doc["fill_run"]["cache_files"]  # the unmeasured start filled it
    for name in ("enable", "enable-cached"):
        (run,) = doc["configs"][name]["runs"]
        assert run["status"] == "ok"
        process = run["processes"][0]["tf_autopar"]["process"]
        assert process["phase"] in ("before-start", "cached", "after-start")
        assert process["planned_inter"] >= 1 and process["planned_intra"] >= 1
        assert doc["summary"][name]["settings"]["tf_autopar"]["phase"] == process["phase"]
    # a first start finds an empty plan cache; the second start the cache the unmeasured run filled
    assert doc["configs"]["enable"]["runs"][0]["processes"][0]["tf_autopar"]["cache_files_at_start"] == []
    cached = doc["configs"]["enable-cached"]["runs"][0]["processes"][0]["tf_autopar"]["cache_files_at_start"]
    assert cached == doc["fill_run"]["cache_files"] != []
    assert pids(doc["configs"]["enable"]) != pids(doc["configs"]["enable-cached"])
    # the frozen path at a setting of one's choice
    assert doc["configs"]["frozen:1x1"]["frozen"] == "1x1"
    frozen = doc["summary"]["frozen:1x1"]
    assert frozen["status"] == "ok" and frozen["settings"]["frozen_session"] == "1x1"
    assert frozen["settings"]["env"] == {"TF_OVERRIDE_GLOBAL_THREADPOOL": "1"}  # a session's own intra-op pool
    assert "frozen graph, session 1x1" in proc.stdout
    # live: a first start of its own (not the cache the unmeasured run filled), timed once live tuning was done
    (live_run,) = doc["configs"]["live"]["runs"]
    assert live_run["status"] == "ok"
    live = live_run["processes"][0]["tf_autopar"]
    assert live["cache_files_at_start"] == []
    assert live["tuned_s"] is not None and live["tuned_s"] >= 0  # it waited for tuning to finish
    buckets = [b for s in live["served"] for b in s["buckets"] if b["calls"]]
    assert buckets and all(b["tuned"] or b["path"] != "frozen session" for b in buckets)


def test_bench_throughput_runs_the_plans_instances_together_and_sums_them(models, tmp_path):
    proc = cli(
        "bench",
        models / "sm",
        "--mode",
        "throughput",
        "--compare",
        "default,plan",
        "--rounds",
        1,
        "--requests",
        3,
        "--warmup",
        1,
        "--json-out",
        tmp_path / "t.json",
        "--no-progress",
        tmp=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads((tmp_path / "t.json").read_text())
    plan = doc["plan"]["plan"]
    n = plan["instances"]
    assert doc["instances"] == n >= 1
    for name in ("default", "plan"):
        (run,) = doc["configs"][name]["runs"]
        assert run["status"] == "ok" and len(run["processes"]) == n
        assert run["throughput_rps"] == pytest.approx(sum(p["throughput_rps"] for p in run["processes"]))
        assert len({p["pid"] for p in run["processes"]}) == n
    bound = [p["settings"]["cpus"] for p in doc["configs"]["plan"]["runs"][0]["processes"]]
    assert sorted(map(sorted, bound)) == sorted(sorted(c) for c in plan["cpus"])  # each bound as the plan says


@pytest.mark.parametrize("case", ["missing", "nosig", "text", "input_shape"])
def test_bench_bad_input_is_a_clear_error_and_changes_nothing(models, tmp_path, case):
    model, extra, message = {
        "missing": (models / "no_such_model", [], "no such file or directory"),
        "nosig": (models / "nosig", [], "has no signatures"),
        "text": (models / "text", [], "--inputs"),
        "input_shape": (models / "sm", ["--input-shape", "ids=1,2,3"], "--input-shape ids=1,2,3 has rank 3"),
    }[case]
    before = snapshot(models)
    out = tmp_path / "never.json"
    proc = cli("bench", model, *extra, "--rounds", 1, "--requests", 1, "--json", out, "--no-progress", tmp=tmp_path)
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    assert message in proc.stderr and "Traceback" not in proc.stderr
    assert "'--json " in proc.stderr and "is now spelled '--json-out" in proc.stderr  # the old spelling, noted
    assert not out.exists() and snapshot(models) == before
    if case == "nosig":
        assert "f(x: float32[None, 4])" in proc.stderr  # what it has instead
    if case == "text":
        assert "cannot synthesise strings" in proc.stderr


def test_validate_accepts_a_savedmodel_as_a_row(models, tmp_path):
    out = tmp_path / "v.json"
    # one round: the rounds themselves are the harness's tests' (test_validation_harness.py)
    proc = cli(
        "validate",
        models / "sm",
        "--batch",
        2,
        "--space",
        "none",
        "--rounds",
        1,
        "--steps",
        3,
        "--warmup",
        1,
        "--json-out",
        out,
        "--no-progress",
        tmp=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(out.read_text())
    results.validate_document(doc)
    (row,) = doc["rows"]
    assert row["workload"] == str(models / "sm") and (row["mode"], row["batch"]) == ("infer", 2)
    assert row["plan"]["status"] == "ok" and row["plan"]["model_info"]["model"]["kind"] == "savedmodel"
    assert {i["name"]: i["shape"] for i in row["plan"]["model_info"]["inputs"]}["ids"] == [2, 128]
    assert results.OURS in row["configs"] and "tf-default" in row["configs"]
    ran = [r for c in row["configs"].values() for r in c["runs"]]
    assert ran and all(r["status"] == "ok" and len(r["step_times_s"]) == 3 for r in ran)
    assert row["summary"]["ours_vs_optimum"] is not None
    assert str(models / "sm") in proc.stdout and "ids int32[2,128]" in proc.stdout
    # the frozen path (--space none: no sweep): the model file's frozen graph at our plan's pools, and live
    assert row["frozen_path"]["status"] == "ok" and "export" not in row["frozen_path"]
    assert row["order"][-2:] == ["frozen", "live"]
    # the frozen session at our plan's pools is timed inside the live run (its --sweep)
    inter, intra = row["summary"]["configs"][results.OURS]["threads"]
    (frozen,) = row["configs"]["frozen"]["runs"]
    assert frozen["swept_in"] == "live" and frozen["status"] == "ok" and len(frozen["step_times_s"]) == 3
    (live,) = row["configs"]["live"]["runs"]
    assert live["tuned_s"] is not None and isinstance(live["served"], list)  # it waited for live tuning
    assert list(live["sweep"]) == [f"{inter}x{intra}"]
    assert bool(live["engines"]) == bool(live["served"])  # each served session's engine, as status() named it
    s = row["summary"]
    assert s["frozen_vs_optimum"]["value"] > 0 and s["live_vs_optimum"]["value"] > 0
    assert s["delivers"]["config"] == "live" and s["delivers_vs_default"]["value"] > 0
    assert s["optimum_path"] in results.PATHS and "of optimum" in proc.stdout and "enable()" in proc.stdout


def test_validate_rejects_a_model_it_cannot_feed(models, tmp_path):
    out = tmp_path / "v.json"
    proc = cli(
        "validate", models / "text", "--space", "none", "--rounds", 1, "--json-out", out, "--no-progress", tmp=tmp_path
    )
    assert proc.returncode == 2 and "--inputs" in proc.stderr and not out.exists()
    proc = cli("validate", models / "missing", "--space", "none", tmp=tmp_path)
    assert proc.returncode == 2 and "no such file or directory" in proc.stderr


@pytest.mark.parametrize("bad", ["frozen:0x1", "frozen:2", "frozen:axb", "frozen:1x1x2"])
def test_a_bad_frozen_setting_is_named(bad):
    with pytest.raises(ValueError, match="frozen:INTERxINTRA"):
        parse_compare(f"default,{bad}")

"""`validate`'s headline (issue 47): the default table shows what the one line delivers (enable()
after live tuning on inference rows, the plan on training rows) against TensorFlow's default and
the optimum, in at most eight columns of at most 100 characters; --details keeps every column;
the chart is a valid PNG drawn without matplotlib; an inference row's frozen sessions are timed
inside its live run (one process a round). No TensorFlow: synthetic documents and the stand-in."""

from __future__ import annotations

import copy
import json
import struct
import zlib

import pytest

from tf_autopar.measure.configs import thread_config
from tf_autopar.measure.runner import TRACKER
from tf_autopar.validation import chart, report, results
from tf_autopar.validation.harness import Harness, RowSpec, fixed_plan_provider

from test_validation_frozen import frozen_row, standin_options
from test_validation_harness import read_log
from test_validation_stats import hand_row, minimal_doc, topo

# every column of the table before issue 47 (the details view keeps them, in this order)
TODAYS_COLUMNS = [
    "workload",
    "mode",
    "batch",
    "ours",
    "ours ms (min-max)",
    "vs default",
    "vs tf-rec",
    "vs intel",
    "optimum",
    "ours/opt",
    "frozen/opt",
    "live/opt",
    "live serves",
    "tuned",
    "tuned/opt",
    "tune cost",
]


def _finish(doc: dict) -> dict:
    for row in doc["rows"]:
        row["summary"] = results.summarize_row(row, 2)
    doc["geomean"] = results.geomeans(doc["rows"])
    results.validate_document(doc)
    return doc


def served_doc(engine: str = "someengine") -> dict:
    """An inference row whose plan's process pools (1x2, 1.0 s) and live path (enable(), 0.6 s,
    serving 1x1 on ``engine``) differ, and a training row (the plan), with --tuned on the first."""
    doc = minimal_doc()
    doc["options"] = {"rounds": 3, "steps": 3, "warmup": 1}
    infer = frozen_row()
    for run in infer["configs"]["live"]["runs"]:
        run["engines"] = [engine]
    infer["configs"]["tuned"] = {**copy.deepcopy(infer["configs"]["2x1"]), "runs": [], "same_as": "2x1"}
    infer["configs"]["tuned"]["kind"] = "tuned"
    infer["tune"] = {"status": "ok", "tuned": "2x1", "wall_s": 6.0, "runs": [{}, {}]}
    train = copy.deepcopy(hand_row())
    train.update(workload="inception_v3", mode="train", batch=16)
    train["frozen_path"] = {"status": "n/a", "reason": "training: no"}
    doc["rows"] = [infer, train]
    return _finish(doc)


def test_the_headline_is_what_enable_serves_not_the_plans_pools():
    doc = served_doc()
    infer, train = (r["summary"] for r in doc["rows"])
    assert infer["delivers"] == {"config": "live", "path": "live", "served": ["1x1"], "engines": ["someengine"]}
    assert infer["delivers_vs_default"]["value"] == pytest.approx(2.0 / 0.6, rel=0.1)  # live, not ours (2.0)
    assert infer["speedup"]["tf-default"]["value"] == pytest.approx(2.0)
    assert infer["delivers_vs_optimum"]["value"] == pytest.approx(0.5 / 0.6, rel=0.1)  # ours: 0.5
    assert train["delivers"]["config"] == "tf_autopar" and train["delivers"]["path"] == "process"
    assert train["delivers_vs_optimum"] == train["ours_vs_optimum"]
    text = report.format_table(doc)
    line = next(ln for ln in text.splitlines() if ln.startswith("w infer1"))
    cells = line.split()
    assert "enable(): someengine 1x1" in line and "600.0" in line  # the engine from the data, live's time
    assert cells[cells.index("600.0") + 1 : cells.index("600.0") + 3] == ["3.33x", "0.83"]
    assert "2.00x" not in line and "0.50" not in line  # the plan's process pools are not the headline
    t = next(ln for ln in text.splitlines() if ln.startswith("inception_v3 train b16"))
    assert "plan: pools 1x2" in t and "2.00x" in t and "0.80" in t
    assert doc["geomean"]["delivers_vs_default"] == pytest.approx((2.0 / 0.6 * 2.0) ** 0.5, rel=0.1)
    # the chart's bars: the recommendations, the one line and the optimum, each against the default
    assert set(infer["vs_default"]) == {"tf-default", "tf-recommended", "intel-recommended", "delivers", "optimum"}
    assert infer["vs_default"]["optimum"]["value"] == pytest.approx(4.0, rel=0.1)


def test_the_optimum_counts_a_path_added_later():
    """A configuration of a kind the report has never seen (another engine) is a path of its own
    and, when fastest, the optimum: nothing lists the paths by hand."""
    row = frozen_row()
    row["configs"]["engine:x"] = {**copy.deepcopy(row["configs"]["frozen:2x1"]), "kind": "engine:x"}
    for run in row["configs"]["engine:x"]["runs"]:
        run.update(step_times_s=[0.1] * 3, median_s=0.1)
    s = results.summarize_row(row, 2)
    assert s["optimum"] == "engine:x" and s["optimum_path"] == "engine:x" and "engine:x" in s["best_by_path"]
    assert s["delivers_vs_optimum"]["value"] == pytest.approx(0.1 / 0.6, rel=0.1)


def test_the_default_view_has_at_most_eight_columns_in_100_characters():
    doc = served_doc()
    assert len(report.columns(doc)) <= 8
    text = report.format_table(doc)
    assert max(len(ln) for ln in text.splitlines()) <= 100, text
    # as wide as a quick run gets: a long name at batch 16, live serving two sessions across the
    # rounds, the optimum a baseline
    wide = served_doc(engine="tensorflow")
    infer, train = wide["rows"]
    infer.update(workload="inception_v3", mode="infer", batch=16)
    for run, session in zip(infer["configs"]["live"]["runs"], ("1x1", "2x1", "1x1")):
        run["served"] = [session]
    for r in train["configs"]["tf-default"]["runs"]:
        r.update(step_times_s=[0.1] * 3, median_s=0.1)
    _finish(wide)
    assert train["summary"]["optimum"] == "tf-default"
    text = report.format_table(wide)
    assert "enable(): tensorflow 1x1,2x1" in text and max(len(ln) for ln in text.splitlines()) <= 100, text
    header = text.splitlines()[2]
    for gone in ("vs tf-rec", "vs intel", "ours/opt", "frozen/opt", "live serves", "tune cost"):
        assert gone not in header  # in --details, the JSON and the markdown report
    assert "failed run(s)" in text and "--details" in text  # the failures counted, listed with --details


def test_details_keep_every_column_of_the_table_before():
    doc = served_doc()
    text = report.format_table(doc, details=True)
    header = next(ln for ln in text.splitlines() if ln.startswith("workload"))
    at = [header.index(h) for h in TODAYS_COLUMNS]
    assert at == sorted(at), header  # all of them, in their order
    for h in ("delivers", "delivers vs default", "delivers/opt"):
        assert h in header
    assert "failed runs (recorded; the run went on):" in text and "order per round" in text
    md = report.format_markdown(doc, chart="validate.png")
    assert "![speed relative to TensorFlow's default](validate.png)" in md
    assert all(f"| {h} |" in md or f" {h} |" in md for h in TODAYS_COLUMNS)
    assert "## Every configuration" in md and "| live | live 1x1 |" in md


def _png_chunks(data: bytes) -> list[tuple[bytes, bytes]]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    chunks, i = [], 8
    while i < len(data):
        (n,) = struct.unpack(">I", data[i : i + 4])
        kind, body = data[i + 4 : i + 8], data[i + 8 : i + 8 + n]
        (crc,) = struct.unpack(">I", data[i + 8 + n : i + 12 + n])
        assert crc == zlib.crc32(kind + body) & 0xFFFFFFFF, kind
        chunks.append((kind, body))
        i += 12 + n
    return chunks


def test_the_chart_is_written_as_a_valid_png_with_each_series_drawn(tmp_path):
    doc = served_doc()
    path = tmp_path / "sub" / "validate.png"
    chart.write(doc, str(path))
    data = path.read_bytes()
    chunks = _png_chunks(data)
    assert [k for k, _ in chunks] == [b"IHDR", b"IDAT", b"IEND"]
    width, height, depth, colour_type = struct.unpack(">IIBB", chunks[0][1][:10])
    assert (depth, colour_type) == (8, 2) and width == chart.WIDTH
    raw = zlib.decompress(chunks[1][1])
    assert len(raw) == height * (1 + 3 * width)
    pixels = {
        raw[i : i + 3] for y in range(height) for i in range(y * (1 + 3 * width) + 1, (y + 1) * (1 + 3 * width), 3)
    }
    for _, _, colour in chart.series():  # every series has a bar (and the legend its swatch)
        assert bytes.fromhex(colour.lstrip("#")) in pixels, colour
    # no row with a default time: still a valid PNG, saying so
    empty = json.loads(json.dumps(doc))
    for row in empty["rows"]:
        row["summary"].pop("vs_default")
    assert _png_chunks(chart.render(empty))[0][0] == b"IHDR"


def test_an_inference_rows_frozen_sessions_are_timed_inside_its_live_run(standin_log, monkeypatch):
    monkeypatch.setenv("STANDIN_FAST", "frozen:2x1")
    monkeypatch.setenv("STANDIN_LIVE_ENGINE", "engine-from-the-child")
    ours = fixed_plan_provider(thread_config(1, 2, openmp=False, name="tf_autopar", kind="plan"))
    h = Harness(topo(), standin_options(sweep=True, infer_pool_search=False), plan_provider=ours)
    doc = h.run([RowSpec("wa", "infer1", 1, "tiny"), RowSpec("wa", "train", 4, "tiny")])
    infer, train = doc["rows"]
    log = read_log(standin_log)
    processes = [e["threads"] for e in log if e["mode"] == "infer"]
    assert not any(t.startswith("frozen") for t in processes)  # no process of their own
    assert processes.count("live") == 2  # one a round
    assert not {"1x1", "2x1", "2x2"} & set(infer["configs"])  # the pools' search: training rows only
    assert {"1x1", "2x1", "2x2"} <= set(train["configs"])
    for name in ("frozen", "frozen:2x1", "frozen:2x2"):
        runs = infer["configs"][name]["runs"]
        assert [r["round"] for r in runs] == [1, 2] and all(r["swept_in"] == "live" for r in runs), name
        assert all(r["status"] == "ok" and len(r["step_times_s"]) == 3 for r in runs)
    assert infer["frozen_path"]["swept_in"] == "live"
    s = infer["summary"]
    assert s["optimum"] == "frozen:2x1" and s["optimum_path"] == "frozen"
    assert s["delivers"]["engines"] == ["engine-from-the-child"]
    assert "enable(): engine-from-the-child 1x1" in report.format_table(doc)
    assert h.estimate([RowSpec("wa", "infer1", 1, "tiny")])[0] == 1 + 1 + (2 + 1 + 1) * 2  # export, plan, slots
    results.validate_document(json.loads(report.to_json(doc)))
    assert not TRACKER.live


def test_a_failed_live_run_fails_the_sessions_it_would_have_timed(standin_log, monkeypatch):
    monkeypatch.setenv("STANDIN_CRASH", "live")
    ours = fixed_plan_provider(thread_config(1, 2, openmp=False, name="tf_autopar", kind="plan"))
    h = Harness(topo(), standin_options(rounds=1, sweep=True), plan_provider=ours)
    doc = h.run([RowSpec("wa", "infer1", 1, "tiny")])
    row = doc["rows"][0]
    run = row["configs"]["frozen:2x1"]["runs"][0]
    assert run["status"] == "crash" and run["swept_in"] == "live" and "simulated crash" in run["stderr_tail"]
    assert row["summary"]["delivers_vs_default"] is None
    assert "enable(): crash" in report.format_table(doc)
    results.validate_document(json.loads(report.to_json(doc)))

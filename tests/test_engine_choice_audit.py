"""engine_choice_audit.py's verdicts from saved runs (pure: synthetic records, no engine)."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("engine_choice_audit", ROOT / "benchmarks" / "engine_choice_audit.py")
audit_mod = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(audit_mod)


def _run(rows: dict[tuple[str, int], list[str]]) -> dict:
    return {
        "rows": [
            {"model": m, "batch": b, "rounds": [{"enable": {"runners": [{"engine": e}]}} for e in engines]}
            for (m, b), engines in rows.items()
        ]
    }


def _settings(rows: dict[str, dict[str, float]]) -> dict:
    return {
        "processor": "X",
        "rounds": 9,
        "rows": {k: {c: {"median_ms": v} for c, v in ms.items()} for k, ms in rows.items()},
    }


def test_each_served_engine_is_judged_against_the_fastest_runner_in_one_process() -> None:
    served = audit_mod.served_engines(
        [
            _run({("a", 1): ["onnxruntime"], ("b", 8): ["openvino"]}),
            _run({("b", 8): ["openvino", "onnxruntime-spinning"], ("c", 1): ["tensorflow"]}),  # replaces b8
        ]
    )
    assert served[("b", 8)] == ["openvino", "onnxruntime-spinning"]
    ms = {"ov-f32-static": 5.0, "ort-nospin": 6.0, "ort-spin": 4.0, "tf": 10.0}
    rows = audit_mod.audit(served, _settings({"a b1": ms, "b b8": ms, "c b1": ms}))
    by = {(r["model"], r["batch"]): r for r in rows}
    assert by[("a", 1)]["fastest"] == "ort-spin" and by[("a", 1)]["costs"] == [1.5]
    assert by[("b", 8)]["costs"] == [1.25, 1.0]
    assert math.isnan(by[("c", 1)]["costs"][0])  # TensorFlow's tuned pools are not among the configurations
    text = audit_mod.summarise(rows)
    assert "within 5% of the fastest in one process: 1 of 3 row-rounds" in text
    assert "| c | 1 |" in text and "| - |" in text

#!/usr/bin/env python
"""What the fast path's conversion child costs on its own: time, CPU and peak memory per model.

For each SavedModel of ``benchmarks/user_models.py``: its serving signature frozen as the fast
path freezes it (runtime/frozen.py, engines/foreign.graph_def), written where the child reads it,
and converted by the real child (engines/conversion.py's command line and environment, nothing
served beside it) in each mode, interleaved round by round (the order alternating):

- ``guarded``: tf2onnx's default, the whole graph deep-copied before each of its optimizers;
- ``unguarded``: the optimizers on the graph itself (the child's default for ONNX);
- ``openvino``: OpenVINO's conversion, for scale.

Per run: wall seconds, the child's user and system CPU seconds and its peak RSS (wait4). The two
ONNX files of the last round are compared: the same op types, and ONNX Runtime's outputs on the
same random inputs (batch 1) equal. The freezing and the comparison run in processes of their
own: Linux counts the resident size of the process that started a child, before its exec, in the
child's peak (a driver holding Xception's graph made every child's peak at least 2.4 GB).

    python benchmarks/bench_conversion.py /work/user_models --rounds 3 \\
        --out benchmarks/results/conversion_epyc.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from _host import processor  # noqa: E402
from user_models import MODELS, make_inputs  # noqa: E402

MODES = ("guarded", "unguarded", "openvino")


def _freeze(model_dir: str, directory: str) -> dict:
    import tensorflow as tf

    from tf_autopar.runtime.fastpath.engines import foreign
    from tf_autopar.runtime.frozen import FrozenGraph

    frozen = FrozenGraph(tf.saved_model.load(model_dir).signatures["serving_default"])
    graph_def = foreign.graph_def(frozen)
    with open(os.path.join(directory, "graph.pb"), "wb") as fh:
        fh.write(graph_def.SerializeToString())
    with open(os.path.join(directory, "names.json"), "w", encoding="utf-8") as fh:
        json.dump({"inputs": list(frozen.inputs), "outputs": list(frozen.outputs)}, fh)
    return {
        "nodes": len(graph_def.node),
        "graph_mb": round(graph_def.ByteSize() / 2**20, 1),
        "constants_mb": round(foreign.constant_bytes(frozen) / 2**20, 1),
    }


def _in_child(*args: str) -> dict:
    """This script's ``--freeze`` or ``--check`` in a process of its own (the module docstring says why)."""
    proc = subprocess.run([sys.executable, os.path.abspath(__file__), *args], capture_output=True, text=True)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    return {"error": proc.stderr.strip().splitlines()[-1:]}


def _run(mode: str, directory: str) -> dict:
    from tf_autopar.runtime.fastpath.engines import conversion

    kind = conversion.OPENVINO if mode == "openvino" else conversion.ONNX
    cmd, env = conversion.child_command(kind, directory, guarded=mode == "guarded")
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    stderr = proc.stderr.read() if proc.stderr else b""
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - start
    row = {
        "mode": mode,
        "wall_s": round(wall, 2),
        "user_s": round(usage.ru_utime, 2),
        "sys_s": round(usage.ru_stime, 2),
        "peak_rss_mb": round(usage.ru_maxrss / 1024),
        "exit": proc.returncode,
    }
    if proc.returncode:
        row["error"] = stderr.decode(errors="replace").strip().splitlines()[-1:]
    return row


def _same_model(a: str, b: str, model: str) -> dict:
    import numpy as np
    import onnx
    import onnxruntime as ort

    ops = [Counter(n.op_type for n in onnx.load(path).graph.node) for path in (a, b)]
    sessions = [ort.InferenceSession(path, providers=["CPUExecutionProvider"]) for path in (a, b)]
    feeds = make_inputs(model, 1)
    names = [i.name for i in sessions[0].get_inputs()]
    feed = {}
    for name in names:  # tf2onnx names the inputs after the graph's tensors ("images:0")
        key = name.split(":")[0]
        value = feeds.get(key, feeds.get(name))
        if value is None:
            return {"same_ops": ops[0] == ops[1], "outputs": f"no input for {name}"}
        feed[name] = np.asarray(value)
    outs = [s.run(None, feed) for s in sessions]
    diff = max(float(np.max(np.abs(x.astype(np.float64) - y))) for x, y in zip(*outs))
    return {"same_ops": ops[0] == ops[1], "nodes": sum(ops[0].values()), "max_abs_diff": diff}


def _median(rows: list[dict], mode: str, field: str) -> float | None:
    values = [r[field] for r in rows if r["mode"] == mode and not r["exit"]]
    return round(statistics.median(values), 2) if values else None


def main() -> None:
    if sys.argv[1:2] == ["--freeze"]:
        print("RESULT " + json.dumps(_freeze(sys.argv[2], sys.argv[3])))
        return
    if sys.argv[1:2] == ["--check"]:
        try:
            print("RESULT " + json.dumps(_same_model(*sys.argv[2:5])))
        except Exception as exc:  # e.g. a model tf2onnx wrote that ONNX Runtime refuses: the row's result
            print("RESULT " + json.dumps({"error": f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"}))
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", help="the directory benchmarks/user_models.py wrote")
    ap.add_argument("--only", default="", help="comma list of model names (default: every one there)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    modes = [m for m in args.modes.split(",") if m]
    names = [m for m in (args.only.split(",") if args.only else MODELS) if os.path.isdir(os.path.join(args.models, m))]
    result = {"host": processor(), "command": " ".join(sys.argv), "rounds": args.rounds, "rows": []}
    for model in names:
        directory = tempfile.mkdtemp(prefix=f"bench_conversion-{model}-")
        try:
            row = {"model": model, **_in_child("--freeze", os.path.join(args.models, model), directory), "runs": []}
            kept: dict[str, str] = {}
            for r in range(args.rounds):
                for mode in modes if r % 2 == 0 else modes[::-1]:
                    run = _run(mode, directory)
                    run["round"] = r
                    row["runs"].append(run)
                    out = os.path.join(directory, "model.onnx")
                    if mode != "openvino" and os.path.exists(out):
                        kept[mode] = os.path.join(directory, f"{mode}.onnx")
                        os.replace(out, kept[mode])
            if {"guarded", "unguarded"} <= set(kept):
                row["check"] = _in_child("--check", kept["guarded"], kept["unguarded"], model)
            row["median"] = {
                mode: {f: _median(row["runs"], mode, f) for f in ("wall_s", "user_s", "sys_s", "peak_rss_mb")}
                for mode in modes
            }
            result["rows"].append(row)
            g, u = row["median"].get("guarded", {}), row["median"].get("unguarded", {})
            ratio = g.get("wall_s") / u["wall_s"] if g.get("wall_s") and u.get("wall_s") else float("nan")
            print(
                f"{model:16s} guarded {g.get('wall_s')} s {g.get('peak_rss_mb')} MB | unguarded {u.get('wall_s')} s "
                f"{u.get('peak_rss_mb')} MB | {ratio:.2f}x | openvino {row['median'].get('openvino', {}).get('wall_s')} s"
                f" | {row.get('check')}",
                flush=True,
            )
        finally:
            shutil.rmtree(directory, ignore_errors=True)
        if args.out:  # after each model: a long run stopped keeps what it measured
            with open(args.out, "w", encoding="utf-8") as fh:
                json.dump(result, fh, indent=1)


if __name__ == "__main__":
    main()

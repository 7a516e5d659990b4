"""Speed of the graph analysis (issue 3 goals: 100,000-node graph < 1 s; 40 diamonds in ms).

Graphs are built directly as protobuf NodeDefs (TensorFlow's proto classes; no op runs):

- synthetic: N nodes (default 100,000), a random DAG with locality (each node reads 1-3
  of the 64 nodes before it, 5% control inputs), 30% heavy ops (MatMul/Conv2D), variable
  reads feeding embedding gathers, plus 100 calls of a 200-node library function (the
  nested-function path, memoised).
- diamonds: a chain of 40 diamonds (2^40 paths), where an unmemoised path search explodes;
  ``--naive`` also times such a search on smaller chains to show the blow-up.
- ``--training``: the measurement behind ``include_gradients=True``: for a plain CNN and an
  inception-style CNN, the widths with and without gradient ops, and the training step
  time for every inter x intra split of the cores (fresh process per run, interleaved).
- ``--live``: ``analyze()`` of a live tf.Graph against the same graph as a GraphDef with
  recorded shapes (``as_graph_def(add_shapes=True)``, as a frozen .pb has them), at 60,000 and
  100,000 ops (a random DAG of MatMul, BiasAdd, AddV2, Relu, Reshape, control inputs; every op
  shape-inferred by TensorFlow's import), each timed as the first call in a fresh process, with
  this tree's code and, given ``--before DIR``, another checkout's, interleaved round by round.

Prints median / min / max over --repeats runs (after one warm-up), text or --json.
Run on a quiet machine for final figures: python benchmarks/bench_graph.py [--quick] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _host import processor  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

HEAVY = ("MatMul", "Conv2D")
LIGHT = ("Relu", "AddV2", "Mul", "BiasAdd", "Identity", "ConcatV2", "Reshape", "Sigmoid")


def synthetic_graph(n: int, seed: int = 0, calls: int = 100, body: int = 200):
    from tensorflow.core.framework import graph_pb2

    rng = random.Random(seed)
    g = graph_pb2.GraphDef()
    f = g.library.function.add()
    f.signature.name = "block_fn"
    f.signature.input_arg.add().name = "x"
    f.signature.output_arg.add().name = "y"
    prev = ["x"]
    for i in range(body):
        nd = f.node_def.add()
        nd.name = f"b{i}"
        nd.op = rng.choice(HEAVY) if rng.random() < 0.3 else rng.choice(LIGHT)
        nd.input.extend(rng.choice(prev[-16:]) for _ in range(rng.randint(1, 2)))
        prev.append(f"b{i}:output:0")
    f.ret["y"] = prev[-1]
    names: list[str] = []
    call_every = max(1, n // max(1, calls))
    for i in range(n):
        nd = g.node.add()
        nd.name = f"n{i}"
        if i == 0:
            nd.op = "Placeholder"
        elif i % call_every == 0:
            nd.op = "StatefulPartitionedCall"
            nd.attr["f"].func.name = "block_fn"
            nd.input.append(names[rng.randrange(max(0, i - 64), i)])
        elif i % 97 == 1:
            nd.op = "ReadVariableOp"
        elif i % 97 == 2:
            nd.op = "GatherV2"
            nd.input.extend([names[i - 1], names[rng.randrange(max(0, i - 64), i)]])
        else:
            r = rng.random()
            nd.op = rng.choice(HEAVY) if r < 0.3 else rng.choice(LIGHT)
            for _ in range(rng.randint(1, 3)):
                nd.input.append(names[rng.randrange(max(0, i - 64), i)])
            if rng.random() < 0.05:
                nd.input.append("^" + names[rng.randrange(max(0, i - 64), i)])
        names.append(nd.name)
    order = list(range(n))  # store out of topological order, as TF does not guarantee it
    rng.shuffle(order)
    shuffled = graph_pb2.GraphDef()
    shuffled.library.CopyFrom(g.library)
    shuffled.node.extend(g.node[i] for i in order)
    return shuffled


def diamond_graph(k: int):
    from tensorflow.core.framework import graph_pb2

    g = graph_pb2.GraphDef()
    top = g.node.add()
    top.name, top.op = "d0", "MatMul"
    last = "d0"
    for i in range(k):
        for side in ("a", "b"):
            nd = g.node.add()
            nd.name, nd.op = f"d{i}{side}", "Conv2D"
            nd.input.extend([last, last])
        nd = g.node.add()
        nd.name, nd.op = f"d{i + 1}", "MatMul"
        nd.input.extend([f"d{i}a", f"d{i}b"])
        last = nd.name
    return g


def naive_depth(graph_def) -> int:
    """The authors' approach: unmemoised recursion over parents (exponential on diamonds)."""
    from tf_autopar.graph.heavy_ops import HEAVY_OP_TYPES

    nodes = {nd.name: nd for nd in graph_def.node}

    def depth(name: str) -> int:
        nd = nodes[name]
        parents = {i.split(":")[0].lstrip("^") for i in nd.input}
        best = max((depth(parent) for parent in parents), default=0)
        return best + (nd.op in HEAVY_OP_TYPES)

    return max(depth(n) for n in nodes)


# --- training graphs: do gradient ops change which inter-op setting is best? -------------
TRAIN_CHILD = r"""
import json, os, statistics, sys, time
inter, intra, kind, steps = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
import tensorflow as tf
tf.config.threading.set_inter_op_parallelism_threads(inter)
tf.config.threading.set_intra_op_parallelism_threads(intra)
sys.path.insert(0, sys.argv[5])
from bench_graph import training_model
model, x, y = training_model(kind)
opt = tf.keras.optimizers.SGD(0.01)
@tf.function
def step(x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean((model(x, training=True) - y) ** 2)
    grads = tape.gradient(loss, model.trainable_variables)
    opt.apply_gradients(zip(grads, model.trainable_variables))
    return loss
for _ in range(3):
    step(x, y)
times = []
for _ in range(steps):
    t0 = time.perf_counter(); step(x, y).numpy(); times.append(time.perf_counter() - t0)
print(json.dumps({"median_s": statistics.median(times)}))
"""


def training_model(kind: str):
    """Small training models: 'chain' (a plain CNN) or 'branches' (inception-style modules)."""
    import keras
    import numpy as np

    keras.utils.set_random_seed(0)
    inp = keras.Input((32, 32, 16))
    x = keras.layers.Conv2D(32, 3, padding="same", activation="relu")(inp)
    for _ in range(3):
        if kind == "chain":
            for _ in range(3):
                x = keras.layers.Conv2D(32, 3, padding="same", activation="relu")(x)
        else:
            b = [keras.layers.Conv2D(8, 1, activation="relu")(x) for _ in range(4)]
            b[1] = keras.layers.Conv2D(8, 3, padding="same", activation="relu")(b[1])
            b[2] = keras.layers.Conv2D(8, 5, padding="same", activation="relu")(b[2])
            b[3] = keras.layers.Conv2D(8, 3, padding="same", activation="relu")(b[3])
            x = keras.layers.Concatenate()(b)
    out = keras.layers.Dense(10)(keras.layers.GlobalAveragePooling2D()(x))
    model = keras.Model(inp, out)
    rng = np.random.default_rng(0)
    return model, rng.standard_normal((16, 32, 32, 16), dtype="float32"), rng.standard_normal((16, 10), dtype="float32")


def training_measurement(rounds: int, steps: int) -> dict:
    """Widths with/without gradient ops, and step times for each inter x intra split of the
    cores (fresh process per run, configurations interleaved per round)."""
    import subprocess

    import tensorflow as tf

    from tf_autopar.graph import analyze

    cores = os.cpu_count() or 1
    splits = [(p, max(1, cores // p)) for p in (1, 2, 4, 8) if p <= cores]
    here = os.path.dirname(os.path.abspath(__file__))
    out: dict = {}
    for kind in ("chain", "branches"):
        model, x, y = training_model(kind)
        opt = tf.keras.optimizers.SGD(0.01)

        @tf.function(input_signature=[tf.TensorSpec(x.shape), tf.TensorSpec(y.shape)])
        def step(x, y):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean((model(x, training=True) - y) ** 2)  # noqa: B023
            grads = tape.gradient(loss, model.trainable_variables)  # noqa: B023
            opt.apply_gradients(zip(grads, model.trainable_variables))  # noqa: B023
            return loss

        with_g, without = analyze(step), analyze(step, include_gradients=False)
        out[kind] = {
            "with_gradients": {
                "heavy": with_g.heavy_ops,
                "depth": with_g.depth,
                "avg_width": with_g.avg_width,
                "max_width": with_g.max_width,
            },
            "forward_only": {
                "heavy": without.heavy_ops,
                "depth": without.depth,
                "avg_width": without.avg_width,
                "max_width": without.max_width,
            },
            "step_s": {f"{p}x{t}": [] for p, t in splits},
        }
    for _ in range(rounds):
        for kind in out:
            for p, t in splits:
                r = subprocess.run(
                    [sys.executable, "-c", TRAIN_CHILD, str(p), str(t), kind, str(steps), here],
                    capture_output=True,
                    text=True,
                    timeout=600,
                )
                if r.returncode != 0:
                    raise RuntimeError(r.stderr[-2000:])
                out[kind]["step_s"][f"{p}x{t}"].append(json.loads(r.stdout.strip().splitlines()[-1])["median_s"])
    for kind in out:
        out[kind]["median_step_s"] = {k: statistics.median(v) for k, v in out[kind]["step_s"].items()}
    return out


# --- live tf.Graph against GraphDef (--live) ------------------------------------------------
def live_graph_def(n: int, seed: int = 0):
    """A GraphDef of n ops that TensorFlow can import (attributes set, shapes inferable): x
    [None, 16] into a random DAG with locality; about 30% MatMul, a fifth of them reading a
    Reshape to [-1, 16] (the work estimate looks through it), 5% control inputs."""
    from tensorflow.core.framework import graph_pb2, types_pb2

    rng = random.Random(seed)
    g = graph_pb2.GraphDef()
    f32 = types_pb2.DT_FLOAT

    def const(name: str, dims: tuple, dtype: int, values: list) -> None:
        nd = g.node.add(name=name, op="Const")
        nd.attr["dtype"].type = dtype
        t = nd.attr["value"].tensor
        t.dtype = dtype
        for d in dims:
            t.tensor_shape.dim.add(size=d)
        (t.float_val if dtype == f32 else t.int_val).extend(values)

    x = g.node.add(name="x", op="Placeholder")
    x.attr["dtype"].type = f32
    for d in (-1, 16):
        x.attr["shape"].shape.dim.add(size=d)
    const("w", (16, 16), f32, [0.5])
    const("bias", (16,), f32, [0.1])
    const("shape", (2,), types_pb2.DT_INT32, [-1, 16])
    names = ["x"]
    while len(g.node) < n:
        i = len(g.node)
        a = names[rng.randrange(max(0, len(names) - 64), len(names))]
        r = rng.random()
        if r < 0.3:
            if rng.random() < 0.2:
                nd = g.node.add(name=f"r{i}", op="Reshape", input=[a, "shape"])
                nd.attr["T"].type = f32
                nd.attr["Tshape"].type = types_pb2.DT_INT32
                a = nd.name
            nd = g.node.add(name=f"n{i}", op="MatMul", input=[a, "w"])
        elif r < 0.45:
            nd = g.node.add(name=f"n{i}", op="BiasAdd", input=[a, "bias"])
        elif r < 0.7:
            nd = g.node.add(
                name=f"n{i}", op="AddV2", input=[a, names[rng.randrange(max(0, len(names) - 64), len(names))]]
            )
        else:
            nd = g.node.add(name=f"n{i}", op="Relu", input=[a])
        if rng.random() < 0.05:
            nd.input.append("^" + names[rng.randrange(max(0, len(names) - 64), len(names))])
        nd.attr["T"].type = f32
        names.append(nd.name)
    return g


LIVE_KINDS = ("tf.Graph", "GraphDef")


def live_child(kind: str, path: str, code: str) -> dict:
    """One fresh-process run: load the graph as ``kind``, time the first ``analyze()`` call."""
    import gc

    sys.path.insert(0, code)
    from tensorflow.core.framework import graph_pb2

    gd = graph_pb2.GraphDef()
    with open(path, "rb") as f:
        gd.ParseFromString(f.read())
    obj = gd
    if kind == "tf.Graph":
        import tensorflow as tf

        obj = tf.Graph()
        with obj.as_default():
            tf.graph_util.import_graph_def(gd, name="")
        del gd
    from tf_autopar.graph import analyze

    gc.collect()
    c0, t0 = time.process_time(), time.perf_counter()
    p = analyze(obj)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    import tf_autopar.graph

    export = {}
    if kind == "tf.Graph":  # the alternative: one export with every op's shapes, analysed as a GraphDef
        for shapes in (False, True):
            t0 = time.perf_counter()
            obj.as_graph_def(add_shapes=shapes)
            export["as_graph_def_add_shapes_s" if shapes else "as_graph_def_s"] = time.perf_counter() - t0
    return {
        "wall_s": wall,
        "cpu_s": cpu,
        **export,
        "code": os.path.dirname(os.path.dirname(os.path.dirname(tf_autopar.graph.__file__))),
        "profile": {
            "nodes": p.nodes,
            "heavy_ops": p.heavy_ops,
            "depth": p.depth,
            "avg_width": p.avg_width,
            "max_width": p.max_width,
            "typical_op_work": p.typical_op_work,
            "fingerprint": p.fingerprint,
        },
    }


def _spread(values: list) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def live_measurement(sizes: list, rounds: int, codes: dict) -> dict:
    """tf.Graph and GraphDef x each code x each size, a fresh process per run, interleaved."""
    import subprocess
    import tempfile

    here = os.path.abspath(__file__)
    tmp = tempfile.mkdtemp(prefix="bench_graph_live_")
    files = {}
    for n in sizes:  # the graph once per size: imported by TensorFlow to infer every shape
        plain, shaped = os.path.join(tmp, f"plain{n}.pb"), os.path.join(tmp, f"shapes{n}.pb")
        script = (
            "import sys; sys.path.insert(0, sys.argv[1]); import tensorflow as tf; from bench_graph import "
            "live_graph_def; gd = live_graph_def(int(sys.argv[2])); g = tf.Graph()\n"
            "with g.as_default(): tf.graph_util.import_graph_def(gd, name='')\n"
            "open(sys.argv[3], 'wb').write(g.as_graph_def().SerializeToString())\n"
            "open(sys.argv[4], 'wb').write(g.as_graph_def(add_shapes=True).SerializeToString())"
        )
        subprocess.run(
            [sys.executable, "-c", script, os.path.dirname(here), str(n), plain, shaped],
            check=True,
            capture_output=True,
            timeout=1800,
        )
        files[n] = {"tf.Graph": plain, "GraphDef": shaped}
    runs: dict = {str(n): {c: {k: [] for k in LIVE_KINDS} for c in codes} for n in sizes}
    profiles: dict = {}
    order = [(n, c, k) for n in sizes for c in codes for k in LIVE_KINDS]
    for r in range(rounds):
        shift = r % len(order)
        for n, c, k in order[shift:] + order[:shift]:  # rotate, so no configuration always runs first
            out = subprocess.run(
                [sys.executable, here, "--live-child", k, files[n][k], codes[c]],
                capture_output=True,
                text=True,
                timeout=1800,
            )
            if out.returncode != 0:
                raise RuntimeError(out.stderr[-2000:])
            rec = json.loads(out.stdout.strip().splitlines()[-1])
            assert os.path.realpath(rec["code"]) == os.path.realpath(codes[c]), (rec["code"], codes[c])
            runs[str(n)][c][k].append({key: v for key, v in rec.items() if key.endswith("_s")})
            profiles.setdefault(str(n), {}).setdefault(f"{c} {k}", rec["profile"])
    summary: dict = {}
    for n in runs:
        summary[n] = {}
        for c in codes:
            by = runs[n][c]
            summary[n][c] = {
                k: {"wall_s": _spread([x["wall_s"] for x in by[k]]), "cpu_s": _spread([x["cpu_s"] for x in by[k]])}
                for k in LIVE_KINDS
            }
            for key in ("as_graph_def_s", "as_graph_def_add_shapes_s"):
                summary[n][c][f"tf.Graph {key[:-2]}"] = _spread([x[key] for x in by["tf.Graph"]])
            paired = [g["wall_s"] / d["wall_s"] for g, d in zip(by["tf.Graph"], by["GraphDef"])]
            summary[n][c]["tf.Graph / GraphDef wall, paired per round"] = _spread(paired)
        if "before" in codes:
            summary[n]["after / before wall, paired per round"] = {
                k: _spread([a["wall_s"] / b["wall_s"] for a, b in zip(runs[n]["after"][k], runs[n]["before"][k])])
                for k in LIVE_KINDS
            }
    same = {n: len({json.dumps(p, sort_keys=True) for p in by.values()}) == 1 for n, by in profiles.items()}
    return {
        "goal": "100,000 ops in under 1 s",
        "codes": codes,
        "rounds": rounds,
        "summary": summary,
        "profiles": profiles,
        "profiles_identical": same,
        "runs": runs,
    }


def host() -> dict:
    """The processor and load the figures were taken on."""
    return {"processor": processor(), "cpus": os.cpu_count(), "loadavg": os.getloadavg()}


def timed(fn, repeats: int) -> dict:
    """Wall times, plus CPU time (less inflated than wall time on a shared machine)."""
    fn()  # warm-up
    times, cpu = [], []
    for _ in range(repeats):
        c0, t0 = time.process_time(), time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return {
        "median_s": statistics.median(times),
        "min_s": min(times),
        "max_s": max(times),
        "cpu_median_s": statistics.median(cpu),
        "repeats": repeats,
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=100_000)
    ap.add_argument("--diamonds", type=int, default=40)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--quick", action="store_true", help="10,000 nodes, 3 repeats (a smoke run)")
    ap.add_argument("--naive", action="store_true", help="also time an unmemoised DFS on 10..18 diamonds")
    ap.add_argument(
        "--training",
        action="store_true",
        help="instead: widths with/without gradient ops vs measured step time per inter x intra split",
    )
    ap.add_argument("--rounds", type=int, default=3, help="--training, --live: interleaved rounds")
    ap.add_argument("--steps", type=int, default=20, help="--training: timed steps per run")
    ap.add_argument(
        "--live",
        action="store_true",
        help="instead: analyze() of a live tf.Graph vs the same graph as a GraphDef, fresh processes",
    )
    ap.add_argument("--sizes", default="60000,100000", help="--live: graph sizes in ops")
    ap.add_argument("--before", metavar="DIR", help="--live: also time the tf_autopar of this checkout")
    ap.add_argument("--live-child", nargs=3, metavar=("KIND", "FILE", "CODE"), help=argparse.SUPPRESS)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if args.live_child:
        print(json.dumps(live_child(*args.live_child)))
        return 0
    if args.live:
        codes = {"after": os.path.dirname(os.path.dirname(os.path.abspath(__file__)))}
        if args.before:
            codes = {"before": os.path.abspath(args.before), **codes}
        start = host()
        result = live_measurement([int(s) for s in args.sizes.split(",")], args.rounds, codes)
        result["host"] = {**start, "loadavg_end": os.getloadavg()}
        if args.json:
            print(json.dumps(result, indent=2))
        else:
            for n, by in result["summary"].items():
                for c in codes:
                    for k in LIVE_KINDS:
                        w = by[c][k]["wall_s"]
                        print(
                            f"{int(n):,} ops, {c}, {k}: median {w['median'] * 1e3:.0f} ms "
                            f"[{w['min'] * 1e3:.0f}-{w['max'] * 1e3:.0f}], cpu {by[c][k]['cpu_s']['median'] * 1e3:.0f} ms"
                        )
                    ratio = by[c]["tf.Graph / GraphDef wall, paired per round"]
                    print(f"  {c}: tf.Graph / GraphDef {ratio['median']:.2f}x [{ratio['min']:.2f}-{ratio['max']:.2f}]")
            print(f"profiles identical across codes and kinds: {result['profiles_identical']}")
        return 0
    if args.training:
        result = training_measurement(args.rounds, args.steps)
        if args.json:
            print(json.dumps(result, indent=2))
        else:
            for kind, r in result.items():
                print(f"{kind}: with gradients {r['with_gradients']}, forward only {r['forward_only']}")
                for k, v in r["median_step_s"].items():
                    print(f"  inter x intra {k}: median step {v * 1e3:.1f} ms over {len(r['step_s'][k])} runs")
        return 0
    if args.quick:
        args.nodes, args.repeats = 10_000, 3

    from tf_autopar.graph import analyze_graph_def

    results: dict = {"goals": {"synthetic_s": 1.0, "diamonds_s": 0.01}}
    g = synthetic_graph(args.nodes)
    p = analyze_graph_def(g)
    results["synthetic"] = {
        "graph_nodes": args.nodes,
        "ops_analysed": p.nodes,
        "heavy_ops": p.heavy_ops,
        "depth": p.depth,
        "avg_width": p.avg_width,
        "max_width": p.max_width,
        **timed(lambda: analyze_graph_def(g), args.repeats),
    }
    parse_bytes = g.SerializeToString()
    from tensorflow.core.framework import graph_pb2

    def parse_and_analyze():
        gd = graph_pb2.GraphDef()
        gd.ParseFromString(parse_bytes)
        analyze_graph_def(gd)

    results["synthetic_with_parse"] = timed(parse_and_analyze, args.repeats)
    d = diamond_graph(args.diamonds)
    p = analyze_graph_def(d)
    results["diamonds"] = {
        "diamonds": args.diamonds,
        "heavy_ops": p.heavy_ops,
        "depth": p.depth,
        **timed(lambda: analyze_graph_def(d), args.repeats * 3),
    }
    if args.naive:
        naive = {}
        for k in (10, 12, 14, 16, 18):
            dk = diamond_graph(k)
            assert naive_depth(dk) == analyze_graph_def(dk).depth
            naive[k] = timed(lambda dk=dk: naive_depth(dk), 1)["median_s"]
        results["naive_dfs_s_by_diamonds"] = naive
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        s, w, dm = results["synthetic"], results["synthetic_with_parse"], results["diamonds"]
        print(
            f"synthetic {s['graph_nodes']} nodes ({s['ops_analysed']} ops with function bodies, "
            f"{s['heavy_ops']} heavy, depth {s['depth']}, widths {s['avg_width']}/{s['max_width']}): "
            f"median {s['median_s'] * 1e3:.0f} ms, min {s['min_s'] * 1e3:.0f} ms, max {s['max_s'] * 1e3:.0f} ms, "
            f"cpu median {s['cpu_median_s'] * 1e3:.0f} ms (goal < 1000 ms)"
        )
        print(f"  including protobuf parsing: median {w['median_s'] * 1e3:.0f} ms, min {w['min_s'] * 1e3:.0f} ms")
        print(
            f"chain of {dm['diamonds']} diamonds (depth {dm['depth']}): median {dm['median_s'] * 1e3:.2f} ms, "
            f"min {dm['min_s'] * 1e3:.2f} ms (goal: milliseconds)"
        )
        for k, t in results.get("naive_dfs_s_by_diamonds", {}).items():
            print(f"  unmemoised DFS, {k} diamonds: {t * 1e3:.0f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())

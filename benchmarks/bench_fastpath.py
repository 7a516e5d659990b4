#!/usr/bin/env python
"""The fast path as a server meets it: a program with only ``tf_autopar.enable()`` at its top.

For each SavedModel of benchmarks/user_models.py (none of them a bundled workload) at batch 1 and
at its serving batch, in fresh processes, one configuration after the other per row (rows and
rounds interleaved), a server-style loop: load with ``tf.saved_model.load``, call
``signatures["serving_default"]`` with numpy inputs, read the outputs back as numpy, for a
fixed wall time. Configurations:

- ``default``: TensorFlow alone (eager signature, TF's default pools); run twice per round
  (``default`` and ``default-again``) so that each row has the noise of two identical runs;
- ``enable``: ``enable()`` with no argument on an empty plan cache (first start): the first
  ``--window`` seconds' p50/p99 against the default's, the switch time (the first request the
  frozen session answered), steady-state latency after the switch, peak RSS;
- ``enable-2nd``: a second start on the cache the first left: is its first call served by the
  frozen session, and its latency;
- ``pools:IxJ``: the eager signature under TF_NUM_INTEROP_THREADS=I, TF_NUM_INTRAOP_THREADS=J
  (the fresh-process sweep `validate`/`tune` search), in the first round only;
- ``frozen-sweep``: one process, the frozen graph in one session per (inter, intra) pair of
  this host, interleaved: the frozen path at its best per-session setting (first round only).

    python benchmarks/user_models.py /work/user_models
    python benchmarks/bench_fastpath.py /work/user_models --out benchmarks/results/fastpath.json
    python benchmarks/bench_fastpath.py --summarise benchmarks/results/fastpath.json
    python benchmarks/bench_fastpath.py /work/user_models --roots before=../old,after=. --only a,b,c

``--roots LABEL=DIR,...`` compares checkouts of tf_autopar in the same rounds: each row runs
``enable@LABEL`` and ``enable-2nd@LABEL`` with DIR's tf_autopar importable, interleaved with the
defaults (no sweeps), and the summary gives each checkout's paths and speed against the default.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from _host import processor  # noqa: E402
from user_models import SERVING  # noqa: E402

PAIRS = ("1x1", "1x2", "2x1", "2x2")

# ------------------------------------------------------------------------------ the child (a server)

CHILD = r"""
import json, os, resource, sys, time
cfg, path, name, batch, seconds = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), float(sys.argv[5])
sys.path.insert(0, sys.argv[6])
t_proc = time.perf_counter()
if cfg.startswith("enable"):
    import tf_autopar
    tf_autopar.enable()
elif cfg == "frozen-sweep" and "original" in sys.argv[7].split(","):
    import tf_autopar  # the original path as enable() leaves it when it keeps it: under the planned process pools
    tf_autopar.enable(optimize=False)
import numpy as np, tensorflow as tf
from user_models import make_inputs
inputs = make_inputs(name, batch)
out = {"config": cfg}
if cfg == "frozen-sweep":
    from tf_autopar.runtime.frozen import FrozenGraph
    loaded = tf.saved_model.load(path)
    frozen = FrozenGraph(loaded.signatures["serving_default"])
    names = sorted(inputs)  # the signature's flat (sorted) input order = the frozen placeholders'
    feeds = {t: inputs[n] for t, n in zip(frozen.inputs, names)}
    pairs = [tuple(int(v) for v in p.split("x")) for p in sys.argv[7].split(",") if p != "original"]
    runs = {p: (lambda s: lambda: s.run(frozen.outputs, feeds))(frozen.open_sessions(*p)[0]) for p in pairs}
    if "original" in sys.argv[7].split(","):
        sig = loaded.signatures["serving_default"]
        runs["original"] = lambda: {k: v.numpy() for k, v in sig(**inputs).items()}
    for run in runs.values():
        run()  # grappler, once per session
    per = {}
    label = lambda p: p if isinstance(p, str) else f"{p[0]}x{p[1]}"
    rounds = []  # per rotation: each setting's block median (ms), for the spread of a ratio between settings
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        this = {}
        for p, run in runs.items():  # blocks of 8, the first 2 dropped: the previous session's threads wind down
            block = []
            for k in range(8):
                t = time.perf_counter(); run()
                if k >= 2:
                    block.append(time.perf_counter() - t)
            per.setdefault(p, []).extend(block)
            this[label(p)] = sorted(block)[len(block) // 2] * 1e3
        rounds.append(this)
    out["sweep_ms"] = {label(p): sorted(v)[len(v) // 2] * 1e3 for p, v in per.items()}
    out["sweep_n"] = {label(p): len(v) for p, v in per.items()}
    out["sweep_rounds_ms"] = rounds
    print("RESULT " + json.dumps(out), flush=True)
    sys.exit(0)
t0 = time.perf_counter()
loaded = tf.saved_model.load(path)
sig = loaded.signatures["serving_default"]
out["load_s"] = time.perf_counter() - t0
served_before = 0
def frozen_served():
    if not cfg.startswith("enable"):
        return 0
    return sum(b.served for s in tf_autopar.status().served if s.function == "signatures['serving_default']"
               for b in s.buckets)
times, stamps, frozen_flags = [], [], []
start = time.perf_counter()
while time.perf_counter() - start < seconds or len(times) < 3:
    t = time.perf_counter()
    result = {k: v.numpy() for k, v in sig(**inputs).items()}
    times.append(time.perf_counter() - t)
    stamps.append(t - start)
    if cfg.startswith("enable"):
        n = frozen_served(); frozen_flags.append(n > served_before); served_before = n
out.update(times_ms=[x * 1e3 for x in times], stamps_s=stamps, frozen=frozen_flags,
           peak_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
           start_s=start - t_proc)
if cfg.startswith("enable"):
    st = tf_autopar.status()
    out["status"] = st.text()
    out["buckets"] = [dict(bucket=b.bucket, path=b.path, inter_op=b.inter_op, intra_op=b.intra_op, speedup=b.speedup,
                           build_s=b.build_s, served=b.served, reason=b.reason)
                      for s in st.served if s.function == "signatures['serving_default']" for b in s.buckets]
    out["process"] = [st.process.planned_inter, st.process.planned_intra] if st.process else None
print("RESULT " + json.dumps(out), flush=True)
"""


def run_child(
    cfg: str,
    model_dir: str,
    name: str,
    batch: int,
    seconds: float,
    cache: str,
    pairs: tuple[str, ...] = PAIRS,
    extra_env: dict[str, str] | None = None,
    root: str | None = None,
) -> dict:
    env = child_env(extra_env, root)
    env["TF_AUTOPAR_CACHE_DIR"] = cache
    extra: list[str] = []
    if cfg.startswith("pools:"):
        inter, intra = cfg.split(":")[1].split("x")
        env.update(TF_NUM_INTEROP_THREADS=inter, TF_NUM_INTRAOP_THREADS=intra)
    if cfg == "frozen-sweep":
        env["TF_OVERRIDE_GLOBAL_THREADPOOL"] = "1"
        extra = [",".join(pairs)]
    t0 = time.time()
    res = run_script(CHILD, [cfg, os.path.join(model_dir, name), name, str(batch), str(seconds), HERE, *extra], env)
    if set(res) == {"error"}:
        return {"config": cfg, **res}
    res["wall_s"] = round(time.time() - t0, 1)
    return res


def child_env(extra: dict[str, str] | None = None, root: str | None = None) -> dict[str, str]:
    """This environment without thread or tf_autopar settings (each child makes its own), quiet,
    with the repository (or ``root``, another checkout) importable."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TF_NUM_", "TF_OVERRIDE", "TF_AUTOPAR"))}
    env.update(extra or {})
    env["TF_CPP_MIN_LOG_LEVEL"] = "3"
    first = os.path.abspath(root) if root else os.path.dirname(HERE)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (first, env.get("PYTHONPATH", "")) if p)
    return env


def run_script(script: str, args: list[str], env: dict[str, str], timeout: float = 900) -> dict:
    """A benchmark child, ``python -P -c script *args``: the object on its ``RESULT`` line, else
    ``{"error": the tail of its stderr}``. ``-P``: ``-c`` would put the working directory first on
    the child's path, and a benchmark started from inside another checkout then measured that
    checkout's tf_autopar, not the one ``env``'s PYTHONPATH names (child_env's ``root``)."""
    proc = subprocess.run(
        [sys.executable, "-P", "-c", script, *args], env=env, capture_output=True, text=True, timeout=timeout
    )
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    return {"error": proc.stderr[-1500:]}


def host() -> dict:
    cpu = processor()
    import importlib.metadata as md

    tf_version = next((md.version(d) for d in ("tensorflow-cpu", "tensorflow", "intel-tensorflow") if _has(md, d)), "?")
    return {
        "cpu_model": cpu,
        "cpus": len(os.sched_getaffinity(0)),
        "tf_version": tf_version,
        "python": platform.python_version(),
        "date": time.strftime("%Y-%m-%d %H:%M"),
    }


def _has(md, dist: str) -> bool:
    try:
        md.version(dist)
        return True
    except md.PackageNotFoundError:
        return False


# ------------------------------------------------------------------------------ summary


def _median(xs):
    xs = [x for x in xs if x is not None and not math.isnan(x)]
    return statistics.median(xs) if xs else float("nan")


def steady_ms(run: dict) -> float:
    """Median latency of the run's second half (after the switch for enable(): only frozen calls)."""
    times = run.get("times_ms") or []
    if run["config"].startswith("enable") and run.get("frozen"):
        fast = [t for t, f in zip(times, run["frozen"]) if f]
        if len(fast) >= 3:
            return statistics.median(fast[len(fast) // 2 :])
    return statistics.median(times[len(times) // 2 :]) if times else float("nan")


def window(run: dict, seconds: float) -> tuple[float, float]:
    """(p50, p99) of the requests that started within the first ``seconds`` of traffic."""
    xs = sorted(t for t, s in zip(run.get("times_ms") or [], run.get("stamps_s") or []) if s < seconds)
    if not xs:
        return float("nan"), float("nan")
    return xs[len(xs) // 2], xs[min(len(xs) - 1, math.ceil(0.99 * len(xs)) - 1)]


def switch_s(run: dict) -> float:
    for s, f in zip(run.get("stamps_s") or [], run.get("frozen") or []):
        if f:
            return s
    return float("nan")


def row_summary(row: dict, window_s: float) -> dict:
    rounds = row["rounds"]
    by = lambda cfg: [r[cfg] for r in rounds if cfg in r and "error" not in r[cfg]]  # noqa: E731
    d, d2, e, e2 = by("default"), by("default-again"), by("enable"), by("enable-2nd")
    out = {"model": row["model"], "batch": row["batch"]}
    out["default_ms"] = _median([steady_ms(r) for r in d])
    out["noise"] = _median([abs(steady_ms(a) / steady_ms(b) - 1) for a, b in zip(d, d2)])
    out["enable_ms"] = _median([steady_ms(r) for r in e])
    # paired by round: each enable() run against the mean of the two defaults around it
    ratios = [((steady_ms(a) + steady_ms(b)) / 2) / steady_ms(x) for a, b, x in zip(d, d2, e)]
    out["speedup"] = _median(ratios)
    out["speedup_range"] = [min(ratios), max(ratios)] if ratios else []
    pools = {p: _median([steady_ms(r) for r in by(f"pools:{p}")]) for p in PAIRS}
    pools = {p: v for p, v in pools.items() if not math.isnan(v)}
    if pools:
        best = min(pools, key=pools.get)
        out["pools_best"] = [best, pools[best]]
    sweep = [r for r in by("frozen-sweep")]
    if sweep:
        ms = sweep[0]["sweep_ms"]
        best = min(ms, key=ms.get)
        out["frozen_best"] = [best, ms[best]]
        out["frozen_sweep"] = ms
    if e:
        out["plan"] = [
            f"{b['inter_op']}x{b['intra_op']}" for b in e[0].get("buckets", []) if b["path"] == "frozen session"
        ]
        out["paths"] = [b["path"] + (f" ({b['reason']})" if b["reason"] else "") for b in e[0].get("buckets", [])]
        out["switch_s"] = _median([switch_s(r) for r in e])
        out["rss_mb"] = [_median([r["peak_rss_mb"] for r in d]), _median([r["peak_rss_mb"] for r in e])]
        w_d = [window(r, window_s) for r in d]
        w_e = [window(r, window_s) for r in e]
        out["window_default"] = [_median([w[0] for w in w_d]), _median([w[1] for w in w_d])]
        out["window_enable"] = [_median([w[0] for w in w_e]), _median([w[1] for w in w_e])]
    if e2:
        out["second_first_frozen"] = all(bool(r.get("frozen")) and r["frozen"][0] for r in e2)
        out["second_first_ms"] = _median([r["times_ms"][0] for r in e2])
        out["default_first_ms"] = _median([r["times_ms"][0] for r in d])
    return out


def roots_summary(data: dict) -> str:
    """Each checkout's enable() per row against the defaults of the same rounds (``--roots``)."""
    labels = data["roots"]
    lines = [
        f"processor: {data['host']['cpu_model']} ({data['host']['cpus']} CPUs); TensorFlow {data['host']['tf_version']}; "
        f"{data['host']['date']}",
        "steady ms = median of the second half of a run's requests (enable(): of the frozen session's); "
        "vs default = mean of the round's two defaults / enable(), median [range] over rounds",
        "",
        "| model | batch | default ms | "
        + " | ".join(f"{lab}: enable() ms, vs default, paths, 2nd start 1st call frozen" for lab in labels)
        + " |",
        "|---|---|---|" + "---|" * len(labels),
    ]
    for row in data["rows"]:
        by = lambda cfg, rounds=row["rounds"]: [r[cfg] for r in rounds if cfg in r and "error" not in r[cfg]]  # noqa: E731
        d, d2 = by("default"), by("default-again")
        cells = []
        for lab in labels:
            e, e2 = by(f"enable@{lab}"), by(f"enable-2nd@{lab}")
            ratios = [((steady_ms(a) + steady_ms(b)) / 2) / steady_ms(x) for a, b, x in zip(d, d2, e)]
            paths = sorted({f"{b['path']} {b['inter_op']}x{b['intra_op']}" for r in e for b in r.get("buckets", [])})
            second = all(bool(r.get("frozen")) and r["frozen"][0] for r in e2) if e2 else False
            cells.append(
                f"{_median([steady_ms(r) for r in e]):.2f}, {_median(ratios):.2f}x "
                f"[{min(ratios, default=float('nan')):.2f}-{max(ratios, default=float('nan')):.2f}], "
                f"{'; '.join(paths) or '-'}, {'yes' if second else 'no'}"
            )
        lines.append(
            f"| {row['model']} | {row['batch']} | {_median([steady_ms(r) for r in d]):.2f} | "
            + " | ".join(cells)
            + " |"
        )
    return "\n".join(lines)


def merge_sweeps(data: dict, earlier: dict) -> None:
    """Copy the earlier run's sweep configurations (pools:*, frozen-sweep) into ``data``'s first round per row."""
    sweeps = {}
    for row in earlier["rows"]:
        for rnd in row["rounds"]:
            for cfg, res in rnd.items():
                if cfg.startswith("pools:") or cfg == "frozen-sweep":
                    sweeps.setdefault((row["model"], row["batch"]), {})[cfg] = res
    for row in data["rows"]:
        if row["rounds"]:
            row["rounds"][0].update(sweeps.get((row["model"], row["batch"]), {}))
    data["sweeps_from"] = earlier.get("host", {})


def summarise(data: dict) -> str:
    rows = [row_summary(r, data.get("window_s", 30.0)) for r in data["rows"]]
    h = data["host"]
    lines = [
        f"processor: {h['cpu_model']} ({h['cpus']} CPUs); TensorFlow {h['tf_version']}; {h['date']}",
        "steady ms = median of the second half of a run's requests (enable(): of the frozen session's); "
        "speedup = default / enable() per round, median [range]; noise = |default / default-again - 1|",
        "",
        "| model | batch | default ms | noise | best process pools ms | enable() ms (frozen, plan) | "
        "frozen best ms | enable() vs default | switch s | first 30 s p50/p99 default | "
        "first 30 s p50/p99 enable() | 2nd start 1st call frozen (ms vs default) | peak RSS MB default/enable() |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    logs = []
    for r in rows:
        pb = r.get("pools_best", ["-", float("nan")])
        fb = r.get("frozen_best", ["-", float("nan")])
        rng = r.get("speedup_range") or [float("nan")] * 2
        wd, we = r.get("window_default", [float("nan")] * 2), r.get("window_enable", [float("nan")] * 2)
        second = (
            "yes" if r.get("second_first_frozen") else "no"
        ) + f" ({r.get('second_first_ms', float('nan')):.1f} vs {r.get('default_first_ms', float('nan')):.1f})"
        lines.append(
            f"| {r['model']} | {r['batch']} | {r['default_ms']:.2f} | {100 * r['noise']:.0f}% | {pb[1]:.2f} ({pb[0]}) | "
            f"{r['enable_ms']:.2f} ({','.join(r.get('plan') or ['-'])}) | {fb[1]:.2f} ({fb[0]}) | "
            f"{r['speedup']:.2f}x [{rng[0]:.2f}-{rng[1]:.2f}] | {r.get('switch_s', float('nan')):.1f} | "
            f"{wd[0]:.1f}/{wd[1]:.1f} | {we[0]:.1f}/{we[1]:.1f} | {second} | "
            f"{r.get('rss_mb', [0, 0])[0]:.0f}/{r.get('rss_mb', [0, 0])[1]:.0f} |"
        )
        if any("original" in p for p in r.get("paths", [])):
            logs.append(f"{r['model']} batch {r['batch']}: " + "; ".join(r["paths"]))
    sp = [r["speedup"] for r in rows if r["speedup"] > 0 and not math.isnan(r["speedup"])]
    if sp:
        geo = math.exp(sum(math.log(x) for x in sp) / len(sp))
        lines += [
            "",
            f"geometric mean of enable() vs default over {len(sp)} rows: {geo:.2f}x; "
            f"lowest {min(sp):.2f}x; rows slower than default beyond their noise: "
            f"{sum(1 for r in rows if r['speedup'] < 1 - max(r['noise'], 0.02))}",
        ]
        fb = [(r["default_ms"] / r["frozen_best"][1]) for r in rows if "frozen_best" in r]
        pb = [(r["default_ms"] / r["pools_best"][1]) for r in rows if "pools_best" in r]
        if fb and pb:
            lines.append(
                f"geometric mean, default / best process pools: {math.exp(sum(map(math.log, pb)) / len(pb)):.2f}x;"
                f" default / frozen best: {math.exp(sum(map(math.log, fb)) / len(fb)):.2f}x"
            )
    if logs:
        lines += ["", "rows kept on the original path:"] + [f"- {x}" for x in logs]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model_dir", nargs="?")
    ap.add_argument("--only", default=None, help="comma-separated model names (default: all)")
    ap.add_argument("--batches", default="batch1,serving")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=12.0, help="traffic per default / pools process")
    ap.add_argument("--window", type=float, default=30.0, help="enable()'s first start runs this long")
    ap.add_argument(
        "--sweep",
        choices=("first", "every", "none"),
        default="first",
        help="process pools and frozen sweep: in the first round (default), every round or never",
    )
    ap.add_argument("--out", default=os.path.join(HERE, "results", "fastpath.json"))
    ap.add_argument(
        "--roots",
        metavar="LABEL=DIR,...",
        default=None,
        help="compare checkouts of tf_autopar in the same rounds (enable() and its second start per checkout)",
    )
    ap.add_argument("--summarise", metavar="JSON")
    ap.add_argument(
        "--sweep-from",
        metavar="JSON",
        default=None,
        help="with --summarise: take the process-pool and frozen sweeps of each row from this earlier "
        "run (same host and models; a run with --sweep none measures only default and enable())",
    )
    args = ap.parse_args()
    if args.summarise:
        with open(args.summarise, encoding="utf-8") as fh:
            data = json.load(fh)
        if args.sweep_from:
            with open(args.sweep_from, encoding="utf-8") as fh:
                merge_sweeps(data, json.load(fh))
        print(roots_summary(data) if data.get("roots") else summarise(data))
        return 0
    if not args.model_dir or not os.path.isdir(args.model_dir):
        ap.error("give the directory written by benchmarks/user_models.py")
    names = args.only.split(",") if args.only else list(SERVING)
    rows = [{"model": n, "batch": SERVING[n][w], "rounds": []} for n in names for w in args.batches.split(",")]
    roots = dict(part.split("=", 1) for part in args.roots.split(",")) if args.roots else {}
    data = {"host": host(), "rows": rows, "window_s": args.window, "command": " ".join(sys.argv)}
    if roots:
        data["roots"] = list(roots)
    t0 = time.time()
    for rnd in range(args.rounds):
        for row in rows:
            with tempfile.TemporaryDirectory(prefix="tfa_fastpath_") as cache:
                configs = ["default", "enable", "default-again", "enable-2nd"]
                if roots:
                    labels = list(roots)[rnd % len(roots) :] + list(roots)[: rnd % len(roots)]  # rotate who goes first
                    configs = ["default"] + [f"enable@{lab}" for lab in labels] + ["default-again"]
                    configs += [f"enable-2nd@{lab}" for lab in labels]
                elif args.sweep == "every" or (args.sweep == "first" and rnd == 0):
                    configs += [f"pools:{p}" for p in PAIRS] + ["frozen-sweep"]
                results = {}
                for cfg in configs:
                    label = cfg.partition("@")[2]
                    seconds = args.window if cfg.partition("@")[0] == "enable" else args.seconds
                    results[cfg] = run_child(
                        cfg,
                        args.model_dir,
                        row["model"],
                        row["batch"],
                        seconds,
                        os.path.join(cache, label),
                        root=roots.get(label),
                    )
                    if "error" in results[cfg]:
                        print(
                            f"  {row['model']} b{row['batch']} {cfg}: ERROR {results[cfg]['error'][-300:]}", flush=True
                        )
                row["rounds"].append(results)
            data["wall_s"] = round(time.time() - t0, 1)
            with open(args.out, "w", encoding="utf-8") as fh:
                json.dump(data, fh)
            if roots:
                print(f"round {rnd + 1} {row['model']} b{row['batch']} done, {time.time() - t0:.0f} s", flush=True)
                continue
            s = row_summary(row, args.window)
            print(
                f"round {rnd + 1} {row['model']} b{row['batch']}: default {s['default_ms']:.2f} ms, enable "
                f"{s['enable_ms']:.2f} ms ({s['speedup']:.2f}x), paths {s.get('paths')}, "
                f"{time.time() - t0:.0f} s",
                flush=True,
            )
            data["wall_s"] = round(time.time() - t0, 1)
            with open(args.out, "w", encoding="utf-8") as fh:
                json.dump(data, fh)
    print(roots_summary(data) if roots else summarise(data))
    return 0


if __name__ == "__main__":
    sys.exit(main())

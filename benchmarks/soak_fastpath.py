#!/usr/bin/env python
"""Soak: the fast path under eight concurrent callers, with `tf-autopar tune` SIGTERMed beside it.

A server process (``enable()``, ``tf.saved_model.load``, eight threads calling
``signatures["serving_default"]`` for ``--minutes``) runs while, over and over, ``tf-autopar tune
MODEL`` is started beside it and sent SIGTERM after a random 1-8 s (mid-measurement). Everything
shares one lease directory and one temporary directory of the soak's own. At the end:

- the server's calls per thread, its errors (expected 0) and the path its bucket ended on;
- each tune's exit status (130 after SIGTERM, or 0 when it finished first);
- what is left behind once all have exited: processes whose command line names the soak's
  directories, ``tf_autopar_bench_*`` temporary files, and whether a fresh process on the same
  lease directory finds itself alone (no slot left held).

    python benchmarks/soak_fastpath.py /work/user_models/mobilenet_v2 --minutes 10 --json benchmarks/results/soak_fastpath.json
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SERVER = r"""
import json, sys, threading, time
import tf_autopar
tf_autopar.enable()
import numpy as np, tensorflow as tf
loaded = tf.saved_model.load(sys.argv[1])
sig = loaded.signatures["serving_default"]
spec = sig.structured_input_signature[1]
rng = np.random.default_rng(0)
x = {k: rng.standard_normal([1] + list(s.shape[1:])).astype(s.dtype.as_numpy_dtype) for k, s in spec.items()}
want = {k: v.numpy() for k, v in sig(**x).items()}
counts, errors = [0] * 8, []
stop = time.monotonic() + float(sys.argv[2])
def work(i):
    while time.monotonic() < stop:
        try:
            got = sig(**x)
            if max(float(np.max(np.abs(got[k].numpy() - want[k]))) for k in want) > 1e-3:
                errors.append("outputs differ")
            counts[i] += 1
        except Exception as exc:
            errors.append(repr(exc)[:200])
threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
for t in threads: t.start()
for t in threads: t.join()
st = tf_autopar.status()
print("RESULT " + json.dumps(dict(counts=counts, errors=errors[:10], n_errors=len(errors),
      paths=[b.path for s in st.served for b in s.buckets], tuning=[b.tuning for s in st.served for b in s.buckets])),
      flush=True)
"""

ALONE = r"""
import json, tf_autopar
st = tf_autopar.enable()
share = st.process.share if st.process else None
print("RESULT " + json.dumps(dict(share=share)), flush=True)
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", help="a SavedModel directory (float inputs)")
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    work = tempfile.mkdtemp(prefix="tfa_soak_")
    lease, tmp, cache = (os.path.join(work, d) for d in ("lease", "tmp", "cache"))
    for d in (lease, tmp, cache):
        os.makedirs(d)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TF_NUM_", "TF_OVERRIDE", "TF_AUTOPAR"))}
    env.update(
        TF_CPP_MIN_LOG_LEVEL="3",
        TF_AUTOPAR_LEASE_DIR=lease,
        TF_AUTOPAR_CACHE_DIR=cache,
        TMPDIR=tmp,
        PYTHONPATH=os.pathsep.join(p for p in (ROOT, env.get("PYTHONPATH", "")) if p),
    )
    seconds = args.minutes * 60
    server = subprocess.Popen(
        [sys.executable, "-c", SERVER, args.model, str(seconds)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    tunes = []
    t0 = time.monotonic()
    while server.poll() is None and time.monotonic() - t0 < seconds:
        tune = subprocess.Popen(
            [sys.executable, "-m", "tf_autopar.cli.main", "tune", args.model, "--batch", "1", "--budget", "60"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        delay = rng.uniform(1, 8)
        try:
            tune.wait(delay)
            killed = False
        except subprocess.TimeoutExpired:
            tune.send_signal(signal.SIGTERM)
            killed = True
        try:
            rc = tune.wait(60)
        except subprocess.TimeoutExpired:
            tune.kill()
            rc = "hung (killed after 60 s)"
        tunes.append({"after_s": round(delay, 1), "sigterm": killed, "rc": rc})
    out, err = server.communicate(timeout=seconds + 600)
    result = next(
        (json.loads(line[7:]) for line in out.splitlines() if line.startswith("RESULT ")), {"error": err[-2000:]}
    )
    time.sleep(1)
    left = subprocess.run(["pgrep", "-af", work], capture_output=True, text=True).stdout.split("\n")
    left = [line for line in left if line.strip() and "pgrep" not in line]
    files = sorted(glob.glob(os.path.join(tmp, "**", "tf_autopar_bench_*"), recursive=True))
    alone = subprocess.run([sys.executable, "-c", ALONE], env=env, capture_output=True, text=True, timeout=120)
    share = next((json.loads(line[7:]) for line in alone.stdout.splitlines() if line.startswith("RESULT ")), {})
    report = {
        "minutes": args.minutes,
        "server": result,
        "tunes": len(tunes),
        "sigterms": sum(1 for t in tunes if t["sigterm"]),
        "exit_codes": sorted({str(t["rc"]) for t in tunes}),
        "processes_left": left,
        "temp_files_left": files,
        "fresh_process_share": share.get("share"),
        "work_dir": work,
    }
    print(json.dumps(report, indent=1))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump({**report, "tune_runs": tunes}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

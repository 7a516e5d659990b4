"""``tune`` on the path a server runs, in one process: the fast path's live tuning fed synthesised calls.

The fresh-process search (tuner.py, now ``tune --process-pools``) starts TensorFlow once per
candidate and measures the eager path's process pools. A server under ``enable()`` runs its
model's frozen graph in a session of its own, whose pools can change in the running process,
and tunes them on its live calls (runtime/fastpath/, the rule in tuning/live.py). So ``tune``
runs exactly that, in one child process: ``enable()`` in the mode asked for, the model loaded
once through the load hook, then the server's own call (the signature with numpy inputs,
Keras ``predict``) made in a loop on inputs synthesised from the signature (models/inputs.py),
one caller per stream in throughput mode, until live tuning has tried every neighbour: the
switch check against the original path, at most one candidate session beside the incumbent,
the paired sequential rule. The winner goes into the plan cache's ``served`` section exactly as
live tuning writes it (it *is* live tuning's write, marked "tuned by `tf-autopar tune`"), so
the next ``enable()`` start builds that setting while the model loads and serves its first
call from it. A child process, because ``enable()`` must run before TensorFlow starts and this
process (the CLI) never imports TensorFlow.

``measure`` is the measuring function underneath ``bench`` and ``validate``'s frozen-path
columns: a model, a mode, a batch and settings in, per-setting samples and medians out, all in
the calling process (which must not have started TensorFlow with other pools than it needs).
"""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Mapping, Sequence

from tf_autopar.models.options import ModelOptions
from tf_autopar.planning.modes import INFERENCE_MODES
from tf_autopar.runtime.state import STATE
from tf_autopar.tuning.arguments import check_arguments

DEFAULT_BUDGET_S = 120.0
MIN_BUDGET_S = 10.0
TUNE_MODES = INFERENCE_MODES  # the frozen path serves inference
_RESULT = "RESULT "

Setting = tuple[int, int, int]  # (inter-op, intra-op, streams)


# ------------------------------------------------------------------------------ measure (bench, validate)


@dataclass
class Measurement:
    """Per-setting seconds of one call (latency: one caller; throughput: one caller per stream)."""

    model: str
    mode: str
    batch: int
    samples: dict[str, list[float]] = field(default_factory=dict)  # "2x1" / "1x1x2" -> seconds per call
    calls_per_s: dict[str, float] = field(default_factory=dict)
    rounds: int = 0

    def median(self, label: str) -> float:
        xs = self.samples.get(label) or []
        return statistics.median(xs) if xs else math.nan

    @property
    def best(self) -> str:
        """The setting with the lowest median (throughput: the most calls per second)."""
        if self.mode == "throughput":
            return max(self.calls_per_s, key=self.calls_per_s.__getitem__)
        return min(self.samples, key=self.median)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "medians_s": {k: self.median(k) for k in self.samples}, "best": self.best}


def setting_label(s: Setting) -> str:
    return f"{s[0]}x{s[1]}" + (f"x{s[2]}" if s[2] > 1 else "")


def measure(
    model: str,
    settings: Sequence[Setting],
    *,
    mode: str = "latency",
    batch: int = 1,
    seconds: float = 10.0,
    block: int = 8,
    drop: int = 2,
    model_options: ModelOptions | None = None,
) -> Measurement:
    """Each setting's frozen session(s) on ``model`` at ``batch``, interleaved in blocks of
    ``block`` calls (the first ``drop`` of each block left out: the previous session's threads
    wind down), for about ``seconds`` in all, in this process. Every setting's sessions are
    open at once (a sweep, not a server). Throughput mode: one caller per stream, concurrently.
    Per-session intra-op pools need TF_OVERRIDE_GLOBAL_THREADPOOL=1 before TensorFlow starts:
    set here when TensorFlow has not started, else RuntimeError when it is not in force."""
    if mode not in TUNE_MODES:
        raise ValueError(f"measure runs an inference mode ({' or '.join(TUNE_MODES)}), not {mode!r}")
    if not settings:
        raise ValueError("no settings to measure")
    if "tensorflow" not in sys.modules:
        os.environ.setdefault("TF_OVERRIDE_GLOBAL_THREADPOOL", "1")
    elif os.environ.get("TF_OVERRIDE_GLOBAL_THREADPOOL") != "1":
        raise RuntimeError(
            "TensorFlow started without TF_OVERRIDE_GLOBAL_THREADPOOL=1: a session's intra-op "
            "setting would not apply to it alone; measure in a fresh process"
        )
    from tf_autopar.models.load import prepare_model
    from tf_autopar.runtime.streams import StreamPool

    frozen, feeds = prepare_model(model, batch, model_options).frozen()
    pools = {s: StreamPool(frozen.open_sessions(*s)) for s in dict.fromkeys(settings)}
    for pool in pools.values():
        for session in pool.sessions:
            session.run(frozen.outputs, feeds)  # grappler, once per session, untimed
    out = Measurement(model, mode, batch, {setting_label(s): [] for s in pools})
    busy = {setting_label(s): 0.0 for s in pools}
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline or out.rounds == 0:
        for s, pool in pools.items():
            label = setting_label(s)
            callers = s[2] if mode == "throughput" else 1
            times, wall = _block(pool, frozen, feeds, callers, block)
            out.samples[label].extend(times[drop * callers :])
            busy[label] += wall
        out.rounds += 1
    out.calls_per_s = {k: len(v) / busy[k] for k, v in out.samples.items() if busy[k] > 0}
    for pool in pools.values():
        pool.retire()
    return out


def _block(pool: Any, frozen: Any, feeds: dict, callers: int, calls: int) -> tuple[list[float], float]:
    """``calls`` calls per caller, ``callers`` at once: their seconds (in finishing order) and the wall time."""
    times: list[float] = []
    lock = threading.Lock()

    def caller() -> None:
        for _ in range(calls):
            t = time.perf_counter()
            pool.run(frozen.outputs, feeds)
            with lock:
                times.append(time.perf_counter() - t)

    t0 = time.perf_counter()
    if callers == 1:
        caller()
    else:
        threads = [threading.Thread(target=caller) for _ in range(callers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    return times, time.perf_counter() - t0


# ------------------------------------------------------------------------------ tune (one child process)


@dataclass(frozen=True)
class InProcessOutcome:
    model: str
    mode: str
    batch: int
    function: str  # the routed function tuned, e.g. "signatures['serving_default']"
    bucket: dict[str, Any]  # what the plan cache keeps of the bucket (fastpath report.summary)
    settled: bool  # every neighbour was tried (else the budget ran out first)
    decided_s: float  # from the first call to the end of tuning (or the budget)
    calls: int
    seconds: float  # the whole tune, the child's start included
    host: dict[str, Any]
    stored: bool
    status: str = ""

    @property
    def chosen(self) -> str:
        b = self.bucket
        if b.get("path") != "frozen session":
            return "original path"
        return setting_label((int(b.get("inter_op", 0)), int(b.get("intra_op", 0)), int(b.get("streams", 1) or 1)))

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "chosen": self.chosen}

    def text(self) -> str:
        b = self.bucket
        lines = [
            f"tuned {self.model} ({self.mode}, batch {self.batch}) on {self.host.get('cpu_model', '?')} in one "
            f"process: {self.calls} calls, decided after {self.decided_s:.1f} s of calls, "
            f"{self.seconds:.0f} s in all" + ("" if self.settled else " (the budget ran out first)")
        ]
        for t in b.get("tried") or []:
            lines.append(f"  {t}")
        won = b.get("won") or {}
        if b.get("path") != "frozen session":
            lines.append(
                "the original path serves: the frozen session was not faster at the plan's setting or its neighbours"
                if self.settled
                else "the original path serves so far"
            )
        elif won:
            lines.append(
                f"chosen {self.chosen}: {_num(won.get('total', won.get('speedup'))):.2f}x faster than the plan's "
                f"{won.get('plan', won.get('from'))} ({won.get('pairs_total', won.get('pairs'))} paired calls)"
            )
        else:
            lines.append(f"kept the plan's {self.chosen}: no neighbour was faster beyond the noise")
        if self.stored:
            lines.append(
                "stored in the plan cache (served models): the next enable() start serves this setting "
                "from its first call"
            )
        return "\n".join(lines)


def tune(
    model: str,
    *,
    mode: str = "latency",
    batch: int | None = None,
    budget_s: float = DEFAULT_BUDGET_S,
    model_options: ModelOptions | None = None,
    store: bool = True,
    progress: Callable[[str], None] | None = None,
) -> InProcessOutcome:
    """Live tuning of ``model`` (SavedModel directory or .keras file) on synthesised calls at
    ``batch`` in one child process, within about ``budget_s`` seconds of calls; the winner is
    remembered where enable() finds it (unless ``store`` is False). ValueError for what cannot
    be tuned this way, naming the problem."""
    from tf_autopar._model_path import looks_like_model
    from tf_autopar.models.load import model_kind

    check_arguments(mode, budget_s, batch, process_pools=False)
    if not looks_like_model(model):
        raise ValueError(
            f"{model}: in-process tune runs a SavedModel directory or a .keras file as a server "
            "would; bundled workloads are tuned with --process-pools"
        )
    model_kind(model)  # a missing or unreadable path: its own clear error, before a process starts
    say = progress or (lambda text: None)
    request = {
        "model": os.path.abspath(model),
        "mode": mode,
        "batch": batch or 1,
        "budget_s": float(budget_s),
        "store": store,
        "options": (model_options or ModelOptions()).to_dict(),
    }
    t0 = time.perf_counter()
    say(
        f"one process: enable({mode!r}), load {model} once, then calls at batch {batch or 1} until live tuning "
        f"has tried the plan's neighbours (at most {budget_s:g} s)"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TF_NUM_", "TF_OVERRIDE"))}
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env.pop("TF_AUTOPAR_TUNE_LIVE", None)
    env["TF_AUTOPAR_BUILD_NICE"] = "0"  # no traffic to protect here: builds at full speed
    env.pop("TF_AUTOPAR_FAST_PATH", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "tf_autopar.tuning.inprocess", json.dumps(request)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        out, err = proc.communicate(timeout=budget_s + 600)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        raise RuntimeError(f"tune of {model} did not finish within {budget_s + 600:g} s") from None
    except BaseException:  # Ctrl-C: the child goes with us
        proc.kill()
        proc.wait()
        raise
    found = [line[len(_RESULT) :] for line in out.splitlines() if line.startswith(_RESULT)]
    if not found:
        raise RuntimeError(f"tune of {model} failed (exit {proc.returncode}): {_tail(err)}")
    res = json.loads(found[-1])
    if res.get("error"):
        raise ValueError(res["error"])
    return InProcessOutcome(
        model=model,
        mode=mode,
        batch=batch or 1,
        function=res["function"],
        bucket=res["bucket"],
        settled=bool(res["settled"]),
        decided_s=float(res["decided_s"]),
        calls=int(res["calls"]),
        seconds=time.perf_counter() - t0,
        host=res["host"],
        stored=store and bool(res["bucket"]),
        status=res.get("status", ""),
    )


def live_reset(model: str) -> dict[str, Any]:
    """``tune --live-reset MODEL``: forget what live tuning and ``tune`` chose for ``model`` on this
    host (runtime/cache.py forget_tuning says what stays). ValueError for a path that is no model."""
    from tf_autopar.runtime import cache
    from tf_autopar.runtime.model_loads import model_profile

    real = os.path.realpath(os.path.expanduser(model))
    if not os.path.exists(real):
        raise ValueError(f"{model}: no such SavedModel directory or .keras file")
    if not (os.path.isdir(real) or real.endswith(".keras")):
        raise ValueError(f"{model}: not a SavedModel directory or a .keras file")
    try:
        profile = model_profile(real, 1, False)
    except Exception as exc:  # noqa: BLE001 - any parse failure means a file that is not a readable model
        raise ValueError(
            f"{model}: cannot read it as a model (corrupt or not a SavedModel): "
            f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        ) from None
    if profile is None or not profile.fingerprint:
        raise ValueError(f"{model}: cannot read it as a model (no graph found)")
    dropped = cache.forget_tuning(profile.fingerprint, cache.host_key(STATE.topology()))
    return {"model": model, "fingerprint": profile.fingerprint, "cache": cache.cache_path(), **dropped}


def _num(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else math.nan


def _tail(text: str, n: int = 1500) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return "\n".join(lines[-12:])[-n:] or "no output"


def _child(request: Mapping[str, Any]) -> dict[str, Any]:
    """In the child: enable(), load, call until the bucket is tuned; what the fast path remembered."""
    import tf_autopar

    tf_autopar.enable(mode=request["mode"], cache=bool(request["store"]), tune_live=True)
    from tf_autopar.models.load import prepare_model
    from tf_autopar.models.options import ModelOptions as _Options
    from tf_autopar.runtime import fastpath

    batch = int(request["batch"])
    try:
        prepared = prepare_model(request["model"], batch, _Options.from_dict(request.get("options") or {}))
    except ValueError as exc:
        return {"error": str(exc)}
    call = prepared.model.serving_call(prepared.arrays)
    bucket_id = fastpath.rules.bucket_of(batch)
    function = _routed_function(prepared.model)
    if function is None:
        return {
            "error": f"{request['model']} is not served by the fast path here (see the warning above): "
            "nothing to tune in one process; --process-pools tunes the process pools"
        }
    fastpath.tune_as(function, by=fastpath.BY_TUNE)  # its wins are recorded as `tune`'s, not live traffic's
    budget = float(request["budget_s"])
    start = time.perf_counter()
    calls = [0]
    settled = threading.Event()

    def loop() -> None:
        while not settled.is_set() and time.perf_counter() - start < budget:
            call()
            calls[0] += 1

    call()  # the bucket's first call: its build starts (the original path answers it)
    calls[0] += 1
    while time.perf_counter() - start < budget:  # throughput: one caller per stream, once the streams exist
        rec = _bucket_record(function, bucket_id)
        if request["mode"] == "latency" or rec is None or rec.path not in ("queued", "building"):
            break
        time.sleep(0.05)
    rec = _bucket_record(function, bucket_id)
    callers = max(1, rec.streams if rec is not None else 1) if request["mode"] == "throughput" else 1
    threads = [threading.Thread(target=loop, daemon=True) for _ in range(callers)]
    for t in threads:
        t.start()
    while time.perf_counter() - start < budget and not settled.is_set():
        time.sleep(0.05)
        rec = _bucket_record(function, bucket_id)
        if rec is not None and (rec.tuned or rec.path == "original"):
            settled.set()
    decided = time.perf_counter() - start
    settled.set()
    for t in threads:
        t.join()
    fastpath.wait_idle(120)
    rec = _bucket_record(function, bucket_id)
    summary = fastpath.summaries().get(function, {})
    bucket = dict((summary.get("buckets") or {}).get(str(bucket_id), {}))
    done = rec is not None and (rec.tuned or rec.path == "original")
    # the cache entry is written by the fast path itself: when tuning ends, and at this process's exit
    topo = STATE.topology()
    return {
        "function": function[1],
        "bucket": bucket,
        "settled": done,
        "decided_s": round(decided, 2),
        "calls": calls[0],
        "host": {"cpu_model": getattr(topo.cpu, "model", "unknown"), "cpu_budget": topo.cpu_budget},
        "status": tf_autopar.status().text(),
    }


def _routed_function(loaded: Any) -> tuple[str, str] | None:
    """(model path, function name) of the routed function a server call of ``loaded`` goes to."""
    from tf_autopar.models.load import SAVEDMODEL
    from tf_autopar.runtime import fastpath

    name = f"signatures[{loaded.signature!r}]" if loaded.kind == SAVEDMODEL else "predict"
    for rec in fastpath.records():
        if rec.function == name and os.path.realpath(rec.model) == os.path.realpath(loaded.path):
            return rec.model, rec.function
    return None


def _bucket_record(function: tuple[str, str], bucket_id: int) -> Any:
    from tf_autopar.runtime import fastpath

    for rec in fastpath.records():
        if (rec.model, rec.function) == function:
            return next((b for b in rec.buckets if b.bucket == bucket_id), None)
    return None


def main(argv: Sequence[str]) -> int:
    request = json.loads(argv[0])
    try:
        result = _child(request)
    except ValueError as exc:
        result = {"error": str(exc)}
    print(_RESULT + json.dumps(result, default=str), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""The fast path under a container's memory limit (runtime/fastpath/memory.py): the estimate, the
room under a cgroup limit, the build lock's naming and exclusion, pressure; and in real cgroup-v1
memory groups (tests/cgroup_memory.py; root only, skipped otherwise): a build that cannot fit
stays on the original path with one line and the process survives; one that fits switches; two
workers under one limit never build at once; a limit that shrinks while serving pauses builds and
closes candidate sessions, and they resume when it grows again."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time

import pytest

from tf_autopar.planning.memory_budget import default_margin
from tf_autopar.runtime.fastpath import memory
from tf_autopar.topology.model import MemoryLimit

MB = 1 << 20
GB = 1 << 30
HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)

# measured by benchmarks/bench_build_memory.py (memory.py's docstring; results/build_memory_gc_epyc.json): variables, build peak,
# a further session's first-run peak, in MB
MEASURED = {
    "mobilenet_v2": (13.5, 201, 186),
    "efficientnet_b0": (20.3, 303, 280),
    "nasnet_mobile": (20.3, 343, 301),
    "dlrm": (73.8, 945, 815),
    "xception": (87.4, 1200, 1150),
}


# ---------------------------------------------------------------------- pure


@pytest.mark.parametrize("name", sorted(MEASURED))
def test_the_estimate_covers_each_measured_build_within_a_third(name):
    var, build, session = MEASURED[name]
    need = memory.build_need_bytes(int(var * MB)) / MB
    assert build <= need <= build * 2.0, (name, need)
    s = memory.session_need_bytes(int(var * MB)) / MB
    assert session <= s <= session * 1.7, (name, s)
    assert memory.session_need_bytes(int(var * MB), 3) == 3 * memory.session_need_bytes(int(var * MB))


def _reading(limit: int | None, usage: int, psi: float | None = None, inactive: int = 0) -> MemoryLimit:
    return MemoryLimit(
        limit_bytes=limit,
        usage_bytes=usage,
        cgroup_version=1,
        path="/sys/fs/cgroup/memory/pod/memory.limit_in_bytes",
        reclaimable_bytes=inactive,
        psi_some_avg10=psi,
        host_bytes=24 * GB,
    )


def test_under_a_limit_the_room_is_the_limits_not_the_hosts(monkeypatch):
    monkeypatch.setattr(memory, "available_bytes", lambda: 22 * GB)  # the host has plenty
    monkeypatch.setattr(memory, "limit_reading", lambda: _reading(int(1.5 * GB), 1 * GB))
    ok, why = memory.room_for_build(88 * MB, 1)
    assert not ok
    assert why.startswith("building its frozen copy needs about 1.3 GB; 512 MB is left under the container's 1.5 GB")
    assert "margin" in why
    ok, why = memory.room_for_build(88 * MB, 2, opening=1)
    assert not ok and why.startswith("opening a session of its frozen copy needs about 1.2 GB")
    # the working set, not the page cache the kernel reclaims first, is what counts as used
    monkeypatch.setattr(memory, "limit_reading", lambda: _reading(3 * GB, 2900 * MB, inactive=2 * GB))
    assert memory.room_for_build(50 * MB, 1) == (True, "")
    # no cgroup limit: the host's memory, as before (and the process's own bound: its own test)
    monkeypatch.setattr(memory, "limit_reading", lambda: _reading(None, 1 * GB))
    monkeypatch.setenv(memory.FOOTPRINT_VAR, "0")
    assert memory.room_for_build(88 * MB, 1) == (True, "")
    monkeypatch.setattr(memory, "available_bytes", lambda: 2 * GB)
    ok, why = memory.room_for_build(88 * MB, 1)
    assert not ok and "half" in why
    # the configured bound still holds under a roomy limit
    monkeypatch.setattr(memory, "available_bytes", lambda: 22 * GB)
    monkeypatch.setattr(memory, "limit_reading", lambda: _reading(20 * GB, 1 * GB))
    monkeypatch.setenv(memory.MAX_EXTRA_VAR, "100")
    ok, why = memory.room_for_build(88 * MB, 1)
    assert not ok and memory.MAX_EXTRA_VAR in why


class _Built:
    """A fastpath Function as held_bytes reads it: its frozen graph, variables and runners."""

    def __init__(self, variable_bytes: int, streams: list[int]) -> None:
        self.frozen, self.variable_bytes = object(), variable_bytes
        self.pools = {i: type("Runner", (), {"streams": n})() for i, n in enumerate(streams)}


def test_without_a_limit_the_process_stays_within_twice_its_memory_without_the_fast_path(monkeypatch):
    monkeypatch.delenv(memory.FOOTPRINT_VAR, raising=False)
    monkeypatch.setattr(memory, "available_bytes", lambda: 22 * GB)
    monkeypatch.setattr(memory, "limit_reading", lambda: None)
    monkeypatch.setattr(memory, "_built", [])
    # a 1.7 GB server (eight models on the original path): MobileNetV2's 289 MB build fits, one of a
    # 120 MB model (1.7 GB) not (twice 1.7 GB is more than 1.7 GB + the floor)
    monkeypatch.setattr(memory, "resident_bytes", lambda: 1700 * MB)
    assert memory.room_for_build(int(13.5 * MB), 1) == (True, "")
    ok, why = memory.room_for_build(120 * MB, 1)
    assert not ok
    assert why == (
        "building its frozen copy needs about 1.7 GB; 1.5 GB is left under the fast path's bound of 2x the "
        "process's memory without it (3.3 GB, 2 x 1.7 GB; TF_AUTOPAR_FAST_PATH_MEMORY_FACTOR sets the factor)"
    )
    # what the fast path holds is not the process's own: two built functions' graphs and sessions
    built = [_Built(20 * MB, [1]), _Built(10 * MB, [1, 2])]
    monkeypatch.setattr(memory, "_built", built)
    per = lambda v: int(v * memory.SESSION_KEEP) + (memory.SESSION_KEEP_BASE_MB << 20)  # noqa: E731
    held = int(20 * MB * memory.GRAPH_KEEP) + int(10 * MB * memory.GRAPH_KEEP) + per(20 * MB) + 3 * per(10 * MB)
    assert memory.held_bytes() == held
    bound, without, room = memory.footprint_room(2.0, 1700 * MB + held, held)
    assert (bound, without) == (3400 * MB, 1700 * MB)
    assert room == 3400 * MB - 1700 * MB - held - int(3400 * MB * memory.FOOTPRINT_MARGIN)
    # a small process may grow by the floor: 600 MB served, a 0.96 GB build (BERT-sized) fits
    assert memory.footprint_room(2.0, 600 * MB, 0)[0] == 600 * MB + (memory.FOOTPRINT_FLOOR_MB << 20)
    built[0].frozen = None  # a function that has not frozen (or was disabled) holds nothing
    assert memory.held_bytes() == held - int(20 * MB * memory.GRAPH_KEEP) - per(20 * MB)
    # the factor: configurable, 0 turns the bound off, a bad value is said once and the default used
    monkeypatch.setenv(memory.FOOTPRINT_VAR, "0")
    assert memory.room_for_build(88 * MB, 1) == (True, "")
    monkeypatch.setenv(memory.FOOTPRINT_VAR, "4")
    monkeypatch.setattr(memory, "_built", [])
    assert memory.room_for_build(88 * MB, 1) == (True, "")
    assert memory.footprint_factor({memory.FOOTPRINT_VAR: " 1.5 "}) == 1.5
    for bad in ("two", "-1", "nan"):
        with pytest.raises(ValueError, match=memory.FOOTPRINT_VAR):
            memory.footprint_factor({memory.FOOTPRINT_VAR: bad})
    # under a container's limit the limit rules, not this bound
    monkeypatch.setenv(memory.FOOTPRINT_VAR, "1")
    monkeypatch.setattr(memory, "limit_reading", lambda: _reading(20 * GB, 1 * GB))
    assert memory.room_for_build(88 * MB, 1) == (True, "")
    # the resident size unknown: no bound
    monkeypatch.setattr(memory, "limit_reading", lambda: None)
    monkeypatch.setattr(memory, "resident_bytes", lambda: None)
    assert memory.room_for_build(88 * MB, 1) == (True, "")
    # a 700 MB process: the floor binds, and the reason says so
    monkeypatch.setenv(memory.FOOTPRINT_VAR, "2")
    monkeypatch.setattr(memory, "resident_bytes", lambda: 700 * MB)
    assert memory.room_for_build(88 * MB, 1) == (True, "")
    ok, why = memory.room_for_build(120 * MB, 1)
    assert not ok and "(2.2 GB, 700 MB + 1.5 GB;" in why


# the conversion child's peak RSS, measured (engines' CHILD): constants MB, the child's MB.
# ONNX Runtime's: benchmarks/bench_conversion.py (results/conversion_epyc.json, median of 3)
ONNX_CHILD_MEASURED = {
    "tiny_mlp": (0.0, 595),
    "unet_small": (1.8, 670),
    "gru_tagger": (3.0, 771),
    "vit_tiny": (4.9, 835),
    "lstm_classifier": (13.3, 1114),
    "mobilenet_v2": (13.5, 1138),
    "nasnet_mobile": (20.3, 1421),
    "efficientnet_b0": (20.3, 1641),
    "gpt_decoder": (21.7, 1677),
    "dcn_v2": (39.4, 2067),
    "youtube_dnn": (39.8, 2047),
    "bert_encoder": (42.2, 2656),
    "dlrm": (73.8, 3348),
    "xception": (87.4, 3772),
    "convnext_tiny": (109.1, 6028),
}
OPENVINO_CHILD_MEASURED = {
    "tiny_mlp": (0.02, 545),
    "mobilenet_v2": (13.5, 799),
    "efficientnet_b0": (20.3, 971),
    "bert_encoder": (42.2, 1066),
    "dlrm": (73.8, 1387),
    "xception": (87.4, 1676),
}


@pytest.mark.parametrize(
    ("engine", "name"),
    [("onnxruntime", n) for n in sorted(ONNX_CHILD_MEASURED)]
    + [("openvino", n) for n in sorted(OPENVINO_CHILD_MEASURED)],
)
def test_the_engines_child_estimate_covers_each_measured_conversion(engine, name):
    from tf_autopar.runtime.fastpath.engines import onnxruntime_engine, openvino_engine

    module, measured = {
        "onnxruntime": (onnxruntime_engine, ONNX_CHILD_MEASURED),
        "openvino": (openvino_engine, OPENVINO_CHILD_MEASURED),
    }[engine]
    constants, peak = measured[name]
    base, factor = module.CHILD
    estimate = (base + constants * MB * factor) / MB
    assert peak <= estimate <= peak * 1.6, (name, estimate, peak)


def test_another_engine_is_judged_by_its_own_need_and_its_child_by_the_room_it_shares(monkeypatch):
    monkeypatch.delenv(memory.FOOTPRINT_VAR, raising=False)
    monkeypatch.setattr(memory, "available_bytes", lambda: 22 * GB)
    monkeypatch.setattr(memory, "limit_reading", lambda: None)
    monkeypatch.setattr(memory, "_built", [])
    # DLRM served from its frozen session: 531 MB without the fast path, 1.1 GB with it. A further
    # TensorFlow session's first run (1 GB) does not fit the bound; ONNX Runtime's copy (0.2 GB) does,
    # and its conversion child, a process of its own, is not this process's footprint
    monkeypatch.setattr(memory, "resident_bytes", lambda: 531 * MB + 1100 * MB)
    monkeypatch.setattr(memory, "held_bytes", lambda: 1100 * MB)
    var = int(73.8 * MB)
    ok, why = memory.room_for_build(var, 2, opening=1)
    assert not ok and why.startswith("opening a session of its frozen copy needs about 1.0 GB")
    assert memory.room_for_engine(var, 2, (200 * MB, 6800 * MB), "onnxruntime") == (True, "")
    ok, why = memory.room_for_engine(var, 2, (1200 * MB, 0), "openvino")
    assert not ok and why.startswith("building openvino needs about 1.2 GB;") and "2x the process's memory" in why
    # the child against half the host's available memory
    monkeypatch.setattr(memory, "available_bytes", lambda: 8 * GB)
    ok, why = memory.room_for_engine(var, 2, (200 * MB, 6800 * MB), "onnxruntime")
    assert not ok
    assert (
        why
        == "converting it for onnxruntime in a child process may take about 6.6 GB, over half the 8.0 GB of memory available"
    )
    # under a container's limit the child counts in the group: the larger of the two must fit the room
    monkeypatch.setattr(memory, "available_bytes", lambda: 22 * GB)
    monkeypatch.setattr(memory, "limit_reading", lambda: _reading(4 * GB, int(1.6 * GB)))
    ok, why = memory.room_for_engine(var, 2, (200 * MB, 6800 * MB), "onnxruntime")
    assert not ok and why.startswith("building onnxruntime (its conversion) needs about 6.6 GB;")
    assert memory.room_for_engine(var, 2, (200 * MB, 1400 * MB), "openvino") == (True, "")
    assert memory.room_for_engine(var, 2, (200 * MB, 0), "onnxruntime-spinning") == (True, "")  # converted already


def test_the_conversion_child_is_the_out_of_memory_killers_first_choice_and_the_schedulers_last():
    code = (
        "from tf_autopar.runtime.fastpath.engines import conversion; conversion._lowest_priority(); "
        "import os; print(open('/proc/self/oom_score_adj').read().strip(), os.nice(0), "
        "os.sched_getscheduler(0) == os.SCHED_IDLE)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO
    ).stdout.split()
    assert out == ["1000", "19", "True"]


def test_at_exit_a_conversion_still_running_is_stopped_not_left_behind(monkeypatch, tmp_path):
    from tf_autopar.runtime.fastpath.engines import conversion

    monkeypatch.setattr(conversion, "_stopping", False)
    (tmp_path / "names.json").write_text(json.dumps({"inputs": ["x:0"], "outputs": ["y:0"]}))
    (tmp_path / "graph.pb").write_bytes(b"")  # the child imports TensorFlow first: seconds
    errors: list[str] = []

    def convert() -> None:
        try:
            conversion._run_child(conversion.ONNX, str(tmp_path), 60)
        except conversion.ConversionError as exc:
            errors.append(str(exc))

    t = threading.Thread(target=convert)
    t.start()
    deadline = time.monotonic() + 10
    while not conversion._children and time.monotonic() < deadline:
        time.sleep(0.01)
    (child,) = conversion._children
    conversion.stop_children()
    t.join(30)
    assert child.returncode == -9 and not conversion._children
    assert errors == ["onnx conversion stopped: the process is exiting"]


def test_the_resident_size_is_this_processs():
    rss = memory.resident_bytes()
    assert rss is not None
    with open("/proc/self/status") as fh:
        vm = next(int(x.split()[1]) * 1024 for x in fh if x.startswith("VmRSS:"))
    assert abs(rss - vm) < 64 * MB


def test_after_the_converter_its_reference_cycles_are_collected(monkeypatch):
    """The converter's functions sit in reference cycles: collected at once after the freeze, not
    whenever Python's collector reaches its oldest generation."""
    import gc
    import weakref

    class Node:
        pass

    a, b = Node(), Node()
    a.other, b.other = b, a
    gone = weakref.ref(a)
    gc.disable()
    try:
        del a, b
        memory.after_stage("imported")
        assert gone() is not None  # other stages only trim
        memory.after_stage("frozen")
        assert gone() is None
    finally:
        gc.enable()


def test_a_builds_collection_looks_only_at_the_builds_own_objects():
    import gc
    import weakref

    class Node:
        pass

    def cycle():
        a, b = Node(), Node()
        a.other, b.other = b, a
        return weakref.ref(a)

    gc.disable()
    try:
        old = cycle()
        with memory.young_garbage():
            young = cycle()
            memory.after_stage("frozen")
            assert young() is None  # the build's own garbage goes
            assert old() is not None  # older objects are not walked
        gc.collect()
        assert old() is None and gc.get_freeze_count() == 0
    finally:
        gc.enable()


def test_a_programs_own_frozen_objects_stay_frozen():
    import gc

    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        with memory.young_garbage():
            memory.after_stage("frozen")
        assert gc.get_freeze_count() == frozen > 0
    finally:
        gc.unfreeze()


def test_pressure_is_room_under_the_margin_or_stalls():
    limit = 1 * GB
    margin = default_margin(limit)
    assert memory.pressure(None) == ""
    assert memory.pressure(_reading(limit, limit - 2 * margin)) == ""
    # once paused, builds resume only at twice the margin of room
    assert memory.pressure(_reading(limit, limit - int(1.5 * margin)), paused=True) != ""
    assert memory.pressure(_reading(limit, limit - 2 * margin), paused=True) == ""
    why = memory.pressure(_reading(limit, limit - margin // 2))
    assert why.startswith("only 51 MB is left under the container's 1.0 GB memory limit (under the 102 MB margin)")
    assert "stalled on memory 25%" in memory.pressure(_reading(None, 0, psi=25.0))
    assert memory.pressure(_reading(None, 0, psi=1.0)) == ""


def test_the_lock_is_named_from_the_memory_group():
    a = memory.lock_path("/sys/fs/cgroup/memory/pod/a")
    assert a == memory.lock_path("/sys/fs/cgroup/memory/pod/a")
    assert a != memory.lock_path("/sys/fs/cgroup/memory/pod/b")
    assert os.path.basename(a).startswith("tf_autopar_build_") and a.endswith(".lock")
    assert memory.lock_path("") == memory.lock_path("")  # no memory cgroup: one per host
    with tempfile.TemporaryDirectory() as d:
        assert os.path.dirname(memory.lock_path("/g", dirs=(d,))) == d
        # no usable shared-memory directory: the temporary directory
        missing = os.path.join(d, "missing")
        assert os.path.dirname(memory.lock_path("/g", dirs=(missing,))) == tempfile.gettempdir()


HOLD = (
    "import fcntl, os, sys, time\n"
    "fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)\n"
    "fcntl.flock(fd, fcntl.LOCK_EX)\n"
    "print('held', flush=True)\n"
    "sys.stdin.readline()\n"
)


def test_the_lock_excludes_another_process_and_the_builder_waits(monkeypatch, tmp_path):
    monkeypatch.setattr(memory, "LOCK_DIRS", (str(tmp_path),))
    path = memory.lock_path(memory.own_group())
    other = subprocess.Popen(
        [sys.executable, "-c", HOLD, path], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert other.stdout.readline().strip() == "held"
        with memory.build_lock("t", wait=False) as held:
            assert held is False  # at load: no waiting, no build
        exiting = iter([False, False, True])
        t0 = time.monotonic()
        with memory.build_lock("t", lambda: next(exiting)) as held:
            assert held is False  # the builder waited, and gave up only because the process exits
        assert time.monotonic() - t0 >= 2 * memory.LOCK_POLL_S
    finally:
        other.stdin.write("\n")
        other.stdin.close()
        other.wait(10)
    before = len(memory.held)
    with memory.build_lock("t") as held:
        assert held is True
    assert len(memory.held) == before + 1 and memory.held[-1][0] == "t"


def test_the_processs_threads_share_one_hold_and_another_process_waits_for_all_of_them(monkeypatch, tmp_path):
    # a conversion child beside the builder (converting.py): the builder's session build in the same
    # process goes ahead (the room checks count the conversion); another worker waits for both to end
    monkeypatch.setattr(memory, "LOCK_DIRS", (str(tmp_path),))
    path = memory.lock_path(memory.own_group())
    probe = "import fcntl, os, sys\nfd = os.open(sys.argv[1], os.O_RDWR)\ntry:\n    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)\n    print('free')\nexcept BlockingIOError:\n    print('held')\n"

    def other_process_sees() -> str:
        return subprocess.run(
            [sys.executable, "-c", probe, path], capture_output=True, text=True, timeout=30
        ).stdout.strip()

    first_in, release = threading.Event(), threading.Event()

    def conversion() -> None:
        with memory.build_lock("converting") as held:
            assert held
            first_in.set()
            release.wait(30)

    t = threading.Thread(target=conversion)
    t.start()
    assert first_in.wait(30)
    with memory.build_lock("candidate", wait=False) as held:
        assert held is True  # shared with the conversion's thread, not refused
    assert other_process_sees() == "held"  # the conversion still holds it
    release.set()
    t.join(30)
    assert other_process_sees() == "free"


def test_beside_a_conversion_its_peak_counts_as_taken_under_a_limit(monkeypatch):
    monkeypatch.setattr(memory, "available_bytes", lambda: 22 * GB)
    monkeypatch.setattr(memory, "limit_reading", lambda: _reading(4 * GB, int(1.6 * GB)))
    var = int(13.5 * MB)  # MobileNetV2: a further session's first run needs about 0.27 GB
    assert memory.room_for_build(var, 2, opening=1) == (True, "")
    with memory.reserving(2 * GB):  # tf2onnx's child, converting a larger model beside it
        ok, why = memory.room_for_build(var, 2, opening=1)
        assert not ok and "(beside a conversion that may take 2.0 GB)" in why, why
        assert memory.reserved_bytes() == 2 * GB
    assert memory.reserved_bytes() == 0 and memory.room_for_build(var, 2, opening=1) == (True, "")
    # without a limit the child is not this process's footprint: nothing changes
    monkeypatch.setattr(memory, "limit_reading", lambda: None)
    monkeypatch.setattr(memory, "resident_bytes", lambda: 400 * MB)
    monkeypatch.setattr(memory, "held_bytes", lambda: 0)
    with memory.reserving(2 * GB):
        assert memory.room_for_build(var, 2, opening=1) == (True, "")


# ---------------------------------------------------------------------- real cgroup-v1 limits

MAKE = r"""
import sys
import tensorflow as tf

class M(tf.Module):
    def __init__(self, n):
        self.w = [tf.Variable(tf.random.stateless_normal([2000, 2000], seed=[i, 1], stddev=0.02)) for i in range(n)]

    @tf.function(input_signature=[tf.TensorSpec([None, 2000], tf.float32, name="x")])
    def serve(self, x):
        for w in self.w:
            x = tf.nn.relu(tf.matmul(x, w)) + 0.01
        return {"y": x}

m = M(int(sys.argv[2]))
tf.saved_model.save(m, sys.argv[1], signatures={"serving_default": m.serve})
"""

# A server: enable(), load, answer calls; phases for the shrink test through stdin/stdout.
SERVER = r"""
import json, logging, sys, time
mode, path, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
import tf_autopar
tf_autopar.enable()
import numpy as np, tensorflow as tf
from tf_autopar.runtime.fastpath import memory, roster, rules, wait_idle

# these tests are about memory, not speed: a frozen session that is built and agrees is taken
# (its speed check, in paired rounds without traffic, is tested in test_fastpath.py)
_verdict = rules.switch_verdict
rules.switch_verdict = lambda o, f: (True,) + tuple(_verdict(o, f)[1:])
rules.SWITCH_RATIO = float("inf")  # and on live calls (measure/live.py: any candidate wins at the first look)
rules.MEMORY_RETRY_S = 2.0  # a bucket the memory rule refused asks again this soon

logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
loaded = tf.saved_model.load(path)
sig = loaded.signatures["serving_default"]
x1 = np.random.RandomState(0).rand(1, 2000).astype(np.float32)
x2 = np.random.RandomState(1).rand(2, 2000).astype(np.float32)
ref1 = sig(x=tf.constant(x1))["y"].numpy()
answered = wrong = 0

def call(x=x1, ref=ref1):
    global answered, wrong
    y = sig(x=x)["y"].numpy()
    answered += 1
    if ref is not None and not np.allclose(y, ref, rtol=1e-4, atol=1e-5):
        wrong += 1

def served():
    return [f for f in roster._all() if f.name == "signatures['serving_default']"]

def bucket(n):
    fns = served()
    return fns[0].buckets.get(n) if fns else None

def state(n=1):
    b = bucket(n)
    return b.state.value if b is not None else "none"

def report(kind, **kw):
    fns = served()
    kw.update(answered=answered, wrong=wrong, path=state(1), held=list(memory.held), paused=memory.paused(),
              stopped=fns[0].stopped if fns else "", refused=fns[0].refused if fns else "",
              status=tf_autopar.status().text(),
              warnings=list(tf_autopar.status().warnings))
    print(kind + " " + json.dumps(kw), flush=True)

start = time.monotonic()
if mode == "serve":
    while time.monotonic() - start < seconds:
        call()
    report("RESULT")
elif mode == "grow":
    while time.monotonic() - start < seconds and not (state(1) == "original" and served()[0].refused):
        call()
    report("REFUSED")
    sys.stdin.readline()  # the parent raises the limit
    t = time.monotonic()
    while time.monotonic() - t < seconds and state(1) != "frozen session":
        call()
    report("RESULT", waited=time.monotonic() - t)
elif mode == "fits":
    call()  # queues the build; no traffic while it runs: it is checked in paired rounds
    wait_idle(seconds)
    for _ in range(20):
        call()
    report("RESULT")
elif mode == "shrink":
    call()
    t = time.monotonic()
    while time.monotonic() - t < seconds and (bucket(1) is None or bucket(1).trial is None):
        time.sleep(0.2)  # switched, then live tuning opens its first candidate on the builder
    b = bucket(1)
    report("TRIAL", trial=b is not None and b.state.value == "frozen session" and b.trial is not None)
    sys.stdin.readline()  # the parent shrinks the limit
    t = time.monotonic()
    while time.monotonic() - t < 10 and (bucket(1).trial is not None or not memory.paused()):
        time.sleep(0.2)
    closed = bucket(1).trial is None
    call(x2, None)  # a new bucket: its build must wait
    time.sleep(2.5)
    report("PAUSED", closed=closed, bucket2=state(2), candidates=len(bucket(1).candidates))
    sys.stdin.readline()  # the parent grows the limit again
    t = time.monotonic()
    while time.monotonic() - t < 30 and (memory.paused() or state(2) == "queued"):
        time.sleep(0.2)
    resumed_paused = memory.paused()
    bucket2_after = state(2)
    t = time.monotonic()
    while time.monotonic() - t < 20 and bucket(1).trial is None and bucket(1).tuned != "done":
        time.sleep(0.2)
    report("RESUMED", resumed_paused=resumed_paused, bucket2=bucket2_after,
           trial_again=bucket(1).trial is not None or bucket(1).tuned == "done")
"""


@pytest.fixture(scope="module")
def small_model(tmp_path_factory):
    """A SavedModel of four 2000x2000 Dense-like layers: 64 MB of variables."""
    path = str(tmp_path_factory.mktemp("memory_model") / "m")
    subprocess.run([sys.executable, "-c", MAKE, path, "4"], check=True, env=_env(), timeout=300, capture_output=True)
    return path


def _env(cache: str | None = None, **extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("TF_NUM_", "TF_OVERRIDE", "TF_AUTOPAR")) or k == "TF_AUTOPAR_ENGINES"
    }
    env["TF_CPP_MIN_LOG_LEVEL"] = "3"
    env["PYTHONPATH"] = os.pathsep.join(p for p in (REPO, HERE, env.get("PYTHONPATH", "")) if p)
    if cache:
        env["TF_AUTOPAR_CACHE_DIR"] = cache
    env.update(extra)
    return env


def _rows(stdout: str, kind: str) -> list[dict]:
    return [json.loads(line.split(" ", 1)[1]) for line in stdout.splitlines() if line.startswith(kind + " ")]


@pytest.fixture(scope="module")
def served_peak(small_model):
    """The server's peak on TensorFlow's own path (fast path off), under a roomy limit."""
    from cgroup_memory import MemoryCgroup, require

    parent = require()
    with tempfile.TemporaryDirectory() as cache, MemoryCgroup(4 * GB, parent) as group:
        res = group.run(
            [sys.executable, "-c", SERVER, "serve", small_model, "3"],
            timeout=300,
            env=_env(cache, TF_AUTOPAR_FAST_PATH="0"),
        )
    assert res.returncode == 0, res.stderr[-2000:]
    return res.peak_bytes


@pytest.mark.root
def test_a_build_that_cannot_fit_stays_on_the_original_path_and_the_process_survives(small_model, served_peak):
    from cgroup_memory import MemoryCgroup, require

    parent = require()
    limit = served_peak + 200 * MB  # the model serves; its build (14x 64 MB + 100 MB) cannot fit
    with tempfile.TemporaryDirectory() as cache, MemoryCgroup(limit, parent) as group:
        res = group.run(
            [sys.executable, "-c", SERVER, "serve", small_model, "12"],
            timeout=300,
            env=_env(cache, TF_AUTOPAR_TUNE_LIVE="0"),
        )
    assert not res.oom_killed and res.returncode == 0, res.stderr[-3000:]
    (out,) = _rows(res.stdout, "RESULT")
    assert out["answered"] > 10 and out["wrong"] == 0
    assert out["path"] == "original" and out["held"], out  # it asked under the lock, and stayed
    assert out["stopped"] == "" and "building its frozen copy needs about" in out["refused"]  # asked again later
    assert "left under the container's" in out["refused"] and "limit" in out["refused"]
    lines = [w for w in out["warnings"] if "stays on TensorFlow's usual path" in w]
    assert len(lines) == 1 and "building its frozen copy needs about" in lines[0], out["warnings"]
    assert "asked again every 2 s" in lines[0]  # said once, though asked again every 2 s for 12 s
    assert "  memory: cgroup v1 limit" in out["status"], out["status"]
    assert res.peak_bytes <= limit


@pytest.mark.root
def test_a_build_refused_for_memory_is_asked_again_and_switches_once_the_limit_grows(small_model, served_peak):
    from cgroup_memory import MemoryCgroup, require

    parent = require()
    need = memory.build_need_bytes(64 * MB)
    roomy = served_peak + need + 2 * default_margin(served_peak + need) + 300 * MB
    with tempfile.TemporaryDirectory() as cache, MemoryCgroup(served_peak + 200 * MB, parent) as group:
        proc = group.popen(
            [sys.executable, "-c", SERVER, "grow", small_model, "40"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=_env(cache, TF_AUTOPAR_TUNE_LIVE="0"),
        )
        try:
            refused = json.loads(proc.stdout.readline().split(" ", 1)[1])
            group.set_limit(roomy)
            proc.stdin.write("\n")
            proc.stdin.flush()
            out = json.loads(proc.stdout.readline().split(" ", 1)[1])
            proc.stdin.close()
            proc.wait(60)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == 0, proc.stderr.read()[-3000:]
    assert refused["path"] == "original" and "building its frozen copy needs about" in refused["refused"], refused
    assert out["path"] == "frozen session", out["status"]  # asked again, fitted, switched
    assert out["wrong"] == 0 and out["stopped"] == ""


@pytest.mark.root
def test_a_build_that_fits_switches_to_the_frozen_session(small_model, served_peak):
    from cgroup_memory import MemoryCgroup, require

    parent = require()
    need = memory.build_need_bytes(64 * MB)
    limit = served_peak + need + 2 * default_margin(served_peak + need) + 300 * MB
    with tempfile.TemporaryDirectory() as cache, MemoryCgroup(limit, parent) as group:
        res = group.run(
            [sys.executable, "-c", SERVER, "fits", small_model, "50"],
            timeout=300,
            env=_env(cache, TF_AUTOPAR_TUNE_LIVE="0"),
        )
    assert not res.oom_killed and res.returncode == 0, res.stderr[-3000:]
    (out,) = _rows(res.stdout, "RESULT")
    assert out["path"] == "frozen session", out["status"]
    assert out["wrong"] == 0 and out["stopped"] == ""
    assert res.peak_bytes < limit


@pytest.mark.root
def test_two_workers_under_one_limit_never_build_at_once(small_model, served_peak):
    from cgroup_memory import MemoryCgroup, require

    parent = require()
    need = memory.build_need_bytes(64 * MB)
    limit = 2 * served_peak + 2 * need + 600 * MB
    with tempfile.TemporaryDirectory() as cache, MemoryCgroup(limit, parent) as group:
        procs = [
            group.popen(
                [sys.executable, "-c", SERVER, "fits", small_model, "50"],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=_env(cache, TF_AUTOPAR_TUNE_LIVE="0"),
            )
            for _ in range(2)
        ]
        outs = [p.communicate(timeout=400) for p in procs]
        oom = group.oom_kills()
    assert oom == 0
    rows = []
    for p, (stdout, stderr) in zip(procs, outs):
        assert p.returncode == 0, stderr[-3000:]
        (row,) = _rows(stdout, "RESULT")
        rows.append(row)
    spans = sorted((taken, released) for row in rows for _, taken, released in row["held"])
    assert all(row["held"] for row in rows), rows  # each built, under the group's lock
    for (_, end), (start, _) in zip(spans, spans[1:]):
        assert start >= end, spans  # one build at a time in the group
    assert all(row["path"] == "frozen session" for row in rows), [r["status"] for r in rows]


@pytest.mark.root
def test_a_limit_that_shrinks_pauses_builds_and_closes_candidates_then_resumes(small_model, served_peak):
    from cgroup_memory import MemoryCgroup, require

    parent = require()
    need = memory.build_need_bytes(64 * MB)
    roomy = served_peak + 2 * need + 600 * MB
    with tempfile.TemporaryDirectory() as cache, MemoryCgroup(roomy, parent) as group:
        proc = group.popen(
            [sys.executable, "-c", SERVER, "shrink", small_model, "60"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=_env(cache),
        )
        try:
            trial = json.loads(proc.stdout.readline().split(" ", 1)[1])
            if not trial["trial"]:
                pytest.skip(f"no live-tuning candidate was opened here: {trial['status']}")
            stat = dict(line.split() for line in group.read("memory.stat").splitlines())
            working = group.usage() - int(stat.get("total_inactive_file", 0))
            group.set_limit(working + 24 * MB)  # under the margin (64 MB at least): pressure
            proc.stdin.write("\n")
            proc.stdin.flush()
            paused = json.loads(proc.stdout.readline().split(" ", 1)[1])
            group.set_limit(roomy)
            proc.stdin.write("\n")
            proc.stdin.flush()
            resumed = json.loads(proc.stdout.readline().split(" ", 1)[1])
            proc.stdin.close()
            proc.wait(60)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == 0, proc.stderr.read()[-3000:]
    assert paused["paused"].startswith("only ") and "memory limit" in paused["paused"], paused
    assert paused["closed"] and paused["candidates"] >= 1  # the closed candidate waits to be tried again
    assert paused["bucket2"] == "queued", paused["status"]  # its build did not start
    assert "builds paused and candidate sessions closed" in paused["status"]
    assert sum("fast-path builds paused" in w for w in paused["warnings"]) == 1
    assert resumed["resumed_paused"] == "" and resumed["bucket2"] != "queued", resumed
    assert resumed["trial_again"], resumed["status"]
    assert resumed["wrong"] == 0

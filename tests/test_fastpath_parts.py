"""The fast path's parts without TensorFlow: the bucket's state machine (fastpath/bucket.py), the
engine registry (fastpath/engines/), the calling conventions' registry (fastpath/routing/), and
status()'s providers (state.py: registered by the modules above it, looked up by none)."""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys
from types import SimpleNamespace

import pytest

from tf_autopar.runtime.fastpath import engines, routing
from tf_autopar.runtime.fastpath.bucket import ALLOWED, Bucket, IllegalTransition, State
from tf_autopar.runtime.fastpath.pairing import Trial

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _at(state: State) -> Bucket:
    """A bucket brought to ``state`` by its own transitions."""
    b = Bucket(4)
    trial = Trial((1, 1, 1), object(), switch=True)
    steps = {
        State.QUEUED: [],
        State.BUILDING: [b.start_build],
        State.CHECKING: [b.start_build, lambda: b.start_check(trial, 0)],
        State.FAST: [b.start_build, lambda: b.serve(object(), 0, (1, 2, 1))],
        State.STALE: [b.start_build, lambda: b.serve(object(), 0, (1, 2, 1)), b.go_stale],
        State.ORIGINAL: [lambda: b.keep_original("lost")],
    }
    for step in steps[state]:
        step()
    assert b.state is state
    return b


def test_a_bucket_goes_the_way_a_call_and_a_build_take_it():
    b = Bucket(8)
    assert b.state is State.QUEUED and b.in_progress()
    b.queue(5)
    b.start_build()
    trial = Trial((2, 1, 1), object(), switch=True)
    b.start_check(trial, generation=3)
    assert (b.state, b.trial, b.generation) == (State.CHECKING, trial, 3)
    assert b.route(3) == "check" and b.route(4) == "original"
    pool = object()
    b.serve(pool, 3, (2, 1, 1))
    assert (b.state, b.pool, b.key, b.checking, b.reason) == (State.FAST, pool, (2, 1, 1), None, "")
    assert b.route(3) == "serve" and not b.wants_build(3, 0.0)
    assert b.route(4) == "original" and b.wants_build(4, 0.0)  # its variables were written
    b.go_stale()
    assert b.state is State.STALE and b.pool is None and b.wants_build(4, 0.0)
    b.queue(7)
    assert b.state is State.QUEUED and b.batch == 7


def test_the_original_path_keeps_a_bucket_until_its_retry_is_due():
    b = _at(State.ORIGINAL)
    assert b.reason == "lost" and b.route(0) == "original" and not b.wants_build(0, 100.0)
    b.retry_at = 50.0
    assert not b.wants_build(0, 49.0) and b.wants_build(0, 51.0)
    b.queue(1)
    assert b.retry_at == 0.0 and b.state is State.QUEUED


def test_every_state_can_fall_back_to_the_original_path():
    for state in State:
        b = _at(state)
        b.keep_original("failed")
        assert b.state is State.ORIGINAL and b.pool is None and b.reason == "failed"


@pytest.mark.parametrize("state", list(State))
def test_only_the_allowed_transitions_happen(state):
    moves = {
        State.QUEUED: lambda b: b.queue(1),
        State.BUILDING: lambda b: b.start_build(),
        State.CHECKING: lambda b: b.start_check(Trial((1, 1, 1), object(), switch=True), 0),
        State.FAST: lambda b: b.serve(object(), 0, (1, 1, 1)),
        State.STALE: lambda b: b.go_stale(),
        State.ORIGINAL: lambda b: b.keep_original("x"),
    }
    for to, move in moves.items():
        b = _at(state)
        if to in ALLOWED[state]:
            move(b)
            assert b.state is to
        else:
            with pytest.raises(IllegalTransition, match=f"{state.value} -> {to.value}"):
                move(b)
            assert b.state is state


def test_a_check_that_loses_its_traffic_or_its_session_leaves_the_checking_state():
    b = _at(State.CHECKING)
    b.check_idle()
    assert b.state is State.BUILDING and b.trial is None
    b = _at(State.CHECKING)
    b.check_failed(retired=True)
    assert b.state is State.STALE
    b = _at(State.CHECKING)
    b.check_failed(retired=False)
    assert b.state is State.ORIGINAL
    b = _at(State.CHECKING)
    b.queue(2)  # the variables changed under the check
    assert b.state is State.QUEUED and b.trial is None


def test_a_remembered_bucket_serves_from_the_start_and_states_read_as_before():
    b = Bucket.serving(2, "pool", 0, (1, 1, 1), batch=2, reason="built at load: it won last time", verify=True)
    assert (b.state, b.reason, b.verify, b.since > 0) == (State.FAST, "built at load: it won last time", True, True)
    assert b.state == "frozen session" and State.ORIGINAL.value == "original"  # status() and the cache's words
    assert {s.value for s in State} == {"queued", "building", "checking", "frozen session", "stale", "original"}


def test_no_one_writes_a_bucket_state_but_the_bucket():
    pkg = ROOT / "tf_autopar" / "runtime" / "fastpath"
    for path in pkg.rglob("*.py"):
        if path.name == "bucket.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            targets = node.targets if isinstance(node, ast.Assign) else []
            for t in targets:
                for e in t.elts if isinstance(t, ast.Tuple) else [t]:
                    assert not (isinstance(e, ast.Attribute) and e.attr in ("state", "_state")), path


class _Echo:
    """A stand-in engine: its runner returns its inputs."""

    name = "echo"

    def build(self, frozen, setting):
        return SimpleNamespace(
            streams=setting[2],
            run=lambda arrays: list(arrays),
            describe=lambda: {"engine": "echo", "inter_op": setting[0], "intra_op": setting[1], "streams": setting[2]},
            close=lambda: None,
        )


def test_a_trial_beside_a_runner_whose_threads_linger_leaves_their_aftermath_untimed():
    spinning = SimpleNamespace(linger_s=0.1)  # what ONNX Runtime's spinning runner says of itself
    assert Trial((1, 2, 1, "onnxruntime-spinning"), spinning).turns.washout == 0.1  # as the candidate
    assert Trial((2, 1, 1), object(), incumbent=spinning).turns.washout == 0.1  # as the incumbent
    assert Trial((2, 1, 1), object(), incumbent=object()).turns.washout == 0.0
    trial = Trial((2, 1, 1), object())
    assert [trial.take() for _ in range(5)] == [(False, 0), (False, 1), (False, 2), (False, 3), (True, 0)]
    assert trial.calls == 5


def test_the_engine_registry_has_tensorflow_by_default_and_takes_another():
    assert engines.DEFAULT == "tensorflow" and engines.get().name == "tensorflow"
    assert "tensorflow" in engines.names()
    with pytest.raises(KeyError, match="no fast-path engine 'no-such-engine'; registered: .*tensorflow"):
        engines.get("no-such-engine")
    try:
        engines.register(_Echo())
        assert engines.get("echo").build(None, (1, 2, 3)).run([1, 2]) == [1, 2]
        assert engines.names() == tuple(sorted(("echo", *[n for n in engines.names() if n != "echo"])))
        assert engines.get().name == "tensorflow"  # the default stays
    finally:
        engines._engines.pop("echo", None)


def test_an_engine_failed_for_a_function_by_name_or_by_family():
    from tf_autopar.runtime.fastpath import pools

    fn = SimpleNamespace(engine_failed={"onnxruntime": "conversion failed"})
    assert pools.failed(fn, (1, 2, 1, "onnxruntime"))
    assert pools.failed(fn, (1, 2, 1, "onnxruntime-spinning"))  # its family failed: the conversion is shared
    assert not pools.failed(fn, (1, 2, 1, "openvino")) and not pools.failed(fn, (1, 2, 1))  # TF's: never
    assert not pools.failed(SimpleNamespace(engine_failed={}), (1, 2, 1, "no-such-engine"))


def test_tensorflows_runner_describes_its_setting_and_closes_its_sessions():
    from tf_autopar.runtime.fastpath.engines.tf_session import FrozenSessions

    class Session:
        closed = False

        def run(self, fetches, feeds):
            return [feeds[n] for n in ("x:0",)]

        def close(self):
            self.closed = True

    made = [Session(), Session()]
    frozen = SimpleNamespace(inputs=["x:0"], outputs=["y:0"], open_sessions=lambda inter, intra, n: made[:n])
    runner = engines.get().build(frozen, (1, 2, 2))
    assert isinstance(runner, FrozenSessions)
    assert runner.describe() == {
        "engine": "tensorflow",
        "inter_op": 1,
        "intra_op": 2,
        "streams": 2,
        "threads": 6,
        "precision": "f32",
    }
    assert runner.run([7]) == [7]
    runner.close()
    assert all(s.closed for s in made)
    with pytest.raises(engines.Retired):
        runner.run([7])


def test_the_calling_conventions_are_registered_by_source():
    assert [c.kind for c in routing.for_source(routing.SAVED_MODEL)] == ["signature", "positional"]
    assert [c.kind for c in routing.for_source(routing.KERAS_MODEL)] == [
        "keras call",
        "keras predict",
        "keras predict_on_batch",
    ]


def test_state_imports_nothing_above_it_and_is_given_its_parts():
    """status()'s served records and limits come from providers the fast path and quota_watch
    register when imported; state.py neither looks them up in sys.modules nor imports them."""
    text = (ROOT / "tf_autopar" / "runtime" / "state.py").read_text()
    assert "sys.modules" not in text
    imported = [
        f"{n.module}.{a.name}" if isinstance(n, ast.ImportFrom) else a.name
        for n in ast.walk(ast.parse(text))
        if isinstance(n, (ast.Import, ast.ImportFrom))
        for a in n.names
    ]
    assert not [m for m in imported if "fastpath" in m or "quota_watch" in m], imported
    code = (
        "import sys, tf_autopar\n"
        "from tf_autopar.runtime import state\n"
        "assert state.STATE.snapshot().served == () and state.STATE.snapshot().limits is None\n"
        "assert 'tf_autopar.runtime.fastpath.roster' not in sys.modules\n"
        "from tf_autopar.runtime.fastpath import roster\n"
        "from tf_autopar.runtime import quota_watch\n"
        "assert state._providers['served'] is roster.records\n"
        "assert state._providers['limits'] is quota_watch.record\n"
        "from tf_autopar.runtime.fastpath import rules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, timeout=120)

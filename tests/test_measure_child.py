"""measure/child.py's protocol, end to end in real child processes: one JSON object on success,
one error object (and the exit status it names) on failure, read back by runner.run_child."""

from __future__ import annotations

import sys

import pytest

from tf_autopar.measure import child
from tf_autopar.measure.runner import CRASH, OK, clean_env, run_child


def ok(args: list[str]) -> dict:
    print("noise on stdout before the object is allowed")
    return {"args": args}


def bad_input(args: list[str]) -> dict:
    raise child.ChildError(f"no such model {args[0]!r}")


def barrier(args: list[str]) -> dict:
    raise child.ChildError("a sibling stream failed", 3)


def broken(args: list[str]) -> dict:
    raise KeyError("boom")


def not_a_dict(args: list[str]) -> dict:
    return [1, 2]  # type: ignore[return-value]


def _run(function: str, *args: str):
    env, _ = clean_env()
    return run_child(child.command(f"tests.test_measure_child:{function}", list(args)), env, 120)


def test_success_is_one_json_object():
    res = _run("ok", "a", "--b")
    assert res.status == OK and res.returncode == 0
    assert res.payload == {"args": ["a", "--b"]}


@pytest.mark.parametrize(
    "function, code, words",
    [
        ("bad_input", child.EXIT_BAD_INPUT, "no such model 'x'"),
        ("barrier", 3, "a sibling stream failed"),
        ("broken", child.EXIT_FAILED, "KeyError: 'boom'"),
        ("not_a_dict", child.EXIT_FAILED, "returned list, not a dict"),
    ],
)
def test_failure_is_the_error_object_with_its_exit_status(function, code, words):
    res = _run(function, "x")
    assert res.status == CRASH and res.returncode == code
    assert words in res.reported
    assert f"{child.ERROR_PREFIX}" in res.stderr_tail and words in res.stderr_tail


def test_an_unknown_target_fails_in_the_parent_or_names_itself_in_the_child():
    with pytest.raises(ValueError, match="MODULE:FUNCTION"):
        child.command("tf_autopar.measure.child")
    res = _run("no_such_function")
    assert res.returncode == child.EXIT_FAILED and "no_such_function" in res.reported


def test_the_child_error_is_a_value_error_for_callers_in_this_process():
    with pytest.raises(ValueError, match="no such model"):
        bad_input(["m"])
    assert child.command("m:f", ["1"])[:3] == [sys.executable, "-m", child.MODULE]

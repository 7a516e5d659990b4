"""The `tf-autopar` entry point: options accepted anywhere, TensorFlow's start-up noise kept
off the terminal (unless asked for), errors that name the subcommand. No TensorFlow import."""

from __future__ import annotations

import sys

import pytest

from tf_autopar import __version__
from tf_autopar.cli import quiet
from tf_autopar.cli.main import build_parser, main, old_json_spelling

NOISE = (
    b"WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n"
    b"I0000 00:00:1796045616.380794    9397 port.cc:153] oneDNN custom operations are on. You may see ...\n"
    b"W0000 00:00:1796045616.380794    9397 cpu_feature_guard.cc:227] This TensorFlow binary is optimized\n"
)


@pytest.mark.parametrize(
    "argv", [["-v", "plan"], ["plan", "-v"], ["workloads", "list", "--verbose"], ["run", "-v", "--", "true"]]
)
def test_verbose_is_accepted_before_or_after_the_subcommand(argv):
    assert build_parser().parse_args(argv).verbose is True
    assert build_parser().parse_args([a for a in argv if a not in ("-v", "--verbose")]).verbose is False


@pytest.mark.parametrize("argv", [["--version"], ["plan", "--version"], ["workloads", "run", "--version"]])
def test_version_anywhere(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 0 and capsys.readouterr().out == f"tf-autopar {__version__}\n"


def test_a_command_argument_never_replaces_the_subcommand_in_errors(capsys):
    assert main(["run", "--instances", "0", "--", "true"]) == 2
    assert capsys.readouterr().err.startswith("tf-autopar run: error: --instances must be at least 1")


def test_the_noise_is_filtered_and_everything_else_kept():
    kept = b"E0000 00:00:1796045616.3 9397 x.cc:1] a real error\nUserWarning: something Python said\n"
    assert quiet.filtered(NOISE + kept + NOISE) == kept
    assert quiet.filtered(b"To enable the following instructions: AVX2 FMA, in other operations, rebuild\n") == b""


def test_quieting_respects_the_users_setting(monkeypatch):
    env = {"TF_CPP_MIN_LOG_LEVEL": "0"}
    assert quiet.quiet_tensorflow(env) is False and env == {"TF_CPP_MIN_LOG_LEVEL": "0"}
    env = {}
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    monkeypatch.setitem(sys.modules, "tensorflow", sys.modules.get("tensorflow", object()))
    assert quiet.quiet_tensorflow(env) is True and env == {"TF_CPP_MIN_LOG_LEVEL": "2"}


def test_importing_tensorflow_under_the_cli_prints_no_start_up_lines():
    import os
    import subprocess
    from pathlib import Path

    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[1])
    # one import (seconds): a TensorFlow that cannot be imported at all fails it as well
    code = "from tf_autopar.cli.quiet import quiet_tensorflow\nquiet_tensorflow()\nimport tensorflow\nprint('imported')"
    calm = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, timeout=120)
    assert calm.returncode == 0 and calm.stdout == b"imported\n", calm.stderr
    assert quiet.filtered(calm.stderr) == calm.stderr and b"absl" not in calm.stderr, calm.stderr


@pytest.mark.parametrize("argv", [["validate", "--quick"], ["bench", "alexnet"], ["tune", "alexnet"]])
def test_without_tensorflow_measuring_commands_stop_before_any_child(argv, monkeypatch, capsys):
    """A venv with tf_autopar but no TensorFlow (the [tensorflow] extra left out): one line, exit 2,
    instead of a table of crashed children."""
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "tensorflow" else real(name, *a))
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"tf-autopar {argv[0]}: error: TensorFlow is not installed" in err
    assert "pip install 'tf_autopar[tensorflow]'" in err and "Traceback" not in err


@pytest.mark.parametrize(
    "argv, new, noted",
    [
        (["bench", "m", "--json", "out.json"], ["bench", "m", "--json-out", "out.json"], True),
        (["-v", "validate", "--json=r.JSON", "--quick"], ["-v", "validate", "--json-out", "r.JSON", "--quick"], True),
        (["bench", "m", "--json", "-"], ["bench", "m", "--json"], True),
        (["bench", "--json", "m"], ["bench", "--json", "m"], False),  # a model after the flag stays the model
        (["plan", "--json", "x.json"], ["plan", "--json", "x.json"], False),  # --json was always a flag there
    ],
)
def test_the_old_json_spelling_becomes_json_out_with_a_note(argv, new, noted):
    out, note = old_json_spelling(argv)
    assert out == new
    assert bool(note) == noted
    if noted:
        assert "--json" in note and "removed" in note


@pytest.mark.parametrize("command", ["bench", "validate"])
def test_json_is_a_flag_and_json_out_takes_the_path(command):
    args = build_parser().parse_args([command, "m", "--json", "--json-out", "o.json"])
    assert args.json is True and args.json_out == "o.json"

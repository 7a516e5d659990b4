"""Numbers on the command line and in the environment: ASCII digits, finite, bounded, one clear
error each (no TensorFlow, no child process started)."""

from __future__ import annotations

import pytest

from tf_autopar.cli.main import main


@pytest.mark.parametrize(
    "argv, message",
    [
        (["tune", "autoenc", "--budget", "inf"], "argument --budget: 'inf' is not a finite number of seconds"),
        (["tune", "autoenc", "--budget", "nan"], "argument --budget: 'nan' is not a finite number of seconds"),
        (["tune", "autoenc", "--budget", "1"], "a budget of 1 s cannot compare two settings"),
        (["tune", "autoenc", "--budget", "0"], "--budget must be a positive number of seconds"),
        (["bench", "autoenc", "--batch", "1000000000"], "argument --batch: 1000000000 is above the bound of 1048576"),
        (
            ["bench", "autoenc", "--batch", "\u0663"],
            "argument --batch: '\u0663' is not a whole number (ASCII digits 0-9)",
        ),
        (["run", "--instances", "\u0663", "--", "true"], "argument --instances: '\u0663' is not a whole number"),
        (["validate", "--rounds", "10000000000"], "argument --rounds: 10000000000 is above the bound of 1000000"),
        (["bench", "autoenc", "--time", "inf"], "argument --time: 'inf' is not a finite number of seconds"),
    ],
)
def test_a_bad_number_is_one_clear_line_before_anything_runs(argv, message, capsys, monkeypatch):
    import subprocess

    def no_child(*args, **kwargs):
        raise AssertionError(f"a child process was started: {args[0]!r}")

    monkeypatch.setattr(subprocess, "Popen", no_child)  # refused before any child (the old code ran them)
    try:
        rc = main(argv)
    except SystemExit as exc:  # argparse's own refusal
        rc = exc.code
    err = capsys.readouterr().err
    assert rc == 2 and message in err and "Traceback" not in err, err
    assert len(err.strip().splitlines()[-1]) < 300 and "-3." not in err  # the budget given, not what was left


def test_a_budget_left_after_preparing_is_not_reported_as_the_budget():
    from tf_autopar.tuning.tuner import _max_runs

    with pytest.raises(ValueError) as exc:
        _max_runs(10.0, 4.7, "2x1")
    assert "a budget of 10 s" in str(exc.value) and "took 4.7 s" in str(exc.value) and "of -" not in str(exc.value)
    assert _max_runs(100.0, 4.0, "2x1") == 24


@pytest.mark.parametrize("text", ["\u0663", "\u00b2", "3\u0663", "\uff13"])
def test_thread_variables_take_ascii_digits_only(text):
    """\\d matches any script's digits: TF_NUM_INTEROP_THREADS=٣ was read as 3 (TensorFlow reads ASCII)."""
    from tf_autopar.planning.user_settings import read_user_settings

    for var in ("TF_NUM_INTEROP_THREADS", "OMP_NUM_THREADS", "KMP_BLOCKTIME", "MKL_NUM_THREADS"):
        with pytest.raises(ValueError, match=var):
            read_user_settings({var: text})
    assert read_user_settings({"TF_NUM_INTEROP_THREADS": "3"}).inter_op == 3


def test_other_parsers_take_ascii_digits_only(tmp_path):
    from tf_autopar.graph.dims import read_batching_file
    from tf_autopar.measure.cgroup import parse_cpu_stat
    from tf_autopar.measure.configs import parse_config

    with pytest.raises(ValueError):
        parse_config("\u0662x1", openmp=False)
    f = tmp_path / "batching.txt"
    f.write_text("max_batch_size { value: \u0663\u0662 }")
    with pytest.raises(ValueError, match="no positive max_batch_size"):
        read_batching_file(str(f))
    assert parse_cpu_stat("nr_periods \u0663\nnr_throttled 2\n", 2).nr_throttled == 2
    assert parse_cpu_stat("nr_periods \u0663\n", 2).nr_periods == 0


def test_clean_env_keeps_where_tf_autopar_reads_and_writes():
    """Every TF_AUTOPAR_* variable counted as a thread variable: bench and tune children read
    another plan cache and lease root than the user's."""
    from tf_autopar.measure.runner import clean_env

    env, removed = clean_env(
        {
            "TF_AUTOPAR_CACHE_DIR": "/c",
            "TF_AUTOPAR_LEASE_DIR": "/l",
            "TF_AUTOPAR_LOG": "info",
            "TF_AUTOPAR_INSTANCES": "2",
            "TF_NUM_INTRAOP_THREADS": "3",
            "OMP_NUM_THREADS": "1",
            "PATH": "/bin",
        }
    )
    assert (env["TF_AUTOPAR_CACHE_DIR"], env["TF_AUTOPAR_LEASE_DIR"], env["TF_AUTOPAR_LOG"]) == ("/c", "/l", "info")
    assert removed == ["OMP_NUM_THREADS", "TF_AUTOPAR_INSTANCES", "TF_NUM_INTRAOP_THREADS"]


def test_the_batch_flag_has_one_bound_and_one_message(capsys):
    import argparse

    from tf_autopar._numbers import BATCH_BOUND, add_batch_flag
    from tf_autopar.graph.dims import MAX_BATCH

    parser = argparse.ArgumentParser(prog="x")
    add_batch_flag(parser, default=7, help="batch per request")
    assert parser.parse_args([]).batch == 7
    assert parser.parse_args(["--batch", str(MAX_BATCH)]).batch == MAX_BATCH
    assert parser.parse_args(["--batch", "0"]).batch == 0  # each command refuses 0 with its own message
    for bad, said in [
        (str(MAX_BATCH + 1), f"{MAX_BATCH + 1} is above the bound of {MAX_BATCH} ({BATCH_BOUND})"),
        ("\u0663", "'\u0663' is not a whole number (ASCII digits 0-9)"),
        ("-1", "'-1' is not a whole number (ASCII digits 0-9)"),
    ]:
        with pytest.raises(SystemExit) as exc:
            parser.parse_args([f"--batch={bad}"])
        assert exc.value.code == 2 and f"argument --batch: {said}" in capsys.readouterr().err
    assert "batch per request" in parser.format_help()
    bare = argparse.ArgumentParser()
    add_batch_flag(bare)
    assert bare.parse_args([]).batch is None

"""Every command that starts children ends them and removes its temporary files on SIGTERM and
SIGINT, as Ctrl-C does (cli/interrupt.py). The children are killed while they still import
TensorFlow: seconds per case, no TensorFlow in this process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _cmdline(pid: int) -> bytes | None:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read()
    except OSError:
        return None


def _children(pid: int) -> set[int]:
    """The command's measuring children: exec'd (a child still showing its parent's command line
    has not become anything yet) and not py-cpuinfo's helper, which tests/test_topology_cpuinfo.py
    stops on its own."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as fh:
            kids = {int(x) for x in fh.read().split()}
    except OSError:
        return set()
    parent = _cmdline(pid)
    out = set()
    for kid in kids:
        cmdline = _cmdline(kid)
        if cmdline and cmdline != parent and b"tf_autopar" in cmdline and b"cpuinfo" not in cmdline:
            out.add(kid)
    return out


def _alive(pid: int) -> bool:
    """Running (a zombie waiting for its reaper does not count)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


CASES = {
    "tune": ["tune", "autoenc", "--budget", "60"],
    "characterize": ["characterize", "autoenc", "--modes", "infer", "--threads", "1", "--inter", "1", "--no-progress"],
    "calibrate": ["calibrate", "--rounds", "1"],
}


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_a_stopped_command_leaves_no_child_and_no_file(tmp_path, name, sig):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    args = CASES[name] + (["--out", str(tmp_path / "out")] if name == "characterize" else [])
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("TF_NUM_", "TF_AUTOPAR", "OMP_")) or k == "TF_AUTOPAR_ENGINES"
    }
    env.update(PYTHONPATH=ROOT, TMPDIR=str(tmp), TF_AUTOPAR_CACHE_DIR=str(tmp_path / "cache"))
    # a background job inherits SIGINT ignored, and Python then leaves it so: give it a terminal's
    proc = subprocess.Popen(
        [sys.executable, "-m", "tf_autopar.cli.main", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    seen: set[int] = set()
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not seen:
            seen = _children(proc.pid)
            time.sleep(0.02)
        assert seen, f"{name} started no child: {proc.stderr.read() if proc.poll() is not None else ''}"
        time.sleep(0.2)
        seen |= _children(proc.pid)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    assert not [p for p in seen if _alive(p)], f"{name} left its children running"
    assert list(tmp.iterdir()) == [], f"{name} left {sorted(p.name for p in tmp.iterdir())}"
    assert "Traceback" not in err, err

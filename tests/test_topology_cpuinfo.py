"""CPU vendor/model/ISA: /proc/cpuinfo parsing (x86, aarch64) and the py-cpuinfo disk cache."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from tf_autopar.topology._fs import HostFS, Notes
from tf_autopar.topology.cpuinfo import notable_isa, parse_proc_cpuinfo, read_cpuinfo

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_x86_layout():
    text = (
        "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Platinum 8480+\n"
        "flags\t\t: fpu sse4_2 avx avx2 avx512f avx512_vnni avx512_bf16 amx_tile amx_bf16 amx_int8\n\n"
        "processor\t: 1\nvendor_id\t: GenuineIntel\n"
    )
    info = parse_proc_cpuinfo(text)
    assert info.vendor == "Intel" and info.model == "Intel(R) Xeon(R) Platinum 8480+"
    assert info.isa == (
        "sse4_2",
        "avx",
        "avx2",
        "avx512f",
        "avx512_vnni",
        "avx512_bf16",
        "amx_tile",
        "amx_bf16",
        "amx_int8",
    )


def test_aarch64_layout():
    text = (
        "processor\t: 0\nBogoMIPS\t: 2100.00\nFeatures\t: fp asimd sve sve2 i8mm bf16 asimddp sme\n"
        "CPU implementer\t: 0x41\nCPU architecture: 8\nCPU variant\t: 0x0\nCPU part\t: 0xd4f\nCPU revision\t: 1\n\n"
    )
    info = parse_proc_cpuinfo(text)
    assert (info.vendor, info.model) == ("ARM", "Neoverse-V2")
    assert info.isa == ("asimd", "asimddp", "i8mm", "bf16", "sve", "sve2", "sme")


def test_unknown_arm_implementer_and_empty_text():
    info = parse_proc_cpuinfo("processor : 0\nFeatures : fp asimd\nCPU implementer : 0x99\nCPU part : 0x001\n")
    assert info.vendor == "implementer 0x99" and info.model == "part 0x001"
    assert parse_proc_cpuinfo("").vendor == "unknown"


def test_isa_is_per_architecture_and_aliases_are_normalised():
    assert notable_isa(["sme", "avx2"], "x86") == ("avx2",)  # AMD's sme is memory encryption
    assert notable_isa(["sme", "avx2"], "arm") == ("sme",)
    assert notable_isa(["AVX512VNNI", "amxtile", "avx512f"]) == ("avx512f", "avx512_vnni", "amx_tile")


def test_fixture_without_cpuinfo_warns(tmp_path):
    notes = Notes()
    assert read_cpuinfo(HostFS(str(tmp_path)), notes).model == "unknown"
    assert "proc/cpuinfo missing" in notes.warnings[0]


def _live_cpuinfo(cache_dir: str) -> dict:
    code = (
        "import json; from tf_autopar.topology import detect_topology; "
        "print(json.dumps(detect_topology().to_dict()['cpu']))"
    )
    env = dict(
        os.environ, TF_AUTOPAR_CACHE_DIR=cache_dir, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", "")
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120, check=True)
    return json.loads(out.stdout)


def test_py_cpuinfo_result_is_cached_on_disk(tmp_path):
    first = _live_cpuinfo(str(tmp_path))  # runs py-cpuinfo (~1 s) and writes the cache
    cache = json.loads((tmp_path / "cpuinfo.json").read_text())
    assert len(cache) == 1
    ((key, entry),) = cache.items()
    assert entry == {"vendor": first["vendor"], "model": first["model"], "isa": first["isa"]}
    # A second process must answer from the cache, not from py-cpuinfo: mark the entry.
    entry["model"] = "served-from-cache"
    (tmp_path / "cpuinfo.json").write_text(json.dumps({key: entry}))
    assert _live_cpuinfo(str(tmp_path))["model"] == "served-from-cache"


def test_unwritable_cache_dir_still_answers(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    env_dir = str(blocker / "sub")  # makedirs fails: the cache is skipped, not fatal
    assert _live_cpuinfo(env_dir)["vendor"] != ""


def test_cpu_details_off_never_runs_py_cpuinfo(tmp_path):
    """enable()'s path: an empty cache must not cost py-cpuinfo's second, nor fill the cache."""
    code = (
        "import json, sys; from tf_autopar.topology import detect_topology; "
        "t = detect_topology(cpu_details=False); "
        "print(json.dumps({'cpu': t.to_dict()['cpu'], 'imported': 'cpuinfo' in sys.modules}))"
    )
    env = dict(
        os.environ, TF_AUTOPAR_CACHE_DIR=str(tmp_path), PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", "")
    )
    out = json.loads(
        subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120, check=True
        ).stdout
    )
    assert out["imported"] is False
    assert out["cpu"]["model"] != "unknown" and out["cpu"]["vendor"] != "unknown"
    assert not (tmp_path / "cpuinfo.json").exists()


def _group_alive(pgid: int) -> list[int]:
    """Running processes of a process group (zombies aside)."""
    alive = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:
            alive.append(int(entry))
    return alive


def test_an_interrupt_while_py_cpuinfo_runs_ends_its_helper(tmp_path):
    """Ctrl-C in a command's first second (an empty cache: py-cpuinfo runs) must not leave
    py-cpuinfo's helper process, or its cpuid child, running after the command has gone."""
    code = (
        "from tf_autopar.topology._fs import HostFS, Notes; "
        "from tf_autopar.topology.cpuinfo import read_cpuinfo; read_cpuinfo(HostFS(), Notes())"
    )
    env = dict(
        os.environ, TF_AUTOPAR_CACHE_DIR=str(tmp_path), PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", "")
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # as from a terminal
    )
    helper = None
    try:
        deadline = time.monotonic() + 60
        while helper is None and time.monotonic() < deadline and proc.poll() is None:
            try:
                with open(f"/proc/{proc.pid}/task/{proc.pid}/children") as fh:
                    kids = [int(x) for x in fh.read().split()]
            except OSError:
                kids = []
            for kid in kids:
                try:
                    with open(f"/proc/{kid}/cmdline", "rb") as fh:
                        cmdline = fh.read()
                except OSError:
                    continue
                if b"cpuinfo" in cmdline and b"--json" in cmdline:  # exec'd: the helper itself
                    helper = kid
            time.sleep(0.005)
        assert helper is not None, "py-cpuinfo's helper never started"
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert "KeyboardInterrupt" in err, err
    # SIGKILLed with its group; its cpuid child may take a moment to exit (the kernel's, not ours)
    deadline = time.monotonic() + 5
    while _group_alive(helper) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert _group_alive(helper) == [] and not os.path.exists(f"/proc/{helper}/stat"), "the helper outlived us"
    assert not (tmp_path / "cpuinfo.json").exists()  # nothing half-written

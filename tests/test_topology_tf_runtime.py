"""Threading runtime of the installed TensorFlow, found from its ELF files without importing it."""

from __future__ import annotations

import glob
import json
import importlib.util
import os
import re
import shutil
import subprocess
import sys

import pytest

from tf_autopar.topology.tf_runtime import decide, detect_tf_runtime, elf_needed

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TF_SPEC = importlib.util.find_spec("tensorflow")
GCC = shutil.which("gcc") or shutil.which("cc")


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    """Keep stand-in packages out of the user's real cache."""
    monkeypatch.setenv("TF_AUTOPAR_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture
def needs_gcc(need_tool):
    """A C compiler to build stand-in libraries (GCC below)."""
    need_tool("gcc", "cc")


def readelf_needed(path: str) -> list[str]:
    out = subprocess.run(["readelf", "-d", path], capture_output=True, text=True, check=True).stdout
    return re.findall(r"\(NEEDED\)\s+Shared library: \[(.+?)\]", out)


def test_elf_reader_agrees_with_readelf(need_tool):
    need_tool("readelf")
    libs = [sys.executable, os.path.realpath(sys.executable)]
    libs += (
        glob.glob("/usr/lib/x86_64-linux-gnu/libstdc++.so.6*")[:1] + glob.glob("/lib/x86_64-linux-gnu/libz.so.1*")[:1]
    )
    if TF_SPEC:
        pkg = TF_SPEC.submodule_search_locations[0]
        libs += glob.glob(os.path.join(pkg, "python", "_pywrap_tensorflow_internal.so"))
        libs += glob.glob(os.path.join(pkg, "libtensorflow_framework.so*"))
    checked = 0
    for lib in libs:
        if os.path.isfile(lib):
            assert elf_needed(lib) == readelf_needed(lib), lib
            checked += 1
    assert checked >= 2


def test_not_an_elf_file(tmp_path):
    (tmp_path / "x.so").write_text("hello")
    assert elf_needed(str(tmp_path / "x.so")) is None
    assert elf_needed(str(tmp_path / "missing.so")) is None


def _fake_tf(tmp_path, openmp: bool) -> str:
    pkg = tmp_path / ("omp" if openmp else "plain") / "tensorflow"
    pkg.mkdir(parents=True)
    src = tmp_path / "k.c"
    src.write_text(
        "#include <omp.h>\nint k(void){return omp_get_max_threads();}\n" if openmp else "int k(void){return 1;}\n"
    )
    cmd = [GCC, "-shared", "-fPIC", str(src), "-o", str(pkg / "libtensorflow_framework.so.2")]
    if openmp:
        cmd.insert(1, "-fopenmp")
    subprocess.run(cmd, check=True, capture_output=True, timeout=120)
    return str(pkg)


@pytest.mark.usefixtures("needs_gcc")
def test_openmp_linked_build_is_openmp(tmp_path):
    result = detect_tf_runtime(_fake_tf(tmp_path, openmp=True))
    assert result.runtime == "openmp"
    assert "libgomp" in result.evidence


@pytest.mark.usefixtures("needs_gcc")
def test_plain_build_is_eigen_and_bundled_openmp_counts(tmp_path):
    pkg = _fake_tf(tmp_path, openmp=False)
    assert detect_tf_runtime(pkg).runtime == "eigen"
    shutil.copy(os.path.join(pkg, "libtensorflow_framework.so.2"), os.path.join(pkg, "libiomp5.so"))
    bundled = detect_tf_runtime(pkg)  # the directory's mtime changed: not served from the cache
    assert bundled.runtime == "openmp" and "libiomp5.so" in bundled.evidence


def test_unreadable_package_is_unknown(tmp_path):
    assert detect_tf_runtime(str(tmp_path)).runtime == "unknown"


@pytest.mark.usefixtures("needs_gcc")
def test_verdict_is_cached_on_disk_by_path_and_mtime(tmp_path):
    pkg = _fake_tf(tmp_path, openmp=True)
    detect_tf_runtime(pkg)
    cache = json.loads((tmp_path / "cache" / "tf_runtime.json").read_text())
    ((key, entry),) = cache.items()
    assert key.startswith(os.path.realpath(pkg) + "|") and entry["runtime"] == "openmp"


def test_decision_rules():
    assert decide({"a.so": ["libc.so.6"]}, [], False, None)[0] == "eigen"
    assert decide({"a.so": ["libc.so.6", "libiomp5.so"]}, [], False, None) == ("openmp", "a.so links libiomp5.so")
    assert decide({"a.so": ["libc.so.6"]}, [], True, None)[0] == "openmp"  # Intel Extension for TF
    assert decide({"a.so": None}, [], False, "intel-tensorflow 2.14.0")[0] == "openmp"
    assert decide({"a.so": None}, [], False, "tensorflow-cpu 2.21.0")[0] == "unknown"


def test_installed_stock_tf_is_eigen():
    result = detect_tf_runtime()
    assert result.runtime == "eigen", result  # pip tensorflow-cpu links no OpenMP (docs/openmp.md)
    assert result.package_dir == os.path.realpath(TF_SPEC.submodule_search_locations[0])


def test_absent_when_no_tensorflow_is_importable():
    # -S: no site-packages, so no TensorFlow; tf_autopar itself comes from the repo.
    code = "from tf_autopar.topology import detect_tf_runtime; print(detect_tf_runtime().runtime)"
    out = subprocess.run(
        [sys.executable, "-S", "-c", code],
        env={"PYTHONPATH": REPO, "PATH": os.environ.get("PATH", "")},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert out.stdout.strip() == "absent"


def test_what_stock_tensorflow_runs_with_has_no_openmp_runtime():
    """After an op, the stock build has no OpenMP runtime mapped: runtime.openmp reports None, so
    `bench` shows no OpenMP threads (tests/openmp checks the other side on Intel's build)."""
    code = (
        "import tensorflow as tf; x = tf.random.normal([64, 64]); tf.linalg.matmul(x, x)\n"
        "from tf_autopar.runtime.openmp import loaded_library, openmp_state\n"
        "print(repr((loaded_library(), openmp_state())))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "(None, None)"

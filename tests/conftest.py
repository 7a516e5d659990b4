"""Fixtures shared by the test files: the recorded host trees (tests/fixtures/hosts) and their
generator (tests/fixtures/make_hosts.py), so a test reads a host as ``host_root("skylake-2s-24c-48t")``
or writes a changed copy with ``host_variant("garbled", files={...})``."""

from __future__ import annotations

import dataclasses
import importlib.util
import shutil
import os
import sys
from types import ModuleType
from typing import Callable, Iterator

import pytest

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")
HOSTS = os.path.join(FIXTURES, "hosts")


def _openmp_build() -> bool:
    from tf_autopar.topology.tf_runtime import detect_tf_runtime

    return detect_tf_runtime().runtime == "openmp"


# tests/openmp needs a real OpenMP build (intel-tensorflow): CI runs it in a second virtual
# environment; with stock TensorFlow it is not collected (rather than collected and skipped).
collect_ignore = [] if _openmp_build() else ["openmp"]


def _load_make_hosts() -> ModuleType:
    """tests/fixtures/make_hosts.py (a script, not a package: loaded by path, once)."""
    if "make_hosts" in sys.modules:
        return sys.modules["make_hosts"]
    spec = importlib.util.spec_from_file_location("make_hosts", os.path.join(FIXTURES, "make_hosts.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules["make_hosts"] = module  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session", autouse=True)
def _own_cache_dir(tmp_path_factory) -> Iterator[None]:
    """The suite's plan cache and detection caches live in a directory of its own (one per
    xdist worker), never the user's ~/.cache/tf_autopar: a plan cached by a benchmark or by
    the user's own server must not steer a test, nor a test's plan reach the user. A test
    that checks the cache sets its own directory on top."""
    with pytest.MonkeyPatch.context() as mp:  # session-scoped: the function-scoped monkeypatch cannot
        mp.setenv("TF_AUTOPAR_CACHE_DIR", str(tmp_path_factory.mktemp("tf_autopar_cache")))
        # TensorFlow's sessions only, unless a test says otherwise: with the engines extra
        # installed, every fast-path test would otherwise also convert for OpenVINO and ONNX
        # Runtime (seconds to a minute each). Their tests (test_engines.py,
        # test_fastpath_engines.py) name the engines they let in.
        mp.setenv("TF_AUTOPAR_ENGINES", "tensorflow")
        # No converted model kept between tests (engines/conversion_cache.py): a test that
        # converts a graph another test converted must still run its conversion child. The
        # cache's tests set a limit and a directory of their own.
        mp.setenv("TF_AUTOPAR_CONVERSION_CACHE_MB", "0")
        yield


@pytest.fixture(autouse=True)
def _own_lease_dir(tmp_path_factory, monkeypatch) -> None:
    """Each test's processes meet in a lease directory of their own, not the host-wide
    /dev/shm one: tests running side by side (pytest -n) or a server on the host would
    otherwise share its slots and change the CPUs each test's children are given."""
    monkeypatch.setenv("TF_AUTOPAR_LEASE_DIR", str(tmp_path_factory.mktemp("lease")))


@pytest.fixture(scope="session")
def make_hosts() -> ModuleType:
    """The generator of the recorded host trees: its HOSTS specs, write_host(), record()."""
    return _load_make_hosts()


@pytest.fixture(scope="session")
def host_root() -> Callable[[str], str]:
    """The root directory of a recorded host tree, by name (what detect_topology(root) reads)."""

    def root(name: str) -> str:
        path = os.path.join(HOSTS, name)
        assert os.path.isdir(path), f"no recorded host {name!r} in {HOSTS}"
        return path

    return root


@pytest.fixture
def host_variant(make_hosts: ModuleType, tmp_path) -> Callable[..., str]:
    """A copy of a recorded host with some spec fields changed, written under tmp_path; its root.
    ``files`` are merged into the host's own unless ``merge_files=False``."""

    def variant(base: str, *, merge_files: bool = True, **changes: object) -> str:
        host = make_hosts.HOSTS[base]
        if "files" in changes and merge_files:
            changes["files"] = {**host.files, **changes["files"]}
        return make_hosts.write_host(dataclasses.replace(host, **changes), str(tmp_path / "host"))

    return variant


@pytest.fixture(scope="session")
def need_tool() -> Callable[..., str]:
    """The path of the first of some tools found on PATH. None found fails the test rather than
    skipping it: the README asks for g++ (which brings gcc and binutils), so a missing tool is a
    broken setup whose tests would otherwise pass unseen."""

    def need(*names: str) -> str:
        for name in names:
            path = shutil.which(name)
            if path:
                return path
        pytest.fail(f"needs {' or '.join(names)} on PATH (the README's setup: Python 3.11, pip and g++)")

    return need


@pytest.fixture
def standin_log(tmp_path, monkeypatch):
    """The log the validation stand-in runner (tests/test_validation_standin.py) writes, with
    every fault switch off and thread variables set that no configuration may inherit."""
    path = tmp_path / "runs.jsonl"
    monkeypatch.setenv("STANDIN_LOG", str(path))
    for var in (
        "STANDIN_CRASH",
        "STANDIN_HANG",
        "STANDIN_HANG_ALL",
        "STANDIN_HANG_AFTER",
        "STANDIN_BADJSON",
        "STANDIN_FAST",
    ):
        monkeypatch.delenv(var, raising=False)
    # a thread setting in the harness's own environment must not leak into any configuration
    monkeypatch.setenv("TF_NUM_INTRAOP_THREADS", "7")
    monkeypatch.setenv("OMP_NUM_THREADS", "7")
    return path


@pytest.fixture(scope="session")
def user_models(tmp_path_factory) -> dict[str, str]:
    """The small user model of tests/_runtime_child.py, saved once per session as a SavedModel
    (``SM``) and a .keras file (``KERAS``): saving it starts TensorFlow in a child (seconds),
    and every test only reads it. A test that writes into a model saves its own."""
    from _runtime_child import build_user_model

    return build_user_model(str(tmp_path_factory.mktemp("user_models")))

"""The library stands alone: its core never imports the bundled workloads; names come by registration."""

import json
import subprocess
import sys

import pytest

CORE = ("graph", "runtime", "planning", "topology", "coordination", "tracing")


def test_core_modules_never_import_the_workloads():
    code = (
        "import importlib, json, pkgutil, sys\n"
        "import tf_autopar\n"
        f"for pkg in {CORE!r}:\n"
        "    p = importlib.import_module('tf_autopar.' + pkg)\n"
        "    for m in pkgutil.walk_packages(p.__path__, p.__name__ + '.'):\n"
        "        importlib.import_module(m.name)\n"
        "seen = [m for m in sys.modules if m.split('.')[0] in ('tf_autopar_workloads', 'workloads')]\n"
        "core = [m for m in sys.modules if m.startswith(tuple('tf_autopar.' + p for p in " + repr(CORE) + "))]\n"
        "print(json.dumps([seen, len(core)]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    seen, imported = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen == []
    assert imported > 40  # every core module really was imported


def test_a_name_without_a_provider_says_how_to_register():
    code = (
        "from tf_autopar.graph import analyze\n"
        "try:\n    analyze('alexnet')\nexcept FileNotFoundError as e:\n    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert "no names are registered" in out.stdout and "import tf_autopar_workloads" in out.stdout


def test_a_registered_provider_resolves_its_names(monkeypatch):
    from tensorflow.core.framework import graph_pb2
    from tf_autopar.graph import analyze, named

    calls = []

    def graph_def(name, *, mode, size, batch):
        calls.append((name, mode, size, batch))
        return graph_pb2.GraphDef()

    monkeypatch.setattr(named, "_PROVIDERS", {})
    named.register("my_models", names=lambda: ["mine"], graph_def=graph_def)
    profile = analyze("mine", workload_mode="train", workload_size="paper", batch=4)
    assert calls == [("mine", "train", "paper", 4)]
    assert profile.source == "workload mine (train, paper)"
    assert named.modules() == ["my_models"] and named.names() == ["mine"]
    with pytest.raises(FileNotFoundError, match=r"workloads: mine"):
        analyze("other")

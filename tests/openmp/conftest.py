"""Tests that need a real OpenMP build of TensorFlow (intel-tensorflow 2.14, Python 3.11, numpy<2).

CI runs them in a second virtual environment with that build (.ci/run); in an environment with
stock TensorFlow, tests/conftest.py leaves this folder out of collection, so nothing here skips."""

from __future__ import annotations

import os
import sys

import pytest

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if TESTS not in sys.path:
    sys.path.insert(0, TESTS)  # _runtime_child.py: fresh-process helpers shared with the main suite


@pytest.fixture(scope="session", autouse=True)
def openmp_build() -> None:
    """Fail, never skip, when this folder runs without the OpenMP build it exists for."""
    from tf_autopar.topology.tf_runtime import detect_tf_runtime

    rt = detect_tf_runtime()
    assert rt.runtime == "openmp", f"tests/openmp needs an OpenMP build of TensorFlow; found {rt}"

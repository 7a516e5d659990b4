"""The package's shape: no import cycles (module or package level), and the names said once.

Counted with benchmarks/house_metrics.py, the script the architecture's figures come from, so
the test and the figures agree on what a cycle is (every import, in functions too; not under
``if TYPE_CHECKING``).
"""

from __future__ import annotations

import importlib.util
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("house_metrics", ROOT / "benchmarks" / "house_metrics.py")
house = importlib.util.module_from_spec(_spec)
sys.modules["house_metrics"] = house  # its dataclasses look their module up
_spec.loader.exec_module(house)


@pytest.fixture(scope="module")
def metrics():
    return house.measure(ROOT)


def test_no_package_import_cycle(metrics):
    assert metrics.package_cycles == [], metrics.package_cycles


def test_no_module_import_cycle(metrics):
    assert metrics.file_cycles == [], metrics.file_cycles


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for rel, text in {"tf_autopar/__init__.py": "", **files}.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return tmp_path


def test_the_counter_sees_cycles_hidden_in_functions_and_ignores_type_checking(tmp_path):
    root = _tree(
        tmp_path,
        {
            "tf_autopar/a/__init__.py": "",
            "tf_autopar/a/one.py": "from tf_autopar.b.two import f\n",
            "tf_autopar/b/__init__.py": "",
            "tf_autopar/b/two.py": "def f():\n    from tf_autopar.a import one\n",
            "tf_autopar/c/__init__.py": "",
            "tf_autopar/c/three.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from tf_autopar.a import one\n",
            "tf_autopar/a/four.py": "import tf_autopar.c.three\n",
        },
    )
    m = house.measure(root)
    assert m.file_cycles == [["tf_autopar.a.one", "tf_autopar.b.two"]]
    assert m.package_cycles == [["tf_autopar.a", "tf_autopar.b"]]


def test_a_package_face_importing_its_module_that_imports_the_face_is_a_cycle(tmp_path):
    root = _tree(
        tmp_path,
        {
            "tf_autopar/p/__init__.py": "from tf_autopar.p.core import x\n",
            "tf_autopar/p/core.py": "from tf_autopar.p import helpers, y\nx = 1\n",
            "tf_autopar/p/helpers.py": "",
        },
    )
    # core needs the face's own name y: a cycle; helpers is a submodule (p's __init__ runs
    # before any submodule anyway): not one
    assert house.measure(root).file_cycles == [["tf_autopar.p", "tf_autopar.p.core"]]


def test_a_submodule_importing_a_sibling_through_the_face_is_no_cycle(tmp_path):
    root = _tree(
        tmp_path,
        {
            "tf_autopar/p/__init__.py": "from tf_autopar.p.core import x\n",
            "tf_autopar/p/core.py": "from tf_autopar.p import helpers\nx = 1\n",
            "tf_autopar/p/helpers.py": "",
        },
    )
    assert house.measure(root).file_cycles == []


def test_each_shared_name_is_spelt_in_one_module(metrics):
    assert metrics.modules_naming_a_baseline == ["tf_autopar/planning/baselines.py"]
    assert metrics.modules_naming_a_thread_variable == ["tf_autopar/planning/variables.py"]
    # the modes: planning/modes.py, by name, not as a literal list
    assert metrics.modules_defining_the_modes == []


def test_no_arrow_points_up_inside_runtime(metrics):
    # a TYPE_CHECKING import or a sys.modules look-up against the order of the imports that run
    assert metrics.runtime_upward_arrows == [], metrics.runtime_upward_arrows
    # named in docs/design.md: a calling convention's protocol and the served function it is
    # handed name each other's types, and neither imports the other to run
    assert metrics.hidden_cycles == [
        ["tf_autopar.runtime.fastpath.function", "tf_autopar.runtime.fastpath.routing.base"]
    ], metrics.hidden_cycles


def test_no_room_bigger_than_the_anchors_largest(metrics):
    # threadpoolctl's controller is 455 lines, loky's executor manager 419: our bounds
    assert metrics.largest_module[1] <= 900, metrics.largest_module
    assert metrics.largest_class[1] <= 450, metrics.largest_class
    assert metrics.largest_function[1] <= 120, metrics.largest_function
    assert metrics.imports_in_functions_per_kloc <= 6.0, metrics.imports_in_functions


def test_the_counter_sees_arrows_a_reader_follows_up(tmp_path):
    root = _tree(
        tmp_path,
        {
            "tf_autopar/runtime/__init__.py": "",
            "tf_autopar/runtime/low.py": (
                "import sys\nfrom typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                "    from tf_autopar.runtime import high\n"
                "def f():\n    return sys.modules.get('tf_autopar.runtime.mid')\n"
            ),
            "tf_autopar/runtime/mid.py": "from tf_autopar.runtime import low\n",
            "tf_autopar/runtime/high.py": "from tf_autopar.runtime import mid\n",
            "tf_autopar/runtime/side.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from tf_autopar.runtime import low\n",
        },
    )
    m = house.measure(root)
    assert m.file_cycles == []
    # low -> high and low -> mid point up (both reach low through imports that run); side -> low
    # points down
    assert m.runtime_upward_arrows == [
        ("tf_autopar.runtime.low", "tf_autopar.runtime.high"),
        ("tf_autopar.runtime.low", "tf_autopar.runtime.mid"),
    ]
    assert m.hidden_cycles == [["tf_autopar.runtime.high", "tf_autopar.runtime.low", "tf_autopar.runtime.mid"]]


def test_the_counter_counts_tensorflow_imports_apart_and_sizes_classes(tmp_path):
    root = _tree(
        tmp_path,
        {
            "tf_autopar/m.py": (
                "class C:\n    def f(self):\n        import tensorflow as tf\n        import json\n"
                "        from keras import layers\n        return tf, json, layers\n"
            ),
        },
    )
    m = house.measure(root)
    assert (m.imports_in_functions, m.tensorflow_imports_in_functions) == (1, 2)
    assert m.largest_class == ("tf_autopar/m.py:C", 6)

"""Which engines compete (runtime/fastpath/engines/choice.py) and how closely each must agree with
the original (rules.tolerance): pure functions, no TensorFlow."""

from __future__ import annotations

import numpy as np
import pytest

from tf_autopar.runtime.fastpath import rules
from tf_autopar.runtime.fastpath.engines import choice, engine_of, key_for, setting_of


class Engine:
    def __init__(self, name: str, precision: str = "f32", why: str = "") -> None:
        self.name, self.precision, self.why = name, precision, why

    def available(self) -> str:
        return self.why


REGISTERED = {
    "tensorflow": Engine("tensorflow"),
    "openvino": Engine("openvino"),
    "openvino-bf16": Engine("openvino-bf16", "bf16"),
    "onnxruntime": Engine("onnxruntime", why="onnxruntime is not installed"),
}


def names(precision="f32", isa=("avx2",), failed=None, allowed=None):
    return choice.candidate_engines(REGISTERED, "tensorflow", precision, isa, failed or {}, allowed)


def test_installed_f32_engines_compete_in_registration_order_and_the_default_is_not_among_them():
    assert names() == ["openvino"]  # onnxruntime not installed, bf16 not opted in


def test_bf16_needs_the_opt_in_and_a_cpu_with_bf16_arithmetic():
    assert names("bf16", ("avx2",)) == ["openvino"]
    assert names("bf16", ("avx512f", "avx512_bf16")) == ["openvino", "openvino-bf16"]
    assert names("bf16", ("amx_bf16",)) == ["openvino", "openvino-bf16"]
    assert names("f32", ("avx512_bf16",)) == ["openvino"]


def test_a_failed_engine_and_one_the_user_left_out_do_not_compete():
    assert names(failed={"openvino": "conversion failed"}) == []
    assert names(allowed=frozenset({"tensorflow"})) == []
    assert names("bf16", ("amx_bf16",), allowed=frozenset({"openvino-bf16"})) == ["openvino-bf16"]


def test_variants_of_one_engine_are_allowed_and_fail_together_by_their_family():
    family = {
        "tensorflow": Engine("tensorflow"),
        "onnxruntime": Engine("onnxruntime"),
        "onnxruntime-spinning": Engine("onnxruntime-spinning"),
    }
    family["onnxruntime"].family = family["onnxruntime-spinning"].family = "onnxruntime"

    def of(failed=None, allowed=None):
        return choice.candidate_engines(family, "tensorflow", "f32", (), failed or {}, allowed)

    assert of() == ["onnxruntime", "onnxruntime-spinning"]
    assert of(allowed=frozenset({"onnxruntime"})) == ["onnxruntime", "onnxruntime-spinning"]
    assert of(allowed=frozenset({"onnxruntime-spinning"})) == ["onnxruntime-spinning"]
    assert of(failed={"onnxruntime-spinning": "an error while serving"}) == ["onnxruntime"]
    assert of(failed={"onnxruntime": "conversion failed"}) == []  # the family's name: the shared conversion


def test_an_engine_whose_own_check_raises_is_left_out():
    class Raises(Engine):
        def available(self) -> str:
            raise OSError("broken install")

    assert choice.candidate_engines({"x": Raises("x")}, "tensorflow", "f32", (), {}, None) == []


def test_the_user_list_is_read_from_the_environment():
    assert choice.allowed_names({}) is None
    assert choice.allowed_names({"TF_AUTOPAR_ENGINES": " OpenVINO, tensorflow ,"}) == {"openvino", "tensorflow"}


@pytest.mark.parametrize(
    ("value", "expected"), [(None, "f32"), ("fp32", "f32"), ("BF16", "bf16"), ("bfloat16", "bf16"), ("float32", "f32")]
)
def test_precision_names(value, expected):
    assert choice.checked_precision(value) == expected


def test_an_unknown_precision_is_an_error_naming_the_accepted_ones():
    with pytest.raises(ValueError, match="precision must be one of f32, bf16, got 'int8'"):
        choice.checked_precision("int8")


def test_the_precision_variable_opts_in_and_a_bad_one_is_f32_with_a_warning(caplog):
    assert choice.wanted_precision("f32", {"TF_AUTOPAR_PRECISION": "bf16"}) == "bf16"
    assert choice.wanted_precision("bf16", {}) == "bf16"
    assert choice.wanted_precision("f32", {"TF_AUTOPAR_PRECISION": "half"}) == "f32"
    assert "TF_AUTOPAR_PRECISION" in caplog.text


@pytest.mark.parametrize(("budget", "streams", "setting"), [(2, 1, (1, 2, 1)), (8, 2, (1, 4, 2)), (3, 4, (1, 1, 3))])
def test_an_engine_gets_the_whole_budget_split_among_its_streams(budget, streams, setting):
    assert choice.engine_setting(budget, streams) == setting


def test_onnx_runtime_is_also_tried_on_one_thread_where_the_plan_gives_one():
    assert choice.engine_settings("onnxruntime", 2, 1, 1) == [(1, 2, 1), (1, 1, 1)]
    assert choice.engine_settings("onnxruntime", 8, 2, 1) == [(1, 4, 2), (1, 1, 2)]
    assert choice.engine_settings("onnxruntime", 2, 1, 2) == [(1, 2, 1)]  # ops worth splitting
    assert choice.engine_settings("onnxruntime", 1, 1, 1) == [(1, 1, 1)]  # one CPU: the same setting
    assert choice.engine_settings("openvino", 2, 1, 1) == [(1, 2, 1)]
    assert choice.engine_settings("onnxruntime-spinning", 2, 1, 1) == [(1, 2, 1)]  # one thread does not spin
    assert rules.label((1, 1, 1, "onnxruntime")) == "onnxruntime, 1 thread"


def test_keys_read_as_before_for_tensorflow_and_name_any_other_engine():
    assert key_for("tensorflow", (1, 2, 1)) == (1, 2, 1)
    assert key_for("openvino", (1, 2, 1)) == (1, 2, 1, "openvino")
    assert engine_of((1, 2, 1)) == "tensorflow" and engine_of((1, 2, 1, "openvino")) == "openvino"
    assert setting_of((1, 2, 1, "openvino")) == (1, 2, 1)
    assert rules.label((1, 2, 1, "openvino")) == "openvino, 2 threads"
    assert rules.label((1, 2, 2, "openvino")) == "openvino, 2 threads per stream in 2 streams"
    assert rules.label((2, 1, 1)) == "2x1"


def test_f32_engines_are_held_to_1e4_and_bf16_to_5e2_with_the_top_class_kept():
    ref = np.array([[0.1, 0.7, 0.2], [0.5, 0.3, 0.2]], np.float32)
    near = ref + np.float32(0.01)
    assert rules.outputs_differ([near], [ref], *rules.tolerance("f32")).startswith("output 0: differs by")
    assert rules.outputs_differ([near], [ref], *rules.tolerance("bf16")) == ""
    tie = np.array([[0.50, 0.49]], np.float32)
    swapped = np.array([[0.49, 0.50]], np.float32)  # 0.01 off (2% of the largest) but the top class moved
    assert "top class differs in 1 of 1 rows" in rules.outputs_differ([swapped], [tie], *rules.tolerance("bf16"))
    ints = np.array([1, 2, 3])
    assert rules.outputs_differ([ints + 1], [ints], *rules.tolerance("bf16")) == "output 0: 3 of 3 values differ"


class _Static:
    """An engine that takes the call's shapes (as OpenVINO's): records what it is asked."""

    name, precision, static_shapes = "static-engine", "f32", True

    def __init__(self) -> None:
        self.asked: list[bool] = []
        self.built: list[object] = []

    def available(self) -> str:
        return ""

    def need_bytes(self, frozen, static=False):
        self.asked.append(static)
        return (200 << 20 if static else 100 << 20), 0

    def build(self, frozen, setting, shapes=None):
        self.built.append(shapes)
        return object()


def _function():
    import threading
    import types

    return types.SimpleNamespace(
        stopped="", frozen=object(), lock=threading.Lock(), pools={}, engine_failed={}, variable_bytes=0, refused=""
    )


@pytest.mark.parametrize("room_mb, built", [(300, [[(1, 224, 224, 3)]]), (150, [None])])
def test_an_engine_taking_shapes_gets_the_calls_where_both_copies_fit_else_the_free_one_alone(
    monkeypatch, room_mb, built
):
    from tf_autopar.runtime.fastpath import engines, memory, pools

    engine = _Static()
    monkeypatch.setitem(engines._engines, engine.name, engine)
    monkeypatch.setattr(
        memory,
        "room_for_engine",
        lambda var, sessions, need, what: (need[0] <= room_mb << 20, f"{what} needs {need[0] >> 20} MB"),
    )
    fn = _function()
    key = key_for(engine.name, (1, 2, 1))
    pool = pools.pool_for(fn, key, [np.zeros((1, 224, 224, 3), np.float32)])
    assert pool is not None and fn.pools[key] is pool
    assert engine.asked == ([True] if room_mb == 300 else [True, False])
    assert engine.built == built


def test_an_engine_without_shapes_and_a_build_without_a_call_get_no_static_copy():
    from tf_autopar.runtime.fastpath import pools

    arrays = [np.zeros((8, 16), np.float32), np.zeros((), np.int64)]
    assert pools.static_shapes(_Static(), arrays) == [(8, 16), ()]
    assert pools.static_shapes(_Static(), None) == []
    assert pools.static_shapes(Engine("onnxruntime"), arrays) == []

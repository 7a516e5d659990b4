"""What a user says about their model's inputs, carried from a CLI parent to its child processes.

Pure (no TensorFlow, no numpy: numpy starts its own BLAS threads): the parents of ``bench`` and ``validate`` parse and check these
flags before any process starts, then hand them to every child as command-line flags so
each fresh process builds the same inputs.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Mapping, Sequence


from tf_autopar._numbers import count
from tf_autopar.graph.dims import parse_input_shape


def parse_input_shapes(items: Sequence[str] | None) -> dict[str, tuple[int, ...]]:
    """``["ids=1,64", ...]`` -> ``{"ids": (1, 64)}``; ValueError naming the bad item.

    The syntax of ``plan``/``analyze --input-shape`` (tf_autopar.graph.dims): NAME=D1,D2,...,
    the input's full shape, batch first, positive integers.
    """
    out: dict[str, tuple[int, ...]] = {}
    for item in items or ():
        name, dims = parse_input_shape(str(item))
        if name in out:
            raise ValueError(f"--input-shape gives input {name!r} twice")
        out[name] = dims
    return out


@dataclass(frozen=True)
class ModelOptions:
    signature: str | None = None  # SavedModel signature (None: serving_default)
    input_shapes: tuple[tuple[str, tuple[int, ...]], ...] = ()  # --input-shape NAME=D1,D2,...
    int_max: int | None = None  # exclusive bound of synthesised integer inputs (None: from the graph, else 1000)
    inputs: str | None = None  # absolute path of an .npz with real inputs

    @classmethod
    def from_flags(
        cls,
        signature: str | None = None,
        input_shape: Sequence[str] | None = None,
        int_max: int | None = None,
        inputs: str | None = None,
    ) -> "ModelOptions":
        """Checked: ValueError naming the bad flag (format only; names are checked against the model later)."""
        shapes = parse_input_shapes(input_shape)
        if int_max is not None and int_max < 1:
            raise ValueError(f"--int-max must be a positive integer, got {int_max}")
        if inputs is not None:
            if not os.path.isfile(inputs):
                raise ValueError(f"--inputs {inputs}: no such file")
            if shapes:
                raise ValueError("--input-shape and --inputs exclude each other: the file's arrays fix the shapes")
            inputs = os.path.abspath(inputs)
        if signature is not None and not signature.strip():
            raise ValueError("--signature needs a name")
        return cls(signature=signature, input_shapes=tuple(sorted(shapes.items())), int_max=int_max, inputs=inputs)

    @property
    def shapes(self) -> dict[str, tuple[int, ...]]:
        return dict(self.input_shapes)

    @property
    def given(self) -> bool:
        return bool(self.signature or self.input_shapes or self.int_max is not None or self.inputs)

    def plan_args(self) -> list[str]:
        """Flags that change the plan (the graph analysed and its shapes)."""
        args: list[str] = []
        if self.signature:
            args += ["--signature", self.signature]
        for name, dims in self.input_shapes:
            args += ["--input-shape", f"{name}={','.join(map(str, dims))}"]
        if self.inputs:
            args += ["--inputs", self.inputs]  # the file's shapes are the shapes analysed
        return args

    def child_args(self) -> list[str]:
        """Flags for a measuring child: the plan's plus the input values."""
        args = self.plan_args()
        if self.int_max is not None:
            args += ["--int-max", str(self.int_max)]
        return args

    def to_dict(self) -> dict[str, Any]:
        return {
            "signature": self.signature,
            "input_shapes": {k: list(v) for k, v in self.input_shapes},
            "int_max": self.int_max,
            "inputs": self.inputs,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "ModelOptions":
        shapes = d.get("input_shapes") or {}
        return cls(
            signature=d.get("signature"),
            input_shapes=tuple(sorted((k, tuple(v)) for k, v in shapes.items())),
            int_max=d.get("int_max"),
            inputs=d.get("inputs"),
        )


def add_model_flags(parser: Any) -> None:
    """The input flags shared by ``bench``, ``validate`` and the child processes."""
    parser.add_argument(
        "--signature", default=None, metavar="NAME", help="SavedModel signature to run (default serving_default)"
    )
    parser.add_argument(
        "--input-shape",
        action="append",
        default=None,
        metavar="NAME=D1,D2,...",
        help="full shape of an input, batch first (e.g. ids=1,64); repeatable. Other None dimensions default to 128",
    )
    parser.add_argument(
        "--int-max",
        type=count(1 << 63),
        default=None,
        metavar="N",
        help="synthesised integer inputs lie in [0, N) (default: below the smallest embedding "
        "table the input indexes, as the graph shows, else 1000)",
    )
    parser.add_argument(
        "--inputs",
        default=None,
        metavar="FILE.npz",
        help="real inputs: an .npz with one array per input, named as the signature's inputs "
        "(needed for string inputs)",
    )


def from_args(args: Any) -> ModelOptions:
    return ModelOptions.from_flags(
        getattr(args, "signature", None),
        getattr(args, "input_shape", None),
        getattr(args, "int_max", None),
        getattr(args, "inputs", None),
    )

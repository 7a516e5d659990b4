"""Inputs for a user's model: synthesised from its input specs, or read from an .npz file.

Pure numpy (no TensorFlow), so the rules are testable without a model and the same
arrays are built in every child process (fixed seed).

- Floats: standard normal. Integers: uniform in ``[0, bound)``, the bound being ``--int-max``
  if given, else the smallest embedding table the input indexes (found in the graph by
  load.py), else ``DEFAULT_INT_MAX``: an id past a table's end makes a Gather fail, and the
  graph is the only place that knows the table's size. Bools: fair coin.
- Shapes: a None first dimension is the batch; other None dimensions come from
  ``--input-shape NAME=D1,D2,...`` (the full shape, batch first, as for ``plan``), else
  ``DEFAULT_DIM`` (128, e.g. a sequence length), reported as an assumption.
- Strings cannot be synthesised (their meaning is the model's vocabulary): ValueError
  naming ``--inputs file.npz``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from tf_autopar.models.options import parse_input_shapes

DEFAULT_DIM = 128
DEFAULT_INT_MAX = 1000
SEED = 0

_FLOAT = ("float16", "float32", "float64", "bfloat16", "half", "double")
_COMPLEX = ("complex64", "complex128")
_INT = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
MAX_INPUT_BYTES = 2 << 30  # synthesised inputs of one request; beyond, a clear error instead of numpy's MemoryError
_STRING = ("string",)

__all__ = [
    "DEFAULT_DIM",
    "DEFAULT_INT_MAX",
    "InputInfo",
    "InputSpec",
    "check_input_shapes",
    "load_npz",
    "parse_input_shapes",
    "prepare",
    "resolve_shape",
    "synthesize",
]


@dataclass(frozen=True)
class InputSpec:
    """One model input as the signature declares it: shape dims may be None; shape None = unknown rank."""

    name: str
    dtype: str  # TensorFlow dtype name: "float32", "int64", "bool", "string", ...
    shape: tuple[int | None, ...] | None

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "dtype": self.dtype, "shape": None if self.shape is None else list(self.shape)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "InputSpec":
        shape = d.get("shape")
        return cls(str(d["name"]), str(d["dtype"]), None if shape is None else tuple(shape))

    def text(self) -> str:
        dims = "?" if self.shape is None else ",".join("None" if d is None else str(d) for d in self.shape)
        return f"{self.name} {self.dtype}[{dims}]"


@dataclass(frozen=True)
class InputInfo:
    """How one input was made: what the report prints next to the timings."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    source: str  # "synthesised" or "file"
    values: str  # e.g. "standard normal", "integers in [0, 500): embedding table (500 rows)"
    int_max: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "dtype": self.dtype,
            "shape": list(self.shape),
            "source": self.source,
            "values": self.values,
            "int_max": self.int_max,
        }


def check_input_shapes(specs: Sequence[InputSpec], input_shapes: Mapping[str, Sequence[int]]) -> None:
    """ValueError when ``--input-shape`` names an input the signature does not have."""
    names = [s.name for s in specs]
    unknown = sorted(set(input_shapes) - set(names))
    if unknown:
        raise ValueError(
            f"--input-shape names {', '.join(map(repr, unknown))}, which the model does not have; "
            f"its inputs are: {', '.join(names) or 'none'}"
        )


def resolve_shape(
    spec: InputSpec, batch: int, given: Sequence[int] | None = None, default_dim: int = DEFAULT_DIM
) -> tuple[tuple[int, ...], list[str]]:
    """The concrete shape to run ``spec`` at, and the assumptions made (for the report).

    A None first dimension is the batch; ``given`` (from --input-shape) must have the
    spec's rank and agree with its fixed dimensions and with ``batch``.
    """
    if batch < 1:
        raise ValueError(f"--batch must be a positive integer, got {batch}")
    assumed: list[str] = []
    if given is not None:
        given = tuple(int(d) for d in given)
        if spec.shape is not None and len(given) != len(spec.shape):
            raise ValueError(
                f"--input-shape {spec.name}={','.join(map(str, given))} has rank {len(given)}, but input "
                f"{spec.text()} has rank {len(spec.shape)} (give the full shape, batch included)"
            )
        out = []
        for i, d in enumerate(given):
            declared = spec.shape[i] if spec.shape is not None else None
            if declared is not None and d != declared:
                raise ValueError(
                    f"--input-shape {spec.name}: dimension {i} is fixed at {declared} in the signature "
                    f"({spec.text()}), not {d}"
                )
            if i == 0 and declared is None and spec.shape is not None and d != batch:
                raise ValueError(
                    f"--input-shape {spec.name}: the batch dimension is {d} but --batch is {batch} "
                    f"(the shape is the full one, batch first: write {batch} first)"
                )
            out.append(d)
        return tuple(out), assumed
    if spec.shape is None:
        raise ValueError(
            f"input {spec.name!r} has an unknown rank: give its shape with --input-shape "
            f"{spec.name}=D1,D2,... (batch included)"
        )
    out = []
    for i, d in enumerate(spec.shape):
        if d is None:
            if i == 0:
                d = batch
            else:
                d = default_dim
                assumed.append(
                    f"{spec.name}: dimension {i} is None in the signature; {default_dim} assumed "
                    f"(--input-shape {spec.name}=... to choose)"
                )
        elif i == 0 and batch != d:
            raise ValueError(
                f"input {spec.name!r} has a fixed batch dimension of {d} ({spec.text()}); "
                f"--batch {batch} is impossible with this model (use --batch {d})"
            )
        out.append(int(d))
    return tuple(out), assumed


def _int_range(dtype: str) -> int:
    """Values an integer dtype can hold from 0 (exclusive upper bound)."""
    return int(np.iinfo(np.dtype(dtype)).max) + 1


def synthesize(
    specs: Sequence[InputSpec],
    batch: int,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    int_max: int | None = None,
    int_bounds: Mapping[str, tuple[int, str]] | None = None,
    seed: int = SEED,
    default_dim: int = DEFAULT_DIM,
) -> tuple[dict[str, np.ndarray], list[InputInfo], list[str]]:
    """Arrays for every input, how each was made, and the assumptions made.

    ``int_max``: the user's bound for every integer input (wins). ``int_bounds``: per input,
    (rows, description) of the smallest table it indexes, from the graph. bfloat16 inputs are
    made as float32 (numpy has no bfloat16); the child casts them.
    """
    shapes = dict(input_shapes or {})
    check_input_shapes(specs, shapes)
    if int_max is not None and int_max < 1:
        raise ValueError(f"--int-max must be a positive integer, got {int_max}")
    for s in specs:
        if s.dtype in _STRING:
            raise ValueError(
                f"input {s.name!r} is a string tensor ({s.text()}): tf-autopar cannot synthesise strings (their "
                f"meaning is the model's vocabulary). Pass real inputs with --inputs file.npz: an .npz whose "
                f"arrays are named as the signature's inputs ({', '.join(x.name for x in specs)}), e.g. "
                f"numpy.savez('inputs.npz', {s.name}=numpy.array([...]))"
            )
    resolved = {s.name: resolve_shape(s, batch, shapes.get(s.name), default_dim) for s in specs}
    check_input_size(specs, {name: shape for name, (shape, _) in resolved.items()}, batch)
    rng = np.random.default_rng(seed)
    arrays: dict[str, np.ndarray] = {}
    infos: list[InputInfo] = []
    assumptions: list[str] = []
    for s in specs:
        shape, assumed = resolved[s.name]
        assumptions += assumed
        bound = None
        if s.dtype in _FLOAT:
            np_dtype = (
                "float32"
                if s.dtype == "bfloat16"
                else ("float16" if s.dtype == "half" else "float64" if s.dtype == "double" else s.dtype)
            )
            arr = rng.standard_normal(shape).astype(np_dtype)
            values = "standard normal"
        elif s.dtype in _COMPLEX:
            arr = (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(s.dtype)
            values = "standard normal (real and imaginary parts)"
        elif s.dtype in _INT:
            if int_max is not None:
                bound, why = int_max, "--int-max"
            elif int_bounds and s.name in int_bounds:
                bound, why = int(int_bounds[s.name][0]), int_bounds[s.name][1]
            else:
                bound, why = DEFAULT_INT_MAX, "default (no table found in the graph; --int-max to choose)"
            bound = max(1, min(bound, _int_range(s.dtype)))
            arr = rng.integers(0, bound, size=shape, dtype=np.int64).astype(s.dtype)
            values = f"integers in [0, {bound}): {why}"
        elif s.dtype == "bool":
            arr = rng.integers(0, 2, size=shape).astype(bool)
            values = "random booleans"
        else:
            raise ValueError(
                f"input {s.name!r} has dtype {s.dtype}, which tf-autopar cannot synthesise; "
                f"pass real inputs with --inputs file.npz (arrays named as the inputs)"
            )
        arrays[s.name] = arr
        infos.append(InputInfo(s.name, s.dtype, tuple(arr.shape), "synthesised", values, bound))
    return arrays, infos, assumptions


def check_input_size(specs: Sequence[InputSpec], shapes: Mapping[str, Sequence[int]], batch: int) -> None:
    """ValueError before anything is allocated when the inputs would exceed MAX_INPUT_BYTES (a
    batch of 10**9 is a typo, and numpy's MemoryError in a child says nothing about it)."""
    total = 0
    for s in specs:
        shape = shapes.get(s.name, ())
        size = 8 if s.dtype in _COMPLEX else 8 if s.dtype in ("float64", "double", "int64", "uint64") else 4
        n = 1
        for d in shape:
            n *= int(d)
        total += n * size
    if total > MAX_INPUT_BYTES:
        raise ValueError(
            f"the inputs at --batch {batch} would take {total / (1 << 30):.1f} GiB (bound "
            f"{MAX_INPUT_BYTES >> 30} GiB): give a smaller --batch (or smaller --input-shape dimensions)"
        )


def _dtype_matches(spec_dtype: str, arr: np.ndarray) -> bool:
    if spec_dtype in _STRING:
        return arr.dtype.kind in ("U", "S")
    if spec_dtype == "bfloat16":
        return arr.dtype.kind == "f"  # numpy has no bfloat16: any float array is cast by the child
    name = {"half": "float16", "double": "float64"}.get(spec_dtype, spec_dtype)
    return arr.dtype == np.dtype(name) if name in (*_FLOAT, *_COMPLEX, *_INT, "bool") else False


def load_npz(path: str, specs: Sequence[InputSpec], batch: int) -> tuple[dict[str, np.ndarray], list[InputInfo]]:
    """Real inputs from an .npz (arrays named as the inputs); ValueError naming each mismatch.

    The batch is the arrays' first dimension where the signature's is None; it must be
    ``batch`` so that items/s and the plan's batch are what really ran.
    """
    if not os.path.isfile(path):
        raise ValueError(f"--inputs {path}: no such file")
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {k: np.asarray(data[k]) for k in data.files}
    except (OSError, ValueError) as exc:
        raise ValueError(
            f"--inputs {path}: not a readable .npz file (numpy.savez output without object arrays): {exc}"
        ) from None
    names = [s.name for s in specs]
    missing = [n for n in names if n not in arrays]
    extra = sorted(set(arrays) - set(names))
    if missing or extra:
        parts = []
        if missing:
            parts.append(f"missing {', '.join(missing)}")
        if extra:
            parts.append(f"not inputs of the model: {', '.join(extra)}")
        raise ValueError(f"--inputs {path}: {'; '.join(parts)} (the model's inputs are: {', '.join(names)})")
    infos = []
    for s in specs:
        arr = arrays[s.name]
        if not _dtype_matches(s.dtype, arr):
            raise ValueError(
                f"--inputs {path}: array {s.name!r} has dtype {arr.dtype}, the signature wants "
                f"{s.dtype} (save it as {s.dtype})"
            )
        if s.shape is not None:
            if arr.ndim != len(s.shape):
                raise ValueError(
                    f"--inputs {path}: array {s.name!r} has shape {list(arr.shape)} (rank {arr.ndim}), "
                    f"the signature wants {s.text()} (rank {len(s.shape)})"
                )
            for i, (d, want) in enumerate(zip(arr.shape, s.shape)):
                if want is not None and d != want:
                    raise ValueError(
                        f"--inputs {path}: array {s.name!r} has shape {list(arr.shape)}; dimension {i} "
                        f"must be {want} ({s.text()})"
                    )
            if s.shape and s.shape[0] is None and arr.shape[0] != batch:
                raise ValueError(
                    f"--inputs {path}: array {s.name!r} holds a batch of {arr.shape[0]}; pass "
                    f"--batch {arr.shape[0]} (or save a batch of {batch})"
                )
        infos.append(InputInfo(s.name, s.dtype, tuple(arr.shape), "file", f"from {os.path.basename(path)}"))
    return {s.name: arrays[s.name] for s in specs}, infos


def prepare(
    specs: Sequence[InputSpec],
    batch: int,
    *,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    int_max: int | None = None,
    int_bounds: Mapping[str, tuple[int, str]] | None = None,
    inputs_file: str | None = None,
) -> tuple[dict[str, np.ndarray], list[InputInfo], list[str]]:
    """The inputs every child runs with: the file's when given, else synthesised."""
    if inputs_file:
        if input_shapes:
            raise ValueError("--input-shape and --inputs exclude each other: the file's arrays fix the shapes")
        arrays, infos = load_npz(inputs_file, specs, batch)
        return arrays, infos, []
    return synthesize(specs, batch, input_shapes, int_max, int_bounds)

"""What a model's unknown dimensions are read as, so that each op's work can be estimated. Pure.

A serving signature leaves the batch free (None) and often the sequence length too; the
small-op rule needs sizes. The batch is read as the one given, else in throughput mode a TF
Serving batching file's ``max_batch_size``, else 1; other unknown dimensions come from
``--input-shape NAME=DIMS`` or a documented default. Where nobody gave the batch,
``for_unknown_batch`` marks the op sizes unknown. Every plan says what was assumed.
"""

from __future__ import annotations

import dataclasses
import os
import re
from typing import Any, NamedTuple, Sequence

from tf_autopar.graph.profile import GraphProfile

Shape = tuple[int, ...]

#: What an unknown non-leading dimension (a sequence length, a free image side) is read as when
#: the caller gives no value: a typical sequence length; said in the plan's explanation.
DEFAULT_OTHER_DIM = 128


class Assumed(NamedTuple):
    """What unknown dimensions are read as: the leading one (the batch) and any other.
    ``other=None`` leaves non-leading unknowns unknown."""

    batch: int
    other: int | None = DEFAULT_OTHER_DIM


def proto_dims(shape_proto: Any) -> tuple[int, ...] | None:
    """A TensorShapeProto's dimensions (-1 = unknown), or None for an unknown rank."""
    return None if shape_proto.unknown_rank else tuple([d.size for d in shape_proto.dim])


MAX_BATCH = 1 << 20  # a batch of 10**9 is a typo: its inputs alone would not fit in memory


def _check_batch(batch: Any) -> None:
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise ValueError(f"batch must be a positive integer, got {batch!r}")
    if batch > MAX_BATCH:
        raise ValueError(f"batch {batch} is above the bound of {MAX_BATCH}")


_NOTHING: frozenset[str] = frozenset()


def fill_unknown(dims: Sequence[int], assumed: Assumed | None) -> tuple[Shape | None, frozenset[str]]:
    """``dims`` (-1 or None = unknown) with the assumption applied, and which kinds of
    assumption were needed ("batch", "other"); (None, ...) when a dimension stays unknown."""
    if None not in dims and min(dims, default=0) >= 0:  # all known: the usual case, once per op input
        return tuple(dims), _NOTHING
    used: set[str] = set()
    out = []
    for i, d in enumerate(dims):
        if d is not None and d >= 0:
            out.append(int(d))
            continue
        value = None if assumed is None else (assumed.batch if i == 0 else assumed.other)
        if value is None:
            return None, frozenset(used)
        used.add("batch" if i == 0 else "other")
        out.append(value)
    return tuple(out), frozenset(used)


def parse_input_shape(text: str) -> tuple[str, tuple[int, ...]]:
    """``NAME=D1,D2,...`` (the ``--input-shape`` syntax) -> (NAME, dims); ValueError naming the problem."""
    name, sep, dims = text.partition("=")
    parts = [p.strip() for p in dims.replace("x", ",").split(",")] if sep else []
    if not name.strip() or not parts or not all(p.isdecimal() and p.isascii() and int(p) > 0 for p in parts):
        raise ValueError(
            f"--input-shape expects NAME=D1,D2,... with positive integers (the full shape, batch first), "
            f"e.g. input_ids=1,128; got {text!r}"
        )
    return name.strip(), tuple(int(p) for p in parts)


def assumed_dims(
    inputs: dict[str, tuple[int, ...] | None],
    batch: int | None = None,
    input_shapes: dict[str, Sequence[int]] | None = None,
) -> Assumed:
    """What unknown dimensions are read as, from the model's input shapes (-1 = unknown; None =
    unknown rank), the batch asked for (default 1, the latency batch) and the full shapes given
    for some inputs. A given shape fixes the batch (its first dimension, where the model's is
    unknown) and the other unknown sizes (the largest, where several differ).
    Raises ValueError naming the input and the mismatch."""
    if batch is not None:
        _check_batch(batch)
    given_batch: set[int] = set()
    others: set[int] = set()
    for name, dims in (input_shapes or {}).items():
        if name not in inputs:
            raise ValueError(
                f"--input-shape names {name!r}, which is not an input of the model; "
                f"its inputs: {', '.join(sorted(inputs)) or 'none'}"
            )
        dims = tuple(int(d) for d in dims)
        if any(d < 1 for d in dims):
            raise ValueError(f"--input-shape {name}: dimensions must be positive, got {list(dims)}")
        model_dims = inputs[name]
        if model_dims is None:
            others.update(dims[1:])
            continue
        if len(dims) != len(model_dims):
            raise ValueError(
                f"--input-shape {name}: the model's input has rank {len(model_dims)} "
                f"({_shape_text(model_dims)}), the shape given has rank {len(dims)} ({list(dims)})"
            )
        for i, (want, got) in enumerate(zip(model_dims, dims)):
            if want >= 0 and want != got:
                raise ValueError(
                    f"--input-shape {name}: dimension {i} is fixed at {want} in the model "
                    f"({_shape_text(model_dims)}), the shape given says {got}"
                )
            if want < 0:
                (given_batch if i == 0 else others).add(got)
    if len(given_batch) > 1:
        raise ValueError(f"--input-shape gives different batch sizes {sorted(given_batch)}: give one batch")
    if given_batch and batch is not None and given_batch != {batch}:
        raise ValueError(f"--input-shape says batch {given_batch.pop()}, --batch says {batch}: give one batch")
    chosen = batch if batch is not None else (given_batch.pop() if given_batch else 1)
    return Assumed(chosen, max(others) if others else DEFAULT_OTHER_DIM)


def describe_assumptions(assumed: Assumed | None, used: set[str] | frozenset[str]) -> tuple[str, ...]:
    """The profile's ``assumptions``: what was read for which kind of unknown dimension."""
    if assumed is None:
        return ()
    out = []
    if "batch" in used:
        out.append(f"unknown batch dimension read as {assumed.batch}")
    if "other" in used:
        out.append(f"other unknown dimensions (sequence length, image side) read as {assumed.other}")
    return tuple(out)


def _shape_text(dims: Sequence[int]) -> str:
    return "[" + ", ".join("None" if d < 0 else str(d) for d in dims) + "]"


def read_batching_file(path: str) -> int:
    """``max_batch_size`` of a TF Serving batching parameters file (text protobuf:
    ``max_batch_size { value: 32 }``); ValueError naming the problem."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"batching parameters file {path!r} does not exist")
    with open(path, encoding="utf-8", errors="replace") as fh:
        text = fh.read(1 << 20)
    found = re.search(r"max_batch_size\s*:?\s*\{\s*value\s*:\s*([0-9]+)\s*\}", text, re.ASCII)
    if not found or not found.group(1).isascii() or int(found.group(1)) < 1:
        raise ValueError(f"batching parameters file {path!r} has no positive max_batch_size {{ value: N }}")
    return int(found.group(1))


def typical_batch(mode: str, batch: int | None = None, batching_file: str | None = None) -> int:
    """The batch a None batch dimension is read as: the one given, else in throughput mode the
    batching file's max_batch_size, else 1 (latency: one request at a time)."""
    if batch is not None:
        _check_batch(batch)
        return batch
    if batching_file and mode == "throughput":
        return read_batching_file(batching_file)
    return 1


def for_unknown_batch(profile: GraphProfile) -> GraphProfile:
    """The profile to plan from when nobody said the batch: its op sizes are not known, so the
    plan keeps TensorFlow's default pool sizes within the budget. Measured (docs/serving.md): a
    plan made for batch 1 ran MobileNetV2 at batch 8 1.35x slower than the default and a DLRM
    recommender at batch 2048 1.6x slower; with every CPU per op but the width's single inter-op
    thread, a BERT encoder at batch 1 still ran 1.15x slower than the default's two."""
    note = (
        "the batch is not given: op sizes unknown, so TensorFlow's default pool sizes within the budget "
        "(give the batch: enable(batch=N), --batch N)"
    )
    return dataclasses.replace(
        profile,
        typical_op_work=None,
        lookup_work=None,
        contraction_work=None,
        sizes_known=False,
        assumptions=tuple(profile.assumptions) + (note,),
    )

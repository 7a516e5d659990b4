"""The graph statistics the planner needs, as a plain record."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class GraphProfile:
    """Shape of a model's graph reduced to its heavy operators (see docs in graph/width.py)."""

    heavy_ops: int  # heavy operators in the graph (nested functions included)
    depth: int  # longest chain of heavy ops ("maximum layers")
    avg_width: int  # floor(heavy_ops / depth), the published guideline's p; 1 when there are no heavy ops
    max_width: int  # most heavy ops that can run at once (estimate documented in width.py)
    level_widths: tuple[int, ...] = ()  # heavy ops per level, level 1 first
    op_types: dict[str, int] = field(default_factory=dict)  # histogram of every op type
    heavy_op_types: dict[str, int] = field(default_factory=dict)
    nodes: int = 0  # ops analysed, nested functions included
    functions: int = 0  # nested function bodies descended into
    training: bool = False  # the graph computes gradients
    uses_tf_data: bool = False  # the graph iterates a tf.data dataset (then plan at least 2 inter-op threads)
    loops: bool = False  # the graph runs While loops (RNNs): their iterations overlap on a second inter-op thread
    # Work-weighted median heavy-op size in multiply-adds (graph/work.py); None when any
    # heavy op's shapes are unknown (e.g. a None batch dimension) or there are no heavy ops.
    typical_op_work: int | None = None
    # Heavy embedding look-ups (call sites), the elements they read per step, and the
    # multiply-adds of the other heavy ops per step (None: some shape unknown). On OpenMP
    # builds the look-ups run on TensorFlow's own pool and the rest on OpenMP teams.
    lookups: int = 0
    lookup_work: int | None = None
    contraction_work: int | None = None
    # What unknown dimensions were read as to estimate the work, e.g. "unknown batch dimension
    # read as 1"; empty when every shape was known (or nothing was assumed).
    assumptions: tuple[str, ...] = ()
    # False when the batch was not given (graph/dims.for_unknown_batch): the op sizes are unknown, and
    # the planner keeps TensorFlow's default pool sizes within the budget.
    sizes_known: bool = True
    source: str = ""  # what was analysed, for explanations
    fingerprint: str = ""  # stable hash of the graph structure, for caches

    @classmethod
    def from_width(cls, width: int, source: str = "given width") -> "GraphProfile":
        """A profile for a user who only knows the width."""
        if width < 1:
            raise ValueError(f"model width must be a positive integer, got {width}")
        return cls(heavy_ops=width, depth=1, avg_width=width, max_width=width, level_widths=(width,), source=source)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

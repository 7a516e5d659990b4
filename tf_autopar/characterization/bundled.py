"""``tf_autopar.characterize(...)``: the characterization of the bundled workloads.

The one place the characterization meets the workloads package (its catalogue of names: importing
it loads no model and no TensorFlow), so renaming that package changes one line here; run.py and
the rest take the names they are given.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Sequence

import tf_autopar_workloads

if TYPE_CHECKING:
    from tf_autopar.characterization.result import Result


def characterize(
    workloads: Sequence[str] | None = None, out: str | os.PathLike[str] = "characterization", **kwargs: Any
) -> Result:
    """Run the characterization of ``workloads`` (default: all bundled) into ``out``. Keyword
    arguments: size, modes, threads, inter, steps, warmup, rounds, batch, timeout_s, classes,
    progress (see run.characterize)."""
    # imported here: run.py's analysis needs numpy, which the CLI's parent process never loads
    # (it would start BLAS threads beside the children it measures)
    from tf_autopar.characterization.run import characterize as _characterize

    known = tf_autopar_workloads.names()
    return _characterize(list(workloads) if workloads else known, out, known=known, **kwargs)

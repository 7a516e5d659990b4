"""What enable(model=...) names, as a GraphProfile: a path, a bundled workload's name, a width,
a profile, or a TF/Keras object.

Nothing here may start TensorFlow's runtime before the pools are set: a SavedModel is read
from its protobuf, a .keras file or a workload is analysed in a child process (model_loads.py).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from tf_autopar.runtime.model_loads import child_profile, model_profile as file_profile
from tf_autopar.runtime.safety import maybe_fail

if TYPE_CHECKING:
    from tf_autopar.graph.profile import GraphProfile


def profile(
    model: Any, width: int | None, started: bool, use_cache: bool, batch: int | None, batch_given: bool
) -> tuple[GraphProfile | None, str]:
    """(profile, where it came from); (None, "host") when neither a model nor a width is given.

    ``batch``: what a None batch dimension is read as; ``batch_given``: the user gave it (a
    model file's op sizes count as unknown otherwise, graph/dims.py)."""
    if width is None and model is None:
        return None, "host"  # no import of the graph package: keeps enable() cheap
    from tf_autopar.graph.profile import GraphProfile

    if width is not None:
        return GraphProfile.from_width(width), f"width {width}"
    if isinstance(model, bool):
        raise TypeError("model must be a path, a workload name, a width or a model object, not a bool")
    if isinstance(model, int):
        return GraphProfile.from_width(model), f"width {model}"
    if isinstance(model, GraphProfile):
        return model, model.source or "profile"
    from tf_autopar.graph import analyze

    maybe_fail("analysis")
    if isinstance(model, (str, os.PathLike)):
        text = os.fspath(model)
        if os.path.exists(text):
            found = file_profile(os.path.realpath(text), batch if batch_given else None, started)
            if found is None:  # a graph file
                found = analyze(text, batch=batch)
            return found, f"model {text}"
        if not started:
            return workload_profile(text, use_cache), f"workload {text}"
    return analyze(model, batch=batch), f"model {type(model).__name__}"


def workload_profile(name: str, use_cache: bool) -> GraphProfile:
    """A registered model name's profile (graph/named.py) without starting TF here: building the
    model would fix the pools. Analysed once in a child process, then read from the plan cache."""
    from tf_autopar.graph import named

    if named.find(name) is None:
        raise named.unknown(name)
    return child_profile(name, f"workload:{name}:tiny", use_cache, preload=named.modules())

"""Is this argument a model file or a name? One answer for every command and loader."""

from __future__ import annotations

import os

MODEL_SUFFIXES = (".keras", ".pb", ".pbtxt")  # a Keras archive; a GraphDef or SavedModel protobuf, binary or text


def looks_like_model(text: str) -> bool:
    """Whether ``text`` names a model on disk (SavedModel directory, .keras, .pb or .pbtxt file)
    rather than a bundled workload or a registered model name.

    True when the path exists, or when it is written as a path (it contains a directory
    separator, or starts with "." or "~") or ends in a model file's suffix, whether or not it
    exists: a mistyped path must be reported as a missing file, not as an unknown workload
    name. Pure of TensorFlow, so the parents that never import it (bench, validate) can ask.
    """
    return (
        os.path.exists(os.path.expanduser(text))
        or os.sep in text
        or text.startswith((".", "~"))
        or text.endswith(MODEL_SUFFIXES)
    )

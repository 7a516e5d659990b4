"""JSON request bodies to numpy inputs, shared by the FastAPI and the Ray Serve examples.

``{"inputs": {"name": value}}`` (or ``{"inputs": value}`` for a one-input signature); a value is
nested lists (batch first) or a raw tensor ``{"b64": base64 of its bytes, "shape": [...]}`` in the
signature's dtype, C order (an image as JSON numbers takes longer to parse than a small model
takes to run).
"""

from __future__ import annotations

import base64
import binascii
from typing import Any, Mapping

import numpy as np


def encode(array: np.ndarray) -> dict[str, Any]:
    """The raw-tensor form of ``array``."""
    a = np.ascontiguousarray(array)
    return {"b64": base64.b64encode(a.tobytes()).decode(), "shape": list(a.shape)}


def decode_inputs(inputs: Any, specs: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """The signature's inputs from a request's ``inputs``; ValueError naming what is wrong."""
    given = inputs if isinstance(inputs, dict) else ({next(iter(specs)): inputs} if len(specs) == 1 else None)
    if given is None:
        raise ValueError(f"the signature has {len(specs)} inputs ({', '.join(specs)}): send a dict by name")
    missing, unknown = set(specs) - set(given), set(given) - set(specs)
    if missing or unknown:
        raise ValueError(
            f"inputs must be exactly {sorted(specs)}; missing {sorted(missing)}, unknown {sorted(unknown)}"
        )
    try:
        return {k: _array(v, specs[k]) for k, v in given.items()}
    except (TypeError, ValueError, KeyError, binascii.Error) as exc:
        raise ValueError(f"inputs are not arrays of the signature's types: {exc}") from None


def _array(value: Any, dtype: Any) -> np.ndarray:
    if isinstance(value, dict):
        return np.frombuffer(base64.b64decode(value["b64"], validate=True), dtype=dtype).reshape(value["shape"])
    return np.asarray(value, dtype=dtype)

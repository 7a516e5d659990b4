"""matplotlib for the PNG charts (`analyze --plot`, `validate --plot`): an extra, not a dependency.

Nothing else needs it, so ``pip install tf_autopar`` leaves it out and ``pip install
'tf_autopar[plots]'`` brings it; asking for a chart without it is a clear error, raised before
any long run starts.
"""

from __future__ import annotations

from typing import Any

INSTALL = "pip install 'tf_autopar[plots]'"


def require() -> None:
    """ValueError naming the extra when matplotlib is missing (check before a long run)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise ValueError(f"--plot needs matplotlib, which is an extra: {INSTALL}") from None


def pyplot() -> Any:
    """matplotlib.pyplot on the file-only Agg backend (no display needed)."""
    require()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt

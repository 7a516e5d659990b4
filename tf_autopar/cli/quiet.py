"""Keep TensorFlow's C++ start-up lines off a CLI user's terminal (unless -v).

TF_CPP_MIN_LOG_LEVEL=2 hides TensorFlow's INFO and WARNING logs once its logging is set up,
but TensorFlow 2.21 prints the absl banner ("WARNING: All log messages before
absl::InitializeLog() ...") and the oneDNN notice while ``import tensorflow`` loads its
libraries, before any variable is read: 4-6 lines per command. So the first import of
tensorflow runs with file descriptor 2 sent to a temporary file, and every line that is not
such INFO/WARNING noise (errors, Python warnings) is written back to stderr afterwards.
"""

from __future__ import annotations

import importlib.util
import os
import re
import sys
import tempfile
from typing import Any

LEVEL_VAR = "TF_CPP_MIN_LOG_LEVEL"
#: absl INFO/WARNING lines ("I0000 00:00:... port.cc:153] ...") and the banner before them.
NOISE = re.compile(
    rb"^(WARNING: All log messages before absl::InitializeLog\(\) is called are written to STDERR"
    rb"|[IW]\d{4} [\d:.]+ +\d+ [\w./-]+:\d+\] .*"
    rb"|To enable the following instructions: .*)\r?\n?$"
)


def quiet_tensorflow(environ: dict[str, str] | Any = os.environ) -> bool:
    """Quiet TensorFlow's C++ logs in this process and the ones it starts, unless the user set
    TF_CPP_MIN_LOG_LEVEL (their choice wins). True when quieting was armed."""
    if LEVEL_VAR in environ:
        return False
    environ[LEVEL_VAR] = "2"
    if "tensorflow" not in sys.modules and _FilterImport not in sys.meta_path:
        sys.meta_path.insert(0, _FilterImport)  # type: ignore[arg-type]
    return True


def filtered(raw: bytes) -> bytes:
    """``raw`` stderr output without the start-up noise lines."""
    return b"".join(line for line in raw.splitlines(keepends=True) if not NOISE.match(line))


class _FilterImport:
    """Meta-path finder: runs the first ``import tensorflow`` with stderr filtered, then leaves.

    It stays until the import really runs: ``importlib.util.find_spec("tensorflow")`` (a check
    whether TensorFlow is installed) asks the finders too, without executing anything."""

    searching = False

    @classmethod
    def find_spec(cls, name: str, path: Any = None, target: Any = None) -> Any:
        if name != "tensorflow" or cls.searching:
            return None
        cls.searching = True
        try:
            spec = importlib.util.find_spec(name)
        finally:
            cls.searching = False
        if spec is None or spec.loader is None:
            return spec
        original = spec.loader.exec_module

        def exec_module(module: Any) -> None:
            try:
                sys.meta_path.remove(cls)  # type: ignore[arg-type]
            except ValueError:
                pass
            sys.stderr.flush()
            saved = os.dup(2)
            with tempfile.TemporaryFile() as tmp:
                os.dup2(tmp.fileno(), 2)
                try:
                    original(module)
                finally:
                    sys.stderr.flush()
                    os.dup2(saved, 2)
                    os.close(saved)
                    tmp.seek(0)
                    kept = filtered(tmp.read())
                    if kept:
                        os.write(2, kept)

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec

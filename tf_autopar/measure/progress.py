"""A small progress bar on stderr (no dependency): a redrawn bar on a terminal, one line
per step otherwise (logs and CI keep a readable record). ETA from measured wall time."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    def __init__(self, total: int, stream: TextIO | None = None, enabled: bool = True, width: int = 28) -> None:
        self.total = max(1, total)
        self.done = 0
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled
        self.width = width
        self.start = time.monotonic()
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())

    def set_total(self, total: int) -> None:
        self.total = max(self.done, total, 1)

    def eta_s(self) -> float | None:
        if self.done == 0:
            return None
        elapsed = time.monotonic() - self.start
        return elapsed / self.done * (self.total - self.done)

    def update(self, label: str, advance: int = 1) -> None:
        self.done += advance
        self.show(label)

    def show(self, label: str) -> None:
        if not self.enabled:
            return
        frac = min(1.0, self.done / self.total)
        filled = int(round(frac * self.width))
        eta = self.eta_s()
        eta_text = f" eta {_fmt_s(eta)}" if eta is not None else ""
        line = f"[{'#' * filled}{'.' * (self.width - filled)}] {self.done}/{self.total}{eta_text} {label}"
        if self.tty:
            self.stream.write("\r\033[K" + line)
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self.enabled and self.tty:
            self.stream.write("\n")
            self.stream.flush()


def _fmt_s(s: float) -> str:
    s = int(round(s))
    return f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"

"""Text in and out: numbers read from the host and tf_autopar's files (ASCII digits only), and
the plain-text tables the reports print.

``str.isdigit()`` accepts '²' and '٣', which ``int()`` then rejects or reads; a garbled
/proc or sysfs line must be skipped with a warning, never raise from a parser.
"""

from __future__ import annotations

from typing import Sequence


def is_uint(text: str) -> bool:
    """True for a non-empty run of ASCII digits 0-9 (no sign, space, underscore or other script)."""
    return text.isascii() and text.isdigit()


MAX_DIGITS = 4000  # int() refuses longer digit strings (Python's conversion limit) with a ValueError


def uint_or_none(text: str) -> int | None:
    """The value of an ASCII digit string (see is_uint), else None (also beyond MAX_DIGITS digits)."""
    return int(text) if len(text) <= MAX_DIGITS and is_uint(text) else None


def shown(value: object, limit: int = 40) -> str:
    """``repr(value)``, cut to ``limit`` characters: a warning names the value, never prints 5,000 digits."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def table(header: Sequence[object], rows: Sequence[Sequence[object]], rule: bool = True) -> list[str]:
    """Left-aligned columns two spaces apart, a dashed rule under the header (unless ``rule`` is
    False: an ls-style listing); trailing spaces cut."""
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]

    def line(cells: Sequence[object]) -> str:
        return "  ".join(str(c).ljust(w) for c, w in zip(cells, widths)).rstrip()

    return [line(header), *([line(["-" * w for w in widths])] if rule else []), *(line(r) for r in rows)]

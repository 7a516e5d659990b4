"""Numbers in text read from the host and from tf_autopar's files: ASCII digits only.

``str.isdigit()`` accepts '²' and '٣', which ``int()`` then rejects or reads; a garbled
/proc or sysfs line must be skipped with a warning, never raise from a parser.
"""
from __future__ import annotations


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

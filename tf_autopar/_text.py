"""Numbers in text read from the host and from tf_autopar's files: ASCII digits only.

``str.isdigit()`` accepts '²' and '٣', which ``int()`` then rejects or reads; a garbled
/proc or sysfs line must be skipped with a warning, never raise from a parser.
"""
from __future__ import annotations


def is_uint(text: str) -> bool:
    """True for a non-empty run of ASCII digits 0-9 (no sign, space, underscore or other script)."""
    return text.isascii() and text.isdigit()


def uint_or_none(text: str) -> int | None:
    """The value of an ASCII digit string (see is_uint), else None."""
    return int(text) if is_uint(text) else None

"""Short stable keys for caches and lease groups.

zlib's checksums, not hashlib: enable() runs on every program start and importing hashlib
(OpenSSL) alone costs several milliseconds. These keys name cache entries; they guard
nothing, so two 32-bit checksums and the length are enough.
"""

from __future__ import annotations

import zlib


def stable_key(text: str | bytes) -> str:
    data = text.encode() if isinstance(text, str) else text
    return f"{zlib.crc32(data):08x}{zlib.adler32(data):08x}-{len(data)}"

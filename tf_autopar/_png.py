"""A small RGB canvas written as a PNG with zlib alone: charts without matplotlib.

``validate`` draws its chart on every quick start, where the plots extra (matplotlib and its
dependencies) is not installed: rectangles, lines and text in a 5x8 bitmap font (the classic
5x7 glyphs of character LCDs, ASCII 32-126, scaled by whole pixels) are all a bar chart needs.
"""

from __future__ import annotations

import struct
import zlib

Colour = tuple[int, int, int]

# Each glyph: five columns, bit 0 the top row (8 rows, the last for descenders).
_FONT_HEX = (
    "0000000000"
    "00005f0000"
    "0007000700"
    "147f147f14"
    "242a7f2a12"
    "2313086462"
    "3649552250"
    "0005030000"
    "001c224100"
    "0041221c00"
    "082a1c2a08"
    "08083e0808"
    "0050300000"
    "0808080808"
    "0060600000"
    "2010080402"
    "3e5149453e"
    "00427f4000"
    "4261514946"
    "2141454b31"
    "1814127f10"
    "2745454539"
    "3c4a494930"
    "0171090503"
    "3649494936"
    "064949291e"
    "0036360000"
    "0056360000"
    "0008142241"
    "1414141414"
    "4122140800"
    "0201510906"
    "324979413e"
    "7e1111117e"
    "7f49494936"
    "3e41414122"
    "7f4141221c"
    "7f49494941"
    "7f09090101"
    "3e41415132"
    "7f0808087f"
    "00417f4100"
    "2040413f01"
    "7f08142241"
    "7f40404040"
    "7f0204027f"
    "7f0408107f"
    "3e4141413e"
    "7f09090906"
    "3e4151215e"
    "7f09192946"
    "4649494931"
    "01017f0101"
    "3f4040403f"
    "1f2040201f"
    "7f2018207f"
    "6314081463"
    "0304780403"
    "6151494543"
    "007f414100"
    "0204081020"
    "0041417f00"
    "0402010204"
    "4040404040"
    "0001020400"
    "2054545478"
    "7f48444438"
    "3844444420"
    "384444487f"
    "3854545418"
    "087e090102"
    "0c5252523e"
    "7f08040478"
    "00447d4000"
    "2040443d00"
    "007f102844"
    "00417f4000"
    "7c04180478"
    "7c08040478"
    "3844444438"
    "7c14141408"
    "081414187c"
    "7c08040408"
    "4854545420"
    "043f444020"
    "3c4040207c"
    "1c2040201c"
    "3c4030403c"
    "4428102844"
    "0c5050503c"
    "4464544c44"
    "0008364100"
    "00007f0000"
    "0041360800"
    "08082a1c08"
)
FONT: dict[str, bytes] = {chr(32 + i // 10): bytes.fromhex(_FONT_HEX[i : i + 10]) for i in range(0, len(_FONT_HEX), 10)}
GLYPH_W, GLYPH_H = 6, 8  # a glyph's five columns and one of space; eight rows


class Canvas:
    """``width`` x ``height`` RGB pixels, white at first; drawing clips at the edges."""

    def __init__(self, width: int, height: int, background: Colour = (255, 255, 255)) -> None:
        if width < 1 or height < 1:
            raise ValueError(f"a canvas needs a positive size, got {width}x{height}")
        self.width, self.height = width, height
        self.rows = [bytearray(bytes(background) * width) for _ in range(height)]

    def rect(self, x0: int, y0: int, x1: int, y1: int, colour: Colour) -> None:
        """Fill [x0, x1) x [y0, y1)."""
        x0, x1 = max(0, min(x0, x1)), min(self.width, max(x0, x1))
        y0, y1 = max(0, min(y0, y1)), min(self.height, max(y0, y1))
        if x0 >= x1:
            return
        span = bytes(colour) * (x1 - x0)
        for y in range(y0, y1):
            self.rows[y][3 * x0 : 3 * x1] = span

    def hline(self, x0: int, x1: int, y: int, colour: Colour, dashed: bool = False) -> None:
        if not dashed:
            self.rect(x0, y, x1, y + 1, colour)
            return
        for x in range(x0, x1, 6):
            self.rect(x, y, min(x + 3, x1), y + 1, colour)

    def vline(self, x: int, y0: int, y1: int, colour: Colour, dashed: bool = False) -> None:
        if not dashed:
            self.rect(x, y0, x + 1, y1, colour)
            return
        for y in range(min(y0, y1), max(y0, y1), 6):
            self.rect(x, y, x + 1, min(y + 3, max(y0, y1)), colour)

    def text(self, x: int, y: int, text: str, colour: Colour = (0, 0, 0), scale: int = 1) -> int:
        """Draw ``text`` with its top-left corner at (x, y); characters outside ASCII 32-126 as '?'.
        Returns the x just past it."""
        for ch in text:
            glyph = FONT.get(ch, FONT["?"])
            for col, bits in enumerate(glyph):
                for row in range(GLYPH_H):
                    if bits >> row & 1:
                        self.rect(
                            x + col * scale, y + row * scale, x + (col + 1) * scale, y + (row + 1) * scale, colour
                        )
            x += GLYPH_W * scale
        return x

    def png(self) -> bytes:
        """The canvas as a PNG file (8-bit RGB, no interlace, filter 0 on every line)."""
        raw = b"".join(b"\0" + bytes(r) for r in self.rows)
        header = struct.pack(">IIBBBBB", self.width, self.height, 8, 2, 0, 0, 0)
        return (
            b"\x89PNG\r\n\x1a\n"
            + _chunk(b"IHDR", header)
            + _chunk(b"IDAT", zlib.compress(raw, 9))
            + _chunk(b"IEND", b"")
        )


def text_width(text: str, scale: int = 1) -> int:
    return len(text) * GLYPH_W * scale


def hex_colour(text: str) -> Colour:
    """'#4c72b0' -> (76, 114, 176)."""
    h = text.lstrip("#")
    if len(h) != 6:
        raise ValueError(f"a colour is #RRGGBB, got {text!r}")
    return int(h[0:2], 16), int(h[2:4], 16), int(h[4:6], 16)


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

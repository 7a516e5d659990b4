"""``validate``'s chart: per row, speed relative to TensorFlow's default of the published
recommendations, of what the one line delivers and of the optimum, as a PNG.

Drawn on tf_autopar/_png.py's canvas (zlib only), so every quick start writes it without the
plots extra. The numbers are the summary's ``vs_default`` (results.py): the default's time over
each configuration's, medians of per-round paired ratios; 1.00 is TensorFlow's default.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from tf_autopar._files import write_bytes_atomic
from tf_autopar._png import GLYPH_H, Canvas, hex_colour, text_width
from tf_autopar.planning import baselines
from tf_autopar.validation.report import delivers_text, optimum_text
from tf_autopar.validation.results import DEFAULT

DELIVERS_COLOUR = "#dd8452"  # what the one line delivers
OPTIMUM_COLOUR = "#8c8c8c"
INK = (0, 0, 0)
GREY = (110, 110, 110)
WIDTH = 1000
LEFT = 190  # the rows' names
RIGHT = 230  # the bars' labels past the longest bar
BAR = 15
GAP = 3
S = 2  # the font's scale for names and numbers


def series() -> list[tuple[str, str, str]]:
    """(key in vs_default, legend label, colour): the published recommendations (every baseline
    but the default itself), what the one line delivers, the optimum."""
    recs = [(b.name, b.name, b.colour) for b in baselines.BASELINES if b.name != DEFAULT]
    return [
        *recs,
        ("delivers", "the one line (enable() / plan)", DELIVERS_COLOUR),
        ("optimum", "optimum", OPTIMUM_COLOUR),
    ]


def _rows(doc: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [r for r in doc["rows"] if (r.get("summary") or {}).get("vs_default")]


def render(doc: Mapping[str, Any]) -> bytes:
    """The chart of ``doc`` as PNG bytes (a note in place of bars when no row has a default time)."""
    rows = _rows(doc)
    kinds = series()
    group = len(kinds) * (BAR + GAP) + 16
    top = 92
    height = top + max(1, len(rows)) * group + 44
    c = Canvas(WIDTH, height)
    c.text(10, 8, "tf-autopar validate: speed relative to TensorFlow's default", INK, S)
    opts = doc.get("options", {})
    c.text(
        10,
        30,
        f"{doc.get('processor', 'unknown processor')}, {doc.get('host', {}).get('logical_cpus', '?')} logical CPUs;"
        f" {opts.get('rounds')} rounds; bars from the default's line: median of per-round paired ratios (default time / its time), log scale",
        GREY,
    )
    x = 10
    for _, label, colour in kinds:
        c.rect(x, 48, x + 14, 62, hex_colour(colour))
        x = c.text(x + 18, 48, label, INK, S) + 16
    values = [(r["summary"]["vs_default"].get(k) or {}).get("value") for r in rows for k, _, _ in kinds]
    shown = [v for v in values if v is not None and math.isfinite(v) and v > 0]
    lo, hi = _bounds(shown)
    x0, x1 = LEFT, WIDTH - RIGHT

    def at(v: float) -> int:  # a log scale: 0.5x and 2x as far from the default's line
        v = min(max(v, lo), hi)
        return x0 + int(round((math.log2(v) - math.log2(lo)) / (math.log2(hi) - math.log2(lo)) * (x1 - x0)))

    bottom = top + max(1, len(rows)) * group
    t = lo
    while t <= hi * 1.0001:
        c.vline(at(t), top - 6, bottom, (225, 225, 225))
        label = f"{t:g}x"
        c.text(at(t) - text_width(label) // 2, bottom + 6, label, GREY)
        t *= 2
    c.vline(at(1.0), top - 6, bottom, INK, dashed=True)
    if not rows:
        c.text(x0, top + 10, "no row has TensorFlow's default measured", INK, S)
    for i, r in enumerate(rows):
        y = top + i * group + 8
        name = r["workload"].rstrip("/").rsplit("/", 1)[-1]
        c.text(10, y, name[:15], INK, S)
        c.text(10, y + 2 * GLYPH_H + 4, f"{r['mode']} b{r['batch']}", GREY, S)
        vd = r["summary"]["vs_default"]
        for k, (key, _, colour) in enumerate(kinds):
            by = y + k * (BAR + GAP)
            v = (vd.get(key) or {}).get("value")
            if v is None or not math.isfinite(v):
                c.text(x0 + 4, by + 1, "not measured", GREY)
                continue
            c.rect(at(1.0), by, at(v) + (1 if v >= 1 else 0), by + BAR, hex_colour(colour))
            label = f"{v:.2f}x"
            if key == "delivers":
                label += "  " + delivers_text(r, r["summary"])
            elif key == "optimum":
                label += "  " + optimum_text(r, r["summary"])
            end = max(at(v), at(1.0))
            c.rect(end + 2, by + 2, end + 8 + text_width(label), by + BAR - 1, (255, 255, 255))
            c.text(end + 5, by + 4, label, INK)
    note = "1 = TF's default"
    c.text(at(1.0) - text_width(note) // 2, top - 16, note, INK)
    geo = doc.get("geomean", {})
    if geo.get("delivers_vs_default") is not None:
        c.text(
            10,
            bottom + 22,
            f"geomean: the one line {geo['delivers_vs_default']:.2f}x TF's default,"
            + (
                f" {geo['delivers_vs_optimum']:.2f} of the optimum"
                if geo.get("delivers_vs_optimum") is not None
                else ""
            ),
            INK,
            S,
        )
    return c.png()


def _bounds(values: list[float]) -> tuple[float, float]:
    """The axis's ends, powers of two around the values and 1 (the default): at least 0.5x-2x."""
    low = min([0.5, *values])
    high = max([2.0, *values])
    return 2.0 ** math.floor(math.log2(low)), 2.0 ** math.ceil(math.log2(high))


def write(doc: Mapping[str, Any], path: str) -> None:
    """Write the chart to ``path`` atomically (write, then rename)."""
    write_bytes_atomic(path, render(doc))

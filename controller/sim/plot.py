"""PNG line charts with nothing but zlib and struct (no plotting dependency).

`line_chart` draws axes with tick labels, up to eight series in distinct
colours, a title and a legend, in a tiny 3x5 bitmap font (upper-case
letters, digits and a few signs; other characters are drawn as spaces).
"""

from __future__ import annotations

import itertools
import struct
import zlib
from collections.abc import Sequence

__all__ = ["COLOURS", "line_chart", "png_bytes"]

Colour = tuple[int, int, int]
COLOURS: tuple[Colour, ...] = (
    (31, 119, 180), (214, 39, 40), (44, 160, 44), (255, 127, 14),
    (148, 103, 189), (140, 86, 75), (227, 119, 194), (23, 190, 207),
)  # fmt: skip
_BLACK: Colour = (0, 0, 0)
_GREY: Colour = (215, 215, 215)

_FONT = {
    "0": "111101101101111", "1": "010110010010111", "2": "111001111100111",
    "3": "111001111001111", "4": "101101111001001", "5": "111100111001111",
    "6": "111100111101111", "7": "111001010010010", "8": "111101111101111",
    "9": "111101111001111", ".": "000000000000010", "%": "101001010100101",
    "-": "000000111000000", "/": "001001010100100", ":": "000010000010000",
    "(": "010100100100010", ")": "010001001001010", "=": "000111000111000",
    "A": "010101111101101", "B": "110101110101110", "C": "111100100100111",
    "D": "110101101101110", "E": "111100110100111", "F": "111100110100100",
    "G": "111100101101111", "H": "101101111101101", "I": "111010010010111",
    "J": "001001001101111", "K": "101101110101101", "L": "100100100100111",
    "M": "101111111101101", "N": "110101101101101", "O": "111101101101111",
    "P": "111101111100100", "Q": "111101101111001", "R": "110101110101101",
    "S": "111100111001111", "T": "111010010010010", "U": "101101101101111",
    "V": "101101101101010", "W": "101101111111101", "X": "101101010101101",
    "Y": "101101010010010", "Z": "111001010100111",
}  # fmt: skip


class _Canvas:
    def __init__(self, width: int, height: int) -> None:
        self.width = width
        self.height = height
        self.pixels = bytearray(b"\xff" * (width * height * 3))

    def dot(self, x: int, y: int, c: Colour) -> None:
        if 0 <= x < self.width and 0 <= y < self.height:
            i = (y * self.width + x) * 3
            self.pixels[i : i + 3] = bytes(c)

    def line(self, x0: int, y0: int, x1: int, y1: int, c: Colour, thick: int = 1) -> None:
        steps = max(abs(x1 - x0), abs(y1 - y0), 1)
        for s in range(steps + 1):
            x = x0 + (x1 - x0) * s // steps
            y = y0 + (y1 - y0) * s // steps
            for d in range(thick):
                self.dot(x, y + d, c)

    def text(self, x: int, y: int, s: str, c: Colour = _BLACK, scale: int = 2) -> None:
        for ch in s.upper():
            glyph = _FONT.get(ch)
            if glyph:
                for row in range(5):
                    for col in range(3):
                        if glyph[row * 3 + col] == "1":
                            for dx in range(scale):
                                for dy in range(scale):
                                    self.dot(x + col * scale + dx, y + row * scale + dy, c)
            x += 4 * scale


def text_width(s: str, scale: int = 2) -> int:
    """Pixels `s` takes in the bitmap font."""
    return len(s) * 4 * scale


def png_bytes(width: int, height: int, rgb: bytes) -> bytes:
    """An 8-bit RGB PNG of `rgb` (rows top to bottom)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data))
            + kind
            + data
            + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
        )

    stride = width * 3
    raw = b"".join(b"\x00" + rgb[y * stride : (y + 1) * stride] for y in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(raw, 9))
        + chunk(b"IEND", b"")
    )


def _label(v: float) -> str:
    if abs(v) >= 1000:
        return f"{v:.3g}" if abs(v) < 1e4 else f"{v:.2g}".replace("e+0", "E").replace("e+", "E")
    return f"{v:g}" if v == int(v) else f"{v:.2f}".rstrip("0")


def line_chart(
    series: Sequence[tuple[str, Sequence[tuple[float, float]]]],
    *,
    title: str,
    x_label: str,
    y_label: str,
    width: int = 720,
    height: int = 420,
    y_range: tuple[float, float] | None = None,
) -> bytes:
    """A PNG line chart of named (x, y) series."""
    c = _Canvas(width, height)
    left, right, top, bottom = 70, 20, 40, height - 70
    plot_right = width - right
    xs = [x for _, pts in series for x, _ in pts] or [0.0, 1.0]
    ys = [y for _, pts in series for _, y in pts] or [0.0, 1.0]
    x0, x1 = min(xs), max(xs)
    y0, y1 = y_range if y_range else (min(0.0, min(ys)), max(ys))
    if x1 <= x0:
        x1 = x0 + 1
    if y1 <= y0:
        y1 = y0 + 1

    def px(x: float) -> int:
        return left + round((x - x0) / (x1 - x0) * (plot_right - left))

    def py(y: float) -> int:
        return bottom - round((y - y0) / (y1 - y0) * (bottom - top))

    for i in range(6):
        gy = y0 + (y1 - y0) * i / 5
        c.line(left, py(gy), plot_right, py(gy), _GREY)
        lab = _label(gy)
        c.text(left - 6 - text_width(lab), py(gy) - 5, lab)
        gx = x0 + (x1 - x0) * i / 5
        c.line(px(gx), bottom, px(gx), bottom + 4, _BLACK)
        lab = _label(gx)
        c.text(px(gx) - text_width(lab) // 2, bottom + 8, lab)
    c.line(left, top, left, bottom, _BLACK)
    c.line(left, bottom, plot_right, bottom, _BLACK)
    for k, (_, pts) in enumerate(series):
        colour = COLOURS[k % len(COLOURS)]
        for (ax, ay), (bx, by) in itertools.pairwise(pts):
            c.line(px(ax), py(ay), px(bx), py(by), colour, thick=2)
    c.text(left, 12, title)
    c.text((left + plot_right - text_width(x_label)) // 2, bottom + 26, x_label)
    c.text(4, top - 16, y_label)
    lx = left
    for k, (name, _) in enumerate(series):
        colour = COLOURS[k % len(COLOURS)]
        for d in range(10):
            c.line(lx, height - 18 + d, lx + 10, height - 18 + d, colour)
        c.text(lx + 14, height - 18, name)
        lx += 14 + text_width(name) + 16
    return png_bytes(width, height, bytes(c.pixels))

"""A small real TrueType font with a few hanzi, for tests that need a CJK font to appear (matplotlib's font
list, the web page's font check) without installing one on the machine. Each hanzi gets its own shape, so that
two hanzi drawn in it differ, as in a real font; everything else is the missing-glyph box."""

from __future__ import annotations

from pathlib import Path

# hanzi -> the corners of its glyph (a polygon in font units of a 1000-unit em)
SHAPES = {"中": ((100, 0), (100, 800), (900, 800), (900, 0)), "国": ((100, 0), (500, 800), (900, 0)),
          "你": ((100, 0), (100, 800), (500, 400)), "好": ((500, 0), (900, 400), (500, 800), (100, 400))}


def _glyph(corners):
    from fontTools.pens.ttGlyphPen import TTGlyphPen

    pen = TTGlyphPen(None)
    pen.moveTo(corners[0])
    for corner in corners[1:]:
        pen.lineTo(corner)
    pen.closePath()
    return pen.glyph()


def cjk_font_bytes(family: str) -> bytes:
    """The font file's bytes: family ``family``, style Regular, with the hanzi of :data:`SHAPES`."""
    import io

    from fontTools.fontBuilder import FontBuilder

    names = {char: f"uni{ord(char):04X}" for char in SHAPES}
    glyphs = {".notdef": _glyph(((100, 0), (100, 700), (500, 700), (500, 0)))}
    glyphs.update({names[char]: _glyph(corners) for char, corners in SHAPES.items()})
    builder = FontBuilder(1000, isTTF=True)
    builder.setupGlyphOrder(list(glyphs))
    builder.setupCharacterMap({ord(char): name for char, name in names.items()})
    builder.setupGlyf(glyphs)
    builder.setupHorizontalMetrics({name: (1000, 100) for name in glyphs})
    builder.setupHorizontalHeader(ascent=900, descent=-100)
    builder.setupNameTable({"familyName": family, "styleName": "Regular"})
    builder.setupOS2()
    builder.setupPost()
    out = io.BytesIO()
    builder.save(out)
    return out.getvalue()


def write_cjk_font(path: Path, family: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(cjk_font_bytes(family))
    return path

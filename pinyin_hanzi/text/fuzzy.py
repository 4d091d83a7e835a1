"""Fuzzy pinyin: pairs of initials or finals (``z-zh``, ``an-ang``, ...) that widen what a syllable's key
allows, for users whose speech does not tell them apart. Named by the ``fuzzy`` parse option of
:func:`pinyin_hanzi.text.typed_input.parse_pieces`, applied after segmentation, so a variant never changes how a
run is split.

Pairs are symmetric and each works on its own: with n-l and r-l on, typed l allows n and r, typed n
allows l but not r. Initial pairs compare the initial (y and w count as initials); final pairs compare the
whole spelled final after it, so an-ang pairs ban/bang, an/ang and yan/yang but not jian/jiang (that is
ian-iang) nor guan/guang (uan-uang). A variant counts only where it is a real syllable. Prefixes widen by
the initial pairs (z* with z-zh also allows zh syllables, zho* also zo...); final pairs change nothing
there, since a prefix already stands for every final it begins.
"""

from __future__ import annotations

from typing import Iterable

from pinyin_hanzi.errors import DataError
from pinyin_hanzi.text.pieces import PREFIX, RETROFLEX, Option, begun_by, is_literal_key, split_key
from pinyin_hanzi.text.pinyin import syllables

_INITIAL, _FINAL = "initial", "final"
FUZZY_PAIRS: dict[str, tuple[str, str, str]] = {  # name -> (which part of the syllable, one, the other)
    "z-zh": (_INITIAL, "z", "zh"), "c-ch": (_INITIAL, "c", "ch"), "s-sh": (_INITIAL, "s", "sh"),
    "n-l": (_INITIAL, "n", "l"), "r-l": (_INITIAL, "r", "l"), "f-h": (_INITIAL, "f", "h"),
    "an-ang": (_FINAL, "an", "ang"), "en-eng": (_FINAL, "en", "eng"), "in-ing": (_FINAL, "in", "ing"),
    "ian-iang": (_FINAL, "ian", "iang"), "uan-uang": (_FINAL, "uan", "uang"),
}
_INITIALS = RETROFLEX + tuple("bpmfdtnlgkhjqxrzcsyw")


def fuzzy_pairs(names: Iterable[str] | str | None) -> frozenset[str]:
    """``names`` checked against :data:`FUZZY_PAIRS` (a single string is one name; None is none).
    Raises :class:`DataError` naming the unknown pair and listing the known ones."""
    chosen = frozenset() if names is None else frozenset([names] if isinstance(names, str) else names)
    unknown = sorted(chosen - FUZZY_PAIRS.keys(), key=str)
    if unknown:
        raise DataError(f"unknown fuzzy pinyin pair {unknown[0]!r}; known: {', '.join(FUZZY_PAIRS)}")
    return chosen


def _initial(letters: str) -> str:
    return next((initial for initial in _INITIALS if letters.startswith(initial)), "")


def _swapped(part: str, which: str, fuzzy: frozenset[str]) -> list[str]:
    """``part`` (an initial or a final) and what the chosen pairs of that kind pair it with."""
    found = [part]
    for name in sorted(fuzzy):
        kind, one, other = FUZZY_PAIRS[name]
        if kind == which and part in (one, other):
            found.append(other if part == one else one)
    return found


def _widen(key: str, fuzzy: frozenset[str]) -> str:
    """A syllable or prefix key widened to its fuzzy variants (typed first): ``zi`` -> ``zi|zhi``."""
    base, tone = split_key(key)
    is_prefix = base.endswith(PREFIX)
    letters = base[:-1] if is_prefix else base
    initial = _initial(letters)
    initials = _swapped(initial, _INITIAL, fuzzy) if initial else [""]
    if is_prefix:
        variants = [other + letters[len(initial):] + PREFIX for other in initials]
        variants = [v for v in variants if v == base or begun_by(v[:-1])]
    else:
        variants = [other + final for other in initials for final in _swapped(letters[len(initial):], _FINAL, fuzzy)]
        variants = [v for v in variants if v == base or v in syllables()]
    return "|".join(dict.fromkeys(v + tone for v in variants))


def widened(option: Option, fuzzy: frozenset[str]) -> Option:
    """``option`` with each syllable or prefix key widened by the ``fuzzy`` pairs; literal keys stay."""
    return tuple((token, key if is_literal_key(key) else _widen(key, fuzzy)) for token, key in option)

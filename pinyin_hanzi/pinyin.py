"""Pinyin text handling: hanzi -> aligned toneless syllables, the syllable -> characters table, and the
parsing of what a user types.

Conventions used across the project:
- a *syllable* is toneless lower-case pinyin with ü written ``v`` (``lv``, ``nv``, ``zhong``);
- every target character has exactly one source *token*: its syllable if it is a hanzi, otherwise the
  character itself (punctuation, digits, Latin letters pass through unchanged on both sides).
"""

from __future__ import annotations

import functools
import re
import unicodedata

from pypinyin import Style, lazy_pinyin
from pypinyin.contrib.tone_convert import to_normal
from pypinyin.pinyin_dict import pinyin_dict

# CJK Unified Ideographs and their extensions (the characters pypinyin has readings for).
_HANZI_RANGES = (
    (0x3400, 0x4DBF),
    (0x4E00, 0x9FFF),
    (0xF900, 0xFAFF),
    (0x20000, 0x2FA1F),
)


def is_hanzi(char: str) -> bool:
    code = ord(char)
    return any(low <= code <= high for low, high in _HANZI_RANGES)


def ascii_letters_digits(text: str) -> str:
    """Full-width letters and digits (ＡＢｃ１２) as ASCII: NFKC on those alone, so that Chinese
    punctuation such as ，and ！ is kept as typed."""
    return "".join(
        unicodedata.normalize("NFKC", char)
        if 0xFF10 <= ord(char) <= 0xFF19 or 0xFF21 <= ord(char) <= 0xFF3A or 0xFF41 <= ord(char) <= 0xFF5A
        else char
        for char in text
    )


def normalize_text(text: str) -> str:
    """Corpus text as the model sees it: full-width letters and digits become ASCII; whitespace and
    control/format characters are removed, since an IME types neither."""
    return "".join(
        char for char in ascii_letters_digits(text)
        if not char.isspace() and unicodedata.category(char) not in ("Cc", "Cf", "Cs", "Co", "Cn")
    )


def _toneless(reading: str) -> str:
    return to_normal(reading, v_to_u=False).lower()


@functools.lru_cache(maxsize=1)
def syllable_table() -> dict[str, tuple[str, ...]]:
    """Toneless syllable -> every character with that reading (any tone), from pypinyin's per-character
    tables. Heteronyms count under each of their readings."""
    table: dict[str, list[str]] = {}
    for code, readings in pinyin_dict.items():
        char = chr(code)
        for reading in readings.split(","):
            syllable = _toneless(reading)
            if syllable.isascii() and syllable.isalpha():
                table.setdefault(syllable, []).append(char)
    return {syllable: tuple(chars) for syllable, chars in table.items()}


@functools.lru_cache(maxsize=1)
def syllables() -> frozenset[str]:
    return frozenset(syllable_table())


@functools.lru_cache(maxsize=1)
def readings() -> dict[str, frozenset[str]]:
    """Character -> its toneless syllables (the inverse of :func:`syllable_table`)."""
    inverse: dict[str, set[str]] = {}
    for syllable, chars in syllable_table().items():
        for char in chars:
            inverse.setdefault(char, set()).add(syllable)
    return {char: frozenset(found) for char, found in inverse.items()}


def _errors_as_characters(text: str) -> list[str]:
    return list(text)


def hanzi_to_tokens(text: str | list[str]) -> list[str] | None:
    """The aligned source tokens of a (normalised) text: one per character, a toneless syllable for each
    hanzi and the character itself for anything else. ``text`` may be a list of words (a known word
    segmentation helps pypinyin read polyphones). Returns None if a hanzi has no reading."""
    chars = "".join(text) if isinstance(text, list) else text
    tokens = lazy_pinyin(text, style=Style.NORMAL, v_to_u=False, errors=_errors_as_characters)
    if len(tokens) != len(chars):
        return None
    for char, token in zip(chars, tokens):
        if is_hanzi(char) and (token == char or token not in syllables()):
            return None
    return tokens


_TONE_DIGIT = re.compile(r"^([a-zv]+)[1-5]$")


def _segment_letters(run: str) -> list[str] | None:
    """Split a run of letters into syllables, preferring the fewest syllables (so ``xian`` stays one);
    None if no split exists. A stop-gap until model-scored segmentation."""
    best: list[list[str] | None] = [None] * (len(run) + 1)
    best[0] = []
    for end in range(1, len(run) + 1):
        for start in range(max(0, end - 6), end):
            prefix = best[start]
            if prefix is not None and run[start:end] in syllables():
                candidate = prefix + [run[start:end]]
                if best[end] is None or len(candidate) < len(best[end]):
                    best[end] = candidate
    return best[len(run)]


def parse_pinyin(text: str) -> list[str]:
    """Tokens of a line a user typed: syllables separated by spaces or apostrophes (``ni hao``, ``xi'an``),
    with optional tone digits (ignored for now), ``ü``/``u:`` for ``v``; a letter run that is not one
    syllable is split into syllables if it can be (``nihao``); anything else (punctuation, digits, hanzi,
    Latin words that are not pinyin) passes through one character per token."""
    text = ascii_letters_digits(text)
    tokens: list[str] = []
    for piece in re.split(r"[\s']+", text):
        if not piece:
            continue
        for run in re.findall(r"[A-Za-zÜüVv:]+[1-5]?|[^A-Za-zÜü:]", piece):
            word = run.lower().replace("ü", "v").replace("u:", "v")
            match = _TONE_DIGIT.match(word)
            if match:
                word = match.group(1)
            if word in syllables():
                tokens.append(word)
                continue
            split = _segment_letters(word) if word.isalpha() else None
            tokens.extend(split if split else list(run))
    return tokens

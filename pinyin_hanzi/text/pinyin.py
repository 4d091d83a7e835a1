"""Syllables and readings: hanzi -> aligned toneless syllables, the syllable -> characters tables (toneless
and toned), and corpus text normalisation. What a user types is parsed in :mod:`pinyin_hanzi.text.typed_input`.

Conventions used across the project:
- a *syllable* is toneless lower-case pinyin with ü written ``v`` (``lv``, ``nv``, ``zhong``);
- every target character has exactly one source *token*: its syllable if it is a hanzi, otherwise the
  character itself (punctuation, digits, Latin letters pass through unchanged on both sides).
"""

from __future__ import annotations

import contextlib
import functools
import re
import unicodedata

from pypinyin import Style, load_phrases_dict
from pypinyin.constants import PHRASES_DICT, PINYIN_DICT, RE_HANS
from pypinyin.contrib.tone_convert import to_normal, to_tone3
from pypinyin.converter import UltimateConverter
from pypinyin.core import Pinyin
from pypinyin.phrases_dict import phrases_dict
from pypinyin.pinyin_dict import pinyin_dict
from pypinyin.seg import mmseg, simpleseg

# A clause ends after one of these (training examples are clauses; long input is cut after them).
CLAUSE_PUNCTUATION = "。！？；，、：!?;,"

# CJK Unified Ideographs and their extensions (the characters pypinyin has readings for).
_HANZI_RANGES = (
    (0x3400, 0x4DBF),
    (0x4E00, 0x9FFF),
    (0xF900, 0xFAFF),
    (0x20000, 0x2FA1F),
)


# The same ranges as a regular-expression character class body.
HANZI_CLASS = "".join(f"{chr(low)}-{chr(high)}" for low, high in _HANZI_RANGES)


def is_hanzi(char: str) -> bool:
    # The ranges of _HANZI_RANGES written out: called for every character of every corpus line.
    code = ord(char)
    return 0x4E00 <= code <= 0x9FFF or 0x3400 <= code <= 0x4DBF or 0xF900 <= code <= 0xFAFF or 0x20000 <= code <= 0x2FA1F


def ascii_letters_digits(text: str) -> str:
    """Full-width letters and digits (ＡＢｃ１２) as ASCII: NFKC on those alone, so that Chinese
    punctuation such as ，and ！ is kept as typed."""
    return "".join(
        unicodedata.normalize("NFKC", char)
        if 0xFF10 <= ord(char) <= 0xFF19 or 0xFF21 <= ord(char) <= 0xFF3A or 0xFF41 <= ord(char) <= 0xFF5A
        else char
        for char in text
    )


# Full-width letters and digits (see ascii_letters_digits).
_FULL_WIDTH = re.compile("[\uff10-\uff19\uff21-\uff3a\uff41-\uff5a]")


def normalize_text(text: str) -> str:
    """Corpus text as the model sees it: full-width letters and digits become ASCII; whitespace and
    control/format characters are removed, since an IME types neither."""
    # Most lines have none of them: printable text (no control, format, private-use, unassigned or separator
    # character but the ASCII space) without space or full-width letters is returned in one pass, not per character.
    if text.isprintable() and " " not in text and not _FULL_WIDTH.search(text):
        return text
    return "".join(
        char for char in ascii_letters_digits(text)
        if not char.isspace() and unicodedata.category(char) not in ("Cc", "Cf", "Cs", "Co", "Cn")
    )


@functools.lru_cache(maxsize=8192)  # pypinyin's tables repeat some 1.6k readings hundreds of thousands of times
def toneless(reading: str) -> str:
    """A tone-marked reading as a syllable: ``lǜ`` -> ``lv``."""
    return to_normal(reading, v_to_u=False).lower()


@functools.lru_cache(maxsize=8192)  # as toneless: each distinct reading converted once
def _toned(reading: str) -> str:
    """A tone-marked reading as a toned syllable, neutral tone 5: ``lǜ`` -> ``lv4``."""
    return to_tone3(reading, v_to_u=False, neutral_tone_with_five=True).lower()


def _common_first(char: str) -> tuple[bool, int]:
    """Sort key: characters of the basic CJK block (U+4E00-9FFF, where everyday characters live) before
    the extensions, then by code point. The tables carry no frequencies; this puts 中 before 㐺."""
    return (not 0x4E00 <= ord(char) <= 0x9FFF, ord(char))


@functools.lru_cache(maxsize=1)
def syllable_table() -> dict[str, tuple[str, ...]]:
    """Toneless syllable -> every character with that reading (any tone), from pypinyin's per-character
    tables, basic-block characters first. Heteronyms count under each of their readings."""
    table: dict[str, list[str]] = {}
    for code, readings in pinyin_dict.items():
        char = chr(code)
        for reading in readings.split(","):
            syllable = toneless(reading)
            if syllable.isascii() and syllable.isalpha():
                table.setdefault(syllable, []).append(char)
    return {syllable: tuple(sorted(set(chars), key=_common_first)) for syllable, chars in table.items()}


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


@functools.lru_cache(maxsize=1)
def usual_readings() -> dict[str, frozenset[str]]:
    """Character -> the syllables text reads it with: its default reading (the first of pypinyin's table,
    which pypinyin gives it outside a listed phrase) and every reading pypinyin's phrase table gives it
    (长 zhang in 长大, 还 huan in 还原). A reading that only the character table lists (洗 xian, 是 ti, 省
    xian: archaic, a surname, a dialect) is no usual reading: 0.03% of the shipped model's 10.2M training
    hanzi have one (the phrase table its data was read with knows a few more). From pypinyin's own
    tables as installed, never from the phrases :func:`phrase_readings` adds for a while."""
    heard: dict[str, set[str]] = {}
    for code, listed in pinyin_dict.items():
        heard.setdefault(chr(code), set()).add(toneless(listed.split(",")[0]))
    for phrase, per_character in phrases_dict.items():  # per character: its readings, the one used first
        if len(phrase) == len(per_character):
            for char, options in zip(phrase, per_character):
                heard.setdefault(char, set()).add(toneless(options[0]))
    return {char: frozenset(syllable for syllable in syllables_heard if syllable in syllables())
            for char, syllables_heard in heard.items()}


def _errors_as_characters(text: str) -> list[str]:
    return list(text)


# pypinyin's text segmentation (simpleseg.seg): runs of the characters it reads (RE_HANS, "^(?:[...])+$") apart
# from the rest, each run cut into words by its phrase segmenter. One regular expression finds the runs where
# simpleseg tests character by character; should a pypinyin release write RE_HANS otherwise, its own seg is used.
_READ_CLASS = RE_HANS.pattern[4:-3]
_READ_RUNS = (re.compile(f"({_READ_CLASS}+)")
              if RE_HANS.pattern.startswith("^(?:[") and RE_HANS.pattern.endswith("])+$") else None)


def _segments(text: str) -> list[str]:
    """What ``simpleseg.seg(text)`` gives (its empty pieces aside, which read as nothing)."""
    if _READ_RUNS is None:
        return simpleseg.seg(text)
    segments = []
    for index, run in enumerate(_READ_RUNS.split(text)):
        if index % 2 == 0:
            if run:
                segments.append(run)
        elif PHRASES_DICT:
            segments.extend(mmseg.seg.cut(run))
        else:
            segments.append(run)
    return segments


class _RememberingConverter(UltimateConverter):
    """pypinyin's converter, remembering the readings it gave each word (a phrase of its table, or a character)
    with the table entry it read them from. Converting a word costs pypinyin a deep copy and a tone-mark regex
    per character at every occurrence; a corpus repeats a bounded set of words. A remembered reading is used
    while the table still holds that very entry: pypinyin's loaders put new ones (``load_phrases_dict``,
    :func:`phrase_readings`), so readings follow the tables however they change. Only the one way
    :func:`hanzi_to_tokens` calls it is remembered."""

    MAX_WORDS = 150_000  # 550 bytes each (measured): 80 MB; 2M hanzi of text use 64k, with the phrase table 104k

    def __init__(self) -> None:
        super().__init__(v_to_u=False, neutral_tone_with_five=False, tone_sandhi=False)
        self.words: dict[str, tuple[object, list[list[str]]]] = {}

    def convert(self, words, style, heteronym, errors, strict, **kwargs):
        usual = style is Style.NORMAL and not heteronym and errors is _errors_as_characters and strict and not kwargs
        entry = PHRASES_DICT.get(words)
        if entry is None and len(words) == 1:
            entry = PINYIN_DICT.get(ord(words))
        if not usual or entry is None or not RE_HANS.match(words):  # a word of a given segmentation, or no hanzi
            return super().convert(words, style, heteronym, errors, strict, **kwargs)
        remembered = self.words.get(words)
        if remembered is not None and remembered[0] is entry:
            return remembered[1]
        if len(self.words) >= self.MAX_WORDS:
            self.words.clear()
        converted = super().convert(words, style, heteronym, errors, strict)
        self.words[words] = (entry, converted)
        return converted


class _Annotator(Pinyin):
    """pypinyin's ``lazy_pinyin`` with its segmentation by :func:`_segments` and a remembering converter: the
    same tokens, about three times as fast (bench/data_scale.py)."""

    def get_seg(self, **kwargs):
        return _segments


_ANNOTATOR = _Annotator(_RememberingConverter())


def hanzi_to_tokens(text: str | list[str]) -> list[str] | None:
    """The aligned source tokens of a (normalised) text: one per character, a toneless syllable for each
    hanzi and the character itself for anything else. ``text`` may be a list of words (a known word
    segmentation helps pypinyin read polyphones). Returns None if a hanzi has no reading."""
    chars = "".join(text) if isinstance(text, list) else text
    tokens = _ANNOTATOR.lazy_pinyin(text, style=Style.NORMAL, errors=_errors_as_characters)
    if len(tokens) != len(chars):
        return None
    known = syllables()
    for char, token in zip(chars, tokens):
        # A hanzi pypinyin cannot read comes back as itself, which is no syllable either.
        if token not in known and is_hanzi(char):
            return None
    return tokens


@contextlib.contextmanager
def phrase_readings(table: dict[str, list[list[str]]]):
    """While the block runs, pypinyin reads the phrases of ``table`` (phrase -> one list of tone-marked
    readings per character, pypinyin's own format) as given: 银行 -> yin hang, 长大 -> zhang da. Its word
    segmenter learns the phrases too. Both are restored afterwards, so nothing leaks into later code."""
    saved_phrases, saved_prefixes = dict(PHRASES_DICT), set(mmseg.p_set._set)  # pypinyin keeps no API to undo
    load_phrases_dict(table)
    try:
        yield
    finally:
        PHRASES_DICT.clear()
        PHRASES_DICT.update(saved_phrases)
        mmseg.p_set._set = saved_prefixes


@functools.lru_cache(maxsize=1)
def toned_syllable_table() -> dict[str, tuple[str, ...]]:
    """Toned syllable (``zhong1``; neutral tone 5) -> characters with that exact reading."""
    table: dict[str, list[str]] = {}
    for code, readings_text in pinyin_dict.items():
        for reading in readings_text.split(","):
            key = _toned(reading)
            if key[:-1].isascii() and key[:-1].isalpha():
                table.setdefault(key, []).append(chr(code))
    return {key: tuple(sorted(set(chars), key=_common_first)) for key, chars in table.items()}

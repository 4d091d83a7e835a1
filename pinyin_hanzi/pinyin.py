"""Pinyin text handling: hanzi -> aligned toneless syllables, the syllable -> characters table, and the
parsing of what a user types.

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
from dataclasses import dataclass

from pypinyin import Style, lazy_pinyin, load_phrases_dict
from pypinyin.constants import PHRASES_DICT
from pypinyin.seg import mmseg
from pypinyin.contrib.tone_convert import to_normal, to_tone3
from pypinyin.pinyin_dict import pinyin_dict

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


def toneless(reading: str) -> str:
    """A tone-marked reading as a syllable: ``lǜ`` -> ``lv``."""
    return to_normal(reading, v_to_u=False).lower()


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


# Letters a user may type inside pinyin: ASCII, ü, and vowels (and ḿ ń ň ǹ) carrying tone marks.
_MARKED = {"a": ("āáǎà", (1, 2, 3, 4)), "e": ("ēéěè", (1, 2, 3, 4)), "i": ("īíǐì", (1, 2, 3, 4)),
           "o": ("ōóǒò", (1, 2, 3, 4)), "u": ("ūúǔù", (1, 2, 3, 4)), "v": ("ǖǘǚǜ", (1, 2, 3, 4)),
           "n": ("ńňǹ", (2, 3, 4)), "m": ("ḿ", (2,))}
TONE_MARKS = {mark: (base, tone) for base, (marks, tones) in _MARKED.items() for mark, tone in zip(marks, tones)}
_LETTER = "A-Za-zÜüV" + "".join(TONE_MARKS) + "".join(TONE_MARKS).upper()
_PIECE = re.compile(f"([{_LETTER}]+)([0-5]?)|(.)", re.S)
# C0 and C1 control characters, DEL, zero-width space and the byte-order mark: never part of what is meant.
_INVISIBLE = re.compile("[\x00-\x1f\x7f-\x9f\u200b\ufeff]")
# Interjection syllables a longer letter run is never split into (``fangan`` is not fa-ng-an); typed on
# their own they count.
_NOT_INSIDE_RUNS = frozenset({"m", "n", "ng", "hm", "hng"})


@functools.lru_cache(maxsize=1)
def toned_syllable_table() -> dict[str, tuple[str, ...]]:
    """Toned syllable (``zhong1``; neutral tone 5) -> characters with that exact reading."""
    table: dict[str, list[str]] = {}
    for code, readings_text in pinyin_dict.items():
        for reading in readings_text.split(","):
            key = to_tone3(reading, v_to_u=False, neutral_tone_with_five=True).lower()
            if key[:-1].isascii() and key[:-1].isalpha():
                table.setdefault(key, []).append(chr(code))
    return {key: tuple(sorted(set(chars), key=_common_first)) for key, chars in table.items()}


Option = tuple[tuple[str, str], ...]  # one way to read a piece of input: (model token, constraint key) pairs


@dataclass(frozen=True)
class Piece:
    """A stretch of typed input with its alternative readings, best guess first. A pass-through character
    has one reading; a letter run may have several segmentations (``xian``: xian / xi'an)."""

    options: tuple[Option, ...]
    scores: tuple[float, ...] = (0.0,)  # prior log-score of each option (see ``parse_pieces``)


def fewest_syllables(previous: str, syllable: str) -> float:
    """The default segmentation score: -1 per syllable, so that fewer syllables rank first."""
    return -1.0


LITERAL = "="  # constraint key prefix of a character typed to pass through as itself (not a syllable)


def literal_key(char: str) -> str:
    return LITERAL + char


def is_literal_key(key: str) -> bool:
    return len(key) == 2 and key[0] == LITERAL


def _literal(char: str) -> Piece:
    return Piece((((char, literal_key(char)),),))


def _split_run(letters: str, tones: list[int | None], limit: int, score) -> tuple[list[Option], list[float]]:
    """Up to ``limit`` segmentations of a run of pinyin letters into syllables, best ``score`` first (a
    function of (previous syllable, syllable); "<s>" starts the run), with each syllable's tone (from a
    tone mark on one of its letters). k-best dynamic programming with back-pointers, so a run of thousands
    of syllables is split in linear time."""
    n = len(letters)
    # best[end]: up to `limit` entries (score, start, rank at start, last syllable), best first
    best: list[list[tuple[float, int, int, str]]] = [[] for _ in range(n + 1)]
    best[0] = [(0.0, -1, -1, "<s>")]
    for end in range(1, n + 1):
        found = []
        for start in range(max(0, end - 6), end):
            piece = letters[start:end]
            if best[start] and piece in syllables() and (piece not in _NOT_INSIDE_RUNS or (start == 0 and end == n)):
                found.extend((total + score(last, piece), start, rank, piece)
                             for rank, (total, _, _, last) in enumerate(best[start]))
        best[end] = sorted(found, key=lambda entry: -entry[0])[:limit]
    options = []
    for top in range(len(best[n])):
        spans, end, rank = [], n, top
        while end > 0:
            _, start, rank, _ = best[end][rank]
            spans.append((start, end))
            end = start
        option = []
        for start, end in reversed(spans):
            tone = next((t for t in tones[start:end] if t is not None), None)
            syllable = letters[start:end]
            option.append((syllable, syllable if tone is None else f"{syllable}{tone}"))
        options.append(tuple(option))
    return options, [entry[0] for entry in best[n]]


def parse_pieces(text: str, limit: int = 4, score=fewest_syllables) -> list[Piece]:
    """What a user typed, as pieces: syllables separated by spaces or apostrophes (``ni hao``, ``xi'an``) or
    run together (``nihao``), optional tone digits (``ni3``) or tone marks (``nǐ``), ``v``/``ü``/``u:`` for
    ü, any case, full-width letters. A letter run that is no pinyin (``Python``), punctuation, digits,
    hanzi and emoji pass through one character per piece. Letter runs keep their ``limit`` best
    segmentations by ``score`` (by default the fewest syllables; the Converter passes a syllable bigram
    model's log-probability). Control characters (NUL, ESC, ...), the byte-order mark and zero-width spaces
    are dropped and separate like a space: nobody means them, and echoing them could drive a terminal."""
    text = _INVISIBLE.sub(" ", text)
    text = re.sub(r"(?<=[nlNL])[uU]:", "v", ascii_letters_digits(text))
    pieces: list[Piece] = []
    for chunk in re.split(r"[\s']+", text):
        for match in _PIECE.finditer(chunk):
            run, digit, other = match.groups()
            if other is not None:
                pieces.append(_literal(other))
                continue
            letters, tones = [], []
            for char in run.lower().replace("ü", "v"):
                base, tone = TONE_MARKS.get(char, (char, None))
                letters.append(base)
                tones.append(tone)
            options, scores = _split_run("".join(letters), tones, limit, score)
            if digit and options:
                tone = 5 if digit in "05" else int(digit)
                options = [option[:-1] + ((option[-1][0], f"{option[-1][0]}{tone}"),) for option in options]
            if options:
                pieces.append(Piece(tuple(options), tuple(scores)))
            else:  # not pinyin: every character passes through as typed
                pieces.extend(_literal(char) for char in run + digit)
    return pieces


def alternatives(pieces: list[Piece], limit: int = 4) -> list[Option]:
    """Up to ``limit`` whole-input readings, best total piece score first."""
    combined: list[tuple[float, Option]] = [(0.0, ())]
    for piece in pieces:
        if len(piece.options) == 1:
            combined = [(total, reading + piece.options[0]) for total, reading in combined]
            continue
        extended = [(total + score, reading + option) for total, reading in combined
                    for option, score in zip(piece.options, piece.scores)]
        combined = sorted(extended, key=lambda entry: -entry[0])[:limit]
    return [reading for _, reading in combined]


def parse_pinyin(text: str) -> list[str]:
    """The model tokens of the best-guess reading of typed input (see :func:`parse_pieces`)."""
    return [token for token, _ in alternatives(parse_pieces(text), limit=1)[0]]

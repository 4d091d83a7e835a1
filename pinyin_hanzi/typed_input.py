"""What a user types -> pieces with alternative readings.

Typed input is syllables separated by spaces or apostrophes or run together, with optional tone digits or
tone marks; anything that is not pinyin passes through one character per piece. A piece keeps its
alternative readings (``xian``: xian / xi'an), each a tuple of (model token, constraint key) pairs: the
token is what the encoder sees (a toneless syllable, or the character itself), the key what the decoder
may write there (see :func:`pinyin_hanzi.pinyin.syllable_table` and ``toned_syllable_table``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pinyin_hanzi.pinyin import ascii_letters_digits, syllables

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

"""What a user types -> pieces with alternative readings.

Typed input is syllables separated by spaces or apostrophes or run together, with optional tone digits or
tone marks; anything that is not pinyin passes through one character per piece. A piece keeps its
alternative readings (``xian``: xian / xi'an), each a tuple of (model token, constraint key) pairs: the
token is what the encoder sees, the key what the decoder may write there. Parse options (all off by
default) add what IME users type besides full pinyin:

- ``prefixes``: a letter group that begins a syllable (``b``, ``zh``, ``zho``) stands for any syllable it
  begins (``wo xiang q b j``, ``wxqbj``, ``zhongg``);
- ``fuzzy``: fuzzy pinyin pairs (``z-zh``, ``an-ang``, ...) widen what a syllable's key allows;
- ``shuangpin``: letter runs are key pairs of a double-pinyin layout (:mod:`pinyin_hanzi.text.shuangpin`).

Tokens and keys:

============================  =================  ======================  ==============================
typed                         model token        constraint key          :func:`key_syllables` of key
============================  =================  ======================  ==============================
``zhong`` / ``zhong1``        ``zhong``          ``zhong`` / ``zhong1``  itself
``zho`` (prefix)              ``zh*``            ``zho*``                zhong, zhou
``zho3`` (prefix, tone)       ``zh*``            ``zho*3``               zhong3, zhou3
``zi`` with fuzzy ``z-zh``    ``zi``             ``zi|zhi``              zi, zhi
``z`` with fuzzy ``z-zh``     ``z*``             ``z*|zh*``              za ... zu, zha ... zhuo
``!`` (pass-through)          ``!``              ``=!``                  (none: a literal key)
============================  =================  ======================  ==============================

A toned key is its toneless key followed by one tone digit (neutral tone 5); each ``|`` variant carries
the tone. The characters of a syllable key come from :func:`pinyin_hanzi.text.pinyin.syllable_table` (toned:
``toned_syllable_table``).

This module reads text into pieces (:func:`parse_pieces`). The pieces, their tokens and keys and the
whole-input readings they make (:func:`alternatives`) are :mod:`pinyin_hanzi.text.pieces`'s, the fuzzy pairs
:mod:`pinyin_hanzi.text.fuzzy`'s, the rules for abbreviations among parsed pieces
:mod:`pinyin_hanzi.text.abbreviations`'; callers import all of it from here (``__all__``).
"""

from __future__ import annotations

import functools
import re
import unicodedata
from dataclasses import dataclass, field
from typing import Callable, Iterable

from pinyin_hanzi.text import shuangpin as double_pinyin
from pinyin_hanzi.text.abbreviations import (
    LONGEST_ABBREVIATION,
    interjections_alone,
    pass_through_long_abbreviations,
    spell_out,
)
from pinyin_hanzi.text.fuzzy import FUZZY_PAIRS, fuzzy_pairs, widened
from pinyin_hanzi.text.pieces import (
    PREFIX,
    PREFIX_TOKENS,
    Option,
    Piece,
    alternatives,
    fewest_syllables,
    is_literal_key,
    is_pass_through,
    is_prefix_key,
    is_prefix_token,
    is_syllable_set_key,
    key_syllables,
    literal_key,
    literal_piece,
    pass_through_text,
    prefix_token,
    split_key,
    spoken_alternatives,
)
from pinyin_hanzi.text.pinyin import ascii_letters_digits, syllables

# What callers import from here, the one module of typed input they need, wherever it is defined.
__all__ = ["APOSTROPHES", "FUZZY_PAIRS", "LONGEST_ABBREVIATION", "PREFIX_TOKENS", "TONE_MARKS", "Option", "Piece",
           "alternatives", "clean_typed", "fewest_syllables", "fuzzy_pairs", "is_literal_key", "is_pass_through",
           "is_prefix_key", "is_prefix_token", "is_syllable_set_key", "key_syllables", "literal_key", "parse_pieces",
           "parse_pinyin", "pass_through_text", "prefix_token", "spoken_alternatives", "split_lines"]

# Letters a user may type inside pinyin: ASCII, ü, and vowels (and ḿ ń ň ǹ) carrying tone marks.
_MARKED = {"a": ("āáǎà", (1, 2, 3, 4)), "e": ("ēéěè", (1, 2, 3, 4)), "i": ("īíǐì", (1, 2, 3, 4)),
           "o": ("ōóǒò", (1, 2, 3, 4)), "u": ("ūúǔù", (1, 2, 3, 4)), "v": ("ǖǘǚǜ", (1, 2, 3, 4)),
           "n": ("ńňǹ", (2, 3, 4)), "m": ("ḿ", (2,))}
TONE_MARKS = {mark: (base, tone) for base, (marks, tones) in _MARKED.items() for mark, tone in zip(marks, tones)}
# The combining tone marks (macron, acute, caron, grave) and diaeresis, as decomposed (NFD) text spells them.
COMBINING_TONES = {"\u0304": 1, "\u0301": 2, "\u030c": 3, "\u0300": 4}
_DIAERESIS = "\u0308"
# Combining marks that may sit on a Latin letter: inside a letter run they are read (a tone, ü) or ignored,
# so that text typed decomposed (macOS) or with a stray mark reads as the pinyin it spells.
_COMBINING = "\u0300-\u036f\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20ff\ufe20-\ufe2f"
# Latin letters with marks (é, ǘ, ḿ, ị ...) that decompose to an ASCII letter and combining marks.
_LATIN_MARKED = "".join(
    char for block in ((0x00C0, 0x0250), (0x1E00, 0x1F00)) for char in map(chr, range(*block))
    if (len(decomposed := unicodedata.normalize("NFD", char)) > 1 and decomposed[0].isascii()
        and decomposed[0].isalpha() and all(unicodedata.combining(mark) for mark in decomposed[1:])))
_LETTER = "A-Za-z" + _LATIN_MARKED + _COMBINING
_PIECE = re.compile(f"([{_LETTER}]+)([0-5]?)|(.)", re.S)
# Characters that separate syllables like an apostrophe (xi'an): the ASCII one and what keyboards, word
# processors and IMEs put in its place (typographic quotes, full-width, modifier letters, primes, grave and
# acute accents typed on their own).
APOSTROPHES = "'\u2018\u2019\u201b\uff07\u02bc\u02bb\u02b9\u02c8\u2032\u2035`\uff40\u00b4\ua78c"
_SEPARATORS = re.compile(f"[\\s{APOSTROPHES}]+")
# Interjection syllables a longer letter run is never split into (``fangan`` is not fa-ng-an); typed on
# their own they count.
_NOT_INSIDE_RUNS = frozenset({"m", "n", "ng", "hm", "hng"})

# ---- Syllable prefixes -------------------------------------------------------------------------------
#
# A prefix piece is typed letters that begin a syllable without being one (``b``, ``zh``, ``zho``), or the
# interjection syllables ``m`` and ``n`` (see _NOT_INSIDE_RUNS), inside a run and typed alone: typed ``n``
# is far more often 你 那 呢 than 嗯, and the prefix's key n* still allows 嗯 (it begins with n); only
# where n or m stands as a clause of its own is it the syllable first (see interjections_alone). ``ng``
# begins no syllable but itself, so inside a run it is two prefixes, n* g* (``zhongg`` is zhong g*; ``wng``
# is w* n* g*); likewise ``hm`` is h* m*. Typed alone, ``ng`` and ``hm`` stay the syllables they are (嗯 is
# typed ng), and the vowels ``a`` ``o`` ``e`` are that syllable first, then a prefix.
#
# A lone z c s may also be the first letter of zh ch sh (``zg`` is 中国 far more often than 糟糕, and IMEs
# read it so): such a piece has both readings, z* and zh*, each a token the model was trained on, and the
# model chooses between them as between segmentations.
_RETROFLEX_READING = {letter: (letter + "h" + PREFIX,) for letter in "zcs"}


@functools.lru_cache(maxsize=1)
def _beginnings() -> frozenset[str]:
    """Every proper beginning of a syllable (``z``, ``zh``, ``zho``, ``zhon``, ``n`` of ``na`` ...)."""
    return frozenset(syllable[:k] for syllable in syllables() for k in range(1, len(syllable)))


# ---- Segmentation ------------------------------------------------------------------------------------


def _split_run(letters: str, tones: list[int | None], limit: int, score,
               prefixes: bool = False) -> tuple[list[Option], list[float]]:
    """Up to ``limit`` segmentations of a run of pinyin letters into syllables (and, with ``prefixes``,
    prefix pieces), with each piece's tone (from a tone mark on one of its letters) and its score: the sum
    of ``score(previous token, token)`` over its pieces ("<s>" starts the run; a prefix piece's token is
    its ``*`` token). Segmentations rank by (number of prefix pieces, then score): fewer prefixes first
    whatever the score, so a run that reads as full syllables never reads as prefixes. Only those with the
    fewest prefix pieces are returned (the Converter decodes every reading and lets the model choose, and
    a reading with a prefix where a syllable was typed is a looser constraint that would tend to win),
    except that a lone vowel (a o e) keeps its prefix reading second. With ``prefixes``, ``m`` and ``n``
    are prefixes alone as inside runs (see above: their keys allow the interjections too).
    k-best dynamic programming with back-pointers, so a run of thousands of syllables is split in linear
    time."""
    best = _segmentations(letters, limit, score, prefixes)
    n = len(letters)
    kept = [entry for entry in best[n] if entry[0] == best[n][0][0]] if best[n] else []
    options = [_option(best, top, letters, tones) for top in range(len(kept))]
    scores = [entry[1] for entry in kept]
    if prefixes and n == 1 and letters in syllables() and letters in _beginnings() and letters not in _NOT_INSIDE_RUNS:
        # A lone a o e is that syllable (啊 哦 饿 are typed so) or the abbreviation of the syllables it begins
        # (爱 安 而 二 ...): the second reading, with the syllable's score, so that both are decoded and the
        # model chooses (a tie keeps the syllable first, see alternatives).
        token = prefix_token(letters)
        options.append(((token, letters + PREFIX + ("" if tones[0] is None else str(tones[0]))),))
        scores.append(scores[0])
    return options, scores


_Entry = tuple[int, float, int, int, str]  # (prefix pieces, score, start, rank at start, last token)


def _segmentations(letters: str, limit: int, score, prefixes: bool) -> list[list[_Entry]]:
    """k-best dynamic programming over a run: entry ``end`` holds up to ``limit`` segmentations of
    ``letters[:end]``, best first (fewest prefix pieces, then highest score), each as its last piece's
    start and token and the rank, among those ending there, of the segmentation before it."""
    n = len(letters)
    best: list[list[_Entry]] = [[] for _ in range(n + 1)]
    best[0] = [(0, 0.0, -1, -1, "<s>")]
    for end in range(1, n + 1):
        found = []
        for start in range(max(0, end - 6), end):
            if not best[start]:
                continue
            piece = letters[start:end]
            alone = start == 0 and end == n and not (prefixes and piece in _beginnings())
            if piece in syllables() and (piece not in _NOT_INSIDE_RUNS or alone):
                tokens, cost = (piece,), 0
            elif prefixes and piece in _beginnings():
                tokens, cost = (prefix_token(piece),) + _RETROFLEX_READING.get(piece, ()), 1
            else:
                continue
            found.extend((count + cost, total + score(last, token), start, rank, token)
                         for token in tokens for rank, (count, total, _, _, last) in enumerate(best[start]))
        best[end] = sorted(found, key=lambda entry: (entry[0], -entry[1]))[:limit]
    return best


def _option(best: list[list[_Entry]], rank: int, letters: str, tones: list[int | None]) -> Option:
    """The segmentation of the whole run ranked ``rank`` in ``best`` (see :func:`_segmentations`), followed
    back to its start, as (token, key) pairs, each key with its piece's tone."""
    spans, end = [], len(letters)
    while end > 0:
        _, _, start, rank, token = best[end][rank]
        spans.append((start, end, token))
        end = start
    option = []
    for start, end, token in reversed(spans):
        tone = next((t for t in tones[start:end] if t is not None), None)
        typed = letters[start:end]
        if token in _RETROFLEX_READING.get(typed, ()):
            key = token  # z read as zh*: every zh syllable
        else:
            key = typed + (PREFIX if is_prefix_token(token) else "")
        option.append((token, key if tone is None else f"{key}{tone}"))
    return tuple(option)


def _with_tone(option: Option, digit: str) -> Option:
    """``option`` with a typed tone digit on its last piece (it replaces a tone mark there)."""
    token, key = option[-1]
    tone = 5 if digit in "05" else int(digit)
    return option[:-1] + ((token, f"{split_key(key)[0]}{tone}"),)


def _shuangpin_pieces(run: str, digit: str, layout: str, prefixes: bool) -> list[Piece]:
    """A run of shuangpin keys as pieces: a syllable per key pair; an odd trailing initial key a prefix
    piece (with ``prefixes``); keys that spell nothing pass through as typed, one character per piece."""
    pieces: list[Piece] = []
    offset = 0
    for kind, text, keys in double_pinyin.decode_pieces(run, layout):
        typed = run[offset:offset + len(keys)]
        offset += len(keys)
        if kind == double_pinyin.SYLLABLE:
            pieces.append(Piece((((text, text),),), typed=typed))
        elif kind == double_pinyin.PREFIX and prefixes:
            pieces.append(Piece((((prefix_token(text), text + PREFIX),),), typed=typed))
        else:
            pieces.extend(literal_piece(char) for char in typed)
    if digit:
        if pieces and not is_literal_key(pieces[-1].options[0][-1][1]):
            pieces[-1] = Piece((_with_tone(pieces[-1].options[0], digit),), typed=pieces[-1].typed + digit)
        else:
            pieces.append(literal_piece(digit))
    return pieces


def split_lines(text: str) -> list[str]:
    """The lines of ``text``, by :meth:`str.splitlines` (``\\n``, ``\\r``, ``\\r\\n``, U+0085, U+2028,
    U+2029, ``\\v``, ``\\f``, ``\\x1c``-``\\x1e`` each end a line; a final line end starts no new line);
    at least one line, so that empty text is one empty line. The one rule every path that reads typed
    lines follows (translate.py's arguments, files and stdin, and
    :meth:`pinyin_hanzi.decoding.converter.Converter.convert_lines`)."""
    return text.splitlines() or [""]


def parse_pieces(text: str, limit: int = 4, score=fewest_syllables, *, prefixes: bool = False,
                 fuzzy: Iterable[str] | str | None = frozenset(), shuangpin: str | None = None,
                 memo: dict | None = None) -> list[Piece]:
    """What a user typed, as pieces: syllables separated by spaces or apostrophes (``ni hao``, ``xi'an``) or
    run together (``nihao``), optional tone digits (``ni3``) or tone marks (``nǐ``), ``v``/``ü``/``u:`` for
    ü, any case, full-width letters. A letter run that is no pinyin (``Python``), punctuation, digits,
    hanzi and emoji pass through one character per piece. Letter runs keep their ``limit`` best
    segmentations by ``score`` (by default the fewest syllables; the Converter passes a syllable bigram
    model's log-probability). The text is first composed (NFC) and invisible characters (control and format
    characters, variation selectors) are dropped and separate like a space (:func:`clean_typed`). Typographic,
    full-width and other apostrophe-like characters (:data:`APOSTROPHES`: ’ ‘ ＇ ʼ ′ `) separate syllables
    like ``'``. Combining marks on letters are read as tones (a decomposed ``ǐ``) or ü, else ignored; one
    elsewhere passes through only on the pass-through character it follows, never on a converted one.

    Options (keyword-only; the defaults read full pinyin only):

    - ``prefixes``: letters that begin a syllable stand for any syllable they begin, spaced
      (``wo xiang q b j``), run together (``wxqbj``, ``zhongg``) or mixed; full syllables win wherever the
      run reads as full syllables (see ``_split_run``). A tone digit or tone mark on a prefix is kept in
      its key (``b3`` -> key ``b*3``: syllables b... in tone 3). A run with a capital letter (``Python``,
      unless the whole text is upper case) reads as full syllables only, and a word spelled in separate
      letters with a capital or an i/u/v among them (``A t t i l a``) passes through. Off by default
      because a lower-case Latin word (``python``) would still read as prefixes.
    - ``fuzzy``: names of :data:`FUZZY_PAIRS` (``{"z-zh", "an-ang"}``): each syllable's key widens to its
      fuzzy variants after segmentation, so a variant never changes how a run is split; tokens stay as
      typed. Raises :class:`DataError` for an unknown name.
    - ``shuangpin``: a layout name of :mod:`pinyin_hanzi.text.shuangpin`; letter runs (and ``;`` where the
      layout has a final on it) are read as key pairs of that layout instead of as pinyin, an odd trailing
      initial key is a prefix piece (with ``prefixes``, else it passes through), and a pair that spells no
      syllable passes through as typed. Tone marks are no keys and pass through; a tone digit after a run
      tones its last syllable. Raises :class:`DataError` for an unknown layout.
    - ``memo``: a dict, kept between calls by a caller that always passes the same ``score`` (the
      Converter's planner), in which short letter runs' segmentations are kept: a text's runs are mostly
      the same few hundred syllables, each segmented alike every time."""
    fuzzy = fuzzy_pairs(fuzzy)
    pattern = _piece_pattern(shuangpin)
    text = re.sub(r"(?<=[nlNL])[uU]:", "v", ascii_letters_digits(clean_typed(text)))
    # A capital means Shift+letter (typed for a word, as in IMEs) only in text that also has lower case: with
    # Caps Lock on (WO XIANG Q B J) case says nothing.
    reader = _Reader(limit, score, prefixes, fuzzy, shuangpin, shifted=any(char.islower() for char in text),
                     memo=memo)
    for chunk in _SEPARATORS.split(text):
        reader.read_chunk(chunk, pattern)
    pieces = reader.pieces
    if prefixes:
        spell_out(pieces, reader.single_letters)
        if shuangpin is None:  # a lone shuangpin key is an initial, never the syllable n
            interjections_alone(pieces, score, fuzzy)
        pieces = pass_through_long_abbreviations(pieces)
    return pieces


def _piece_pattern(shuangpin: str | None) -> re.Pattern:
    """What the text between separators is read with: a run of letters and its tone digit, or any other
    character; with ``shuangpin``, a run of that layout's keys (``;`` among them where the layout has a final
    on it). DataError for an unknown layout."""
    if shuangpin is None:
        return _PIECE
    extra = "".join(sorted(key for key in double_pinyin.layout_named(shuangpin).keys if not key.isalpha()))
    return re.compile(f"([A-Za-z{re.escape(extra)}]+)([0-5]?)|(.)", re.S)


@dataclass
class _Reader:
    """:func:`parse_pieces`' options and what it has read so far: the pieces, and the letters typed on their
    own (for :func:`~pinyin_hanzi.text.abbreviations.spell_out`)."""

    limit: int
    score: Callable[[str, str], float]
    prefixes: bool
    fuzzy: frozenset[str]
    shuangpin: str | None
    shifted: bool  # the text has lower case too, so that a capital was typed for a word
    memo: dict | None = None  # short runs' segmentations (see parse_pieces)
    pieces: list[Piece] = field(default_factory=list)
    # (piece index, letter, whether it marks a spelled word: a capital, or a letter that begins no syllable)
    single_letters: list[tuple[int, str, bool]] = field(default_factory=list)

    def read_chunk(self, chunk: str, pattern: re.Pattern) -> None:
        """Append the pieces of ``chunk``, text between separators."""
        chunk_start = len(self.pieces)
        for match in pattern.finditer(chunk):
            run, digit, other = match.groups()
            if other is not None:
                self._add_literal(other, chunk_start)
            elif self.shuangpin is not None:
                found = _shuangpin_pieces(run, digit, self.shuangpin, self.prefixes)
                self.pieces.extend(Piece(tuple(widened(o, self.fuzzy) for o in p.options), p.scores, p.typed)
                                   if self.fuzzy else p for p in found)
            elif not self._add_letter_run(run, digit):  # not pinyin: every character passes through as typed
                for char in run + digit:
                    self._add_literal(char, chunk_start)

    def _add_literal(self, char: str, chunk_start: int) -> None:
        # A combining mark passes through only on the pass-through character before it: anywhere else it
        # would be drawn on a converted character (or on nothing).
        if _is_mark(char) and (len(self.pieces) == chunk_start or not is_pass_through(self.pieces[-1])):
            return
        self.pieces.append(literal_piece(char))

    def _add_letter_run(self, run: str, digit: str) -> bool:
        """Append the piece of a letter run read as pinyin; False (nothing appended) where it is none."""
        letters, tones = _letters_and_tones(run)
        capital = self.shifted and not run.islower()
        if len(letters) == 1 and not digit:
            self.single_letters.append((len(self.pieces), run, capital or run.lower() not in _beginnings()))
        # A run of marks alone (no letter) is no pinyin; a capital is typed for a word, not an
        # abbreviation, so only full syllables read such a run.
        options, scores = self._split(letters, tones, self.prefixes and not capital) if letters else ([], [])
        if digit and options:
            options = [_with_tone(option, digit) for option in options]
        if self.fuzzy:
            options = [widened(option, self.fuzzy) for option in options]
        if options:
            self.pieces.append(Piece(tuple(options), tuple(scores), run + digit))
        return bool(options)

    def _split(self, letters: str, tones: list[int | None], prefixes: bool) -> tuple[list[Option], list[float]]:
        """:func:`_split_run` of a run, from the memo where it holds the run (runs of up to MEMO_LETTERS letters
        are kept, MEMO_RUNS of them at most)."""
        if self.memo is None or len(letters) > MEMO_LETTERS:
            return _split_run(letters, tones, self.limit, self.score, prefixes)
        key = (letters, tuple(tones), self.limit, prefixes)
        found = self.memo.get(key)
        if found is None:
            if len(self.memo) >= MEMO_RUNS:
                self.memo.clear()
            found = self.memo[key] = _split_run(letters, tones, self.limit, self.score, prefixes)
        return found


MEMO_LETTERS, MEMO_RUNS = 12, 20_000  # a few MB at most


def _letters_and_tones(run: str) -> tuple[str, list[int | None]]:
    """A letter run as lower-case ASCII letters (ü as v) and each letter's tone from a mark on it, or None.
    Marks are read from the decomposed letters, so that a precomposed (ǎ) and a decomposed (a + U+030C)
    tone mark are the same; the diaeresis on u makes it ü; other marks (and marks on no letter) are
    ignored."""
    letters: list[str] = []
    tones: list[int | None] = []
    for char in unicodedata.normalize("NFD", run.lower()):
        if not _is_mark(char):
            letters.append(char)
            tones.append(None)
        elif letters and char == _DIAERESIS and letters[-1] == "u":
            letters[-1] = "v"
        elif letters and char in COMBINING_TONES:
            tones[-1] = COMBINING_TONES[char]
    return "".join(letters), tones


@functools.lru_cache(maxsize=4096)
def _is_invisible(char: str) -> bool:
    """Control and format characters (categories Cc, Cf: NUL, ESC, zero-width spaces and joiners, soft
    hyphen, bidirectional overrides, the byte-order mark, tags) and variation selectors."""
    return (unicodedata.category(char) in ("Cc", "Cf") or "\ufe00" <= char <= "\ufe0f"
            or "\U000e0100" <= char <= "\U000e01ef")


def _is_mark(char: str) -> bool:
    return unicodedata.category(char).startswith("M")


_NOT_PRINTABLE_ASCII = re.compile("[^\x20-\x7e]")


def clean_typed(text: str) -> str:
    """Typed text in one canonical form before it is read: composed (NFC), so that decomposed tone marks
    (as macOS types them) read like precomposed ones; invisible characters (:func:`_is_invisible`) replaced
    by a space. Nobody means them, echoing them could drive a terminal or reorder the output, and they
    separate what they stand between like a space (a soft hyphen or a zero-width space between syllables)."""
    return _NOT_PRINTABLE_ASCII.sub(lambda match: " " if _is_invisible(match[0]) else match[0],
                                    unicodedata.normalize("NFC", text))


def parse_pinyin(text: str, **options) -> list[str]:
    """The model tokens of the best-guess reading of typed input; ``options`` are :func:`parse_pieces`'
    keyword-only options."""
    return [token for token, _ in alternatives(parse_pieces(text, **options), limit=1)[0]]

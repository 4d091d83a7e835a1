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
"""

from __future__ import annotations

import functools
import itertools
import re
import unicodedata
from dataclasses import dataclass, field
from typing import Iterable

from pinyin_hanzi.errors import DataError
from pinyin_hanzi.text import shuangpin as double_pinyin
from pinyin_hanzi.text.pinyin import ascii_letters_digits, syllables, toned_syllable_table

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


Option = tuple[tuple[str, str], ...]  # one way to read a piece of input: (model token, constraint key) pairs


@dataclass(frozen=True)
class Piece:
    """A stretch of typed input with its alternative readings, best guess first. A pass-through character
    has one reading; a letter run may have several segmentations (``xian``: xian / xi'an)."""

    options: tuple[Option, ...]
    scores: tuple[float, ...] = (0.0,)  # prior log-score of each option (see ``parse_pieces``)
    # The letters typed for a letter run's piece (tone digit included), for when it passes through after all
    # (see _pass_through_long_abbreviations); "" for other pieces. Not part of a piece's identity.
    typed: str = field(default="", compare=False)


def fewest_syllables(previous: str, syllable: str) -> float:
    """The default segmentation score: -1 per syllable, so that fewer syllables rank first."""
    return -1.0


LITERAL = "="  # constraint key prefix of a character typed to pass through as itself (not a syllable)


def literal_key(char: str) -> str:
    return LITERAL + char


def is_literal_key(key: str) -> bool:
    return len(key) == 2 and key[0] == LITERAL


@functools.lru_cache(maxsize=4096)
def _literal(char: str) -> Piece:  # cached: a long line of pass-through text is mostly the same few characters
    return Piece((((char, literal_key(char)),),))


# ---- Syllable prefixes -------------------------------------------------------------------------------
#
# A prefix piece is typed letters that begin a syllable without being one (``b``, ``zh``, ``zho``), or the
# interjection syllables ``m`` and ``n`` (see _NOT_INSIDE_RUNS), inside a run and typed alone: typed ``n``
# is far more often 你 那 呢 than 嗯, and the prefix's key n* still allows 嗯 (it begins with n); only
# where n or m stands as a clause of its own is it the syllable first (see _interjections_alone). ``ng``
# begins no syllable but itself, so inside a run it is two prefixes, n* g* (``zhongg`` is zhong g*; ``wng``
# is w* n* g*); likewise ``hm`` is h* m*. Typed alone, ``ng`` and ``hm`` stay the syllables they are (嗯 is
# typed ng), and the vowels ``a`` ``o`` ``e`` are that syllable first, then a prefix.

PREFIX = "*"  # ends a prefix piece's model token (``zh*``) and constraint key (``zho*``)
_RETROFLEX = ("zh", "ch", "sh")
# A lone z c s may also be the first letter of zh ch sh (``zg`` is 中国 far more often than 糟糕, and IMEs
# read it so): such a piece has both readings, z* and zh*, each a token the model was trained on, and the
# model chooses between them as between segmentations.
_RETROFLEX_READING = {letter: (letter + "h" + PREFIX,) for letter in "zcs"}
_INTERJECTION_PREFIXES = ("n" + PREFIX, "m" + PREFIX)  # the prefix tokens of lone n and m
# The model tokens of abbreviations: every letter a syllable begins with (all but i, u, v), and zh ch sh.
PREFIX_TOKENS = frozenset(letter + PREFIX for letter in "abcdefghjklmnopqrstwxyz") | {
    initial + PREFIX for initial in _RETROFLEX}


def prefix_token(letters: str) -> str:
    """The model token of an abbreviation: its initial and ``*``, the initial being ``zh``/``ch``/``sh``
    where ``letters`` starts with them and the first letter otherwise. Works on a syllable (``zhong`` ->
    ``zh*``, ``an`` -> ``a*``: what training puts in place of an abbreviated syllable) and on a typed
    prefix (``zho`` -> ``zh*``, ``z`` -> ``z*``). Raises ValueError for an empty string."""
    if not letters:
        raise ValueError("an empty string has no prefix token")
    return (letters[:2] if letters[:2] in _RETROFLEX else letters[0]) + PREFIX


def is_prefix_token(token: str) -> bool:
    return token in PREFIX_TOKENS


# A key that stands for a set of syllables: a prefix (``zho*``, ``b*3``), fuzzy variants (``zi|zhi``), or a
# corpus token that may also be a Latin letter (``o|=o``).
# Spelled out in full because the vocabulary also holds corpus punctuation such as ``*`` and ``|``, which
# are literal tokens, not empty prefixes.
_VARIANT = r"(?:[a-zü]+\*?[1-5]?|=.)"  # a syllable or prefix, toned or not, or a literal (o|=o)
_SYLLABLE_SET_KEY = re.compile(rf"{_VARIANT}(?:\|{_VARIANT})*")


def is_prefix_key(key: str) -> bool:
    """Whether ``key`` is the constraint key of an abbreviated syllable (``b*``, ``zho*``, ``b*3``)."""
    return PREFIX in key and is_syllable_set_key(key)


def is_syllable_set_key(key: str) -> bool:
    """Whether ``key`` is a prefix or fuzzy constraint key (see :func:`key_syllables`)."""
    return (PREFIX in key or "|" in key) and _SYLLABLE_SET_KEY.fullmatch(key) is not None


@functools.lru_cache(maxsize=1)
def _beginnings() -> frozenset[str]:
    """Every proper beginning of a syllable (``z``, ``zh``, ``zho``, ``zhon``, ``n`` of ``na`` ...)."""
    return frozenset(syllable[:k] for syllable in syllables() for k in range(1, len(syllable)))


@functools.lru_cache(maxsize=None)
def _begun_by(prefix: str) -> tuple[str, ...]:
    """The syllables a typed prefix stands for: those it begins that share its model token, so ``z`` stands
    for za ... zuo but not zh syllables (fuzzy ``z-zh`` adds those), ``zh`` for zha ... zhuo. A lone ``z``
    piece has a second reading, ``zh*``, for those (see _RETROFLEX_READING)."""
    token = prefix_token(prefix)
    return tuple(sorted(s for s in syllables() if s.startswith(prefix) and prefix_token(s) == token))


def _split_key(variant: str) -> tuple[str, str]:
    """(toneless variant, tone digit or "")."""
    return (variant[:-1], variant[-1]) if variant[-1:].isdigit() else (variant, "")


def _typed_variant(key: str) -> tuple[str, str]:
    """(toneless variant, tone digit or "") of the variant typed, the first: fuzzy pairs add theirs after it
    (``n*4|l*4`` -> ``n*``, ``4``)."""
    return _split_key(key.split("|")[0])


def key_syllables(key: str) -> tuple[str, ...]:
    """The syllables a constraint key may stand for, in order, without repeats: a syllable key itself
    (``ni`` -> ("ni",), ``ni3`` -> ("ni3",)); a prefix key every syllable it begins that has the prefix's
    initial (``zho*`` -> ("zhong", "zhou"); toned ``b*3`` -> the toned syllables b... with tone 3 that have
    characters); a fuzzy key its ``|`` variants each read so (``zi|zhi`` -> ("zi", "zhi")). A literal key
    (``=!``) stands for no syllable: (), nor does a literal variant of a fuzzy key (``o|=o``). Toned results
    are keys of ``toned_syllable_table``."""
    if is_literal_key(key):
        return ()
    if not is_syllable_set_key(key):
        return (key,)
    found: dict[str, None] = {}
    for variant in key.split("|"):
        if is_literal_key(variant):
            continue
        base, tone = _split_key(variant)
        if base.endswith(PREFIX):
            toned = toned_syllable_table()
            found.update((s + tone, None) for s in _begun_by(base[:-1]) if not tone or s + tone in toned)
        else:
            found[variant] = None
    return tuple(found)


# ---- Fuzzy pinyin ------------------------------------------------------------------------------------
#
# Pairs are symmetric and each works on its own: with n-l and r-l on, typed l allows n and r, typed n
# allows l but not r. Initial pairs compare the initial (y and w count as initials); final pairs compare the
# whole spelled final after it, so an-ang pairs ban/bang, an/ang and yan/yang but not jian/jiang (that is
# ian-iang) nor guan/guang (uan-uang). A variant counts only where it is a real syllable. Prefixes widen by
# the initial pairs (z* with z-zh also allows zh syllables, zho* also zo...); final pairs change nothing
# there, since a prefix already stands for every final it begins.

_INITIAL, _FINAL = "initial", "final"
FUZZY_PAIRS: dict[str, tuple[str, str, str]] = {  # name -> (which part of the syllable, one, the other)
    "z-zh": (_INITIAL, "z", "zh"), "c-ch": (_INITIAL, "c", "ch"), "s-sh": (_INITIAL, "s", "sh"),
    "n-l": (_INITIAL, "n", "l"), "r-l": (_INITIAL, "r", "l"), "f-h": (_INITIAL, "f", "h"),
    "an-ang": (_FINAL, "an", "ang"), "en-eng": (_FINAL, "en", "eng"), "in-ing": (_FINAL, "in", "ing"),
    "ian-iang": (_FINAL, "ian", "iang"), "uan-uang": (_FINAL, "uan", "uang"),
}
_INITIALS = _RETROFLEX + tuple("bpmfdtnlgkhjqxrzcsyw")


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
    base, tone = _split_key(key)
    is_prefix = base.endswith(PREFIX)
    letters = base[:-1] if is_prefix else base
    initial = _initial(letters)
    initials = _swapped(initial, _INITIAL, fuzzy) if initial else [""]
    if is_prefix:
        variants = [other + letters[len(initial):] + PREFIX for other in initials]
        variants = [v for v in variants if v == base or _begun_by(v[:-1])]
    else:
        variants = [other + final for other in initials for final in _swapped(letters[len(initial):], _FINAL, fuzzy)]
        variants = [v for v in variants if v == base or v in syllables()]
    return "|".join(dict.fromkeys(v + tone for v in variants))


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
    n = len(letters)
    # best[end]: up to `limit` entries (prefix pieces, score, start, rank at start, last token), best first
    best: list[list[tuple[int, float, int, int, str]]] = [[] for _ in range(n + 1)]
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
    kept = [entry for entry in best[n] if entry[0] == best[n][0][0]] if best[n] else []
    options = []
    for top in range(len(kept)):
        spans, end, rank = [], n, top
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
        options.append(tuple(option))
    scores = [entry[1] for entry in kept]
    if prefixes and n == 1 and letters in syllables() and letters in _beginnings() and letters not in _NOT_INSIDE_RUNS:
        # A lone a o e is that syllable (啊 哦 饿 are typed so) or the abbreviation of the syllables it begins
        # (爱 安 而 二 ...): the second reading, with the syllable's score, so that both are decoded and the
        # model chooses (a tie keeps the syllable first, see alternatives).
        token = prefix_token(letters)
        options.append(((token, letters + PREFIX + ("" if tones[0] is None else str(tones[0]))),))
        scores.append(scores[0])
    return options, scores


def _with_tone(option: Option, digit: str) -> Option:
    """``option`` with a typed tone digit on its last piece (it replaces a tone mark there)."""
    token, key = option[-1]
    tone = 5 if digit in "05" else int(digit)
    return option[:-1] + ((token, f"{_split_key(key)[0]}{tone}"),)


def _widened(option: Option, fuzzy: frozenset[str]) -> Option:
    return tuple((token, key if is_literal_key(key) else _widen(key, fuzzy)) for token, key in option)


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
            pieces.extend(_literal(char) for char in typed)
    if digit:
        if pieces and not is_literal_key(pieces[-1].options[0][-1][1]):
            pieces[-1] = Piece((_with_tone(pieces[-1].options[0], digit),), typed=pieces[-1].typed + digit)
        else:
            pieces.append(_literal(digit))
    return pieces


def split_lines(text: str) -> list[str]:
    """The lines of ``text``, by :meth:`str.splitlines` (``\\n``, ``\\r``, ``\\r\\n``, U+0085, U+2028,
    U+2029, ``\\v``, ``\\f``, ``\\x1c``-``\\x1e`` each end a line; a final line end starts no new line);
    at least one line, so that empty text is one empty line. The one rule every path that reads typed
    lines follows (translate.py's arguments, files and stdin, and
    :meth:`pinyin_hanzi.decoding.converter.Converter.convert_lines`)."""
    return text.splitlines() or [""]


def parse_pieces(text: str, limit: int = 4, score=fewest_syllables, *, prefixes: bool = False,
                 fuzzy: Iterable[str] | str | None = frozenset(), shuangpin: str | None = None) -> list[Piece]:
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
      tones its last syllable. Raises :class:`DataError` for an unknown layout."""
    fuzzy = fuzzy_pairs(fuzzy)
    if shuangpin is not None:
        extra = "".join(sorted(key for key in double_pinyin.layout_named(shuangpin).keys if not key.isalpha()))
        piece_pattern = re.compile(f"([A-Za-z{re.escape(extra)}]+)([0-5]?)|(.)", re.S)
    else:
        piece_pattern = _PIECE
    text = re.sub(r"(?<=[nlNL])[uU]:", "v", ascii_letters_digits(clean_typed(text)))
    pieces: list[Piece] = []
    # (piece index, letter, whether it marks a spelled word: a capital, or a letter that begins no syllable)
    single_letters: list[tuple[int, str, bool]] = []
    # A capital means Shift+letter (typed for a word, as in IMEs) only in text that also has lower case: with
    # Caps Lock on (WO XIANG Q B J) case says nothing.
    shifted = any(char.islower() for char in text)
    for chunk in _SEPARATORS.split(text):
        chunk_start = len(pieces)

        def add_literal(char: str) -> None:
            # A combining mark passes through only on the pass-through character before it: anywhere else
            # it would be drawn on a converted character (or on nothing).
            if _is_mark(char) and (len(pieces) == chunk_start or not is_pass_through(pieces[-1])):
                return
            pieces.append(_literal(char))

        for match in piece_pattern.finditer(chunk):
            run, digit, other = match.groups()
            if other is not None:
                add_literal(other)
                continue
            if shuangpin is not None:
                found = _shuangpin_pieces(run, digit, shuangpin, prefixes)
                pieces.extend(Piece(tuple(_widened(o, fuzzy) for o in p.options), p.scores, p.typed) if fuzzy
                              else p for p in found)
                continue
            letters, tones = _letters_and_tones(run)
            capital = shifted and not run.islower()
            if len(letters) == 1 and not digit:
                single_letters.append((len(pieces), run, capital or run.lower() not in _beginnings()))
            # A run of marks alone (no letter) is no pinyin; a capital is typed for a word, not an
            # abbreviation, so only full syllables read such a run.
            options, scores = (_split_run(letters, tones, limit, score, prefixes and not capital)
                               if letters else ([], []))
            if digit and options:
                options = [_with_tone(option, digit) for option in options]
            if fuzzy:
                options = [_widened(option, fuzzy) for option in options]
            if options:
                pieces.append(Piece(tuple(options), tuple(scores), run + digit))
            else:  # not pinyin: every character passes through as typed
                for char in run + digit:
                    add_literal(char)
    if prefixes:
        _spell_out(pieces, single_letters)
        if shuangpin is None:  # a lone shuangpin key is an initial, never the syllable n
            _interjections_alone(pieces, score, fuzzy)
        pieces = _pass_through_long_abbreviations(pieces)
    return pieces


def _interjections_alone(pieces: list[Piece], score, fuzzy: frozenset[str]) -> None:
    """Give back, in place, the syllable reading (first, the abbreviation second) to a lone ``n`` or ``m``
    that stands as a clause of its own: between punctuation and the line's ends, with punctuation on at
    least one side (``n ， wo zhi dao le`` is 嗯，我知道了, as pypinyin types 嗯). Abbreviations are typed
    inside words, so n there is far more often 嗯 than 你 or 那; next to digits it is 年 or 米 (``2011 n``),
    and a line that is ``n`` alone stays an abbreviation (你), as in IMEs."""
    def is_punctuation(index: int) -> bool:
        return (0 <= index < len(pieces) and is_pass_through(pieces[index])
                and unicodedata.category(pass_through_text([pieces[index]])[:1] or " ").startswith("P"))

    for index, piece in enumerate(pieces):
        if len(piece.options) != 1 or len(option := piece.options[0]) != 1:
            continue
        token, key = option[0]
        typed, tone = _typed_variant(key)  # the typed prefix: n*, n*4
        if token not in _INTERJECTION_PREFIXES or typed != token:
            continue
        neighbours = [i for i in (index - 1, index + 1) if 0 <= i < len(pieces)]
        if not neighbours or not all(map(is_punctuation, neighbours)):
            continue
        syllable = ((token[:-1], token[:-1] + tone),)  # n* -> n, n*4 -> n4, widened as any syllable
        pieces[index] = Piece((_widened(syllable, fuzzy) if fuzzy else syllable, option),
                              (score("<s>", token[:-1]), score("<s>", token)), piece.typed)


# More abbreviations in a row than this are no abbreviation: the longest clause the configs train on
# (data.max_len 32) abbreviated whole. Each abbreviated letter costs a wide beam search over every character
# of the syllables it begins (3 ms each with the shipped model: 20,000 letters of x took 106 s).
LONGEST_ABBREVIATION = 32


def _pass_through_long_abbreviations(pieces: list[Piece]) -> list[Piece]:
    """``pieces`` with every letter-run piece that takes part in a stretch of more than
    :data:`LONGEST_ABBREVIATION` abbreviations in a row (by each piece's best reading; spaces do not break a
    stretch, since ``w x q b j`` is as much one abbreviation as ``wxqbj``; a syllable or a pass-through
    character does) passing through as typed, one character per piece. Nobody types a stretch that long
    (``xxxx…``, a keyboard mashed): reading it would cost a search per letter and give nonsense."""
    marked: set[int] = set()
    stretch: list[int] = []  # the pieces of the stretch that is still open
    length = 0  # its abbreviations so far

    def close(last: int | None = None, more: int = 0) -> None:  # the open stretch ends (in piece ``last``)
        if length + more > LONGEST_ABBREVIATION:
            marked.update(stretch + ([] if last is None else [last]))

    for index, piece in enumerate(pieces):
        if is_pass_through(piece):
            close()
            stretch, length = [], 0
            continue
        flags = [is_prefix_token(token) for token, _ in piece.options[0]]
        if all(flags):  # abbreviations only: the stretch goes on through this piece
            stretch, length = stretch + [index], length + len(flags)
            continue
        groups = [(flag, len(list(group))) for flag, group in itertools.groupby(flags)]  # (abbreviated, how many)
        if groups[0][0]:  # the piece's first abbreviations end the open stretch, and count in it
            close(index, groups[0][1])
        else:
            close()
        if any(flag and count > LONGEST_ABBREVIATION for flag, count in groups[1:-1]):
            marked.add(index)
        stretch, length = ([index], groups[-1][1]) if groups[-1][0] else ([], 0)
    close()
    if not marked:
        return pieces
    return [literal for index, piece in enumerate(pieces)
            for literal in ([_literal(char) for char in piece.typed] if index in marked else [piece])]


def _spell_out(pieces: list[Piece], single_letters: list[tuple[int, str, bool]]) -> None:
    """Pass through, in place, each word spelled as separate letters (``A t t i l a``, ``n i n``): a stretch
    of consecutive pieces that are letters typed on their own (``single_letters``: piece index, letter,
    marked), with a marked one among them (a capital, or a letter that begins no syllable: i, u, v).
    Abbreviations are typed from syllable initials (``w x q b j``), so such a stretch is a word (the form
    corpus text gives Latin words) that prefixes would otherwise misread."""
    stretches: list[list[tuple[int, str, bool]]] = []
    for entry in single_letters:
        if stretches and stretches[-1][-1][0] == entry[0] - 1:
            stretches[-1].append(entry)
        else:
            stretches.append([entry])
    for stretch in stretches:
        if any(marked for _, _, marked in stretch):
            for index, letter, _ in stretch:
                pieces[index] = _literal(letter)


def is_pass_through(piece: Piece) -> bool:
    """Whether ``piece`` is a character typed to pass through as itself (not pinyin)."""
    return len(piece.options) == 1 and is_literal_key(piece.options[0][-1][1])


def pass_through_text(pieces: Iterable[Piece]) -> str:
    """The characters of pass-through pieces, as typed."""
    return "".join(piece.options[0][0][0] for piece in pieces)


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


def alternatives(pieces: list[Piece], limit: int = 4) -> list[Option]:
    """Up to ``limit`` whole-input readings, ranked by total piece score, ties in the pieces' order (see
    :func:`spoken_alternatives`)."""
    return [reading for reading, _ in spoken_alternatives(pieces, limit)]


def spoken_alternatives(pieces: list[Piece], limit: int = 4) -> list[tuple[Option, tuple[str, ...]]]:
    """Up to ``limit`` whole-input readings, ranked by total piece score, ties in the pieces' order, each
    with what a syllable model should score: its tokens, except that a letter typed alone that is a
    syllable itself and read as an abbreviation (a lone ``e`` read as e*, a lone ``n`` as n*) counts as
    that syllable. A piece's options never differ in how many prefix pieces they have (``_split_run``
    keeps the fewest) except for a lone a o e, which is also its own syllable's abbreviation with that
    syllable's score, and a lone n or m standing as a clause (see _interjections_alone), whose
    abbreviation scores as a prefix token (unseen by the syllable model): far below."""
    combined: list[tuple[float, Option, tuple[str, ...]]] = [(0.0, (), ())]
    for piece in pieces:
        choices = [(option, score, _spoken(option)) for option, score in zip(piece.options, piece.scores)]
        if len(choices) == 1:
            option, _, spoken = choices[0]
            combined = [(total, reading + option, said + spoken) for total, reading, said in combined]
            continue
        extended = [(total + score, reading + option, said + spoken)
                    for total, reading, said in combined for option, score, spoken in choices]
        combined = sorted(extended, key=lambda entry: -entry[0])[:limit]
    return [(reading, said) for _, reading, said in combined]


def _spoken(option: Option) -> tuple[str, ...]:
    """The option's tokens, or for a single letter typed alone that spells a syllable and is read as an
    abbreviation (key ``e*``, ``n*3``, ``n*|l*``: the typed variant first), that syllable. Inside a run
    (``shn``: sh* n*) a prefix stays a prefix: there it competes with other segmentations, not with a
    reading as its own syllable."""
    if len(option) == 1 and is_prefix_token(option[0][0]):
        letters = _typed_variant(option[0][1])[0].removesuffix(PREFIX)
        if letters in syllables():
            return (letters,)
    return tuple(token for token, _ in option)


def parse_pinyin(text: str, **options) -> list[str]:
    """The model tokens of the best-guess reading of typed input; ``options`` are :func:`parse_pieces`'
    keyword-only options."""
    return [token for token, _ in alternatives(parse_pieces(text, **options), limit=1)[0]]

"""A piece of typed input and what it may stand for (what :mod:`pinyin_hanzi.text.typed_input` parses text
into): its readings, each a tuple of (model token, constraint key) pairs, and the keys a reading's pieces
carry: a syllable (``ni``, ``ni3``), an abbreviation's prefix (``zho*``, token ``zh*``), fuzzy variants
(``zi|zhi``, :mod:`pinyin_hanzi.text.fuzzy`) or a character passing through as itself (``=!``).
:func:`key_syllables` says which syllables a key stands for, :func:`alternatives` which readings of a whole
line the pieces make, best first."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import Iterable

from pinyin_hanzi.text.pinyin import syllables, toned_syllable_table

Option = tuple[tuple[str, str], ...]  # one way to read a piece of input: (model token, constraint key) pairs


@dataclass(frozen=True)
class Piece:
    """A stretch of typed input with its alternative readings, best guess first. A pass-through character
    has one reading; a letter run may have several segmentations (``xian``: xian / xi'an)."""

    options: tuple[Option, ...]
    scores: tuple[float, ...] = (0.0,)  # prior log-score of each option (see typed_input.parse_pieces)
    # The letters typed for a letter run's piece (tone digit included), for when it passes through after all
    # (see abbreviations.pass_through_long_abbreviations); "" for other pieces. Not part of a piece's identity.
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
def literal_piece(char: str) -> Piece:  # cached: a long line of pass-through text is mostly the same few characters
    return Piece((((char, literal_key(char)),),))


def is_pass_through(piece: Piece) -> bool:
    """Whether ``piece`` is a character typed to pass through as itself (not pinyin)."""
    return len(piece.options) == 1 and is_literal_key(piece.options[0][-1][1])


def pass_through_text(pieces: Iterable[Piece]) -> str:
    """The characters of pass-through pieces, as typed."""
    return "".join(piece.options[0][0][0] for piece in pieces)


PREFIX = "*"  # ends a prefix piece's model token (``zh*``) and constraint key (``zho*``)
RETROFLEX = ("zh", "ch", "sh")
# The model tokens of abbreviations: every letter a syllable begins with (all but i, u, v), and zh ch sh.
PREFIX_TOKENS = frozenset(letter + PREFIX for letter in "abcdefghjklmnopqrstwxyz") | {
    initial + PREFIX for initial in RETROFLEX}


def prefix_token(letters: str) -> str:
    """The model token of an abbreviation: its initial and ``*``, the initial being ``zh``/``ch``/``sh``
    where ``letters`` starts with them and the first letter otherwise. Works on a syllable (``zhong`` ->
    ``zh*``, ``an`` -> ``a*``: what training puts in place of an abbreviated syllable) and on a typed
    prefix (``zho`` -> ``zh*``, ``z`` -> ``z*``). Raises ValueError for an empty string."""
    if not letters:
        raise ValueError("an empty string has no prefix token")
    return (letters[:2] if letters[:2] in RETROFLEX else letters[0]) + PREFIX


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


@functools.lru_cache(maxsize=None)
def begun_by(prefix: str) -> tuple[str, ...]:
    """The syllables a typed prefix stands for: those it begins that share its model token, so ``z`` stands
    for za ... zuo but not zh syllables (fuzzy ``z-zh`` adds those), ``zh`` for zha ... zhuo. A lone ``z``
    piece has a second reading, ``zh*``, for those (see typed_input's _RETROFLEX_READING)."""
    token = prefix_token(prefix)
    return tuple(sorted(s for s in syllables() if s.startswith(prefix) and prefix_token(s) == token))


def split_key(variant: str) -> tuple[str, str]:
    """(toneless variant, tone digit or "")."""
    return (variant[:-1], variant[-1]) if variant[-1:].isdigit() else (variant, "")


def typed_variant(key: str) -> tuple[str, str]:
    """(toneless variant, tone digit or "") of the variant typed, the first: fuzzy pairs add theirs after it
    (``n*4|l*4`` -> ``n*``, ``4``)."""
    return split_key(key.split("|")[0])


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
        base, tone = split_key(variant)
        if base.endswith(PREFIX):
            toned = toned_syllable_table()
            found.update((s + tone, None) for s in begun_by(base[:-1]) if not tone or s + tone in toned)
        else:
            found[variant] = None
    return tuple(found)


def alternatives(pieces: list[Piece], limit: int = 4) -> list[Option]:
    """Up to ``limit`` whole-input readings, ranked by total piece score, ties in the pieces' order (see
    :func:`spoken_alternatives`)."""
    return [reading for reading, _ in spoken_alternatives(pieces, limit)]


def spoken_alternatives(pieces: list[Piece], limit: int = 4) -> list[tuple[Option, tuple[str, ...]]]:
    """Up to ``limit`` whole-input readings, ranked by total piece score, ties in the pieces' order, each
    with what a syllable model should score: its tokens, except that a letter typed alone that is a
    syllable itself and read as an abbreviation (a lone ``e`` read as e*, a lone ``n`` as n*) counts as
    that syllable. A piece's options never differ in how many prefix pieces they have (typed_input's ``_split_run``
    keeps the fewest) except for a lone a o e, which is also its own syllable's abbreviation with that
    syllable's score, and a lone n or m standing as a clause (see abbreviations.interjections_alone), whose
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
        letters = typed_variant(option[0][1])[0].removesuffix(PREFIX)
        if letters in syllables():
            return (letters,)
    return tuple(token for token, _ in option)

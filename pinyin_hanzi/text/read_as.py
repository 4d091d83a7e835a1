"""What each character of a conversion was read as (``Candidate.read_as``: translate.py --nbest and --json,
the service's ``reading``), where the typed key allowed several syllables: an abbreviation (``sh`` for any
sh- syllable) or a fuzzy pair (``zi|zhi``).

The lexicon (text/lexicon.py) knows which syllables of a key a character may stand for, but not which one
the text means: it takes the first in the alphabet, and 说 typed as ``sh`` came out read shui (游说) rather
than shuo, 思 typed as ``s`` sai (于思) rather than si. The reading reported is the one the text itself gives
the character, as pypinyin reads the whole conversion (长 in 长大 is zhang, 还 in 还原 huan), where the key
allows it; else the character's most used reading the key allows (pypinyin's order of readings, the most
used first); else what the lexicon says.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

from pypinyin.pinyin_dict import pinyin_dict

from pinyin_hanzi.text.lexicon import Lexicon
from pinyin_hanzi.text.pieces import split_key
from pinyin_hanzi.text.pinyin import hanzi_to_tokens, toneless
from pinyin_hanzi.text.typed_input import is_syllable_set_key, key_syllables


def syllables_read(lexicon: Lexicon, chars: Sequence[str], keys: Sequence[str]) -> list[str]:
    """The syllable each of ``chars`` (a conversion, one character per key) was read as under its constraint
    key: :meth:`Lexicon.syllable_of`, except that of the syllables a prefix or fuzzy key allows the character,
    the one the text reads it with comes first (toned where the key is toned)."""
    if not any(is_syllable_set_key(key) for key in keys):  # no choice to make: the lexicon's answer is the key
        return [lexicon.syllable_of(char, key) for char, key in zip(chars, keys)]
    heard = hanzi_to_tokens("".join(chars)) or [None] * len(chars)  # None: some hanzi pypinyin cannot read
    return [_read_as(lexicon, char, key, said) for char, key, said in zip(chars, keys, heard)]


def _read_as(lexicon: Lexicon, char: str, key: str, heard: str | None) -> str:
    syllables = key_syllables(key) if is_syllable_set_key(key) else ()
    if len(syllables) < 2:
        return lexicon.syllable_of(char, key)
    usual = _reading_order(char)

    def rank(syllable: str) -> tuple[int, int]:
        base = split_key(syllable)[0]
        return (base != heard, usual.get(base, len(usual)))

    # The key's syllables in that order, as a fuzzy key: the lexicon then picks the first it lets the
    # character stand for, by its own rules (usual readings, tones, a user dictionary's added readings).
    return lexicon.syllable_of(char, "|".join(sorted(syllables, key=rank)))


@functools.lru_cache(maxsize=1 << 14)
def _reading_order(char: str) -> dict[str, int]:
    """Toneless syllable -> its rank among the character's readings in pypinyin's table (0: the most used)."""
    order: dict[str, int] = {}
    for reading in pinyin_dict.get(ord(char), "").split(",") if len(char) == 1 else ():
        order.setdefault(toneless(reading), len(order))
    return order

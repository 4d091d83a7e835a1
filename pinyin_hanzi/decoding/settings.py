"""What one conversion call searches and reads with, decided once per call and nowhere else.

The :class:`~pinyin_hanzi.decoding.converter.Converter` holds one DecodeConfig; a call's own arguments
replace its fields (``dataclasses.replace``, the beam by :func:`pinyin_hanzi.config.search_beam`), and from
that one DecodeConfig come:

- :class:`SearchSettings`, which the search runs as it is given (search.py decides nothing): the beam, the
  wider beam of a reading with abbreviations, constrained or not, and the fused language models, if any;
- :class:`TypingOptions`, how the planner reads typed letters (prefixes, fuzzy pairs, shuangpin).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from pinyin_hanzi.config import DecodeConfig, prefixes_on
from pinyin_hanzi.decoding.search import LanguageModel, NgramFusion
from pinyin_hanzi.text.shuangpin import layout_named
from pinyin_hanzi.text.typed_input import fuzzy_pairs, is_prefix_key


@dataclass(frozen=True)
class SearchSettings:
    """How one call searches."""

    beam: int  # the width of a reading of full syllables; 1: greedy
    prefix_beam: int  # the width of a reading with an abbreviated syllable: at least beam; greedy stays greedy
    constrained: bool  # only characters whose reading matches the syllable may be chosen
    fusion: NgramFusion | None  # the language models added to the scores; None: the Transformer alone

    @classmethod
    def from_config(cls, decode: DecodeConfig, *, char_lm: LanguageModel | None = None,
                    word_lm: LanguageModel | None = None, user_lm: LanguageModel | None = None,
                    history_lm: LanguageModel | None = None) -> SearchSettings:
        """The search ``decode`` asks for (its beam is the call's: see :func:`pinyin_hanzi.config.search_beam`).

        A model is fused where it is there and its weight (decode.lm_weight, decode.word_weight,
        decode.user_weight) is > 0. The n-gram and word models only in beam search: greedy decoding,
        committing to one character at a time, loses accuracy with them while beam search gains. The user
        dictionary's model (user_words.py) at any beam: it scores 0 but where a user word is finished, so a
        greedy search that has chosen a word's first characters finishes it as the user wants. A reading with
        an abbreviated syllable (``b j``) is searched at least at decode.prefix_beam: each such place allows
        the characters of every syllable it may begin, and a beam of the usual width loses the right one
        among them. The user history's cache model (history_lm.py), too, at any beam: a greedy search learns.
        """
        beam = decode.beam
        fused = [(model, weight) for model, weight in ((char_lm, decode.lm_weight), (word_lm, decode.word_weight))
                 if model is not None and weight > 0 and beam > 1]
        fused += [(model, weight) for model, weight in ((user_lm, decode.user_weight),
                                                         (history_lm, decode.history_weight))
                  if model is not None and weight > 0]
        return cls(beam=beam, prefix_beam=max(beam, decode.prefix_beam) if beam > 1 else beam,
                   constrained=decode.constrained, fusion=NgramFusion(fused) if fused else None)

    def width(self, keys: Sequence[str]) -> int:
        """The beam of a reading with these lexicon keys: ``prefix_beam`` if one is an abbreviation."""
        return self.prefix_beam if any(is_prefix_key(key) for key in keys) else self.beam


@dataclass(frozen=True)
class TypingOptions:
    """How one call reads typed letters: :func:`pinyin_hanzi.text.typed_input.parse_pieces`' options."""

    prefixes: bool = False  # letters that begin a syllable stand for any syllable they begin (bei j, wxqbj)
    fuzzy: frozenset[str] = frozenset()  # names of typed_input.FUZZY_PAIRS (z-zh, n-l, ...)
    shuangpin: str | None = None  # a layout of shuangpin.LAYOUTS; None: full pinyin

    @classmethod
    def from_config(cls, decode: DecodeConfig, *, trained_with_prefixes: bool) -> TypingOptions:
        """The reading ``decode`` asks for: decode.prefixes "auto" is on exactly for a model trained with
        abbreviations. DataError (one line) for an unknown fuzzy pair or shuangpin layout."""
        prefixes = prefixes_on(decode.prefixes, trained_with_prefixes)
        return cls(prefixes=prefixes, fuzzy=fuzzy_pairs(decode.fuzzy),
                   shuangpin=layout_named(decode.shuangpin).name if decode.shuangpin else None)

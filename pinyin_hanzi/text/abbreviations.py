"""What reading letters as abbreviations (the ``prefixes`` parse option of
:func:`pinyin_hanzi.text.typed_input.parse_pieces`) needs beyond segmentation, applied to the parsed pieces of
a line, in place or as a new list: a word spelled as separate letters passes through (:func:`spell_out`), a
lone ``n`` or ``m`` standing as a clause is the interjection first (:func:`interjections_alone`), and a
stretch of more abbreviations than anyone types passes through (:func:`pass_through_long_abbreviations`)."""

from __future__ import annotations

import itertools
import unicodedata

from pinyin_hanzi.text.fuzzy import widened
from pinyin_hanzi.text.pieces import (
    PREFIX,
    Piece,
    is_pass_through,
    is_prefix_token,
    literal_piece,
    pass_through_text,
    typed_variant,
)

_INTERJECTION_PREFIXES = ("n" + PREFIX, "m" + PREFIX)  # the prefix tokens of lone n and m


def spell_out(pieces: list[Piece], single_letters: list[tuple[int, str, bool]]) -> None:
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
                pieces[index] = literal_piece(letter)


def interjections_alone(pieces: list[Piece], score, fuzzy: frozenset[str]) -> None:
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
        typed, tone = typed_variant(key)  # the typed prefix: n*, n*4
        if token not in _INTERJECTION_PREFIXES or typed != token:
            continue
        neighbours = [i for i in (index - 1, index + 1) if 0 <= i < len(pieces)]
        if not neighbours or not all(map(is_punctuation, neighbours)):
            continue
        syllable = ((token[:-1], token[:-1] + tone),)  # n* -> n, n*4 -> n4, widened as any syllable
        pieces[index] = Piece((widened(syllable, fuzzy) if fuzzy else syllable, option),
                              (score("<s>", token[:-1]), score("<s>", token)), piece.typed)


# More abbreviations in a row than this are no abbreviation: the longest clause the configs train on
# (data.max_len 32) abbreviated whole. Each abbreviated letter costs a wide beam search over every character
# of the syllables it begins (3 ms each with the shipped model: 20,000 letters of x took 106 s).
LONGEST_ABBREVIATION = 32


def pass_through_long_abbreviations(pieces: list[Piece]) -> list[Piece]:
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
            for literal in ([literal_piece(char) for char in piece.typed] if index in marked else [piece])]

"""The lexicon: which hanzi may stand for a constraint key. Shared by the training loss (``for_vocab``) and
search (the allowed characters of each position).

A key is a toneless syllable (``ni``), a toned one (``ni3``, neutral tone ``de5``), a syllable prefix
(``zho*``, toned ``b*3``: any syllable it begins), a fuzzy key (``zi|zhi``: any of its variants) or a
literal key (``=。``, a character typed to pass through as itself); a fuzzy key's variants may include a
literal one (``o|=o``: the key of a corpus token, see :func:`token_key`);
:func:`pinyin_hanzi.text.typed_input.key_syllables` says which syllables a key stands for. With a tone, only
characters with that toned reading may be chosen; a pass-through character may only become itself. Where
the vocabulary has no candidate (a syllable whose characters never occurred in training, a symbol never
seen), the row allows ``<unk>`` and keeps a fallback: the first character of the reading table, or the
symbol itself.

A syllable key stands for characters with that reading only, also a single-letter one (``a``, ``o``, ``e``,
``n``, ``m``): what a user types as a syllable always becomes a character read so. And only for characters
it is a usual reading of (:func:`pinyin_hanzi.text.pinyin.usual_readings`): 洗 is read xi, and its rare reading
xian (a surname) is no candidate of ``xian``. Text almost never has such readings (0.03% of the shipped
model's training hanzi), so the model never learns to rule them out, and the character n-gram model, which
knows characters and not readings, scores 洗 after 去 as if it were read xi (去洗澡): ``woxiangquxian`` came
out as 我想去洗. The quickstart data's characters had 1,367 such readings (是 ti, 年 ning, 省 xian).

A corpus token is different: the ``o`` of ``Python`` and the ``o`` of 哦 are the same token, so
:func:`token_key` lets a single-letter syllable token also be that Latin letter (for the training loss and
``convert_tokens``).
"""

from __future__ import annotations

import functools
import re
from typing import Iterable, Mapping

import torch
from torch.nn.utils.rnn import pad_sequence

from pinyin_hanzi.data.vocab import PAD_ID, SPECIALS, UNK_ID, Vocab
from pinyin_hanzi.text.pinyin import syllable_table, syllables, toned_syllable_table, usual_readings
from pinyin_hanzi.text.pieces import split_key
from pinyin_hanzi.text.typed_input import is_literal_key, is_syllable_set_key, key_syllables, literal_key

PAD_ROW = 0  # the row of positions past the end of a sequence: only <pad>, with probability 1
_TONE = re.compile(r"\d(?=\||$)")  # the tone digit of each variant of a key


def _syllable_characters(key: str) -> tuple[str, ...]:
    """The characters of one syllable key, toned or not (see :meth:`Lexicon.characters`): those it is a usual
    reading of (:func:`pinyin_hanzi.text.pinyin.usual_readings`), or, for a syllable no character usually has,
    all with that reading."""
    chars = None
    if key[-1:].isdigit() and key[:-1].isalpha():
        chars = toned_syllable_table().get(key)
        key = key[:-1]
    chars = chars or syllable_table().get(key)
    if not chars:
        return (key,)
    usual = usual_readings()
    return tuple(char for char in chars if key in usual.get(char, ())) or chars


def token_key(token: str) -> str:
    """The constraint key of a corpus token (a model input token of a corpus text, not typed input): a
    syllable or prefix token is its own key, except that a single-letter syllable (``o``) may also be that
    Latin letter (``o|=o``), as in the tokens of ``Python``; any other single character is a literal key
    (``，`` -> ``=，``)."""
    if token in syllables():
        return f"{token}|{literal_key(token)}" if len(token) == 1 else token
    return literal_key(token) if len(token) == 1 else token


@functools.lru_cache(maxsize=None)
def _character_set(syllable: str) -> frozenset[str]:
    return frozenset(_syllable_characters(syllable))


class Lexicon:
    """Constraint key -> allowed hanzi ids, as rows of a boolean (n_rows, v) table; row :data:`PAD_ROW`
    allows <pad> alone. Rows are added as keys are first asked for."""

    def __init__(self, hanzi_vocab: Vocab, readings: Mapping[str, Iterable[tuple[str, int | None]]] | None = None):
        """``readings``: toneless syllable -> (character, tone 1..5 or None: any) of readings to allow besides
        the reading tables' (a user dictionary's, lm/user_words.py): each character may then stand for a key
        of that syllable (with that tone, where the key has one) as if the tables listed it."""
        self.hanzi_vocab = hanzi_vocab
        self.readings = {syllable: tuple(entries) for syllable, entries in (readings or {}).items()}
        self.unconstrained = torch.ones(len(hanzi_vocab), dtype=torch.bool)  # (v,): any character but specials
        self.unconstrained[: len(SPECIALS)] = False
        pad_only = torch.zeros(len(hanzi_vocab), dtype=torch.bool)
        pad_only[PAD_ID] = True
        self.rows: dict[str, int] = {}
        self.fallbacks: list[str | None] = [None]  # per row: the fixed output when no candidate is in the vocab
        self._masks: list[torch.Tensor] = [pad_only]
        self._table: torch.Tensor | None = None
        self._ids: list[torch.Tensor] = [torch.tensor([PAD_ID])]  # per row: the allowed ids, increasing

    @staticmethod
    def characters(key: str) -> tuple[str, ...]:
        """Characters that may stand for ``key`` (any, not only those in the vocabulary). A toned syllable
        no character has (``ni5``) counts as toneless. A single-letter syllable (a, o, e, n, m) may also
        be that Latin letter only in a key that says so (``o|=o``, :func:`token_key`); a literal key
        (``=o``, typed input that is not pinyin) only itself. A prefix or fuzzy key stands for the union of
        the characters of its syllables (:func:`key_syllables`): each syllable's characters in the reading
        table's order, syllables in key_syllables' order, then the characters of its literal variants, each
        character once; a toned prefix whose tone no syllable it begins has counts as toneless. A key that
        stands for no character at all is its own fallback."""
        if is_literal_key(key):
            return (key[1],)
        if not is_syllable_set_key(key):
            return _syllable_characters(key)
        syllables = key_syllables(key)
        if not syllables:  # a toned prefix (zho*5) whose tone none of its syllables has
            syllables = key_syllables(_TONE.sub("", key))
        found: dict[str, None] = {}
        for syllable in syllables:
            found.update(dict.fromkeys(_syllable_characters(syllable)))
        found.update((variant[1], None) for variant in key.split("|") if is_literal_key(variant))
        return tuple(found) or (key,)

    def syllable_of(self, char: str, key: str) -> str:
        """The syllable of ``key`` that ``char`` was chosen as: for a prefix or fuzzy key the first of its
        syllables (:func:`key_syllables`, toned if the key is) that ``char`` has among its characters (or among
        the added :attr:`readings`), else its first syllable (a fallback, or unconstrained output); for a
        syllable key the key itself; for a literal key the character."""
        if is_literal_key(key):
            return char
        if not is_syllable_set_key(key):
            return key
        syllables = key_syllables(key) or key_syllables(_TONE.sub("", key))
        found = next((syllable for syllable in syllables if char in _character_set(syllable)
                      or (self.readings and char in self._added_characters(syllable))), None)
        return found or (syllables[0] if syllables else key)

    def row(self, key: str) -> int:
        """The table row of ``key``, added on first use."""
        if key not in self.rows:
            chars = self.characters(key)
            if self.readings:
                chars = tuple(dict.fromkeys(chars + self._added_characters(key)))
            mask = torch.zeros(len(self.hanzi_vocab), dtype=torch.bool)
            ids = [self.hanzi_vocab.ids[char] for char in chars if char in self.hanzi_vocab]
            mask[ids if ids else [UNK_ID]] = True
            self.rows[key] = len(self._masks)
            self._masks.append(mask)
            self._ids.append(mask.nonzero().flatten())
            self.fallbacks.append(None if ids else chars[0])
            self._table = None
        return self.rows[key]

    def _added_characters(self, key: str) -> tuple[str, ...]:
        """The characters of :attr:`readings` that may stand for ``key``: a reading without a tone stands for
        its syllable in any tone."""
        found = []
        for syllable in key_syllables(key):
            base, tone = split_key(syllable)
            found += [char for char, char_tone in self.readings.get(base, ())
                      if not tone or char_tone is None or char_tone == int(tone)]
        return tuple(found)

    def fallback(self, key: str) -> str | None:
        """The character ``key`` becomes without the model (none of its characters is in the vocabulary),
        or None."""
        return self.fallbacks[self.row(key)]

    def table(self) -> torch.Tensor:
        """(n_rows, v) bool: the allowed characters of each row."""
        if self._table is None:
            self._table = torch.stack(self._masks)
        return self._table

    def ids(self, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The allowed characters of ``rows`` (any shape) as lists: (..., c) hanzi ids in increasing order,
        padded with <pad> on the right, and (..., c) bool, True at real entries; c = the most any of these
        rows has."""
        used, inverse = rows.unique(return_inverse=True)
        lists = [self._ids[row] for row in used.tolist()]
        ids = pad_sequence(lists, batch_first=True, padding_value=PAD_ID)  # (rows used, c)
        # real where within its list's length (PAD_ROW's one <pad> is real)
        real = torch.arange(ids.shape[1]) < torch.tensor([len(row) for row in lists])[:, None]
        return ids[inverse], real[inverse]

    def for_vocab(self, pinyin_vocab: Vocab) -> tuple[torch.Tensor, torch.Tensor]:
        """The candidates of each source id, for the training loss: hanzi ids (pinyin vocab size, c) and
        (pinyin vocab size, c) bool, True at real entries (see :meth:`ids`). Special ids and <unk> have none
        (their raw token is unknown; the loss then counts the reference character alone)."""
        rows = torch.tensor([PAD_ROW if index < len(SPECIALS) else self.row(token_key(token))
                             for index, token in enumerate(pinyin_vocab.tokens)])
        ids, real = self.ids(rows)
        real[: len(SPECIALS)] = False
        return ids, real

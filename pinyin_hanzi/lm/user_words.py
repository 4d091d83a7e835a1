"""A user dictionary: words a user wants, preferred by the search wherever the typed syllables allow them,
with no training and no change to the checkpoint (decode.user_words, ``translate.py --user-words FILE``).

The file, UTF-8, one word a line, fields separated by tabs or spaces::

    # comments and blank lines are ignored
    数据透视表
    重庆  chong2 qing4        a reading for each character (tone digits, tone marks or none)
    单元格  5                 a weight (default 1): a number, the last field
    乐高 le4 gao1  2.5

A line that does not fit (no hanzi word, a reading with the wrong number of syllables or an unknown one, a
weight that is no positive number, bytes that are not UTF-8) is skipped and counted: :attr:`UserWords.note`
says how many, why and where, in one line. A file that is missing, unreadable or has no usable word is a
DataError (one line).

How the search prefers the words: a word model over them (:class:`~pinyin_hanzi.lm.word.WordLexiconLM`,
the model decode.word_weight fuses) read as the log-ratio of two models of the text. In one, every hanzi of
the vocabulary is a word of probability 1/V (V hanzi), and each user word of L characters may also come
whole, with probability weight x (e/V)^L; the other has the single characters alone. Text without a user
word scores 0 (the ratio is 1); a user word, once its last character is there, log(1 + weight x e^L): about
one nat per character (2.1 for two characters of weight 1, 4.0 for four), which decode.user_weight scales.
The word earns that share as its characters come: a beginning of k >= 2 characters counts
log(1 + weight x e^k) (the model's prefix masses are set so), or a beam search would drop a word's beginning
before the word is finished (王景廷 for wang jing ting lost to 王警厅 in a sentence); a word begun and not
finished gives it all back at the next character (the scores of a text telescope to its log-ratio, which
counts finished words only). A first character alone earns nothing: credited, the first characters of a
dictionary's words filled the beam, and a dictionary of 1,294 LibreOffice terms then cost everyday text
(People's Daily valid clauses 5.38% -> 6.35% CER at decode.user_weight 2, against 5.50% without that
credit). Words longer than the word model's 4 characters are stored as pieces of 2-4 characters each
(数据透视表: 数据透 + 视表), all of which the text must then hold.

Readings: a character's reading given in the file is added to the lexicon (text/lexicon.py) where the
lexicon lacks it (a rare reading, a name's, a dialect's), for that character everywhere, so that the word
can be typed as the file spells it. The word is preferred wherever its characters may be typed, not only
under the reading the file gives: the word model scores characters, not syllables.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import torch
from pypinyin.contrib.tone_convert import to_tone3

from pinyin_hanzi.data.vocab import Vocab
from pinyin_hanzi.errors import DataError
from pinyin_hanzi.lm.word import MAX_WORD_LEN, WordLexiconLM, word_key
from pinyin_hanzi.text.pinyin import is_hanzi, syllables

PER_CHARACTER = math.e  # a finished user word of L characters and weight w scores log(1 + w * PER_CHARACTER ** L)
CREDITED_FROM = 2  # the shortest beginning of a word that earns its share before the word is finished
WINDOW = MAX_WORD_LEN + 2  # characters of context the model reads, as the checkpoints' word models do
MAX_SHOWN = 3  # examples (line numbers, words) a note shows per reason
MAX_BYTES = 64 * 2**20  # millions of words; a larger file is no dictionary (and would be read whole)
_FIELDS = re.compile(r"[\s']+")  # tabs, spaces and syllable-separating apostrophes
_SYLLABLE = re.compile(r"([a-z]+)([0-5]?)")
Reading = tuple[str, str, int | None]  # (character, toneless syllable, tone 1..5 or None)


@dataclass
class UserWords:
    """A user dictionary as read: word -> weight, the readings its lines give, the lines skipped."""

    path: Path
    weights: dict[str, float] = field(default_factory=dict)  # the largest weight a word's lines give
    readings: set[Reading] = field(default_factory=set)
    skipped: Counter = field(default_factory=Counter)  # reason -> lines
    skipped_at: dict[str, list[int]] = field(default_factory=dict)  # reason -> the first line numbers
    unavailable: list[str] = field(default_factory=list)  # words the model cannot write (set by model())

    @classmethod
    def read(cls, path: str | Path) -> UserWords:
        """The dictionary at ``path``. DataError (one line) if it is missing, not a regular file, larger than
        MAX_BYTES, unreadable or has no usable word."""
        path = Path(path)
        if not path.exists():
            raise DataError(f"user words file not found: {path}")
        if not path.is_file():  # a directory; a FIFO or device would be read without end
            raise DataError(f"cannot read user words from {path}: not a regular file")
        try:
            if path.stat().st_size > MAX_BYTES:
                raise DataError(f"{path} is larger than {MAX_BYTES // 2**20} MiB: a user dictionary is a word a line")
            data = path.read_bytes()
        except OSError as error:
            raise DataError(f"cannot read user words from {path}: {error.strerror or error}") from None
        words = cls(path)
        for number, raw in enumerate(data.removeprefix(b"\xef\xbb\xbf").splitlines(), 1):
            words._add_line(number, raw)
        if not words.weights:
            raise DataError(f"{path} has no usable user word{words._skipped_text(' (', ')')}: expected a word of "
                            f"hanzi a line, optionally its pinyin and a weight")
        return words

    def _add_line(self, number: int, raw: bytes) -> None:
        try:
            line = unicodedata.normalize("NFC", raw.decode("utf-8")).split("#", 1)[0].strip()
        except UnicodeDecodeError:
            return self._skip(number, "not UTF-8")
        if not line:
            return None
        word, *rest = _FIELDS.split(line)
        weight = 1.0
        if rest and _is_number(rest[-1]):
            weight = float(rest.pop())
            if not (math.isfinite(weight) and weight > 0):
                return self._skip(number, "weight not a positive number")
        if not all(is_hanzi(char) for char in word):
            return self._skip(number, "not a word of hanzi")
        readings = [_reading(text) for text in rest]
        if rest and (None in readings):
            return self._skip(number, "unknown syllable")
        if rest and len(readings) != len(word):
            return self._skip(number, "not one syllable per character")
        self.weights[word] = max(weight, self.weights.get(word, 0.0))
        self.readings.update((char, *reading) for char, reading in zip(word, readings))
        return None

    def _skip(self, number: int, reason: str) -> None:
        self.skipped[reason] += 1
        shown = self.skipped_at.setdefault(reason, [])
        if len(shown) < MAX_SHOWN:
            shown.append(number)

    def _skipped_text(self, before: str = "", after: str = "") -> str:
        if not self.skipped:
            return ""
        reasons = "; ".join(f"{count} {reason} (line {', '.join(map(str, self.skipped_at[reason]))}"
                            f"{', ...' if count > MAX_SHOWN else ''})" for reason, count in self.skipped.most_common())
        return f"{before}{sum(self.skipped.values())} line(s) skipped: {reasons}{after}"

    @property
    def note(self) -> str | None:
        """One line on what was left out (lines skipped, words the model cannot write), or None."""
        parts = [self._skipped_text()] if self.skipped else []
        if self.unavailable:
            shown = ", ".join(self.unavailable[:MAX_SHOWN]) + (", ..." if len(self.unavailable) > MAX_SHOWN else "")
            parts.append(f"{len(self.unavailable)} word(s) with a character the model cannot write left out "
                         f"({shown})")
        return f"note: user words {self.path}: {'; '.join(parts)}" if parts else None

    def model(self, hanzi_vocab: Vocab) -> WordLexiconLM:
        """The word model that prefers these words (see the module's docstring), over ``hanzi_vocab``; the
        words with a character outside it are listed in :attr:`unavailable`. DataError (one line) if no
        word is left."""
        self.unavailable = [word for word in self.weights if any(char not in hanzi_vocab.ids for char in word)]
        pieces: dict[str, float] = {}
        for word, weight in self.weights.items():
            if word not in self.unavailable:
                for piece in _pieces(word):
                    pieces[piece] = max(weight, pieces.get(piece, 0.0))
        if not pieces:
            raise DataError(f"{self.path}: none of its {len(self.weights)} words can be written with the model's "
                            f"characters (e.g. {self.unavailable[0]})")
        return _ratio_model(pieces, hanzi_vocab)

    def lexicon_readings(self) -> dict[str, set[tuple[str, int | None]]]:
        """Toneless syllable -> (character, tone or None) of the readings the file gives, for
        :class:`~pinyin_hanzi.text.lexicon.Lexicon`."""
        found: dict[str, set[tuple[str, int | None]]] = {}
        for char, syllable, tone in self.readings:
            found.setdefault(syllable, set()).add((char, tone))
        return found

    def __len__(self) -> int:
        return len(self.weights)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _reading(text: str) -> tuple[str, int | None] | None:
    """(toneless syllable, tone 1..5 or None) of one syllable as a file writes it (``zhong4``, ``zhòng``,
    ``lv``, ``lü``, ``lu:``, neutral tone ``de5`` or ``de0``), or None if it is no syllable."""
    text = to_tone3(text.lower().replace("u:", "ü"), v_to_u=False, neutral_tone_with_five=False)
    match = _SYLLABLE.fullmatch(text)
    if match is None or match[1] not in syllables():
        return None
    return match[1], (int(match[2]) or 5) if match[2] else None


def _pieces(word: str) -> list[str]:
    """``word`` in as few pieces of at most MAX_WORD_LEN characters as it takes, as even as can be (a word of
    5 characters: 3 + 2), so that no piece of a long word is a lone character."""
    count = -(-len(word) // MAX_WORD_LEN)
    size, extra = divmod(len(word), count)
    bounds = [0]
    for index in range(count):
        bounds.append(bounds[-1] + size + (index < extra))
    return [word[start:end] for start, end in zip(bounds, bounds[1:])]


def _ratio_model(words: dict[str, float], hanzi_vocab: Vocab) -> WordLexiconLM:
    """The log-ratio model of the module's docstring, over ``words`` (word -> weight): column 0 the single
    hanzi at 1/V with the words on top, column 1 (the background) the single hanzi alone. A word of L
    characters has the mass weight x (PER_CHARACTER / V) ** L, and a beginning of k characters the mass
    weight x (PER_CHARACTER / V) ** k of the heaviest word it begins, so that a word earns its share as its
    characters come (the search keeps a word's beginning while the rest is still to come)."""
    is_word_char = torch.tensor([len(token) == 1 and is_hanzi(token) for token in hanzi_vocab.tokens])
    single = 1 / int(is_word_char.sum())  # 1/V
    base = {word_key([index], len(hanzi_vocab)): single for index in is_word_char.nonzero().flatten().tolist()}
    word_mass, prefix_weight = dict(base), {}
    for word, weight in words.items():
        ids = hanzi_vocab.encode(word)
        key = word_key(ids, len(hanzi_vocab))
        word_mass[key] = word_mass.get(key, 0.0) + weight * (PER_CHARACTER * single) ** len(word)
        for length in range(CREDITED_FROM, len(word) + 1):
            beginning = word_key(ids[:length], len(hanzi_vocab))
            prefix_weight[beginning] = max(weight, prefix_weight.get(beginning, 0.0))
    prefix_mass = dict(base)
    for key, weight in prefix_weight.items():
        length = key // len(hanzi_vocab) ** MAX_WORD_LEN
        prefix_mass[key] = prefix_mass.get(key, 0.0) + weight * (PER_CHARACTER * single) ** length
    tables = []
    for masses in (word_mass, prefix_mass):  # columns: with the words, the single hanzi alone (log 0 = -inf)
        keys = torch.tensor(sorted(masses), dtype=torch.long)
        columns = torch.tensor([[masses[key], base.get(key, 0.0)] for key in keys.tolist()], dtype=torch.float64)
        tables.append((keys, columns.log()))
    (keys, columns), prefixes = tables
    return WordLexiconLM(len(hanzi_vocab), keys, columns[:, 0], is_word_char, WINDOW, columns[:, 1],
                         prefix_table=(prefixes[0], prefixes[1].float()))

"""A user dictionary: words a user wants, preferred by the search wherever the typed syllables allow them,
with no training and no change to the checkpoint (decode.user_words, ``translate.py --user-words FILE``).

The file, UTF-8, one word a line, fields separated by tabs or spaces::

    # comments and blank lines are ignored
    数据透视表
    重庆  chong2 qing4        a reading for each character (tone digits, tone marks or none)
    单元格  5                 a weight (default 1): a number, the last field (nan is a syllable, 难)
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

import functools
import math
import re
import stat
import sys
import unicodedata
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from pypinyin.contrib.tone_convert import to_tone3
from tqdm import tqdm

from pinyin_hanzi.data.vocab import Vocab
from pinyin_hanzi.errors import DataError
from pinyin_hanzi.lm.word import MAX_WORD_LEN, WordLexiconLM
from pinyin_hanzi.text.pinyin import HANZI_CLASS, is_hanzi, syllables

PER_CHARACTER = math.e  # a finished user word of L characters and weight w scores log(1 + w * PER_CHARACTER ** L)
CREDITED_FROM = 2  # the shortest beginning of a word that earns its share before the word is finished
WINDOW = MAX_WORD_LEN + 2  # characters of context the model reads, as the checkpoints' word models do
MAX_SHOWN = 3  # examples (line numbers, words) a note shows per reason
MAX_BYTES = 64 * 2**20  # millions of words; a larger file is no dictionary (and would be read whole)
_SYLLABLE = re.compile(r"([a-z]+)([0-5]?)")
_HANZI_WORD = re.compile(f"[{HANZI_CLASS}]+")
_LINE_END = re.compile(r"\r\n|\r|\n")  # where bytes.splitlines splits
# The usual line: a word; its syllables in lower-case letters, tone-marked or with a tone digit; a weight in
# digits (never so many that it is infinite). Any other line is read field by field.
_PLAIN_LINE = re.compile(rf"[ \t]*([{HANZI_CLASS}]+)"  # the word
                         r"((?:[ \t']+[a-zāáǎàēéěèīíǐìōóǒòūúǔùüǖǘǚǜ]+[0-5]?)*)"  # its syllables
                         r"(?:[ \t]+([0-9]{1,15}(?:\.[0-9]{1,15})?))?[ \t]*")  # its weight
PROGRESS_AFTER = 2.0  # seconds: a dictionary that takes longer to read shows a progress bar (on a terminal)
_LINES_PER_UPDATE = 1 << 16  # lines read between two updates of the progress bar
_NO_KEYS, _NO_WEIGHTS = np.zeros(0, np.int64), np.zeros(0)  # (a dictionary of single characters has no beginnings)
Reading = tuple[str, str, int | None]  # (character, toneless syllable, tone 1..5 or None)


@dataclass
class UserWords:
    """A user dictionary as read: word -> weight, the readings its lines give, the lines skipped."""

    path: Path
    weights: dict[str, float] = field(default_factory=dict)  # the largest weight a word's lines give
    # (character, (toneless syllable, tone)) of each reading the lines give: pairs, which a set takes from zip()
    # without a call per character (a 60 MB file has millions); :attr:`readings` spells them out
    given: set[tuple[str, tuple[str, int | None]]] = field(default_factory=set)
    skipped: Counter = field(default_factory=Counter)  # reason -> lines
    skipped_at: dict[str, list[int]] = field(default_factory=dict)  # reason -> the first line numbers
    unavailable: list[str] = field(default_factory=list)  # words the model cannot write (set by model())
    # While the lines are read: the words whose lines give readings, the syllables as typed (one per
    # character, in order), and the typed syllables known to be syllables
    _spelled: list[str] = field(default_factory=list, init=False, repr=False)
    _typed: list[str] = field(default_factory=list, init=False, repr=False)
    _known: set[str] = field(default_factory=set, init=False, repr=False)

    @staticmethod
    def check(path: str | Path) -> Path:
        """``path`` as a Path if it can be a user dictionary, without reading it: DataError (one line) if it
        is missing, not a regular file, larger than MAX_BYTES or cannot be looked at. What a tool checks
        before it loads a model, and export before it names the file in a checkpoint."""
        path = Path(path)
        try:
            mode, size = (status := path.stat()).st_mode, status.st_size
        except FileNotFoundError:
            raise DataError(f"user words file not found: {path}") from None
        except (OSError, ValueError) as error:  # no permission to look, a name too long, a NUL in the name
            reason = getattr(error, "strerror", None) or error
            raise DataError(f"cannot read user words from {path}: {reason}") from None
        if not stat.S_ISREG(mode):  # a directory; a FIFO or device would be read without end
            raise DataError(f"cannot read user words from {path}: not a regular file")
        if size > MAX_BYTES:
            raise DataError(f"{path} is larger than {MAX_BYTES // 2**20} MiB: a user dictionary is a word a line")
        return path

    @classmethod
    def read(cls, path: str | Path) -> UserWords:
        """The dictionary at ``path``. DataError (one line) as :meth:`check` raises it, or if it cannot be
        read or has no usable word. A file that takes more than PROGRESS_AFTER seconds to read (millions of
        words) shows a progress bar on stderr while that is a terminal."""
        path = cls.check(path)
        try:
            data = path.read_bytes()
        except OSError as error:
            raise DataError(f"cannot read user words from {path}: {error.strerror or error}") from None
        words, lines = cls(path), _text_lines(data)
        with tqdm(total=len(lines), desc=f"reading {path.name}", unit=" lines", unit_scale=True, mininterval=1,
                  delay=PROGRESS_AFTER, disable=True if sys.stderr is None else None, file=sys.stderr) as bar:
            for begin in range(0, len(lines), _LINES_PER_UPDATE):
                words._add_lines(lines[begin : begin + _LINES_PER_UPDATE], begin + 1)
                bar.update(min(_LINES_PER_UPDATE, len(lines) - begin))
        # each (character, syllable as typed) once, then each typed syllable read once: per line and character,
        # these calls took most of the time a dictionary with readings took to load
        words.given = {(char, _reading(typed)) for char, typed in set(zip("".join(words._spelled), words._typed))}
        words._spelled, words._typed, words._known = [], [], set()
        if not words.weights:
            raise DataError(f"{path} has no usable user word{words._skipped_text(' (', ')')}: expected a word of "
                            f"hanzi a line, optionally its pinyin and a weight")
        return words

    def _add_lines(self, lines: list[str | None], first: int) -> None:
        """Take ``lines``, numbered from ``first``: a line of the usual form (a word, its syllables in plain
        or tone-marked lower-case letters, a weight in plain digits) as one regular expression reads it, any
        other line, and one that fails a check, as :meth:`_add_line` reads it, which says why it skips one.
        Line by line through _add_line, a file of millions of words took most of a minute."""
        weights, known = self.weights, self._known
        for number, line in enumerate(lines, first):
            plain = _PLAIN_LINE.fullmatch(line) if line is not None else None
            if plain is None:
                self._add_line(number, line)
                continue
            word, typed, weight_text = plain.groups()
            weight = float(weight_text) if weight_text else 1.0
            if typed:
                syllables_typed = typed.replace("'", " ").split()
                if not (weight > 0 and len(syllables_typed) == len(word) and known.issuperset(syllables_typed)):
                    self._add_line(number, line)
                    continue
                self._spelled.append(word)
                self._typed += syllables_typed
            elif not weight > 0:
                self._add_line(number, line)
                continue
            if weight > weights.get(word, 0.0):
                weights[word] = weight

    def _add_line(self, number: int, line: str | None) -> None:
        """Take one line (None: it was not UTF-8), or count why it is skipped."""
        if line is None:
            return self._skip(number, "not UTF-8")
        if "#" in line:
            line = line.split("#", 1)[0]
        # str.split is several times faster than a regular expression, per line of a file of millions
        word, *rest = (line.replace("'", " ") if "'" in line else line).split() or ("",)
        if not word:
            return None
        weight = 1.0
        if rest and _is_number(rest[-1]) and not rest[-1].isalpha():  # nan is a syllable (难 nan), not a weight
            weight = float(rest.pop())
            if not (math.isfinite(weight) and weight > 0):
                return self._skip(number, "weight not a positive number")
        if _HANZI_WORD.fullmatch(word) is None:
            return self._skip(number, "not a word of hanzi")
        if rest:
            if not self._known.issuperset(rest):
                if any(_reading(typed) is None for typed in rest):
                    return self._skip(number, "unknown syllable")
                self._known.update(rest)
            if len(rest) != len(word):
                return self._skip(number, "not one syllable per character")
            self._spelled.append(word)
            self._typed += rest
        if weight > self.weights.get(word, 0.0):
            self.weights[word] = weight
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
        word is left. Built in numpy over all the words at once: word by word, 2.2 million took minutes."""
        words = list(self.weights)
        lengths = np.fromiter(map(len, words), np.int64, len(words))
        codes = np.frombuffer("".join(words).encode("utf-32-le"), dtype="<u4")  # every word's characters
        lookup = np.full(max(int(codes.max()) + 1, 1), -1, np.int64)  # code point -> hanzi id, -1: none
        for token, index in hanzi_vocab.ids.items():
            if len(token) == 1 and ord(token) < len(lookup):
                lookup[ord(token)] = index
        ids = lookup[codes]
        starts = np.cumsum(lengths) - lengths
        writable = np.logical_and.reduceat(ids >= 0, starts)
        self.unavailable = [words[index] for index in np.flatnonzero(~writable)]
        if not writable.any():
            raise DataError(f"{self.path}: none of its {len(self.weights)} words can be written with the model's "
                            f"characters (e.g. {self.unavailable[0]})")
        weights = np.fromiter(self.weights.values(), np.float64, len(words))
        pieces = []  # (ids (n, MAX_WORD_LEN), piece length, weights (n,)) per piece of each word length
        for length in np.unique(lengths[writable]).tolist():
            chosen = writable & (lengths == length)
            for begin, end in _piece_bounds(length):
                pieces.append((_id_rows(ids, starts[chosen] + begin, end - begin), end - begin, weights[chosen]))
        return _ratio_model(pieces, hanzi_vocab)

    @property
    def readings(self) -> set[Reading]:
        """(character, toneless syllable, tone 1..5 or None) of each reading the file gives."""
        return {(char, *reading) for char, reading in self.given}

    def lexicon_readings(self) -> dict[str, set[tuple[str, int | None]]]:
        """Toneless syllable -> (character, tone or None) of the readings the file gives, for
        :class:`~pinyin_hanzi.text.lexicon.Lexicon`."""
        found: dict[str, set[tuple[str, int | None]]] = {}
        for char, (syllable, tone) in self.given:
            found.setdefault(syllable, set()).add((char, tone))
        return found

    def __len__(self) -> int:
        return len(self.weights)


def _text_lines(data: bytes) -> list[str | None]:
    """The lines of a file's bytes, split where ``bytes.splitlines`` splits them (LF, CR LF, CR), decoded and
    NFC-composed; None for a line that is not UTF-8. A file that is UTF-8 is decoded and composed whole: line
    by line that cost a 60 MB dictionary seconds."""
    data = data.removeprefix(b"\xef\xbb\xbf")
    try:
        lines = _LINE_END.split(unicodedata.normalize("NFC", data.decode("utf-8")))
    except UnicodeDecodeError:
        return [_decoded(raw) for raw in data.splitlines()]
    return lines[:-1] if lines and not lines[-1] else lines  # (after a final line end, no line)


def _decoded(raw: bytes) -> str | None:
    try:
        return unicodedata.normalize("NFC", raw.decode("utf-8"))
    except UnicodeDecodeError:
        return None


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


@functools.lru_cache(maxsize=1 << 16)
def _reading(text: str) -> tuple[str, int | None] | None:
    """(toneless syllable, tone 1..5 or None) of one syllable as a file writes it (``zhong4``, ``zhòng``,
    ``lv``, ``lü``, ``lu:``, neutral tone ``de5`` or ``de0``), or None if it is no syllable."""
    text = to_tone3(text.lower().replace("u:", "ü"), v_to_u=False, neutral_tone_with_five=False)
    match = _SYLLABLE.fullmatch(text)
    if match is None or match[1] not in syllables():
        return None
    return match[1], (int(match[2]) or 5) if match[2] else None


def _piece_bounds(length: int) -> list[tuple[int, int]]:
    """(begin, end) of the pieces of a word of ``length`` characters: as few pieces of at most MAX_WORD_LEN
    characters as it takes, as even as can be (a word of 5 characters: 3 + 2), so that no piece of a long
    word is a lone character."""
    count = -(-length // MAX_WORD_LEN)
    size, extra = divmod(length, count)
    bounds = [0]
    for index in range(count):
        bounds.append(bounds[-1] + size + (index < extra))
    return list(zip(bounds, bounds[1:]))


def _pieces(word: str) -> list[str]:
    """``word`` in its pieces (:func:`_piece_bounds`): 数据透视表 -> 数据透, 视表."""
    return [word[begin:end] for begin, end in _piece_bounds(len(word))]


def _id_rows(ids: np.ndarray, starts: np.ndarray, length: int) -> np.ndarray:
    """(n, MAX_WORD_LEN) int64: the ``length`` ids from each of ``starts`` (n,) in ``ids``, 0 after them."""
    rows = np.zeros((len(starts), MAX_WORD_LEN), np.int64)
    for column in range(length):
        rows[:, column] = ids[starts + column]
    return rows


def _keys(rows: np.ndarray, length: int, vocab_size: int) -> np.ndarray:
    """:func:`~pinyin_hanzi.lm.word.word_key` of the first ``length`` ids of each row, as an array."""
    keys = np.zeros(len(rows), np.int64)
    for column in range(length):
        keys = keys * vocab_size + rows[:, column]
    return keys + length * vocab_size ** MAX_WORD_LEN


def _heaviest(keys: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each key of ``keys`` once, ascending, with the largest of its ``weights``."""
    order = np.argsort(keys)  # (any order among equal keys: they keep the largest weight)
    keys, weights = keys[order], weights[order]
    firsts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]]) if len(keys) else _NO_KEYS
    return keys[firsts], np.maximum.reduceat(weights, firsts) if len(keys) else weights


def _table(singles: np.ndarray, single: float, keys: np.ndarray, masses: np.ndarray) -> tuple[torch.Tensor, ...]:
    """Sorted keys (k,) and log masses (k, 2) of two columns: the ``singles`` (keys of the single hanzi) at
    ``single`` each plus ``masses`` at ``keys`` (a key of both gets the sum), and the single hanzi alone."""
    every, inverse = np.unique(np.concatenate([singles, keys]), return_inverse=True)
    mass = np.bincount(inverse, weights=np.concatenate([np.full(len(singles), single), masses]), minlength=len(every))
    alone = np.zeros(len(every))
    alone[inverse[: len(singles)]] = single
    return torch.from_numpy(every), torch.from_numpy(np.stack([mass, alone], axis=1)).log()  # log 0 = -inf


def _ratio_model(pieces: list[tuple[np.ndarray, int, np.ndarray]], hanzi_vocab: Vocab) -> WordLexiconLM:
    """The log-ratio model of the module's docstring, over word ``pieces`` (rows of hanzi ids, their length,
    their weights; a piece listed more than once counts with its largest weight): column 0 the single hanzi
    at 1/V with the words on top, column 1 (the background) the single hanzi alone. A word of L characters
    has the mass weight x (PER_CHARACTER / V) ** L, and a beginning of k characters the mass weight x
    (PER_CHARACTER / V) ** k of the heaviest word it begins, so that a word earns its share as its
    characters come (the search keeps a word's beginning while the rest is still to come)."""
    size = len(hanzi_vocab)
    is_word_char = torch.tensor([len(token) == 1 and is_hanzi(token) for token in hanzi_vocab.tokens])
    single = 1 / int(is_word_char.sum())  # 1/V
    per_length = np.array([(PER_CHARACTER * single) ** length for length in range(MAX_WORD_LEN + 1)])
    singles = is_word_char.nonzero().flatten().numpy() + size ** MAX_WORD_LEN  # word_key of each single hanzi
    tables = []
    for shortest in (None, CREDITED_FROM):  # the words themselves; every beginning of CREDITED_FROM and more
        spans = [(rows, span, weights) for rows, length, weights in pieces
                 for span in ([length] if shortest is None else range(shortest, length + 1))]
        keys, weights = _heaviest(np.concatenate([_keys(rows, span, size) for rows, span, _ in spans] + [_NO_KEYS]),
                                  np.concatenate([weights for _, _, weights in spans] + [_NO_WEIGHTS]))
        tables.append(_table(singles, single, keys, weights * per_length[keys // size ** MAX_WORD_LEN]))
    (keys, columns), prefixes = tables
    return WordLexiconLM(size, keys, columns[:, 0], is_word_char, WINDOW, columns[:, 1],
                         prefix_table=(prefixes[0], prefixes[1].float()))

"""What the input method shows for what was typed: the candidate table of a composition, from the Converter.

The model loads on a thread of its own when the engine starts (:class:`Conversions`), so that the engine is on
the bus at once and keys typed meanwhile are held in the preedit; :meth:`Conversions.table` answers None until
the model is there. A table holds the whole line's n-best conversions (what Space commits is the first, the
same as ``Converter.convert`` of the same letters) and then candidates for the first two syllables and the
first one: choosing one of those commits it and leaves the rest of the letters to convert (partial selection).
Tables are kept per typed text until the next commit is learned, so that Backspace and retyping cost nothing.
"""

from __future__ import annotations

import functools
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Callable

from pinyin_hanzi.ime.settings import ImeSettings

SEPARATORS = "' "
CACHED_TABLES = 512
WORD_SYLLABLES = (2, 1)  # the first syllables whose own candidates follow the whole line's
WORDS_EACH = 3  # candidates kept for each of them
LONGEST_PREFIX = 6  # letters an abbreviation may have (zhuan -> zhua*)


@dataclass(frozen=True)
class Entry:
    """One candidate: its text and how many characters of the typed text it converts (all of them for a
    conversion of the whole line, fewer for a word of the first syllables)."""

    text: str
    consumed: int


@dataclass(frozen=True)
class Table:
    entries: tuple[Entry, ...]
    syllables: tuple[str, ...]  # the best conversion's reading: model tokens

    @property
    def best(self) -> Entry:
        return self.entries[0]


class Conversions:
    """The converter behind the engine, loaded on a background thread, and the tables it makes.

    ``load`` builds the Converter (it is called on that thread); ``notify`` is called there once it is ready
    or has failed (:attr:`error` then holds the one-line reason)."""

    def __init__(self, settings: ImeSettings, load: Callable[[], object], notify: Callable[[], None] = lambda: None):
        self.settings = settings
        self.converter = None
        self.error: str | None = None
        self._ready = threading.Event()
        self._tables: OrderedDict[tuple[str, bool], Table] = OrderedDict()
        self._thread = threading.Thread(target=self._load, args=(load, notify), name="model-load", daemon=True)
        self._thread.start()

    def _load(self, load, notify) -> None:
        from pinyin_hanzi.errors import PinyinHanziError

        try:
            self.converter = load()
        except (PinyinHanziError, OSError) as error:  # a bad checkpoint or settings: said once, letters pass
            self.error = str(error)
        finally:
            self._ready.set()
            notify()

    @property
    def ready(self) -> bool:
        return self._ready.is_set() and self.converter is not None

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until the model has loaded (or failed); whether it converts."""
        self._ready.wait(timeout)
        return self.ready

    def table(self, typed: str, words: bool = False) -> Table | None:
        """The candidate table of ``typed`` (non-empty), or None while the model is not ready: the whole line's
        n-best conversions, and with ``words`` (and the setting words) then those of its first syllables."""
        if not self.ready or not typed:
            return None
        key = (typed, words and self.settings.words)
        table = self._tables.get(key)
        if table is None:
            table = self._tables[key] = self._with_words(typed) if key[1] else self._convert(typed)
            if len(self._tables) > CACHED_TABLES:
                self._tables.popitem(last=False)
        else:
            self._tables.move_to_end(key)
        return table

    def learn(self, text: str) -> None:
        """Give what the user committed to the converter's history; the tables kept are stale from then on."""
        if self.ready and text:
            self.converter.learn(text)
            self._tables.clear()

    def _options(self) -> dict:
        s = self.settings
        return {"prefixes": s.prefixes, "fuzzy": s.fuzzy, "shuangpin": s.shuangpin}

    def _convert(self, typed: str) -> Table:
        found = self.converter.convert_lines([typed], nbest=self.settings.sentences, **self._options())[0]
        entries = tuple(dict.fromkeys(Entry(candidate.text, len(typed)) for candidate in found if candidate.text))
        return Table(entries or (Entry(typed, len(typed)),), tuple(found[0].syllables))

    def _with_words(self, typed: str) -> Table:
        """The sentences' table with candidates for the first syllables after them. Converted only when asked
        for (the user turns past the sentences): a second conversion on every key would double its cost."""
        table = self.table(typed)
        ends = syllable_ends(typed, table.syllables, bool(self.settings.shuangpin))
        cuts = [ends[count - 1] for count in WORD_SYLLABLES if ends and count < len(ends)]
        if not cuts:
            return table
        words = self.converter.convert_lines([typed[:cut] for cut in cuts], nbest=WORDS_EACH, **self._options())
        entries = table.entries + tuple(Entry(candidate.text, cut) for cut, candidates in zip(cuts, words)
                                        for candidate in candidates if candidate.text)
        return Table(tuple(dict.fromkeys(entries)), table.syllables)


def syllable_ends(typed: str, tokens: tuple[str, ...], double_pinyin: bool) -> list[int] | None:
    """Where in ``typed`` each of a reading's model tokens ends (the index after its last letter), or None
    where the tokens cannot be laid over the letters. A syllable token covers its own letters (two keys in
    double pinyin), an abbreviation's (``j*``) the letters that begin some syllable with that initial, a
    pass-through character itself; apostrophes and spaces between them are skipped."""

    @functools.lru_cache(maxsize=None)
    def ends_from(position: int, index: int) -> tuple[int, ...] | None:
        while position < len(typed) and typed[position] in SEPARATORS:
            position += 1
        if index == len(tokens):
            return () if position == len(typed) else None
        for length in _lengths(typed, position, tokens[index], double_pinyin):
            rest = ends_from(position + length, index + 1)
            if rest is not None:
                return (position + length,) + rest
        return None

    found = ends_from(0, 0)
    return list(found) if found is not None else None


def _lengths(typed: str, position: int, token: str, double_pinyin: bool) -> list[int]:
    """The numbers of characters of ``typed`` at ``position`` that ``token`` may stand for, longest first."""
    rest = typed[position:]
    if not rest:
        return []
    if token.endswith("*") and len(token) > 1:
        initial = token[:-1]
        if double_pinyin:
            return [1] if rest[0].lower() == initial[0] else []
        return [n for n in range(min(LONGEST_PREFIX, len(rest)), 0, -1)
                if rest[:n].lower().startswith(initial) or (n < len(initial) and initial.startswith(rest[:n].lower()))]
    if double_pinyin and token.isalpha() and token.isascii():  # a syllable's key pair, or a letter passed through
        return ([2] if len(rest) >= 2 else []) + ([1] if rest[0] == token else [])
    if rest[: len(token)].lower() == token.lower():
        return [len(token)]
    return []

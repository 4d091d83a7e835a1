"""What the input method shows for what was typed: the candidate table of a composition, from the Converter.

One thread of its own (:class:`Conversions`) loads the model when the engine starts, converts once to warm it
up, and then converts what the keys ask for: the engine is on the bus at once, and a key is answered without
waiting for a conversion. :meth:`Conversions.cached` answers at once (a table, or None: not converted yet),
:meth:`Conversions.request` asks the thread for the table of the letters typed now (only the latest request
is kept: letters typed meanwhile make older ones stale), and :meth:`Conversions.table` converts before it
answers, for the keys that commit or move in the table. Until a table is there the composer shows
:func:`preview`: the hanzi of an earlier conversion for the syllables the new letters leave as they were, then
the letters.

A table holds the whole line's n-best conversions (what Space commits is the first, the same as
``Converter.convert`` of the same letters) and then candidates for the first two syllables and the first one:
choosing one of those commits it and leaves the rest of the letters to convert (partial selection). Tables are
kept per typed text until the next commit is learned, so that Backspace and retyping cost nothing.

With a service (the setting ``service``: remote.py's converter in the place of the model) a conversion can fail
because the service is down: :attr:`Conversions.down` then says why (one line on stderr, once), the keys pass the
letters as typed, and the thread tries again for a key typed :data:`RETRY_S` or more later (never by itself, never
on the keys' thread), until the service answers.
"""

from __future__ import annotations

import functools
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Callable

from pinyin_hanzi.ime.remote import ServiceError
from pinyin_hanzi.ime.settings import ImeSettings

SEPARATORS = "' "
CACHED_TABLES = 512
WORD_SYLLABLES = (2, 1)  # the first syllables whose own candidates follow the whole line's
WORDS_EACH = 3  # candidates kept for each of them
LONGEST_PREFIX = 6  # letters an abbreviation may have (zhuan -> zhua*)
STOP_WAIT_S = 5.0  # how long stop() waits for a conversion in progress
RETRY_S = 2.0  # while the service is down, a key asks it again at most this often


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
    """The converter behind the engine, on a thread of its own, and the tables it makes.

    ``load`` builds the Converter (called on that thread); ``loaded`` is called there once it is ready or has
    failed (:attr:`error` then holds the one-line reason), ``converted`` there after each table it made for
    :meth:`request`. Every use of the converter holds one lock, so a table is never made while a commit is
    being learned: a table kept is what ``Converter.convert`` gives with the history as it is."""

    def __init__(self, settings: ImeSettings, load: Callable[[], object], loaded: Callable[[], None] = lambda: None,
                 converted: Callable[[], None] = lambda: None):
        self.settings = settings
        self.converter = None
        self.error: str | None = None
        self.down: str | None = None  # why the service does not convert now (a service-backed engine), else None
        self._retry_at = 0.0  # while down: when a key's request may ask the service again
        self._ready = threading.Event()
        self._tables: OrderedDict[tuple[str, bool], Table] = OrderedDict()
        self._tables_lock = threading.Lock()  # held for a look-up: the keys' thread never waits for a conversion
        self._converter_lock = threading.Lock()
        self._wanted = threading.Condition()
        self._request: tuple[str, bool] | None = None
        self._stopping = False
        self._converted = converted
        self._thread = threading.Thread(target=self._run, args=(load, loaded), name="conversions", daemon=True)
        self._thread.start()

    def _run(self, load, loaded) -> None:
        from pinyin_hanzi.errors import PinyinHanziError

        try:
            self.converter = load()
        except (PinyinHanziError, OSError) as error:  # a bad checkpoint or settings: said once, letters pass
            self.error = str(error)
        finally:
            self._ready.set()
            loaded()
        with self._wanted:
            idle = self._request is None
        if idle and self.converter is not None:  # else the first key's conversion is the warm-up
            self._warm_up()
        while self.converter is not None:
            with self._wanted:
                while self._request is None and not self._stopping:
                    self._wanted.wait()
                if self._stopping:
                    return
                key, self._request = self._request, None
            try:
                self._make(key, retry=True)
            except Exception as error:  # noqa: BLE001 - the thread serves every later key: it must not die
                _say(f"cannot convert {key[0]!r}: {type(error).__name__}: {error}")
                continue
            self._converted()

    def _warm_up(self) -> None:
        """Convert a line of each kind (syllables, abbreviations) and keep nothing: the first key's conversion
        then does not pay for first-use work."""
        with self._converter_lock:
            try:
                self.converter.convert_lines(["nihao", "wxqbj"], nbest=self.settings.sentences, **self._options())
            except ServiceError as error:
                self._failed(error)
                return
            self._answered()

    def stop(self) -> None:
        """End the thread (after the conversion in progress, if any)."""
        with self._wanted:
            self._stopping = True
            self._wanted.notify()
        self._thread.join(STOP_WAIT_S)

    @property
    def ready(self) -> bool:
        return self._ready.is_set() and self.converter is not None

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until the model has loaded (or failed); whether it converts."""
        self._ready.wait(timeout)
        return self.ready

    def _key(self, typed: str, words: bool) -> tuple[str, bool]:
        """Where the table of ``typed`` is kept: with the first syllables' words only where the settings want them."""
        return typed, words and self.settings.words

    def cached(self, typed: str, words: bool = False) -> Table | None:
        """The table of ``typed`` if it was made already, else None; never waits."""
        key = self._key(typed, words)
        with self._tables_lock:
            table = self._tables.get(key)
            if table is not None:
                self._tables.move_to_end(key)
        return table

    def request(self, typed: str, words: bool = False) -> None:
        """Ask the conversions' thread for the table of ``typed``; an earlier request not yet started is dropped
        (its letters are no longer those typed). ``converted`` is called when the table is there."""
        if typed and self.cached(typed, words) is None and not (self.down and time.monotonic() < self._retry_at):
            with self._wanted:
                self._request = self._key(typed, words)
                self._wanted.notify()

    def table(self, typed: str, words: bool = False) -> Table | None:
        """The candidate table of ``typed`` (non-empty), converted here if it was not yet (after the model has
        loaded, and after a conversion in progress on the thread), or None if the model failed to load or the
        service is down (the keys' thread never waits for a service known to be down): the whole line's n-best
        conversions, and with ``words`` (and the setting words) then those of its first syllables."""
        if not typed or not self.wait():
            return None
        key = self._key(typed, words)
        with self._wanted:  # this thread makes it: the conversions' thread is not to start anything else meanwhile
            self._request = None
        return self.cached(*key) or self._make(key)

    def learn(self, text: str) -> None:
        """Give what the user committed to the converter's history; the tables kept are stale from then on."""
        if self.ready and text and not self.down:
            with self._converter_lock:
                try:
                    self.converter.learn(text)
                except ServiceError as error:  # what was committed stays committed; only the learning is lost
                    self._failed(error)
                with self._tables_lock:
                    self._tables.clear()

    def _make(self, key: tuple[str, bool], retry: bool = False) -> Table | None:
        """The table of ``key``, converted now if it was not yet; None while the service is down (``retry``:
        the thread asks it again once :data:`RETRY_S` has passed)."""
        with self._converter_lock:
            table = self.cached(*key)  # the other thread may have made it while this one waited for the lock
            if table is not None:
                return table
            if self.down and not (retry and time.monotonic() >= self._retry_at):
                return None
            typed, words = key
            try:
                table = self._with_words(typed) if words else self._convert(typed)
            except ServiceError as error:
                table = self._failed(error, typed)
                if table is None:
                    return None
            else:
                self._answered()
            self._keep(key, table)
        return table

    def _failed(self, error: ServiceError, typed: str = "") -> Table | None:
        """A service's failure: down, said once and retried later (None); or this line refused (a line over
        its work limit): its table is then the letters as typed, kept so that it is not asked for again."""
        if error.down:
            if self.down is None:
                _say(f"the service does not convert, letters pass as typed until it does: {error}")
            self.down, self._retry_at = str(error), time.monotonic() + RETRY_S
            return None
        _say(f"cannot convert {typed!r}: {error}")
        return Table((Entry(typed, len(typed)),), ())

    def _answered(self) -> None:
        if self.down is not None:
            self.down = None
            _say("the service converts again")

    def _keep(self, key: tuple[str, bool], table: Table) -> None:
        with self._tables_lock:
            self._tables[key] = table
            if len(self._tables) > CACHED_TABLES:
                self._tables.popitem(last=False)

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
        table = self.cached(typed) or self._convert(typed)
        self._keep((typed, False), table)
        ends = syllable_ends(typed, table.syllables, bool(self.settings.shuangpin))
        cuts = [ends[count - 1] for count in WORD_SYLLABLES if ends and count < len(ends)]
        if not cuts:
            return table
        words = self.converter.convert_lines([typed[:cut] for cut in cuts], nbest=WORDS_EACH, **self._options())
        entries = table.entries + tuple(Entry(candidate.text, cut) for cut, candidates in zip(cuts, words)
                                        for candidate in candidates if candidate.text)
        return Table(tuple(dict.fromkeys(entries)), table.syllables)


def _say(message: str) -> None:
    """One line on the engine's stderr (ibus-daemon's log)."""
    import sys

    print(f"pinyin_hanzi.ime: {message}", file=sys.stderr, flush=True)


def preview(typed: str, cached: Callable[[str], Table | None], double_pinyin: bool) -> str:
    """What the preedit shows for ``typed`` before its own conversion is there: the best conversion of the
    longest beginning of ``typed`` that has one (``cached``), for its syllables that the letters after it
    cannot change (all but its last, which more letters may extend: xian -> xiang), then the letters from
    there as typed. Just the letters when no beginning was converted."""
    for length in range(len(typed) - 1, 0, -1):
        table = cached(typed[:length])
        if table is None:
            continue
        text, ends = table.best.text, syllable_ends(typed[:length], table.syllables, double_pinyin)
        if ends is None or len(text) != len(ends):  # characters that do not stand one for a syllable: no preview
            return typed
        keep = len(ends) if typed[length] in SEPARATORS else len(ends) - 1
        if keep == 0:
            return typed
        return text[:keep] + typed[ends[keep - 1]:].lstrip(SEPARATORS)
    return typed


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

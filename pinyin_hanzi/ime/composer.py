"""The keys of the input method: a composition of typed pinyin, its candidates, and what gets committed.

No IBus here: keys arrive as X keysyms and modifier bits (the numbers IBus passes on), and the engine
(engine.py) draws what :meth:`Composer.view` says and commits what :meth:`Composer.take_commits` gives. So the
rules of typing are tested without a desktop, and the engine stays a thin adapter. A view never waits for a
conversion (it is a preview until the letters' table is there); a key that commits or moves in the table does.

Chinese mode, composing (letters typed since the last commit):
letters and ' extend it; Space commits the highlighted candidate; 1-9 (0: the tenth) the candidate of that
number on the page; Enter the letters as typed; Escape cancels; Backspace deletes the last letter; Page Up/Down
and - = turn pages, Up/Down move the highlight; punctuation commits the highlighted candidate, then itself.
The table holds the whole line's conversions; turning past them (Down, Page Down, a higher number) adds
candidates for the first syllables, and choosing one commits those and leaves the rest to convert. Not composing: a letter
starts a composition, punctuation becomes Chinese punctuation, other keys go to the application.
Shift pressed and released alone toggles English mode, where every key goes to the application (a
composition is first committed as typed, as ibus-libpinyin does).
"""

from __future__ import annotations

from dataclasses import dataclass

from pinyin_hanzi.ime.conversion import SEPARATORS, Conversions, Entry, preview

# X keysyms (X11/keysymdef.h) and modifier bits (IBus.ModifierType) of the keys handled here
BACKSPACE, TAB, RETURN, ESCAPE, KP_ENTER = 0xFF08, 0xFF09, 0xFF0D, 0xFF1B, 0xFF8D
LEFT, UP, RIGHT, DOWN, PAGE_UP, PAGE_DOWN, HOME, END = 0xFF51, 0xFF52, 0xFF53, 0xFF54, 0xFF55, 0xFF56, 0xFF50, 0xFF57
SHIFT_L, SHIFT_R = 0xFFE1, 0xFFE2
SHIFT_MASK, LOCK_MASK, CONTROL_MASK, MOD1_MASK = 1 << 0, 1 << 1, 1 << 2, 1 << 3
SUPER_MASK, META_MASK, RELEASE_MASK = 1 << 26, 1 << 28, 1 << 30
COMMAND_MASKS = CONTROL_MASK | MOD1_MASK | SUPER_MASK | META_MASK

MAX_TYPED = 80  # letters in one composition: about 20 syllables and more (longer lines cost more per key)
CHINESE_PUNCTUATION = {",": "，", ".": "。", "?": "？", "!": "！", ";": "；", ":": "：", "(": "（", ")": "）",
                       "[": "【", "]": "】", "<": "《", ">": "》", "\\": "、", "~": "～", "^": "……", "$": "￥",
                       "_": "——", "{": "｛", "}": "｝", "`": "·"}
PAIRED_QUOTES = {'"': ("“", "”"), "'": ("‘", "’")}


@dataclass(frozen=True)
class View:
    """What the engine shows: the preedit (the highlighted conversion and any letters it leaves), the letters
    as typed (IBus's auxiliary text), the candidates and which is highlighted. ``exact``: the preedit is the
    conversion of the letters typed (False: a preview, or no composition; no candidates are shown then)."""

    preedit: str
    typed: str
    candidates: tuple[str, ...]
    cursor: int
    exact: bool = False


class Composer:
    """One input context's typing state. ``conversions`` is shared by every context of the engine process."""

    def __init__(self, conversions: Conversions):
        self.conversions = conversions
        self.settings = conversions.settings
        self.typed = ""
        self.cursor = 0
        self.english = False
        self._commits: list[str] = []
        self._composed = ""  # what this composition committed so far (partial selections): learned as one text
        self._shift_alone = False
        self._words = False  # the table holds the first syllables' candidates too (the user turned past the sentences)
        self._quotes_open = {quote: False for quote in PAIRED_QUOTES}

    # ------------------------------------------------------------------------------------------- keys

    def process_key(self, keyval: int, state: int) -> bool:
        """Handle one key event; whether it was consumed (False: the application gets the key)."""
        if keyval in (SHIFT_L, SHIFT_R):
            return self._shift(state)
        self._shift_alone = False
        if state & RELEASE_MASK:
            return False
        if self.english or state & COMMAND_MASKS:
            return False
        char = chr(keyval) if 0x20 <= keyval < 0x7F else ""
        if not self.typed:
            return self._idle_key(char, state)
        return self._composing_key(keyval, char)

    def _shift(self, state: int) -> bool:
        if not state & RELEASE_MASK:
            self._shift_alone = not state & COMMAND_MASKS
            return False
        if self._shift_alone:  # pressed and released with no key between: the mode changes
            self._shift_alone = False
            if self.typed:
                self._commit_typed()
            self.english = not self.english
        return False

    def _idle_key(self, char: str, state: int) -> bool:
        if "a" <= char <= "z" and not state & LOCK_MASK:
            self._extend(char)
            return True
        if char in CHINESE_PUNCTUATION or char in PAIRED_QUOTES:
            return self._punctuation(char)
        return False

    def _composing_key(self, keyval: int, char: str) -> bool:
        if char.isascii() and char.isalpha() or (char and char in self._joiners() and self.typed[-1] not in SEPARATORS):
            self._extend(char)
        elif char == " ":
            self._choose(self.cursor)
        elif char.isdigit():
            page_start = self.cursor - self.cursor % self.settings.page_size
            number = int(char) or 10
            if number <= self.settings.page_size:
                self._words = self._words or page_start + number > len(self._entries())
                self._choose(page_start + number - 1)
        elif keyval in (RETURN, KP_ENTER):
            self._commit_typed()
        elif keyval == ESCAPE:
            self._reset()
        elif keyval == BACKSPACE:
            self.typed = self.typed[:-1]
            self._home()
            if not self.typed:
                self._reset()
        elif keyval in (PAGE_DOWN, PAGE_UP) or char and char in "-=":
            forward = keyval == PAGE_DOWN or char == "="
            self._move(self.settings.page_size if forward else -self.settings.page_size)
        elif keyval in (DOWN, UP):
            self._move(1 if keyval == DOWN else -1)
        elif char in CHINESE_PUNCTUATION or char in PAIRED_QUOTES:
            self._choose(self.cursor, rest_as_typed=True)
            return self._punctuation(char)
        return True  # any other key (Tab, arrows, F-keys) is swallowed: the composition stays as it is

    def _joiners(self) -> str:
        """Characters that join a composition besides letters: the apostrophe, and ; in double-pinyin layouts
        that put a final on it."""
        return "';" if self.settings.shuangpin else "'"

    def _extend(self, char: str) -> None:
        if len(self.typed) < MAX_TYPED:
            self.typed += char
            self._home()

    def _home(self) -> None:
        self.cursor = 0
        self._words = False

    def _punctuation(self, char: str) -> bool:
        if not self.settings.chinese_punctuation:
            return False
        if char in PAIRED_QUOTES:
            opening, closing = PAIRED_QUOTES[char]
            self._commits.append(closing if self._quotes_open[char] else opening)
            self._quotes_open[char] = not self._quotes_open[char]
        else:
            self._commits.append(CHINESE_PUNCTUATION[char])
        return True

    def _move(self, step: int) -> None:
        if self.cursor + step >= len(self._entries()):
            self._words = True
        count = len(self._entries())
        if count:
            self.cursor = min(max(self.cursor + step, 0), count - 1)

    # ------------------------------------------------------------------------------------------ commits

    def _entries(self) -> tuple[Entry, ...]:
        """The table of the letters typed, converted now if it was not yet (the keys that commit or move in
        the table act on the exact conversion, never on a preview)."""
        table = self.conversions.table(self.typed, self._words)
        return table.entries if table is not None else ()

    def _choose(self, index: int, rest_as_typed: bool = False) -> None:
        """Commit candidate ``index``; the letters it leaves stay to be converted (or, ``rest_as_typed``, are
        committed as they are: punctuation ends the composition). Before the model is ready the letters wait
        for it: a commit is what the model converts, never the raw letters or a preview by accident."""
        entries = self._entries()
        if not entries:  # the model failed to load: the letters pass as typed
            self._commit_typed()
            return
        if index >= len(entries):
            return
        entry = entries[index]
        self._commits.append(entry.text)
        self._composed += entry.text
        self.typed = self.typed[entry.consumed :].lstrip(SEPARATORS)
        self._home()
        if self.typed and rest_as_typed:
            self._commit_typed()
        elif not self.typed:
            self._finish()

    def _commit_typed(self) -> None:
        if self.typed:
            self._commits.append(self.typed)
        self._reset()

    def _reset(self) -> None:
        self.typed = ""
        self._home()
        self._finish()

    def _finish(self) -> None:
        """The composition is over: what it committed is learned, as one text."""
        composed, self._composed = self._composed, ""
        if composed:
            self.conversions.learn(composed)

    def reset(self) -> None:
        """Drop the composition (the application lost focus or was reset)."""
        self._reset()

    def take_commits(self) -> list[str]:
        """What to commit to the application since the last call, in order."""
        commits, self._commits = self._commits, []
        return commits

    # ------------------------------------------------------------------------------------------- view

    def view(self) -> View:
        """What to show now, without waiting for a conversion: the table of the letters typed if it was made,
        else a preview (conversion.preview) and no candidates, and the letters' conversion is asked for
        (the engine shows it when it is there)."""
        if not self.typed:
            return View("", "", (), 0)
        table = self.conversions.cached(self.typed, self._words)
        if table is None:
            self.conversions.request(self.typed, self._words)
            # while the service is down the letters are what a commit gives: no hanzi of older conversions
            shown = self.typed if self.conversions.down else preview(self.typed, self.conversions.cached,
                                                                     bool(self.settings.shuangpin))
            return View(shown, self._status(), (), 0)
        entry = table.entries[min(self.cursor, len(table.entries) - 1)]
        preedit = entry.text + self.typed[entry.consumed :].lstrip(SEPARATORS)
        return View(preedit, self.typed, tuple(e.text for e in table.entries), self.cursor, exact=True)

    def _status(self) -> str:
        if self.conversions.error:
            return f"{self.typed}  (no model: {self.conversions.error})"
        if self.conversions.down:
            return f"{self.typed}  (the service does not answer: letters pass as typed)"
        if not self.conversions.ready:
            return f"{self.typed}  (loading the model…)"
        return self.typed

"""``translate.py``'s modes that learn from the user (``Converter.learn``): the interactive prompt, which learns
what the user accepts, and ``--session FILE``, a typing session replayed line by line; and ``--forget``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable

from pinyin_hanzi.cli import write_output
from pinyin_hanzi.cli.line_stream import MAX_LINE_BYTES
from pinyin_hanzi.errors import DataError
from pinyin_hanzi.files import bounded_lines, open_input
from pinyin_hanzi.text.pinyin import is_hanzi

CHOICES = 5  # candidates the prompt offers to choose from by number
HINT = ("type pinyin (e.g. ni hao, nihao, ni3hao3) and press Enter; then Enter accepts the first conversion, "
        "a number another, or type the hanzi you meant: what you accept is learned. Ctrl-D to quit")


def _note(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


class Prompt:
    """The interactive prompt: each pinyin line is converted and its candidates offered; the next line
    accepts one of them (Enter: the first, a number: that one) or a correction typed in hanzi, and what is
    accepted is learned. A new pinyin line instead leaves the last conversion unaccepted (nothing learned)."""

    def __init__(self, converter, convert: Callable[[list[str], int], list], show: Callable[[str, list], None]):
        self.converter, self.convert, self.show = converter, convert, show
        self.offered: list = []  # the candidates of the last conversion, until one is accepted

    def answer(self, line: str) -> None:
        """Act on one typed line."""
        choice = self._accepted(line)
        if choice is not None:
            learned = self.converter.learn(choice)
            _note(f"learned: {' '.join(learned)}" if learned else "nothing to learn: no hanzi")
            self.offered = []
            return
        if not line.strip():
            return
        self.offered = self.convert([line], CHOICES)[0]
        self.show(line, self.offered)
        if len(self.offered) > 1 or self.offered[0].text != line:
            _note("  " + "  ".join(f"{rank} {candidate.text}" for rank, candidate in enumerate(self.offered, 1)))

    def _accepted(self, line: str) -> str | None:
        """The text ``line`` accepts, or None where it is pinyin to convert."""
        typed = line.strip()
        if any(is_hanzi(char) for char in typed):
            return typed  # a correction (or text typed in hanzi: committed as it is)
        if not self.offered:
            return None
        if not typed:
            return self.offered[0].text
        if typed.isdigit() and 1 <= int(typed) <= len(self.offered):
            return self.offered[int(typed) - 1].text
        return None


def interactive(prompt: Prompt, check_typed: Callable[[str, str], str]) -> int:
    """Lines typed at a terminal, each handed to ``prompt`` as it is entered, until Ctrl-D."""
    _note(HINT)
    while True:
        try:
            line = check_typed(input("pinyin> "), "that line")
        except EOFError:
            _note("")
            return 0
        except (UnicodeDecodeError, DataError):  # one bad line should not end the session
            _note("error: that line is not valid UTF-8")
            continue
        prompt.answer(line)


def session(converter, name: str, convert: Callable[[list[str], int], list], show: Callable[[str, list], None]) -> int:
    """``--session FILE``: each line ``pinyin<TAB>committed`` is converted, printed, then ``committed`` is
    learned, so each output is what the converter made before it learned that line (a typing session, as
    bench/typing_session.py replays one). A line without a tab is converted and nothing is learned; an
    empty line gives an empty line. DataError (one line) for a missing file or a line that is not UTF-8."""
    with open_input(name if name != "-" else "/dev/stdin", "session file", DataError, pipes=True) as handle:
        for number, raw in enumerate(bounded_lines(handle, MAX_LINE_BYTES, lambda n: DataError(
                f"{name}: line {n} is longer than {MAX_LINE_BYTES:,} bytes")), 1):
            try:
                line = raw.decode("utf-8").rstrip("\r\n")
            except UnicodeDecodeError:
                raise DataError(f"{name}: line {number} is not valid UTF-8") from None
            typed, _, committed = line.partition("\t")
            if not typed.strip():
                write_output("\n")
            else:
                show(typed, convert([typed], 1)[0])
            if committed.strip():
                converter.learn(committed)
    return 0


def forget(path: str) -> int:
    """``--history FILE --forget``: empty the history file (it keeps its header), saying how much it held.
    DataError (one line) for a file that is no history; a missing one is left missing."""
    from pinyin_hanzi.lm.history import History

    if not Path(path).exists():
        _note(f"{path}: no history there, nothing to forget")
        return 0
    history = History(path)
    count = history.forget()
    history.close()
    _note(f"forgot {count} clause(s): {path} is empty")
    return 0

"""Progress where no bar can be drawn: plain lines for a log file (nohup, a job scheduler, CI), which a bar's
redraws would bury. On a terminal the tools draw tqdm bars instead; :func:`bar_on` says which."""

from __future__ import annotations

import sys
import time
from typing import Callable


def bar_on(stream) -> bool:
    """Whether ``stream`` (sys.stderr) is a terminal, where a bar redraws in place; else progress is plain lines
    (and none at all where the stream is closed: None)."""
    return stream is not None and stream.isatty()


def duration(seconds: float) -> str:
    """A duration for people: ``45 s``, ``12.3 min``, ``2.5 h``; ``?`` for one not known yet (NaN, infinite)."""
    if not 0 <= seconds < float("inf"):
        return "?"
    if seconds < 60:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.1f} min" if seconds < 3600 else f"{seconds / 3600:.1f} h"


class PlainProgress:
    """Counted work reported in plain lines, at most one every ``every`` seconds: "converting: 1,200/5,000
    sentences (24%), 31 s elapsed, about 1.6 min left". Nothing is said of work that ends sooner."""

    def __init__(self, total: int, label: str, unit: str, *, every: float = 30.0,
                 say: Callable[[str], None] | None = None):
        self.total, self.label, self.unit, self.every = total, label, unit, every
        self.say = say or (lambda line: print(line, file=sys.stderr, flush=True))
        self.done, self.started = 0, time.monotonic()
        self.said = self.started

    def update(self, count: int) -> None:
        self.done += count
        now = time.monotonic()
        if now - self.said < self.every or self.done >= self.total:
            return
        self.said, spent = now, now - self.started
        left = spent / self.done * (self.total - self.done) if self.done else float("nan")
        self.say(f"{self.label}: {self.done:,}/{self.total:,} {self.unit} ({self.done / self.total:.0%}), "
                 f"{duration(spent)} elapsed, about {duration(left)} left")

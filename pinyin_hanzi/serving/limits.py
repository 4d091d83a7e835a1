"""What one request to the HTTP service may hold (:class:`Limits`), and how the service refuses a request
(:class:`RequestError`: an HTTP status, a one-line message, the field at fault). docs/serving.md lists
the limits and the errors."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence


@dataclass(frozen=True)
class Limits:
    """What one request may hold; a request over a limit gets 413 naming it. Decoding work is counted in
    the units of :mod:`pinyin_hanzi.serving.request_cost` (about a millisecond of one core of the development
    machine each): the budget keeps the worst request to a few seconds of the model, and ``slice_cost``
    bounds one decoding call, so a request that costs more is decoded in slices with other requests'
    lines decoded between them."""

    max_body_bytes: int = 256 * 1024
    max_line_chars: int = 256  # characters of one text (longer ones are converted window by window)
    max_lines: int = 256  # texts in one batch request
    max_request_cost: float = 5000.0  # estimated decoding work of one /convert request
    max_line_cost: float = 1000.0  # of one text: a text is decoded in one call, and others wait behind it
    slice_cost: float = 500.0  # estimated work of one decoding call, at least one line


class RequestError(Exception):
    """A request the service refuses: HTTP ``status``, a one-line ``message``, the ``field`` at fault."""

    def __init__(self, status: int, message: str, field: str | None = None):
        super().__init__(message)
        self.status, self.message, self.field = status, message, field


def check_lines(lines: list[str], limits: Limits) -> None:
    if len(lines) > limits.max_lines:
        raise RequestError(413, f"{len(lines)} texts in one request; at most {limits.max_lines}", "text")
    for index, line in enumerate(lines):
        if len(line) > limits.max_line_chars:
            where = "text" if len(lines) == 1 else f"text.{index}"
            raise RequestError(413, f"{len(line)} characters in one text; at most {limits.max_line_chars}", where)


def check_cost(costs: list[float], lines: list[str], limits: Limits) -> None:
    """413 for a request whose estimated decoding work (``costs``: per line, as far as the estimate went
    before it passed the budget) is over ``limits.max_request_cost``, or holds a text over
    ``limits.max_line_cost``."""
    for index, cost in enumerate(costs):
        if cost > limits.max_line_cost:
            raise RequestError(413, f"this text would cost {cost:.0f} units of decoding work; at most "
                                    f"{limits.max_line_cost:.0f} per text (abbreviated syllables cost the most): "
                                    f"split it", "text" if len(lines) == 1 else f"text.{index}")
    total = sum(costs)
    if total > limits.max_request_cost:
        at_least = "at least " if len(costs) < len(lines) else ""
        raise RequestError(413, f"this request would cost {at_least}{total:.0f} units of decoding work; the budget "
                                f"is {limits.max_request_cost:.0f} per request (texts x syllables x beam; "
                                f"abbreviated syllables cost more): send fewer or shorter texts, or a smaller "
                                f"beam or nbest", "text")


def check_attention(text: str, syllables: Sequence[str], limits: Limits, max_positions: int | None) -> None:
    """413 for a text longer than the service takes, or than the model's attention spans (its
    max_positions: a longer sequence has no positional encoding), 422 for text and syllables that do not
    pair up one to one."""
    check_lines([text], limits)
    if len(syllables) > limits.max_line_chars:
        raise RequestError(413, f"{len(syllables)} syllables; at most {limits.max_line_chars}", "syllables")
    if max_positions is not None and max(len(text), len(syllables)) > max_positions:
        raise RequestError(413, f"{max(len(text), len(syllables))} syllables; this model attends over at most "
                                f"{max_positions} positions", "syllables")
    if not text or len(text) != len(syllables):
        raise RequestError(422, f"text has {len(text)} characters and syllables {len(syllables)} entries: "
                                f"they must pair up one to one (and not be empty)", "syllables")

"""What a conversion request will cost the model, estimated in the server before the request reaches the model,
so that the service can refuse a request over its budget (413) and cut a large one into slices that other
requests' lines are decoded between (serve.py's batcher).

The estimate follows what ``Converter.convert_lines`` decodes: each line is read as the converter reads it
(``typed_input.parse_pieces`` with the model's prefixes, fuzzy pairs and shuangpin layout), cut into windows of
the model's window length, and every alternative reading of each window (up to the converter's four) is
counted as decoded: an upper bound, since best-first decoding often stops after the best one. A reading costs
per token ``TOKEN_MS + BEAM_MS x beam``, plus ``PREFIX_BEAM_MS x beam`` per abbreviated syllable (``b``,
``zh``: each allows the characters of every syllable it begins), where beam is the search's width for that
reading: a reading with an abbreviation is searched at least at the model's decode.prefix_beam (16 for the
shipped model) unless the search is greedy. A line with no pinyin at all costs nothing (it is copied).

The unit is about one millisecond of one core of the 2-core development machine with the shipped model;
the constants were measured there (docs/serving.md, "Work per request"). This module imports no torch: the
server process never loads the model.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Sequence

from pinyin_hanzi.config import prefixes_on
from pinyin_hanzi.text.typed_input import (
    Piece,
    is_pass_through,
    is_prefix_key,
    parse_pieces,
    split_lines,
    spoken_alternatives,
)

TOKEN_MS = 0.6  # per token decoded, whatever the beam
BEAM_MS = 0.08  # per token and unit of beam width
PREFIX_BEAM_MS = 0.22  # per abbreviated token and unit of beam width, on top: its candidate set is wide
ALTERNATIVES = 4  # readings per window the converter decodes at most (convert_lines' alternatives_limit)
# A reading with more syllables than the window's shortest one pays the planner's split penalty in its prior, and
# seldom comes within the reading margin it must to be decoded: it counts a quarter. Readings as short as the
# shortest (a lone z as z* or zh*, a lone a as a or a*) are decoded side by side, and count fully.
LONGER_READING_WEIGHT = 0.25


@dataclass(frozen=True)
class CostModel:
    """How the served model reads and decodes input: its window (tokens per decoding), the beam a reading
    with an abbreviation is widened to, and parse_pieces' options (``prefixes``, ``fuzzy``, ``shuangpin``)."""

    window: int = 32
    prefix_beam: int = 16
    prefixes: bool = False
    fuzzy: tuple[str, ...] = ()
    shuangpin: str | None = None
    trained_with_prefixes: bool = False  # what prefixes "auto" means for this model

    @classmethod
    def for_model(cls, info: dict) -> CostModel:
        """The cost model of a model described by ``model_worker.describe`` (defaults for what it lacks)."""
        return cls(window=max(1, info.get("window") or cls.window), prefix_beam=info.get("prefix_beam") or 1,
                   prefixes=bool(info.get("prefixes")), fuzzy=tuple(info.get("fuzzy") or ()),
                   shuangpin=info.get("shuangpin") or None,
                   trained_with_prefixes=bool(info.get("trained_with_prefixes")))

    def for_request(self, typing: dict) -> CostModel:
        """This model read with a request's own typing options (``prefixes``, ``fuzzy``, ``shuangpin``: those
        given replace the model's, as ``Converter.convert_lines`` takes them)."""
        changes: dict = {}
        if "prefixes" in typing:
            changes["prefixes"] = prefixes_on(typing["prefixes"], self.trained_with_prefixes)
        if "fuzzy" in typing:
            changes["fuzzy"] = tuple(typing["fuzzy"])
        if "shuangpin" in typing:
            changes["shuangpin"] = typing["shuangpin"] or None
        return replace(self, **changes)

    def line_costs(self, lines: Sequence[str], beam: int, budget: float = float("inf")) -> list[float]:
        """The cost of each line at ``beam`` (the search's width: the larger of beam and nbest), in order;
        it stops after the line that takes the total over ``budget``, so a request far over the budget
        costs the server little to refuse."""
        costs, total = [], 0.0
        for line in lines:
            costs.append(sum(self._text_cost(text, beam) for text in split_lines(line)))
            total += costs[-1]
            if total > budget:
                break
        return costs

    def _text_cost(self, text: str, beam: int) -> float:
        pieces = parse_pieces(text, ALTERNATIVES, prefixes=self.prefixes, fuzzy=self.fuzzy, shuangpin=self.shuangpin)
        if all(is_pass_through(piece) for piece in pieces):
            return 0.0  # copied as typed, without the model
        cost = 0.0
        for window in _windows(pieces, self.window):
            readings = [[key for _, key in reading] for reading, _ in spoken_alternatives(window, ALTERNATIVES)]
            shortest = min(map(len, readings))
            for keys in readings:
                abbreviated = sum(map(is_prefix_key, keys))
                width = max(beam, self.prefix_beam) if abbreviated and beam > 1 else beam
                decoding = len(keys) * (TOKEN_MS + BEAM_MS * width) + abbreviated * PREFIX_BEAM_MS * width
                cost += decoding * (1.0 if len(keys) == shortest else LONGER_READING_WEIGHT)
        return cost


def _windows(pieces: list[Piece], window: int) -> list[list[Piece]]:
    """Pieces in runs of at most ``window`` tokens (by each piece's longest reading), as the planner cuts
    them (it prefers to cut after punctuation: about as many windows either way); a piece longer than a
    window is cut into windows of its first reading."""
    windows: list[list[Piece]] = [[]]
    size = 0
    for piece in pieces:
        tokens = max(len(option) for option in piece.options)
        if tokens > window:
            best = piece.options[0]
            windows += [[Piece((best[start: start + window],))] for start in range(0, len(best), window)] + [[]]
            size = 0
            continue
        if size + tokens > window:
            windows.append([])
            size = 0
        windows[-1].append(piece)
        size += tokens
    return [run for run in windows if run]

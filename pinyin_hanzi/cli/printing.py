"""How ``translate.py`` prints converted lines: the best text, the n best (a table for a person at a
terminal, tab-separated fields for a program), or a JSON object per line."""

from __future__ import annotations

import json
import sys
import unicodedata
from dataclasses import dataclass

from pinyin_hanzi.cli import write_output


@dataclass
class Printer:
    """How converted lines are printed: the best text; with ``nbest`` > 1, each candidate's text, score and the
    syllables it was read as, tab-separated (``table``: one candidate per line, for a person at a terminal);
    with ``json``, a JSON object per line. ``verbose``: fallback notes on stderr."""

    nbest: int = 1
    json: bool = False
    table: bool = False
    verbose: bool = False
    printed: int = 0  # input lines printed so far: a table puts a blank line between two lines' candidates

    def print(self, lines: list[str], found) -> None:
        output = []
        for line, conversions in zip(lines, found):
            if self.verbose:
                for note in conversions[0].notes:
                    print(f"note: {note}", file=sys.stderr)
            if self.table and self.printed:
                output.append("\n")
            output.append(self._format(line, conversions) + "\n")
            self.printed += 1
        write_output("".join(output))

    def _format(self, line: str, conversions) -> str:
        """One output line (with --json, its candidates each carry their own reading: segmentation, the model
        tokens, b* for an abbreviation; syllables, what each character was read as)."""
        if self.json:
            best = conversions[0]
            return json.dumps({"input": line, "output": best.text, "segmentation": best.syllables,
                               "syllables": best.read_as,
                               "candidates": [{"text": c.text, "score": round(c.score, 4), "segmentation": c.syllables,
                                               "syllables": c.read_as} for c in conversions],
                               "notes": best.notes}, ensure_ascii=False)
        if self.nbest > 1 and self.table:
            return _nbest_table(conversions)
        if self.nbest > 1:
            return "\t".join(f"{c.text}\t{c.score:.3f}\t{' '.join(c.read_as)}" for c in conversions)
        return conversions[0].text


def _nbest_table(conversions) -> str:
    """The candidates of one line for a reader, one per line: rank, text, score, the syllables read, in
    columns (a hanzi takes two columns of a terminal)."""
    def width(text: str) -> int:
        return sum(2 if unicodedata.east_asian_width(char) in "WF" else 1 for char in text)

    widest = max(width(c.text) for c in conversions)
    scores = [f"{c.score:.3f}" for c in conversions]
    rank_width, score_width = len(str(len(conversions))), max(map(len, scores))
    return "\n".join(f"{rank:>{rank_width}}  {c.text}{' ' * (widest - width(c.text))}  {score:>{score_width}}  "
                     f"{' '.join(c.read_as)}".rstrip() for rank, (c, score) in enumerate(zip(conversions, scores), 1))

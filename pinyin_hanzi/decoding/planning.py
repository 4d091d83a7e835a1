"""Planning a conversion: typed lines -> the readings to decode, and decoded readings -> each line's n-best.

A typed line is parsed into pieces (typed_input.py); pass-through text far from any pinyin is copied as it
is (:func:`_spans`); the rest is cut into chunks of at most one window, and each chunk's alternative readings
(``xian`` = xian / xi'an) get a prior from the syllable model. The converter decodes the readings
(search.py) and :func:`assemble` lays the best candidates of each chunk out between the copied text.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Sequence

from pinyin_hanzi.text.pinyin import CLAUSE_PUNCTUATION, is_hanzi
from pinyin_hanzi.text.typed_input import (
    Piece,
    fewest_syllables,
    is_literal_key,
    is_pass_through,
    literal_key,
    parse_pieces,
    pass_through_text,
    split_lines,
    spoken_alternatives,
)

if TYPE_CHECKING:  # the planner reads the options; settings.py, which resolves them, imports the search
    from pinyin_hanzi.decoding.settings import TypingOptions
    # and torch, which the service's server process, unpickling the Candidates its model processes send, must
    # not import (seconds at its first conversion, and hundreds of MB)
    from pinyin_hanzi.lm.syllable import SyllableBigrams

CLAUSE_END_MARK = "。"  # what a typed line that ends in a syllable is decoded as ending with (not shown)
ASCII_TO_CHINESE_PUNCTUATION = {",": "，", ".": "。", "?": "？", "!": "！"}
# Pass-through characters the model sees as context on each side of pinyin; farther ones are copied to the
# output without the model, so that text with little or no pinyin costs no decoding steps.
LITERAL_CONTEXT = 32


@dataclass
class Candidate:
    """One conversion of a typed line."""

    text: str
    score: float  # log-probability under the model (sum over positions), plus the reading's prior
    syllables: list[str] = field(default_factory=list)  # the model tokens of the reading it converts
    notes: list[str] = field(default_factory=list)  # fallbacks used, for verbose output
    # Per character of text, the syllable it was read as: what was typed, except that an abbreviation (b*)
    # or a fuzzy syllable (zi|zhi) becomes the one of its syllables the character has (bei, zhi), with the
    # typed tone; a pass-through character stands for itself.
    read_as: list[str] = field(default_factory=list)


@dataclass
class Plan:
    """The readings to decode for some typed lines: (tokens, keys) and prior per reading, and which
    readings belong to which chunk of which line."""

    readings: list[tuple[list[str], list[str]]] = field(default_factory=list)
    priors: list[float] = field(default_factory=list)  # log P(syllables) - split_penalty x extra syllables
    chunks: dict[tuple[int, int], list[int]] = field(default_factory=dict)  # (line, chunk) -> reading indices
    # Per line, its output in order: chunk numbers (decoded) and text copied as it is (pass-through, "\n").
    layouts: list[list[int | str]] = field(default_factory=list)
    open_chunks: set[tuple[int, int]] = field(default_factory=set)  # decoded with a virtual clause end


def _spans(pieces: list[Piece], context: int) -> list[str | list[Piece]]:
    """A line's pieces as spans in order: runs of pieces to decode (pinyin, the pass-through pieces
    between pinyin, and up to ``context`` pass-through pieces on each side as context) and pass-through
    text farther than ``context`` from any pinyin, copied as it is. Pass-through between two pinyin pieces
    more than 2 x ``context`` apart is context to both and copied in the middle."""
    typed = [index for index, piece in enumerate(pieces) if not is_pass_through(piece)]
    if not typed:
        return [pass_through_text(pieces)] if pieces else []
    spans: list[str | list[Piece]] = []
    start = max(0, typed[0] - context)
    if start:
        spans.append(pass_through_text(pieces[:start]))
    for previous, following in zip(typed, typed[1:]):
        if following - previous - 1 > 2 * context:
            spans.append(pieces[start : previous + 1 + context])
            spans.append(pass_through_text(pieces[previous + 1 + context : following - context]))
            start = following - context
    end = min(len(pieces), typed[-1] + 1 + context)
    spans.append(pieces[start:end])
    if end < len(pieces):
        spans.append(pass_through_text(pieces[end:]))
    return spans


class Planner:
    """Cuts typed lines into chunks of at most ``window`` tokens and lists each chunk's readings with their
    priors (see :class:`pinyin_hanzi.decoding.converter.Converter` for ``split_penalty``, ``abbreviation_penalty``,
    ``syllable_lm``, ``reading_margin`` and ``clause_end``: a line that ends in a syllable is decoded with a
    virtual clause end)."""

    def __init__(self, *, window: int, clause_end: bool, syllable_lm: SyllableBigrams | None, split_penalty: float,
                 reading_margin: float, abbreviation_penalty: float = 0.0):
        self.window, self.clause_end, self.syllable_lm = window, clause_end, syllable_lm
        self.split_penalty, self.reading_margin = split_penalty, reading_margin
        self.abbreviation_penalty = abbreviation_penalty
        self.runs: dict = {}  # letter runs' segmentations under this planner's syllable model (parse_pieces' memo)

    def plan(self, lines: Sequence[str], alternatives_limit: int, fused: bool, options: TypingOptions) -> Plan:
        """Each line's layout: its chunks, with their readings and priors, and the text copied around them
        (see :func:`_spans`); a line holding line ends is converted line by line (``split_lines``), its
        lines joined by "\\n". ``options``: how typed letters are read; ``fused``: whether the search fuses
        language models (see :meth:`readings`). A run of pieces that ends in a letter (no punctuation typed)
        has its last chunk decoded with a virtual clause end (see ``Converter.__init__``)."""
        plan = Plan()
        score = self.syllable_lm.bigram_log_prob if self.syllable_lm is not None else fewest_syllables
        for line_index, line in enumerate(lines):
            layout: list[int | str] = []
            chunk_count = 0
            for number, text in enumerate(split_lines(line)):
                if number:
                    layout.append("\n")
                pieces = parse_pieces(text, alternatives_limit, score, prefixes=options.prefixes,
                                      fuzzy=options.fuzzy, shuangpin=options.shuangpin, memo=self.runs)
                for span in _spans(pieces, LITERAL_CONTEXT):
                    if isinstance(span, str):
                        layout.append(span)
                        continue
                    chunks = self.chunks(span)
                    for chunk_index, chunk in enumerate(chunks):
                        key = (line_index, chunk_count)
                        layout.append(chunk_count)
                        chunk_count += 1
                        ends_open = (self.clause_end and chunk_index == len(chunks) - 1
                                     and not is_literal_key(chunk[-1].options[0][-1][1]))
                        if ends_open:
                            plan.open_chunks.add(key)
                        for tokens, keys, prior in self.readings(chunk, alternatives_limit, fused):
                            if ends_open:
                                tokens, keys = tokens + [CLAUSE_END_MARK], keys + [literal_key(CLAUSE_END_MARK)]
                            plan.chunks.setdefault(key, []).append(len(plan.readings))
                            plan.readings.append((tokens, keys))
                            plan.priors.append(prior)
            plan.layouts.append(layout)
        return plan

    def chunks(self, pieces: list[Piece]) -> list[list[Piece]]:
        """Pieces grouped into chunks of at most ``window`` tokens (by each piece's longest reading, so that
        every reading of a chunk fits the model's positions: ``be`` may be b* e), cut after punctuation where
        possible; a letter run longer than a window is cut into windows of its first reading."""
        chunks, current, size, cut = [], [], 0, 0
        for piece in pieces:
            n = longest_reading(piece)
            if n > self.window:
                if current:
                    chunks.append(current)
                best = piece.options[0]
                chunks.extend([Piece((best[s : s + self.window],))] for s in range(0, len(best), self.window))
                current, size, cut = [], 0, 0
                continue
            while current and size + n > self.window:
                head, current = (current[:cut], current[cut:]) if cut else (current, [])
                chunks.append(head)
                size, cut = sum(map(longest_reading, current)), 0
            current.append(piece)
            size += n
            if len(piece.options) == 1 and piece.options[0][-1][0] in CLAUSE_PUNCTUATION:
                cut = len(current)
        if current or not chunks:
            chunks.append(current)
        return chunks

    def readings(self, chunk: list[Piece], alternatives_limit: int, fused: bool
                 ) -> list[tuple[list[str], list[str], float]]:
        """(tokens, keys, prior) of each reading of a chunk. With n-gram fusion, only the readings whose
        prior is within ``reading_margin`` of the best: its terms lower every score, so the bound of
        ``Converter._decode_best_first`` would leave most alternatives to decode. A heuristic, not a bound:
        a reading far below the best prior seldom wins, and it is then usually wrong.

        The syllable model skips prefix tokens (they are no syllables), except a letter typed alone that is
        a syllable itself (``a`` ``e`` ``o``, ``n`` ``m``): it is scored as that syllable, so that its
        abbreviation reading (a*: 爱 安 ...) has the prior of its syllable reading (a: 啊), rather than
        costing nothing, less ``abbreviation_penalty`` (a user types 啊 as a always, 爱 only when
        abbreviating), and the model's scores choose between them."""
        options = spoken_alternatives(chunk, alternatives_limit)
        fewest = min(len(reading) for reading, _ in options)
        scored = []
        for reading, spoken in options:
            tokens = [token for token, _ in reading]
            prior = self.syllable_lm.log_prob(spoken) if self.syllable_lm is not None else 0.0
            prior -= self.split_penalty * (len(reading) - fewest)
            prior -= self.abbreviation_penalty * sum(s != t for s, t in zip(spoken, tokens))
            scored.append((tokens, [key for _, key in reading], prior))
        if fused:
            best_prior = max(prior for _, _, prior in scored)
            scored = [entry for entry in scored if entry[2] >= best_prior - self.reading_margin]
        return scored


def longest_reading(piece: Piece) -> int:
    """Tokens in the piece's longest reading."""
    return max(len(option) for option in piece.options)


def assemble(plan: Plan, found: list[list[Candidate] | None], nbest: int,
             chinese_punctuation: bool) -> list[list[Candidate]]:
    """Per line, its n-best list: distinct texts, each with its best-scoring reading, best first; a line
    of several chunks gets the concatenation of each chunk's best."""
    per_chunk = {key: [c for i in indices if found[i] is not None for c in found[i]]
                 for key, indices in plan.chunks.items()}
    for key in plan.open_chunks:  # the virtual 。 was forced (log-probability 0): drop it, score unchanged
        per_chunk[key] = [replace(c, text=c.text[:-1], syllables=c.syllables[:-1], read_as=c.read_as[:-1])
                          for c in per_chunk[key]]
    outputs = []
    for line_index, layout in enumerate(plan.layouts):
        ranked = {}  # per chunk: distinct texts, best first
        for chunk_index in (part for part in layout if isinstance(part, int)):
            by_text: dict[str, Candidate] = {}
            for candidate in per_chunk[(line_index, chunk_index)]:
                if candidate.text not in by_text or candidate.score > by_text[candidate.text].score:
                    by_text[candidate.text] = candidate
            ranked[chunk_index] = sorted(by_text.values(), key=lambda c: -c.score)
        if len(ranked) == 1:
            [(only, candidates)] = ranked.items()
            best = [_laid_out(layout, {only: candidate}) for candidate in candidates[:nbest]]
        else:
            best = [_laid_out(layout, {index: candidates[0] for index, candidates in ranked.items()})]
        if chinese_punctuation:
            best = [_chinese_punctuation(candidate) for candidate in best]
        outputs.append(best)
    return outputs


def _laid_out(layout: list[int | str], chosen: dict[int, Candidate]) -> Candidate:
    """One line's candidate: its chunks' chosen candidates and its copied text, in layout order; a copied
    character is its own syllable and reading."""
    parts = [chosen[part] if isinstance(part, int) else Candidate(part, 0.0, list(part), [], list(part))
             for part in layout]
    return Candidate("".join(p.text for p in parts), sum(p.score for p in parts),
                     [t for p in parts for t in p.syllables], [n for p in parts for n in p.notes],
                     [s for p in parts for s in p.read_as])


def _chinese_punctuation(candidate: Candidate) -> Candidate:
    """ASCII , . ? ! right after a hanzi become ，。？！ (``1.5`` and ``OK!`` stay as they are)."""
    chars = list(candidate.text)
    for i, char in enumerate(chars):
        if char in ASCII_TO_CHINESE_PUNCTUATION and i > 0 and is_hanzi(chars[i - 1]):
            chars[i] = ASCII_TO_CHINESE_PUNCTUATION[char]
    return replace(candidate, text="".join(chars))

"""Pinyin-constrained decoding (greedy and beam search, n-best), and the Converter that turns typed pinyin
into hanzi.

Constraint: at position i only hanzi that have a reading equal to syllable i (pypinyin's per-character
tables, restricted to the hanzi vocabulary) may be chosen — with a tone (``ni3``), only characters with
that toned reading; a pass-through token (punctuation, digit, Latin letter, emoji, hanzi typed as-is) may
only become itself. So every output has exactly one character per token and never an impossible one.
Where the vocabulary has no candidate (a syllable whose characters never occurred in training, a symbol
never seen), the output is fixed without the model: the first character of the reading table, or the
symbol itself; the model is fed ``<unk>`` there.

Scores are sums of log-probabilities, each a softmax over the allowed characters of its position, plus
``lm_weight`` times the character n-gram model's log-probability of each character where there is one
(shallow fusion, see char_lm.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import torch
from einops import rearrange, repeat
from torch.nn.utils.rnn import pad_sequence

from pinyin_hanzi.data import pad
from pinyin_hanzi.char_lm import CharNgramLM
from pinyin_hanzi.model import StepDecoder, Transformer
from pinyin_hanzi.pinyin import CLAUSE_PUNCTUATION, is_hanzi, syllable_table, toned_syllable_table
from pinyin_hanzi.syllable_lm import SyllableBigrams
from pinyin_hanzi.typed_input import (Piece, alternatives, fewest_syllables, is_literal_key, literal_key,
                                      parse_pieces)
from pinyin_hanzi.vocab import BOS_ID, PAD_ID, SPECIALS, UNK_ID, Vocab

CLAUSE_END_MARK = "。"  # what a typed line that ends in a syllable is decoded as ending with (not shown)

PAD_ROW = 0  # candidate-table row of positions past the end of a sequence: only <pad>, with probability 1
ASCII_TO_CHINESE_PUNCTUATION = {",": "，", ".": "。", "?": "？", "!": "！"}


class CandidateTable:
    """Constraint key -> allowed hanzi ids, as rows of a boolean (n_keys, v) table. A key is a toneless
    syllable (``ni``), a toned one (``ni3``, neutral tone ``de5``) or a pass-through character."""

    def __init__(self, hanzi_vocab: Vocab):
        self.hanzi_vocab = hanzi_vocab
        self.unconstrained = torch.ones(len(hanzi_vocab), dtype=torch.bool)
        self.unconstrained[: len(SPECIALS)] = False
        pad_only = torch.zeros(len(hanzi_vocab), dtype=torch.bool)
        pad_only[PAD_ID] = True
        self.rows: dict[str, int] = {}
        self.fallbacks: list[str | None] = [None]  # per row: the fixed output when no candidate is in the vocab
        self._masks: list[torch.Tensor] = [pad_only]
        self._table: torch.Tensor | None = None
        self._ids: list[torch.Tensor] = [torch.tensor([PAD_ID])]  # per row: the allowed ids, increasing

    def candidates(self, key: str) -> tuple[str, ...]:
        """Characters that may stand for ``key`` (any, not only those in the vocabulary). A toned syllable
        no character has (``ni5``) counts as toneless. A single-letter syllable (a, o, e, n, m) may also
        be that Latin letter passing through, as in ``P y t h o n``; a literal key (``=o``, typed input that
        is not pinyin) only itself."""
        if is_literal_key(key):
            return (key[1],)
        chars = None
        if key[-1:].isdigit() and key[:-1].isalpha():
            chars = toned_syllable_table().get(key)
            key = key[:-1]
        chars = chars or syllable_table().get(key)
        if chars is None:
            return (key,)
        return chars + (key,) if len(key) == 1 else chars

    def row(self, key: str) -> int:
        if key not in self.rows:
            chars = self.candidates(key)
            mask = torch.zeros(len(self.hanzi_vocab), dtype=torch.bool)
            ids = [self.hanzi_vocab.ids[char] for char in chars if char in self.hanzi_vocab]
            mask[ids if ids else [UNK_ID]] = True
            self.rows[key] = len(self._masks)
            self._masks.append(mask)
            self._ids.append(mask.nonzero().flatten())
            self.fallbacks.append(None if ids else chars[0])
            self._table = None
        return self.rows[key]

    def table(self) -> torch.Tensor:
        """(n_rows, v) bool: the allowed characters of each row."""
        if self._table is None:
            self._table = torch.stack(self._masks)
        return self._table

    def ids(self, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The allowed characters of ``rows`` (any shape) as lists: (..., c) hanzi ids in increasing order,
        padded with <pad> on the right, and (..., c) bool, True at real entries; c = the most any of these
        rows has."""
        used, inverse = rows.unique(return_inverse=True)
        lists = [self._ids[row] for row in used.tolist()]
        ids = pad_sequence(lists, batch_first=True, padding_value=PAD_ID)  # (rows used, c)
        real = pad_sequence([torch.ones(len(row), dtype=torch.bool) for row in lists], batch_first=True)
        return ids[inverse], real[inverse]

    def for_vocab(self, pinyin_vocab: Vocab) -> tuple[torch.Tensor, torch.Tensor]:
        """The candidates of each source id, for the training loss: hanzi ids (pinyin vocab size, c) and
        (pinyin vocab size, c) bool, True at real entries (see :meth:`ids`). Special ids and <unk> have none
        (their raw token is unknown; the loss then counts the reference character alone)."""
        rows = torch.tensor([PAD_ROW if index < len(SPECIALS) else self.row(token)
                             for index, token in enumerate(pinyin_vocab.tokens)])
        ids, real = self.ids(rows)
        real[: len(SPECIALS)] = False
        return ids, real


@dataclass
class Conversion:
    """One candidate conversion of an input line."""

    text: str
    score: float  # log-probability under the model (sum over positions)
    tokens: list[str] = field(default_factory=list)  # the reading (segmentation) it converts
    notes: list[str] = field(default_factory=list)  # fallbacks used, for verbose output


class Converter:
    """A trained model with its vocabularies: converts token lists or typed lines into hanzi.

    ``window``: the longest token sequence given to the model at once (the training examples' max length);
    longer input is cut at punctuation, or into windows, and converted piece by piece.

    Readings of ambiguous letters: log P(hanzi | syllables) of different readings condition on different
    syllables and are not comparable as they are (an extra syllable with few candidates costs almost
    nothing). With ``syllable_lm`` the score is the joint log P(hanzi, syllables) = log P(hanzi | syllables)
    + log P(syllables); ``split_penalty`` further charges each syllable beyond the fewest-syllable reading.

    With ``char_lm`` and ``lm_weight`` > 0 every character's score in beam search also gets lm_weight x
    log P_lm(character | the characters before it); then readings whose prior is more than
    ``reading_margin`` below the best one's are not decoded (see :meth:`convert`). Greedy decoding
    (``beam=1``) leaves the n-gram model out: committing to one character at a time, it lost accuracy with
    it (PD test, greedy: quickstart 87.6% -> 86.9%, shipped model 90.8% -> 90.1%, reviews 93.1% -> 92.8%),
    while beam search gains several points (quickstart, beam 5: 88.8% -> 92.0%)."""

    def __init__(self, model: Transformer, pinyin_vocab: Vocab, hanzi_vocab: Vocab,
                 device: torch.device | str = "cpu", window: int | None = None, split_penalty: float = 3.0,
                 syllable_lm: SyllableBigrams | None = None, clause_end: bool = True,
                 char_lm: CharNgramLM | None = None, lm_weight: float = 0.0, reading_margin: float = 8.0):
        self.model = model.to(device).eval()
        self.pinyin_vocab, self.hanzi_vocab = pinyin_vocab, hanzi_vocab
        self.device = torch.device(device)
        self.candidates = CandidateTable(hanzi_vocab)
        self.split_penalty, self.syllable_lm = split_penalty, syllable_lm
        self.char_lm = char_lm if lm_weight > 0 else None
        self.lm_weight, self.reading_margin = lm_weight, reading_margin
        self._history = char_lm.order - 1 if self.char_lm is not None and char_lm.order > 1 else 1
        # Training clauses end with their punctuation; typed input usually has none. Without it the model
        # reads the last syllable as the middle of a clause (ba -> 八, not 吧), so a line that ends in a
        # syllable is decoded with a virtual 。 after it, which is dropped from the output.
        end = CLAUSE_END_MARK
        self.clause_end = clause_end and end in pinyin_vocab.ids and end in hanzi_vocab.ids
        positions = model.config.max_positions - self.clause_end  # room for the virtual 。
        self.window = min(window or positions, positions)

    # ----------------------------------------------------------------------------------------- search

    def _prepare(self, token_lists, key_lists):
        """Source ids (b, s) on the device and candidate-table rows (b, s), PAD_ROW past each end."""
        length = max(len(tokens) for tokens in token_lists)
        source = pad([self.pinyin_vocab.encode(tokens) for tokens in token_lists]).to(self.device)
        rows = torch.tensor([[self.candidates.row(key) for key in keys] + [PAD_ROW] * (length - len(keys))
                             for keys in key_lists])
        return source, rows

    def _allowed(self, rows: torch.Tensor, constrained: bool) -> tuple[torch.Tensor, torch.Tensor] | None:
        """The characters each position may take, for candidate-table rows (n, s): hanzi ids (n, s, c) and
        (n, s, c) bool, True at real entries (c = the most candidates of any position). None unconstrained:
        then every character but the specials, c = v."""
        return self.candidates.ids(rows) if constrained else None

    def _step(self, decoder: StepDecoder, previous: torch.Tensor, position: int, rows: torch.Tensor,
              allowed: tuple[torch.Tensor, torch.Tensor] | None, context: torch.Tensor | None
              ) -> tuple[torch.Tensor, torch.Tensor]:
        """One decoder step for the inputs at candidate-table ``rows`` (n,): scores of the characters they
        may take (log-probabilities, plus the n-gram model's share given each input's ``context``, the
        characters chosen before) and those characters' hanzi ids, both (n, c); padded entries get -inf.

        Constrained, only the allowed characters' logits are computed (``candidates=`` of
        ``StepDecoder.step``): a syllable has a few dozen characters, so gathering their n x c output rows
        is several times cheaper than the (n, d) x (d, v) output product, for one sentence and for a batch
        (measured 4x at n=256, c=60)."""
        if allowed is not None:
            ids, real = allowed[0][:, position], allowed[1][:, position]
            width = max(1, int(real.sum(dim=-1).max()))  # the longest list at this position
            ids, real = ids[:, :width], real[:, :width]
            candidates = ids[:, None, :].to(self.device)  # (n, 1, c): one position
            logits = decoder.step(previous, position, candidates)
        else:
            ids = torch.arange(len(self.hanzi_vocab)).expand(len(rows), -1)
            real = torch.where((rows == PAD_ROW)[:, None], self.candidates.table()[rows], self.candidates.unconstrained)
            logits = decoder.step(previous, position)
        log_probs = logits[:, -1].float().cpu().masked_fill(~real, float("-inf")).log_softmax(-1)
        return log_probs + self._lm_scores(context, ids), ids

    def _uses_lm(self, beam: int) -> bool:
        """Whether a search of this beam size adds the n-gram model's scores: beam search does, greedy
        decoding does not (see the class docstring)."""
        return self.char_lm is not None and beam > 1

    def _lm_scores(self, context: torch.Tensor | None, ids: torch.Tensor) -> torch.Tensor | float:
        """lm_weight x log P_lm(ids (n, c) | context (n, m)), or 0 without a character n-gram model (or without
        a context: the n-gram model is not used in this search). <pad> (past the end of a shorter input in
        the batch) scores 0, or inputs would pay for their neighbours' length."""
        if self.char_lm is None or context is None:
            return 0.0
        return (self.lm_weight * self.char_lm.log_prob(context, ids)).masked_fill(ids == PAD_ID, 0.0)

    def _start_context(self, rows: int) -> torch.Tensor:
        """(rows, m) the n-gram model's context before a sentence: <s> only."""
        return torch.full((rows, self._history), BOS_ID, dtype=torch.long)

    @staticmethod
    def _forced(allowed: tuple[torch.Tensor, torch.Tensor] | None, position: int) -> torch.Tensor | None:
        """The one character every input may take at ``position``, (n,) hanzi ids; None where some input
        has a choice (or decoding is unconstrained). Such a step has log-probability 0 under the model (the
        n-gram model, if any, still scores it)."""
        if allowed is None or not bool((allowed[1][:, position].sum(dim=-1) == 1).all()):
            return None
        return allowed[0][:, position, 0]

    def _encode(self, source: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Memory (b, s, d) and the cross-attention mask: None when no input is padded (a single sentence),
        so that attention need not apply an all-True mask at every step."""
        memory, padding_mask = self.model.encode(source)
        return memory, None if bool(padding_mask.all()) else padding_mask

    @torch.inference_mode()
    def greedy(self, token_lists, key_lists=None, constrained: bool = True, lm: bool = True
               ) -> list[tuple[list[int], float]]:
        """Greedy decoding, as in the book: at each step the most probable allowed character (the best-scoring
        one with a character n-gram model, unless ``lm`` is False), fed back as the next decoder input. The
        encoder runs once; the decoder caches keys/values, so each step costs one position. Returns (hanzi
        ids, score) per input. (``convert`` and ``convert_tokens`` decode greedily without the n-gram model:
        see :meth:`_uses_lm`.)"""
        key_lists = key_lists or token_lists
        source, rows = self._prepare(token_lists, key_lists)
        memory, cross_mask = self._encode(source)
        allowed = self._allowed(rows, constrained)
        decoder = StepDecoder(self.model, memory, cross_mask)
        previous = torch.full((len(token_lists), 1), BOS_ID, dtype=torch.long, device=self.device)
        chosen = torch.empty(source.shape, dtype=torch.long)
        scores = torch.zeros(len(token_lists))
        context = self._start_context(len(token_lists)) if lm and self.char_lm is not None else None
        for position in range(source.shape[1]):
            if position == source.shape[1] - 1 and (forced := self._forced(allowed, position)) is not None:
                chosen[:, position] = forced  # a fixed last character (the virtual 。): no decoder step
                scores += self._lm_scores(context, forced[:, None])[..., 0] if context is not None else 0.0
                break
            log_probs, ids = self._step(decoder, previous, position, rows[:, position], allowed, context)
            best, index = log_probs.max(dim=-1)
            chosen[:, position] = ids.gather(1, index[:, None]).squeeze(1)
            scores += best
            previous = chosen[:, position : position + 1].to(self.device)
            if context is not None:
                context = torch.cat([context[:, 1:], chosen[:, position : position + 1]], dim=1)
        return [(chosen[i, : len(tokens)].tolist(), float(scores[i])) for i, tokens in enumerate(token_lists)]

    @torch.inference_mode()
    def beam_search(self, token_lists, key_lists=None, beam: int = 5, constrained: bool = True
                    ) -> list[list[tuple[list[int], float]]]:
        """Batched beam search: the ``beam`` best-scoring partial conversions of every input are extended
        one position at a time; keys/values of the kept beams are reordered, not recomputed. Returns, per
        input, up to ``beam`` (hanzi ids, score) pairs, best first."""
        key_lists = key_lists or token_lists
        source, rows = self._prepare(token_lists, key_lists)
        batch, length = source.shape
        memory, cross_mask = self._encode(source)  # (b, s, d), (b, 1, 1, s) or None
        memory = repeat(memory, "b s d -> (b k) s d", k=beam)
        if cross_mask is not None:
            cross_mask = repeat(cross_mask, "b x y s -> (b k) x y s", k=beam)
        allowed = self._allowed(rows, constrained)
        if allowed is not None:
            allowed = tuple(repeat(part, "b s c -> (b k) s c", k=beam) for part in allowed)
        decoder = StepDecoder(self.model, memory, cross_mask)
        scores = torch.full((batch, beam), float("-inf"))
        scores[:, 0] = 0.0  # one live beam to start from
        history = torch.empty(batch, beam, 0, dtype=torch.long)
        previous = torch.full((batch * beam, 1), BOS_ID, dtype=torch.long, device=self.device)
        context = self._start_context(batch * beam)
        for position in range(length):
            if position == length - 1 and (forced := self._forced(allowed, position)) is not None:
                token = rearrange(forced, "(b k) -> b k", k=beam)  # a fixed last character: no decoder step
                history = torch.cat([history, token[..., None]], 2)
                if self.char_lm is not None:  # the n-gram model may still change the beams' order
                    scores = scores + rearrange(self._lm_scores(context, forced[:, None]), "(b k) 1 -> b k", k=beam)
                    scores, rank = scores.sort(dim=-1, descending=True)
                    history = history.gather(1, repeat(rank, "b k -> b k t", t=history.shape[2]))
                break
            beam_rows = repeat(rows[:, position], "b -> (b k)", k=beam)
            log_probs, ids = self._step(decoder, previous, position, beam_rows, allowed, context)
            width = log_probs.shape[-1]  # c allowed characters, the same for all beams of an input
            total = scores[:, :, None] + rearrange(log_probs, "(b k) c -> b k c", k=beam)
            scores, flat_index = rearrange(total, "b k c -> b (k c)").topk(beam, dim=-1)  # (b, k)
            parent = flat_index // width
            token = ids[::beam].gather(1, flat_index % width)  # (b, k) hanzi ids
            history = torch.cat([history.gather(1, repeat(parent, "b k -> b k t", t=position)), token[..., None]], 2)
            order = (torch.arange(batch)[:, None] * beam + parent).flatten()
            decoder.reorder(order.to(self.device))  # cross-attention keys/values are the same for all beams
            context = torch.cat([context[order, 1:], rearrange(token, "b k -> (b k) 1")], dim=1)
            previous = rearrange(token, "b k -> (b k) 1").to(self.device)
        results = []
        for i, tokens in enumerate(token_lists):
            alive = [k for k in range(beam) if scores[i, k] > float("-inf")]
            results.append([(history[i, k, : len(tokens)].tolist(), float(scores[i, k])) for k in alive])
        return results

    def _text(self, ids: list[int], keys: Sequence[str], constrained: bool) -> tuple[str, list[str]]:
        chars, notes = [], []
        for index, key in zip(ids, keys):
            fallback = self.candidates.fallbacks[self.candidates.row(key)]
            if constrained and fallback is not None:
                chars.append(fallback)
                if fallback != (key[1] if is_literal_key(key) else key):
                    notes.append(f"no character of '{key}' is in the model's vocabulary: used '{fallback}'")
            else:
                chars.append(self.hanzi_vocab.tokens[index])
        return "".join(chars), notes

    def _search(self, readings: list[tuple[list[str], list[str]]], beam: int, constrained: bool,
                batch_size: int) -> list[list[Conversion]]:
        """Conversions (best first) of each (tokens, keys) reading, decoded in batches of similar length."""
        results: list[list[Conversion]] = [[] for _ in readings]
        order = sorted(range(len(readings)), key=lambda i: len(readings[i][0]))
        for begin in range(0, len(order), batch_size):
            indices = [i for i in order[begin : begin + batch_size] if readings[i][0]]
            for i in order[begin : begin + batch_size]:
                if not readings[i][0]:
                    results[i] = [Conversion("", 0.0)]
            if not indices:
                continue
            tokens = [readings[i][0] for i in indices]
            keys = [readings[i][1] for i in indices]
            if beam == 1:
                found = [[hypothesis] for hypothesis in self.greedy(tokens, keys, constrained, self._uses_lm(beam))]
            else:
                found = self.beam_search(tokens, keys, beam, constrained)
            for i, hypotheses in zip(indices, found):
                for ids, score in hypotheses:
                    text, notes = self._text(ids, readings[i][1], constrained)
                    results[i].append(Conversion(text, score, list(readings[i][0]), notes))
        return results

    # ------------------------------------------------------------------------------------- public API

    def convert_tokens(self, token_lists: Sequence[Sequence[str]], *, constrained: bool = True,
                       batch_size: int = 256, beam: int = 1) -> list[str]:
        """One output per token list (same order; an empty list gives ""). Token lists longer than the
        window are converted window by window."""
        pieces = [(i, list(tokens[start : start + self.window]))
                  for i, tokens in enumerate(token_lists) for start in range(0, max(len(tokens), 1), self.window)]
        found = self._search([(tokens, tokens) for _, tokens in pieces], beam, constrained, batch_size)
        outputs = [""] * len(token_lists)
        for (i, _), conversions in zip(pieces, found):
            outputs[i] += conversions[0].text
        return outputs

    def _chunks(self, pieces: list[Piece]) -> list[list[Piece]]:
        """Pieces grouped into chunks of at most ``window`` tokens (by each piece's first reading), cut after
        punctuation where possible; a letter run longer than a window is cut into windows."""
        chunks, current, size, cut = [], [], 0, 0
        for piece in pieces:
            n = len(piece.options[0])
            if n > self.window:
                if current:
                    chunks.append(current)
                best = piece.options[0]
                chunks.extend([Piece((best[s : s + self.window],))] for s in range(0, n, self.window))
                current, size, cut = [], 0, 0
                continue
            while current and size + n > self.window:
                head, current = (current[:cut], current[cut:]) if cut else (current, [])
                chunks.append(head)
                size, cut = sum(len(p.options[0]) for p in current), 0
            current.append(piece)
            size += n
            if len(piece.options) == 1 and piece.options[0][-1][0] in CLAUSE_PUNCTUATION:
                cut = len(current)
        if current or not chunks:
            chunks.append(current)
        return chunks

    def convert(self, lines: Sequence[str], *, beam: int = 1, nbest: int = 1, constrained: bool = True,
                batch_size: int = 256, alternatives_limit: int = 4,
                chinese_punctuation: bool = False) -> list[list[Conversion]]:
        """Typed lines -> up to ``nbest`` distinct conversions each, best first.

        Each alternative reading of ambiguous input (``xian`` = xian / xi'an) is decoded and the model's
        score picks among them. Input longer than one window is converted chunk by chunk (cut at
        punctuation); its n-best list then holds the best conversion only."""
        beam = max(beam, nbest)
        lm_active = self._uses_lm(beam)
        readings: list[tuple[list[str], list[str]]] = []
        priors: list[float] = []  # per reading: log P(syllables) - split_penalty * extra syllables
        chunk_readings: dict[tuple[int, int], list[int]] = {}  # (line, chunk) -> its readings' indices
        chunk_counts = []
        open_chunks: set[tuple[int, int]] = set()  # decoded with a virtual clause end (see __init__)
        for line_index, line in enumerate(lines):
            score = self.syllable_lm.bigram_log_prob if self.syllable_lm is not None else fewest_syllables
            chunks = self._chunks(parse_pieces(line, alternatives_limit, score))
            chunk_counts.append(len(chunks))
            for chunk_index, chunk in enumerate(chunks):
                options = alternatives(chunk, alternatives_limit)
                fewest = min(len(reading) for reading in options)
                # Only the line's last chunk ends the clause; a letter last means no punctuation was typed.
                ends_open = (self.clause_end and chunk_index == len(chunks) - 1 and bool(chunk)
                             and not is_literal_key(chunk[-1].options[0][-1][1]))
                if ends_open:
                    open_chunks.add((line_index, chunk_index))
                scored = []  # (tokens, keys, prior) per reading
                for reading in options:
                    tokens = [token for token, _ in reading]
                    prior = self.syllable_lm.log_prob(tokens) if self.syllable_lm is not None else 0.0
                    prior -= self.split_penalty * (len(reading) - fewest)
                    scored.append((tokens, [key for _, key in reading], prior))
                if lm_active:  # see below: with the n-gram model, only readings near the best
                    best_prior = max(prior for _, _, prior in scored)
                    scored = [entry for entry in scored if entry[2] >= best_prior - self.reading_margin]
                for tokens, keys, prior in scored:
                    if ends_open:
                        tokens, keys = tokens + [CLAUSE_END_MARK], keys + [literal_key(CLAUSE_END_MARK)]
                    chunk_readings.setdefault((line_index, chunk_index), []).append(len(readings))
                    readings.append((tokens, keys))
                    priors.append(prior)
        found: list[list[Conversion] | None] = [None] * len(readings)

        def decode(indices: list[int]) -> None:
            searched = self._search([readings[i] for i in indices], beam, constrained, batch_size)
            for i, conversions in zip(indices, searched):
                for conversion in conversions:
                    conversion.score += priors[i]
                found[i] = conversions

        # Best first: log P(hanzi | syllables) <= 0 (and so are the n-gram model's terms), so a reading whose
        # prior is below the nbest-th score already found cannot enter the n-best list and need not be
        # decoded. Decoding each chunk's most probable reading first leaves almost nothing else (for 97% of
        # ambiguous 10-syllable test lines). Not so with the n-gram model: its terms lower every score, and
        # most alternatives would survive. So with it, readings whose prior is more than reading_margin below
        # the chunk's best were dropped above: a heuristic, not a bound. On 600 PD test clauses (4-gram
        # model, then still used by greedy search) a reading other than the best-prior one won 2 times
        # segmented and 3 times run together, always within 3 of the best prior (and always wrongly), while
        # 70% of the alternatives of 10-syllable lines lie more than 8 below it. Then, when one batch holds
        # the remaining readings (a typed line), they are decoded together at once, instead of in two passes
        # one after the other (10-syllable PD lines, greedy search with the n-gram model, one thread,
        # measured once on a loaded machine: 36 -> 25 ms; without the n-gram model one pass would cost
        # 13 -> 20 ms).
        if lm_active and len(readings) <= batch_size:
            decode(list(range(len(readings))))
        decode([max(indices, key=priors.__getitem__) for indices in chunk_readings.values()
                if all(found[i] is None for i in indices)])
        remaining = []
        for indices in chunk_readings.values():
            best_by_text: dict[str, float] = {}
            for conversion in (c for i in indices if found[i] is not None for c in found[i]):
                best_by_text[conversion.text] = max(conversion.score, best_by_text.get(conversion.text, float("-inf")))
            scores = sorted(best_by_text.values(), reverse=True)
            bar = scores[nbest - 1] if len(scores) >= nbest else float("-inf")
            remaining += [i for i in indices if found[i] is None and priors[i] >= bar]
        decode(remaining)
        per_chunk = {key: [c for i in indices if found[i] is not None for c in found[i]]
                     for key, indices in chunk_readings.items()}
        for key in open_chunks:  # the virtual 。 was forced (log-probability 0): drop it, score unchanged
            per_chunk[key] = [Conversion(c.text[:-1], c.score, c.tokens[:-1], c.notes) for c in per_chunk[key]]
        outputs = []
        for line_index, count in enumerate(chunk_counts):
            ranked = []  # per chunk: distinct texts, each with its best-scoring reading, best first
            for chunk_index in range(count):
                by_text: dict[str, Conversion] = {}
                for conversion in per_chunk[(line_index, chunk_index)]:
                    if conversion.text not in by_text or conversion.score > by_text[conversion.text].score:
                        by_text[conversion.text] = conversion
                ranked.append(sorted(by_text.values(), key=lambda c: -c.score))
            if count == 1:
                best = ranked[0][:nbest]
            else:
                parts = [chunk[0] for chunk in ranked]
                best = [Conversion("".join(p.text for p in parts), sum(p.score for p in parts),
                                   [t for p in parts for t in p.tokens], [n for p in parts for n in p.notes])]
            if chinese_punctuation:
                best = [_chinese_punctuation(conversion) for conversion in best]
            outputs.append(best)
        return outputs


def _chinese_punctuation(conversion: Conversion) -> Conversion:
    """ASCII , . ? ! right after a hanzi become ，。？！ (``1.5`` and ``OK!`` stay as they are)."""
    chars = list(conversion.text)
    for i, char in enumerate(chars):
        if char in ASCII_TO_CHINESE_PUNCTUATION and i > 0 and is_hanzi(chars[i - 1]):
            chars[i] = ASCII_TO_CHINESE_PUNCTUATION[char]
    return Conversion("".join(chars), conversion.score, conversion.tokens, conversion.notes)

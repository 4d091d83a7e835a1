"""Search: the hanzi sequences a trained model scores best for given pinyin ids.

One step loop, :func:`beam_search`, in the manner of OpenNMT-py's ``beam_search.py`` and fairseq's
``search.py``; greedy decoding is beam 1. What it keeps between steps (the hypotheses' scores and characters,
the decoder's inputs and cache, the inputs that finished) is one object whose steps it calls: drop the
finished inputs, score the allowed characters, keep the best extensions. Two things plug in at one place each:
- :class:`Constraint`: the characters each position may take (the lexicon's lists of a syllable's hanzi,
  or any character when unconstrained);
- :class:`NgramFusion`: shallow fusion of models of the next character given the ones before it (the
  character n-gram model of lm/char_ngram.py, the word model of lm/word.py), wherever a search is given one;
  a fused model that reads ahead (the user history's, lm/history_lm.py) also mixes what it knows of the
  whole input's syllables into the network's distribution, once per search (:class:`ReadAhead`).

The search runs what it is given: which beam, constraint and fusion a call uses is decided once, in
settings.py (greedy conversion, for one, is given no fusion).

Scores are sums of log-probabilities, each a softmax over the allowed characters of its position, plus the
fused models' weighted log-probabilities of each character where they are used.
"""

from __future__ import annotations

from typing import Protocol, Sequence

import torch

from pinyin_hanzi.data.vocab import BOS_ID, PAD_ID
from pinyin_hanzi.models.inference import InferenceDecoder
from pinyin_hanzi.models.transformer import Transformer
from pinyin_hanzi.text.lexicon import PAD_ROW, Lexicon

Hypothesis = tuple[list[int], float]  # hanzi ids, score


class Constraint:
    """The characters each position of each input may take, from the inputs' lexicon rows (n, s)
    (``PAD_ROW`` past each end). Constrained: the rows' lists of hanzi ids, and the model computes the
    logits of those ids only. Unconstrained: any character but the specials (<pad> alone past the end)."""

    def __init__(self, lexicon: Lexicon, rows: torch.Tensor, constrained: bool = True):
        self.lexicon, self.rows = lexicon, rows
        self.lists = lexicon.ids(rows) if constrained else None  # (n, s, c) ids, (n, s, c) bool
        # per position, asked once rather than at every step: the longest list, and whether every input has
        # exactly one character; a row of one-character lists is added (widths are at least 1, and a batch of
        # no inputs still has positions)
        # and whether some list is padded there: shorter than the longest, or an input's end passed (its list is
        # <pad> alone, which the fused models must not score); a single input's never is
        self.widths = self.single = self.padded = None
        if constrained:
            lengths = self.lists[1].sum(dim=-1)
            widths = torch.cat([lengths, torch.ones(1, rows.shape[1], dtype=torch.long)]).amax(dim=0)
            self.widths, self.single = widths.tolist(), (lengths == 1).all(dim=0).tolist()
            self.padded = ((lengths != widths) | (rows == PAD_ROW)).any(dim=0).tolist()

    def at(self, position: int) -> tuple[torch.Tensor, torch.Tensor | None, bool]:
        """The allowed characters at ``position``: hanzi ids (n, c); (n, c) bool True at real entries, or None
        where all are real (no list is padded); and whether ids are lists to compute the logits of (else they
        are the whole vocabulary, c = v)."""
        if self.lists is None:
            rows = self.rows[:, position]
            ids = torch.arange(len(self.lexicon.hanzi_vocab)).expand(len(rows), -1)
            real = torch.where((rows == PAD_ROW)[:, None], self.lexicon.table()[rows], self.lexicon.unconstrained)
            return ids, real, False
        width = self.widths[position]  # the longest list at this position
        real = self.lists[1][:, position, :width] if self.padded[position] else None
        return self.lists[0][:, position, :width], real, True

    def forced(self, position: int) -> torch.Tensor | None:
        """The one character every input may take at ``position``, (n,) hanzi ids; None where some input
        has a choice (or decoding is unconstrained)."""
        if self.lists is None or not self.single[position]:
            return None
        return self.lists[0][:, position, 0]


class LanguageModel(Protocol):
    """A model of the next character given the ones before it (CharNgramLM, WordLexiconLM)."""

    order: int  # it reads the last order - 1 characters of a context

    def log_prob(self, context: torch.Tensor, candidates: torch.Tensor) -> torch.Tensor: ...

    # Optionally (CharNgramLM): log_prob_entries(context (n, m), rows (R,), candidates (R,)) -> (R,), the
    # log-probability of each candidate after the context of its row, which NgramFusion then asks for a
    # batch's mostly padded lists instead of log_prob over every pad.


class NgramFusion:
    """Shallow fusion: each character's score gets the sum of ``weight`` x log P(character | the characters
    before it) over ``models``, (model, weight) pairs of anything with an ``order`` and a
    ``log_prob(context, candidates)`` as CharNgramLM has. The context of a hypothesis is its last
    ``max(order) - 1`` characters (at least one), (n, m) ids; each model reads as much of it as it needs."""

    def __init__(self, models: Sequence[tuple[LanguageModel, float]]):
        self.models = [(model, weight) for model, weight in models if weight > 0]
        self.history = max([model.order - 1 for model, _ in self.models] + [1])

    def read_ahead(self, constraint: Constraint) -> ReadAhead | None:
        """What the models that read ahead (``span_shares``) make of the inputs' candidate lists, or None."""
        if constraint.lists is None:
            return None
        for model, _ in self.models:
            if hasattr(model, "span_shares") and (found := model.span_shares(*(x.numpy() for x in constraint.lists))):
                return ReadAhead(*(torch.from_numpy(x) for x in found))
        return None

    def scores(self, context: torch.Tensor, ids: torch.Tensor, padded: bool = True) -> torch.Tensor:
        """sum of weight x log P(ids (n, c) | context (n, m)) -> (n, c). <pad> (past the end of a shorter input in
        the batch) scores 0, or inputs would pay for their neighbours' length; ``padded`` False: the caller
        knows ids hold none (a single input's lists), and they are not looked for."""
        if not padded:
            return self._sum(context, ids)
        real = ids != PAD_ID
        count = int(real.sum())
        if count == real.numel():
            return self._sum(context, ids)
        # mostly <pad>, as a batch's lists are, padded to the longest at each position: the real entries alone
        entries = real.nonzero(as_tuple=True) if 2 * count < real.numel() else None
        return torch.where(real, self._sum(context, ids, entries), 0.0)

    def _sum(self, context: torch.Tensor, ids: torch.Tensor,
             entries: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
        """sum of weight x log P(ids (n, c) | context (n, m)) over the models; ``entries``: (rows, columns) of
        the entries to score, each alone with its row's context looked up once, by the models that can (the
        others score every entry), the rest 0."""
        total = None
        for model, weight in self.models:
            if entries is not None and hasattr(model, "log_prob_entries"):
                rows, columns = entries
                scores = torch.zeros(ids.shape).index_put_(
                    entries, weight * model.log_prob_entries(context, rows, ids[rows, columns]))  # (R,) placed
            else:
                scores = weight * model.log_prob(context, ids)
            total = scores if total is None else total + scores
        return total


class ReadAhead:
    """Per input and position, a distribution over the candidate list (n, s, c) and its share μ (n, s) in a
    mixture with the network's: log((1 - μ) P_net + μ P) replaces log P_net where μ > 0."""

    def __init__(self, shares: torch.Tensor, weights: torch.Tensor):
        self.shares, self.weights = shares, weights

    def mix(self, log_probs: torch.Tensor, position: int, done: int) -> torch.Tensor:
        """The network's log-probabilities (b, r, c) at ``position`` of the inputs from ``done`` on, mixed."""
        weights = self.weights[done:, position]
        if not bool(weights.any()):
            return log_probs
        weights, shares = weights[:, None, None], self.shares[done:, position, None, : log_probs.shape[-1]]
        mixed = ((1 - weights) * log_probs.double().exp() + weights * shares).log().float()
        return torch.where(weights > 0, mixed, log_probs)


def encode(model: Transformer, source: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Memory (b, s, d) and the cross-attention mask (b, 1, 1, s): None when no input is padded (a single
    sentence), so that attention need not apply an all-True mask at every step."""
    memory, padding_mask = model.encode(source)
    return memory, None if bool(padding_mask.all()) else padding_mask


@torch.inference_mode()
def beam_search(model: Transformer | InferenceDecoder, source: torch.Tensor, constraint: Constraint, *, beam: int = 1,
                fusion: NgramFusion | None = None) -> list[list[Hypothesis]]:
    """The ``beam`` best-scoring conversions of each input: source (b, s) pinyin ids on the model's device,
    <pad> after each input -> per input, up to ``beam`` (hanzi ids, one per pinyin id; score), best first.
    Partial conversions are extended one position at a time; the decoder's cache is reordered with the
    kept beams, not recomputed. ``fusion``, where given, adds its models' scores at every step, at any beam.
    Beam 1 is greedy decoding: the most probable allowed character at each step, fed back as the next
    decoder input. A fixed last character (one allowed character for every input, e.g. a virtual 。) gets
    no decoder step: its log-probability is 0 (the fused models, if any, still score it). ``model``: a
    Transformer, or the :class:`InferenceDecoder` a converter keeps (with its bf16 weights)."""
    if not isinstance(model, InferenceDecoder):  # the cached decoder step without nn.Module's per-step lookups
        model = InferenceDecoder(model)
    length = source.shape[1]
    lengths = (source != PAD_ID).sum(dim=1).tolist()
    beams = _Beams(model, source, beam, fusion.history if fusion is not None else 0)
    ahead = fusion.read_ahead(constraint) if fusion is not None else None
    for position in range(length):
        beams.drop_finished(lengths, position)
        context = beams.context(position)  # (b r, m), or None without fusion
        if position == length - 1 and (forced := constraint.forced(position)) is not None:
            beams.force_last(forced, position, fusion, context)
            break
        ids, real, lists = constraint.at(position)  # the constraint's one place: (b, c) allowed ids
        if beams.done:
            ids, real = ids[beams.done :], None if real is None else real[beams.done :]
        log_probs = beams.model_log_probs(model, ids, real, lists)  # (b, r, c)
        if ahead is not None:
            log_probs = ahead.mix(log_probs, position, beams.done)
        if fusion is not None:  # the fused models' one place (and the forced last character's, above)
            listed = ids if beams.rows == 1 else ids.repeat_interleave(beams.rows, dim=0)
            log_probs = log_probs + fusion.scores(context, listed, padded=real is not None).view(log_probs.shape)
        beams.extend(log_probs, ids, position)
    return beams.results(lengths)


class _Beams:
    """A search's hypotheses between steps, for the inputs still in the batch: their scores (b, k), the hanzi
    ids chosen so far, and what the decoder reads at the next step (the memory, the cross-attention mask, the
    last characters chosen, the cache). Inputs whose last position is decoded are finished: once those at the
    front of the batch are (a converter sorts a batch by length), they leave it for the final tables, and the
    steps after run on the others alone."""

    def __init__(self, model: InferenceDecoder, source: torch.Tensor, beam: int, lead: int):
        """``lead``: the fused models' context before the first character, m <s> (0 without fusion)."""
        batch, length = source.shape
        self.beam, self.lead, self.batch, self.device = beam, lead, batch, source.device
        # asked once: a tensor's device, and a move to where it is, cost a call
        self.on_cpu = source.device.type == "cpu"
        self.memory, self.cross_mask = encode(model, source)  # (b, s, d), (b, 1, 1, s) or None
        self.cache = model.new_cache()
        self.rows = 1  # decoder rows per input: one (after <s> all beams are alike) at the first step, then beam
        self.scores = torch.full((batch, beam), float("-inf"))
        self.scores[:, 0] = 0.0  # one live beam to start from
        # (b, k, m + s): the hanzi ids chosen so far, after m <s> (the fused models' context before the first
        # character): the context of position p's step is columns p to p + m, a view, reordered with the beams
        self.history = torch.full((batch, beam, lead + length), BOS_ID, dtype=torch.long)
        self.previous = torch.full((batch, 1), BOS_ID, dtype=torch.long, device=source.device)  # (b r, 1)
        self.final_scores, self.final_history = self.scores.clone(), torch.zeros_like(self.history)
        self.done = 0  # inputs that left the batch, finished

    def to_device(self, tensor: torch.Tensor) -> torch.Tensor:
        return tensor if self.on_cpu else tensor.to(self.device)

    def drop_finished(self, lengths: list[int], position: int) -> None:
        """The leading inputs whose length (``lengths``: every input's) ends before ``position`` leave the
        batch, unless all of it would."""
        finished, done, rows = 0, self.done, self.rows  # finished: leading finished inputs
        while finished < self.batch and lengths[done + finished] <= position:
            finished += 1
        if not finished or finished == self.batch:
            return
        self.final_scores[done : done + finished] = self.scores[:finished]
        self.final_history[done : done + finished] = self.history[:finished]
        self.memory, self.scores, self.history = self.memory[finished:], self.scores[finished:], self.history[finished:]
        self.cross_mask = None if self.cross_mask is None else self.cross_mask[finished:]
        self.previous = self.previous[finished * rows :]
        self.cache.drop_front(finished, rows)
        self.batch, self.done = self.batch - finished, done + finished

    def context(self, position: int) -> torch.Tensor | None:
        """The fused models' context at ``position``: each decoder row's last m characters, (b r, m); None
        without fusion."""
        if not self.lead:
            return None
        return self.history[:, : self.rows, position : position + self.lead].reshape(self.batch * self.rows, self.lead)

    def force_last(self, forced: torch.Tensor, position: int, fusion: NgramFusion | None,
                   context: torch.Tensor | None) -> None:
        """Every beam ends in its input's forced character (``forced``: (n,), one per input of the search)
        at the last ``position``, without a decoder step; the fused models may still change the beams' order."""
        forced = forced[self.done :]
        self.history[:, :, self.lead + position] = forced[:, None]
        if fusion is not None:
            self.scores, self.history = _fuse_forced(fusion, context, forced, self.rows, self.scores, self.history)

    def model_log_probs(self, model: InferenceDecoder, ids: torch.Tensor, real: torch.Tensor | None,
                        lists: bool) -> torch.Tensor:
        """The model's log-probabilities of the allowed characters ``ids`` (b, c) (``real``, (b, c) or None:
        where they are not padding; ``lists``: ids are lists, not the whole vocabulary) after each decoder row,
        (b, r, c), fp32 on the CPU: a softmax over each input's allowed characters."""
        # an input's rows share its list: the model gathers the list's output rows once, not per row
        logits = model.decode(self.previous, self.memory, self.cross_mask, cache=self.cache,
                              candidates=self.to_device(ids[:, None, :]) if lists else None)  # (b r, 1, c)
        if not self.on_cpu or logits.dtype != torch.float32:
            logits = logits.to("cpu", torch.float32)
        logits = logits.view(self.batch, self.rows, logits.shape[-1])
        if real is not None:  # padded lists (a batch's): their padding is no choice
            logits = torch.where(real[:, None, :], logits, float("-inf"))
        return logits.log_softmax(-1)

    def extend(self, log_probs: torch.Tensor, ids: torch.Tensor, position: int) -> None:
        """Keeps the ``beam`` best extensions of each input's hypotheses by the characters ``ids`` (b, c), given
        their log-probabilities (b, r, c) at ``position``; the cache follows the kept beams."""
        batch, rows, width = log_probs.shape
        beam = self.beam
        total = (self.scores[:, :rows, None] + log_probs).view(batch, rows * width)  # (b, r c)
        short = rows * width < beam  # fewer choices than beams (a first step with a short list): dead beams
        if short:
            total = torch.cat([total, total.new_full((batch, beam - rows * width), float("-inf"))], dim=1)
        self.scores, flat_index = total.topk(beam, dim=-1)  # (b, k)
        if short:
            flat_index = flat_index.clamp(max=rows * width - 1)  # a dead beam's index points at a real entry
        parent = flat_index // width
        token = ids.gather(1, flat_index % width)  # (b, k) hanzi ids
        if beam > 1:
            self.history = self.history.gather(1, parent[..., None].expand_as(self.history))
            # the rows kept, (b k,): an input's parents are among its own rows
            order = parent.view(-1) if batch == 1 else (torch.arange(batch)[:, None] * rows + parent).view(-1)
            self.cache.reorder(self.to_device(order))  # from one row per input to k after the first step
            self.rows = beam  # an input's k rows share its memory (InferenceDecoder.decode): it is not repeated
        self.history[:, :, self.lead + position] = token
        self.previous = self.to_device(token.view(batch * beam, 1))

    def results(self, lengths: list[int]) -> list[list[Hypothesis]]:
        """Per input (``lengths``: each one's), its live beams, best first: (hanzi ids, score)."""
        self.final_scores[self.done :], self.final_history[self.done :] = self.scores, self.history
        # dead beams (fewer candidates than beams) score -inf; NaN (broken weights) stays
        history, scores = self.final_history[:, :, self.lead :].tolist(), self.final_scores.tolist()
        return [[(history[i][k][: lengths[i]], scores[i][k]) for k in range(self.beam)
                 if scores[i][k] != float("-inf")] for i in range(len(lengths))]


def _fuse_forced(fusion: NgramFusion, context: torch.Tensor, forced: torch.Tensor, rows: int, scores: torch.Tensor,
                 history: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Scores (b, k) and history (b, k, s) of the beams after the fused models score the forced last
    characters ``forced`` (b,), re-sorted best first."""
    batch = len(forced)
    fused = fusion.scores(context, forced.repeat_interleave(rows)[:, None]).view(batch, rows)
    scores, rank = (scores + fused).sort(dim=-1, descending=True)
    return scores, history.gather(1, rank[..., None].expand_as(history))

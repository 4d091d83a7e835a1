"""Word knowledge for decoding: a word-unigram model read as a model of characters.

The character n-gram model (char_lm.py) is counted from the training text and knows which characters
follow which there; it cannot know which of two homophone words people say when that text rarely has
them (兽医 or 收益, 视野 or 时也). A word-frequency table counted from a large modern corpus does. This
module turns such a table into scores that decoding can add character by character, as it adds the
n-gram model's:

    P(c_1 .. c_t is how the text begins) = sum over segmentations of c_1 .. c_t into words w_1 .. w_k and a
    beginning p of the next word:  P(w_1) ... P(w_k) * M(p)

where P(w) is the word's frequency and M(p) the total frequency of the words that begin with p (a word
counts as beginning with itself). A character's score is the log-ratio of this prefix probability with
and without it, so the scores of all characters after a given text sum to one: a proper model of the
next character, a word-unigram model, with no knowledge across word boundaries (the n-gram model and the
network supply that). Characters outside every word keep a small floor frequency.

Sums over segmentations are kept as forward log-probabilities A(i) = log P(the first i characters end a
word). They are computed over a window of the last ``window`` characters, as if a word began at the
window's start: stateless, so the search passes the same recent-characters context it passes the n-gram
model. Any character that is not a hanzi (``<s>``, punctuation, digits, letters) is a certain word
boundary and scores 0.

Words and their prefixes are stored as sorted int64 keys (the characters' hanzi ids as digits in base v,
plus the length times v ** max_word_len), looked up with ``torch.searchsorted`` as in char_lm.py.
"""

from __future__ import annotations

import math
from typing import Mapping

import torch

from pinyin_hanzi.pinyin import is_hanzi
from pinyin_hanzi.vocab import Vocab

MAX_WORD_LEN = 4  # 4 characters in base v=10k+ still fit int64 keys; longer words are rare and left out
FLOOR = 1e-8  # frequency of a hanzi of the vocabulary that is in no word of the table


def _find(keys: torch.Tensor, values: torch.Tensor, queries: torch.Tensor) -> torch.Tensor:
    """values[index of each query in the sorted ``keys``], -inf where a query is not there."""
    index = torch.searchsorted(keys, queries).clamp_(max=len(keys) - 1)
    return torch.where(keys[index] == queries, values[index], float("-inf"))


class WordLexiconLM:
    """Word-unigram scores of the next hanzi given the ``window`` characters before it (hanzi ids of one
    vocabulary). ``order`` = window + 1, like the n-gram models: the context width decoding must keep."""

    def __init__(self, vocab_size: int, word_keys: torch.Tensor, word_log_probs: torch.Tensor,
                 prefix_keys: torch.Tensor, prefix_log_probs: torch.Tensor, is_word_char: torch.Tensor,
                 window: int = 6):
        if vocab_size ** MAX_WORD_LEN * (MAX_WORD_LEN + 1) >= 2**63:
            raise ValueError(f"{vocab_size} characters do not fit in int64 keys of {MAX_WORD_LEN}-character words")
        self.vocab_size, self.window, self.order = vocab_size, window, window + 1
        self.word_keys, self.word_log_probs = word_keys, word_log_probs.float()
        self.prefix_keys, self.prefix_log_probs = prefix_keys, prefix_log_probs.float()
        self.is_word_char = is_word_char  # (v,) bool: hanzi, which words are made of
        self._length_offset = vocab_size ** MAX_WORD_LEN

    @classmethod
    def from_frequencies(cls, frequencies: Mapping[str, float], hanzi_vocab: Vocab, window: int = 6,
                         min_frequency: float = 0.0) -> "WordLexiconLM":
        """From a word -> frequency (or count) table: words of 1..MAX_WORD_LEN hanzi of ``hanzi_vocab``
        whose frequency is at least ``min_frequency`` (as a share of the table's total), normalised; every
        other hanzi of the vocabulary is a one-character word of frequency FLOOR."""
        total = sum(frequencies.values()) or 1.0
        words: dict[str, float] = {}
        for word, frequency in frequencies.items():
            share = frequency / total
            if (1 <= len(word) <= MAX_WORD_LEN and share >= min_frequency and share > 0
                    and all(is_hanzi(char) and char in hanzi_vocab.ids for char in word)):
                words[word] = words.get(word, 0.0) + share
        is_word_char = torch.tensor([len(token) == 1 and is_hanzi(token) for token in hanzi_vocab.tokens])
        for index in is_word_char.nonzero().flatten().tolist():
            words.setdefault(hanzi_vocab.tokens[index], FLOOR)
        norm = sum(words.values())
        prefixes: dict[str, float] = {}
        for word, share in words.items():
            for end in range(1, len(word) + 1):
                prefixes[word[:end]] = prefixes.get(word[:end], 0.0) + share / norm
        v = len(hanzi_vocab)

        def table(entries: dict[str, float]) -> tuple[torch.Tensor, torch.Tensor]:
            keys = torch.tensor([_key(hanzi_vocab.encode(text), v) for text in entries], dtype=torch.long)
            log_probs = torch.tensor([math.log(value) for value in entries.values()])
            order = keys.argsort()
            return keys[order], log_probs[order]

        return cls(v, *table({word: share / norm for word, share in words.items()}), *table(prefixes),
                   is_word_char, window)

    def _span_keys(self, ids: torch.Tensor) -> torch.Tensor:
        """ids (n, w) -> (n, w, L) keys of the spans ending at each position, of lengths L..1 (column j: the
        span of length L - j); spans that would start before the first column get key -1 (never found)."""
        n, width = ids.shape
        keys = torch.full((n, width, MAX_WORD_LEN), -1, dtype=torch.long)
        # The span of length l ending at i has the digits ids[i-l+1 .. i], oldest first: its key is the
        # key of the span of length l - 1 plus ids[i-l+1] * v ** (l - 1).
        power = 1
        running = torch.zeros(n, width, dtype=torch.long)
        for length in range(1, MAX_WORD_LEN + 1):
            shifted = torch.full((n, width), -1, dtype=torch.long)
            shifted[:, length - 1 :] = ids[:, : width - length + 1]  # the oldest character of each span
            running = torch.where(shifted >= 0, running + shifted * power, running)
            power *= self.vocab_size
            valid = torch.arange(width) >= length - 1
            keys[:, :, MAX_WORD_LEN - length] = torch.where(valid, running + length * self._length_offset, -1)
        return keys

    def _forward(self, context: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """context (n, w) -> A (n, w + 1): log P(the first i characters of the window end a word), A[:, 0] = 0,
        and (n, w, L) span keys (see :meth:`_span_keys`)."""
        n, width = context.shape
        span_keys = self._span_keys(context)
        span_log_probs = _find(self.word_keys, self.word_log_probs, span_keys)  # (n, w, L)
        boundary = ~self.is_word_char[context]  # (n, w): a certain boundary at non-hanzi
        forward = torch.full((n, width + 1), float("-inf"))
        forward[:, 0] = 0.0
        for end in range(1, width + 1):
            starts = torch.arange(end - MAX_WORD_LEN, end)  # span of length L..1 ending at end
            before = torch.where(starts >= 0, forward[:, starts.clamp(min=0)], float("-inf"))  # (n, L)
            words = torch.logsumexp(before + span_log_probs[:, end - 1], dim=1)
            forward[:, end] = torch.where(boundary[:, end - 1], forward[:, end - 1], words)
        return forward, span_keys

    def log_prob(self, context: torch.Tensor, candidates: torch.Tensor) -> torch.Tensor:
        """context (n, m): preceding hanzi ids, oldest first (m >= window; ``<s>`` before a sentence's
        start); candidates (n, c) hanzi ids -> (n, c) log P(candidate | context) under the word-unigram
        model; 0 for candidates that are not hanzi."""
        context = context[:, -self.window :]
        n, width = context.shape
        c = candidates.shape[1]
        forward, _ = self._forward(context)
        # The text so far as a prefix: a word boundary at the end, or a word begun at one of the last L starts.
        ends_with_boundary = ~self.is_word_char[context[:, -1]]

        def prefix_score(sequence: torch.Tensor, before: torch.Tensor) -> torch.Tensor:
            """sequence (k, w') and its forward values before (k, w'+1) -> (k,) log P(prefix)."""
            keys = self._span_keys(sequence[:, -MAX_WORD_LEN:])[:, -1].contiguous()  # (k, L): spans ending at the end
            log_masses = _find(self.prefix_keys, self.prefix_log_probs, keys)
            end = sequence.shape[1]
            starts = torch.arange(end - MAX_WORD_LEN, end)
            valid = starts >= 0
            starts_before = before[:, starts.clamp(min=0)].masked_fill(~valid, float("-inf"))
            return torch.logsumexp(starts_before + log_masses, dim=1)

        old = torch.where(ends_with_boundary, forward[:, -1], prefix_score(context, forward))  # (n,)
        extended = torch.cat([context.repeat_interleave(c, 0), candidates.reshape(-1, 1)], dim=1)  # (n c, w+1)
        new = prefix_score(extended, forward.repeat_interleave(c, 0)).view(n, c)
        scores = new - old[:, None]
        return torch.where(self.is_word_char[candidates], scores, 0.0)

    def size(self) -> int:
        """The number of words in the table (one-character floor entries included)."""
        return len(self.word_keys)

    def state_dict(self) -> dict:
        return {"vocab_size": self.vocab_size, "window": self.window, "word_keys": self.word_keys,
                "word_log_probs": self.word_log_probs.half(), "prefix_keys": self.prefix_keys,
                "prefix_log_probs": self.prefix_log_probs.half(), "is_word_char": self.is_word_char}

    @classmethod
    def from_state_dict(cls, state: dict) -> "WordLexiconLM":
        return cls(state["vocab_size"], state["word_keys"], state["word_log_probs"], state["prefix_keys"],
                   state["prefix_log_probs"], state["is_word_char"], state["window"])


def _key(ids: list[int], vocab_size: int) -> int:
    """The key of a span of hanzi ids: its ids as base-v digits, oldest first, plus its length's offset."""
    key = 0
    for id_ in ids:
        key = key * vocab_size + id_
    return key + len(ids) * vocab_size ** MAX_WORD_LEN

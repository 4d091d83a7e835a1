"""Word knowledge for decoding: a word-unigram model read as a model of characters.

The character n-gram model (char_ngram.py) is counted from the training text and knows which characters
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

**Contrast with the training text** (``contrast`` > 0, decode.word_contrast). The network and the n-gram
model already carry the word habits of the training text (news, novels), so a word model added on top
counts those habits twice and pulls text of the training sources off course. With a background, a
character's score is instead the log-ratio of two such models over the same words: the table's, and one
whose frequencies are the words' counts in the training text (segmented with the table's words, most
probable segmentation), mixed ``contrast`` : 1 - ``contrast`` with the table's own so that the ratio stays
bounded. Words that everyday speech uses more than the training text gain; words the training text uses
more than speech lose; words both use alike score about 0, and the network and the n-gram model decide.
This is the density-ratio method of adapting a language model to a new domain.

Words and their prefixes are stored as sorted int64 keys (the characters' hanzi ids as digits in base v,
plus the length times v ** max_word_len), looked up with ``torch.searchsorted`` as in char_ngram.py.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from typing import Iterable, Mapping

import torch

from pinyin_hanzi.data.sources import word_table
from pinyin_hanzi.data.vocab import Vocab
from pinyin_hanzi.lm.stored import is_int, is_vector
from pinyin_hanzi.text.pinyin import HANZI_CLASS, is_hanzi

MAX_WORD_LEN = 4  # 4 characters in base v=10k+ still fit int64 keys; longer words are rare and left out
FLOOR = 1e-8  # frequency of a hanzi of the vocabulary that is in no word of the table
MAX_WINDOW = 32  # the widest stored window: decoding keeps this many characters per hypothesis
_HANZI_RUNS = re.compile(f"[{HANZI_CLASS}]+")


def _find(keys: torch.Tensor, values: torch.Tensor, queries: torch.Tensor) -> torch.Tensor:
    """values[index of each query in the sorted ``keys``] (values (k, m) -> (*queries.shape, m)), -inf where
    a query is not there."""
    index = torch.searchsorted(keys, queries.contiguous()).clamp_(max=len(keys) - 1)  # a view warns and copies
    return torch.where((keys[index] == queries)[..., None], values[index], float("-inf"))


class WordLexiconLM:
    """Word-unigram scores of the next hanzi given the ``window`` characters before it (hanzi ids of one
    vocabulary), or with ``background_log_probs`` the log-ratio of two such models over the same words (see
    the module's docstring). ``order`` = window + 1, like the n-gram models: the context width decoding
    must keep."""

    def __init__(self, vocab_size: int, word_keys: torch.Tensor, word_log_probs: torch.Tensor,
                 is_word_char: torch.Tensor, window: int = 6, background_log_probs: torch.Tensor | None = None,
                 prefix_table: tuple[torch.Tensor, torch.Tensor] | None = None):
        """word_keys (w,) sorted int64 keys of the words (see :func:`word_key`), word_log_probs (w,) their log
        frequencies (normalised), is_word_char (v,) bool: the hanzi of the vocabulary; background_log_probs
        (w,) the same words' log frequencies in the background, or None; prefix_table: sorted keys (p,) of
        the words' beginnings and their log masses (p, m), one column per model, where a caller sets them
        itself (a user dictionary credits a word's beginnings as they are typed: user_words.py), else
        derived from the words (:meth:`_prefix_table`)."""
        if vocab_size ** MAX_WORD_LEN * (MAX_WORD_LEN + 1) >= 2**63:
            raise ValueError(f"{vocab_size} characters do not fit in int64 keys of {MAX_WORD_LEN}-character words")
        self.vocab_size, self.window, self.order = vocab_size, window, window + 1
        self.word_keys, self.word_log_probs = word_keys, word_log_probs.float()
        self.background_log_probs = None if background_log_probs is None else background_log_probs.float()
        self.is_word_char = is_word_char
        self._length_offset = vocab_size ** MAX_WORD_LEN
        # One column per model (the table's, the background's): the two share every key lookup.
        columns = [self.word_log_probs] + ([self.background_log_probs] if self.has_background else [])
        self._word_columns = torch.stack(columns, dim=1)  # (w, m)
        self.prefix_keys, self._prefix_columns = prefix_table if prefix_table is not None else self._prefix_table()

    @property
    def has_background(self) -> bool:
        return self.background_log_probs is not None

    def _prefix_table(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Every beginning of a word (the word itself included) with the total frequency of the words that
        begin so, per column: sorted keys (p,) and log masses (p, m). Derived from the words, so checkpoints
        store the words alone."""
        lengths = self.word_keys // self._length_offset
        digits = self.word_keys % self._length_offset  # the characters as base-v digits, oldest first
        probs = self._word_columns.double().exp()
        keys, masses = [], []
        for length in range(1, MAX_WORD_LEN + 1):
            longer = lengths >= length  # words with a beginning of this length
            beginning = digits[longer] // self.vocab_size ** (lengths[longer] - length)
            keys.append(beginning + length * self._length_offset)
            masses.append(probs[longer])
        unique, inverse = torch.unique(torch.cat(keys), return_inverse=True)
        total = torch.zeros(len(unique), probs.shape[1], dtype=torch.float64).index_add_(0, inverse, torch.cat(masses))
        return unique, total.log().float()

    @classmethod
    def from_frequencies(cls, frequencies: Mapping[str, float], hanzi_vocab: Vocab, window: int = 6,
                         min_frequency: float = 0.0, background: Iterable[str] | None = None,
                         contrast: float = 0.0) -> "WordLexiconLM":
        """From a word -> frequency (or count) table: words of 1..MAX_WORD_LEN hanzi of ``hanzi_vocab``
        whose frequency is at least ``min_frequency`` (as a share of the table's total), normalised; every
        other hanzi of the vocabulary is a one-character word of frequency FLOOR. With ``contrast`` in
        (0, 1) and ``background`` texts (the training split's hanzi), the scores are divided by those of
        the words' frequencies in the texts, mixed ``contrast`` : 1 - ``contrast`` with the table's."""
        if not 0 <= contrast < 1:
            raise ValueError(f"contrast {contrast}: expected a number in [0, 1)")
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
        shares = {word: share / norm for word, share in words.items()}
        background_log_probs = None
        if contrast > 0 and background is not None:
            counts = segment_counts(background, shares)
            counted = sum(counts.values()) or 1
            background_log_probs = torch.tensor([math.log(contrast * counts.get(word, 0) / counted
                                                          + (1 - contrast) * share) for word, share in shares.items()])
        keys = torch.tensor([word_key(hanzi_vocab.encode(word), len(hanzi_vocab)) for word in shares],
                            dtype=torch.long)
        log_probs = torch.tensor([math.log(share) for share in shares.values()])
        order = keys.argsort()
        return cls(len(hanzi_vocab), keys[order], log_probs[order], is_word_char, window,
                   None if background_log_probs is None else background_log_probs[order])

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
        """context (n, w) -> A (n, w + 1, m): log P(the first i characters of the window end a word) under
        each column's model, A[:, 0] = 0, and (n, w, L) span keys (see :meth:`_span_keys`)."""
        n, width = context.shape
        span_keys = self._span_keys(context)
        span_log_probs = _find(self.word_keys, self._word_columns, span_keys)  # (n, w, L, m)
        boundary = ~self.is_word_char[context]  # (n, w): a certain boundary at non-hanzi
        forward = torch.full((n, width + 1, self._word_columns.shape[1]), float("-inf"))
        forward[:, 0] = 0.0
        for end in range(1, width + 1):
            starts = torch.arange(end - MAX_WORD_LEN, end)  # span of length L..1 ending at end
            before = torch.where((starts >= 0)[:, None], forward[:, starts.clamp(min=0)], float("-inf"))  # (n, L, m)
            words = torch.logsumexp(before + span_log_probs[:, end - 1], dim=1)  # (n, m)
            forward[:, end] = torch.where(boundary[:, end - 1, None], forward[:, end - 1], words)
        return forward, span_keys

    def log_prob(self, context: torch.Tensor, candidates: torch.Tensor) -> torch.Tensor:
        """context (n, m): preceding hanzi ids, oldest first (m >= window; ``<s>`` before a sentence's
        start); candidates (n, c) hanzi ids -> (n, c) log P(candidate | context) under the word-unigram
        model (with a background: minus the background's); 0 for candidates that are not hanzi."""
        context = context[:, -self.window :]
        forward, span_keys = self._forward(context)  # (n, w + 1, m), (n, w, L)
        width = context.shape[1]
        starts = torch.arange(width + 1 - MAX_WORD_LEN, width + 1)  # where a word ending at the candidate begins
        before = torch.where((starts >= 0)[:, None], forward[:, starts.clamp(min=0)], float("-inf"))  # (n, L, m)
        # Keys of the spans that end at the candidate, lengths L..1: the last l - 1 characters' digits, one
        # more digit (the candidate), and the length's offset. The last l - 1 characters' digits are those of
        # the context's spans ending at its end, less their own offsets.
        ending = span_keys[:, -1, 1:] - torch.arange(MAX_WORD_LEN - 1, 0, -1) * self._length_offset  # (n, L-1)
        ending = torch.cat([ending, torch.zeros_like(ending[:, :1])], dim=1)  # (n, L): lengths L-1 .. 0
        valid = ending >= 0  # a span reaching before the window has key -1
        lengths = torch.arange(MAX_WORD_LEN, 0, -1)
        keys = ((ending * self.vocab_size)[:, None, :] + candidates[:, :, None]
                + lengths * self._length_offset)  # (n, c, L)
        keys = torch.where(valid[:, None, :], keys, -1)
        new = torch.logsumexp(before[:, None] + _find(self.prefix_keys, self._prefix_columns, keys), dim=2)  # (n, c, m)
        # The text so far as a prefix: a certain word boundary after a non-hanzi, else a word begun at one of
        # the last L starts (spans ending at the context's end).
        old_starts = starts - 1
        old_before = torch.where((old_starts >= 0)[:, None], forward[:, old_starts.clamp(min=0)], float("-inf"))
        old_prefix = torch.logsumexp(old_before + _find(self.prefix_keys, self._prefix_columns, span_keys[:, -1]),
                                     dim=1)  # (n, m)
        old = torch.where(self.is_word_char[context[:, -1], None], old_prefix, forward[:, -1])  # (n, m)
        scores = new - old[:, None]  # (n, c, m)
        if self.has_background:
            scores = scores[..., :1] - scores[..., 1:]
        return torch.where(self.is_word_char[candidates], scores[..., 0], 0.0)

    def size(self) -> int:
        """The number of words in the table (one-character floor entries included)."""
        return len(self.word_keys)

    @staticmethod
    def stored_size(state: dict) -> int:
        """:meth:`size` of the model a stored state (checked: :meth:`state_problem`) holds, without building it
        (which derives the prefix table)."""
        return len(state["word_keys"])

    def state_dict(self) -> dict:
        """The words alone (keys int64, log frequencies float16); the prefix table is derived on loading."""
        state = {"vocab_size": self.vocab_size, "window": self.window, "word_keys": self.word_keys,
                 "word_log_probs": self.word_log_probs.half(), "is_word_char": self.is_word_char}
        if self.has_background:
            state["background_log_probs"] = self.background_log_probs.half()
        return state

    @classmethod
    def from_state_dict(cls, state: dict) -> "WordLexiconLM":
        return cls(state["vocab_size"], state["word_keys"], state["word_log_probs"], state["is_word_char"],
                   state["window"], state.get("background_log_probs"))

    @classmethod
    def state_problem(cls, state, hanzi_vocab_size: int) -> str | None:
        """What is wrong with a stored state (:meth:`state_dict`'s form) over ``hanzi_vocab_size`` characters,
        as what follows "its word model" in a one-line error ("window 7: ...", "has word keys that ..."), or
        None where :meth:`from_state_dict` may build from it. A checkpoint may be crafted: this runs before
        anything is built."""
        if not isinstance(state, dict):
            return "is not a mapping"
        window, keys, log_probs = state.get("window"), state.get("word_keys"), state.get("word_log_probs")
        if not (is_int(window) and 1 <= window <= MAX_WINDOW):
            return f"window {window!r}: expected an integer in 1..{MAX_WINDOW}"
        if state.get("vocab_size") != hanzi_vocab_size or not is_int(state.get("vocab_size")):
            return f"counts {state.get('vocab_size')!r} characters, the hanzi vocabulary has {hanzi_vocab_size}"
        if not is_vector(state.get("is_word_char"), "bool", hanzi_vocab_size):
            return f"has no is_word_char flags (a bool tensor of {hanzi_vocab_size})"
        largest = (MAX_WORD_LEN + 1) * hanzi_vocab_size**MAX_WORD_LEN
        if largest >= 2**63:
            return f"{hanzi_vocab_size} characters do not fit in int64 word keys"
        if not (is_vector(keys, "int") and keys.dtype == torch.int64 and len(keys) > 0
                and is_vector(log_probs, "float", len(keys))):
            return "has word keys and frequencies that do not pair up"
        if int(keys.min()) < 0 or int(keys.max()) >= largest or bool((keys[1:] < keys[:-1]).any()):
            return "has word keys that are not sorted keys of its words"
        background = state.get("background_log_probs")
        if background is not None and not is_vector(background, "float", len(keys)):
            return "has background frequencies that do not pair up with its words"
        for values in (log_probs, background):
            if values is not None and (bool(values.isnan().any()) or bool((values > 0).any())):
                return "has word frequencies that are no log-probabilities"
        return None


def segment_counts(texts: Iterable[str], shares: Mapping[str, float]) -> Counter:
    """How often each word of ``shares`` (word -> probability) occurs in ``texts`` when each run of hanzi is
    cut into its most probable sequence of words (a hanzi in no word is a word of its own, at FLOOR, and
    is not counted)."""
    log_probs = {word: math.log(share) for word, share in shares.items()}
    floor = math.log(FLOOR)
    counts: Counter = Counter()
    for text in texts:
        for run in _HANZI_RUNS.findall(text):
            best, back = [0.0] + [-math.inf] * len(run), [0] * (len(run) + 1)
            for end in range(1, len(run) + 1):
                for length in range(1, min(MAX_WORD_LEN, end) + 1):
                    log_prob = log_probs.get(run[end - length : end], floor if length == 1 else None)
                    if log_prob is not None and best[end - length] + log_prob > best[end]:
                        best[end], back[end] = best[end - length] + log_prob, length
            end = len(run)
            while end > 0:
                word = run[end - back[end] : end]
                if word in log_probs:
                    counts[word] += 1
                end -= back[end]
    return counts


def word_key(ids: list[int], vocab_size: int) -> int:
    """The key of a span of hanzi ids: its ids as base-v digits, oldest first, plus its length's offset."""
    key = 0
    for id_ in ids:
        key = key * vocab_size + id_
    return key + len(ids) * vocab_size ** MAX_WORD_LEN


def word_model(decode, raw_dir, hanzi_vocab: Vocab, background: Iterable[str] = ()) -> WordLexiconLM:
    """The word model a config's decode section asks for (decode.word_table, decode.word_min_frequency,
    decode.word_contrast), over ``hanzi_vocab``; ``background``: the training split's hanzi, which
    decode.word_contrast > 0 divides by. The table is fetched into ``raw_dir`` if needed (DataError if
    that fails)."""
    return WordLexiconLM.from_frequencies(word_table(decode.word_table, raw_dir), hanzi_vocab,
                                          min_frequency=decode.word_min_frequency,
                                          background=background if decode.word_contrast > 0 else None,
                                          contrast=decode.word_contrast)

"""Conversion metrics: character accuracy, character error rate (CER) and exact-sentence rate."""

from __future__ import annotations

import hashlib
import random
from typing import Sequence

from pinyin_hanzi.text.pinyin import is_hanzi
from pinyin_hanzi.text.typed_input import prefix_token


def edit_distance(hypothesis: str, reference: str) -> int:
    """Levenshtein distance (substitutions, insertions, deletions all cost 1)."""
    previous = list(range(len(reference) + 1))
    for i, hyp_char in enumerate(hypothesis, start=1):
        current = [i]
        for j, ref_char in enumerate(reference, start=1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (hyp_char != ref_char)))
        previous = current
    return previous[-1]


def conversion_scores(hypotheses: Sequence[str], references: Sequence[str]) -> dict[str, float]:
    """char_accuracy: reference characters matched at the same position (outputs are aligned one character
    per syllable); cer: edit distance / reference characters; exact: share of identical sentences."""
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses for {len(references)} references")
    chars = sum(len(reference) for reference in references)
    matched = sum(sum(h == r for h, r in zip(hyp, ref)) for hyp, ref in zip(hypotheses, references))
    errors = sum(edit_distance(hyp, ref) for hyp, ref in zip(hypotheses, references))
    exact = sum(hyp == ref for hyp, ref in zip(hypotheses, references))
    return {
        "char_accuracy": matched / max(chars, 1),
        "cer": errors / max(chars, 1),
        "exact": exact / max(len(references), 1),
        "sentences": len(references),
        "characters": chars,
    }


def paired_difference(errors: Sequence[int], other_errors: Sequence[int], lengths: Sequence[int], *,
                      resamples: int = 2000, level: float = 0.95, seed: int = 0) -> dict[str, float | list[float]]:
    """How much two systems' CER differs on the same sentences, and how sure that is: ``errors`` and
    ``other_errors`` are each sentence's edit distance under the two systems, ``lengths`` its reference
    characters. Returns cer and other_cer, difference (other - first, in CER), interval (the ``level``
    percentile bootstrap interval of the difference, resampling whole sentences ``resamples`` times with a
    fixed seed, so a run repeats exactly), better and worse (sentences where the other system has fewer or
    more errors). Sentences, not characters, are resampled because a sentence's errors go together: one
    wrong word is two wrong characters. ValueError for sequences of different lengths or none."""

    if not len(errors) == len(other_errors) == len(lengths) or not lengths:
        raise ValueError(f"need the errors of the same sentences, got {len(errors)}, {len(other_errors)} "
                         f"and {len(lengths)}")
    total = max(sum(lengths), 1)
    rng = random.Random(seed)
    indices = range(len(lengths))
    differences = []
    for _ in range(resamples):
        sample = rng.choices(indices, k=len(lengths))
        chars = max(sum(lengths[i] for i in sample), 1)
        differences.append(sum(other_errors[i] - errors[i] for i in sample) / chars)
    differences.sort()
    tail = (1 - level) / 2
    low = differences[int(tail * resamples)]
    high = differences[min(int((1 - tail) * resamples), resamples - 1)]  # level 1: the largest
    return {"cer": sum(errors) / total, "other_cer": sum(other_errors) / total,
            "difference": (sum(other_errors) - sum(errors)) / total, "interval": [low, high],
            "better": sum(o < e for e, o in zip(errors, other_errors)),
            "worse": sum(o > e for e, o in zip(errors, other_errors))}


def abbreviated_positions(hanzi: str, tokens: Sequence[str], share: float) -> list[int]:
    """Positions of ``hanzi`` whose syllable a user types abbreviated, for a ``share`` in [0, 1]: position i
    is chosen when a hash of (hanzi, i) falls below ``share``, so the choice depends on the text alone and
    every engine given the same example gets the same input. Only hanzi whose syllable is longer than its
    abbreviation count (``a``, ``e``, ``n`` abbreviate to themselves). Raises ValueError for a share
    outside [0, 1]."""
    if not 0.0 <= share <= 1.0:
        raise ValueError(f"abbreviate must be a share between 0 and 1, not {share}")
    chosen = []
    for position, (char, token) in enumerate(zip(hanzi, tokens)):
        if not is_hanzi(char) or len(prefix_token(token)) - 1 >= len(token):
            continue
        digest = hashlib.blake2b(f"{hanzi}\t{position}".encode(), digest_size=8).digest()
        if int.from_bytes(digest, "big") < share * 2**64:
            chosen.append(position)
    return chosen


# How an abbreviated syllable is typed, and what reports call it: its initial (``zh`` for zhong, ``b`` for
# bei), or its first letter only (``z`` for zhong), as many IME users type: libime and our prefixes read both.
ABBREVIATION_STYLES = {"initial": "initial", "letter": "first letter"}


def abbreviation(syllable: str, style: str = "initial") -> str:
    """The letters a user types for ``syllable`` abbreviated in ``style`` (:data:`ABBREVIATION_STYLES`):
    ``zhong`` -> ``zh`` (initial) or ``z`` (letter); ``an`` -> ``a`` either way. Raises ValueError for an
    unknown style or an empty syllable."""
    if style not in ABBREVIATION_STYLES:
        raise ValueError(f"abbreviation style must be one of {', '.join(ABBREVIATION_STYLES)}, not {style!r}")
    initial = prefix_token(syllable)[:-1]
    return initial if style == "initial" else initial[0]


def abbreviated_tokens(tokens: Sequence[str], hanzi: str, share: float, style: str = "initial") -> list[str]:
    """``tokens`` with the syllables that :func:`abbreviated_positions` picks for ``share`` replaced by their
    :func:`abbreviation` in ``style``: what a user types, token by token."""
    tokens = list(tokens)
    for position in abbreviated_positions(hanzi, tokens, share):
        tokens[position] = abbreviation(tokens[position], style)
    return tokens


def typed(tokens: Sequence[str], hanzi: str, unsegmented: bool = False, abbreviate: float = 0.0,
          abbreviate_as: str = "initial") -> str:
    """How a user types the pinyin of ``hanzi``: tokens separated by spaces (a Latin word typed as one word,
    ``Python``: its letters spaced would read o and n as syllables), or run together — except where
    running together would change the meaning: a digit right after a syllable (``di4`` would be a tone)
    and a Latin word next to a syllable (``zaiTxing``) get a space between them. ``abbreviate``: the share
    of syllables typed abbreviated, chosen by :func:`abbreviated_positions`, as their initial (``b`` for bei,
    ``zh`` for zhong) or, with ``abbreviate_as="letter"``, their first letter (``z`` for zhong); run
    together, ``wo xiang q b j`` becomes ``woxiangqbj``, with no apostrophe where an abbreviation and what
    follows read as a syllable (``xi'an'g`` typed ``xiang``)."""
    if abbreviate:
        tokens = abbreviated_tokens(tokens, hanzi, abbreviate, abbreviate_as)
    out, previous = "", None  # previous: "syllable", "latin" or "other"
    for token, char in zip(tokens, hanzi):
        kind = "syllable" if is_hanzi(char) else "latin" if char.isascii() and char.isalpha() else "other"
        if not unsegmented:
            if previous is not None and not (previous == kind == "latin"):
                out += " "
        elif ((previous == "syllable" and (token.isdigit() or kind == "latin"))
              or (previous == "latin" and kind == "syllable")):
            out += " "
        out += token
        previous = kind
    return out


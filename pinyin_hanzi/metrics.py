"""Conversion metrics: character accuracy, character error rate (CER) and exact-sentence rate."""

from __future__ import annotations

from typing import Sequence

from pinyin_hanzi.pinyin import is_hanzi


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


def typed(tokens: Sequence[str], hanzi: str, unsegmented: bool = False) -> str:
    """How a user types the pinyin of ``hanzi``: tokens separated by spaces, or run together — except where
    running together would change the meaning: a digit right after a syllable (``di4`` would be a tone)
    and a Latin word next to a syllable (``zaiTxing``) get a space between them."""
    if not unsegmented:
        return " ".join(tokens)
    out, previous = "", None  # previous: "syllable", "latin" or "other"
    for token, char in zip(tokens, hanzi):
        kind = "syllable" if is_hanzi(char) else "latin" if char.isascii() and char.isalpha() else "other"
        if (previous == "syllable" and (token.isdigit() or kind == "latin")) or (previous == "latin" and kind == "syllable"):
            out += " "
        out += token
        previous = kind
    return out


def evaluate_file(converter, examples: Sequence, *, constrained: bool = True, unsegmented: bool = False, beam: int = 1,
                  batch_size: int = 256) -> dict:
    """Scores of converting ``examples`` typed as a user would: syllables separated by spaces, or run
    together (``unsegmented``). Top-k sentence accuracy comes from the 5-best list (beam >= 5)."""
    lines = [typed(e.tokens, e.hanzi, unsegmented) for e in examples]
    references = [e.hanzi for e in examples]
    nbest = 5 if beam >= 5 else 1
    found = converter.convert_lines(lines, beam=beam, nbest=nbest, constrained=constrained, batch_size=batch_size)
    scores = conversion_scores([conversions[0].text for conversions in found], references)
    for k in (1, 3, 5) if nbest == 5 else (1,):
        hits = sum(ref in [c.text for c in conversions[:k]] for conversions, ref in zip(found, references))
        scores[f"top{k}"] = hits / max(len(references), 1)
    return {"constrained": constrained, "unsegmented": unsegmented, "beam": beam, **scores}

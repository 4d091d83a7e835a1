"""bench/domain_words.py: a domain's terms from its own text, on small word tables written here (the real
ones, pypinyin-dict's phrases and wordfreq's list, are fetched from PyPI and are not needed to test it)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("domain_words", ROOT / "bench" / "domain_words.py")
domain_words = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(domain_words)

GENERAL = {"的": 0.04, "中": 0.01, "在": 0.01, "对话": 1e-4, "对话框": 1e-7, "框中": 1e-6, "单击": 3e-7,
           "确定": 1e-4, "我们": 1e-3}


def test_words_are_counted_in_the_texts_most_probable_segmentation_not_as_every_substring():
    words = {"对话": None, "对话框": None, "框中": None, "单击": None, "确定": None, "我们": None}
    counts, hanzi = domain_words.domain_counts(["在对话框中单击确定。", "在对话框中单击确定", "Python我们"],
                                               set(words), GENERAL)
    assert counts["对话框"] == 2 and counts["单击"] == 2 and counts["我们"] == 1
    assert "框中" not in counts and "对话" not in counts  # inside 对话框 + 中, not words of the text
    assert hanzi == 2 * 9 + 2


def test_kept_words_are_frequent_and_far_more_frequent_than_in_general_text_best_first():
    counts = {"对话框": 40, "单击": 40, "确定": 4, "我们": 3, "罕见词": 2}
    kept = domain_words.ranked(counts, 10_000, GENERAL, min_count=3, min_ratio=5)
    # 确定 and 我们 are no more frequent here than in general text; 罕见词 is seen twice only.
    assert [word for word, _, _ in kept] == ["对话框", "单击"]
    assert kept[0][2] == (40 / 10_000) / 1e-7

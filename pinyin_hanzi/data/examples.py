"""Corpus lines -> clause-sized (pinyin tokens, hanzi) examples: cleaning, annotation with pypinyin, the split of
each example (by a hash of its text) and how often a weighted source writes it.

Each example is clause-sized: sentences are split after clause punctuation and pieces longer than
``data.max_len`` are cut. A line is dropped, and counted by reason, when it is broken, traditional-script or
mostly non-Chinese; a clause without hanzi, or with a hanzi pypinyin has no reading for, likewise.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections import Counter
from dataclasses import dataclass

from pinyin_hanzi.text.pinyin import (
    CLAUSE_PUNCTUATION,
    HANZI_CLASS,
    hanzi_to_tokens,
    is_hanzi,
    normalize_text,
    readings,
    syllables,
)

SPLITS = ("train", "valid", "test")
KINDS = ("pd", "text", "tsv", "phrase")  # how a document's lines are read (see line_examples)

# A clause ends after clause punctuation, which stays with the clause it ends.
_CLAUSE_SPLIT = re.compile(f"(?<=[{CLAUSE_PUNCTUATION}])")
_HANZI = re.compile(f"[{HANZI_CLASS}]")
_BROKEN = re.compile("[\ufffd\ue000-\uf8ff]")  # replacement or private-use characters: a bad conversion
_FOREIGN_WORD = re.compile(f"[^\\W{HANZI_CLASS}_]+")  # a run of letters or digits that are not hanzi
_TONE_DIGIT = re.compile(r"(?<=[a-z])[1-5]$")


@dataclass(frozen=True)
class Example:
    tokens: tuple[str, ...]  # one source token per target character
    hanzi: str

    def to_line(self) -> str:
        return " ".join(self.tokens) + "\t" + self.hanzi


def text_digest(hanzi: str) -> bytes:
    """The md5 of an example's text: its split (:func:`split_of`) and its identity when duplicates are dropped."""
    return hashlib.md5(hanzi.encode("utf-8")).digest()


def split_of(hanzi: str, config, digest: bytes | None = None) -> str:
    """'train', 'valid' or 'test', from a stable hash of the text (not Python's salted hash()); ``config`` has
    ``valid_per_mille`` and ``test_per_mille``; ``digest``: :func:`text_digest` of the text, if already known."""
    bucket = int.from_bytes((digest or text_digest(hanzi))[:4], "big") % 1000
    if bucket < config.test_per_mille:
        return "test"
    if bucket < config.test_per_mille + config.valid_per_mille:
        return "valid"
    return "train"


def copies(hanzi: str, weight: float) -> int:
    """How often a training example of a source with this weight is trained on per epoch: the integer part of
    the weight, plus one more for a share of examples equal to its fraction (chosen by a hash of the text)."""
    whole = math.floor(weight)
    if weight == whole:
        return whole
    bucket = int(hashlib.md5(("weight:" + hanzi).encode("utf-8")).hexdigest()[:8], 16) / 0xFFFFFFFF
    return whole + (bucket < weight - whole)


def split_clauses(text: str) -> list[str]:
    return [clause for clause in _CLAUSE_SPLIT.split(text) if clause]


def chunk(tokens: list[str], hanzi: str, max_len: int) -> list[Example]:
    return [
        Example(tuple(tokens[start : start + max_len]), hanzi[start : start + max_len])
        for start in range(0, len(hanzi), max_len)
    ]


# ---------------------------------------------------------------------------------------------- cleaning

# Frequent characters that exist only in traditional script (their simplified forms differ). A line with
# two of them, or one in under twenty hanzi, is traditional text: the model is trained on simplified.
TRADITIONAL_ONLY = frozenset(
    "們個這來說時為會國對後裡還過學與發問開當經動長見現點讓從電話應關車東無業內實麼樣頭兩體門機種間進買賣"
    "聽覺歡寫讀書記難師氣場愛處請謝錢醫館聲極權產風樂號總區運衛親報導給結務認識網議員輕鬆係雙歲萬園層雞鳥"
    "魚馬龍鐘鐵銀錄陽陰隊際雲靈顏願類顯飛飯養驗髮鬧齊證護變觀寶審將專屬帶幫廣廳張強彈復應態戰戲據擇擊擔數"
    "斷條構標樹歷殺決沒況測漢濟灣燈營爭獎獨獲環畫療盡監確禮稅稱穩窮競節範簡紀約紅級紙組統絲綠維緊線編練縣"
    "績織繼續羅習聞職腦腳臉臨興舉葉蘇蟲術補裝製複規視計訂討訓許設訪評詞試詩該詳誠論謀謂譯豐負財貧貨貴費貼"
    "貿資賞質趕軍軟較載輪輸轉辦農達違遠適選邊鄉針銷錯鍵鎮閉閱陣陳陸隨險隱雖雜離須頂項順預領頻題額飲餘驚鬥"
    "魯鳴麥黃黨塊壞夢孫寧嚴勞勢華參"
)

_TRADITIONAL = re.compile(f"[{''.join(sorted(TRADITIONAL_ONLY))}]")


def line_problem(raw: str) -> str | None:
    """Why a raw corpus line is dropped, or None to keep it: broken (replacement or private-use
    characters, the marks of a bad conversion), traditional script, or mostly non-Chinese (fewer hanzi than
    other words: runs of letters or digits, so ``Python 2024`` counts two). A line without any hanzi is
    left to the clause check."""
    if _BROKEN.search(raw):
        return "broken line (replacement or private-use characters)"
    hanzi = len(_HANZI.findall(raw))
    if hanzi == 0:
        return None
    if hanzi < len(_FOREIGN_WORD.findall(raw)):
        return "mostly non-Chinese line"
    traditional = len(_TRADITIONAL.findall(raw))
    if traditional >= 2 or traditional * 20 > hanzi:
        return "traditional-script line"
    return None


# ----------------------------------------------------------------------------------------------- reading

def _pd_clauses(line: str) -> list[list[str]]:
    """A tagged People's Daily line as clauses, each a list of words (the gold segmentation helps pypinyin
    pick the right reading of polyphones)."""
    clauses, words = [], []
    for item in line.split():
        word = normalize_text(item.rsplit("/", 1)[0].lstrip("["))
        if not word:
            continue
        words.append(word)
        if word[-1] in CLAUSE_PUNCTUATION:
            clauses.append(words)
            words = []
    if words:
        clauses.append(words)
    return clauses


def _text_clauses(line: str) -> list[str]:
    return split_clauses(normalize_text(line))


def tsv_example(line: str) -> tuple[list[str], str] | str:
    """(tokens, hanzi) of one ``pinyin<TAB>hanzi`` line, or the reason it is skipped."""
    if "\t" not in line:
        return "tsv line without a tab"
    pinyin, hanzi = line.split("\t", 1)
    hanzi = normalize_text(hanzi)
    tokens = [_TONE_DIGIT.sub("", token.lower()).replace("ü", "v") for token in pinyin.split()]
    if len(tokens) != len(hanzi):
        return "tsv pinyin/hanzi lengths differ"
    for token, char in zip(tokens, hanzi):
        if (is_hanzi(char) and token not in readings().get(char, ())) or (not is_hanzi(char) and token != char.lower()):
            return "tsv pinyin does not match hanzi"
    tokens = [token if is_hanzi(char) else char for token, char in zip(tokens, hanzi)]
    return tokens, hanzi


def _phrase_example(hanzi: str, tokens: list[str]) -> tuple[list[str], str] | str:
    """A phrase-table entry as (tokens, hanzi), or the reason it is skipped."""
    hanzi = normalize_text(hanzi)
    if len(tokens) != len(hanzi) or not all(is_hanzi(char) for char in hanzi):
        return "phrase with characters other than hanzi"
    if not all(token in syllables() and token in readings().get(char, ()) for token, char in zip(tokens, hanzi)):
        return "phrase reading unknown to the character table"
    return tokens, hanzi


def _clause_pieces(kind: str, line: str, skipped: Counter) -> list[tuple[list[str], str]]:
    """(tokens, text) of each clause of a running-text line ("pd" or "text") that has hanzi with readings."""
    # People's Daily is curated (hand-segmented, simplified): its tables of figures stay, so that its splits are
    # the same as they have always been. Other text is cleaned line by line.
    problem = line_problem(line) if kind == "text" else None
    if problem is not None:
        skipped[problem] += 1
        return []
    pieces = []
    for clause in _pd_clauses(line) if kind == "pd" else _text_clauses(line):
        text = "".join(clause)
        if not _HANZI.search(text):
            skipped["clause without hanzi"] += 1
            continue
        tokens = hanzi_to_tokens(clause)
        if tokens is None:
            skipped["hanzi without a pinyin reading"] += 1
            continue
        pieces.append((tokens, text))
    return pieces


def line_examples(kind: str, line, max_len: int, skipped: Counter) -> list[Example]:
    """The examples of one line of a document of ``kind`` (KINDS: "pd" word/POS-tagged text, "text" running
    text, "tsv" ``pinyin<TAB>hanzi``, "phrase" a (hanzi, syllables) pair), in order; what is skipped is counted
    in ``skipped`` by reason."""
    if kind == "phrase":
        result = _phrase_example(*line)
        if isinstance(result, str):
            skipped[result] += 1
            return []
        return [Example(tuple(result[0]), result[1])]
    if not line.strip():
        skipped["empty line"] += 1
        return []
    if kind == "tsv":
        result = tsv_example(line)
        if isinstance(result, str):
            skipped[result] += 1
            return []
        pieces = [result]
    else:
        pieces = _clause_pieces(kind, line, skipped)
    examples = []
    for tokens, text in pieces:
        if len(text) > max_len:
            skipped[f"clause longer than max_len={max_len} (cut, not dropped)"] += 1
        examples.extend(chunk(tokens, text, max_len))
    return examples


def document_examples(document, max_len: int, skipped: Counter) -> list[Example]:
    """The examples of a document (:class:`pinyin_hanzi.data.sources.Document`), in order; what is skipped is
    counted in ``skipped`` by reason."""
    return [example for line in document.lines for example in line_examples(document.kind, line, max_len, skipped)]

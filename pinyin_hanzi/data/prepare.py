"""Preparation: a data config's sources -> a prepared folder (the token store, vocabularies, held-out TSVs,
stats.json). :func:`annotate_shard` is the first stage (:mod:`pinyin_hanzi.data.annotate`: lines -> a part, on
N worker processes), :func:`merge_parts` the second (:mod:`pinyin_hanzi.data.merge`: parts -> the store);
:func:`build` runs both on one machine. The output is the same bytes for any number of workers or shards.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
from tqdm import tqdm

from pinyin_hanzi.data import sources as corpus_sources
from pinyin_hanzi.data.annotate import UNIT_CHARACTERS, Part, annotate_into, units
from pinyin_hanzi.data.examples import SPLITS, document_examples
from pinyin_hanzi.data.inputs import TextLines, approximate_bytes, tag_of
from pinyin_hanzi.data.merge import TEST, TRAIN, VALID, Merged, tsv_lines, vocab_from_counts, write_splits
from pinyin_hanzi.data.store import INTEGRITY_KEY, TokenStore, integrity_hashes
from pinyin_hanzi.data.vocab import UNK, save_vocab
from pinyin_hanzi.errors import DataError
from pinyin_hanzi.text.typed_input import PREFIX_TOKENS

PART_NAME = "part-{index}-of-{count}"
# Below these, the summary after preparation warns (see preparation_summary). A validation or test split of
# fewer examples gives accuracies too coarse to compare (one example is over 1%; best.pt is chosen on
# validation); a hanzi vocabulary of fewer tokens is a corpus too small to train a model from scratch
# (everyday text uses about 3,000 characters), where fine-tuning the shipped model serves better.
MIN_HELD_OUT_EXAMPLES = 100
MIN_HANZI_VOCAB = 1000
FINE_TUNE = ("python train.py --config configs/finetune.yaml --init-from pinyin_hanzi/pretrained/model.pt "
             "with your files in data.sources (docs/training.md#fine-tune-on-your-own-domain)")


def default_workers() -> int:
    """All the cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def source_tag(name: str) -> str:
    """A source's short name in file names: ``novels``, or a user file's, folder's or glob's (see
    :func:`inputs.tag_of`)."""
    return name if name in corpus_sources.SOURCES else tag_of(name)


def _documents(config) -> tuple[list[tuple[int, int, corpus_sources.Document, float]], dict[str, int]]:
    """Every document of every source, numbered in order (document index, source index, document, weight),
    and the lines a source's reader converted to Simplified script. Fetches what is missing and checks every
    user file first: a missing one is a DataError before any work."""
    found, converted, number = [], {}, 0
    for source, (name, weight) in enumerate(config.source_weights().items()):
        documents = corpus_sources.documents(name, config.raw_dir)
        converted[name] = sum(document.converted for document in documents)
        for document in documents:
            found.append((number, source, document, weight))
            number += 1
    return found, converted


def _size(document: corpus_sources.Document) -> int:
    """About how much text a document holds, in the units :class:`Unit` counts (for the progress bar)."""
    if isinstance(document.lines, TextLines):
        return approximate_bytes(document.lines.path) // 3  # UTF-8 hanzi: 3 bytes a character
    return sum(len(line) if isinstance(line, str) else 1 for line in document.lines)


def _progress(total: int | None, description: str, unit: str):
    # A bar on a terminal only: logs and pipes get none (tqdm's disable=None).
    return tqdm(total=total, desc=description, unit=unit, unit_scale=True, disable=None, mininterval=1.0,
                smoothing=0.05)


def annotate_shard(config, folder: Path, *, shard: tuple[int, int] = (0, 1), workers: int = 1,
                   fingerprint: dict | None = None, log: Callable[[str], None] | None = None) -> Path:
    """Annotate the documents of ``shard`` (i, n) of the config's sources into a part in ``folder``."""
    documents, converted = _documents(config)
    mine = [entry for entry in documents if entry[0] % shard[1] == shard[0]]
    phrases = corpus_sources.phrase_table(config.raw_dir) if config.phrase_pinyin else None
    part = Part(folder)
    total = sum(_size(document) for _, _, document, _ in mine)
    workers = max(1, min(workers, total // UNIT_CHARACTERS))  # starting a worker costs more than a unit takes
    # Said on the bar, not logged: a failing preparation's error stays the only line of a log.
    with _progress(total, f"annotating ({workers} worker{'s' if workers > 1 else ''})", "char") as bar:
        annotate_into(part, units(mine), workers=workers, max_len=config.max_len, held_out=config,
                      phrases=phrases, progress=bar.update)
    part.finish(fingerprint or {}, shard, converted)
    return folder


def merge_parts(config, parts: list[Path], out: Path, fingerprint: dict, started: float) -> dict:
    """The prepared data of ``parts`` (:func:`annotate_shard` folders covering every shard) written into the
    folder ``out``; returns its stats (also written to stats.json, last, with the hashes the store verifies:
    :func:`store.integrity_hashes`); the caller logs :func:`preparation_summary` once the store is in place."""
    opened = [Part.open(folder) for folder in parts]
    merged = Merged(opened)
    merged.drop_duplicates()
    with _progress(len(merged.keys), "counting", "example") as bar:
        pinyin_counts, hanzi_counts = merged.token_counts(bar.update)
    weights = config.source_weights()
    pinyin_vocab = vocab_from_counts(pinyin_counts, 1, PREFIX_TOKENS if config.abbreviate > 0 else ())
    hanzi_vocab = vocab_from_counts(hanzi_counts, config.min_char_count)
    stats = _stats(config, merged, opened, weights, fingerprint)
    if not all(stats["examples"].values()):
        raise DataError(_too_few(config, weights, stats))
    with _progress(len(merged.keys), "writing", "example") as bar:
        examples = write_splits(merged, out, pinyin_vocab, hanzi_vocab, bar.update)
    _write_text(out / "valid.tsv", tsv_lines(merged, VALID))
    _write_text(out / "test.tsv", tsv_lines(merged, TEST))
    for source, name in enumerate(weights) if len(weights) > 1 else ():
        for split, index in (("valid", VALID), ("test", TEST)):
            if stats["sources"][name]["examples"][split]:
                _write_text(out / f"{split}.{source_tag(name)}.tsv", tsv_lines(merged, index, source=source))
    save_vocab(pinyin_vocab, out / "pinyin_vocab.txt")
    save_vocab(hanzi_vocab, out / "hanzi_vocab.txt")
    stats.update({
        "vocab": {"pinyin": len(pinyin_vocab), "hanzi": len(hanzi_vocab)},
        "hanzi_unknown_in_test": _unknown_in_test(out, hanzi_vocab),
        "seconds": round(time.time() - started, 1),
        "store": {"source_dtype": str(np.dtype(np.uint16 if len(pinyin_vocab) <= 1 << 16 else np.uint32)),
                  "target_dtype": str(np.dtype(np.uint16 if len(hanzi_vocab) <= 1 << 16 else np.uint32)),
                  "examples": examples},
    })
    stats["store"]["files"] = {path.name: path.stat().st_size for path in sorted(out.iterdir())
                               if not path.name.startswith(".")}
    stats["data_fingerprint"] = content_hash(out)
    stats[INTEGRITY_KEY] = integrity_hashes(out, stats)
    (out / "stats.json").write_text(json.dumps(stats, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    return stats


def build(config, out: Path, fingerprint: dict, *, workers: int, log: Callable[[str], None] | None = None) -> dict:
    """Both stages on this machine: annotate every document with ``workers`` processes into a part inside
    ``out`` (removed once merged), then merge it into ``out``."""
    started = time.time()
    part = annotate_shard(config, out / ".part", workers=workers, fingerprint=fingerprint, log=log)
    stats = merge_parts(config, [part], out, fingerprint, started)
    for file in part.iterdir():
        file.unlink()
    part.rmdir()
    return stats


def preparation_summary(config, stats: dict) -> list[str]:
    """What preparation made of the corpus, said once it is done: one line (lines read, examples per split,
    what was left out by reason, the vocabularies' sizes), then a ``warning:`` line where the validation or
    test split (:data:`MIN_HELD_OUT_EXAMPLES`) or the hanzi vocabulary (:data:`MIN_HANZI_VOCAB`) is too small
    to mean much. Nothing here is an error: training goes on."""
    written, epoch = stats["store"]["examples"], stats["examples"]["train"]
    weighted = f" ({epoch:,} an epoch, with the source weights)" if epoch != written["train"] else ""
    splits = f"train {written['train']:,}{weighted}, valid {written['valid']:,}, test {written['test']:,}"
    left_out = [f"{count:,} {reason}" for reason, count in stats["skipped"].items() if "not dropped" not in reason]
    kept = [f"{count:,} {reason}" for reason, count in stats["skipped"].items() if "not dropped" in reason]
    lines = [f"prepared {stats['lines']:,} lines into examples: {splits}; left out: {', '.join(left_out) or 'none'}"
             f"{''.join(f'; {note}' for note in kept)}; vocabulary: {stats['vocab']['hanzi']:,} hanzi tokens, "
             f"{stats['vocab']['pinyin']:,} pinyin tokens"]
    small = [(name, written[split], f"data.{split}_per_mille (now {getattr(config, f'{split}_per_mille')})")
             for split, name in (("valid", "validation"), ("test", "test"))
             if written[split] < MIN_HELD_OUT_EXAMPLES]
    if small:
        counts = " and ".join(f"the {name} split has {count:,}" for name, count, _ in small)
        lines.append(f"warning: {counts} examples, fewer than {MIN_HELD_OUT_EXAMPLES}: an accuracy measured on so "
                     f"few means little (best.pt is chosen on validation); add text or raise "
                     f"{' and '.join(setting for _, _, setting in small)}")
    if stats["vocab"]["hanzi"] < MIN_HANZI_VOCAB:
        lines.append(f"warning: the hanzi vocabulary has {stats['vocab']['hanzi']:,} tokens, fewer than "
                     f"{MIN_HANZI_VOCAB:,}: a model trained from scratch on this text converts no other character; "
                     f"to adapt a model to a small text of your own, fine-tune the shipped model instead: "
                     f"{FINE_TUNE}")
    return lines


def content_hash(out: str | Path) -> str:
    """A hash of the prepared data's files (the store, the held-out TSVs, both vocabularies; stats.json
    aside): what a checkpoint records, so that --resume notices when the data it trained on has changed."""
    digest = hashlib.sha256()
    for path in sorted(Path(out).iterdir()):
        if path.suffix in (".bin", ".tsv", ".txt") and not path.name.startswith("."):
            digest.update(f"{path.name}\0{path.stat().st_size}\0".encode())
            with open(path, "rb") as handle:
                while block := handle.read(1 << 20):
                    digest.update(block)
    return digest.hexdigest()[:16]


def export_train_tsv(folder: Path) -> Path:
    """``train.tsv`` beside the store: every training example as ``tokens<TAB>hanzi``, as often as an epoch
    trains on it (characters too rare for the vocabulary as ``<unk>``): for reading, not for training."""
    store = TokenStore(folder)
    path = folder / "train.tsv"
    _write_text(path, (" ".join(tokens) + "\t" + hanzi + "\n"
                       for tokens, hanzi in store.texts("train", with_copies=True)))
    return path


def phrase_texts(raw_dir: str | Path) -> list[str]:
    """The hanzi of every usable entry of pypinyin-dict's phrase table (fetched into ``raw_dir`` if needed),
    each once: what the ``phrases`` source would give at weight 1."""
    (document,) = corpus_sources.documents("phrases", raw_dir)
    return [example.hanzi for example in document_examples(document, max_len=10**6, skipped=Counter())]


# --------------------------------------------------------------------------------------------- helpers

def _write_text(path: Path, lines: Iterator[str]) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        handle.writelines(lines)


def _unknown_in_test(out: Path, hanzi_vocab) -> int:
    with open(out / "test.tsv", encoding="utf-8") as handle:
        return sum(char not in hanzi_vocab.ids for line in handle for char in line.rstrip("\n").split("\t")[1]
                   if char != UNK)


def _per_split(merged: Merged, chosen: np.ndarray, with_copies: bool) -> dict:
    """examples / characters / hanzi per split of the kept examples where ``chosen``; training examples
    counted as often as an epoch trains on them when ``with_copies``."""
    result = {"examples": {}, "characters": {}, "hanzi": {}}
    for index, split in enumerate(SPLITS):
        rows = merged.keep & chosen & (merged.splits == index)
        times = merged.copies[rows].astype(np.int64) if with_copies and index == TRAIN else 1
        result["examples"][split] = int(np.sum(times * np.ones(int(rows.sum()), np.int64)))
        result["characters"][split] = int(np.sum(merged.lengths[rows].astype(np.int64) * times))
        result["hanzi"][split] = int(np.sum(merged.hanzi[rows].astype(np.int64) * times))
    return {key: {split: values[split] for split in ("valid", "test", "train")} for key, values in result.items()}


def _stats(config, merged: Merged, parts: list[dict], weights: dict, fingerprint: dict) -> dict:
    """stats.json: per source (for a mix) or of the one source, and over all (see :func:`merge_parts`)."""
    lines, skipped = Counter(), {index: Counter() for index in range(len(weights))}
    for part in parts:
        lines.update({int(k): v for k, v in part["lines"].items()})
        for source, counts in part["skipped"].items():
            skipped[int(source)].update(counts)
    converted = parts[0]["converted"]
    duplicates = np.bincount(merged.sources[merged.duplicate], minlength=len(weights))
    for source in range(len(weights)):
        if duplicates[source]:
            skipped[source]["duplicate example"] += int(duplicates[source])
    stats = {"fingerprint": fingerprint}
    if len(weights) > 1:
        stats["sources"] = {}
        for source, (name, weight) in enumerate(weights.items()):
            mine = merged.sources == source
            written = int(merged.copies[merged.keep & mine & (merged.splits == TRAIN)].sum(dtype=np.int64))
            stats["sources"][name] = {**corpus_sources.describe(name), "weight": weight,
                                      **_per_split(merged, mine, with_copies=False), "train_written": written,
                                      **({"converted_to_simplified": converted[name]} if converted.get(name) else {}),
                                      "skipped": dict(skipped[source].most_common())}
    else:
        (name,) = weights
        stats["source"] = {**corpus_sources.describe(name), "lines": lines[0],
                           **({"converted_to_simplified": converted[name]} if converted.get(name) else {})}
    stats.update(_per_split(merged, np.ones(len(merged.keys), bool), with_copies=True))
    stats["lines"] = int(sum(lines.values()))
    stats["skipped"] = dict(sum(skipped.values(), Counter()).most_common())
    return stats


def _too_few(config, weights: dict, stats: dict) -> str:
    """Why a corpus cannot be split, and what to do: with no training example the corpus is the problem
    (its lines were skipped, counted by reason), otherwise the held-out shares are too small for it."""
    counts = ", ".join(f"{split} {stats['examples'][split]}" for split in SPLITS)
    corpus = config.corpus if len(weights) == 1 else ", ".join(weights)
    dropped = [f"{count} {reason}" for reason, count in stats["skipped"].items() if "not dropped" not in reason]
    why = f"; skipped: {', '.join(dropped)}" if dropped else ""
    if not stats["examples"]["train"]:
        advice = "add Chinese text: a line is used when it has hanzi with pinyin readings, in simplified script"
    else:
        advice = "add text or raise data.valid_per_mille / data.test_per_mille"
    return (f"corpus {corpus!r} gives too few examples ({counts}) from {stats['lines']} lines{why}; every split "
            f"needs some: {advice}")

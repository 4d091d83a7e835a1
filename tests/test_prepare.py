"""Preparation at any size (data/prepare.py, annotate.py, merge.py, store.py, inputs.py): the same bytes for any
number of workers or shards, a user's files, folders, globs and gzip, bad lines counted, missing or cut files
refused in one line, the token store read back, and the summary (with its warnings) said at the end."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from pinyin_hanzi.cli.train import main
from pinyin_hanzi.config import DataConfig
from pinyin_hanzi.data import annotate as annotate_module
from pinyin_hanzi.data import examples as examples_module
from pinyin_hanzi.data.corpus import merge_shards, prepare, prepare_shard, read_examples, read_split
from pinyin_hanzi.data.prepare import export_train_tsv
from pinyin_hanzi.data.store import TokenStore
from pinyin_hanzi.errors import DataError

from conftest import TINY_SENTENCES, plain_pypinyin_tokens, tiny_config_dict, write_config

# Enough lines, of varied clauses, that a small unit size cuts them into many units over several documents.
LINES = [f"{sentence[:-1]}，第{n}次{sentence[-1]}" for n in range(12) for sentence in TINY_SENTENCES]


def _folder_bytes(folder: Path) -> dict[str, bytes]:
    files = {path.name: path.read_bytes() for path in folder.iterdir() if path.name != "stats.json"}
    stats = json.loads((folder / "stats.json").read_text(encoding="utf-8"))
    stats.pop("seconds")
    files["stats.json"] = json.dumps(stats, sort_keys=True).encode()
    return files


@pytest.fixture
def corpus(tmp_path) -> Path:
    """A folder of three documents: plain text, gzip-compressed text, and pinyin<TAB>hanzi pairs with one bad
    line."""
    folder = tmp_path / "texts"
    folder.mkdir()
    (folder / "a.txt").write_text("\n".join(LINES[:100]) + "\n", encoding="utf-8")
    with gzip.open(folder / "b.txt.gz", "wt", encoding="utf-8") as handle:
        handle.write("\n".join(LINES[100:]) + "\n")
    (folder / "c.tsv").write_text("ni3 hao3\t你好\nthis line has no tab\nwo men\t我们\n", encoding="utf-8")
    return folder


def _config(tmp_path: Path, sources: dict, name: str) -> DataConfig:
    return DataConfig(sources=sources, name=name, prepared_dir=str(tmp_path / "prepared"), raw_dir=str(tmp_path / "raw"),
                      max_len=8, valid_per_mille=100, test_per_mille=100)


def test_one_worker_two_workers_and_two_shards_write_the_same_bytes(tmp_path, corpus, monkeypatch):
    monkeypatch.setattr(annotate_module, "UNIT_LINES", 7)  # many units: their order is what could differ
    monkeypatch.setattr("pinyin_hanzi.data.prepare.UNIT_CHARACTERS", 1)  # workers are not capped by the size
    sources = {str(corpus): 1.0, str(corpus / "a.txt"): 0.5}
    one = prepare(_config(tmp_path, sources, "one"), workers=1)
    two = prepare(_config(tmp_path, sources, "two"), workers=2)
    sharded = _config(tmp_path, sources, "sharded")
    for index in range(2):
        prepare_shard(sharded, (index, 2), workers=1)
    merged = merge_shards(sharded)
    assert _folder_bytes(one) == _folder_bytes(two) == _folder_bytes(merged)
    assert not (tmp_path / "prepared" / "sharded.parts").exists()  # parts go once merged


def test_the_store_is_the_one_plain_pypinyin_annotation_made(tmp_path, corpus, monkeypatch):
    # Preparation annotates through a faster path (pypinyin's pipeline, with its segmentation by one regex and
    # each word's readings remembered, in worker processes): the bytes are those the plain calls made in one.
    (corpus / "d.txt").write_text("银行行长说，长大了要还钱。\n１２３Ａ你好 世界\t\u200b！\n行长行长，行行行。\n"
                                  "重庆的重要会议在〇八年召开。\n", encoding="utf-8")
    monkeypatch.setattr(annotate_module, "UNIT_LINES", 7)
    monkeypatch.setattr("pinyin_hanzi.data.prepare.UNIT_CHARACTERS", 1)
    fast = prepare(_config(tmp_path, {str(corpus): 1.5}, "fast"), workers=2)
    monkeypatch.setattr(examples_module, "hanzi_to_tokens", plain_pypinyin_tokens)
    plain = prepare(_config(tmp_path, {str(corpus): 1.5}, "plain"), workers=1)
    assert _folder_bytes(fast) == _folder_bytes(plain)


def test_merge_names_a_missing_shard(tmp_path, corpus):
    config = _config(tmp_path, {str(corpus): 1.0}, "half")
    prepare_shard(config, (0, 2), workers=1)
    with pytest.raises(DataError, match=r"shards 2/2 are missing"):
        merge_shards(config)


def test_a_users_folder_glob_and_gzip_are_read_and_bad_lines_counted(tmp_path, corpus):
    out = prepare(_config(tmp_path, {str(corpus / "*.t*"): 1.0}, "glob"), workers=1)
    stats = json.loads((out / "stats.json").read_text(encoding="utf-8"))
    assert stats["skipped"]["tsv line without a tab"] == 1
    texts = {hanzi for _, hanzi in TokenStore(out).texts("train")}
    held_out = {e.hanzi for split in ("valid", "test") for e in read_examples(out / f"{split}.tsv", trusted=True)}
    assert "你好" in texts | held_out and "我们" in texts | held_out  # the .tsv's good lines
    assert any("第11次" in text for text in texts | held_out)  # the gzip file's last lines


@pytest.mark.parametrize("source, message", [
    ("missing.txt", "corpus file not found"),
    ("empty_folder", "holds no file ending in"),
    ("nothing*.txt", "matches no file"),
    ("novles", "not a named source"),
])
def test_a_missing_source_is_one_line_before_any_work(tmp_path, corpus, source, message, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "empty_folder").mkdir()
    config = _config(tmp_path, {str(corpus): 1.0, source: 1.0}, "bad")
    with pytest.raises(DataError, match=message):
        prepare(config, workers=1)
    made = [path.name for path in (tmp_path / "prepared").glob("*")] if (tmp_path / "prepared").exists() else []
    assert made in ([], [".bad.lock"])  # no folder, no part: nothing was annotated


def test_a_broken_gzip_file_is_one_line(tmp_path, corpus):
    (corpus / "b.txt.gz").write_bytes(gzip.compress("你好。\n".encode())[:-12])  # cut short
    with pytest.raises(DataError, match=r"cannot read corpus file .*b\.txt\.gz"):
        prepare(_config(tmp_path, {str(corpus): 1.0}, "broken"), workers=1)


def test_the_store_reads_back_what_was_prepared(tmp_path, corpus):
    out = prepare(_config(tmp_path, {str(corpus): 2.5}, "store"), workers=1)
    store = TokenStore(out)
    train = store.split("train")
    assert len(train) == len(train.copies) and set(np.unique(train.copies)) <= {2, 3}
    assert train.offsets[-1] == len(train.source) == len(train.target) == train.lengths.sum()
    valid = store.split("valid")  # the TSV as written, the store as the vocabularies encode it
    for index, example in enumerate(read_split(out, "valid")):
        source, target = valid.example(index)
        assert source.tolist() == store.pinyin_vocab.encode(example.tokens)
        assert target.tolist() == store.hanzi_vocab.encode(example.hanzi)
    exported = read_examples(export_train_tsv(out), trusted=True)
    assert len(exported) == int(train.copies.sum())  # every example as often as an epoch trains on it
    stats = json.loads((out / "stats.json").read_text(encoding="utf-8"))
    assert stats["examples"]["train"] == len(exported)


@pytest.mark.skipif(not Path("/proc/self/smaps").is_file(), reason="reads Linux's /proc/self/smaps")
def test_training_batches_leave_no_page_of_the_store_in_memory(tmp_path, corpus):
    """Examples are read with positioned reads, not through the mapping: a mapped page read stays in the
    process's memory (RSS), and at random places each read maps a large part of the file around it."""
    from pinyin_hanzi.data.batches import BatchStream

    out = prepare(_config(tmp_path, {str(corpus): 1.0}, "pages"), workers=1)
    train = TokenStore(out).split("train")
    stream = BatchStream(train, batch_tokens=32, seed=0)
    batches = [stream.batch(*stream.next_indices()) for _ in range(50)]
    assert sum(batch.n_target_tokens for batch in batches) > len(train.target)  # the whole split, more than once

    def resident_kb(name: str) -> int:  # of the mappings of prepared file ``name``
        kb, current = 0, None
        for fields in map(str.split, Path("/proc/self/smaps").read_text().splitlines()):
            if not fields[0].endswith(":"):  # a mapping's first line: addresses, ..., the file mapped
                current = " ".join(fields[5:])
            elif fields[0] == "Rss:" and current == str(out / name):
                kb += int(fields[1])
        return kb

    assert resident_kb("train.source.bin") == resident_kb("train.target.bin") == 0


def test_stored_lengths_come_in_the_narrowest_type_that_holds_them(tmp_path):
    from pinyin_hanzi.data.store import SplitWriter, StoredSplit

    for lengths, dtype in (([3, 0, 255, 7], np.uint8), ([3, 256, 1], np.uint16), ([70_000, 2], np.uint32)):
        writer = SplitWriter(tmp_path, "valid", np.dtype(np.uint16), np.dtype(np.uint16))
        ids = np.full(sum(lengths), 9)
        writer.append(ids, ids, np.array(lengths))
        writer.close()
        offsets = np.fromfile(tmp_path / "valid.offsets.bin", np.int64)
        split = StoredSplit(ids, ids, offsets, offsets_path=tmp_path / "valid.offsets.bin")  # read from the file
        assert split.lengths.dtype == dtype and split.lengths.tolist() == lengths
        assert StoredSplit(ids, ids, offsets).lengths.tolist() == lengths  # and from offsets in memory


def test_preparation_ends_with_one_summary_and_warns_of_splits_and_vocabularies_too_small(tmp_path, capsys):
    # A user's own small text, half of it repeated: what was dropped, and why the numbers mean little, is said.
    corpus = tmp_path / "mine.txt"
    corpus.write_text("\n".join(LINES[:60] + LINES[:30] + ["", "hello"]) + "\n", encoding="utf-8")
    config = tiny_config_dict(tmp_path, corpus)
    config["train"]["language_models"] = []  # --prepare-only counts none: this test is about the summary
    status = main(["--config", str(write_config(tmp_path / "mine.yaml", config)), "--prepare-only", "--workers", "1"])
    captured = capsys.readouterr()
    stats = json.loads(captured.out)
    written, lines = stats["store"]["examples"], captured.err.strip().splitlines()
    assert status == 0 and "Traceback" not in captured.err and "error" not in captured.err, captured.err
    assert lines[0].startswith(f"prepared 92 lines into examples: train {written['train']}, valid {written['valid']}, "
                               f"test {written['test']}; left out: {stats['skipped']['duplicate example']} duplicate "
                               f"example, ")  # the most first
    assert "1 clause without hanzi" in lines[0] and "1 empty line" in lines[0]
    assert lines[0].endswith(f"; vocabulary: {stats['vocab']['hanzi']} hanzi tokens, {stats['vocab']['pinyin']} "
                             f"pinyin tokens")
    assert stats["skipped"]["duplicate example"] >= 30  # (the 30 repeated lines, clause by clause)
    assert lines[1].startswith(f"warning: the validation split has {written['valid']} and the test split has "
                               f"{written['test']} examples, fewer than 100: ")
    assert lines[1].endswith("add text or raise data.valid_per_mille (now 150) and data.test_per_mille (now 150)")
    assert lines[2].startswith(f"warning: the hanzi vocabulary has {stats['vocab']['hanzi']} tokens, fewer than 1,000")
    assert "--init-from pinyin_hanzi/pretrained/model.pt" in lines[2] and len(lines) == 3


def test_a_corpus_large_enough_gets_the_summary_without_warnings(tmp_path, corpus, monkeypatch):
    monkeypatch.setattr("pinyin_hanzi.data.prepare.MIN_HELD_OUT_EXAMPLES", 1)
    monkeypatch.setattr("pinyin_hanzi.data.prepare.MIN_HANZI_VOCAB", 10)
    messages = []
    out = prepare(_config(tmp_path, {str(corpus): 1.5}, "large"), workers=1, log=messages.append)
    stats = json.loads((out / "stats.json").read_text(encoding="utf-8"))
    written = stats["store"]["examples"]
    assert len(messages) == 1 and messages[0].startswith(  # weight 1.5: some examples are trained on twice
        f"prepared {stats['lines']} lines into examples: train {written['train']} ({stats['examples']['train']} an "
        f"epoch, with the source weights), valid {written['valid']}, test {written['test']}; left out: ")
    assert "left out: " in messages[0] and "1 tsv line without a tab" in messages[0]


def test_a_file_whose_name_has_glob_characters_is_read_as_that_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("bracket[1].txt").write_text("\n".join(LINES[:80]) + "\n", encoding="utf-8")
    Path("bracket1.txt").write_text("这个文件不该被读到。\n", encoding="utf-8")  # what the name matches as a glob
    out = prepare(_config(tmp_path, {"bracket[1].txt": 1.0}, "bracket"), workers=1)
    assert json.loads((out / "stats.json").read_text(encoding="utf-8"))["lines"] == 80
    with pytest.raises(DataError, match=r"matches no file ending in .*, and no file has that very name .*"
                                        r"put each in brackets: 'nothing\[\[\]1\]\.txt'\)$"):
        prepare(_config(tmp_path, {"nothing[1].txt": 1.0}, "nothing"), workers=1)


@pytest.mark.parametrize("lines", [1, 3], ids=["one line", "the last of three"])
def test_a_corpus_cut_short_in_a_character_says_so_not_to_convert_it(tmp_path, capsys, lines):
    corpus = tmp_path / "cut.txt"
    text = "".join(sentence + "\n" for sentence in TINY_SENTENCES[: lines - 1]) + TINY_SENTENCES[lines]
    corpus.write_bytes(text.encode("utf-8")[:-2])  # a copy stopped two bytes into the last character
    config = write_config(tmp_path / "cut.yaml", tiny_config_dict(tmp_path, corpus))
    status = main(["--config", str(config), "--prepare-only", "--workers", "1"])
    err = capsys.readouterr().err
    assert status == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert err.startswith(f"error: corpus file {corpus} ends in the middle of a character (byte ")
    assert err.rstrip().endswith("was it cut short? copy it again") and "convert" not in err

import json

import pytest

from pinyin_hanzi.config import DataConfig
from pinyin_hanzi.data.corpus import prepare, read_examples, read_split
from pinyin_hanzi.data.examples import chunk, split_clauses, split_of
from pinyin_hanzi.data.prepare import export_train_tsv
from pinyin_hanzi.errors import DataError


def _config(tmp_path, corpus, **overrides):
    values = dict(corpus=str(corpus), prepared_dir=str(tmp_path / "prepared"), raw_dir=str(tmp_path / "raw"),
                  max_len=8, valid_per_mille=200, test_per_mille=200)
    values.update(overrides)
    return DataConfig(**values)


def test_split_is_deterministic_and_independent_of_the_rest_of_the_corpus():
    config = DataConfig(valid_per_mille=100, test_per_mille=200)
    texts = [f"第{i}句话" for i in range(2000)]
    first = {text: split_of(text, config) for text in texts}
    assert {text: split_of(text, config) for text in reversed(texts)} == first
    counts = {split: sum(1 for s in first.values() if s == split) for split in ("train", "valid", "test")}
    assert 120 < counts["valid"] < 280 and 300 < counts["test"] < 500  # roughly the configured shares


def test_clauses_keep_their_punctuation_and_long_ones_are_cut():
    assert split_clauses("你好，世界！我们走吧。") == ["你好，", "世界！", "我们走吧。"]
    pieces = chunk(list("abcdefghij"), "ABCDEFGHIJ", 4)
    assert [p.hanzi for p in pieces] == ["ABCD", "EFGH", "IJ"]
    assert all(len(p.tokens) == len(p.hanzi) for p in pieces)


def test_prepare_text_corpus_writes_aligned_splits_and_stats(tmp_path):
    corpus = tmp_path / "c.txt"
    lines = [f"我们在第{i}个城市见面，你好吗？" for i in range(60)] + ["", "hello world", "我们在第1个城市见面，你好吗？"]
    corpus.write_text("\n".join(lines), encoding="utf-8")
    out = prepare(_config(tmp_path, corpus))
    stats = json.loads((out / "stats.json").read_text(encoding="utf-8"))
    assert stats["skipped"]["empty line"] == 1
    assert stats["skipped"]["clause without hanzi"] == 1
    assert stats["skipped"]["duplicate example"] > 0  # the repeated sentence and its shared clauses
    assert sum(stats["examples"].values()) > 0
    for split in ("train", "valid", "test"):
        for example in read_split(out, split):
            assert len(example.tokens) == len(example.hanzi) <= 8
    # Vocabularies come from the training split alone, and their sizes are reported.
    from pinyin_hanzi.data.vocab import SPECIALS, load_vocab

    train_chars = {c for e in read_split(out, "train") for c in e.hanzi}
    hanzi_vocab = load_vocab(out / "hanzi_vocab.txt")
    assert set(hanzi_vocab.tokens[len(SPECIALS):]) == train_chars
    assert stats["vocab"] == {"pinyin": len(load_vocab(out / "pinyin_vocab.txt")), "hanzi": len(hanzi_vocab)}
    # Reused when nothing changed; rebuilt when the config changes.
    mtime = (out / "train.source.bin").stat().st_mtime_ns
    assert prepare(_config(tmp_path, corpus)) == out and (out / "train.source.bin").stat().st_mtime_ns == mtime


def test_tsv_corpus_and_bad_lines(tmp_path):
    corpus = tmp_path / "pairs.tsv"
    good = [f"ni{i % 5 + 1} hao ， {i % 10}\t你好，{i % 10}" for i in range(40)]
    good = [f"wo men qu bei jing ba {i}\t我们去北京吧{i}" for i in range(10)] + good
    bad = ["no tab here", "ni hao\t你好吗", "ma ma\t你好"]
    corpus.write_text("\n".join(good + bad), encoding="utf-8")
    out = prepare(_config(tmp_path, corpus, max_len=16))
    stats = json.loads((out / "stats.json").read_text(encoding="utf-8"))
    assert stats["skipped"] == {"tsv line without a tab": 1, "tsv pinyin/hanzi lengths differ": 1,
                                "tsv pinyin does not match hanzi": 1, "duplicate example": 30}


def test_non_utf8_corpus_is_a_clear_error(tmp_path):
    corpus = tmp_path / "gbk.txt"
    corpus.write_bytes("你好，世界。".encode("gbk"))
    with pytest.raises(DataError, match="not UTF-8"):
        prepare(_config(tmp_path, corpus))


def test_missing_corpus_and_wrong_suffix(tmp_path):
    with pytest.raises(DataError, match="not found"):
        prepare(_config(tmp_path, tmp_path / "nope.txt"))
    with pytest.raises(DataError, match="not a named source.*ending in .txt, .tsv"):
        prepare(_config(tmp_path, tmp_path / "corpus.csv"))


def test_prepared_splits_read_trusted_equal_the_checked_reading(tmp_path):
    corpus = tmp_path / "c.txt"
    corpus.write_text("\n".join(f"我们在第{i}个城市见面，Python 2024！" for i in range(40)), encoding="utf-8")
    out = prepare(_config(tmp_path, corpus, max_len=16))
    export_train_tsv(out)
    for split in ("train", "valid", "test"):
        assert read_examples(out / f"{split}.tsv", trusted=True) == read_examples(out / f"{split}.tsv")


def test_every_kind_of_unusable_line_is_skipped_and_counted(tmp_path):
    corpus = tmp_path / "c.txt"
    usable = [f"我们在第{i}个城市见面，你好吗？" for i in range(40)]
    unusable = ["", "   ", "only English here, 123!", "兙兙。", "我" * 20]  # empty x2, no hanzi, no reading, too long
    corpus.write_text("\n".join(usable + unusable) + "\n", encoding="utf-8")
    stats = json.loads((prepare(_config(tmp_path, corpus, max_len=16)) / "stats.json").read_text(encoding="utf-8"))
    assert stats["skipped"]["empty line"] == 2
    assert stats["skipped"]["clause without hanzi"] == 2  # "only English here," and "123!"
    assert stats["skipped"]["hanzi without a pinyin reading"] == 1
    assert stats["skipped"]["clause longer than max_len=16 (cut, not dropped)"] == 1
    assert stats["source"]["lines"] == len(usable) + len(unusable)


def test_an_edit_that_keeps_the_size_and_mtime_of_the_corpus_prepares_it_again(tmp_path):
    import os

    corpus = tmp_path / "c.txt"
    corpus.write_text("\n".join(f"我们在第{i}个城市见面，你好吗？" for i in range(40)), encoding="utf-8")
    out = prepare(_config(tmp_path, corpus, max_len=16))
    stat = corpus.stat()
    corpus.write_bytes(corpus.read_bytes().replace("你好".encode(), "您好".encode()))  # the same number of bytes
    os.utime(corpus, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    prepare(_config(tmp_path, corpus, max_len=16))
    assert "您" in (out / "hanzi_vocab.txt").read_text(encoding="utf-8")


def test_preparation_is_all_or_nothing(tmp_path, monkeypatch):
    from pinyin_hanzi.data import prepare as prepare_module

    corpus = tmp_path / "c.txt"
    corpus.write_text("\n".join(f"我们在第{i}个城市见面，你好吗？" for i in range(40)), encoding="utf-8")
    out = prepare(_config(tmp_path, corpus, max_len=16))
    before = {path.name: path.read_bytes() for path in out.iterdir()}

    class Killed(BaseException):
        pass

    def killed(*args):  # the splits are written, the vocabularies and stats.json not yet
        raise Killed

    monkeypatch.setattr(prepare_module, "save_vocab", killed)
    with pytest.raises(Killed):
        prepare(_config(tmp_path, corpus, max_len=8))  # another config: everything is rebuilt
    assert {path.name: path.read_bytes() for path in out.iterdir()} == before  # the previous data, whole
    monkeypatch.undo()
    (tmp_path / "prepared" / ".c.building-12345").mkdir()  # what a kill -9 would leave beside it
    prepare(_config(tmp_path, corpus, max_len=8))
    assert sorted(path.name for path in (tmp_path / "prepared").iterdir()) == [".c.lock", "c"]
    assert max(len(example.hanzi) for example in read_split(out, "train")) <= 8


def test_preparing_data_another_process_prepares_waits_for_it(tmp_path):
    import threading

    from pinyin_hanzi.files import locked

    corpus = tmp_path / "c.txt"
    corpus.write_text("\n".join(f"我们在第{i}个城市见面，你好吗？" for i in range(40)), encoding="utf-8")
    config = _config(tmp_path, corpus, max_len=16)
    messages, released = [], threading.Event()
    with locked(tmp_path / "prepared" / ".c.lock"):  # held as another process would hold it
        worker = threading.Thread(target=lambda: prepare(config, log=messages.append))
        worker.start()
        worker.join(timeout=1.0)
        assert worker.is_alive() and not (tmp_path / "prepared" / "c").exists()  # waiting, not building
        released.set()
    worker.join(timeout=60)
    assert not worker.is_alive() and (tmp_path / "prepared" / "c" / "stats.json").is_file()
    assert messages and messages[0].startswith("waiting for process ") and "preparing" in messages[0]


def test_a_corpus_with_no_usable_line_says_why(tmp_path):
    corpus = tmp_path / "c.txt"
    corpus.write_text("hello world\n\n兙兙。\n", encoding="utf-8")
    with pytest.raises(DataError) as raised:
        prepare(_config(tmp_path, corpus))
    message = str(raised.value)
    assert "(train 0, valid 0, test 0) from 3 lines; skipped: " in message
    assert "1 clause without hanzi" in message and "1 empty line" in message
    assert "1 hanzi without a pinyin reading" in message
    assert "add Chinese text" in message and "valid_per_mille" not in message


def _rewritten_while_read(tmp_path, monkeypatch, *, rewrite: bool):
    """A corpus of 602 lines (more than a read buffer) that is truncated as preparation starts annotating it
    (the reader then finds its end early), and, with ``rewrite``, written again with the same bytes before the
    reader gets there, as ``cp`` onto it would. Its mtime is set in the past first, so that the rewrite moves it
    whatever the clock's resolution; its lines are 64 bytes, so that the reader stops between two."""
    import os

    from pinyin_hanzi.data import annotate as annotate_module

    corpus = tmp_path / "c.txt"
    lines = [f"我们在第{i:03}个城市见面，你好吗？" for i in range(602)]
    corpus.write_text("".join(f"{line}{' ' * (63 - len(line.encode()))}\n" for line in lines), encoding="utf-8")
    os.utime(corpus, ns=(10**18, 10**18))
    original, annotate = corpus.read_bytes(), annotate_module.annotate

    def changing(unit, *args):  # the unit's lines are read; the reader's buffer holds the next few
        if unit.document == 0 and unit.chunk == 0:
            corpus.write_bytes(b"")
        elif unit.document == 0 and unit.chunk == 1 and rewrite:
            corpus.write_bytes(original)
        return annotate(unit, *args)

    monkeypatch.setattr(annotate_module, "UNIT_LINES", 20)  # two units within the first 4 KiB the reader buffers
    monkeypatch.setattr(annotate_module, "annotate", changing)
    return corpus, original


@pytest.mark.parametrize("rewrite", [True, False], ids=["truncated and written again", "truncated"])
def test_a_corpus_rewritten_while_it_is_read_is_refused_and_nothing_is_kept(tmp_path, monkeypatch, capsys, rewrite):
    from pinyin_hanzi.cli.train import main

    from conftest import tiny_config_dict, write_config

    corpus, original = _rewritten_while_read(tmp_path, monkeypatch, rewrite=rewrite)
    config = write_config(tmp_path / "c.yaml", tiny_config_dict(tmp_path, corpus))
    status = main(["--config", str(config), "--prepare-only", "--workers", "1"])
    err = capsys.readouterr().err
    assert status == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    how = "it was written to" if rewrite else f"its size went from {len(original):,} to 0 bytes"
    assert err.strip() == (f"error: corpus file {corpus} changed while it was read for preparation ({how}): "
                           f"nothing was kept; prepare again once nothing writes to it")
    assert not (tmp_path / "prepared" / "tiny").exists()
    monkeypatch.undo()  # nothing writes to it now: prepared whole, all 602 lines
    corpus.write_bytes(original)
    stats = json.loads((prepare(_config(tmp_path, corpus)) / "stats.json").read_text(encoding="utf-8"))
    assert stats["source"]["lines"] == 602


def test_a_shard_of_a_corpus_rewritten_while_it_is_read_is_refused(tmp_path, monkeypatch):
    from pinyin_hanzi.data.corpus import parts_dir, prepare_shard

    corpus, _ = _rewritten_while_read(tmp_path, monkeypatch, rewrite=True)
    config = _config(tmp_path, corpus)
    with pytest.raises(DataError, match="changed while it was read for preparation"):
        prepare_shard(config, (0, 2), workers=1)
    assert not parts_dir(config).exists() or not any(parts_dir(config).iterdir())


def test_a_corpus_that_changes_while_it_is_fingerprinted_is_refused(tmp_path, monkeypatch):
    import hashlib

    from pinyin_hanzi.data import corpus_files

    corpus = tmp_path / "c.txt"
    corpus.write_text("\n".join(f"我们在第{i}个城市见面，你好吗？" for i in range(40)), encoding="utf-8")
    size = corpus.stat().st_size

    class Truncating:  # sha256 that empties the file after its first block, as `cp` onto it would
        def __init__(self, data=b""):
            self.digest, self.blocks = hashlib.sha256(data), 0

        def update(self, block):
            self.blocks += 1
            if self.blocks == 1:
                corpus.write_bytes(b"")
            self.digest.update(block)

        def hexdigest(self):
            return self.digest.hexdigest()

    monkeypatch.setattr(corpus_files, "BLOCK_BYTES", 64)
    monkeypatch.setattr(corpus_files, "hashlib", type("hashlib", (), {"sha256": Truncating}))
    with pytest.raises(DataError) as raised:
        prepare(_config(tmp_path, corpus))
    assert str(raised.value) == (f"corpus file {corpus} changed while it was read for preparation (64 bytes read "
                                 f"of the {size:,} it had): nothing was kept; prepare again once nothing writes to it")


def test_a_corpus_replaced_between_its_fingerprint_and_its_reading_is_refused(tmp_path, monkeypatch):
    import os

    from pinyin_hanzi.data import sources as sources_module

    corpus = tmp_path / "c.txt"
    corpus.write_text("\n".join(f"我们在第{i}个城市见面，你好吗？" for i in range(40)), encoding="utf-8")
    documents = sources_module.documents

    def replacing(name, raw_dir):  # fingerprinted already: another file is renamed over it, then it is read
        newer = tmp_path / "newer.txt"
        newer.write_text("\n".join(f"他们在第{i}个城市见面，你好吗？" for i in range(40)), encoding="utf-8")
        os.replace(newer, corpus)
        return documents(name, raw_dir)

    monkeypatch.setattr(sources_module, "documents", replacing)
    with pytest.raises(DataError, match=r"c\.txt changed while it was read for preparation \(it was replaced by "
                                        r"another file\): nothing was kept"):
        prepare(_config(tmp_path, corpus))
    assert not (tmp_path / "prepared" / "c").exists()

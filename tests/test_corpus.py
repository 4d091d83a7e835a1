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

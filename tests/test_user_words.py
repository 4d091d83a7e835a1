"""The user dictionary (pinyin_hanzi/lm/user_words.py): its file format, its model, the readings it adds to the
lexicon, and what it does to conversions through the API and translate.py."""

import json
import math
import re

import pytest
import torch

from conftest import ROOT
from pinyin_hanzi.data.vocab import SPECIALS, Vocab
from pinyin_hanzi.decoding.converter import Converter
from pinyin_hanzi.errors import DataError
from pinyin_hanzi.lm import user_words
from pinyin_hanzi.lm.user_words import UserWords, _pieces
from pinyin_hanzi.text.lexicon import Lexicon
from test_cli import run

HANZI = Vocab(list(SPECIALS) + list("数据透视表单元格我们他你好，"))


def _write(tmp_path, text: str | bytes, name: str = "words.txt"):
    path = tmp_path / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8"))
    return path


def test_a_file_gives_words_weights_and_readings_and_counts_each_line_it_skips(tmp_path):
    path = _write(tmp_path, "\ufeff# a comment\n\n数据\n单元格\t5  # a weight\n重庆 chong2 qing4\n乐高 lè gāo 2.5\n"
                            "女儿 nv3 er2\n绿 lu:4\n数据 0.5\nWi-Fi\nU盘\n表格 biao\n表格 biao ge x\n单元 -1\n单元 nan\n"
                            "好 hao3 hao3\n男 nan\n困难 kun nan\n")
    words = UserWords.read(path)
    assert words.weights == {"数据": 1.0, "单元格": 5.0, "重庆": 1.0, "乐高": 2.5, "女儿": 1.0, "绿": 1.0, "男": 1.0,
                             "困难": 1.0}
    assert {("重", "chong", 2), ("乐", "le", 4), ("高", "gao", 1), ("女", "nv", 3), ("绿", "lv", 4)} <= words.readings
    # nan is a syllable (男, 难), never a weight: float("nan") parsed it as one, and refused 困难 kun nan
    assert {("男", "nan", None), ("难", "nan", None)} <= words.readings
    assert words.skipped == {"not a word of hanzi": 2, "not one syllable per character": 3, "unknown syllable": 1,
                             "weight not a positive number": 1}
    note = words.note
    assert "\n" not in note and "7 line(s) skipped" in note and "2 not a word of hanzi (line 10, 11)" in note
    assert "1 unknown syllable (line 13)" in note


def test_a_missing_or_empty_dictionary_or_one_not_utf8_is_one_error_line(tmp_path, monkeypatch):
    monkeypatch.setattr(user_words, "MAX_BYTES", 16)  # a file larger than this is refused before it is read
    with pytest.raises(DataError, match="is larger than .* MiB: a user dictionary is a word a line"):
        UserWords.read(_write(tmp_path, "数据\n" * 10))
    monkeypatch.undo()
    with pytest.raises(DataError, match="user words file not found"):
        UserWords.read(tmp_path / "nope.txt")
    with pytest.raises(DataError, match="not a regular file"):
        UserWords.read(tmp_path)
    with pytest.raises(DataError, match="no usable user word .*2 line\\(s\\) skipped: 2 not UTF-8"):
        UserWords.read(_write(tmp_path, "# only a comment\n".encode() + b"\xff\xfe\n\xc3\n"))
    words = UserWords.read(_write(tmp_path, "数据\n".encode() + b"\xff\n"))  # one bad line among good ones
    assert words.weights == {"数据": 1.0} and words.skipped == {"not UTF-8": 1}


def test_a_long_word_is_kept_in_pieces_of_two_to_four_characters():
    assert _pieces("数据") == ["数据"] and _pieces("数据透视") == ["数据透视"]
    assert _pieces("数据透视表") == ["数据透", "视表"] and _pieces("一二三四五六七八九") == ["一二三", "四五六", "七八九"]
    assert all(2 <= len(piece) <= 4 for n in range(5, 30) for piece in _pieces("字" * n))


def test_lines_of_the_usual_form_read_as_they_read_field_by_field(tmp_path, monkeypatch):
    """A line of the usual form (word, syllables, weight) is read by one regular expression, for speed; any
    line of any form gives the same words, readings and skipped lines as when every line is read field by
    field (a random mix of good and bad fields, separators, tones, comments, CR LF line ends, a line that
    is not UTF-8)."""
    import random

    choose = random.Random(3).choice
    words = ["你好", "难", "重庆", "困难", "数据透视表", "Wi-Fi", "U盘", "", "'你"]
    typed = ["ni", "hao", "nan", "chong2", "qing4", "kùn", "nán", "lv", "lü", "lu:", "NI", "xx", "de5", "ni3hao3", "'"]
    weights = ["1", "2.5", "0", "-1", "nan", "inf", "1e3", "9" * 400, "1_0", ".5", "00.1"]
    separators = [" ", "\t", "  ", "'", " '", "\u3000"]
    lines = [choose(["", " "]) + choose(words)
             + "".join(choose(separators) + choose(typed) for _ in range(choose([0, 1, 2, 3])))
             + (choose(separators) + choose(weights) if choose([0, 1]) else "") + choose(["", " # note", "\t"])
             for _ in range(4000)]
    path = _write(tmp_path, "\n".join(lines).encode() + b"\n\xff\n" + "\r\n".join(lines[:50]).encode())
    fast = UserWords.read(path)
    monkeypatch.setattr(user_words, "_PLAIN_LINE", re.compile(r"(?!)"))  # no line is of the usual form
    slow = UserWords.read(path)
    assert fast.weights == slow.weights and list(fast.weights) == list(slow.weights) and len(fast) >= 4
    assert fast.readings == slow.readings and fast.skipped == slow.skipped and fast.skipped_at == slow.skipped_at
    assert len(fast.skipped) == 5  # every reason a line is skipped for came up


def _reference_tables(words: dict[str, float], hanzi_vocab: Vocab) -> tuple[dict, dict]:
    """The masses of the module's docstring, word by word in plain Python (key -> (with the words, single
    hanzi alone)), for the words' pieces and their beginnings: what model() builds in numpy, all at once."""
    from pinyin_hanzi.lm.word import word_key
    from pinyin_hanzi.text.pinyin import is_hanzi

    size = len(hanzi_vocab)
    singles = [index for index, token in enumerate(hanzi_vocab.tokens) if len(token) == 1 and is_hanzi(token)]
    single = 1 / len(singles)
    base = {word_key([index], size): single for index in singles}
    mass, beginnings = dict(base), {}
    pieces: dict[str, float] = {}
    for word, weight in words.items():
        for piece in _pieces(word):
            pieces[piece] = max(weight, pieces.get(piece, 0.0))
    for piece, weight in pieces.items():
        ids = hanzi_vocab.encode(piece)
        mass[word_key(ids, size)] = mass.get(word_key(ids, size), 0.0) + weight * (math.e * single) ** len(piece)
        for length in range(2, len(piece) + 1):
            key = word_key(ids[:length], size)
            beginnings[key] = max(beginnings.get(key, 0.0), weight * (math.e * single) ** length)
    return ({key: (value, base.get(key, 0.0)) for key, value in mass.items()},
            {key: (base.get(key, 0.0) + beginnings.get(key, 0.0), base.get(key, 0.0)) for key in {*base, *beginnings}})


def test_the_model_built_all_at_once_holds_the_masses_of_each_word(tmp_path):
    """model() computes every word's keys and masses in numpy (word by word, a dictionary of millions of words
    took minutes): the tables hold exactly the masses the docstring defines, for words of one to nine
    characters, single characters, pieces shared by several words (the largest weight counts) and words
    the model cannot write (left out)."""
    text = "数\n数据 2\n数据透\n数据透视 0.5\n数据透视表 3\n单元格数据透 4\n我们他你好单元格\n据\n电脑\n好好 7\n"
    words = UserWords.read(_write(tmp_path, text))
    model = words.model(HANZI)
    assert words.unavailable == ["电脑"]
    expected_words, expected_beginnings = _reference_tables(
        {word: weight for word, weight in words.weights.items() if word != "电脑"}, HANZI)
    for keys, columns, expected in ((model.word_keys, model._word_columns, expected_words),
                                    (model.prefix_keys, model._prefix_columns, expected_beginnings)):
        assert keys.tolist() == sorted(expected)
        want = torch.tensor([expected[key] for key in keys.tolist()], dtype=torch.float64).log().float()
        assert torch.equal(columns, want)


def test_a_dictionary_that_takes_long_to_read_shows_progress_on_a_terminal_only(tmp_path, monkeypatch):
    import io

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    monkeypatch.setattr(user_words, "PROGRESS_AFTER", 0)  # as if every file took long
    monkeypatch.setattr(user_words, "_LINES_PER_UPDATE", 2)
    path = _write(tmp_path, "数据\n单元格\n我们\n你好\n透视表\n")
    for stderr, shown in ((Terminal(), True), (io.StringIO(), False)):
        monkeypatch.setattr("sys.stderr", stderr)
        assert len(UserWords.read(path)) == 5
        assert ("reading words.txt: 100%" in stderr.getvalue()) == shown, stderr.getvalue()


def test_translate_reads_a_user_dictionary_once(trained, tmp_path, monkeypatch, capsys):
    """translate.py checks the file before the model loads (one error line at once) and reads its lines once,
    with the converter: reading it twice cost a 60 MB dictionary its seconds twice."""
    from pinyin_hanzi.cli import translate

    _, _, best = trained
    reads = []
    monkeypatch.setattr(UserWords, "read", classmethod(lambda cls, path, read=UserWords.read: reads.append(path)
                                                       or read.__func__(cls, path)))
    path = _write(tmp_path, "我们 ta men 5\n")
    assert translate.main(["--checkpoint", str(best), "--user-words", str(path), "--user-weight", "5", "ta men"]) == 0
    assert capsys.readouterr().out == "我们\n" and reads == [str(path)]
    assert translate.main(["--checkpoint", str(best), "--user-words", str(tmp_path), "ta men"]) == 2
    assert capsys.readouterr().err == f"error: cannot read user words from {tmp_path}: not a regular file\n"
    assert reads == [str(path)]  # refused before the model loaded, and so before the converter read anything


def _text_score(model, text: str) -> float:
    """The sum of the model's scores of each character of ``text`` after <s> (the search's fused terms)."""
    ids = [SPECIALS.index("<s>")] * model.window + HANZI.encode(text)
    return sum(float(model.log_prob(torch.tensor([ids[i - model.window : i]]), torch.tensor([[ids[i]]])))
               for i in range(model.window, len(ids)))


def test_the_model_scores_a_finished_word_and_nothing_else(tmp_path):
    words = UserWords.read(_write(tmp_path, "数据\n透视表 3\n单元格\n我好\n"))
    model = words.model(HANZI)
    assert _text_score(model, "数据") == pytest.approx(math.log(1 + math.e**2), abs=1e-3)
    assert _text_score(model, "你好数据们") == pytest.approx(math.log(1 + math.e**2), abs=1e-3)
    assert _text_score(model, "透视表") == pytest.approx(math.log(1 + 3 * math.e**3), abs=1e-3)
    for neutral in ("你好", "单元你", "数们", "我们他", "表视透你"):  # no word finished: its beginning is given back
        assert _text_score(model, neutral) == pytest.approx(0, abs=1e-3), neutral
    # A beginning of two or more characters earns its share as it is typed, so that the search keeps it until
    # the word is finished; a first character alone earns nothing.
    assert _text_score(model, "透视") == pytest.approx(math.log(1 + 3 * math.e**2), abs=1e-3)
    assert _text_score(model, "单元") == pytest.approx(math.log(1 + math.e**2), abs=1e-3)
    for beginning in ("数", "透"):
        assert _text_score(model, beginning) == pytest.approx(0, abs=1e-3)


def test_words_with_characters_outside_the_vocabulary_are_counted_and_a_dictionary_of_only_them_fails(tmp_path):
    words = UserWords.read(_write(tmp_path, "数据\n电脑\n鼠标\n"))
    words.model(HANZI)
    assert words.unavailable == ["电脑", "鼠标"] and "2 word(s) with a character the model cannot write" in words.note
    with pytest.raises(DataError, match="none of its 2 words can be written"):
        UserWords.read(_write(tmp_path, "电脑\n鼠标\n")).model(HANZI)


def test_a_reading_the_file_gives_is_added_to_the_lexicon_for_that_tone(tmp_path):
    words = UserWords.read(_write(tmp_path, "我们 ta3 men\n好 ni\n"))
    plain, extended = Lexicon(HANZI), Lexicon(HANZI, words.lexicon_readings())

    def allowed(lexicon, key):
        return {HANZI.tokens[i] for i in lexicon.ids(torch.tensor([lexicon.row(key)]))[0][0].tolist()} - {"<pad>"}

    assert allowed(plain, "ta") == {"他"} and allowed(extended, "ta") == {"他", "我"}
    assert allowed(extended, "ta3") == {"我"} and allowed(extended, "ta1") == {"他"}  # 我 only in the tone given
    assert "好" in allowed(extended, "ni4") and "好" in allowed(extended, "n*")  # no tone given: any tone
    assert extended.syllable_of("我", "t*") == "ta" and plain.syllable_of("我", "t*") == "ta"


def _with_words(converter, path, **settings):
    """The shipped model's parts in a converter with a user dictionary (the shipped_converter stays as it is)."""
    return Converter(converter.model, converter.pinyin_vocab, converter.hanzi_vocab, window=converter.planner.window,
                     syllable_lm=converter.planner.syllable_lm, char_lm=converter.char_lm, config=converter.config,
                     user_words=path, **settings)


def test_a_made_up_word_comes_out_once_it_is_in_the_dictionary(shipped_converter, tmp_path):
    # 王景廷, a name of common characters, is no word the model knows: it writes 望镜听 for wang jing ting.
    typed = ["wang jing ting", "ta shuo wang jing ting hen hao", "ta men", "wo men qu bei jing ba", "shi yan"]
    assert shipped_converter.convert(typed) == ["望镜听", "他说网静听很好", "他们", "我们去北京吧", "实验"]
    converter = _with_words(shipped_converter, _write(tmp_path, "王景廷\n我们 ta men\n诗眼\n"))
    assert converter.convert(typed) == ["王景廷", "他说王景廷很好", "我们", "我们去北京吧", "实验"]
    # Greedy decoding fuses the dictionary too, where the word's first character is the model's own choice.
    greedy = _with_words(shipped_converter, _write(tmp_path, "张卫明\n"))
    assert [shipped_converter.convert_lines(["zhang wei ming"], beam=1)[0][0].text,
            greedy.convert_lines(["zhang wei ming"], beam=1)[0][0].text] == ["张伟明", "张卫明"]
    candidate = converter.candidates("ta men", n=1)[0]
    assert candidate.text == "我们" and candidate.read_as == ["ta", "men"]
    # A first character the search does not keep cannot begin a word, whatever its weight: 诗 for shi, where
    # 实验 wins, is beyond a beam of 16 (as the docs say: a wider --beam then).
    heavy = _with_words(shipped_converter, _write(tmp_path, "诗眼 1000\n"))
    assert [heavy.convert_lines(["shi yan"], beam=beam)[0][0].text for beam in (16, 32)] == ["实验", "诗眼"]
    assert _with_words(shipped_converter, _write(tmp_path, "王景廷\n"), user_weight=0).convert(typed[0]) == "望镜听"


def test_from_checkpoint_takes_a_dictionary_and_says_what_it_left_out(trained, tmp_path):
    _, _, best = trained
    notes = []
    path = _write(tmp_path, "我们 ta men\n电脑\nWi-Fi\n")
    converter = Converter.from_checkpoint(best, user_words=path, user_weight=5.0, log=notes.append)
    assert converter.convert("ta men") == "我们" and converter.decode.user_words == str(path)
    assert len(notes) == 1 and "1 line(s) skipped" in notes[0] and "1 word(s) with a character" in notes[0]
    assert "我" not in Converter.from_checkpoint(best).convert("ta men")  # 我 is no character of ta without it
    with pytest.raises(DataError, match="user words file not found"):
        Converter.from_checkpoint(best, user_words=tmp_path / "nope.txt")


def _translate(capsys, *argv) -> tuple[int, str, str]:
    """translate.py's main in this process (no interpreter to start): exit status, stdout, stderr."""
    from pinyin_hanzi.cli import translate

    status = translate.main([str(arg) for arg in argv])
    out, err = capsys.readouterr()
    return status, out, err


def test_translate_reads_a_user_dictionary_and_reports_its_bad_lines_in_one_note(trained, tmp_path, capsys):
    _, _, best = trained
    path = _write(tmp_path, "我们 ta men\nWi-Fi\n数据 x\n")
    status, out, err = _translate(capsys, "--checkpoint", best, "--user-words", path, "--user-weight", "5", "ta men")
    assert status == 0 and out == "我们\n", err
    notes = [line for line in err.splitlines() if line.startswith("note:")]
    assert len(notes) == 1 and "2 line(s) skipped" in notes[0] and "(line 2)" in notes[0], err
    status, out, _ = _translate(capsys, "--checkpoint", best, "--user-words", "none", "ta men")
    assert status == 0 and "我" not in out


def test_translate_refuses_a_missing_or_useless_dictionary_with_one_line(trained, tmp_path, capsys):
    _, _, best = trained
    useless = _write(tmp_path, "# nothing\nabc\n")
    outside = _write(tmp_path, "电脑\n", "outside.txt")
    for words, message in ((tmp_path / "nope.txt", "user words file not found"), (useless, "has no usable user word"),
                           (outside, "can be written with the model's characters")):
        status, out, err = _translate(capsys, "--checkpoint", best, "--user-words", words, "ni hao")
        assert status == 2 and out == "" and err.count("\n") == 1 and err.startswith("error: ") and message in err
    with pytest.raises(SystemExit) as usage:  # argparse's usage error
        _translate(capsys, "--checkpoint", best, "--compare-user-words", outside, "ni hao")
    assert usage.value.code == 2 and "--compare-user-words needs --compare" in capsys.readouterr().err


def test_translate_compares_a_model_without_and_with_a_dictionary_sentence_by_sentence(trained, tmp_path):
    _, _, best = trained
    # The reference is the homophone the tiny model does not write for ta men, and the dictionary's word
    written = Converter.from_checkpoint(best).convert("ta men")
    word = next(other for other in ("他们", "她们") if other != written)
    words = _write(tmp_path, f"{word}\n")
    pairs = _write(tmp_path, f"ta men\t{word}\nni hao\t你好\n", "pairs.tsv")
    result = run(ROOT / "translate.py", "--checkpoint", best, "--evaluate", pairs, "--compare", best,
                 "--compare-user-words", words, "--user-weight", "5")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert f"({best} without user words) vs 0.00% ({best} with {words})" in lines[1], result.stdout
    assert "difference -25.00 points" in lines[1] and "1 sentences better, 0 worse" in lines[1]
    report = json.loads(lines[-1])
    assert report["user_words"] is None and report["compare_user_words"] == str(words) and report["other_cer"] == 0


def test_serve_converts_with_the_user_dictionary_it_was_started_with(trained, tmp_path):
    import httpx

    from serving import output, start_service, stop_service

    _, _, best = trained
    words = _write(tmp_path, "他们 20\nWi-Fi\n")  # the tiny model writes 她们 for ta men; weight 20 outweighs it
    process, url = start_service("--checkpoint", str(best), "--user-words", str(words))
    try:
        answer = httpx.post(f"{url}/convert", json={"text": "ta men"}, timeout=30).json()
        assert answer["output"] == "他们", answer
        assert "1 line(s) skipped: 1 not a word of hanzi (line 2)" in output(process)
    finally:
        stop_service(process)

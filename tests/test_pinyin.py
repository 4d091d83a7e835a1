import pypinyin
from hypothesis import given, settings
from hypothesis import strategies as st

from pinyin_hanzi.text.pinyin import (
    hanzi_to_tokens,
    is_hanzi,
    normalize_text,
    phrase_readings,
    syllable_table,
    syllables,
    toned_syllable_table,
)

from conftest import plain_pypinyin_tokens


def test_tokens_align_one_per_character_with_pass_through():
    text = "银行长大了，1998年ABC绿"
    tokens = hanzi_to_tokens(text)
    assert len(tokens) == len(text)
    assert tokens[:5] == ["yin", "hang", "zhang", "da", "le"]  # phrase-aware polyphones
    assert tokens[5:10] == ["，", "1", "9", "9", "8"]  # punctuation and digits pass through
    assert tokens[11:14] == ["A", "B", "C"]  # Latin letters pass through, case kept
    assert tokens[-1] == "lv"  # ü is written v


def test_word_list_input_gives_same_alignment():
    assert hanzi_to_tokens(["我们", "银行"]) == ["wo", "men", "yin", "hang"]


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=20) | st.lists(st.sampled_from("你好，１Ａａ ：\t\u200b\ue000\u3000\x85"), max_size=12).map("".join))
def test_normalize_text_keeps_or_drops_each_character_by_its_class(text):
    # Lines that need nothing take a fast path: the result is still the character-by-character one.
    import unicodedata

    from pinyin_hanzi.text.pinyin import ascii_letters_digits

    assert normalize_text(text) == "".join(
        char for char in ascii_letters_digits(text)
        if not char.isspace() and unicodedata.category(char) not in ("Cc", "Cf", "Cs", "Co", "Cn"))


def test_normalize_full_width_letters_digits_but_keep_chinese_punctuation():
    assert normalize_text("１９９８年ＡＢｃ，好。") == "1998年ABc，好。"
    assert normalize_text("你 好\t吗\u200b") == "你好吗"  # whitespace and format characters removed


def test_syllable_table_covers_readings():
    table = syllable_table()
    assert "长" in table["chang"] and "长" in table["zhang"]  # heteronyms under each reading
    assert "女" in table["nv"]
    assert all(s.isascii() and s.isalpha() and s == s.lower() for s in syllables())
    assert 380 < len(syllables()) < 500


def test_toned_syllable_table_keeps_tones_apart():
    assert "你" in toned_syllable_table()["ni3"] and "你" not in toned_syllable_table()["ni2"]


def test_is_hanzi():
    assert is_hanzi("中") and is_hanzi("𠀀") and not is_hanzi("，") and not is_hanzi("a")


# Words of pypinyin's phrase table and their polyphones, characters it reads and cannot read (outside and inside
# its ranges), private-use, 〇, punctuation, digits, letters, tone-marked Latin.
_PIECES = st.sampled_from(["银行", "长大", "行长", "长", "行", "了", "中国人", "重庆", "重要", "还原", "的", "地", "得",
                           "〇", "\ue815", "\U0002A6E0", "𠀀", "呣", "嗯", "，", "。", "1", "9", "A", "b", "ǘ", "m̄", " ",
                           "銀行", "绿", "女", "😀"])
_TEXTS = st.lists(_PIECES, max_size=12).map("".join)


@settings(max_examples=300, deadline=None)
@given(_TEXTS, st.lists(_TEXTS, max_size=4))
def test_tokens_are_pypinyins_own_for_text_and_word_lists(text, words):
    # hanzi_to_tokens cuts text and remembers each word's readings (a corpus is prepared 3x faster): the tokens
    # stay exactly pypinyin's, repeated calls included.
    for _ in range(2):
        assert hanzi_to_tokens(text) == plain_pypinyin_tokens(text)
        assert hanzi_to_tokens(words) == plain_pypinyin_tokens(words)


def test_remembered_readings_follow_the_phrase_tables_as_they_change():
    assert hanzi_to_tokens("银行行长") == ["yin", "hang", "hang", "zhang"]
    with phrase_readings({"银行": [["yín"], ["xíng"]]}):
        assert hanzi_to_tokens("银行行长") == ["yin", "xing", "hang", "zhang"]
    assert hanzi_to_tokens("银行行长") == ["yin", "hang", "hang", "zhang"]
    with phrase_readings({}):  # restores pypinyin's tables afterwards: what is loaded below is undone
        pypinyin.load_phrases_dict({"银行": [["yín"], ["háng"]], "行长": [["xíng"], ["cháng"]]})  # behind our back
        assert hanzi_to_tokens("银行行长") == ["yin", "hang", "xing", "chang"] == plain_pypinyin_tokens("银行行长")
    assert hanzi_to_tokens("长") == ["zhang"]
    saved = pypinyin.constants.PINYIN_DICT[ord("长")]
    try:
        pypinyin.load_single_dict({ord("长"): "cháng"})
        assert hanzi_to_tokens("长") == ["chang"] == plain_pypinyin_tokens("长")
    finally:
        pypinyin.constants.PINYIN_DICT[ord("长")] = saved
    assert hanzi_to_tokens("长") == ["zhang"]

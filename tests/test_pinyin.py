from pinyin_hanzi.text.pinyin import (
    hanzi_to_tokens,
    is_hanzi,
    normalize_text,
    syllable_table,
    syllables,
    toned_syllable_table,
)


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

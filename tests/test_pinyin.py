from pinyin_hanzi.pinyin import hanzi_to_tokens, is_hanzi, normalize_text, parse_pinyin, syllable_table, syllables


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


def test_parse_spaced_apostrophe_and_run_together_input():
    assert parse_pinyin("ni hao") == ["ni", "hao"]
    assert parse_pinyin("nihao") == ["ni", "hao"]
    assert parse_pinyin("xi'an") == ["xi", "an"]
    assert parse_pinyin("xian") == ["xian"]
    assert parse_pinyin("NI3 HAO3") == ["ni", "hao"]
    assert parse_pinyin("lü lu:") == ["lv", "lv"]


def test_parse_passes_through_punctuation_digits_latin_and_hanzi():
    assert parse_pinyin("wo ai 2024, Python!") == ["wo", "ai", "2", "0", "2", "4", ",", "P", "y", "t", "h", "o", "n", "!"]
    assert parse_pinyin("ni好") == ["ni", "好"]
    assert parse_pinyin("") == [] and parse_pinyin("   ") == []


def test_is_hanzi():
    assert is_hanzi("中") and is_hanzi("𠀀") and not is_hanzi("，") and not is_hanzi("a")


def _readings(text):
    from pinyin_hanzi.pinyin import alternatives, parse_pieces

    return [[key for _, key in reading] for reading in alternatives(parse_pieces(text))]


def test_ambiguous_runs_keep_their_alternatives_and_apostrophes_force_boundaries():
    assert _readings("xian") == [["xian"], ["xi", "an"]]
    assert sorted(_readings("fangan")) == [["fan", "gan"], ["fang", "an"]]
    assert _readings("xi'an") == [["xi", "an"]]
    assert _readings("hao")[0] == ["hao"]  # fewest syllables first without a syllable model
    assert _readings("a o e") == [["a", "o", "e"]]
    assert _readings("woxiangquxian")[0] == ["wo", "xiang", "qu", "xian"]


def test_tone_digits_and_marks_become_toned_keys():
    for typed in ("ni3 hao3", "ni3hao3", "nǐhǎo", "NǏ HǍO"):
        assert _readings(typed)[0] == ["ni3", "hao3"], typed
    assert _readings("de5 de0 lǜ lv4 lu:4")[0] == ["de5", "de5", "lv4", "lv4", "lv4"]
    from pinyin_hanzi.pinyin import toned_syllable_table

    assert "你" in toned_syllable_table()["ni3"] and "你" not in toned_syllable_table()["ni2"]


def test_non_pinyin_passes_through_as_literal_keys():
    from pinyin_hanzi.pinyin import literal_key

    assert _readings("Python!") == [[literal_key(c) for c in "Python!"]]
    assert _readings("ni好😀") == [["ni", literal_key("好"), literal_key("😀")]]
    assert _readings("ＮＩ　ＨＡＯ，")[0] == ["ni", "hao", literal_key("，")]


def test_a_ten_thousand_syllable_run_is_segmented_in_linear_time():
    import time

    started = time.time()
    assert len(parse_pinyin("zhongguo" * 5000)) == 10000
    assert time.time() - started < 10


def test_syllable_bigrams_rank_segmentations():
    from pinyin_hanzi.pinyin import alternatives, parse_pieces
    from pinyin_hanzi.syllable_lm import SyllableBigrams

    lm = SyllableBigrams.count([["wo", "men", "qu", "xi", "an"]] * 5 + [["xian", "zai"]])
    assert lm.log_prob(["wo", "men"]) > lm.log_prob(["men", "wo"])
    assert lm.log_prob(["wo", "，", "men"]) < lm.log_prob(["wo", "men"])  # punctuation breaks the chain
    ranked = alternatives(parse_pieces("quxian", score=lm.bigram_log_prob))
    assert [t for t, _ in ranked[0]] == ["qu", "xi", "an"]  # "qu xi an" seen; "qu xian" never
    assert SyllableBigrams.from_state_dict(lm.state_dict()).log_prob(["qu", "xi"]) == lm.log_prob(["qu", "xi"])


def test_every_tone_mark_is_known():
    from pinyin_hanzi.pinyin import TONE_MARKS

    assert len(TONE_MARKS) == 6 * 4 + 3 + 1
    assert TONE_MARKS["ḿ"] == ("m", 2) and TONE_MARKS["ǹ"] == ("n", 4) and TONE_MARKS["ǚ"] == ("v", 3)
    assert _readings("ḿ") == [["m2"]] and _readings("ń") == [["n2"]]

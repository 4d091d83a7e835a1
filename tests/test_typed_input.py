from pinyin_hanzi.typed_input import TONE_MARKS, alternatives, literal_key, parse_pieces, parse_pinyin


def _readings(text):
    return [[key for _, key in reading] for reading in alternatives(parse_pieces(text))]


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


def test_non_pinyin_passes_through_as_literal_keys():
    assert _readings("Python!") == [[literal_key(c) for c in "Python!"]]
    assert _readings("ni好😀") == [["ni", literal_key("好"), literal_key("😀")]]
    assert _readings("ＮＩ　ＨＡＯ，")[0] == ["ni", "hao", literal_key("，")]


def test_a_ten_thousand_syllable_run_is_segmented_in_linear_time():
    import time

    started = time.time()
    assert len(parse_pinyin("zhongguo" * 5000)) == 10000
    assert time.time() - started < 10


def test_syllable_bigrams_rank_segmentations():
    from pinyin_hanzi.syllable_lm import SyllableBigrams

    lm = SyllableBigrams.count([["wo", "men", "qu", "xi", "an"]] * 5 + [["xian", "zai"]])
    assert lm.log_prob(["wo", "men"]) > lm.log_prob(["men", "wo"])
    assert lm.log_prob(["wo", "，", "men"]) < lm.log_prob(["wo", "men"])  # punctuation breaks the chain
    ranked = alternatives(parse_pieces("quxian", score=lm.bigram_log_prob))
    assert [t for t, _ in ranked[0]] == ["qu", "xi", "an"]  # "qu xi an" seen; "qu xian" never
    assert SyllableBigrams.from_state_dict(lm.state_dict()).log_prob(["qu", "xi"]) == lm.log_prob(["qu", "xi"])


def test_every_tone_mark_is_known():
    assert len(TONE_MARKS) == 6 * 4 + 3 + 1
    assert TONE_MARKS["ḿ"] == ("m", 2) and TONE_MARKS["ǹ"] == ("n", 4) and TONE_MARKS["ǚ"] == ("v", 3)
    assert _readings("ḿ") == [["m2"]] and _readings("ń") == [["n2"]]

import random

import pytest

from pinyin_hanzi.errors import DataError
from pinyin_hanzi.text.pinyin import syllables, toned_syllable_table
from pinyin_hanzi.text.typed_input import (
    FUZZY_PAIRS,
    LONGEST_ABBREVIATION,
    PREFIX_TOKENS,
    TONE_MARKS,
    alternatives,
    fewest_syllables,
    is_prefix_token,
    key_syllables,
    literal_key,
    parse_pieces,
    parse_pinyin,
    prefix_token,
)


def _readings(text, **options):
    return [[key for _, key in reading] for reading in alternatives(parse_pieces(text, **options))]


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
    from pinyin_hanzi.lm.syllable import SyllableBigrams

    lm = SyllableBigrams.count([["wo", "men", "qu", "xi", "an"]] * 5 + [["xian", "zai"]])
    assert lm.log_prob(["wo", "men"]) > lm.log_prob(["men", "wo"])
    assert lm.log_prob(["wo", "，", "men"]) < lm.log_prob(["wo", "men"])  # punctuation breaks the chain
    ranked = alternatives(parse_pieces("quxian", score=lm.bigram_log_prob))
    assert [t for t, _ in ranked[0]] == ["qu", "xi", "an"]  # "qu xi an" seen; "qu xian" never
    assert SyllableBigrams.from_state_dict(lm.state_dict()).log_prob(["qu", "xi"]) == lm.log_prob(["qu", "xi"])


def test_syllable_bigrams_are_stored_packed_and_earlier_files_still_load():
    from pinyin_hanzi.lm.stored import pack_integers, unpack_integers
    from pinyin_hanzi.lm.syllable import SyllableBigrams

    rng = random.Random(3)
    pool = sorted(syllables())
    lm = SyllableBigrams.count([[rng.choice(pool) for _ in range(rng.randint(1, 9))] for _ in range(500)]
                               + [["ni", "，", "hao"]] * 70_000)  # counts beyond int16
    state = lm.state_dict()
    assert set(state) == {"syllables", "unigram_counts", "bigram_key_steps", "bigram_counts"}
    assert SyllableBigrams.state_problem(state) is None
    for loaded in (SyllableBigrams.from_state_dict(state),
                   SyllableBigrams.from_state_dict({"unigrams": lm.unigrams, "bigrams": lm.bigrams})):  # before
        assert loaded.unigrams == lm.unigrams and loaded.bigrams == lm.bigrams and loaded.total == lm.total
    assert lm.bigrams["<s> ni"] >= 70_000 and lm.unigrams["<s>"] >= 140_000  # beyond int16
    steps = unpack_integers(state["bigram_key_steps"])
    for position, step in ((1, 0), (len(steps) - 1, len(state["syllables"]) ** 2)):  # a key twice; past the last
        broken = steps.clone()
        broken[position] = step
        assert "not sorted pairs" in SyllableBigrams.state_problem({**state, "bigram_key_steps": pack_integers(broken)})


def test_every_tone_mark_is_known():
    assert len(TONE_MARKS) == 6 * 4 + 3 + 1
    assert TONE_MARKS["ḿ"] == ("m", 2) and TONE_MARKS["ǹ"] == ("n", 4) and TONE_MARKS["ǚ"] == ("v", 3)
    assert _readings("ḿ") == [["m2"]] and _readings("ń") == [["n2"]]


# ---- syllable prefixes ----


def _prefixed(text, **options):
    return [[key for _, key in reading] for reading in alternatives(parse_pieces(text, prefixes=True, **options))]


def test_prefixes_spaced_run_together_mixed_and_with_apostrophes():
    expected = ["wo", "xiang", "q*", "b*", "j*"]
    for typed in ("wo xiang q b j", "woxiangqbj", "wo xiang qbj", "wo'xiang'q'b'j", "WO XIANG Q B J"):
        assert _prefixed(typed)[0] == expected, typed
    assert _prefixed("wxqbj") == [["w*", "x*", "q*", "b*", "j*"]]
    assert _prefixed("zhongg") == [["zhong", "g*"]]
    assert _prefixed("zhong'g") == [["zhong", "g*"]]
    assert _prefixed("zho")[0] == ["zho*"] and _prefixed("zh") == [["zh*"]]
    assert parse_pinyin("zhongg zho b", prefixes=True) == ["zhong", "g*", "zh*", "b*"]  # model tokens
    assert _prefixed("bei jing d x") == [["bei", "jing", "d*", "x*"]]


def test_prefixes_are_off_by_default_so_latin_words_pass_through():
    assert parse_pinyin("wxqbj") == list("wxqbj")
    assert parse_pinyin("Python") == list("Python")
    assert parse_pinyin("python", prefixes=True) == ["p*", "y*", "t*", "h*"]


def test_with_prefixes_capitalised_and_spelled_words_pass_through_but_caps_lock_abbreviates():
    assert parse_pinyin("Python", prefixes=True) == list("Python")  # Shift+letter types English
    assert parse_pinyin("wo ai Beijing", prefixes=True) == ["wo", "ai", "bei", "jing"]  # full syllables still read
    # Letters typed one by one form a word when a capital or a letter that begins no syllable is among them.
    assert parse_pinyin("bu zhang A t t i l a dai biao", prefixes=True) == ["bu", "zhang", *"Attila", "dai", "biao"]
    assert parse_pinyin("n i n hui wu", prefixes=True) == [*"nin", "hui", "wu"]
    assert parse_pinyin("ta shi B", prefixes=True) == ["ta", "shi", "B"]
    # Lower-case initials stay abbreviations, also beside a spelled word or with Caps Lock on.
    assert parse_pinyin("w x q b j", prefixes=True) == ["w*", "x*", "q*", "b*", "j*"]
    assert parse_pinyin("q b j , M i k e", prefixes=True) == ["q*", "b*", "j*", ",", *"Mike"]
    assert parse_pinyin("WO XIANG Q B J", prefixes=True) == ["wo", "xiang", "q*", "b*", "j*"]
    assert parse_pinyin("n i n hui wu") == ["n", "i", "n", "hui", "wu"]  # without prefixes: as before


def test_more_abbreviations_in_a_row_than_a_clause_pass_through_as_typed():
    longest = LONGEST_ABBREVIATION
    assert parse_pinyin("x" * longest, prefixes=True) == ["x*"] * longest  # a whole clause abbreviated
    assert parse_pinyin(" ".join("x" * longest), prefixes=True) == ["x*"] * longest
    for typed in ("x" * (longest + 1), " ".join("q" * (longest + 1)), "b" * 20 + " " + "j" * 13,
                  "wo" + "x" * 40, " ".join(["bj"] * 17)):  # run together, spaced, split, after a syllable
        assert parse_pinyin(typed, prefixes=True) == list(typed.replace(" ", "")), typed
    # What stops a stretch: a syllable or pass-through text; what passes through: the stretch's pieces only.
    assert parse_pinyin("ni hao " + "x" * 40 + " wo men", prefixes=True) == ["ni", "hao", *"x" * 40, "wo", "men"]
    assert parse_pinyin("x" * 20 + "xian" + "x" * 20, prefixes=True) == ["x*"] * 20 + ["xian"] + ["x*"] * 20
    assert parse_pinyin("x" * 20 + ", " + "x" * 20, prefixes=True) == ["x*"] * 20 + [","] + ["x*"] * 20
    assert parse_pinyin(" ".join("x" * 40), prefixes=True, shuangpin="microsoft") == ["x"] * 40
    assert parse_pinyin("x" * 40, prefixes=True, fuzzy={"z-zh"}) == ["x"] * 40
    for abbreviation, abbreviated in (("wxqbj", 5), ("zg", 2), ("bjdxdxs", 7), ("wo xiang q b j", 3), ("h" * 8, 8)):
        assert sum(map(is_prefix_token, parse_pinyin(abbreviation, prefixes=True))) == abbreviated, abbreviation


def test_full_syllables_win_xian_is_never_prefixes():
    assert _prefixed("xian") == [["xian"], ["xi", "an"]]
    assert _prefixed("fangan") == _readings("fangan")
    assert _prefixed("xianb") == [["xian", "b*"], ["xi", "an", "b*"]]


def test_lone_vowels_stay_syllables_lone_n_m_are_prefixes_and_interjections_split_inside_runs():
    for letter in ("a", "o", "e"):  # the syllable first (啊 哦 饿), then what the letter abbreviates
        assert _prefixed(letter) == [[letter], [letter + "*"]], letter
        assert _prefixed(letter, score=lambda previous, token: 100.0 if token.endswith("*") else 0.0) == \
            [[letter], [letter + "*"]], letter
        assert parse_pinyin(f"wo {letter}", prefixes=True) == ["wo", letter]
        # scored as that syllable, so the abbreviation reading is not crowded out by other ambiguous runs
        assert _prefixed(f"{letter} qie hao")[:2] == [[letter, "qie", "hao"], [letter + "*", "qie", "hao"]]
    for letter in ("n", "m"):  # typed alone, n is 你 那 呢 far more often than 嗯: a prefix, as inside runs
        assert _prefixed(letter) == [[letter + "*"]], letter
        assert parse_pinyin(f"wo {letter} yao {letter}", prefixes=True) == ["wo", f"{letter}*", "yao", f"{letter}*"]
        assert letter in key_syllables(f"{letter}*")  # whose key still allows the interjection itself
        assert _readings(letter) == [[letter]]  # without prefixes, the syllable
    assert _prefixed("n3") == [["n*3"]] and "n4" in key_syllables("n*4")
    # ... except as a clause of its own, between punctuation (pypinyin types 嗯 as n): the syllable first
    readings = _prefixed("n ， wo zhi dao le 。")
    assert readings[0] == ["n", "=，", "wo", "zhi", "dao", "le", "=。"] and ["n*", *readings[0][1:]] in readings
    assert _prefixed("hao de , m4 ?")[0] == ["hao", "de", "=,", "m4", "=?"]
    assert _prefixed("n hao ,")[0][0] == "n*" and _prefixed("ni , n hao")[0][2] == "n*"  # a word's neighbour
    assert _prefixed("2011 n 9 yue")[0][4] == "n*" and _prefixed("3 m .")[0][1] == "m*"  # 年, 米 by digits
    assert _prefixed("n ，", shuangpin="microsoft") == [["n*", "=，"]]  # a lone shuangpin key is an initial
    assert _prefixed("n4 ，", fuzzy={"n-l"}) == [["n4", "=，"], ["n*4|l*4", "=，"]]  # the syllable widened as any
    for interjection in ("ng", "hm", "hng"):  # 嗯 is typed ng
        assert _prefixed(interjection) == [[interjection]], interjection
    assert _prefixed("nmd") == [["n*", "m*", "d*"]]  # n, m are never syllables inside a run
    assert _prefixed("wng") == [["w*", "n*", "g*"]]  # ng inside a run: n* g*
    assert _prefixed("hmm") == [["h*", "m*", "m*"]]
    assert _prefixed("xa")[0] == ["x*", "a"]  # a is a syllable inside a run too


def test_a_letter_typed_alone_that_is_a_syllable_is_scored_as_that_syllable_even_as_an_abbreviation():
    from pinyin_hanzi.text.typed_input import spoken_alternatives

    def spoken(text, **options):
        return [list(said) for _, said in spoken_alternatives(parse_pieces(text, prefixes=True, **options))]

    assert spoken("e") == [["e"], ["e"]]  # read as e and as e*: both scored as the syllable e
    assert spoken("wo n3 b") == [["wo", "n", "b*"]]  # n typed alone; b is no syllable
    assert spoken("n ， ni", fuzzy={"n-l"}) == [["n", "，", "ni"]] * 2  # n and n*: the typed variant, not l
    assert spoken("zg") == [["z*", "g*"], ["zh*", "g*"]]
    # inside a run a prefix competes with other segmentations (sh* n* against s* hn*) and stays one
    assert ["sh*", "n*"] in spoken("shn")


def test_tone_digits_and_marks_after_a_prefix_stay_in_its_key():
    assert _prefixed("b3") == [["b*3"]]
    assert _prefixed("zhǒ")[0] == ["zho*3"]
    assert _prefixed("zhong1 g4")[0] == ["zhong1", "g*4"]
    tone3 = key_syllables("b*3")
    assert "ba3" in tone3 and "bang3" in tone3 and all(s[-1] == "3" and s in toned_syllable_table() for s in tone3)
    assert set(tone3) == {s + "3" for s in key_syllables("b*") if s + "3" in toned_syllable_table()}


def test_prefix_tokens_and_key_syllables():
    assert prefix_token("zhong") == "zh*" and prefix_token("an") == "a*" and prefix_token("zho") == "zh*"
    assert prefix_token("b") == "b*" and prefix_token("x") == "x*" and prefix_token("shuang") == "sh*"
    assert PREFIX_TOKENS == {prefix_token(s) for s in syllables()}
    assert all(is_prefix_token(t) for t in PREFIX_TOKENS) and not is_prefix_token("*") and not is_prefix_token("b")
    assert key_syllables("zho*") == tuple(sorted(s for s in syllables() if s.startswith("zho")))
    assert "zhong" in key_syllables("zho*") and "zhou" in key_syllables("zho*")
    z = key_syllables("z*")
    assert "zai" in z and not any(s.startswith("zh") for s in z)  # z* is the z initial, not zh
    assert set(key_syllables("a*")) == {"a", "ai", "an", "ang", "ao"}
    assert key_syllables("ni") == ("ni",) and key_syllables("ni3") == ("ni3",)
    assert key_syllables(literal_key("|")) == () and key_syllables(literal_key("*")) == ()
    with pytest.raises(ValueError):
        prefix_token("")


def test_fewer_prefixes_rank_first_whatever_the_score():
    def prefers_prefixes(previous, token):  # a score that would pick prefixes if it decided
        return 1000.0 if token.endswith("*") else -1000.0

    assert _prefixed("xian", score=prefers_prefixes) == [["xian"], ["xi", "an"]]
    assert _prefixed("zhongg", score=prefers_prefixes) == [["zhong", "g*"]]
    assert _prefixed("xianb", score=prefers_prefixes) == [["xian", "b*"], ["xi", "an", "b*"]]
    # among readings with as many prefixes, the score decides
    assert _prefixed("zho") == [["zho*"], ["zh*", "o"]]
    assert _prefixed("zho", score=lambda previous, token: 1.0) == [["zh*", "o"], ["zho*"]]


def _segmentations(letters, start=0):
    """Every split of ``letters`` into syllables and prefix pieces, as (prefix count, pieces), brute force."""
    if start == len(letters):
        yield 0, []
        return
    for end in range(start + 1, min(len(letters), start + 6) + 1):
        piece = letters[start:end]
        whole = start == 0 and end == len(letters)
        if piece in syllables() and (piece not in {"m", "n", "ng", "hm", "hng"} or whole):
            cost = 0
        elif any(s.startswith(piece) and s != piece for s in syllables()):
            cost = 1
        else:
            continue
        for count, rest in _segmentations(letters, end):
            yield count + cost, [piece] + rest


def test_prefix_readings_never_beat_a_full_syllable_reading_property():
    from pinyin_hanzi.lm.syllable import SyllableBigrams

    rng = random.Random(7)
    pool = sorted(syllables())
    lm = SyllableBigrams.count([[rng.choice(pool) for _ in range(8)] for _ in range(200)])
    for _ in range(300):
        # syllables run together, some cut short: any mix of full and abbreviated syllables
        parts = [rng.choice(pool) for _ in range(rng.randint(1, 3))]
        parts = [p[:rng.randint(1, len(p))] if rng.random() < 0.3 else p for p in parts]
        run = "".join(parts)
        for score in (fewest_syllables, lm.bigram_log_prob):
            found = parse_pieces(run, score=score, prefixes=True)
            plain = parse_pieces(run, score=score)
            counts = {count for count, _ in _segmentations(run)}
            if 0 in counts:  # a full-syllable reading exists: prefixes change nothing but add a lone a o e n m*
                assert found == plain or (len(run) == 1 and found[0].options[:-1] == plain[0].options), run
                assert alternatives(found)[0] == alternatives(plain)[0]
                continue
            assert len(found) == 1 and plain != found, run
            readings = found[0].options
            assert all(sum(is_prefix_token(t) for t, _ in r) == min(counts) for r in readings), run
            assert list(found[0].scores) == sorted(found[0].scores, reverse=True)


# ---- fuzzy pinyin ----


def test_fuzzy_is_off_by_default_and_widens_keys_not_tokens():
    assert _readings("zi") == [["zi"]]
    assert _readings("zi", fuzzy={"z-zh"}) == [["zi|zhi"]]
    assert parse_pinyin("zi", fuzzy={"z-zh"}) == ["zi"]
    assert _readings("zhi3", fuzzy={"z-zh"}) == [["zhi3|zi3"]]
    assert key_syllables("zi|zhi") == ("zi", "zhi")
    assert _readings("lan", fuzzy={"n-l", "r-l", "an-ang"}) == [["lan|lang|nan|nang|ran|rang"]]
    assert _readings("nan", fuzzy={"r-l"}) == [["nan"]]  # pairs work one at a time: no n -> l -> r
    assert _readings("jian yan guan", fuzzy={"an-ang"})[0] == ["jian", "yan|yang", "guan"]
    assert _readings("jian guan", fuzzy={"ian-iang", "uan-uang"})[0] == ["jian|jiang", "guan|guang"]
    assert _readings("fu hu", fuzzy={"f-h"}) == [["fu|hu", "hu|fu"]]
    assert _readings("n a", fuzzy={"n-l"}) == [["n", "a"]]  # variants count only where they are syllables


def test_fuzzy_pairs_are_symmetric():
    names = frozenset(FUZZY_PAIRS)
    for name, (part, one, other) in FUZZY_PAIRS.items():
        pairs = 0
        for typed in sorted(syllables()):
            key = _readings(typed, fuzzy={name})[0][0]  # a syllable typed alone reads as itself first
            if "|" not in key:
                continue
            assert key.split("|")[0] == typed
            for variant in key.split("|")[1:]:
                assert typed in key_syllables(_readings(variant, fuzzy={name})[0][0]), (name, typed, variant)
                pairs += 1
        assert pairs > 0, name
    assert _readings("ang", fuzzy=names)[0] == ["ang|an"]


def test_a_lone_z_c_s_also_begins_zh_ch_sh():
    # "any syllable it begins": z begins zhong too, and IMEs read zg as 中国; each reading is a trained token
    assert _prefixed("zg") == [["z*", "g*"], ["zh*", "g*"]]
    assert _prefixed("c f") == [["c*", "f*"], ["ch*", "f*"]] and _prefixed("s")[1] == ["sh*"]
    assert [[token for token, _ in r] for r in alternatives(parse_pieces("zg", prefixes=True))] == [["z*", "g*"], ["zh*", "g*"]]
    assert _prefixed("zh") == [["zh*"]] and _prefixed("zo")[0] == ["zo*"]  # zh, zo: as typed
    assert _prefixed("zai") == [["zai"]] and _readings("z g") == [["=z", "=g"]]  # syllables; no prefixes: as typed
    assert _prefixed("s3")[1] == ["sh*3"]
    from pinyin_hanzi import Converter

    shipped = Converter.from_pretrained()
    assert shipped.convert("z g r m") == "中国人民" and shipped.convert("wo xiang q b j") == "我想去北京"


def test_fuzzy_prefixes_widen_by_initial_pairs():
    assert _prefixed("z", fuzzy={"z-zh"}) == [["z*|zh*"], ["zh*|z*"]]  # read as z* and as zh*, both widened
    assert _prefixed("zh", fuzzy={"z-zh"}) == [["zh*|z*"]]
    assert _prefixed("zho", fuzzy={"z-zh"})[0] == ["zho*|zo*"]
    covered = key_syllables("z*|zh*")
    assert "za" in covered and "zhong" in covered
    assert _prefixed("a", fuzzy={"an-ang"}) == [["a"], ["a*"]]  # final pairs leave prefixes alone
    assert _prefixed("wxa", fuzzy=frozenset(FUZZY_PAIRS))[0] == ["w*", "x*", "a"]


def test_fuzzy_never_changes_the_segmentation():
    rng = random.Random(11)
    pool = sorted(syllables())
    everything = frozenset(FUZZY_PAIRS)
    for _ in range(200):
        run = "".join(rng.choice(pool) for _ in range(rng.randint(1, 4)))
        plain, fuzzy = parse_pieces(run, prefixes=True), parse_pieces(run, prefixes=True, fuzzy=everything)
        assert [[[t for t, _ in o] for o in p.options] for p in plain] == \
               [[[t for t, _ in o] for o in p.options] for p in fuzzy], run
        for p, q in zip(plain, fuzzy):
            for o, r in zip(p.options, q.options):
                assert all(k.split("|")[0] == wide.split("|")[0] for (_, k), (_, wide) in zip(o, r))


def test_unknown_fuzzy_pair_is_a_one_line_data_error():
    with pytest.raises(DataError, match="unknown fuzzy pinyin pair 'zh-j'; known: z-zh, c-ch") as error:
        parse_pieces("zi", fuzzy={"z-zh", "zh-j"})
    assert "\n" not in str(error.value)
    assert _readings("zi", fuzzy="z-zh") == [["zi|zhi"]]  # one name as a plain string


# ---- shuangpin ----


def test_shuangpin_runs_are_key_pairs():
    from pinyin_hanzi.text.shuangpin import encode

    def sp(text, **options):
        return [[(t, k) for t, k in r] for r in alternatives(parse_pieces(text, shuangpin="microsoft", **options))]

    assert sp("vsgo") == [[("zhong", "zhong"), ("guo", "guo")]]
    assert sp("nihk vsgo")[0] == sp("nihkvsgo")[0]
    assert sp("nihkv", prefixes=True) == [[("ni", "ni"), ("hao", "hao"), ("zh*", "zh*")]]
    assert sp("nihkv") == [[("ni", "ni"), ("hao", "hao"), ("v", literal_key("v"))]]  # no prefixes: as typed
    assert sp("ni3hk3") == [[("ni", "ni3"), ("hao", "hao3")]]
    assert sp("m; vs!") == [[("ming", "ming"), ("zhong", "zhong"), ("!", literal_key("!"))]]  # ; is a key
    assert encode("ming", "microsoft") == "m;"
    assert sp("NIHK") == sp("nihk")
    assert sp("vi", fuzzy={"z-zh"}) == [[("zhi", "zhi|zi")]]
    no_syllable = [p for p in ("aa", "ab", "qq") if all(encode(s, "microsoft") != p for s in syllables()
                                                         if s not in {"m", "n", "ng", "hm", "hng", "lo"})]
    assert no_syllable
    for pair in no_syllable:  # a pair that spells nothing passes through as typed
        assert sp(pair.upper()) == [[(c, literal_key(c)) for c in pair.upper()]]
    sentence = ["wo", "xiang", "qu", "bei", "jing"]
    keys = "".join(encode(s, "xiaohe") for s in sentence)
    assert parse_pinyin(keys, shuangpin="xiaohe") == sentence
    with pytest.raises(DataError, match="unknown shuangpin layout"):
        parse_pieces("vsgo", shuangpin="qwerty")


# ---- What typed text is before it is read: normalisation, invisible characters, apostrophes, line ends


def test_decomposed_tone_marks_read_like_precomposed_ones():
    import unicodedata

    for text in ("nǐ hǎo", "lǚ xíng", "ḿ ǹg", "Nǐ HǍO"):
        decomposed = unicodedata.normalize("NFD", text)
        assert decomposed != text
        assert _readings(decomposed) == _readings(text)
    assert _readings("n\u0304")[0] == ["n1"]  # a tone mark that composes with nothing still counts
    assert _readings("lu\u0308e\u0301")[0] == ["lve2"]  # u + diaeresis is ü


def _is_mark(char):
    import unicodedata

    return len(char) == 1 and unicodedata.category(char).startswith("M")


def test_a_combining_mark_never_lands_on_a_converted_character():
    marks = ["\u0301", "\u0323", "\u0308", "\u20d7", "\u093e", "\u0e31", "\u034f"]
    for mark in marks:
        for text in ("ni hao", "ni hao xyz", "nihao!", "x ni"):
            for position in range(len(text) + 1):
                pieces = parse_pieces(text[:position] + mark + text[position:])
                tokens = [piece.options[0][0][0] for piece in pieces]
                for index, piece in enumerate(pieces):
                    token, key = piece.options[0][0]
                    if _is_mark(token):  # kept only right after a pass-through character it sits on
                        assert index > 0 and key == literal_key(token)
                        previous_token, previous_key = pieces[index - 1].options[0][-1]
                        assert previous_key == literal_key(previous_token), (text, position, tokens)
                if mark < "\u0370":  # a mark of the Latin script on a pinyin letter changes nothing
                    assert "ni" in tokens, (text, position, tokens)
    assert parse_pinyin("ni\u0323 hao") == ["ni", "hao"]  # a mark on a pinyin letter is ignored
    assert parse_pinyin("x\u0301yz") == ["x", "\u0301", "y", "z"]  # on a pass-through letter it stays


def test_invisible_characters_are_dropped_by_category_and_separate_like_a_space():
    import sys
    import unicodedata

    invisible = [chr(code) for code in range(sys.maxunicode + 1)
                 if not 0xD800 <= code <= 0xDFFF and unicodedata.category(chr(code)) in ("Cc", "Cf")]
    invisible += ["\ufe0f", "\U000e0100"]  # variation selectors
    assert len(invisible) > 200
    text = "ni" + "".join(invisible) + "hao"
    assert parse_pinyin(text) == ["ni", "hao"]
    for char in invisible:
        assert parse_pinyin(f"x{char}y") == ["x", "y"], hex(ord(char))


def test_apostrophe_like_characters_separate_syllables_and_are_never_echoed():
    from pinyin_hanzi.text.typed_input import APOSTROPHES

    assert {"'", "\u2019", "\u2018", "\uff07", "\u02bc", "\u2032", "`"} <= set(APOSTROPHES)
    for apostrophe in APOSTROPHES:
        assert _readings(f"xi{apostrophe}an") == [["xi", "an"]], hex(ord(apostrophe))
        assert parse_pinyin(f"{apostrophe}ni hao{apostrophe}") == ["ni", "hao"]


def test_single_vowel_syllables_are_syllables_with_or_without_tones():
    for typed in ("a", "o", "e", "ai", "ei", "ao", "ou", "an", "en", "ang", "eng", "er"):
        for form in (typed, typed + "1", typed + "4"):
            assert _readings(form)[0] == [form], form
            assert _readings(form, prefixes=True)[0] == [form]  # the syllable first, before any prefix
    assert _readings("ō")[0] == ["o1"]
    assert _readings("a o e") == [["a", "o", "e"]]


def test_lines_split_by_str_splitlines_and_empty_text_is_one_line():
    from pinyin_hanzi.text.typed_input import split_lines

    assert split_lines("ni\rhao") == ["ni", "hao"]
    assert split_lines("ni\r\nhao\n") == ["ni", "hao"]
    assert split_lines("a\u2028b\x85c\u2029d") == ["a", "b", "c", "d"]
    assert split_lines("") == [""] and split_lines("\n\n") == ["", ""]


def test_callers_import_all_of_typed_input_from_one_module():
    """The parser's parts live in pieces.py, fuzzy.py and abbreviations.py; typed_input exports everything
    callers use (``__all__``), so that none of them needs to know how typed input is split into modules."""
    import pinyin_hanzi.text.typed_input as typed_input

    assert [name for name in typed_input.__all__ if not hasattr(typed_input, name)] == []
    assert typed_input.LONGEST_ABBREVIATION == 32 and typed_input.parse_pinyin("wxqbj", prefixes=True) == [
        "w*", "x*", "q*", "b*", "j*"]


def test_a_memo_of_letter_runs_reads_text_as_without_it_and_stays_bounded(monkeypatch):
    from pinyin_hanzi.text import typed_input

    texts = ["ni hao", "nǐ hǎo ma", "xian", "xi'an", "wxqbj", "Python ni3hao", "zhongguo renmin", "a e o n",
             "bei j", "ni hao", "xian", "nihaonihaonihao"]
    monkeypatch.setattr(typed_input, "MEMO_RUNS", 5)  # cleared when full: bounded whatever is typed
    memo = {}
    for prefixes in (False, True):
        for limit in (1, 4):
            for text in texts:
                expected = parse_pieces(text, limit, prefixes=prefixes)
                assert parse_pieces(text, limit, prefixes=prefixes, memo=memo) == expected
                assert len(memo) <= 5
    assert memo  # it was used

import pytest

from pinyin_hanzi.evaluation.metrics import conversion_scores, edit_distance, paired_difference


def test_edit_distance():
    assert edit_distance("", "") == 0
    assert edit_distance("你好", "你好") == 0
    assert edit_distance("你号", "你好") == 1
    assert edit_distance("你", "你好") == 1 and edit_distance("你好吗", "你好") == 1
    assert edit_distance("abcd", "bcda") == 2


def test_conversion_scores():
    scores = conversion_scores(["你好", "我门去"], ["你好", "我们去"])
    assert scores["char_accuracy"] == pytest.approx(4 / 5)
    assert scores["cer"] == pytest.approx(1 / 5)
    assert scores["exact"] == pytest.approx(1 / 2)
    assert scores["sentences"] == 2 and scores["characters"] == 5
    with pytest.raises(ValueError):
        conversion_scores(["a"], [])


def test_typed_forms():
    from pinyin_hanzi.evaluation.metrics import typed

    tokens = ["di", "4", "ge", "ren", "，", "xi", "an"]
    assert typed(tokens, "第4个人，西安") == "di 4 ge ren ， xi an"
    assert typed(tokens, "第4个人，西安", unsegmented=True) == "di 4geren，xian"
    tokens = ["zai", "T", "X", "xing", "P", "y", "t", "h", "o", "n", "o"]
    assert typed(tokens, "在TX型Python哦", unsegmented=True) == "zai TX xing Python o"
    assert typed(tokens, "在TX型Python哦") == "zai TX xing Python o"  # a word, not o and n as syllables


SENTENCES = ["我想去北京看看长城", "中国人民决心继承邓小平同志的遗志，",
             "我们相信通过这些国家和地区的努力以及有关的国际合作，", "今天天气很好，我们一起去公园散步吧！"]


def test_abbreviated_typing_is_deterministic_and_nested_by_share():
    import subprocess
    import sys

    from pinyin_hanzi.evaluation.metrics import abbreviated_positions, typed
    from pinyin_hanzi.text.pinyin import hanzi_to_tokens

    hanzi = SENTENCES[2]
    tokens = hanzi_to_tokens(hanzi)
    assert typed(tokens, hanzi, abbreviate=0.0) == typed(tokens, hanzi)
    assert typed(tokens, hanzi, abbreviate=0.5) == typed(list(tokens), hanzi, abbreviate=0.5)
    small, large = abbreviated_positions(hanzi, tokens, 0.3), abbreviated_positions(hanzi, tokens, 0.7)
    assert set(small) < set(large)  # a larger share abbreviates the same positions and more
    every = abbreviated_positions(hanzi, tokens, 1.0)
    assert every == [i for i, t in enumerate(tokens) if t != "，" and len(t) > 1]
    words = typed(tokens, hanzi, abbreviate=1.0).split()
    assert words[:4] == ["w", "m", "x", "x"] and words[-1] == "，" and "zh" in words  # zhe -> zh
    assert typed(tokens, hanzi, abbreviate=0.5) != typed(tokens, SENTENCES[1] + "啊" * 20, abbreviate=0.5)
    # the same choice in a fresh interpreter with another string hash seed (no use of Python's hash())
    code = ("from pinyin_hanzi.evaluation.metrics import typed; from pinyin_hanzi.text.pinyin import hanzi_to_tokens; "
            f"h = {hanzi!r}; print(typed(hanzi_to_tokens(h), h, True, abbreviate=0.5))")
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={**__import__("os").environ, "PYTHONHASHSEED": "123"})
    assert other.stdout.strip() == typed(tokens, hanzi, True, abbreviate=0.5)
    with pytest.raises(ValueError):
        typed(tokens, hanzi, abbreviate=1.5)


def test_an_abbreviation_is_typed_as_its_initial_or_its_first_letter():
    from pinyin_hanzi.evaluation.metrics import abbreviation, typed
    from pinyin_hanzi.text.pinyin import hanzi_to_tokens

    assert [abbreviation(s) for s in ("zhong", "chi", "shi", "bei", "an")] == ["zh", "ch", "sh", "b", "a"]
    assert [abbreviation(s, "letter") for s in ("zhong", "chi", "shi", "bei", "an")] == ["z", "c", "s", "b", "a"]
    with pytest.raises(ValueError, match="initial, letter"):
        abbreviation("zhong", "syllable")
    hanzi = SENTENCES[1]
    tokens = hanzi_to_tokens(hanzi)
    initials = typed(tokens, hanzi, abbreviate=1.0).split()
    letters = typed(tokens, hanzi, abbreviate=1.0, abbreviate_as="letter").split()
    assert initials[:2] == ["zh", "g"] and letters[:2] == ["z", "g"]  # 中国
    assert [word[0] for word in initials] == letters  # the same syllables, one letter each


def test_abbreviated_input_parses_back_to_prefix_pieces():
    from pinyin_hanzi.evaluation.metrics import abbreviated_positions, typed
    from pinyin_hanzi.text.pinyin import hanzi_to_tokens
    from pinyin_hanzi.text.typed_input import alternatives, is_prefix_token, parse_pieces, prefix_token

    for hanzi in SENTENCES:
        tokens = hanzi_to_tokens(hanzi)
        chosen = abbreviated_positions(hanzi, tokens, 0.5)
        assert chosen
        spaced = parse_pieces(typed(tokens, hanzi, abbreviate=0.5), prefixes=True)
        assert len(spaced) == len(tokens)
        for position in chosen:  # spaced: that piece reads as the abbreviation (second after a lone n m a o e)
            abbreviation = prefix_token(tokens[position])  # typed "zh" has token and key "zh*"
            assert ((abbreviation, abbreviation),) in spaced[position].options, (hanzi, position)
        run_together = typed(tokens, hanzi, True, abbreviate=0.5)
        best = [token for token, _ in alternatives(parse_pieces(run_together, prefixes=True), 1)[0]]
        expected = [prefix_token(t) if i in chosen else t for i, t in enumerate(tokens)]
        # run together, an abbreviated a o e may read as that syllable (n m inside a run never do)
        vowels = {i for i in chosen if tokens[i][0] in "aoe"}
        assert len(best) == len(expected), run_together
        assert [t for i, t in enumerate(best) if i not in vowels] == [t for i, t in enumerate(expected) if i not in vowels]
        assert sum(map(is_prefix_token, best)) >= len(chosen) - len(vowels)


def test_paired_difference_is_other_minus_first_with_a_bootstrap_interval_over_sentences():
    lengths = [10] * 50
    same = paired_difference([1] * 50, [1] * 50, lengths)
    assert same["difference"] == 0 and same["interval"] == [0, 0] and same["better"] == same["worse"] == 0

    better = paired_difference([2] * 50, [1] * 50, lengths)  # one error fewer in every sentence
    assert better["cer"] == pytest.approx(0.2) and better["other_cer"] == pytest.approx(0.1)
    assert better["difference"] == pytest.approx(-0.1) and better["interval"] == pytest.approx([-0.1, -0.1])
    assert (better["better"], better["worse"]) == (50, 0)

    # one sentence a lot better and one a little worse: a gain the sentences cannot vouch for
    mixed = paired_difference([5] + [1] * 49, [0] + [2] + [1] * 48, lengths)
    low, high = mixed["interval"]
    assert mixed["difference"] == pytest.approx(-4 / 500) and low < mixed["difference"] < high and low < 0 < high
    assert (mixed["better"], mixed["worse"]) == (1, 1)
    assert paired_difference([5] + [1] * 49, [0] + [2] + [1] * 48, lengths) == mixed  # fixed seed: repeats exactly
    narrow = paired_difference([5] + [1] * 49, [0] + [2] + [1] * 48, lengths, level=0.5)
    assert low <= narrow["interval"][0] <= narrow["interval"][1] <= high

    with pytest.raises(ValueError, match="same sentences"):
        paired_difference([1, 2], [1], [3, 3])
    with pytest.raises(ValueError, match="same sentences"):
        paired_difference([], [], [])

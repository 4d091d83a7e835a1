import pytest

from pinyin_hanzi.errors import DataError
from pinyin_hanzi.text.pinyin import syllables
from pinyin_hanzi.text.shuangpin import (
    KEYS,
    LAYOUTS,
    PREFIX,
    SYLLABLE,
    UNTYPED,
    ZERO_INITIAL,
    KeyPiece,
    decode,
    decode_pieces,
    encode,
    encodings,
)

REQUIRED = {"microsoft", "ziranma", "xiaohe", "sogou", "abc", "guobiao"}


def test_the_required_layouts_are_there():
    assert REQUIRED <= set(LAYOUTS)
    assert all(name == layout.name for name, layout in LAYOUTS.items())


@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_every_typed_syllable_round_trips_through_two_unique_keys(name):
    layout = LAYOUTS[name]
    typed = sorted(syllables() - layout.untyped)
    codes = {syllable: encode(syllable, name) for syllable in typed}
    for syllable, code in codes.items():
        assert len(code) == 2 and set(code) <= layout.keys, (syllable, code)
        assert decode(code, name) == [syllable]
    assert len(set(codes.values())) == len(codes)  # no two syllables share keys
    assert decode("".join(codes.values()), name) == typed  # and a run of them splits back


@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_the_untyped_syllables_are_exactly_the_listed_ones(name):
    layout = LAYOUTS[name]
    failing = set()
    for syllable in syllables():
        try:
            encode(syllable, name)
        except DataError:
            failing.add(syllable)
    assert failing == layout.untyped & syllables() == UNTYPED & syllables()
    # Why: the syllabic nasals have no vowel to put on a final key; lo would take luo's keys.
    assert all(not set(syllable) & set("aeiouv") for syllable in failing - {"lo"})
    assert "l" + layout.final_keys("o")[0] == encode("luo", name)
    assert encodings("lo", name) == ()


@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_every_accepted_key_pair_decodes_to_its_own_syllable(name):
    for syllable in syllables() - LAYOUTS[name].untyped:
        codes = encodings(syllable, name)
        assert codes[0] == encode(syllable, name)
        for code in codes:
            assert decode(code, name) == [syllable], (syllable, code)


def _final_key(layout, final):
    return layout.final_keys(final)[0]


def _natural(layout, syllable):
    """Xiaohe's rule: one letter doubled, two as spelled, three as first letter + final key."""
    if len(syllable) == 1:
        return syllable * 2
    if len(syllable) == 2:
        return syllable
    return syllable[0] + _final_key(layout, syllable)


# The initial-less rule each layout's chart states, against which the explicit tables are checked.
ZERO_RULES = {
    "microsoft": lambda layout, s: ["o" + _final_key(layout, s)],
    "sogou": lambda layout, s: ["o" + _final_key(layout, s)],
    "abc": lambda layout, s: ["o" + _final_key(layout, s)],
    "ziguang": lambda layout, s: ["o" + _final_key(layout, s)],
    "guobiao": lambda layout, s: ["a" + _final_key(layout, s)],
    "xiaohe": lambda layout, s: [_natural(layout, s)],
    "ziranma": lambda layout, s: list(dict.fromkeys([_natural(layout, s), "o" + _final_key(layout, s)])),
    "pinyinjiajia": lambda layout, s: list(dict.fromkeys([s[0] + _final_key(layout, s),
                                                          "o" + _final_key(layout, s)])),
}


@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_initial_less_syllables_follow_the_layouts_rule(name):
    layout = LAYOUTS[name]
    assert set(layout.zero_initial) == set(ZERO_INITIAL)
    for syllable in ZERO_INITIAL:
        assert list(encodings(syllable, name)) == ZERO_RULES[name](layout, syllable), syllable


# Words from each layout's published chart: zh ch sh, initial-less syllables, ü, and the keys that set the
# layout apart (; for ing, vowel keys as initials).
REFERENCE = [
    ("microsoft", "vsgo", ["zhong", "guo"]),
    ("microsoft", "uuvs", ["shu", "zhong"]),
    ("microsoft", "ud", ["shuang"]),
    ("microsoft", "igxutm", ["cheng", "xu", "tian"]),  # ü after x typed with the u key
    ("microsoft", "b;x;", ["bing", "xing"]),
    ("microsoft", "nihk", ["ni", "hao"]),
    ("microsoft", "ohoroaob", ["ang", "er", "a", "ou"]),
    ("microsoft", "lyntxtyr", ["lv", "nve", "xue", "yuan"]),
    ("microsoft", "jylv", ["ju", "lve"]),  # also accepted: the ü key after j, üe on V
    ("sogou", "vsgo", ["zhong", "guo"]),
    ("sogou", "udig", ["shuang", "cheng"]),
    ("sogou", "b;", ["bing"]),
    ("sogou", "oaoh", ["a", "ang"]),
    ("sogou", "lylt", ["lv", "lve"]),
    ("ziranma", "vsgo", ["zhong", "guo"]),
    ("ziranma", "udih", ["shuang", "chang"]),
    ("ziranma", "bygy", ["bing", "guai"]),
    ("ziranma", "aaaiahereg", ["a", "ai", "ang", "er", "eng"]),
    ("ziranma", "oholoo", ["ang", "ai", "o"]),  # the o-led form
    ("ziranma", "lvntjv", ["lv", "nve", "ju"]),
    ("xiaohe", "xnheulpb", ["xiao", "he", "shuang", "pin"]),
    ("xiaohe", "vsgoig", ["zhong", "guo", "cheng"]),
    ("xiaohe", "bkgk", ["bing", "guai"]),
    ("xiaohe", "aaaiaheeegerou", ["a", "ai", "ang", "e", "eng", "er", "ou"]),
    ("xiaohe", "lvntxt", ["lv", "nve", "xue"]),
    ("abc", "asgo", ["zhong", "guo"]),
    ("abc", "vteg", ["shuang", "cheng"]),
    ("abc", "ahby", ["zhang", "bing"]),
    ("abc", "ohoroq", ["ang", "er", "ei"]),
    ("abc", "lvlmxm", ["lv", "lve", "xue"]),
    ("guobiao", "vsgo", ["zhong", "guo"]),
    ("guobiao", "unih", ["shuang", "cheng"]),
    ("guobiao", "bjdd", ["bing", "dian"]),
    ("guobiao", "agalaoac", ["ang", "er", "o", "ao"]),
    ("guobiao", "lvlxxx", ["lv", "lve", "xue"]),
    ("ziguang", "uhgo", ["zhong", "guo"]),
    ("ziguang", "igat", ["shuang", "cheng"]),
    ("ziguang", "b;", ["bing"]),
    ("ziguang", "osojop", ["ang", "er", "ai"]),
    ("ziguang", "lvln", ["lv", "lve"]),
    ("pinyinjiajia", "vygo", ["zhong", "guo"]),
    ("pinyinjiajia", "ihut", ["shuang", "cheng"]),
    ("pinyinjiajia", "bq", ["bing"]),
    ("pinyinjiajia", "agaseqeros", ["ang", "ai", "er", "en", "ai"]),
    ("pinyinjiajia", "lvlx", ["lv", "lve"]),
]


@pytest.mark.parametrize("name,keys,expected", REFERENCE)
def test_reference_words_decode(name, keys, expected):
    assert decode(keys, name) == expected
    assert decode(keys.upper(), name) == expected


def test_every_layout_has_reference_words():
    assert {name for name, _, _ in REFERENCE} == set(LAYOUTS)


def test_where_microsoft_and_sogou_differ():
    # Microsoft's chart also puts üe on V (with zh, ui); Sogou's does not, so there l + V spells nothing.
    assert decode("lv", "microsoft") == ["lve"]
    assert decode_pieces("lv", "sogou") == [KeyPiece(KEYS, "lv", "lv")]
    assert encode("bing", "sogou") == encode("bing", "microsoft") == "b;"  # both put ing on ;


def test_where_ziranma_and_xiaohe_differ_on_initial_less_syllables():
    assert encode("ang", "ziranma") == encode("ang", "xiaohe") == "ah"
    assert decode("oh", "ziranma") == ["ang"]
    assert decode_pieces("oh", "xiaohe") == [KeyPiece(KEYS, "oh", "oh")]


def test_unknown_layout_is_a_one_line_data_error_listing_the_known_ones():
    for call in (lambda: decode("vs", "dvorak"), lambda: encode("zhong", "dvorak"),
                 lambda: decode_pieces("vs", "dvorak"), lambda: encodings("zhong", "dvorak")):
        with pytest.raises(DataError) as info:
            call()
        message = str(info.value)
        assert "dvorak" in message and "\n" not in message
        assert all(name in message for name in LAYOUTS)


def test_an_odd_trailing_key_is_a_prefix_when_it_is_an_initial():
    assert decode_pieces("nihkv", "microsoft") == [
        KeyPiece(SYLLABLE, "ni", "ni"), KeyPiece(SYLLABLE, "hao", "hk"), KeyPiece(PREFIX, "zh", "v")]
    assert decode_pieces("vsa", "abc")[-1] == KeyPiece(PREFIX, "zh", "a")  # ABC's zh key is a
    assert decode_pieces("b", "xiaohe") == [KeyPiece(PREFIX, "b", "b")]
    assert decode_pieces("nio", "microsoft")[-1] == KeyPiece(KEYS, "o", "o")  # o is no initial
    with pytest.raises(DataError, match="lone trailing key 'v'"):
        decode("nihkv", "microsoft")


def test_pairs_that_spell_nothing_pass_through_as_keys():
    pieces = decode_pieces("fqni", "microsoft")
    assert pieces == [KeyPiece(KEYS, "fq", "fq"), KeyPiece(SYLLABLE, "ni", "ni")]
    with pytest.raises(DataError, match="'fq'"):
        decode("fqni", "microsoft")


def test_empty_input_and_characters_that_are_no_keys():
    assert decode("", "xiaohe") == [] and decode_pieces("", "xiaohe") == []
    with pytest.raises(DataError, match="';'"):
        decode("b;", "xiaohe")  # ; is a key in Microsoft, not in Xiaohe
    with pytest.raises(DataError, match="'1'"):
        decode_pieces("ni1", "microsoft")


def test_encode_errors_and_spelling():
    with pytest.raises(DataError, match="no keys for 'lo'"):
        encode("lo", "microsoft")
    with pytest.raises(DataError, match="not a pinyin syllable"):
        encode("zhx", "microsoft")
    assert encode("lü", "microsoft") == encode("lv", "microsoft") == "ly"
    assert encode("ju", "microsoft") == "ju" and encode("ju", "xiaohe") == "ju"  # ju keeps the u key

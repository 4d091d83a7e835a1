import torch

from pinyin_hanzi.data.vocab import PAD_ID, SPECIALS, UNK_ID, Vocab
from pinyin_hanzi.text.lexicon import PAD_ROW, Lexicon, token_key
from pinyin_hanzi.text.pinyin import readings, syllable_table, usual_readings
from pinyin_hanzi.text.typed_input import literal_key

HANZI = Vocab(list(SPECIALS) + list("你好妮号我们门，。"))
PINYIN = Vocab(list(SPECIALS) + ["ni", "hao", "wo", "zhong", "，"])


def test_single_letter_syllables_are_hanzi_only_but_their_corpus_tokens_may_be_latin_letters():
    for letter in "aoenm":  # typed, a syllable always becomes a character with that reading
        assert letter not in Lexicon.characters(letter) and Lexicon.characters(letter)
        assert letter not in Lexicon.characters(letter + "1") and letter.upper() not in Lexicon.characters(letter)
    assert Lexicon.characters("o1") == ("喔", "噢")  # the tone is kept
    assert token_key("o") == "o|=o" and token_key("ni") == "ni" and token_key("，") == "=，"
    assert list(Lexicon.characters(token_key("o"))) == [*Lexicon.characters("o"), "o"]  # the o of Python
    assert "ni" not in Lexicon.characters("ni")
    assert Lexicon.characters(literal_key("o")) == ("o",)  # typed as a literal: only itself


def test_tones_narrow_the_characters_and_an_impossible_tone_counts_as_toneless():
    assert "你" in Lexicon.characters("ni3") and "妮" not in Lexicon.characters("ni3")
    assert "妮" in Lexicon.characters("ni1")
    assert set(Lexicon.characters("ni5")) == set(Lexicon.characters("ni"))


def test_rows_allow_the_vocabulary_characters_of_a_key_and_fall_back_without_any():
    lexicon = Lexicon(HANZI)
    row = lexicon.row("ni")
    allowed = {HANZI.tokens[i] for i in lexicon.table()[row].nonzero().flatten().tolist()}
    assert allowed == {"你", "妮"}
    assert lexicon.fallback("ni") is None
    zhong = lexicon.row("zhong")  # no character of zhong in the vocabulary: <unk>, and a fallback character
    assert lexicon.table()[zhong].nonzero().flatten().tolist() == [UNK_ID]
    assert "zhong" in readings()[lexicon.fallback("zhong")]
    assert lexicon.table()[PAD_ROW].nonzero().flatten().tolist() == [PAD_ID]


def test_a_syllable_stands_for_the_characters_it_is_a_usual_reading_of():
    # 洗 is read xi; xian (a surname) is in the character table only, and the n-gram model would score 洗
    # after 去 as if it were read xi: woxiangquxian came out as 我想去洗.
    assert "洗" in Lexicon.characters("xi") and "洗" not in Lexicon.characters("xian")
    assert "洗" not in Lexicon.characters("xian3") and "xian" in readings()["洗"]  # the table still has it
    assert "是" not in Lexicon.characters("ti") and "省" not in Lexicon.characters("xian")
    # Readings that phrases give are usual: 长大 zhang, 还原 huan, 了解 liao, 银行 hang, 目的 di.
    for char, syllable in (("长", "zhang"), ("长", "chang"), ("还", "huan"), ("了", "liao"), ("行", "hang"),
                           ("的", "di")):
        assert char in Lexicon.characters(syllable), (char, syllable)
    assert "洗" in Lexicon.characters("xi|xian") and "洗" not in Lexicon.characters("xia*")
    # Every character keeps its default reading; a syllable no character usually has keeps all of its own.
    assert all(usual_readings()[char] & found for char, found in readings().items())
    assert Lexicon.characters("ng") == tuple(syllable_table()["ng"]) and "嗯" in Lexicon.characters("ng")


def test_ids_lists_the_allowed_characters_padded_to_the_longest_row():
    lexicon = Lexicon(HANZI)
    rows = torch.tensor([[lexicon.row("ni"), lexicon.row(literal_key("，")), PAD_ROW]])
    ids, real = lexicon.ids(rows)
    assert ids.shape == real.shape == (1, 3, 2)
    assert {HANZI.tokens[i] for i in ids[0, 0].tolist()} == {"你", "妮"} and real[0, 0].all()
    assert HANZI.tokens[int(ids[0, 1, 0])] == "，" and real[0, 1].tolist() == [True, False]
    assert ids[0, 2].tolist() == [PAD_ID, PAD_ID] and real[0, 2].tolist() == [True, False]


def test_for_vocab_gives_each_pinyin_token_its_characters_and_specials_none():
    ids, real = Lexicon(HANZI).for_vocab(PINYIN)
    assert ids.shape[0] == len(PINYIN)
    assert not real[: len(SPECIALS)].any()
    for token in ("ni", "hao", "wo"):
        index = PINYIN.ids[token]
        chars = {HANZI.tokens[i] for i in ids[index][real[index]].tolist()}
        assert chars == {c for c in HANZI.tokens if token in usual_readings().get(c, ())}
    punctuation = PINYIN.ids["，"]
    assert HANZI.tokens[int(ids[punctuation][real[punctuation]])] == "，"


def test_a_prefix_key_stands_for_the_characters_of_every_syllable_it_begins_in_order():
    chars = Lexicon.characters("zho*")
    expected = list(dict.fromkeys(Lexicon.characters("zhong") + Lexicon.characters("zhou")))
    assert list(chars) == expected and "中" in chars and "周" in chars
    assert "z" not in Lexicon.characters("z*") and "a" not in Lexicon.characters("a*")  # no Latin letter
    assert "在" in Lexicon.characters("z*") and "中" not in Lexicon.characters("z*")  # z* is not zh*
    assert "中" in Lexicon.characters("zh*") and "在" not in Lexicon.characters("zh*")


def test_a_toned_prefix_narrows_to_that_tone_and_an_impossible_tone_counts_as_toneless():
    assert "北" in Lexicon.characters("b*3") and "被" not in Lexicon.characters("b*3")
    assert set(Lexicon.characters("zho*5")) == set(Lexicon.characters("zho*"))


def test_a_fuzzy_key_is_the_union_of_its_variants_typed_variant_first():
    chars = Lexicon.characters("zi|zhi")
    assert list(chars) == list(dict.fromkeys(Lexicon.characters("zi") + Lexicon.characters("zhi")))
    assert chars.index("子") < chars.index("知")
    toned = Lexicon.characters("zi3|zhi3")
    assert "子" in toned and "只" in toned and "知" not in toned  # zhi1


def test_for_vocab_gives_prefix_tokens_the_characters_of_their_initials_syllables():
    hanzi = Vocab(list(SPECIALS) + list("中周在张北你"))
    pinyin = Vocab(list(SPECIALS) + ["zh*", "z*", "b*", "ni"])
    ids, real = Lexicon(hanzi).for_vocab(pinyin)

    def allowed(token):
        index = pinyin.ids[token]
        return {hanzi.tokens[i] for i in ids[index][real[index]].tolist()}

    assert allowed("zh*") == set("中周张") and allowed("z*") == {"在"} and allowed("b*") == {"北"}
    assert allowed("ni") == {"你"}


def test_corpus_punctuation_that_spells_key_syntax_is_a_literal_token():
    # '*' and '|' reach the pinyin vocabulary from corpus text; they are not an empty prefix or fuzzy key.
    for token in ("*", "|", "**", "a|*"):
        assert Lexicon.characters(token) == (token,)
        assert Lexicon(HANZI).syllable_of(token, token) == token
    vocab = Vocab(list(SPECIALS) + ["ni", "*", "|", "zho*"])
    table = Lexicon(HANZI).for_vocab(vocab)  # raised for '*' before
    assert len(table) > 0
    assert "中" in Lexicon.characters("zho*") and "中" in Lexicon.characters("zi|zhong")

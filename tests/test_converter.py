import pytest
import torch

from pinyin_hanzi.decoding.converter import CHECKPOINT_VARIABLE, SHIPPED_MODEL, Candidate, Converter, resolve_checkpoint
from pinyin_hanzi.decoding.settings import TypingOptions
from pinyin_hanzi.errors import CheckpointError, ConfigError, DataError, PinyinHanziError
from pinyin_hanzi.text.lexicon import Lexicon
from pinyin_hanzi.text.pinyin import readings
from pinyin_hanzi.text.typed_input import alternatives, fewest_syllables, key_syllables, parse_pieces

from conftest import UNTRAINED_HANZI, UNTRAINED_PINYIN, untrained_converter


@pytest.fixture(scope="module")
def shipped():
    """The shipped model, loaded once for this module's tests (they never change its settings)."""
    return Converter.from_pretrained()


def test_the_python_api_in_three_lines():
    converter = Converter.from_pretrained()
    assert converter.convert("wo men qu bei jing ba") == "我们去北京吧"
    found = converter.candidates("xian", n=5)
    assert len(found) == 5 and len({c.text for c in found}) == 5 and all(isinstance(c, Candidate) for c in found)
    assert [c.score for c in found] == sorted((c.score for c in found), reverse=True)
    assert all(c.syllables in (["xian"], ["xi", "an"]) and len(c.text) == len(c.syllables) for c in found)
    assert converter.convert(["ni hao", "xie xie"]) == ["你好", "谢谢"]
    assert converter.checkpoint == SHIPPED_MODEL and converter.beam == converter.config.decode.beam


def test_the_default_model_is_an_explicit_path_else_the_environment_variable_else_the_shipped_one(monkeypatch,
                                                                                                    tmp_path):
    monkeypatch.delenv(CHECKPOINT_VARIABLE, raising=False)
    assert resolve_checkpoint() == (SHIPPED_MODEL, "the shipped model")
    monkeypatch.setenv(CHECKPOINT_VARIABLE, str(tmp_path / "env.pt"))
    assert resolve_checkpoint()[0] == tmp_path / "env.pt" and CHECKPOINT_VARIABLE in resolve_checkpoint()[1]
    assert resolve_checkpoint(tmp_path / "mine.pt") == (tmp_path / "mine.pt", "checkpoint")


def test_constrained_output_has_one_valid_character_per_syllable():
    for seed in range(5):
        converter = untrained_converter(seed)
        tokens = ["ni", "hao", "，", "wo", "men", "bei", "jing", "ba", "1", "A", "。"]
        output = converter.convert_tokens([tokens])[0]
        assert len(output) == len(tokens)
        for token, char in zip(tokens, output):
            if token.isalpha() and token.islower():
                assert token in readings()[char], (token, char)
            else:
                assert char == token  # punctuation, digits, Latin pass through unchanged


def test_unconstrained_decoding_may_choose_anything_but_specials():
    converter = untrained_converter()
    outputs = converter.convert_tokens([["ni", "hao"] * 4], constrained=False)
    assert len(outputs[0]) == 8 and all(char in UNTRAINED_HANZI for char in outputs[0])


def test_no_candidate_in_vocabulary_falls_back_to_the_reading_table():
    converter = untrained_converter()
    output = converter.convert_tokens([["ni", "zhong", "€", "hao"]])[0]  # zhong, € never seen in training
    assert len(output) == 4 and output[2] == "€"
    assert "zhong" in readings()[output[1]]


def test_batching_and_order_do_not_change_results():
    converter = untrained_converter()
    inputs = [["ni", "hao"], [], ["wo", "men", "bei", "jing", "ba", "。"], ["ba"]] * 4
    one_by_one = [converter.convert_tokens([tokens])[0] for tokens in inputs]
    assert converter.convert_tokens(inputs, batch_size=2) == one_by_one
    assert converter.convert_tokens(inputs) == one_by_one  # 12 x c ids > v: all logits, then the candidates'
    assert one_by_one[1] == ""


def test_inputs_longer_than_the_model_are_decoded_in_pieces():
    converter = untrained_converter()
    tokens = ["wo", "men"] * 20  # 40 > max_positions=16
    output = converter.convert_tokens([tokens])[0]
    assert len(output) == 40
    assert all(("wo" if i % 2 == 0 else "men") in readings()[c] for i, c in enumerate(output))


def test_convert_lines_parses_typed_pinyin():
    converter = untrained_converter()
    output = converter.convert_lines(["nihao，wo3men2"])[0][0].text
    assert len(output) == 5 and output[2] == "，"


def test_convert_is_convert_lines_with_the_converters_beam():
    converter = untrained_converter(seed=2, beam=3)
    lines = ["ni hao wo men", "bei jing"]
    assert converter.convert(lines) == [c[0].text for c in converter.convert_lines(lines, beam=3)]
    assert converter.convert(lines[0]) == converter.convert(lines)[0]
    assert converter.candidates("ni hao", n=4) == converter.convert_lines(["ni hao"], beam=4, nbest=4)[0]


def test_the_converter_holds_one_decode_config_that_calls_replace_for_themselves_only():
    """Keywords of the constructor set the DecodeConfig's fields; a call's own arguments replace them for that
    call (dataclasses.replace) and leave the converter as it was; one object says how the call searches."""
    import dataclasses

    from pinyin_hanzi.decoding.settings import SearchSettings

    converter = untrained_converter(seed=2, beam=3, prefix_beam=7, prefixes=True, fuzzy=["z-zh"])
    kept = dataclasses.replace(converter.decode)
    assert (kept.beam, kept.prefix_beam, kept.prefixes, kept.fuzzy, converter.beam) == (3, 7, "on", ["z-zh"], 3)
    assert converter.search_settings() == SearchSettings(beam=3, prefix_beam=7, constrained=True, fusion=None)
    assert converter.search_settings(beam=1) == SearchSettings(beam=1, prefix_beam=1, constrained=True, fusion=None)
    assert converter.search_settings(beam=1, nbest=9).beam == 9 and converter.search_settings(beam=12).prefix_beam == 12
    assert converter.search_settings(constrained=False).constrained is False
    converter.convert_lines(["zi dao"], beam=1, nbest=2, constrained=False, prefixes=False, fuzzy=(),
                            shuangpin="microsoft")
    assert converter.decode == kept and converter.typing_options() == TypingOptions(True, frozenset({"z-zh"}))
    with pytest.raises(TypeError, match="unexpected keyword argument 'beem'"):  # as a misspelt keyword always is
        untrained_converter(beem=3)
    # every keyword is checked as the decode.* key of a config file is: type, range, rules
    weighted = untrained_converter(lm_weight=2).decode
    assert weighted.lm_weight == 2.0 and isinstance(weighted.lm_weight, float)
    for settings, fragment in (({"beam": 3.0}, "beam=3.0 has the wrong type"),
                               ({"clause_end": "yes"}, "clause_end='yes' is invalid"),
                               ({"prefixes": "maybe"}, "prefixes='maybe' is invalid"),
                               ({"word_contrast": 1.0}, "decode.word_contrast=1.0 is invalid: expected a number in [0, 1)")):
        _refused(lambda: untrained_converter(**settings), ConfigError, fragment)


def _refused(call, error_class, *fragments):
    """``call()`` raises ``error_class`` (one of the project's errors) in one line holding ``fragments``."""
    with pytest.raises(PinyinHanziError) as raised:
        call()
    message = str(raised.value)
    assert type(raised.value) is error_class and "\n" not in message, message
    assert all(fragment in message for fragment in fragments), message


@pytest.mark.parametrize("call, error_class, fragments", [
    (lambda c: c.convert(b"ni hao"), DataError, ["convert() takes a str or a list of str, got bytes"]),
    (lambda c: c.convert(bytearray(b"ni")), DataError, ["convert()", "got bytearray"]),
    (lambda c: c.convert(["ni hao", None]), DataError, ["convert()", "got a list whose item 1 is None"]),
    (lambda c: c.convert([["ni", "hao"]]), DataError, ["got a list whose item 0 is list"]),
    (lambda c: c.convert({"ni hao": 1}), DataError, ["convert()", "got dict"]),  # never the dict's keys
    (lambda c: c.convert({"ni hao"}), DataError, ["got set"]),
    (lambda c: c.convert(123), DataError, ["convert()", "got int"]),
    (lambda c: c.convert(None), DataError, ["got None"]),
    (lambda c: c.convert(line for line in ["ni"]), DataError, ["got generator"]),
    (lambda c: c.convert("ni\ud800hao"), DataError, ["lone surrogate U+D800 (character 3)"]),
    (lambda c: c.convert(["ni", "hao\udcff"]), DataError, ["item 1 holds a lone surrogate U+DCFF"]),
    (lambda c: c.candidates(None), DataError, ["candidates() takes a str, got None"]),
    (lambda c: c.candidates(["ni"]), DataError, ["candidates() takes a str, got list"]),
    (lambda c: c.candidates("ni", n="3"), ConfigError, ["nbest='3'"]),
    (lambda c: c.convert_lines([1, 2]), DataError, ["convert_lines()", "whose item 0 is int"]),
    (lambda c: c.convert_lines("ni hao"), DataError, ["convert_lines() takes a list of str, got a str"]),
    (lambda c: c.convert_lines(["ni"], constrained="no"), ConfigError, ["constrained='no'", "True, False or None"]),
    (lambda c: c.convert_lines(["ni"], prefixes=1), ConfigError, ["prefixes=1"]),
    (lambda c: c.convert_lines(["ni"], chinese_punctuation=None), ConfigError, ["chinese_punctuation=None"]),
    (lambda c: c.convert_lines(["ni"], fuzzy=3), DataError, ["fuzzy=3"]),
    (lambda c: c.convert_lines(["ni"], fuzzy=["z-zh", None]), DataError, ["fuzzy=('z-zh', None)"]),
    (lambda c: c.convert_lines(["ni"], shuangpin=3), DataError, ["shuangpin=3"]),
    (lambda c: c.convert_tokens("ni hao"), DataError, ["convert_tokens()", "got str"]),  # never its letters
    (lambda c: c.convert_tokens(["ni hao"]), DataError, ["whose item 0 is str"]),
    (lambda c: c.convert_tokens([["ni", 3]]), DataError, ["item 0 holds int"]),
    (lambda c: c.convert_tokens([["ni"]], constrained="yes"), ConfigError, ["constrained='yes'"]),
    (lambda c: c.search([[]]), DataError, ["search(): token list 0 is empty"]),
    (lambda c: c.search([["ni"]], [["ni", "hao"]]), DataError, ["key list 0 has 2 keys for 1 tokens"]),
    (lambda c: c.search([["ni"]], [["ni"], ["hao"]]), DataError, ["2 key lists for 1 token lists"]),
    (lambda c: c.search([["ni"]], beam=0), ConfigError, ["beam=0"]),
])
def test_arguments_of_the_wrong_type_are_refused_in_one_line_naming_them(call, error_class, fragments):
    _refused(lambda: call(untrained_converter()), error_class, *fragments)


def test_arguments_of_the_right_type_in_any_sequence_still_convert():
    converter = untrained_converter()
    as_list = converter.convert(["ni hao", "wo men"])
    assert converter.convert(("ni hao", "wo men")) == as_list and len(as_list) == 2
    assert converter.convert([]) == [] and converter.convert_lines(()) == [] and converter.search([]) == []
    assert converter.convert_lines(["ni"], fuzzy=(name for name in ["z-zh"])) == converter.convert_lines(["ni"])
    assert converter.convert_tokens((("ni", "hao"),)) == converter.convert_tokens([["ni", "hao"]])


def test_loading_options_and_devices_are_checked_before_the_checkpoint_is_read(tmp_path):
    missing = tmp_path / "not-read.pt"  # never opened: each argument fails first
    for options, error_class, fragments in (
            ({"device": "nonsense"}, ConfigError, ["device='nonsense' is not a device: use cpu, cuda, cuda:N, mps"]),
            ({"device": 3}, ConfigError, ["device=3 is not a device"]),
            ({"device": "meta"}, ConfigError, ["device='meta' cannot convert"]),
            ({"device": "cuda:99"}, ConfigError, ["device='cuda:99', but this machine has"]),
            ({"lm_weight": "1"}, ConfigError, ["lm_weight='1'"]),
            ({"word_weight": float("nan")}, ConfigError, ["word_weight=nan"]),
            ({"log": 3}, ConfigError, ["from_checkpoint(): log=3"])):
        _refused(lambda: Converter.from_checkpoint(missing, **options), error_class, *fragments)
        _refused(lambda: Converter.from_pretrained(**options), error_class, *fragments)
    if not torch.cuda.is_available():
        _refused(lambda: Converter.from_checkpoint(missing, device="cuda"), ConfigError,
                 "device='cuda', but this machine has no CUDA device")
    _refused(lambda: Converter.from_checkpoint(123), CheckpointError, "from_checkpoint() takes a checkpoint path",
             "got int")
    _refused(lambda: Converter.from_checkpoint(bytes(missing)), CheckpointError, "got bytes")
    _refused(lambda: untrained_converter(device="nonsense"), ConfigError, "device='nonsense' is not a device")
    assert untrained_converter(device=torch.device("cpu")).device == torch.device("cpu")


def test_greedy_converts_typed_lines_as_token_lists():
    converter = untrained_converter(seed=4, clause_end=False)
    assert converter.convert_lines(["ni hao wo men"], beam=1)[0][0].text == \
           converter.convert_tokens([["ni", "hao", "wo", "men"]])[0]


def test_nbest_is_ordered_unique_and_constrained():
    converter = untrained_converter(seed=5)
    candidates = converter.convert_lines(["ni hao bei jing"], beam=8, nbest=8)[0]
    assert len(candidates) == 8  # 2 x 2 x 2 x 2 = 16 possible for "ni hao bei jing" alone
    scores = [c.score for c in candidates]
    assert scores == sorted(scores, reverse=True)
    assert len({c.text for c in candidates}) == 8
    for candidate in candidates:
        assert len(candidate.text) == len(candidate.syllables)
        for syllable, char in zip(candidate.syllables, candidate.text):
            assert syllable in readings().get(char, ()) or (len(syllable) == 1 and char == syllable)


def test_tones_constrain_the_output():
    for seed in range(3):
        converter = untrained_converter(seed)
        assert converter.convert_lines(["ni3"], beam=1)[0][0].text == "你"  # the only ni3 in the vocabulary
        assert converter.convert_lines(["nī"], beam=1)[0][0].text == "妮"  # tone marks too
        assert converter.convert_lines(["hao3"], beam=1)[0][0].text == "好"  # 号 is hao2/hao4 only


def test_ambiguous_segmentations_are_decoded_and_ranked_by_score():
    converter = untrained_converter(seed=6)
    candidates = converter.convert_lines(["bajing"], nbest=10, beam=10)[0]  # ba'jing or ... only one split here
    assert {len(c.text) for c in candidates} == {2}
    candidates = converter.convert_lines(["xian"], nbest=10, beam=10)[0]  # xian (1 syllable) or xi'an (2)
    texts = {c.text for c in candidates}
    assert {len(text) for text in texts} == {1, 2}, texts
    assert candidates[0].score == max(c.score for c in candidates)
    assert {tuple(c.syllables) for c in candidates} == {("xian",), ("xi", "an")}
    forced = converter.convert_lines(["xi'an"], nbest=10, beam=10)[0]
    assert all(len(c.text) == 2 for c in forced)  # an apostrophe always forces a boundary


def test_pass_through_keeps_punctuation_digits_latin_and_emoji_in_place():
    converter = untrained_converter(seed=7)
    output = converter.convert_lines(["wo ai Python, 2024 nian!😀 ni hao。"], beam=1)[0][0].text
    assert output[2:9] == "Python,"
    assert output[9:13] == "2024" and output[14:16] == "!😀" and output[-1] == "。"
    assert len(output) == 19
    chinese = converter.convert_lines(["ni hao, wo men. 1.5 OK!"], beam=1, chinese_punctuation=True)[0][0].text
    assert chinese[2] == "，" and chinese[5] == "。" and "1.5" in chinese and chinese.endswith("OK!")


def test_ten_thousand_syllables_convert_in_windows():
    converter = untrained_converter(seed=8)
    output = converter.convert_lines(["wo men " * 5000], beam=1)[0][0].text
    assert len(output) == 10000
    assert all(c in "我们门" for c in output)
    run_together = converter.convert_lines(["nihao" * 3000], beam=1)[0][0].text  # no spaces at all
    assert len(run_together) == 6000


def test_fallback_prefers_a_basic_block_character_and_is_reported():
    candidate = untrained_converter().convert_lines(["zhong"])[0][0]
    assert 0x4E00 <= ord(candidate.text) <= 0x9FFF and "zhong" in readings()[candidate.text]
    assert candidate.notes and "zhong" in candidate.notes[0]


def _all_readings_ranked(converter, line, beam, nbest):
    """The n-best of a one-chunk line the slow way: every reading decoded, ranked by model + prior."""
    options = alternatives(converter.planner.chunks(parse_pieces(line, 4, fewest_syllables))[0], 4)
    fewest = min(len(reading) for reading in options)
    readings_ = [([token for token, _ in reading], [key for _, key in reading]) for reading in options]
    best: dict[str, float] = {}
    settings = converter.search_settings(beam=beam, nbest=nbest)
    for (tokens, _), candidates in zip(readings_, converter._decode(readings_, settings, 256)):
        for candidate in candidates:
            score = candidate.score - converter.decode.split_penalty * (len(tokens) - fewest)
            best[candidate.text] = max(score, best.get(candidate.text, float("-inf")))
    return sorted(best.items(), key=lambda item: -item[1])[:nbest]


def test_skipping_readings_that_cannot_win_keeps_the_n_best():
    # convert_lines decodes the most probable reading first and skips readings whose prior alone is below
    # the n-best found: the result must equal decoding every reading.
    pinyin = UNTRAINED_PINYIN + ["xi", "an", "xian", "zai", "fang", "gan", "fan"]
    hanzi = UNTRAINED_HANZI + list("西希安按先现在再方放感干反饭")
    for seed, penalty in ((0, 0.0), (1, 0.3), (2, 1.0), (3, 3.0)):
        # (without the virtual clause end, which _all_readings_ranked does not add)
        converter = untrained_converter(seed, pinyin, hanzi, split_penalty=penalty, clause_end=False)
        for line in ("xian", "xianzai", "fangan xian", "ni hao xian zai"):
            for beam, nbest in ((1, 1), (4, 1), (4, 3)):
                found = [(c.text, c.score) for c in converter.convert_lines([line], beam=beam, nbest=nbest)[0]]
                expected = _all_readings_ranked(converter, line, beam, nbest)
                assert [text for text, _ in found] == [text for text, _ in expected], (line, beam, nbest)
                assert all(abs(a - b) < 1e-4 for (_, a), (_, b) in zip(found, expected))


def _recording(converter, seen):
    decode = converter._decode
    converter._decode = lambda readings, *args, **options: seen.extend(readings) or decode(readings, *args, **options)
    return converter


def test_a_line_without_final_punctuation_is_decoded_as_a_whole_clause():
    """Training clauses end with their punctuation: typed input without it is decoded with a virtual 。 at
    the end (so that a final ba can be 吧), which never reaches the output and costs no score."""
    seen = []
    converter = _recording(untrained_converter(3), seen)
    (best, *_), = converter.convert_lines(["wo men bei jing ba"], beam=3, nbest=3)
    assert seen and all(tokens[-1] == "。" and keys[-1] == "=。" for tokens, keys in seen)
    assert len(best.text) == 5 and best.text[-1] in "吧八" and best.syllables == ["wo", "men", "bei", "jing", "ba"]
    forced = converter.convert_tokens([["wo", "men", "bei", "jing", "ba", "。"]], beam=3)[0]
    assert best.text == forced[:-1]  # the same as typing the 。 and cutting it off
    seen.clear()
    assert len(converter.convert_lines(["ni hao，wo men"])[0][0].text) == 5 and seen[-1][0][-1] == "。"
    seen.clear()
    converter.convert_lines(["ni hao。"])  # typed punctuation: nothing added
    assert ["ni", "hao", "。"] in [tokens for tokens, _ in seen]
    assert all(tokens[-1] == "。" and tokens.count("。") == 1 for tokens, _ in seen)
    plain = _recording(untrained_converter(3, clause_end=False), seen)
    seen.clear()
    plain.convert_lines(["wo men bei jing ba"])
    assert ["wo", "men", "bei", "jing", "ba"] in [tokens for tokens, _ in seen]
    assert all("。" not in tokens for tokens, _ in seen)


def test_with_an_ngram_model_readings_far_below_the_best_prior_are_not_decoded():
    from pinyin_hanzi.lm.char_ngram import CharNgramLM

    pinyin, hanzi = UNTRAINED_PINYIN + ["xi", "an", "xian"], UNTRAINED_HANZI + list("西希安按先现")
    plain = untrained_converter(0, pinyin, hanzi)
    lm = CharNgramLM.count([plain.hanzi_vocab.encode(s) for s in ["西安", "先"]], len(plain.hanzi_vocab), 2)
    lengths = {}
    for name, options in (("near", dict(lm_weight=1.0, reading_margin=8.0)),  # xi'an is 3 below xian: decoded
                          ("far", dict(lm_weight=1.0, reading_margin=2.0)),  # 3 > 2: not decoded
                          ("no n-gram model", dict(lm_weight=0.0, reading_margin=2.0))):  # the margin does not apply
        converter = untrained_converter(0, pinyin, hanzi, split_penalty=3.0, char_lm=lm, **options)
        candidates = converter.convert_lines(["xian"], nbest=10, beam=10)[0]
        lengths[name] = {len(c.syllables) for c in candidates}
    assert lengths == {"near": {1, 2}, "far": {1}, "no n-gram model": {1, 2}}


def _each_character_has_the_syllable_it_was_read_as(candidate):
    assert len(candidate.read_as) == len(candidate.text) == len(candidate.syllables)
    for char, syllable in zip(candidate.text, candidate.read_as):
        assert char in Lexicon.characters(syllable), (candidate, char, syllable)


def test_prefixes_are_off_for_a_model_trained_without_abbreviations_and_on_for_one_trained_with_them(shipped):
    plain = untrained_converter()
    assert not plain.trained_with_prefixes and plain.typing_options().prefixes is False
    assert plain.convert_lines(["ni j"])[0][0].text.endswith("j")  # j passes through
    assert shipped.trained_with_prefixes and shipped.typing_options().prefixes is True  # it learnt abbreviations
    assert shipped.convert_lines(["bei j"])[0][0].text == "北京"
    assert shipped.convert_lines(["bei j"], prefixes=False)[0][0].text.endswith("j")
    abbreviations = untrained_converter(pinyin=UNTRAINED_PINYIN + ["b*", "j*"])
    assert abbreviations.trained_with_prefixes and abbreviations.typing_options().prefixes is True
    turned_off = untrained_converter(pinyin=UNTRAINED_PINYIN + ["b*", "j*"], prefixes=False)
    assert turned_off.typing_options().prefixes is False
    assert abbreviations.typing_options(prefixes="off").prefixes is False  # per call, as decode.prefixes names it
    assert plain.typing_options(prefixes="auto").prefixes is False and plain.typing_options(prefixes="on").prefixes
    best = abbreviations.convert_lines(["b j"], beam=1)[0][0]
    assert best.syllables == ["b*", "j*"] and best.text in {"北京", "八京", "吧京", "北经", "八经", "吧经"}
    _each_character_has_the_syllable_it_was_read_as(best)


def test_a_reading_with_abbreviations_is_searched_with_the_wider_prefix_beam():
    converter = untrained_converter(pinyin=UNTRAINED_PINYIN + ["b*", "j*"], prefix_beam=7)
    searched = []
    search = converter._search_rows

    def recording(token_lists, rows, beam, settings):
        searched.append((beam, [" ".join(tokens) for tokens in token_lists]))
        return search(token_lists, rows, beam, settings)

    converter._search_rows = recording
    converter.convert_lines(["b j", "ni hao", "wo men"], beam=3)
    assert sorted(searched) == [(3, ["ni hao 。", "wo men 。"]), (7, ["b* j* 。"])]  # one search per beam size
    for beam, expected in ((1, {1}), (12, {12})):  # greedy stays greedy; a wider beam is never narrowed
        searched.clear()
        converter.convert_lines(["b j", "ni hao"], beam=beam)
        assert {used for used, _ in searched} == expected
    with pytest.raises(ConfigError, match="prefix_beam"):
        untrained_converter(prefix_beam=0)


def test_with_prefixes_on_the_constraint_alone_reads_abbreviations_with_the_shipped_model(shipped):
    candidates = shipped.convert_lines(["bei j"], nbest=3, prefixes=True)[0]
    assert candidates[0].text == "北京" and candidates[0].read_as == ["bei", "jing"]
    for candidate in candidates:  # each candidate carries its own reading
        assert candidate.syllables == ["bei", "j*"] and candidate.read_as[1] in key_syllables("j*")
        _each_character_has_the_syllable_it_was_read_as(candidate)
    assert shipped.convert_lines(["zhongg"], prefixes=True)[0][0].text.startswith("中")
    # n and m typed alone are abbreviations too (你们, not the interjections 嗯 呒), ng is 嗯
    assert shipped.convert("wo m yao n gao su wo m") == "我们要你告诉我们"
    assert shipped.convert("ng") == "嗯"
    assert shipped.convert("n ， wo zhi dao le 。") == "嗯，我知道了。"  # a clause of its own: 嗯, as pypinyin types it


def test_every_character_is_read_by_a_usual_reading_so_woxiangquxian_is_no_longer_qu_xi(shipped_converter):
    """洗 read xian (a surname) came first: the n-gram model scored it as the 洗 of 去洗澡. Now no candidate reads
    a character by a reading text practically never has, and 西安 is among the 20 best (it was not)."""
    from pinyin_hanzi.text.pinyin import usual_readings

    found = shipped_converter.candidates("woxiangquxian", n=20)
    texts = [candidate.text for candidate in found]
    assert texts[0] != "我想去洗" and "我想去西安" in texts
    for candidate in found + shipped_converter.candidates("ta shi ge hao ren , wo men qu xi zao", n=5):
        assert all(syllable in usual_readings()[char] for char, syllable in zip(candidate.text, candidate.read_as)
                   if char in usual_readings()), candidate


def test_a_held_down_key_costs_no_search_and_real_abbreviations_still_convert(shipped_converter):
    """More than LONGEST_ABBREVIATION abbreviations in a row pass through as typed without the model (20,000
    x took 106 s when each was searched); wxqbj, bjdxdxs and a clause of initials are still abbreviations."""
    import time

    for mashed in ("x" * 20_000, " ".join("x" * 20_000), "ni hao " + "jjjjjjjjjj" * 2_000):
        started = time.perf_counter()
        output = shipped_converter.convert(mashed)
        assert time.perf_counter() - started < 10  # loosely: a machine under load; about 0.3 s at most unloaded
        assert output.endswith(mashed.replace(" ", "")[-20_000:])
    assert shipped_converter.convert("wxqbj") == "我想去北京"
    for abbreviation in ("bjdxdxs", "zg", "wo xiang q b j", "h" * 8):  # up to LONGEST_ABBREVIATION: see test_typed_input
        output = shipped_converter.convert(abbreviation)
        letters = [letter for letter in abbreviation if letter != " "]
        if " " in abbreviation:  # full syllables typed among the initials
            letters = ["wo", "xiang", "q", "b", "j"]
        assert len(output) == len(letters) and all(
            any(syllable.startswith(letter) for syllable in readings()[char]) for char, letter in zip(output, letters))


def test_a_lone_vowel_is_its_syllable_or_its_abbreviation_at_the_same_prior_and_the_model_chooses(shipped):
    # e alone reads as the syllable e or as the abbreviation e*. The syllable model skips prefix tokens, so
    # e* would cost nothing where e costs its probability; e* is scored as the syllable it was typed as,
    # less the abbreviation penalty (啊 is always typed a, 爱 only when abbreviated).
    (chunk,) = shipped.planner.chunks(parse_pieces("e", 4, prefixes=True))
    readings_ = shipped.planner.readings(chunk, 4, fused=False)
    assert [tokens for tokens, _, _ in readings_] == [["e"], ["e*"]]
    assert shipped.planner.syllable_lm.log_prob(["e*"]) > shipped.planner.syllable_lm.log_prob(["e"])
    assert shipped.decode.abbreviation_penalty > 0
    assert readings_[1][2] == pytest.approx(readings_[0][2] - shipped.decode.abbreviation_penalty)
    # other ambiguous syllables in the line (qie: qi'e, hao: ha'o) do not crowd the abbreviation out
    assert shipped.convert("e qie ta hen hao") == "而且他很好"
    assert shipped.convert("wo men a quan di hui jia") == "我们安全地回家"
    # and full pinyin keeps its interjections and particles
    assert [shipped.convert(line) for line in ("ni hao a", "wo e le", "o , wo zhi dao le")] == \
        ["你好啊", "我饿了", "哦,我知道了"]


def test_fuzzy_pairs_widen_what_a_syllable_may_become(shipped):
    plain = shipped.convert_lines(["zi dao"])[0][0]
    assert plain.text[0] in Lexicon.characters("zi") and plain.text[0] not in Lexicon.characters("zhi")
    fuzzy = shipped.convert_lines(["zi dao"], fuzzy={"z-zh"})[0][0]
    assert fuzzy.text[0] in Lexicon.characters("zhi") and fuzzy.read_as == ["zhi", "dao"]
    assert fuzzy.syllables == ["zi", "dao"]  # the model sees what was typed
    with pytest.raises(DataError, match="unknown fuzzy pinyin pair 'q-x'"):
        shipped.convert_lines(["zi dao"], fuzzy={"q-x"})


def test_shuangpin_reads_key_pairs_of_the_layout(shipped):
    assert shipped.convert_lines(["nihk"], shuangpin="microsoft")[0][0].text == "你好"
    assert shipped.convert_lines(["nihk"])[0][0].text != "你好"  # as full pinyin: n i h k pass through
    with pytest.raises(DataError, match="unknown shuangpin layout"):
        Converter(shipped.model, shipped.pinyin_vocab, shipped.hanzi_vocab, shuangpin="dvorak")


def test_the_checkpoints_decode_settings_choose_the_typing_options(shipped, tmp_path):
    assert shipped.typing_options() == TypingOptions(prefixes=True)  # a checkpoint older than fuzzy and shuangpin
    state = torch.load(SHIPPED_MODEL, weights_only=True)
    state["config"]["decode"].update(prefixes="on", fuzzy=["z-zh", "an-ang"], shuangpin="microsoft")
    torch.save(state, tmp_path / "ime.pt")
    converter = Converter.from_checkpoint(tmp_path / "ime.pt")
    assert converter.typing_options() == TypingOptions(True, frozenset({"z-zh", "an-ang"}), "microsoft")
    assert converter.convert("nihk") == "你好"
    assert converter.convert_lines(["ni hao"], shuangpin="", prefixes=False)[0][0].text == "你好"  # per call


# ---- What reaches the model: pass-through text far from pinyin never does; line ends; a o e


def _counting_search(converter, monkeypatch):
    """Record the token lists the model is asked to decode."""
    seen = []
    search = converter._search_rows

    def counted(token_lists, *args, **kwargs):
        seen.extend(list(tokens) for tokens in token_lists)
        return search(token_lists, *args, **kwargs)

    monkeypatch.setattr(converter, "_search_rows", counted)
    return seen


def test_text_with_nothing_to_convert_never_reaches_the_model(monkeypatch):
    converter = untrained_converter(seed=3)
    seen = _counting_search(converter, monkeypatch)
    lines = ["x" * 5000, "，。！ 2024 😀 世界", "", "xyz Python"]
    assert converter.convert(lines) == ["x" * 5000, "，。！2024😀世界", "", "xyzPython"]
    assert seen == []


def test_the_model_sees_at_most_literal_context_characters_around_pinyin(monkeypatch):
    from pinyin_hanzi.decoding.planning import LITERAL_CONTEXT

    converter = untrained_converter(seed=4)
    seen = _counting_search(converter, monkeypatch)
    far = "x" * (10 * LITERAL_CONTEXT)
    output = converter.convert(f"{far} ni hao {far} wo men {far}")
    assert output[: len(far)] == far and output[len(far) + 2 : 2 * len(far) + 2] == far
    assert output.endswith(far) and len(output) == 3 * len(far) + 4
    decoded = sum(len(tokens) for tokens in seen)
    assert decoded <= 4 + 4 * LITERAL_CONTEXT + 2  # 4 syllables, context each side, clause ends
    assert all(set(tokens) <= {"x", "ni", "hao", "wo", "men", "。"} for tokens in seen)
    near = "x" * LITERAL_CONTEXT  # pass-through between pinyin within reach of both sides is one decoded run
    seen.clear()
    converter.convert(f"ni {near}{near} hao")
    assert sum(len(tokens) - (tokens[-1] == "。") for tokens in seen) == 2 + 2 * LITERAL_CONTEXT


def test_n_best_is_kept_around_copied_pass_through_text(monkeypatch):
    monkeypatch.setattr("pinyin_hanzi.decoding.planning.LITERAL_CONTEXT", 4)  # the decoded run fits this model's window
    converter = untrained_converter(seed=5)
    tail = "x" * 200
    candidates = converter.candidates(f"{tail} ni hao {tail}", n=4)
    assert len(candidates) == 4 and len({c.text for c in candidates}) == 4
    for candidate in candidates:
        assert candidate.text.startswith(tail) and candidate.text.endswith(tail)
        assert len(candidate.read_as) == len(candidate.text) == len(candidate.syllables)


def test_line_ends_inside_a_line_give_as_many_output_lines():
    converter = untrained_converter(seed=6)
    for text in ("ni hao\rwo men", "ni hao\r\nwo men", "ni hao\u2028wo men", "ni hao\x85wo men", "ni hao\nwo men\n"):
        [best] = converter.convert_lines([text])[0][:1]
        first, second = best.text.split("\n")
        assert len(first) == len(second) == 2 and best.read_as[2] == "\n"
    assert converter.convert(["ni\r\rhao", ""]) == [converter.convert("ni") + "\n\n" + converter.convert("hao"), ""]


def test_typed_single_letter_syllables_are_characters_never_latin_letters():
    pinyin = ["a", "o", "e", "n", "m", "ni"]
    hanzi = ["a", "o", "e", "n", "m", "A", "O", "啊", "阿", "哦", "喔", "噢", "饿", "鹅", "嗯", "呒", "你"]
    for seed in range(4):  # whatever an untrained model prefers, the constraint holds
        converter = untrained_converter(seed=seed, pinyin=pinyin, hanzi=hanzi)
        for typed in ("a o e", "a1 o1 e2", "ō é", "n m", "o1", "ni a"):
            for candidate in converter.candidates(typed, n=5):
                assert not any(char.isascii() for char in candidate.text), (typed, candidate.text)
                for char, syllable in zip(candidate.text, candidate.read_as):
                    assert char in Lexicon.characters(syllable), (typed, candidate)
        assert converter.convert("o1") in ("喔", "噢")  # the tone is kept
        # Corpus tokens are different: the o of Python may stay a Latin letter.
        assert set(converter.convert_tokens([["o"]] * 8)) <= {"o", "哦", "喔", "噢"}


def test_fp32_bf16_and_int8_conversion_agree_and_an_unknown_precision_is_refused(shipped):
    other = Converter.from_pretrained(precision="fp32" if shipped.decoder.bf16 else "bf16")
    int8 = Converter.from_pretrained(precision="int8")
    assert other.decoder.bf16 != shipped.decoder.bf16 and int8.decoder.int8 and not other.decoder.int8
    lines = ["wo xiang qu bei jing kan kan", "jin tian tian qi hen hao", "ta shuo ta ming tian bu lai le",
             "zhe ge wen ti hen nan jie jue", "women yiqi qu chifan ba", "wo xiang q b j", "ni hao"]
    expected = [found[0].text for found in shipped.convert_lines(lines)]
    assert [found[0].text for found in other.convert_lines(lines)] == expected
    # int8 weights serve a single sentence's few rows: one line at a time
    assert [int8.convert_lines([line])[0][0].text for line in lines] == expected
    with pytest.raises(ConfigError, match="precision='fp16' is invalid: expected 'auto', 'fp32', 'bf16' or 'int8'"):
        Converter.from_pretrained(precision="fp16")


def test_the_best_conversion_is_the_n_best_lists_first_whatever_n():
    # With nbest 1 only each reading's best hypothesis is turned into text: the same best as a longer list's.
    converter = untrained_converter(4)
    lines = ["xian", "wo men qu bei jing ba", "ni hao, shi jie!", "nihaoma", "zhong guo ren min", "a e o"]
    for options in ({"beam": 4}, {"beam": 4, "prefixes": True}, {"beam": 6}):  # n-best lists widen beams below n
        best = converter.convert_lines(lines, **options)
        listed = converter.convert_lines(lines, nbest=4, **options)
        for (one,), (first, *_) in zip(best, listed):
            assert (one.text, one.score, one.read_as) == (first.text, first.score, first.read_as)


def test_several_batches_are_searched_side_by_side_with_the_results_of_one_thread(monkeypatch):
    import threading

    converter = untrained_converter(seed=5)
    lines = ["ni hao", "wo men qu bei jing ba", "xian", "zhong guo", "ni", "ta men lai le ma", "hao de"]
    search, seen = converter._search_rows, []

    def recording(*args):
        seen.append((threading.get_ident(), torch.get_num_threads()))
        return search(*args)

    monkeypatch.setattr(converter, "_search_rows", recording)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        alone = converter.convert_lines(lines, batch_size=2, nbest=2)
        assert len({ident for ident, _ in seen}) == 1
        seen.clear()
        torch.set_num_threads(2)
        side_by_side = converter.convert_lines(lines, batch_size=2, nbest=2)
        assert torch.get_num_threads() == 2  # the caller's count is its own
    finally:
        torch.set_num_threads(threads)
    assert side_by_side == alone
    # the first pass's 4 batches on (up to) 2 pool threads of one torch thread each (a pool thread that starts
    # late may find the others' batches all taken); a pass of one batch (the alternative reading of xian, a
    # few lines) runs in the caller's thread, on FEW_LINES_THREADS
    from pinyin_hanzi.decoding.threads import FEW_LINES_THREADS

    workers = {ident for ident, _ in seen} - {threading.get_ident()}
    assert 1 <= len(workers) <= 2 and all(count == 1 for ident, count in seen if ident in workers)
    assert sum(ident in workers for ident, _ in seen) == 4
    assert [count for ident, count in seen if ident not in workers] == [FEW_LINES_THREADS] * (len(seen) - 4)


def test_a_search_of_a_few_lines_runs_on_a_few_threads_and_gives_the_callers_count_back(monkeypatch):
    from pinyin_hanzi.decoding.threads import FEW_LINES, FEW_LINES_THREADS

    converter = untrained_converter(seed=5)
    search, seen = converter._search_rows, []

    def recording(token_lists, *args):
        seen.append((len(token_lists), torch.get_num_threads()))
        return search(token_lists, *args)

    monkeypatch.setattr(converter, "_search_rows", recording)
    threads, many = torch.get_num_threads(), 2 * FEW_LINES_THREADS
    lines = ["ni hao", "wo men qu bei jing ba", "zhong guo", "ta men lai le ma", "hao de"]
    try:
        torch.set_num_threads(many)
        one = converter.convert_lines(["ni hao"])
        assert torch.get_num_threads() == many
        batch = converter.convert_lines(lines, batch_size=len(lines))
        assert torch.get_num_threads() == many
        torch.set_num_threads(1)
        texts = [[c.text for c in found] for found in one + batch]
        assert [[c.text for c in found] for found in converter.convert_lines(["ni hao", *lines])] == texts
    finally:
        torch.set_num_threads(threads)
    assert len(lines) > FEW_LINES and seen[0] == (1, FEW_LINES_THREADS) and seen[1] == (len(lines), many)


def test_loading_pauses_the_collector_and_leaves_it_as_it_was(monkeypatch, trained):
    import gc

    from pinyin_hanzi.decoding import converter as converter_module

    _, _, best = trained
    load, seen = converter_module.load_for_inference, []
    monkeypatch.setattr(converter_module, "load_for_inference", lambda path: seen.append(gc.isenabled()) or load(path))
    assert gc.isenabled()
    Converter.from_checkpoint(best)
    assert seen == [False] and gc.isenabled()

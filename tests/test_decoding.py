import torch

from pinyin_hanzi.config import ModelConfig
from pinyin_hanzi.vocab import Vocab
from pinyin_hanzi.decoding import Converter
from pinyin_hanzi.model import StepDecoder, Transformer
from pinyin_hanzi.pinyin import readings
from pinyin_hanzi.typed_input import alternatives, fewest_syllables, parse_pieces

HANZI = list("你好妮号我们门北京经吧八，。1") + ["A"]
PINYIN = ["ni", "hao", "wo", "men", "bei", "jing", "ba", "，", "。", "1", "A"]


def _untrained_converter(seed=0, pinyin=PINYIN, hanzi=HANZI, **options) -> Converter:
    """An untrained model: whatever it prefers, the constraint must hold."""
    torch.manual_seed(seed)
    config = ModelConfig(d_model=32, n_heads=4, n_encoder_layers=1, n_decoder_layers=1, d_ff=64, dropout=0.0,
                         max_positions=16)
    pinyin_vocab = Vocab(["<pad>", "<s>", "</s>", "<unk>"] + list(pinyin))
    hanzi_vocab = Vocab(["<pad>", "<s>", "</s>", "<unk>"] + list(hanzi))
    model = Transformer(config, source_vocab_size=len(pinyin_vocab), target_vocab_size=len(hanzi_vocab))
    return Converter(model, pinyin_vocab, hanzi_vocab, **options)


def test_constrained_output_has_one_valid_character_per_syllable():
    for seed in range(5):
        converter = _untrained_converter(seed)
        tokens = ["ni", "hao", "，", "wo", "men", "bei", "jing", "ba", "1", "A", "。"]
        output = converter.convert_tokens([tokens])[0]
        assert len(output) == len(tokens)
        for token, char in zip(tokens, output):
            if token.isalpha() and token.islower():
                assert token in readings()[char], (token, char)
            else:
                assert char == token  # punctuation, digits, Latin pass through unchanged


def test_unconstrained_decoding_may_choose_anything_but_specials():
    converter = _untrained_converter()
    outputs = converter.convert_tokens([["ni", "hao"] * 4], constrained=False)
    assert len(outputs[0]) == 8 and all(char in HANZI for char in outputs[0])


def test_no_candidate_in_vocabulary_falls_back_to_the_reading_table():
    converter = _untrained_converter()
    output = converter.convert_tokens([["ni", "zhong", "€", "hao"]])[0]  # zhong, € never seen in training
    assert len(output) == 4 and output[2] == "€"
    assert "zhong" in readings()[output[1]]


def test_batching_and_order_do_not_change_results():
    converter = _untrained_converter()
    inputs = [["ni", "hao"], [], ["wo", "men", "bei", "jing", "ba", "。"], ["ba"]] * 4
    one_by_one = [converter.convert_tokens([tokens])[0] for tokens in inputs]
    assert converter.convert_tokens(inputs, batch_size=2) == one_by_one
    assert converter.convert_tokens(inputs) == one_by_one  # 12 x c ids > v: all logits, then the candidates'
    assert one_by_one[1] == ""


def test_inputs_longer_than_the_model_are_decoded_in_pieces():
    converter = _untrained_converter()
    tokens = ["wo", "men"] * 20  # 40 > max_positions=16
    output = converter.convert_tokens([tokens])[0]
    assert len(output) == 40
    assert all(("wo" if i % 2 == 0 else "men") in readings()[c] for i, c in enumerate(output))


def test_convert_parses_typed_pinyin():
    converter = _untrained_converter()
    output = converter.convert(["nihao，wo3men2"])[0][0].text
    assert len(output) == 5 and output[2] == "，"


def test_single_letter_syllables_may_also_be_latin_letters():
    converter = _untrained_converter()
    assert "o" in converter.candidates.candidates("o") and "哦" in converter.candidates.candidates("o")
    assert "ni" not in converter.candidates.candidates("ni")


def _teacher_forced_score(converter, tokens, chars) -> float:
    """log P(chars | tokens) under the constrained softmax, computed the slow way (full forward pass)."""
    source = torch.tensor([converter.pinyin_vocab.encode(tokens)])
    target = torch.tensor([converter.hanzi_vocab.encode(chars)])
    with torch.no_grad():
        logits = converter.model(source, target)[0]
    total = 0.0
    for position, (token, char) in enumerate(zip(tokens, chars)):
        row = converter.candidates.row(token)
        allowed = converter.candidates.table()[row]
        log_probs = logits[position].masked_fill(~allowed, float("-inf")).log_softmax(-1)
        total += float(log_probs[converter.hanzi_vocab.ids[char]])
    return total


def test_greedy_chooses_the_argmax_of_the_full_constrained_softmax():
    # Decoding computes logits of the allowed characters only; a full forward pass must agree.
    for seed in range(3):
        converter = _untrained_converter(seed)
        inputs = [["ni", "hao", "，", "wo", "men"], ["bei", "jing", "ba", "1", "A", "。", "ni"]]
        for tokens, (ids, score) in zip(inputs, converter.greedy(inputs)):
            chars = converter.hanzi_vocab.decode(ids)
            assert abs(score - _teacher_forced_score(converter, tokens, chars)) < 1e-4
            source = torch.tensor([converter.pinyin_vocab.encode(tokens)])
            with torch.no_grad():
                logits = converter.model(source, torch.tensor([ids]))[0]  # (t, v)
            for position, token in enumerate(tokens):
                allowed = converter.candidates.table()[converter.candidates.row(token)]
                assert ids[position] == int(logits[position].masked_fill(~allowed, float("-inf")).argmax())


def test_beam_search_finds_the_exhaustive_n_best():
    import itertools

    converter = _untrained_converter(seed=3)
    tokens = ["ni", "hao", "jing"]  # 2 x 2 x 2 candidates in the vocabulary
    options = [[c for c in converter.candidates.candidates(t) if c in converter.hanzi_vocab] for t in tokens]
    exhaustive = sorted(((_teacher_forced_score(converter, tokens, "".join(chars)), "".join(chars))
                         for chars in itertools.product(*options)), reverse=True)
    found = converter.beam_search([tokens], beam=len(exhaustive))[0]
    texts = ["".join(converter.hanzi_vocab.decode(ids)) for ids, _ in found]
    assert texts == [text for _, text in exhaustive]
    for (ids, score), (expected, _) in zip(found, exhaustive):
        assert abs(score - expected) < 1e-4


def test_beam_of_one_equals_greedy():
    converter = _untrained_converter(seed=4)
    inputs = [["ni", "hao", "，", "wo", "men"], ["bei", "jing"], ["ba", "1", "A", "。", "ni", "hao", "ba"]]
    greedy = converter.greedy(inputs)
    beam = converter.beam_search(inputs, beam=1)
    assert [ids for ids, _ in greedy] == [hypotheses[0][0] for hypotheses in beam]
    for (_, g), hypotheses in zip(greedy, beam):
        assert abs(g - hypotheses[0][1]) < 1e-4
    assert converter.convert(["ni hao wo men"], beam=1)[0][0].text == converter.convert_tokens([["ni", "hao", "wo", "men"]])[0]


def test_nbest_is_ordered_unique_and_constrained():
    converter = _untrained_converter(seed=5)
    conversions = converter.convert(["ni hao bei jing"], beam=8, nbest=8)[0]
    assert len(conversions) == 8  # 2 x 2 x 2 x 2 = 16 possible for "ni hao bei jing" alone
    scores = [c.score for c in conversions]
    assert scores == sorted(scores, reverse=True)
    assert len({c.text for c in conversions}) == 8
    for conversion in conversions:
        assert len(conversion.text) == len(conversion.tokens)
        for syllable, char in zip(conversion.tokens, conversion.text):
            assert syllable in readings().get(char, ()) or (len(syllable) == 1 and char == syllable)


def test_tones_constrain_the_candidates():
    converter = _untrained_converter()
    assert set(converter.candidates.candidates("ni3")) >= {"你"} and "妮" not in converter.candidates.candidates("ni3")
    assert "妮" in converter.candidates.candidates("ni1")
    for seed in range(3):
        converter = _untrained_converter(seed)
        assert converter.convert(["ni3"])[0][0].text == "你"  # the only ni3 in the vocabulary
        assert converter.convert(["nī"])[0][0].text == "妮"  # tone marks too
        assert converter.convert(["hao3"])[0][0].text == "好"  # 号 is hao2/hao4 only
    assert "你" in converter.candidates.candidates("ni5")  # a tone no character has counts as toneless


def test_ambiguous_segmentations_are_decoded_and_ranked_by_score():
    converter = _untrained_converter(seed=6)
    conversions = converter.convert(["bajing"], nbest=10, beam=10)[0]  # ba'jing or ... only one split here
    assert {len(c.text) for c in conversions} == {2}
    conversions = converter.convert(["xian"], nbest=10, beam=10)[0]  # xian (1 syllable) or xi'an (2)
    texts = {c.text for c in conversions}
    lengths = {len(text) for text in texts}
    assert lengths == {1, 2}, texts
    assert conversions[0].score == max(c.score for c in conversions)
    assert {tuple(c.tokens) for c in conversions} == {("xian",), ("xi", "an")}
    forced = converter.convert(["xi'an"], nbest=10, beam=10)[0]
    assert all(len(c.text) == 2 for c in forced)  # an apostrophe always forces a boundary


def test_pass_through_keeps_punctuation_digits_latin_and_emoji_in_place():
    converter = _untrained_converter(seed=7)
    output = converter.convert(["wo ai Python, 2024 nian!😀 ni hao。"])[0][0].text
    assert output[2:9] == "Python,"
    assert output[9:13] == "2024" and output[14:16] == "!😀" and output[-1] == "。"
    assert len(output) == 19
    chinese = converter.convert(["ni hao, wo men. 1.5 OK!"], chinese_punctuation=True)[0][0].text
    assert chinese[2] == "，" and chinese[5] == "。" and "1.5" in chinese and chinese.endswith("OK!")


def test_ten_thousand_syllables_convert_in_windows():
    converter = _untrained_converter(seed=8)
    line = "wo men " * 5000
    output = converter.convert([line])[0][0].text
    assert len(output) == 10000
    assert all(c in "我们门" for c in output)
    run_together = converter.convert(["nihao" * 3000])[0][0].text  # no spaces at all
    assert len(run_together) == 6000


def test_fallback_prefers_a_basic_block_character_and_is_reported():
    converter = _untrained_converter()
    conversion = converter.convert(["zhong"])[0][0]
    assert 0x4E00 <= ord(conversion.text) <= 0x9FFF and "zhong" in readings()[conversion.text]
    assert conversion.notes and "zhong" in conversion.notes[0]


def _all_readings_ranked(converter, line, beam, nbest):
    """The n-best of a one-chunk line the slow way: every reading decoded, ranked by model + prior."""
    options = alternatives(converter._chunks(parse_pieces(line, 4, fewest_syllables))[0], 4)
    fewest = min(len(reading) for reading in options)
    readings_ = [([token for token, _ in reading], [key for _, key in reading]) for reading in options]
    best: dict[str, float] = {}
    for (tokens, _), conversions in zip(readings_, converter._search(readings_, max(beam, nbest), True, 256)):
        for conversion in conversions:
            score = conversion.score - converter.split_penalty * (len(tokens) - fewest)
            best[conversion.text] = max(score, best.get(conversion.text, float("-inf")))
    return sorted(best.items(), key=lambda item: -item[1])[:nbest]


def test_skipping_readings_that_cannot_win_keeps_the_n_best():
    # convert() decodes the most probable reading first and skips readings whose prior alone is below the
    # n-best found: the result must equal decoding every reading.
    pinyin, hanzi = PINYIN + ["xi", "an", "xian", "zai", "fang", "gan", "fan"], HANZI + list("西希安按先现在再方放感干反饭")
    for seed, penalty in ((0, 0.0), (1, 0.3), (2, 1.0), (3, 3.0)):
        # (without the virtual clause end, which _all_readings_ranked does not add)
        converter = _untrained_converter(seed, pinyin, hanzi, split_penalty=penalty, clause_end=False)
        for line in ("xian", "xianzai", "fangan xian", "ni hao xian zai"):
            for beam, nbest in ((1, 1), (4, 1), (4, 3)):
                found = [(c.text, c.score) for c in converter.convert([line], beam=beam, nbest=nbest)[0]]
                expected = _all_readings_ranked(converter, line, beam, nbest)
                assert [text for text, _ in found] == [text for text, _ in expected], (line, beam, nbest)
                assert all(abs(a - b) < 1e-4 for (_, a), (_, b) in zip(found, expected))


def test_a_line_without_final_punctuation_is_decoded_as_a_whole_clause():
    """Training clauses end with their punctuation: typed input without it is decoded with a virtual 。 at
    the end (so that a final ba can be 吧), which never reaches the output and costs no score."""
    converter = _untrained_converter(3)
    seen = []
    search = converter._search
    converter._search = lambda readings, *args: seen.extend(readings) or search(readings, *args)
    (best, *_), = converter.convert(["wo men bei jing ba"], beam=3, nbest=3)
    assert seen and all(tokens[-1] == "。" and keys[-1] == "=。" for tokens, keys in seen)
    assert len(best.text) == 5 and best.text[-1] in "吧八" and best.tokens == ["wo", "men", "bei", "jing", "ba"]
    forced = converter.convert_tokens([["wo", "men", "bei", "jing", "ba", "。"]])[0]
    assert best.text == forced[:-1]  # the same as typing the 。 and cutting it off
    seen.clear()
    assert len(converter.convert(["ni hao，wo men"])[0][0].text) == 5 and seen[-1][0][-1] == "。"
    seen.clear()
    converter.convert(["ni hao。"])  # typed punctuation: nothing added
    assert ["ni", "hao", "。"] in [tokens for tokens, _ in seen]
    assert all(tokens[-1] == "。" and tokens.count("。") == 1 for tokens, _ in seen)
    plain = _untrained_converter(3, clause_end=False)
    plain_search = plain._search
    plain._search = lambda readings, *args: seen.extend(readings) or plain_search(readings, *args)
    seen.clear()
    plain.convert(["wo men bei jing ba"])
    assert ["wo", "men", "bei", "jing", "ba"] in [tokens for tokens, _ in seen]
    assert all("。" not in tokens for tokens, _ in seen)


def test_a_forced_last_character_skips_its_decoder_step_and_changes_nothing(monkeypatch):
    converter = _untrained_converter(seed=6)
    inputs = [["ni", "hao", "wo", "men", "。"], ["bei", "jing", "ba", "。"]]  # both end in a fixed 。
    calls = []
    step = StepDecoder.step
    monkeypatch.setattr(StepDecoder, "step", lambda *args, **kwargs: calls.append(1) or step(*args, **kwargs))
    skipped = converter.greedy(inputs), converter.beam_search(inputs, beam=3)
    assert len(calls) == 2 * 4  # 4 decoder steps each, not 5
    monkeypatch.setattr(Converter, "_forced", staticmethod(lambda allowed, position: None))
    calls.clear()
    stepped = converter.greedy(inputs), converter.beam_search(inputs, beam=3)
    assert len(calls) == 2 * 5
    assert [ids for ids, _ in skipped[0]] == [ids for ids, _ in stepped[0]]
    assert [[ids for ids, _ in hypotheses] for hypotheses in skipped[1]] == \
           [[ids for ids, _ in hypotheses] for hypotheses in stepped[1]]
    for ours, theirs in zip([score for _, score in skipped[0]] + [s for h in skipped[1] for _, s in h],
                            [score for _, score in stepped[0]] + [s for h in stepped[1] for _, s in h]):
        assert abs(ours - theirs) < 1e-5
    assert all(ids[-1] == converter.hanzi_vocab.ids["。"] for ids, _ in skipped[0])


def _lm_preferring(converter, sentences: list[str], order: int = 2):
    from pinyin_hanzi.char_lm import CharNgramLM

    return CharNgramLM.count([converter.hanzi_vocab.encode(s) for s in sentences], len(converter.hanzi_vocab), order)


def test_a_character_ngram_model_moves_decoding_toward_what_it_has_seen():
    plain = _untrained_converter(seed=3)
    tokens = [["ni", "hao", "wo", "men"]]
    for sentences, wanted in ((["你好我们"] * 5, "你好我们"), (["妮号我门"] * 5, "妮号我门")):
        lm = _lm_preferring(plain, sentences)
        fused = _untrained_converter(seed=3, char_lm=lm, lm_weight=5.0)
        assert "".join(fused.hanzi_vocab.decode(fused.greedy(tokens)[0][0])) == wanted
        assert fused.convert_tokens(tokens, beam=3) == [wanted]
        # convert decodes greedily without the n-gram model (it cost accuracy there)
        assert fused.convert_tokens(tokens, beam=1) == plain.convert_tokens(tokens, beam=1)
        off = _untrained_converter(seed=3, char_lm=lm, lm_weight=0.0)
        assert off.convert_tokens(tokens, beam=3) == plain.convert_tokens(tokens, beam=3)


def test_ngram_scores_add_to_the_model_scores_exactly():
    plain = _untrained_converter(seed=4)
    lm = _lm_preferring(plain, ["你好我们北京吧。", "我们北京。"], order=3)
    fused = _untrained_converter(seed=4, char_lm=lm, lm_weight=0.5)
    ids, fused_score = fused.greedy([["ni", "hao", "wo", "men", "。"]])[0]
    forced = plain.beam_search([["ni", "hao", "wo", "men", "。"]], beam=50)[0]  # every sequence, model scores
    model_score = next(score for hypothesis, score in forced if hypothesis == ids)
    assert abs(fused_score - (model_score + 0.5 * lm.sentence_log_prob(ids))) < 1e-4


def test_with_an_ngram_model_a_batch_decodes_each_input_as_it_would_alone():
    plain = _untrained_converter(seed=5)
    lm = _lm_preferring(plain, ["你好我们", "北京吧", "我们北京"], order=3)
    fused = _untrained_converter(seed=5, char_lm=lm, lm_weight=1.0)
    inputs = [["ni"], ["wo", "men", "bei", "jing", "ba", "。"], ["ni", "hao"]]  # different lengths: padding
    for beam in (1, 4):
        together = fused.convert_tokens(inputs, beam=beam)
        assert together == [fused.convert_tokens([tokens], beam=beam)[0] for tokens in inputs]
    lines = ["nihao", "wo men bei jing ba", "xian"]  # readings of different lengths decoded together
    assert [c[0].text for c in fused.convert(lines, beam=3)] == [fused.convert([line], beam=3)[0][0].text
                                                                 for line in lines]


def test_with_an_ngram_model_readings_far_below_the_best_prior_are_not_decoded():
    pinyin, hanzi = PINYIN + ["xi", "an", "xian"], HANZI + list("西希安按先现")
    plain = _untrained_converter(0, pinyin, hanzi)
    lm = _lm_preferring(plain, ["西安", "先"])
    lengths = {}
    for name, options in (("near", dict(lm_weight=1.0, reading_margin=8.0)),  # xi'an is 3 below xian: decoded
                          ("far", dict(lm_weight=1.0, reading_margin=2.0)),  # 3 > 2: not decoded
                          ("no n-gram model", dict(lm_weight=0.0, reading_margin=2.0))):  # the margin does not apply
        converter = _untrained_converter(0, pinyin, hanzi, split_penalty=3.0, char_lm=lm, **options)
        conversions = converter.convert(["xian"], nbest=10, beam=10)[0]
        lengths[name] = {len(c.tokens) for c in conversions}
    assert lengths == {"near": {1, 2}, "far": {1}, "no n-gram model": {1, 2}}

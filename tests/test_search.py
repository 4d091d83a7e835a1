import itertools

import torch

from pinyin_hanzi.data.batches import pad
from pinyin_hanzi.data.vocab import BOS_ID, PAD_ID
from pinyin_hanzi.decoding.search import Constraint, NgramFusion, beam_search
from pinyin_hanzi.lm.char_ngram import CharNgramLM
from pinyin_hanzi.models.inference import InferenceDecoder
from pinyin_hanzi.text.lexicon import token_key

from conftest import untrained_converter


def _teacher_forced_score(converter, tokens, chars) -> float:
    """log P(chars | tokens) under the constrained softmax, computed the slow way (full forward pass)."""
    source = torch.tensor([converter.pinyin_vocab.encode(tokens)])
    target = torch.tensor([converter.hanzi_vocab.encode(chars)])
    with torch.no_grad():
        logits = converter.model(source, target)[0]
    total = 0.0
    for position, token in enumerate(tokens):
        row = converter.lexicon.row(token)
        allowed = converter.lexicon.table()[row]
        log_probs = logits[position].masked_fill(~allowed, float("-inf")).log_softmax(-1)
        total += float(log_probs[converter.hanzi_vocab.ids[chars[position]]])
    return total


def test_beam_of_one_is_greedy_the_argmax_of_the_full_constrained_softmax():
    # Decoding computes logits of the allowed characters only, with a cache; a full forward pass must agree.
    for seed in range(3):
        converter = untrained_converter(seed)
        inputs = [["ni", "hao", "，", "wo", "men"], ["bei", "jing", "ba", "1", "A", "。", "ni"]]
        for tokens, [(ids, score)] in zip(inputs, converter.search(inputs, beam=1)):
            chars = converter.hanzi_vocab.decode(ids)
            assert abs(score - _teacher_forced_score(converter, tokens, chars)) < 1e-4
            source = torch.tensor([converter.pinyin_vocab.encode(tokens)])
            with torch.no_grad():
                logits = converter.model(source, torch.tensor([ids]))[0]  # (t, v)
            for position, token in enumerate(tokens):
                row = converter.lexicon.row(token)
                allowed = converter.lexicon.table()[row]
                assert ids[position] == int(logits[position].masked_fill(~allowed, float("-inf")).argmax())


def test_beam_search_finds_the_exhaustive_n_best():
    converter = untrained_converter(seed=3)
    tokens = ["ni", "hao", "jing"]  # 2 x 2 x 2 candidates in the vocabulary
    options = [[c for c in converter.lexicon.characters(t) if c in converter.hanzi_vocab] for t in tokens]
    exhaustive = sorted(((_teacher_forced_score(converter, tokens, "".join(chars)), "".join(chars))
                         for chars in itertools.product(*options)), reverse=True)
    found = converter.search([tokens], beam=len(exhaustive))[0]
    texts = ["".join(converter.hanzi_vocab.decode(ids)) for ids, _ in found]
    assert texts == [text for _, text in exhaustive]
    for (ids, score), (expected, _) in zip(found, exhaustive):
        assert abs(score - expected) < 1e-4


def test_the_best_beam_is_at_least_as_good_as_greedy_and_batches_pad_correctly():
    converter = untrained_converter(seed=4)
    inputs = [["ni", "hao", "，", "wo", "men"], ["bei", "jing"], ["ba", "1", "A", "。", "ni", "hao", "ba"]]
    greedy = converter.search(inputs, beam=1)
    beam = converter.search(inputs, beam=4)
    for tokens, [(greedy_ids, greedy_score)], hypotheses in zip(inputs, greedy, beam):
        assert len(greedy_ids) == len(tokens) and all(len(ids) == len(tokens) for ids, _ in hypotheses)
        assert hypotheses[0][1] >= greedy_score - 1e-5
        scores = [score for _, score in hypotheses]
        assert scores == sorted(scores, reverse=True)
    alone = [converter.search([tokens], beam=4)[0] for tokens in inputs]
    for together, single in zip(beam, alone):  # padding in a batch changes nothing
        assert [ids for ids, _ in together] == [ids for ids, _ in single]
        assert all(abs(a - b) < 1e-4 for (_, a), (_, b) in zip(together, single))


def test_unconstrained_search_may_choose_anything_but_specials():
    converter = untrained_converter()
    for beam in (1, 3):
        for ids, _ in converter.search([["ni", "hao"] * 4], beam=beam, constrained=False)[0]:
            assert len(ids) == 8 and all(converter.hanzi_vocab.tokens[i] in converter.hanzi_vocab.tokens[4:] for i in ids)


def test_a_forced_last_character_skips_its_decoder_step_and_changes_nothing(monkeypatch):
    converter = untrained_converter(seed=6)
    inputs = [["ni", "hao", "wo", "men", "。"], ["bei", "jing", "ba", "。"]]  # both end in a fixed 。
    calls = []
    decode = InferenceDecoder.decode  # the search's decoder step
    monkeypatch.setattr(InferenceDecoder, "decode", lambda *args, **kwargs: calls.append(1) or decode(*args, **kwargs))
    skipped = converter.search(inputs, beam=1), converter.search(inputs, beam=3)
    assert len(calls) == 2 * 4  # 4 decoder steps each, not 5
    monkeypatch.setattr(Constraint, "forced", lambda self, position: None)
    calls.clear()
    stepped = converter.search(inputs, beam=1), converter.search(inputs, beam=3)
    assert len(calls) == 2 * 5
    for ours, theirs in zip(skipped, stepped):
        assert [[ids for ids, _ in hypotheses] for hypotheses in ours] == \
               [[ids for ids, _ in hypotheses] for hypotheses in theirs]
        for mine, other in zip(ours, theirs):
            assert all(abs(a - b) < 1e-5 for (_, a), (_, b) in zip(mine, other))
    assert all(hypotheses[0][0][-1] == converter.hanzi_vocab.ids["。"] for hypotheses in skipped[0])


def _lm_preferring(converter, sentences: list[str], order: int = 2):
    return CharNgramLM.count([converter.hanzi_vocab.encode(s) for s in sentences], len(converter.hanzi_vocab), order)


def test_greedy_decoding_leaves_the_ngram_model_out_and_beam_search_uses_it():
    plain = untrained_converter(seed=3)
    tokens = [["ni", "hao", "wo", "men"]]
    for sentences, wanted in ((["你好我们"] * 5, "你好我们"), (["妮号我门"] * 5, "妮号我门")):
        lm = _lm_preferring(plain, sentences)
        fused = untrained_converter(seed=3, char_lm=lm, lm_weight=5.0)
        # the one place that decides: the call's settings, which the search then runs as they are
        assert fused.search_settings(beam=1).fusion is None and fused.search_settings(beam=2).fusion is not None
        assert fused.search_settings(beam=1, nbest=2).fusion is not None  # nbest 2 widens the beam to 2
        assert fused.convert_tokens(tokens, beam=3) == [wanted]
        assert fused.convert_tokens(tokens, beam=1) == plain.convert_tokens(tokens, beam=1)
        off = untrained_converter(seed=3, char_lm=lm, lm_weight=0.0)
        assert off.convert_tokens(tokens, beam=3) == plain.convert_tokens(tokens, beam=3)


def test_beam_search_given_a_fusion_at_beam_1_runs_it():
    """Greedy search with a fusion adds the fused scores along its one path, as beam search does; it used
    to drop the fusion silently (the converter's greedy conversion is given none: see the test above)."""
    plain = untrained_converter(seed=4)
    lm = _lm_preferring(plain, ["妮号我门。"] * 5, order=3)
    tokens = ["ni", "hao", "wo", "men", "。"]  # 2 x 2 x 2 x 2 readings, and a forced 。 the fusion still scores
    model_scores = {tuple(ids): score for ids, score in plain.search([tokens], beam=50)[0]}
    source = torch.tensor([plain.pinyin_vocab.encode(tokens)])
    rows = torch.tensor([[plain.lexicon.row(token_key(token)) for token in tokens]])
    [[(ids, score)]] = beam_search(plain.model, source, Constraint(plain.lexicon, rows), beam=1,
                                   fusion=NgramFusion([(lm, 5.0)]))
    assert "".join(plain.hanzi_vocab.decode(ids)) == "妮号我门。"  # what the n-gram model prefers, not greedy alone
    assert "".join(plain.hanzi_vocab.decode(plain.search([tokens], beam=1)[0][0][0])) != "妮号我门。"
    assert abs(score - (model_scores[tuple(ids)] + 5.0 * lm.sentence_log_prob(ids))) < 1e-4


def test_the_constraint_gives_a_mask_only_where_some_list_is_padded():
    # A search skips the masking of padded entries (and the fused models' search for <pad>) where no list is
    # padded: a single input's lists never are; a batch's are wherever its lists' lengths differ.
    plain = untrained_converter(seed=4)
    inputs = [["ni", "wo", "hao"], ["ni", "men"]]  # 2, 1, 2 characters; 2, 2
    rows = pad([[plain.lexicon.row(token_key(token)) for token in tokens] for tokens in inputs])
    for single in (rows[:1], rows[1:, :2]):
        constraint = Constraint(plain.lexicon, single)
        for position in range(single.shape[1]):
            ids, real, lists = constraint.at(position)
            assert lists and real is None and (ids != PAD_ID).all()
    constraint = Constraint(plain.lexicon, rows)
    masks = plain.lexicon.ids(rows)[1]  # (n, s, c): True at real entries (past an input's end: <pad> alone)
    for position, padded in enumerate((False, True, True)):  # ni beside ni; wo beside men; beside the end
        ids, real, _ = constraint.at(position)
        assert (real is not None) == padded
        if padded:
            assert torch.equal(real, masks[:, position, : ids.shape[1]]) and (ids[~real] == PAD_ID).all()
    # past the end of an input, its list is <pad> alone, as long as a one-character list beside it: still padded
    rows = pad([[plain.lexicon.row(token_key(token)) for token in tokens] for tokens in [["ni", "wo"], ["ni"]]])
    ids, real, _ = Constraint(plain.lexicon, rows).at(1)
    assert ids[:, 0].tolist() == [plain.hanzi_vocab.encode(["我"])[0], PAD_ID] and real.all()


def test_an_input_that_ends_before_its_neighbours_in_an_unsorted_batch_keeps_its_scores():
    # Past its end an input's list is <pad> alone: the fused models must not score it, even where every other
    # list at that position has one character too (no list is shorter than another there).
    plain = untrained_converter(seed=4)
    lm = _lm_preferring(plain, ["你我", "你号我"], order=3)
    inputs = [["ni", "wo", "bei"], ["ni"], ["ni", "wo"]]  # wo and bei: one character each

    def search(token_lists):
        source = pad([plain.pinyin_vocab.encode(tokens) for tokens in token_lists])
        rows = pad([[plain.lexicon.row(token_key(token)) for token in tokens] for tokens in token_lists])
        return beam_search(plain.model, source, Constraint(plain.lexicon, rows), beam=2,
                           fusion=NgramFusion([(lm, 1.0)]))

    together = search(inputs)
    for tokens, found in zip(inputs, together):
        [alone] = search([tokens])
        assert [ids for ids, _ in found] == [ids for ids, _ in alone]
        assert all(abs(a - b) < 1e-5 for (_, a), (_, b) in zip(found, alone))


def test_ngram_scores_add_to_the_model_scores_exactly():
    plain = untrained_converter(seed=4)
    lm = _lm_preferring(plain, ["你好我们北京吧。", "我们北京。"], order=3)
    fused = untrained_converter(seed=4, char_lm=lm, lm_weight=0.5)
    tokens = [["ni", "hao", "wo", "men", "。"]]  # 8 readings: a beam of 50 keeps every one
    model_scores = {tuple(ids): score for ids, score in plain.search(tokens, beam=50)[0]}
    fused_found = fused.search(tokens, beam=50)[0]
    assert len(fused_found) == len(model_scores) == 8
    for ids, score in fused_found:
        assert abs(score - (model_scores[tuple(ids)] + 0.5 * lm.sentence_log_prob(ids))) < 1e-4
    scores = [score for _, score in fused_found]
    assert scores == sorted(scores, reverse=True)


def test_with_an_ngram_model_a_batch_decodes_each_input_as_it_would_alone():
    plain = untrained_converter(seed=5)
    lm = _lm_preferring(plain, ["你好我们", "北京吧", "我们北京"], order=3)
    fused = untrained_converter(seed=5, char_lm=lm, lm_weight=1.0)
    inputs = [["ni"], ["wo", "men", "bei", "jing", "ba", "。"], ["ni", "hao"]]  # different lengths: padding
    for beam in (1, 4):
        together = fused.convert_tokens(inputs, beam=beam)
        assert together == [fused.convert_tokens([tokens], beam=beam)[0] for tokens in inputs]


def test_fusion_sums_the_weighted_scores_of_its_models():
    class Constant:
        def __init__(self, order, value):
            self.order, self.value = order, value

        def log_prob(self, context, candidates):
            assert context.shape[1] == 5  # the widest model's history
            return torch.full(candidates.shape, self.value)

    fusion = NgramFusion([(Constant(3, -1.0), 0.5), (Constant(6, -2.0), 0.25), (Constant(9, -7.0), 0.0)])
    assert fusion.history == 5  # a model of weight 0 takes no part
    ids = torch.tensor([[5, 6, PAD_ID]])
    assert fusion.scores(torch.full((1, 5), BOS_ID), ids).tolist() == [[-1.0, -1.0, 0.0]]
    assert fusion.scores(torch.full((1, 5), BOS_ID), ids[:, :2], padded=False).tolist() == [[-1.0, -1.0]]


def test_fusion_of_mostly_padded_lists_scores_their_real_entries_as_unpadded_lists_would():
    # A batch's lists are padded to the longest at each position, most entries <pad>: they are scored entry by
    # entry with their row's context (the packed path) by models that can (log_prob_entries), over whole
    # lists by the others, to the same sums as unpadded lists.
    class ListsOnly:  # a model with log_prob alone, as the word model
        def __init__(self, lm):
            self.lm, self.order = lm, lm.order

        def log_prob(self, context, candidates):
            return self.lm.log_prob(context, candidates)

    generator = torch.Generator().manual_seed(3)
    sentences = torch.randint(4, 30, (200, 8), generator=generator).tolist()
    lm = CharNgramLM.count(sentences, vocab_size=30, order=3)
    other = ListsOnly(CharNgramLM.count(sentences[:50], vocab_size=30, order=2))
    fusion = NgramFusion([(lm, 0.5), (other, 0.3), (CharNgramLM.count(sentences[100:], vocab_size=30), 0.2)])
    context = torch.randint(4, 30, (6, 2), generator=generator)
    ids = torch.randint(4, 30, (6, 10), generator=generator)
    lengths = torch.tensor([1, 3, 2, 10, 1, 2])  # 19 of 60 entries real: the packed path
    ids = ids.masked_fill(torch.arange(10) >= lengths[:, None], PAD_ID)
    packed = fusion.scores(context, ids)
    for row in range(6):
        alone = fusion.scores(context[row : row + 1], ids[row : row + 1, : lengths[row]])  # no padding
        assert torch.allclose(packed[row, : lengths[row]], alone[0], atol=1e-6)
        assert (packed[row, lengths[row] :] == 0).all()
    assert packed[3].abs().sum() > 0 and packed[3].unique().numel() > 1  # real, varied scores


def test_finished_inputs_leave_the_batch_and_each_keeps_the_hypotheses_it_would_have_alone(monkeypatch):
    from pinyin_hanzi.models.kv_cache import DecoderCache

    plain = untrained_converter(seed=6)
    lm = _lm_preferring(plain, ["你好我们北京吧。", "我们北京。"], order=3)
    inputs = [["ni"], ["ni", "hao"], ["bei", "jing"], ["wo", "men", "。"], ["wo", "men", "bei", "jing", "ba", "。"]]
    dropped = []
    drop = DecoderCache.drop_front
    monkeypatch.setattr(DecoderCache, "drop_front", lambda self, inputs, rows: dropped.append(inputs)
                        or drop(self, inputs, rows))

    def search(token_lists, beam, fusion):
        source = pad([plain.pinyin_vocab.encode(tokens) for tokens in token_lists])
        rows = pad([[plain.lexicon.row(token_key(token)) for token in tokens] for tokens in token_lists])
        return beam_search(plain.model, source, Constraint(plain.lexicon, rows), beam=beam, fusion=fusion)

    for beam, fusion in ((1, None), (3, None), (4, NgramFusion([(lm, 1.0)]))):
        dropped.clear()
        together = search(inputs, beam, fusion)  # sorted by length, as a converter's batches are
        assert dropped == [1, 2, 1]  # ni after its one step, then the two of length 2, then wo men 。
        for tokens, found in zip(inputs, together):
            alone = search([tokens], beam, fusion)[0]
            assert [ids for ids, _ in found] == [ids for ids, _ in alone]
            assert all(abs(a - b) < 1e-4 for (_, a), (_, b) in zip(found, alone))

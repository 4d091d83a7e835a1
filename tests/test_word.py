import itertools
import math

import pytest
import torch

from pinyin_hanzi.data.vocab import BOS_ID, SPECIALS, Vocab
from pinyin_hanzi.lm.word import FLOOR, WordLexiconLM, segment_counts

CHARS = "我们去北京兽医收益好"
VOCAB = Vocab(list(SPECIALS) + list(CHARS) + ["，"])
TABLE = {"我们": 50.0, "我": 30.0, "去": 20.0, "北京": 10.0, "兽医": 1.0, "收益": 8.0, "好": 5.0, "京": 0.5}


def ids(text):
    return VOCAB.encode(text)


def context(text, width=6):
    return torch.tensor([([BOS_ID] * width + ids(text))[-width:]])


def brute_prefix_probability(lm_words, text):
    """Sum over segmentations of ``text`` into words + the beginning of one more word."""
    total = 0.0
    for cuts in itertools.product([False, True], repeat=max(len(text) - 1, 0)):
        pieces, start = [], 0
        for index, cut in enumerate(cuts, start=1):
            if cut:
                pieces.append(text[start:index])
                start = index
        pieces.append(text[start:])
        *complete, last = pieces
        if all(word in lm_words for word in complete):
            mass = sum(p for word, p in lm_words.items() if word.startswith(last))
            total += math.prod(lm_words[word] for word in complete) * mass
    return total


def test_scores_are_the_ratio_of_prefix_probabilities_summed_over_segmentations():
    lm = WordLexiconLM.from_frequencies(TABLE, VOCAB)
    words = dict(TABLE)
    for char in CHARS:
        words.setdefault(char, FLOOR * sum(TABLE.values()))
    norm = sum(words.values())
    words = {word: value / norm for word, value in words.items()}
    for text, next_char in [("我", "们"), ("我们去北", "京"), ("兽", "医"), ("", "我"), ("北京", "好")]:
        expected = math.log(brute_prefix_probability(words, text + next_char)) - (
            math.log(brute_prefix_probability(words, text)) if text else 0.0)
        got = float(lm.log_prob(context(text), torch.tensor([ids(next_char)]))[0, 0])
        assert abs(got - expected) < 1e-3, (text, next_char, got, expected)


def test_next_character_distribution_sums_to_one_and_prefers_words():
    lm = WordLexiconLM.from_frequencies(TABLE, VOCAB)
    hanzi = torch.tensor([ids(CHARS)])
    for text in ["", "我", "兽", "我们去"]:
        log_probs = lm.log_prob(context(text), hanzi)[0]
        assert abs(float(log_probs.exp().sum()) - 1.0) < 1e-3
    after = lm.log_prob(context("兽"), torch.tensor([ids("医益")]))[0]
    assert after[0] > after[1] + 5  # 兽医 is a word, 兽益 is not


def test_non_hanzi_is_a_boundary_and_scores_zero():
    lm = WordLexiconLM.from_frequencies(TABLE, VOCAB)
    assert float(lm.log_prob(context("我们"), torch.tensor([ids("，")]))[0, 0]) == 0.0
    after_comma = lm.log_prob(context("北，"), torch.tensor([ids("京我")]))[0]
    at_start = lm.log_prob(context(""), torch.tensor([ids("京我")]))[0]
    assert torch.allclose(after_comma, at_start)  # 北，京 is not the word 北京


def test_batched_rows_match_single_rows_and_state_round_trips():
    lm = WordLexiconLM.from_frequencies(TABLE, VOCAB, window=5)
    contexts = torch.cat([context(text, 5) for text in ["", "我们", "去北", "兽医收"]])
    candidates = torch.tensor([ids("京医们益")] * 4)
    batched = lm.log_prob(contexts, candidates)
    for row in range(4):
        assert torch.allclose(batched[row], lm.log_prob(contexts[row : row + 1], candidates[row : row + 1])[0])
    again = WordLexiconLM.from_state_dict(lm.state_dict())
    assert torch.allclose(again.log_prob(contexts, candidates), batched, atol=2e-2)  # float16 storage
    assert again.order == 6 and again.size() == lm.size()


def sequence_score(lm, text):
    """The sum of ``lm``'s scores of ``text``'s characters, each after the ones before it."""
    return sum(float(lm.log_prob(context(text[:index]), torch.tensor([ids(char)]))[0, 0])
               for index, char in enumerate(text))


def test_a_background_equal_to_the_table_cancels_every_score():
    plain = WordLexiconLM.from_frequencies(TABLE, VOCAB)
    same = WordLexiconLM(len(VOCAB), plain.word_keys, plain.word_log_probs, plain.is_word_char,
                         background_log_probs=plain.word_log_probs)
    scores = same.log_prob(torch.cat([context(text) for text in ["", "兽", "我们去"]]), torch.tensor([ids(CHARS)] * 3))
    assert torch.allclose(scores, torch.zeros_like(scores), atol=1e-5)


def test_contrast_favours_the_homophone_the_training_text_lacks():
    # The table prefers 收益 (8 to 1); a training text that says 收益 all the time already knows that, so
    # against it the table's evidence for 兽医, which the text never has, counts for more.
    plain = WordLexiconLM.from_frequencies(TABLE, VOCAB)
    assert sequence_score(plain, "收益") > sequence_score(plain, "兽医")
    texts = ["我们的收益好，"] * 50 + ["我们去北京。"] * 50
    contrasted = WordLexiconLM.from_frequencies(TABLE, VOCAB, background=texts, contrast=0.8)
    assert contrasted.has_background and not plain.has_background
    assert sequence_score(contrasted, "兽医") > sequence_score(contrasted, "收益")
    assert abs(sequence_score(contrasted, "兽医")) < math.log(1 / (1 - 0.8)) + 1e-3  # the mix bounds the gain
    # contrast 0, or no text: the plain model
    for same in (WordLexiconLM.from_frequencies(TABLE, VOCAB, background=texts, contrast=0.0),
                 WordLexiconLM.from_frequencies(TABLE, VOCAB, background=None, contrast=0.8)):
        assert not same.has_background and sequence_score(same, "兽医") == sequence_score(plain, "兽医")
    with pytest.raises(ValueError, match="contrast 1"):
        WordLexiconLM.from_frequencies(TABLE, VOCAB, background=texts, contrast=1.0)


def test_contrasted_state_round_trips():
    lm = WordLexiconLM.from_frequencies(TABLE, VOCAB, background=["收益好，我们去北京"] * 3, contrast=0.5)
    again = WordLexiconLM.from_state_dict(lm.state_dict())
    assert again.has_background
    contexts = torch.cat([context(text) for text in ["", "兽", "我们去北"]])
    candidates = torch.tensor([ids("医益京们")] * 3)
    assert torch.allclose(again.log_prob(contexts, candidates), lm.log_prob(contexts, candidates), atol=2e-2)


def test_segment_counts_takes_the_most_probable_cut_of_each_hanzi_run():
    shares = {"我们": 0.4, "我": 0.1, "们": 0.01, "去": 0.2, "北京": 0.2, "北": 0.05, "京": 0.04}
    counts = segment_counts(["我们去北京。", "北，京 我们x去"], shares)
    assert counts == {"我们": 2, "去": 2, "北京": 1, "北": 1, "京": 1}
    assert segment_counts(["兽医"], shares) == {}  # characters in no word are not counted


def test_a_checkpoint_carries_its_word_model_into_the_converter(trained, tmp_path):
    from pinyin_hanzi.checkpoint import WORD_LM_KEY, load_checkpoint, load_for_inference, save_checkpoint
    from pinyin_hanzi.decoding.converter import Converter
    from pinyin_hanzi.errors import CheckpointError

    _, _, best = trained
    state = load_checkpoint(best)
    hanzi_vocab = Vocab(state["hanzi_vocab"])
    words = [token for token in hanzi_vocab.tokens if len(token) == 1 and "\u4e00" <= token <= "\u9fff"]
    lm = WordLexiconLM.from_frequencies({words[0] + words[1]: 5.0, words[2]: 1.0}, hanzi_vocab)
    state[WORD_LM_KEY] = lm.state_dict()
    state["config"]["decode"]["word_weight"] = 0.4
    with_words = tmp_path / "words.pt"
    save_checkpoint(with_words, state)
    assert load_for_inference(with_words).word_lm.size() == lm.size()
    converter = Converter.from_checkpoint(with_words, lm_weight=0.0)
    assert converter.decode.word_weight == 0.4 and converter.search_settings(beam=5).fusion is not None
    assert [weight for _, weight in converter.search_settings(beam=5).fusion.models] == [0.4]
    assert Converter.from_checkpoint(with_words, word_weight=0.0).search_settings(beam=5).fusion is None
    state[WORD_LM_KEY]["vocab_size"] = 7  # a word model of another vocabulary
    save_checkpoint(tmp_path / "bad.pt", state)
    with pytest.raises(CheckpointError, match="word model counts 7 characters"):
        load_checkpoint(tmp_path / "bad.pt")


def test_the_cli_removes_a_word_model_and_its_weight(trained, tmp_path, capsys):
    from pinyin_hanzi.checkpoint import WORD_LM_KEY, load_checkpoint, load_for_inference, save_checkpoint
    from pinyin_hanzi.cli.word_lm import main
    from pinyin_hanzi.decoding.converter import Converter

    _, _, best = trained
    state = load_checkpoint(best)
    hanzi_vocab = Vocab(state["hanzi_vocab"])
    words = [token for token in hanzi_vocab.tokens if len(token) == 1 and "\u4e00" <= token <= "\u9fff"]
    state[WORD_LM_KEY] = WordLexiconLM.from_frequencies({words[0] + words[1]: 5.0}, hanzi_vocab).state_dict()
    state["config"]["decode"]["word_weight"] = 0.4
    save_checkpoint(tmp_path / "words.pt", state)
    assert main([str(tmp_path / "words.pt"), str(tmp_path / "plain.pt"), "--remove"]) == 0
    assert "word model removed" in capsys.readouterr().out
    assert load_for_inference(tmp_path / "plain.pt").word_lm is None
    assert Converter.from_checkpoint(tmp_path / "plain.pt").decode.word_weight == 0.0
    assert main([str(tmp_path / "plain.pt"), str(tmp_path / "again.pt"), "--remove"]) == 0
    assert "had no word model" in capsys.readouterr().out


@pytest.mark.parametrize("option", [["--weight", "0.3"], ["--table", "wordfreq-zh"], ["--min-frequency", "1e-6"],
                                    ["--contrast", "0.5"]])
def test_the_cli_refuses_options_that_remove_would_ignore(tmp_path, capsys, option):
    from pinyin_hanzi.cli.word_lm import main

    with pytest.raises(SystemExit) as exit_info:
        main(["in.pt", str(tmp_path / "out.pt"), "--remove", *option])
    assert exit_info.value.code == 2
    assert f"--remove takes no {option[0]}" in capsys.readouterr().err
    assert not (tmp_path / "out.pt").exists()


def test_the_cli_contrasts_a_word_model_with_the_checkpoint_training_split(trained, tmp_path, capsys, monkeypatch):
    from pinyin_hanzi.checkpoint import load_checkpoint, load_for_inference, save_checkpoint
    from pinyin_hanzi.cli.word_lm import main
    from pinyin_hanzi.decoding.converter import Converter
    from pinyin_hanzi.lm import word

    _, _, best = trained
    state = load_checkpoint(best)
    hanzi = [token for token in Vocab(state["hanzi_vocab"]).tokens if len(token) == 1 and "\u4e00" <= token <= "\u9fff"]
    # where the word model reads its table (lm/word.py's own name for it): no download
    monkeypatch.setattr(word, "word_table", lambda name, raw_dir: {hanzi[0] + hanzi[1]: 5.0, hanzi[2]: 1.0})
    out = tmp_path / "contrast.pt"
    assert main([str(best), str(out), "--table", "subtlex-ch", "--contrast", "0.5", "--weight", "0.3"]) == 0
    assert "contrasted with its training split at 0.5" in capsys.readouterr().out
    assert load_for_inference(out).word_lm.has_background
    converter = Converter.from_checkpoint(out)
    assert converter.config.decode.word_contrast == 0.5 and converter.decode.word_weight == 0.3
    assert converter.convert("ni hao")  # decodes with it
    # without the prepared training split: one line naming what is missing, nothing written
    state["config"]["data"]["prepared_dir"] = str(tmp_path / "nowhere")
    save_checkpoint(tmp_path / "moved.pt", state)
    assert main([str(tmp_path / "moved.pt"), str(tmp_path / "none.pt"), "--contrast", "0.5"]) != 0
    error = capsys.readouterr().err.strip()
    assert "is not prepared: the contrast needs the training split" in error and "\n" not in error
    assert not (tmp_path / "none.pt").exists()
    assert main([str(best), str(tmp_path / "plain.pt"), "--remove"]) == 0  # --remove clears the contrast too
    assert Converter.from_checkpoint(tmp_path / "plain.pt").config.decode.word_contrast == 0.0


@pytest.mark.parametrize("value", ["1", "-0.1", "nan"])
def test_the_cli_refuses_a_contrast_outside_0_1(tmp_path, capsys, value):
    from pinyin_hanzi.cli.word_lm import main

    with pytest.raises(SystemExit) as exit_info:
        main(["in.pt", str(tmp_path / "out.pt"), "--contrast", value])
    assert exit_info.value.code == 2 and "--contrast must lie in [0, 1)" in capsys.readouterr().err


def test_a_checkpoint_whose_background_does_not_pair_up_is_refused(trained, tmp_path):
    from pinyin_hanzi.checkpoint import WORD_LM_KEY, load_checkpoint, save_checkpoint
    from pinyin_hanzi.errors import CheckpointError

    _, _, best = trained
    state = load_checkpoint(best)
    hanzi_vocab = Vocab(state["hanzi_vocab"])
    words = [token for token in hanzi_vocab.tokens if len(token) == 1 and "\u4e00" <= token <= "\u9fff"]
    lm = WordLexiconLM.from_frequencies({words[0] + words[1]: 5.0}, hanzi_vocab, background=[words[0]], contrast=0.5)
    state[WORD_LM_KEY] = lm.state_dict()
    state[WORD_LM_KEY]["background_log_probs"] = lm.background_log_probs[:-1]
    save_checkpoint(tmp_path / "bad.pt", state)
    with pytest.raises(CheckpointError, match="background frequencies that do not pair up"):
        load_checkpoint(tmp_path / "bad.pt")

import re

import pytest

from pinyin_hanzi.data.corpus import read_split
from pinyin_hanzi.data.examples import Example
from pinyin_hanzi.evaluation.evaluate import compare_file, evaluate_file

from conftest import untrained_converter


@pytest.fixture(scope="module")
def converter(trained):
    from pinyin_hanzi.decoding.converter import Converter

    _, _, best = trained
    return Converter.from_checkpoint(best)


def test_evaluate_file_scores_the_conversions_of_typed_input(trained, converter):
    tmp, _, _ = trained
    examples = read_split(tmp / "prepared" / "tiny", "train")
    result = evaluate_file(converter, examples)
    assert result["char_accuracy"] == 1.0 and result["top1"] == 1.0 and "top5" not in result
    assert (result["constrained"], result["unsegmented"], result["beam"]) == (True, False, 1)

    wrong = Example(examples[0].tokens, "错" * len(examples[0].hanzi))  # a reference the model never writes
    result = evaluate_file(converter, [wrong] + examples[1:], beam=5)
    assert result["exact"] == pytest.approx((len(examples) - 1) / len(examples))
    assert result["top1"] == result["exact"] and result["top1"] <= result["top3"] <= result["top5"] < 1
    assert result["char_accuracy"] < 1 and result["beam"] == 5


def test_evaluate_file_types_a_share_of_syllables_abbreviated_and_reads_them_as_prefixes(trained, converter):
    tmp, _, _ = trained
    examples = read_split(tmp / "prepared" / "tiny", "train")
    full = evaluate_file(converter, examples)
    assert (full["abbreviate"], full["prefixes"]) == (0.0, converter.typing_options().prefixes)
    abbreviated = evaluate_file(converter, examples, abbreviate=1.0)
    assert abbreviated["prefixes"] is True and abbreviated["char_accuracy"] < full["char_accuracy"]
    assert evaluate_file(converter, examples, abbreviate=1.0) == abbreviated  # the same syllables every run
    letters = evaluate_file(converter, examples, abbreviate=1.0, prefixes=False)  # b, j ... pass through
    assert letters["prefixes"] is False and letters["char_accuracy"] < abbreviated["char_accuracy"]
    with pytest.raises(ValueError, match="between 0 and 1"):
        evaluate_file(converter, examples, abbreviate=1.5)


def test_compare_file_scores_two_models_on_the_same_typed_sentences(trained, converter):
    tmp, _, _ = trained
    examples = read_split(tmp / "prepared" / "tiny", "train")
    itself = compare_file(converter, converter, examples, beam=5)
    assert itself["cer"] == itself["other_cer"] == evaluate_file(converter, examples, beam=5)["cer"]
    assert itself["difference"] == 0 and itself["interval"] == [0, 0] and itself["sentences"] == len(examples)

    untrained = untrained_converter()  # its own vocabulary: most of this pinyin is unknown to it
    worse = compare_file(converter, untrained, examples, abbreviate=0.5)
    assert worse["abbreviate"] == 0.5 and worse["cer"] == evaluate_file(converter, examples, abbreviate=0.5)["cer"]
    assert worse["other_cer"] == evaluate_file(untrained, examples, abbreviate=0.5)["cer"]
    assert worse["difference"] > 0 and worse["interval"][0] > 0 and worse["worse"] > 0 == worse["better"]
    flipped = compare_file(untrained, converter, examples, abbreviate=0.5)
    assert flipped["difference"] == pytest.approx(-worse["difference"])
    assert (flipped["better"], flipped["worse"]) == (worse["worse"], worse["better"])


def test_off_a_terminal_the_evaluation_says_how_far_it_is_in_plain_lines(trained, converter, monkeypatch, capsys):
    """A log file gets a line every PLAIN_PROGRESS_SECONDS (here every batch), not a bar's redraws; no
    progress asked, no line."""
    from pinyin_hanzi.evaluation import evaluate

    tmp, _, _ = trained
    examples = read_split(tmp / "prepared" / "tiny", "train")[:12]
    monkeypatch.setattr(evaluate, "PLAIN_PROGRESS_SECONDS", 0.0)
    assert evaluate_file(converter, examples, batch_size=4, progress=True) == evaluate_file(converter, examples)
    lines = capsys.readouterr().err.splitlines()
    assert [line.split(",")[0] for line in lines] == ["converting: 4/12 sentences (33%)",
                                                      "converting: 8/12 sentences (67%)"], lines
    assert all(re.fullmatch(r".*, \d+ s elapsed, about \d+ s left", line) for line in lines), lines
    compare_file(converter, converter, examples, batch_size=8, progress=True)
    assert [line.split(",")[0] for line in capsys.readouterr().err.splitlines()] == [
        "model 1 of 2: 8/12 sentences (67%)", "model 2 of 2: 8/12 sentences (67%)"]

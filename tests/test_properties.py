"""Property-based tests (Hypothesis): whatever text and option values the Python API and translate.py's
arguments get, the only exceptions are the documented ones (PinyinHanziError subclasses; argparse's usage
error, SystemExit 2), and every input line gets exactly one output line."""

from __future__ import annotations

import contextlib
import io
import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pinyin_hanzi.cli import translate
from pinyin_hanzi.cli.printing import Printer
from pinyin_hanzi.errors import PinyinHanziError
from pinyin_hanzi.text.pinyin import syllables
from pinyin_hanzi.text.shuangpin import LAYOUTS
from pinyin_hanzi.text.typed_input import FUZZY_PAIRS, split_lines

SETTINGS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])

SYLLABLES = sorted(syllables())
PIECES = st.one_of(
    st.sampled_from(SYLLABLES),  # ni, zhuang, ...
    st.sampled_from(SYLLABLES).map(lambda syllable: syllable[: max(1, len(syllable) // 2)]),  # prefixes: zh, b
    st.sampled_from(SYLLABLES).flatmap(lambda syllable: st.integers(0, 6).map(lambda tone: f"{syllable}{tone}")),
    st.sampled_from(list("',.?!，。！？:;-…“”()0123456789 \t")),
    st.sampled_from(["v", "u:", "ü", "ǎ", "NI", "ｈａｏ", "你", "xyz", "\x00", "\u200b", "\ufeff", "😀"]),
)
PINYIN_LIKE = st.lists(st.tuples(PIECES, st.sampled_from(["", " ", "'", "  "])), max_size=8).map(
    lambda parts: "".join(piece + separator for piece, separator in parts))
TYPED = st.one_of(PINYIN_LIKE, st.text(max_size=16))  # pinyin-like text, or any Unicode at all
# Option values: mostly small valid ones (large beams only cost time), and every kind of invalid one.
BAD_NUMBERS = st.one_of(st.sampled_from([0, -1, 65, 100_000, 2**70, -2**70, True, 1.5, math.nan, math.inf, -math.inf,
                                         1e308, "5"]), st.integers(), st.floats(allow_nan=True, allow_infinity=True))
NUMBERS = st.one_of(st.none(), st.integers(1, 6), st.floats(0, 3), BAD_NUMBERS)


@pytest.fixture(scope="module")
def converter(trained):
    from pinyin_hanzi.decoding.converter import Converter

    torch.set_num_threads(1)
    return Converter.from_checkpoint(trained[2])


@SETTINGS
@given(lines=st.lists(TYPED, min_size=1, max_size=3), beam=NUMBERS, nbest=NUMBERS,
       fuzzy=st.one_of(st.none(), st.lists(st.sampled_from([*FUZZY_PAIRS, "q-x", ""]), max_size=3)),
       prefixes=st.one_of(st.none(), st.booleans()),
       shuangpin=st.one_of(st.none(), st.sampled_from(["", *LAYOUTS, "dvorak"])),
       chinese_punctuation=st.booleans())
def test_the_converter_gives_one_conversion_per_line_or_a_documented_error(converter, lines, beam, nbest, fuzzy,
                                                                          prefixes, shuangpin, chinese_punctuation):
    try:
        found = converter.convert_lines(lines, beam=beam, nbest=1 if nbest is None else nbest, fuzzy=fuzzy,
                                        prefixes=prefixes, shuangpin=shuangpin,
                                        chinese_punctuation=chinese_punctuation)
    except PinyinHanziError as error:
        assert "\n" not in str(error)
        return
    assert len(found) == len(lines)
    for line, candidates in zip(lines, found):
        assert 1 <= len(candidates) <= (nbest or 1)
        for candidate in candidates:  # a line holding line ends converts line by line: n lines in, n out
            assert isinstance(candidate.text, str) and "\r" not in candidate.text
            assert len(candidate.text.split("\n")) == max(1, len(split_lines(line)))
            assert math.isfinite(candidate.score) or candidate.text == ""


@SETTINGS
@given(lm_weight=NUMBERS, word_weight=NUMBERS, beam=NUMBERS, line=PINYIN_LIKE)
def test_converter_settings_are_checked_when_it_is_made(converter, lm_weight, word_weight, beam, line):
    from pinyin_hanzi.decoding.converter import Converter

    options = {name: value for name, value in (("lm_weight", lm_weight), ("word_weight", word_weight), ("beam", beam))
               if value is not None}
    try:
        made = Converter(converter.model, converter.pinyin_vocab, converter.hanzi_vocab, **options)
    except PinyinHanziError as error:
        assert "\n" not in str(error)
        return
    assert len(made.convert([line])) == 1


@SETTINGS
@given(lines=st.lists(TYPED, min_size=1, max_size=3), nbest=st.integers(1, 3), as_json=st.booleans())
def test_translate_prints_one_line_per_input_line(converter, lines, nbest, as_json):
    """translate.py's output path (formatting, --nbest, --json) over any text: one line per input line.
    Its input lines never hold a line end (it splits its input by typed_input.split_lines), so neither do these."""
    lines = [" ".join(split_lines(line)) for line in lines]
    printer = Printer(nbest=nbest, json=as_json, table=False)  # piped output
    output = io.StringIO()
    with contextlib.redirect_stdout(output):
        printer.print(lines, converter.convert_lines(lines, nbest=nbest, beam=max(3, nbest), constrained=True))
    assert output.getvalue().count("\n") == len(lines)


OPTION_VALUES = st.one_of(st.sampled_from(["1e308", "nan", "inf", "-inf", "-0", "0x10", "65536", "30000", "1_000",
                                           "", " ", "5", "0.5", "-1", "1e-400", "9" * 40]),
                          st.integers().map(str), st.floats().map(str), st.text(max_size=8))
OPTIONS = ["--beam", "--nbest", "--lm-weight", "--word-weight", "--batch-size", "--threads", "--abbreviate",
           "--fuzzy", "--prefixes", "--shuangpin", "--attention", "--evaluate", "--input"]


@SETTINGS
@given(options=st.lists(st.tuples(st.sampled_from(OPTIONS), OPTION_VALUES), max_size=4), text=TYPED)
def test_translate_arguments_give_a_usage_error_or_a_one_line_error(tmp_path_factory, options, text):
    """Any option values: argparse's usage error (SystemExit 2) or, past the parser, the one-line error of a
    missing checkpoint (status 2): never another exception. The checkpoint is missing so that no model loads."""
    missing = tmp_path_factory.getbasetemp() / "no-such-checkpoint.pt"
    argv = ["--checkpoint", str(missing)] + [item for pair in options for item in pair] + ["--", text]
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr):
        try:
            status = translate.main(argv)
        except SystemExit as exit_:
            assert exit_.code == 2, stderr.getvalue()
            return
    assert status == 2, stderr.getvalue()
    assert stderr.getvalue().count("\n") == 1 and stderr.getvalue().startswith("error: "), stderr.getvalue()

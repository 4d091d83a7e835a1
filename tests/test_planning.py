"""Planning a conversion (pinyin_hanzi/decoding/planning.py): every reading the planner hands the model fits the model."""

from __future__ import annotations

from pinyin_hanzi.decoding.planning import Planner
from pinyin_hanzi.decoding.settings import TypingOptions

from conftest import untrained_converter

# A run of ambiguous pieces: "be" is be or b* e, a lone "e" e or e*, so readings differ in length; and a
# line found by fuzzing the service, whose window's longer readings had 17 tokens for a model of 16 positions.
AMBIGUOUS = [" ".join(["be"] * 40), "xian " * 30 + "e", "w o be n a e " * 8,
             "üpā\x7fp!üfw\x7fhǎａ'be\x00v国2bexl\x00r你r.ａāǎü,b' t3\"😀,你\td\"ā😀d\u200b😀ch"]


def test_every_reading_of_every_chunk_fits_the_window():
    """Chunks are cut by each piece's longest reading: cut by the first one, a chunk of a full window had
    readings one or two tokens longer, past the model's positions (a ValueError, a 500 from the service)."""
    for window in (3, 8, 15, 32):
        planner = Planner(window=window, clause_end=True, syllable_lm=None, split_penalty=3.0, reading_margin=8.0)
        plan = planner.plan(AMBIGUOUS, 4, False, TypingOptions(prefixes=True))
        longest = max(len(tokens) for tokens, _ in plan.readings)
        assert longest <= window + 1, (window, longest)  # + the virtual clause end


def test_a_model_whose_window_is_its_positions_converts_ambiguous_lines():
    converter = untrained_converter(prefixes=True)  # 16 positions: a window of 15 and the clause end
    assert converter.planner.window == converter.model.config.max_positions - 1
    found = converter.convert_lines(AMBIGUOUS, beam=2, nbest=2)
    assert len(found) == len(AMBIGUOUS) and all(candidates for candidates in found)

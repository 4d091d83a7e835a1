"""The service's estimate of a request's decoding work (pinyin_hanzi/serving/request_cost.py): what makes a line cost more
is what makes the model take longer (measured in docs/serving.md), and the estimate stops once over budget."""

from __future__ import annotations

from pinyin_hanzi.serving.request_cost import CostModel

SHIPPED = CostModel(window=32, prefix_beam=16, prefixes=True)  # how the shipped model reads input


def cost(line: str, beam: int = 5, model: CostModel = SHIPPED) -> float:
    return model.line_costs([line], beam)[0]


def test_more_syllables_and_a_wider_beam_cost_more():
    assert 0 < cost("ni hao") < cost("ni hao ma") < cost("wo men ming tian zao shang ba dian jian")
    assert cost("ni hao", beam=1) < cost("ni hao", beam=5) < cost("ni hao", beam=16)


def test_abbreviations_cost_more_than_the_syllables_they_stand_for():
    """An abbreviated syllable widens the search to the prefix beam and its candidates to every syllable it
    begins: b j costs several times bei jing."""
    assert cost("b j") > 3 * cost("bei jing")
    assert cost("wmmtzsbdj") > 3 * cost("wo men mei tian zao shang ba dian jiu")
    assert cost("b j", beam=1) < cost("b j", beam=2)  # greedy search is not widened
    full_pinyin_only = CostModel(window=32, prefix_beam=16, prefixes=False)
    assert cost("b j", model=full_pinyin_only) == 0  # without prefixes the letters pass through as typed


def test_text_without_pinyin_costs_nothing_and_line_ends_split_a_line():
    assert cost("2024, 3.5? 你好！") == 0 and cost("") == 0
    assert cost("ni hao\nxie xie") == cost("ni hao") + cost("xie xie")


def test_a_long_line_is_counted_window_by_window():
    line = " ".join(["ni hao"] * 40)  # 80 syllables: three windows of 32
    assert cost(line) > 2 * cost(" ".join(["ni hao"] * 16))


def test_the_estimate_stops_after_the_line_that_passes_the_budget():
    lines = ["wo men ming tian zao shang ba dian jian"] * 100
    one = cost(lines[0])
    costs = SHIPPED.line_costs(lines, 5, budget=10 * one - 1)
    assert len(costs) == 10 and sum(costs) > 10 * one - 1
    assert len(SHIPPED.line_costs(lines, 5)) == 100

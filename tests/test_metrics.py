import pytest

from pinyin_hanzi.metrics import conversion_scores, edit_distance


def test_edit_distance():
    assert edit_distance("", "") == 0
    assert edit_distance("你好", "你好") == 0
    assert edit_distance("你号", "你好") == 1
    assert edit_distance("你", "你好") == 1 and edit_distance("你好吗", "你好") == 1
    assert edit_distance("abcd", "bcda") == 2


def test_conversion_scores():
    scores = conversion_scores(["你好", "我门去"], ["你好", "我们去"])
    assert scores["char_accuracy"] == pytest.approx(4 / 5)
    assert scores["cer"] == pytest.approx(1 / 5)
    assert scores["exact"] == pytest.approx(1 / 2)
    assert scores["sentences"] == 2 and scores["characters"] == 5
    with pytest.raises(ValueError):
        conversion_scores(["a"], [])


def test_typed_forms():
    from pinyin_hanzi.metrics import typed

    tokens = ["di", "4", "ge", "ren", "，", "xi", "an"]
    assert typed(tokens, "第4个人，西安") == "di 4 ge ren ， xi an"
    assert typed(tokens, "第4个人，西安", unsegmented=True) == "di 4geren，xian"
    tokens = ["zai", "T", "X", "xing", "P", "y", "t", "h", "o", "n", "o"]
    assert typed(tokens, "在TX型Python哦", unsegmented=True) == "zai TX xing Python o"

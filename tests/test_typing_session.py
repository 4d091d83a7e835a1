"""bench/typing_session.py without its data, model or libime: clauses cut from text and from a source's test
split, which documents are typed (eval and dev), the CER sums, ratios and intervals, the ours loop with a
converter that remembers what it was taught, and libime's session protocol through a stand-in script."""

from __future__ import annotations

import importlib.util
import sys
from collections import Counter
from types import SimpleNamespace

import pytest
from conftest import ROOT
from pinyin_hanzi.config import DecodeConfig
from pinyin_hanzi.data.examples import Example, split_of
from pinyin_hanzi.data.sources import Document

SCRIPT = ROOT / "bench" / "typing_session.py"
_spec = importlib.util.spec_from_file_location("typing_session", SCRIPT)
typing_session = importlib.util.module_from_spec(_spec)
sys.modules["typing_session"] = typing_session  # dataclasses look their module up while the class is made
_spec.loader.exec_module(typing_session)


def clause(hanzi: str) -> Example:
    (found,) = typing_session.document_clauses([hanzi], Counter())
    return found


def test_clauses_are_hanzi_runs_of_two_or_more_annotated_and_the_rest_is_counted():
    skipped = Counter()
    lines = ["你好，银行！Python 3个，长大了", "他說們這個國家", "", "我们去𠀂吧。"]
    clauses = typing_session.document_clauses(lines, skipped)
    assert [(c.hanzi, " ".join(c.tokens)) for c in clauses] == [
        ("你好", "ni hao"), ("银行", "yin hang"), ("长大了", "zhang da le")]  # 个 alone is no clause
    assert skipped == {"traditional-script line": 1, "hanzi without a pinyin reading": 1}


def documents(*lengths: int) -> list:
    return [(f"d{number}", [clause("你好")] * length) for number, length in enumerate(lengths)]


def test_sessions_take_the_first_clauses_of_long_documents_in_source_order():
    docs = documents(3, 1, 5, 4, 2)
    chosen = typing_session.sessions("pd2013", docs, 3, 2)
    assert len(chosen) == 2 and all(len(document) == 3 for _, document in chosen)
    names = [name for name, _ in chosen]
    assert set(names) <= {"d0", "d2", "d3"} and names == sorted(names)  # short ones skipped, order kept
    assert typing_session.sessions("pd2013", docs, 3, 2) == chosen  # the same every run
    assert len(typing_session.sessions("pd2013", docs, 3, 10)) == 3


def test_novels_are_cut_into_blocks_of_consecutive_clauses():
    book = [clause(text) for text in ("你好", "银行", "长大", "北京", "天气")]
    chosen = typing_session.sessions("novels", [("book", book)], 2, 10)
    assert chosen == [("book#1", book[0:2]), ("book#2", book[2:4])]  # the short tail is left out


def test_dev_takes_the_next_documents_in_the_same_ranking_disjoint_from_eval():
    def names(kind, docs, select):
        return [name for name, _ in typing_session.sessions(kind, docs, 3, 5, select)]

    docs = documents(*[3] * 12)
    evaluated, dev = names("pd2013", docs, "eval"), names("pd2013", docs, "dev")
    assert len(evaluated) == len(dev) == 5 and not set(evaluated) & set(dev)
    first_ten = [name for name, _ in typing_session.sessions("pd2013", docs, 3, 10)]
    assert set(evaluated) | set(dev) == set(first_ten) and dev == [n for n in first_ten if n not in evaluated]
    source = [("tatoeba", [clause("你好")] * 40)]  # one document cut into 13 blocks
    assert not set(names("tatoeba", source, "eval")) & set(names("tatoeba", source, "dev"))


# Of these lines' clause examples, split_of puts 你好， 世界！ 银行在长安街上。 学生们在教室里读书。 花都开了。 in
# the test split at these shares (the others in train or valid); 你好， and 花都开了。 come twice.
HELD_OUT = SimpleNamespace(valid_per_mille=100, test_per_mille=400, max_len=32)
SOURCE_LINES = ["我们去北京吧。你好，世界！", "今天天气很好，银行在长安街上。", "妈妈买了三斤苹果。我们去北京吧。",
                "他每天骑自行车上班，我想喝一杯茶。", "学生们在教室里读书。春天来了，花都开了。", "你好，花都开了。"]


def test_a_sources_test_clauses_are_the_hanzi_runs_of_its_test_examples_each_once_in_order():
    skipped = Counter()
    clauses = typing_session.held_out_clauses([Document("text", SOURCE_LINES)], HELD_OUT, skipped)
    assert [c.hanzi for c in clauses] == ["你好", "世界", "银行在长安街上", "学生们在教室里读书", "花都开了"]
    assert all(split_of(text, HELD_OUT) == "test" for text in ("你好，", "世界！", "银行在长安街上。"))
    assert split_of("我们去北京吧。", HELD_OUT) == "train" and split_of("今天天气很好，", HELD_OUT) == "valid"
    assert " ".join(clauses[2].tokens) == "yin hang zai chang an jie shang"  # the example's own syllables
    assert skipped["test example seen before"] == 2


def test_a_documents_own_split_decides_and_people_s_daily_is_read_as_tagged_words():
    tagged = ["迈向/v  充满/v  希望/n  的/u  新/a  世纪/n  ——/w  一九九八年/t  新年/t  讲话/n  （/w  附/v  图片/n  １/m  张/q  ）/w"]
    clauses = typing_session.held_out_clauses([Document("pd", tagged, split="test")], HELD_OUT, Counter())
    assert [c.hanzi for c in clauses] == ["迈向充满希望的新世纪", "一九九八年新年讲话", "附图片"]
    assert typing_session.held_out_clauses([Document("text", SOURCE_LINES, split="train")], HELD_OUT, Counter()) == []


def test_the_held_out_kinds_are_chosen_only_by_name_and_a_history_weight_reaches_the_converter(monkeypatch):
    assert typing_session.parse_args([]).kinds == ["novels", "pd2013", "libreoffice", "manpages"]
    args = typing_session.parse_args(["--kinds", "pd1998,tatoeba", "--engines", "ours", "--history-weight", "2.5"])
    assert args.kinds == ["pd1998", "tatoeba"] and args.select == "eval"
    with pytest.raises(SystemExit):
        typing_session.parse_args(["--history-weight", "1000"])
    loaded = SimpleNamespace(decode=DecodeConfig(), learn=None)
    monkeypatch.setattr("pinyin_hanzi.cli.load_converter", lambda checkpoint: loaded)
    assert typing_session.load_ours(args).decode.history_weight == 2.5


class RememberingConverter:
    """Knows no word until taught one: converts a typed clause to a committed text with that pinyin."""

    READINGS = {"你好": "ni hao", "银行": "yin hang", "长大": "zhang da"}

    def __init__(self):
        self.learned: set[str] = set()

    def convert(self, typed: str) -> str:
        known = [text for text in self.learned if self.READINGS[text] == typed]
        return known[0] if known else "错" * len(typed.split())

    def learn(self, text: str) -> None:
        self.learned.add(text)

    def forget(self) -> None:
        self.learned.clear()


def test_ours_learns_within_a_document_forgets_between_them_and_static_never_learns():
    first = [clause("你好"), clause("银行"), clause("你好")]
    second = [clause("你好"), clause("长大"), clause("长大")]
    docs = [("a", first), ("b", second)]
    outputs = typing_session.type_documents(docs, RememberingConverter(), None)
    assert outputs.conversions["ours_learning"] == [["错错", "错错", "你好"], ["错错", "错错", "长大"]]
    assert outputs.conversions["ours_static"] == [["错错"] * 3] * 2
    scores = typing_session.kind_scores(docs, outputs)
    assert scores["characters"] == 12 and scores["clauses"] == 6
    assert scores["cer"]["ours_static"] == 1.0
    assert scores["cer"]["ours_learning"] == pytest.approx(8 / 12, abs=1e-5)
    assert scores["ratios"]["ours_learning/ours_static"] == pytest.approx(8 / 12, abs=1e-4)
    learning = scores["learning_vs_static"]  # learning - static, both documents better
    assert learning["difference"] == pytest.approx(-4 / 12, abs=1e-5)
    assert (learning["better"], learning["worse"]) == (2, 0)
    assert -1 <= learning["interval"][0] <= learning["difference"] <= learning["interval"][1] <= 0
    assert scores["cer"]["libime_learning"] is None and scores["ratios"]["ours_learning/libime_learning"] is None


def test_without_learn_only_the_static_column_is_measured():
    class StaticConverter:
        def convert(self, typed: str) -> str:
            return "你好" if typed == "ni hao" else "错" * len(typed.split())

    docs = [("a", [clause("你好"), clause("银行")])]
    outputs = typing_session.type_documents(docs, StaticConverter(), None)
    assert set(outputs.conversions) == {"ours_static"}
    scores = typing_session.kind_scores(docs, outputs)
    assert scores["cer"] == {"ours_static": 0.5, "ours_learning": None, "libime_static": None, "libime_learning": None}
    assert "learning_vs_static" not in scores and "interval" not in scores


def test_overall_pools_the_kinds_characters_and_ratios_compare_error_counts():
    kinds = {"a": {"documents": 1, "clauses": 2, "characters": 10,
                   "errors": {"ours_static": 4, "ours_learning": 2, "libime_static": 5, "libime_learning": 4}},
             "b": {"documents": 2, "clauses": 3, "characters": 30,
                   "errors": {"ours_static": 2, "ours_learning": 1, "libime_static": 3, "libime_learning": 0}}}
    overall = typing_session.overall_scores(kinds)
    assert overall["characters"] == 40 and overall["cer"]["ours_learning"] == pytest.approx(3 / 40)
    assert overall["ratios"] == {"ours_learning/libime_learning": 0.75, "ours_learning/ours_static": 0.5,
                                 "libime_learning/libime_static": 0.5}
    assert typing_session.ratios(kinds["b"]["errors"])["ours_learning/libime_learning"] is None  # no libime error


FAKE_LIBIME = """#!{python}
import sys
learn = sys.argv[1:] != ["static"]
taught = set()
for line in sys.stdin:
    pinyin, gold = line.rstrip("\\n").split("\\t")
    print(gold if gold in taught else "错" * (pinyin.count("'") + 1), flush=True)
    if learn:
        taught.add(gold)
print(f"learned {{len(taught)}} by selection, 0 as characters", file=sys.stderr)
"""


def test_libime_sessions_get_apostrophes_static_mode_and_report_what_they_learned(tmp_path):
    binary = tmp_path / "libime_session"
    binary.write_text(FAKE_LIBIME.format(python=sys.executable), encoding="utf-8")
    binary.chmod(0o755)
    docs = [("a", [clause("你好"), clause("你好"), clause("银行")])]
    outputs = typing_session.type_documents(docs, None, str(binary))
    assert outputs.conversions["libime_static"] == [["错错", "错错", "错错"]]
    assert outputs.conversions["libime_learning"] == [["错错", "你好", "错错"]]
    assert outputs.notes["libime learned by selection"] == 2
    dump = typing_session.dump_rows("pd2013", docs, outputs)
    assert dump[1].split("\t") == ["pd2013", "a", "1", "ni hao", "你好", "", "", "错错", "你好"]


def test_a_missing_libime_is_one_line_unless_only_ours_runs(tmp_path, capsys):
    assert typing_session.main(["--engines", "libime", "--libime", str(tmp_path / "none")]) == 2
    assert capsys.readouterr().err == "needs libime_session: bash ../shared/peers/build.sh /tmp/peers\n"

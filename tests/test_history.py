"""The user history (lm/history.py: committed text, its file) and its cache model (lm/history_lm.py), through
the API and the CLI: a word learned once is converted right the next time, forget() forgets it, the file
survives a kill -9 while it is saved, and a damaged file is one error line and left as it was."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

from conftest import FRESH_ENV, ROOT
from pinyin_hanzi.data.vocab import Vocab
from pinyin_hanzi.errors import DataError, OutputError
from pinyin_hanzi.lm import history as history_module
from pinyin_hanzi.lm.history import HEADER, History, clauses_of
from pinyin_hanzi.lm import history_lm as history_module_lm
from pinyin_hanzi.lm.history_lm import HistoryLM

SPECIALS = ["<pad>", "<s>", "</s>", "<unk>"]


def _model(text: str = "甲乙丙丁化石燃料核武器和") -> tuple[HistoryLM, Vocab]:
    vocab = Vocab(SPECIALS + sorted(set(text)))
    return HistoryLM(vocab), vocab


def test_commits_are_cut_into_clauses_with_a_hanzi_each():
    assert clauses_of("化石燃料，核武器。\nabc\n  你好  ") == ["化石燃料，", "核武器。", "你好"]
    assert clauses_of("hello, world") == [] and clauses_of("") == []
    long = "好" * (history_module.MAX_CLAUSE + 5)
    assert [len(clause) for clause in clauses_of(long)] == [history_module.MAX_CLAUSE, 5]


def test_the_cache_model_is_witten_bell_over_the_committed_text_and_zero_elsewhere():
    model, vocab = _model()
    history = History()
    history.listen(model)
    history.learn("甲乙甲丙")
    ids = vocab.ids
    start, after_jia = [1, 1], [1, ids["甲"]]
    context = torch.tensor([after_jia, [ids["丁"], ids["甲"]], [ids["乙"], ids["甲"]], start])
    candidates = torch.tensor([[ids["乙"], ids["丙"], ids["丁"], ids["甲"]]] * 4)
    probs = model.cache_probs(context, candidates)
    # after 甲: 乙 once, 丙 once (2 seen, 2 distinct): 1/4 each; 丁甲 never seen: the same; after 乙甲 only 丙
    # (1 seen, 1 distinct): half the order below, plus 1/2
    assert np.allclose(probs, [[0.25, 0.25, 0, 0], [0.25, 0.25, 0, 0], [0.125, 0.625, 0, 0], [0, 0, 0, 0]])
    scores = model.log_prob(context, candidates)
    # at a clause's start: the provisional credit of a committed character; none for 丁, never committed
    assert (scores[3, :2] > 0).all() and scores[3, 2] == 0 and scores[3, 3] > 0
    # after 甲: 乙 and 丙 followed it and keep both terms; 丁 and 甲 never did: 甲's credit is taken back
    assert (scores[0, :2] > scores[3, :2]).all() and scores[0, 2] == -scores[3, 3] and scores[0, 3] == 0
    assert model._provisional(np.array([1]), candidates[:1].numpy(), None)[0, 2] == 0


def test_the_bound_forgets_the_oldest_and_the_counts_follow_what_is_kept():
    model, vocab = _model()
    history = History(max_clauses=2)
    history.listen(model)
    for text in ("甲乙", "丙丁", "化石"):
        history.learn(text)
    assert list(history.clauses) == ["丙丁", "化石"]
    fresh, _ = _model()
    fresh.added(list(history.clauses))
    assert np.array_equal(model.unigrams, fresh.unigrams) and len(model) == len(fresh) == 4
    assert model.totals[1] == fresh.totals[1] and model.grams[1] == fresh.grams[1]
    assert model.distinct[2] == fresh.distinct[2]
    history.learn("甲乙，丙丁，化石燃料")  # one commit past the bound alone keeps its last clauses
    assert list(history.clauses) == ["丙丁，", "化石燃料"] and len(model) == 6
    assert history.forget() == 2 and len(model) == 0 and not model.grams[1] and not model.unigrams.any()
    assert not model.totals[2] and not model.distinct[2]


def test_a_history_file_round_trips_and_keeps_its_format(tmp_path):
    path = tmp_path / "history.txt"
    history = History(path)
    history.learn("化石燃料的燃烧，核武器")
    history.close()
    text = path.read_text(encoding="utf-8")
    assert text.splitlines()[0] == HEADER and text.splitlines()[2:] == ["化石燃料的燃烧，", "核武器"]
    again = History(path)
    assert list(again.clauses) == ["化石燃料的燃烧，", "核武器"]
    assert again.forget("燃烧") == 1 and list(again.clauses) == ["核武器"]
    again.close()
    assert path.read_text(encoding="utf-8").splitlines()[2:] == ["核武器"]


@pytest.mark.parametrize("content, message", [
    (b"\xff\xfe\x00junk", "is damaged: not UTF-8"),
    ("我们去北京吧\n".encode(), "is not a pinyin_hanzi history"),
    (b"", "is not a pinyin_hanzi history"),
])
def test_a_damaged_or_foreign_file_is_one_error_and_left_as_it_was(tmp_path, content, message):
    path = tmp_path / "history.txt"
    path.write_bytes(content)
    with pytest.raises(DataError, match=message) as raised:
        History(path)
    assert "\n" not in str(raised.value) and path.read_bytes() == content
    directory = tmp_path / "folder"
    directory.mkdir()
    with pytest.raises(DataError, match="is a directory"):
        History(directory)


def test_one_process_owns_a_history_file(tmp_path):
    path = tmp_path / "history.txt"
    first = History(path)
    with pytest.raises(OutputError, match="in use by process"):
        History(path)
    first.close()
    History(path).close()


def test_learning_saves_in_the_background_atomically(tmp_path, monkeypatch):
    monkeypatch.setattr(history_module, "SAVE_DELAY", 0.05)
    path = tmp_path / "history.txt"
    history = History(path)
    history.learn("核武器")
    deadline = time.monotonic() + 10
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert path.read_text(encoding="utf-8").splitlines()[2:] == ["核武器"]
    assert [name.name for name in tmp_path.iterdir() if name.name.endswith(".tmp")] == []
    history.close()


KILLED_WRITER = """
import sys
from pinyin_hanzi.lm.history import History
history = History(sys.argv[1])
for index in range(10**6):
    history.learn("第%d句话，化石燃料" % index)
    history.save()
"""


def test_a_history_file_survives_kill_9_during_saves(tmp_path):
    path = tmp_path / "history.txt"
    for attempt in range(3):
        process = subprocess.Popen([sys.executable, "-c", KILLED_WRITER, str(path)], env=FRESH_ENV, cwd=ROOT)
        deadline = time.monotonic() + 30
        while not path.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.05 * attempt)
        os.kill(process.pid, signal.SIGKILL)
        process.wait()
        history = History(path)  # the old file or the new one, whole: it loads
        clauses = list(history.clauses)
        history.close()
        assert clauses and all(clause.endswith(("，", "化石燃料")) for clause in clauses)


def test_a_converter_learns_a_word_once_and_forgets_it(shipped_converter):
    converter = shipped_converter  # shared: its history is emptied again below, whatever happens
    try:
        assert converter.convert("he wu qi") == "和武器"  # the shipped model's mistake, learned from below
        assert converter.search_settings().fusion.models[-1][0] is not converter.history_lm  # empty: not fused
        assert converter.learn("核武器。") == ["核武器。"]
        assert converter.search_settings().fusion.models[-1][0] is converter.history_lm
        assert converter.convert("he wu qi") == "核武器"
        assert converter.convert("wo men qu bei jing ba") == "我们去北京吧"  # what it knew stays
        assert converter.forget("武器") == 1 and converter.convert("he wu qi") == "和武器"
        converter.learn("核武器")
        assert converter.forget() == 1 and converter.convert("he wu qi") == "和武器"
        for bad in (None, b"bytes", 3):
            with pytest.raises(DataError, match="learn"):
                converter.learn(bad)
        with pytest.raises(DataError, match="forget"):
            converter.forget("")
    finally:
        converter.forget()


def _translate(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "translate.py"), *args], input=stdin, capture_output=True,
                          text=True, env=FRESH_ENV, cwd=ROOT, timeout=120)


def test_a_session_prints_each_conversion_before_its_line_is_learned_and_keeps_the_history(tmp_path):
    session, history = tmp_path / "session.tsv", tmp_path / "history.txt"
    session.write_text("he wu qi\t核武器\nhe wu qi\t核武器\n\nni hao\n", encoding="utf-8")
    result = _translate("--session", str(session), "--history", str(history))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["和武器", "核武器", "", "你好"]
    assert history.read_text(encoding="utf-8").splitlines()[2:] == ["核武器", "核武器"]
    again = _translate("--session", "-", "--history", str(history), stdin="he wu qi\n")  # loaded from the file
    assert again.stdout == "核武器\n" and history.read_text(encoding="utf-8").splitlines()[2:] == ["核武器"] * 2
    forgot = _translate("--history", str(history), "--forget")
    assert forgot.returncode == 0 and "forgot 2 clause(s)" in forgot.stderr
    assert history.read_text(encoding="utf-8").splitlines()[0] == HEADER and len(history.read_text().splitlines()) == 2
    history.write_bytes(b"not a history\n")
    damaged = _translate("--history", str(history), "he wu qi")
    assert damaged.returncode == 2 and damaged.stderr.strip().splitlines()[-1].startswith("error: ")
    assert "Traceback" not in damaged.stderr and history.read_bytes() == b"not a history\n"
    assert _translate("--forget").returncode == 2  # --forget needs --history


def test_the_prompt_learns_a_correction_and_an_accepted_choice(tmp_path):
    import pty

    controller, terminal = pty.openpty()
    process = subprocess.Popen([sys.executable, str(ROOT / "translate.py"), "--history", str(tmp_path / "h.txt")],
                               stdin=terminal, stdout=terminal, stderr=terminal, cwd=ROOT, env=FRESH_ENV)
    os.close(terminal)
    output = b""

    def until(text: str, times: int = 1) -> None:
        nonlocal output
        deadline = time.monotonic() + 60
        while output.count(text.encode()) < times and time.monotonic() < deadline:
            output += os.read(controller, 4096)

    try:
        until("pinyin> ")
        os.write(controller, "he wu qi\n".encode())
        until("和武器")
        os.write(controller, "核武器\n".encode())  # a correction typed in hanzi
        until("learned: 核武器")
        os.write(controller, "he wu qi\n".encode())
        until("1 核武器")
        os.write(controller, b"\n")  # Enter accepts the first
        until("learned: 核武器", times=2)
        os.write(controller, b"\x04")
        assert process.wait(timeout=60) == 0
    finally:
        process.kill()
        os.close(controller)
    assert "Traceback" not in output.decode(errors="replace")
    assert (tmp_path / "h.txt").read_text(encoding="utf-8").splitlines()[2:] == ["核武器", "核武器"]


def test_a_full_disk_at_save_is_one_error_and_keeps_the_file_and_what_was_learned(tmp_path, monkeypatch):
    import errno

    path = tmp_path / "history.txt"
    history = History(path)
    history.learn("核武器")
    history.save()
    before = path.read_bytes()
    history.learn("化石燃料")

    def full(descriptor):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(history_module.os, "fsync", full)
    with pytest.raises(OutputError, match="cannot save history .*: disk full"):
        history.save()
    assert path.read_bytes() == before and not list(tmp_path.glob(".*.tmp"))
    monkeypatch.undo()
    history.close()  # what failed to be saved is saved at the next chance
    assert path.read_text(encoding="utf-8").splitlines()[2:] == ["核武器", "化石燃料"]


def test_the_reference_is_looked_up_only_where_the_cache_has_something_and_gives_the_dense_ratio():
    from pinyin_hanzi.lm.char_ngram import CharNgramLM

    model, vocab = _model()
    reference = CharNgramLM.count([vocab.encode(list("甲乙丙丁甲丙化石")), vocab.encode(list("核武器和"))], len(vocab))
    model.reference = reference
    history = History()
    history.listen(model)
    history.learn("甲乙甲丙，核武器")
    ids = vocab.ids
    context = torch.tensor([[1, ids["甲"]], [ids["乙"], ids["甲"]], [1, ids["核"]], [1, 1]])
    candidates = torch.tensor([[ids[char] for char in "乙丙丁武"]] * 4)
    probs = model.cache_probs(context, candidates)
    dense = np.log1p(model.kappa * probs / np.exp(reference.log_prob(context, candidates).numpy()))
    _, continued = model._context_counts(context.numpy(), candidates.numpy())
    provisional = model._provisional(context.numpy()[:, -1], candidates.numpy(), continued)
    in_context = model.log_prob(context, candidates).numpy() - provisional
    assert np.allclose(in_context, dense, atol=1e-5) and (dense[:3] > 0).sum() == 5 and (dense[3] == 0).all()


def test_clauses_counted_at_once_give_the_counts_of_clauses_counted_one_by_one():
    text = "甲乙丙丁化石燃料核武器和"
    clauses = ["".join(text[(i * 7 + j) % len(text)] for j in range(3 + i % 9)) + ("，" if i % 4 else "x丁")
               for i in range(600)]
    one_by_one, vocab = _model(text)
    for clause in clauses:
        one_by_one.added([clause])
    at_once, _ = _model(text)
    at_once.added(clauses)
    assert sum(map(len, clauses)) >= history_module_lm.BULK_CHARACTERS
    assert np.array_equal(one_by_one.unigrams, at_once.unigrams) and len(one_by_one) == len(at_once)
    for k in (1, 2):
        assert one_by_one.grams[k] == at_once.grams[k] and one_by_one.totals[k] == at_once.totals[k]
        assert one_by_one.distinct[k] == at_once.distinct[k]


def test_the_read_ahead_shares_come_from_committed_pairs_and_triples_that_fit_the_typed_lists():
    model, vocab = _model()
    history = History()
    history.listen(model)
    ids = vocab.ids
    # three positions; at 0 two homophones 甲 and 乙 (乙 never committed), then 丙 or 丁, then 化
    lists = torch.tensor([[[ids["甲"], ids["乙"]], [ids["丙"], ids["丁"]], [ids["化"], 0]]])
    real = lists != 0
    assert model.span_shares(lists.numpy(), real.numpy()) is None  # an empty history knows nothing
    history.learn("甲丙化")
    history.learn("甲丁")
    shares, weights = model.span_shares(lists.numpy(), real.numpy())
    # at 0: pairs 甲丙 and 甲丁 (1 each) and the triple 甲丙化 (counted twice) fit; 乙 never began one
    assert np.allclose(shares[0, 0], [1, 0]) and np.isclose(weights[0, 0], 4 / (4 + history_module_lm.SPAN_PRIOR))
    # at 1: 丙化 fits (丁 was never followed by 化); nothing reads ahead of the last position
    assert np.allclose(shares[0, 1], [1, 0]) and weights[0, 2] == 0
    history.forget("甲丙化")
    shares, weights = model.span_shares(lists.numpy(), real.numpy())
    assert np.isclose(weights[0, 0], 1 / (1 + history_module_lm.SPAN_PRIOR)) and weights[0, 1] == 0
    history.forget()
    assert model.span_shares(lists.numpy(), real.numpy()) is None and not model._followers


def test_the_read_ahead_mixes_into_the_network_where_it_knows_something_and_nowhere_else():
    from pinyin_hanzi.decoding.search import ReadAhead
    shares = torch.tensor([[[1.0, 0.0], [0.0, 0.0]]], dtype=torch.float64)
    ahead = ReadAhead(shares, torch.tensor([[0.5, 0.0]], dtype=torch.float64))
    log_probs = torch.tensor([[[0.2, 0.8]]]).log()
    assert torch.allclose(ahead.mix(log_probs, 0, 0).exp(), torch.tensor([[[0.6, 0.4]]]))
    assert torch.equal(ahead.mix(log_probs, 1, 0), log_probs)  # μ 0: the network's own
    assert torch.equal(ahead.mix(log_probs[:0], 0, 1), log_probs[:0])  # the input has finished

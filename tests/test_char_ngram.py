import math

import numpy as np
import pytest
import torch

from pinyin_hanzi.data.vocab import BOS_ID
from pinyin_hanzi.lm.char_ngram import CharNgramLM

V = 12  # ids 0-3 are specials (<pad>, <s>, </s>, <unk>), 4-11 characters
SENTENCES = [[4, 5, 6], [4, 5, 7], [4, 5, 6, 8], [9, 5, 6], [10, 11], [4, 10, 11, 5]]


def _all_next(lm: CharNgramLM, context: list[int]) -> torch.Tensor:
    """P(every id | context), (V,)."""
    return lm.log_prob(torch.tensor([context]), torch.arange(V)[None]).exp()[0]


@pytest.mark.parametrize("order", [1, 2, 3, 4])
def test_probabilities_of_every_next_character_sum_to_one_in_seen_and_unseen_contexts(order):
    lm = CharNgramLM.count(SENTENCES, V, order)
    for context in ([BOS_ID, BOS_ID, BOS_ID], [BOS_ID, BOS_ID, 4], [BOS_ID, 4, 5], [6, 4, 5], [11, 11, 11]):
        total = float(_all_next(lm, context).sum())
        assert abs(total - 1.0) < 1e-5, (order, context, total)


def test_a_model_of_no_text_has_empty_tables_and_still_gives_every_character_a_probability():
    lm = CharNgramLM.count([], V, 3)
    assert lm.size() == 0
    assert abs(float(_all_next(lm, [BOS_ID, 4]).sum()) - 1.0) < 1e-5


def test_kneser_ney_values_by_hand():
    lm = CharNgramLM.count([[4, 5], [4, 5], [4, 6]], V, order=2, discount=0.75)
    # Unigrams: continuation counts (distinct left neighbours): 4 <- {<s>}, 5 <- {4}, 6 <- {4}: 1 each of 3,
    # add-one over V ids.
    unigram = {4: 2 / (3 + V), 5: 2 / (3 + V), 6: 2 / (3 + V), 7: 1 / (3 + V)}
    # After 4: seen 3 times, followed by 2 distinct characters (5 twice, 6 once).
    expected = {5: (2 - 0.75 + 0.75 * 2 * unigram[5]) / 3, 6: (1 - 0.75 + 0.75 * 2 * unigram[6]) / 3,
                7: 0.75 * 2 * unigram[7] / 3}
    for char, probability in expected.items():
        assert math.isclose(math.exp(float(lm.log_prob(torch.tensor([[4]]), torch.tensor([[char]]))[0, 0])),
                            probability, rel_tol=1e-5)
    # An unseen context backs off to the unigrams alone.
    assert math.isclose(float(_all_next(lm, [7])[5]), unigram[5], rel_tol=1e-5)


def test_context_changes_the_prediction():
    lm = CharNgramLM.count(SENTENCES, V, order=3)
    after_4_5 = _all_next(lm, [4, 5])
    after_9_5 = _all_next(lm, [9, 5])
    assert int(after_4_5.argmax()) == 6 and after_4_5[7] > after_9_5[7]  # 4 5 7 was seen, 9 5 7 never
    assert lm.sentence_log_prob([4, 5, 6]) > lm.sentence_log_prob([4, 6, 5])


def test_state_dict_round_trip_is_exact_and_compact():
    lm = CharNgramLM.count(SENTENCES, V, order=3)
    state = lm.state_dict()
    assert all(table["last_ids"]["dtype"] == "int16" for table in state["tables"].values())
    again = CharNgramLM.from_state_dict(state)
    contexts = torch.tensor([[BOS_ID, BOS_ID], [4, 5], [9, 5], [11, 11]])
    candidates = torch.arange(V).expand(4, -1)
    assert torch.equal(lm.log_prob(contexts, candidates), again.log_prob(contexts, candidates))


def test_min_count_drops_rare_top_order_ngrams_and_their_empty_contexts():
    full = CharNgramLM.count(SENTENCES, V, order=3)
    pruned = CharNgramLM.count(SENTENCES, V, order=3, min_count=2)
    assert len(pruned.grams[3][0]) < len(full.grams[3][0]) and len(pruned.contexts[3][0]) < len(full.contexts[3][0])
    assert torch.equal(pruned.grams[2][0], full.grams[2][0])  # lower orders are kept whole
    kept = torch.tensor([[4, 5]]), torch.tensor([[6]])  # 4 5 6 was seen twice: the same probability
    assert torch.allclose(pruned.log_prob(*kept), full.log_prob(*kept))
    contexts, candidates = torch.tensor([[BOS_ID, BOS_ID], [4, 5], [10, 11]]), torch.arange(V).expand(3, -1)
    again = CharNgramLM.from_state_dict(pruned.state_dict())
    assert torch.equal(pruned.log_prob(contexts, candidates), again.log_prob(contexts, candidates))


def test_keys_that_do_not_fit_are_refused():
    with pytest.raises(ValueError, match="int64"):
        CharNgramLM.count(SENTENCES, 10**7, order=3)


def test_a_column_with_many_counts_past_int16_is_packed_whole_in_int32_and_read_back_exactly():
    lm = CharNgramLM.count([[4, 5]] * 40_000 + SENTENCES, V, order=2)
    state = lm.state_dict()
    assert state["tables"][2]["counts"]["dtype"] == "int32"  # 40,001 and more, in a short column: no exceptions
    again = CharNgramLM.from_state_dict(state)
    contexts, candidates = torch.tensor([[4], [BOS_ID], [11]]), torch.arange(V).expand(3, -1)
    assert torch.equal(lm.log_prob(contexts, candidates), again.log_prob(contexts, candidates))
    assert CharNgramLM.state_problem(state, V) is None  # what every checkpoint load runs on it


def test_a_few_counts_past_16_bits_are_listed_apart_and_the_column_stays_int16():
    """A few counts of 70,000 among thousands of small ones: an int16 column plus those values, read back
    exactly, instead of an int32 column twice the size."""
    v = 300
    pairs = [[a, b] for a in range(4, v, 3) for b in range(5, v, 7)]  # about 4,000 bigrams seen once or twice
    lm = CharNgramLM.count([[4, 5]] * 70_000 + pairs, v, order=2)
    stored = lm.state_dict()["tables"][2]["counts"]
    assert stored["dtype"] == "int16" and len(stored["zlib"]) < 2 * stored["length"] / 2  # deflated: mostly ones
    assert min(stored["wide"].tolist()) > 2**15 - 1 and 1 <= len(stored["at"]) <= 3  # 4 5, <s> 4, 5 </s>
    again = CharNgramLM.from_state_dict(lm.state_dict())
    assert torch.equal(again.grams[2][1], lm.grams[2][1])
    contexts, candidates = torch.tensor([[4], [BOS_ID], [11]]), torch.arange(v).expand(3, -1)
    assert torch.equal(lm.log_prob(contexts, candidates), again.log_prob(contexts, candidates))
    assert CharNgramLM.state_problem(lm.state_dict(), v) is None
    broken = lm.state_dict()
    broken["tables"][2]["counts"]["at"] = torch.tensor([10**6], dtype=torch.int32)  # points past the column
    assert "exceptions do not fit" in CharNgramLM.state_problem(broken, v)


@pytest.mark.parametrize("damage, message", [
    (lambda column: {**column, "zlib": column["zlib"][:-5]}, "does not hold"),  # cut short
    (lambda column: {**column, "zlib": b"not zlib at all"}, "corrupt"),
    (lambda column: {**column, "length": column["length"] - 1}, "does not hold"),  # more data than it claims
    (lambda column: {**column, "dtype": "float32"}, "not a 1-D integer tensor or a packed column"),
    (lambda column: column["zlib"], "not a 1-D integer tensor or a packed column"),
])
def test_a_damaged_packed_column_is_refused_in_one_line(damage, message):
    state = CharNgramLM.count(SENTENCES, V, order=3).state_dict()
    state["tables"][3]["counts"] = damage(state["tables"][3]["counts"])
    problem = CharNgramLM.state_problem(state, V)
    assert problem.startswith("cannot be read (order 3's table lacks one of") and message in problem and "\n" not in problem


def test_context_keys_are_stored_as_steps_and_older_files_with_plain_keys_still_load():
    lm = CharNgramLM.count(SENTENCES, V, order=3)
    state = lm.state_dict()
    assert "context_keys" not in state["tables"][3] and "context_key_steps" in state["tables"][3]
    older = {**state, "tables": {k: {**{n: c for n, c in table.items() if n != "context_key_steps"},
                                      "context_keys": lm.contexts[k][0].int()}
                                  for k, table in state["tables"].items()}}
    contexts, candidates = torch.tensor([[BOS_ID, BOS_ID], [4, 5], [9, 5]]), torch.arange(V).expand(3, -1)
    for stored in (state, older):
        again = CharNgramLM.from_state_dict(stored)
        assert torch.equal(lm.log_prob(contexts, candidates), again.log_prob(contexts, candidates))


def test_phrase_table_entries_are_counted_into_the_model_and_unknown_characters_left_out():
    from pinyin_hanzi.data.examples import Example
    from pinyin_hanzi.data.vocab import Vocab
    from pinyin_hanzi.lm.char_ngram import count_for, known_phrases

    vocab = Vocab(["<pad>", "<s>", "</s>", "<unk>", *"仗势欺人凌我们"])
    text = [Example(("wo", "men"), "我们"), Example(("ren",), "人"), Example(("qi",), "欺")]
    phrases = ["仗势欺人", "仗势凌人", "仗势欺汝"]  # 汝 is not in the vocabulary
    assert known_phrases(phrases, vocab) == ["仗势欺人", "仗势凌人"]
    plain = count_for(text, vocab, order=3, min_count=2)
    fused = count_for(text, vocab, order=3, min_count=2, phrases=phrases, phrase_copies=2)
    context, candidates = torch.tensor([vocab.encode("仗势")]), torch.tensor([vocab.encode("欺凌我")])
    plain_p, fused_p = plain.log_prob(context, candidates)[0], fused.log_prob(context, candidates)[0]
    assert fused.size() > plain.size()
    assert fused_p[0] > plain_p[0] + 1 and fused_p[1] > plain_p[1] + 1  # 欺 and 凌 now follow 仗势
    assert fused_p[2] < fused_p[0]  # and 我 does not
    a, b, c = vocab.encode("仗势欺")
    keys, counts = fused.grams[3]
    assert int(counts[keys == (a * len(vocab) + b) * len(vocab) + c]) == 2  # 2 copies of 仗势欺人, none of 仗势欺汝
    once = count_for(text, vocab, order=3, min_count=2, phrases=phrases, phrase_copies=1)
    assert once.log_prob(context, candidates)[0, 0] < fused_p[0]  # seen once: the trigram is pruned


def _weighted_sentences(seed: int, number: int = 300, characters: int = 30):
    """Random sentences over ids 4..characters-1 and how often each counts (0: a sentence no epoch trains on)."""
    import random

    rng = random.Random(seed)
    sentences = [[rng.randrange(4, characters) for _ in range(rng.randrange(1, 12))] for _ in range(number)]
    return sentences, [rng.randrange(0, 4) for _ in sentences]


def _blocks(sentences, weights, size: int = 37):
    """The sentences as a token store's blocks give them: (ids one after another, lengths, weights)."""
    import numpy as np

    for begin in range(0, len(sentences), size):
        part = sentences[begin : begin + size]
        yield (np.array([i for s in part for i in s]), np.array([len(s) for s in part]),
               np.array(weights[begin : begin + size]))


def _same(a, b) -> bool:
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[key], b[key]) for key in a)
    if isinstance(a, np.ndarray):
        return a.dtype == b.dtype and np.array_equal(a, b)
    return torch.equal(a, b) if isinstance(a, torch.Tensor) else a == b


def _lookup_tables(lm: CharNgramLM) -> dict:
    return {"unigrams": lm.unigram_log_probs, **dict(enumerate(lm._lookup_tables()))}


@pytest.mark.parametrize("order, min_count", [(1, 1), (2, 1), (3, 1), (3, 2), (4, 3)])
def test_counting_block_by_block_gives_the_model_counting_all_at_once_gives(order, min_count, tmp_path):
    """The bounded-memory count (blocks of a token store; past a budget of 50 keys, sorted runs spilled to
    disk and merged 8 rows per run at a time, at every order) is the same model, bit for bit, as counting
    every sentence at once, each as often as its weight; its temporary runs are gone afterwards."""
    from pinyin_hanzi.lm.char_ngram import count_from_blocks

    sentences, weights = _weighted_sentences(order * 10 + min_count)
    at_once = CharNgramLM.count([s for s, w in zip(sentences, weights) for _ in range(w)], 30, order, min_count)
    in_blocks = count_from_blocks(_blocks(sentences, weights), 30, order, min_count, spill_keys=50,
                                  spill_dir=tmp_path)
    assert _same(at_once.state_dict(), in_blocks.state_dict())
    assert _same(_lookup_tables(at_once), _lookup_tables(in_blocks))
    assert list(tmp_path.iterdir()) == []


def test_a_failed_count_leaves_no_runs_behind(tmp_path):
    from pinyin_hanzi.lm.char_ngram import count_from_blocks

    sentences, weights = _weighted_sentences(7)

    def failing():
        yield from _blocks(sentences, weights)
        raise OSError("the store went away")

    with pytest.raises(OSError, match="went away"):
        count_from_blocks(failing(), 30, 3, spill_keys=50, spill_dir=tmp_path)
    assert list(tmp_path.iterdir()) == []


def _sums_to_one(lm: CharNgramLM, contexts: list[list[int]], vocab_size: int) -> list[float]:
    log_probs = lm.log_prob(torch.tensor(contexts), torch.arange(vocab_size).expand(len(contexts), -1))
    assert bool(torch.isfinite(log_probs).all())
    return [float(total) for total in log_probs.double().exp().sum(1)]


@pytest.mark.parametrize("cap", [700, 150])  # 700: the top order pruned; 150: the orders below too
def test_a_capped_model_keeps_the_most_frequent_ngrams_and_stays_normalised(cap, tmp_path):
    """decode.lm_max_ngrams: rarest first, the top order's min count raised first (and where the orders
    below take the cap by themselves, theirs too); the kept n-grams are the most frequent of each order,
    Kneser-Ney's counts still those of the full text, and P(. | context) still sums to 1. Counted in memory
    or through spilled runs, the same model."""
    from pinyin_hanzi.lm.char_ngram import count_from_blocks, top_order_counts

    sentences, weights = _weighted_sentences(36, number=400, characters=20)
    text = [s for s, w in zip(sentences, weights) for _ in range(w)]
    full = CharNgramLM.count(text, 20, order=3)
    capped = CharNgramLM.from_top_counts(*top_order_counts(text, 20, 3), 20, order=3, max_ngrams=cap)
    assert capped.size() <= cap < full.size() and capped.size() > cap // 3
    assert capped.min_counts[3] > 1 and (capped.min_counts[2] > 1) == (cap == 150)
    for k in (2, 3):
        kept = set(capped.grams[k][0].tolist())
        full_keys, full_counts = full.grams[k]
        counts_kept = full_counts[[key in kept for key in full_keys.tolist()]]
        counts_dropped = full_counts[[key not in kept for key in full_keys.tolist()]]
        assert len(counts_dropped) == 0 or int(counts_kept.min()) > int(counts_dropped.max())
        assert torch.equal(capped.grams[k][1], counts_kept)  # the full text's counts
    contexts = [[BOS_ID, BOS_ID], [4, 5], [5, 4], [9, 9], [17, 6], [3, 3]]
    assert _sums_to_one(capped, contexts, 20) == pytest.approx([1.0] * len(contexts), abs=1e-4)
    assert _sums_to_one(full, contexts, 20) == pytest.approx([1.0] * len(contexts), abs=1e-4)
    common = max(set(map(tuple, text)), key=lambda s: text.count(list(s)))
    assert abs(capped.sentence_log_prob(common) - full.sentence_log_prob(common)) < 1.0
    spilled = count_from_blocks(_blocks(sentences, weights), 20, 3, max_ngrams=cap, spill_keys=40,
                                spill_dir=tmp_path)
    assert _same(capped.state_dict(), spilled.state_dict()) and spilled.min_counts == capped.min_counts
    assert _same(_lookup_tables(capped), _lookup_tables(spilled))
    again = CharNgramLM.from_state_dict(capped.state_dict())
    assert _same(_lookup_tables(capped), _lookup_tables(again))


def test_a_cap_the_model_fits_changes_nothing():
    from pinyin_hanzi.lm.char_ngram import top_order_counts

    sentences, _ = _weighted_sentences(3)
    full = CharNgramLM.count(sentences, 30, order=3, min_count=2)
    roomy = CharNgramLM.from_top_counts(*top_order_counts(sentences, 30, 3), 30, order=3, min_count=2,
                                        max_ngrams=full.size())
    assert roomy.min_counts == {2: 1, 3: 2} and _same(full.state_dict(), roomy.state_dict())


def _count_random_blocks() -> None:
    import numpy as np

    from pinyin_hanzi.lm.char_ngram import count_from_blocks

    rng = np.random.default_rng(0)
    blocks = ((rng.integers(4, 40, 500), np.full(100, 5), np.ones(100, np.int64)) for _ in range(20))
    count_from_blocks(blocks, 40, 3, examples=2000, spill_keys=300)


def test_counting_shows_a_progress_bar_on_a_terminal_and_none_elsewhere(capfd):
    """On a terminal, each phase of counting (the sentences, then each order's tables once runs were spilled)
    shows a tqdm bar with its rate; piped to a file or a log, nothing."""
    import fcntl
    import os
    import pty
    import struct
    import subprocess
    import sys
    import termios

    from conftest import ROOT, python_path

    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))  # a terminal 120 wide
    command = [sys.executable, "-c", "import test_char_ngram; test_char_ngram._count_random_blocks()"]
    environment = {**os.environ, "PYTHONPATH": python_path(ROOT, ROOT / "tests")}
    with subprocess.Popen(command, cwd=ROOT, env=environment, stderr=follower, stdout=subprocess.DEVNULL) as process:
        os.close(follower)
        shown = b""
        while True:
            try:
                data = os.read(leader, 4096)
            except OSError:  # the terminal closed with the process
                break
            if not data:
                break
            shown += data
    os.close(leader)
    assert process.returncode == 0, shown.decode(errors="replace")
    text = shown.decode(errors="replace")
    assert "counting 3-grams" in text and "sentences/s" in text and "2.00k/2.00k" in text
    assert "3-gram tables" in text and "2-gram tables" in text and "n-grams/s" in text
    _count_random_blocks()  # stderr a pipe (pytest's): no bar
    assert capfd.readouterr().err == ""


def test_entries_score_as_their_rows_lists_do():
    generator = torch.Generator().manual_seed(7)
    sentences = torch.randint(4, 25, (300, 9), generator=generator).tolist()
    for order in (1, 2, 3, 4):
        lm = CharNgramLM.count(sentences, vocab_size=25, order=order)
        context = torch.randint(2, 25, (5, max(order - 1, 1)), generator=generator)
        candidates = torch.randint(4, 25, (5, 7), generator=generator)
        rows = torch.tensor([0, 0, 3, 4, 4, 4, 1])
        columns = torch.tensor([0, 6, 2, 1, 3, 5, 4])
        entries = lm.log_prob_entries(context, rows, candidates[rows, columns])
        assert torch.equal(entries, lm.log_prob(context, candidates)[rows, columns])

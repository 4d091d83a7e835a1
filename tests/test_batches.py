import numpy as np
import pytest

from pinyin_hanzi.data.batches import (
    BatchStream,
    bucket_count,
    encode_split,
    hanzi_ids,
    prefix_ids,
    split_batch,
    token_budget_batches,
    training_abbreviations,
)
from pinyin_hanzi.data.examples import Example
from pinyin_hanzi.data.store import StoredSplit
from pinyin_hanzi.data.vocab import (
    BOS_ID,
    EOS_ID,
    PAD_ID,
    SPECIALS,
    UNK_ID,
    Vocab,
    build_vocabs,
    load_vocab,
    save_vocab,
)


def _split(lengths, copies=None) -> StoredSplit:
    """A split of examples of these lengths (their ids do not matter here)."""
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    return StoredSplit(np.full(offsets[-1], 5), np.full(offsets[-1], 6), offsets,
                       None if copies is None else np.array(copies, np.uint8))


def _example(text):
    from pinyin_hanzi.text.pinyin import hanzi_to_tokens

    return Example(tuple(hanzi_to_tokens(text)), text)


def test_special_tokens_have_fixed_ids_and_unknowns_map_to_unk():
    vocab = Vocab.build(["abca", "ab"])
    assert vocab.tokens[:4] == list(SPECIALS)
    assert (PAD_ID, BOS_ID, EOS_ID, UNK_ID) == (0, 1, 2, 3)
    assert vocab.tokens[4:] == ["a", "b", "c"]  # most frequent first
    assert vocab.encode("az") == [4, UNK_ID]
    with pytest.raises(ValueError):
        Vocab(["a", "b"])


def test_vocabularies_come_from_the_training_split_only():
    train = [_example("你好"), _example("世界")]
    test_only = _example("银行")
    pinyin_vocab, hanzi_vocab = build_vocabs(train)
    assert "你" in hanzi_vocab and "界" in hanzi_vocab
    assert "银" not in hanzi_vocab and "yin" not in pinyin_vocab
    source, target = encode_split([test_only], pinyin_vocab, hanzi_vocab).example(0)
    assert target.tolist() == [UNK_ID, UNK_ID] and source.tolist() == [UNK_ID, UNK_ID]


def test_min_char_count_drops_rare_characters():
    _, hanzi_vocab = build_vocabs([_example("你好"), _example("你们")], min_char_count=2)
    assert "你" in hanzi_vocab and "好" not in hanzi_vocab


def _epoch(lengths, copies, seed=3, epoch=0, budget=120):
    positions, bounds = token_budget_batches(np.array(lengths), None if copies is None else np.array(copies), budget,
                                             seed, epoch)
    return [positions[start:end].tolist() for start, end in bounds]


def test_token_budget_batches_cover_everything_once_within_budget():
    lengths = [1 + (i * 7) % 30 for i in range(500)]
    batches = _epoch(lengths, None)
    flat = sorted(index for batch in batches for index in batch)
    assert flat == list(range(500))
    for batch in batches:
        assert max(lengths[i] for i in batch) * len(batch) <= 120
        assert len({lengths[i] for i in batch}) == 1  # grouped by length: no padding inside a batch
    assert batches == _epoch(lengths, None)
    assert batches != _epoch(lengths, None, epoch=1)
    assert batches != _epoch(lengths, None, seed=4)


def test_length_buckets_give_one_shape_a_bucket_and_train_on_every_example():
    lengths = [1 + (i * 7) % 30 for i in range(500)]
    positions, bounds = token_budget_batches(np.array(lengths), None, 120, 3, 0, bucket=8)
    batches = [positions[start:end].tolist() for start, end in bounds]
    assert set(index for batch in batches for index in batch) == set(range(500))  # each at least once
    assert sum(map(len, batches)) - 500 < 4 * 15  # the fill-up: under one batch a bucket (4 buckets, <= 15 rows)
    for batch in batches:
        width = -(-max(lengths[i] for i in batch) // 8) * 8
        assert {-(-lengths[i] // 8) * 8 for i in batch} == {width} and len(batch) == 120 // width
    stream = BatchStream(_split(lengths), batch_tokens=120, seed=3, bucket=8)
    shapes = set()
    for _ in range(len(batches) + 5):  # into the next epoch
        epoch, indices = stream.next_indices()
        batch = stream.batch(epoch, indices)
        shapes.add(tuple(batch.source.shape))
        assert batch.n_target_tokens == stream.n_target_tokens(indices) == sum(lengths[i] for i in indices)
    assert shapes == {(15, 8), (7, 16), (5, 24), (3, 32)} and bucket_count(max(lengths), 8) == len(shapes)
    assert _epoch(lengths, None) != batches  # bucket 0: one length a batch, as before


def test_an_epoch_trains_on_each_example_as_often_as_its_copies_say():
    lengths = [1 + (i * 5) % 9 for i in range(200)]
    copies = [i % 4 for i in range(200)]  # 0: never (a weight below one), up to 3
    batches = _epoch(lengths, copies, budget=40)
    positions = sorted(p for batch in batches for p in batch)
    assert positions == list(range(sum(copies)))  # every time an example is trained on, once
    stream = BatchStream(_split(lengths, copies), batch_tokens=40, seed=3)
    examples = stream.example_of(positions)
    assert np.bincount(examples, minlength=200).tolist() == copies
    assert all(lengths[example] * len(batch) <= 40 for batch in batches for example in stream.example_of(batch))


def test_a_split_whose_examples_all_count_once_batches_as_one_without_copies():
    # A single source of weight 1 writes copies of 1 for every example: the stream keeps no per-example
    # array for them (at 100M hanzi, 12M examples), and its batches are those of a split without copies.
    lengths = [1 + (i * 5) % 9 for i in range(200)]
    once, plain = BatchStream(_split(lengths, [1] * 200), 40, seed=3), BatchStream(_split(lengths), 40, seed=3)
    assert once.copies is None and once._ends is None
    assert [once.next_indices()[1].tolist() for _ in range(30)] == [plain.next_indices()[1].tolist() for _ in range(30)]
    assert BatchStream(_split(lengths, [2] * 200), 40, seed=3).copies.tolist() == [2] * 200


def test_split_batches_pad_right_and_batch_stream_restores_its_position():
    examples = encode_split([_example(t) for t in ["你好", "世界和平", "好"] * 10],
                            *build_vocabs([_example("你好世界和平")]))
    assert examples.offsets[:4].tolist() == [0, 2, 6, 7] and examples.source.dtype == np.int32
    batch = split_batch(examples, [0, 1])
    assert batch.source.shape == batch.target.shape == (2, 4)
    assert batch.target[0, 2:].tolist() == [PAD_ID, PAD_ID] and batch.n_target_tokens == 6
    stream = BatchStream(examples, batch_tokens=12, seed=1)
    iterator = iter(stream)
    for _ in range(7):  # past the end of the first epoch
        next(iterator)
    state = stream.state_dict()
    expected = [next(iterator).target.tolist() for _ in range(5)]
    restored = BatchStream(examples, batch_tokens=12, seed=1)
    restored.load_state_dict(state)
    assert [b.target.tolist() for _, b in zip(range(5), iter(restored))] == expected


def test_vocab_files_round_trip(tmp_path):
    vocab = Vocab.build(["你好，", "A1 "])
    save_vocab(vocab, tmp_path / "v.txt")
    assert load_vocab(tmp_path / "v.txt").tokens == vocab.tokens


def test_prefix_tokens_join_the_pinyin_vocabulary_only_when_asked():
    from pinyin_hanzi.text.typed_input import PREFIX_TOKENS

    train = [_example("你好，世界")]
    plain, _ = build_vocabs(train)
    with_prefixes, _ = build_vocabs(train, extra_pinyin=PREFIX_TOKENS)
    assert not PREFIX_TOKENS & set(plain.tokens)
    assert with_prefixes.tokens[: len(plain)] == plain.tokens  # the data's tokens keep their ids
    assert set(with_prefixes.tokens[len(plain):]) == PREFIX_TOKENS
    with pytest.raises(ValueError, match="no prefix tokens"):
        prefix_ids(plain)


def _abbreviating_stream(abbreviate, seed=5):
    from pinyin_hanzi.text.typed_input import PREFIX_TOKENS

    texts = ["我想去北京。", "中国人民很勤劳！", "2024年我们学习Python。", "你好"] * 50
    examples = [_example(text) for text in texts]
    pinyin_vocab, hanzi_vocab = build_vocabs(examples, extra_pinyin=PREFIX_TOKENS)
    encoded = encode_split(examples, pinyin_vocab, hanzi_vocab)
    stream = BatchStream(encoded, batch_tokens=64, seed=seed, abbreviate=abbreviate,
                         prefix_of=prefix_ids(pinyin_vocab),
                         hanzi_target=hanzi_ids(hanzi_vocab))
    return stream, encoded, pinyin_vocab, hanzi_vocab


def test_abbreviation_replaces_only_syllables_by_their_prefix_tokens():
    from pinyin_hanzi.text.pinyin import syllables
    from pinyin_hanzi.text.typed_input import prefix_token

    stream, encoded, pinyin_vocab, hanzi_vocab = _abbreviating_stream(0.5)
    changed, latin = 0, 0
    for _ in range(30):
        epoch, positions = stream.next_indices()
        batch = stream.batch(epoch, positions)
        for row, index in enumerate(stream.example_of(positions)):
            source, target = (ids.tolist() for ids in encoded.example(index))
            original = pinyin_vocab.decode(source)
            typed = pinyin_vocab.decode(batch.source[row, : len(original)].tolist())
            for before, after, char in zip(original, typed, hanzi_vocab.decode(target)):
                assert after == before or (before in syllables() and after == prefix_token(before))
                changed += after != before
                if char in "on":  # Python's letters: tokens that are syllables too, never abbreviated
                    assert after == before
                    latin += 1
            assert batch.target[row, : len(original)].tolist() == target  # targets untouched
    assert changed > 100 and latin > 10
    assert pinyin_vocab.ids["zh*"] == prefix_ids(pinyin_vocab)[pinyin_vocab.ids["zhong"]]
    assert all(prefix_ids(pinyin_vocab)[pinyin_vocab.ids[token]] == pinyin_vocab.ids[token] for token in "。！2P")


def test_abbreviation_depends_on_seed_epoch_and_index_only():
    def drawn(seed):
        return [training_abbreviations(12, 0.5, seed=seed, epoch=epoch, index=index)
                for epoch in range(3) for index in range(50)]

    first = drawn(1)
    assert first == drawn(1)
    assert first[:50] != first[50:100]  # a new epoch types the same examples differently
    assert first != drawn(2)
    # a stream restored mid-epoch builds the very batches of the uninterrupted one, abbreviations included
    stream, _, _, _ = _abbreviating_stream(0.5)
    for _ in range(40):  # past the end of the first epoch
        stream.next_indices()
    state = stream.state_dict()
    expected = [stream.batch(*stream.next_indices()).source.tolist() for _ in range(10)]
    restored, _, _, _ = _abbreviating_stream(0.5)
    restored.load_state_dict(state)
    assert [restored.batch(*restored.next_indices()).source.tolist() for _ in range(10)] == expected


def test_the_share_of_abbreviated_examples_and_their_rates_follow_the_setting():
    for share in (0.0, 0.3, 1.0):
        chosen = [training_abbreviations(30, share, seed=0, epoch=0, index=index) for index in range(4000)]
        abbreviated = [positions for positions in chosen if positions]
        # a chosen example keeps all 30 positions with probability 1/31 (the integral of (1 - rate)^30)
        assert len(abbreviated) / len(chosen) == pytest.approx(share * 30 / 31, abs=0.02)
        if share:
            rates = [len(positions) / 30 for positions in abbreviated]
            assert min(rates) < 0.1 and max(rates) == 1.0  # from a syllable or two to all of them
            assert sum(rates) / len(rates) == pytest.approx(0.5, abs=0.05)


def test_a_batch_abbreviates_each_example_as_it_would_alone():
    from pinyin_hanzi.data.batches import abbreviated

    lengths, indices = np.array([3, 12, 7, 12]), np.array([5, 17, 123456789, 2**40])
    rows = abbreviated(lengths, 12, 0.8, 4, 2, indices)
    for row, (length, index) in enumerate(zip(lengths, indices)):
        assert np.flatnonzero(rows[row]).tolist() == training_abbreviations(int(length), 0.8, 4, 2, int(index))
        assert not rows[row, length:].any()

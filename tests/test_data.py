import pytest

from pinyin_hanzi.corpus import Example
from pinyin_hanzi.data import BatchStream, collate, encode_examples, token_budget_batches
from pinyin_hanzi.vocab import BOS_ID, EOS_ID, PAD_ID, SPECIALS, UNK_ID, Vocab, build_vocabs, load_vocab, save_vocab


def _example(text):
    from pinyin_hanzi.pinyin import hanzi_to_tokens

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
    encoded = encode_examples([test_only], pinyin_vocab, hanzi_vocab)[0]
    assert encoded.target == [UNK_ID, UNK_ID] and encoded.source == [UNK_ID, UNK_ID]


def test_min_char_count_drops_rare_characters():
    _, hanzi_vocab = build_vocabs([_example("你好"), _example("你们")], min_char_count=2)
    assert "你" in hanzi_vocab and "好" not in hanzi_vocab


def test_token_budget_batches_cover_everything_once_within_budget():
    lengths = [1 + (i * 7) % 30 for i in range(500)]
    batches = token_budget_batches(lengths, batch_tokens=120, seed=3, epoch=0)
    flat = sorted(index for batch in batches for index in batch)
    assert flat == list(range(500))
    for batch in batches:
        assert max(lengths[i] for i in batch) * len(batch) <= 120
        # grouped by length: little padding inside a batch
        assert max(lengths[i] for i in batch) - min(lengths[i] for i in batch) <= 2
    assert batches == token_budget_batches(lengths, batch_tokens=120, seed=3, epoch=0)
    assert batches != token_budget_batches(lengths, batch_tokens=120, seed=3, epoch=1)


def test_collate_pads_right_and_batch_stream_restores_its_position():
    examples = encode_examples([_example(t) for t in ["你好", "世界和平", "好"] * 10],
                               *build_vocabs([_example("你好世界和平")]))
    batch = collate(examples[:2])
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

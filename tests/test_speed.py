"""The training step's speed parts (training/speed.py): the batch loss as train_step computes it, candidate
lists at the table's width (a GPU's, no read-back), batches built ahead on a thread, and train.compile's
settings. (Compiling itself is measured by bench/train_throughput.py --compile: minutes on two cores.)"""

import numpy as np
import pytest
import torch

from pinyin_hanzi.config import ModelConfig, load_config
from pinyin_hanzi.data.batches import Batch, BatchStream
from pinyin_hanzi.data.store import StoredSplit
from pinyin_hanzi.data.vocab import PAD_ID
from pinyin_hanzi.errors import ConfigError
from pinyin_hanzi.models.transformer import Transformer
from pinyin_hanzi.training.loss import candidate_columns, model_loss_sum
from pinyin_hanzi.training.speed import BatchLoss, Prefetcher, compile_mode, padded_rows

from conftest import tiny_config_dict, write_config

CPU, CUDA = torch.device("cpu"), torch.device("cuda")


def _model_and_batch(pinyin=30, hanzi=40, seed=0):
    torch.manual_seed(seed)
    config = ModelConfig(d_model=16, n_heads=2, n_encoder_layers=1, n_decoder_layers=1, d_ff=32, dropout=0.0)
    model = Transformer(config, source_vocab_size=pinyin, target_vocab_size=hanzi)
    batch = Batch(torch.randint(4, pinyin, (3, 6)), torch.randint(4, hanzi, (3, 6)))
    batch.source[2, 4:] = PAD_ID
    batch.target[2, 4:] = PAD_ID
    # Candidate lists: each pinyin id has 1-5 characters (the reference among them or not), <pad> after.
    generator = torch.Generator().manual_seed(seed)
    widths = torch.randint(1, 6, (pinyin,), generator=generator)
    ids = torch.randint(4, hanzi, (pinyin, 5), generator=generator)
    real = torch.arange(5)[None, :] < widths[:, None]
    return model, batch, (ids.masked_fill(~real, PAD_ID), real)


@pytest.mark.parametrize("use_candidates", [False, True])
def test_the_batch_loss_is_the_summed_loss_of_the_model(use_candidates):
    model, batch, candidates = _model_and_batch()
    candidates = candidates if use_candidates else None
    expected, _ = model_loss_sum(model, batch, 0.1, candidates)
    loss = BatchLoss(model, 0.1, candidates, device=CPU)(batch).detach()
    assert float(loss) == pytest.approx(float(expected.detach()), rel=1e-6)


def test_whole_candidate_lists_give_the_same_loss_as_the_batch_width():
    model, batch, candidates = _model_and_batch()
    ids, real = candidates
    wide = (torch.cat([ids, torch.zeros(len(ids), 7, dtype=ids.dtype)], 1),  # a table wider than any list here
            torch.cat([real, torch.zeros(len(real), 7, dtype=torch.bool)], 1))
    columns, allowed = candidate_columns(batch.source, batch.target, wide, whole_lists=True)
    assert columns.shape[-1] == 1 + wide[0].shape[1]  # the reference, then the table's width
    narrow = BatchLoss(model, 0.1, wide, device=CPU)(batch)
    whole = BatchLoss(model, 0.1, wide, device=CPU)
    whole.whole_lists = True  # as on a GPU
    assert float(whole(batch).detach()) == pytest.approx(float(narrow.detach()), rel=1e-6)


def _stream(seed=3):
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 9, 200)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    tokens = rng.integers(4, 30, offsets[-1]).astype(np.int32)
    return BatchStream(StoredSplit(tokens, tokens.copy(), offsets), batch_tokens=24, seed=seed)


def test_the_prefetcher_hands_out_the_streams_batches_and_keeps_the_position_of_the_last_taken():
    direct, ahead = _stream(), _stream()
    prefetcher = Prefetcher(ahead, accumulate=2, rank=0, world_size=1, pin=False, depth=3)
    try:
        for step in range(1, 40):  # past an epoch's end (about 30 steps of two batches)
            drawn = [direct.next_indices() for _ in range(2)]
            tokens, batches = prefetcher.next()
            assert tokens == sum(direct.n_target_tokens(indices) for _, indices in drawn)
            for (epoch, indices), batch in zip(drawn, batches):
                expected = direct.batch(epoch, indices)
                assert torch.equal(batch.source, expected.source) and torch.equal(batch.target, expected.target)
            assert prefetcher.state_dict() == direct.state_dict()  # not the stream's, which runs ahead
    finally:
        prefetcher.close()
    assert not prefetcher._thread.is_alive()


def test_each_process_takes_its_share_of_the_global_batch():
    whole, share = _stream(), _stream()
    prefetcher = Prefetcher(share, accumulate=4, rank=1, world_size=2, pin=False)
    try:
        drawn = [whole.next_indices() for _ in range(4)]
        _, batches = prefetcher.next()
        assert [b.source.tolist() for b in batches] == [whole.batch(*drawn[i]).source.tolist() for i in (1, 3)]
    finally:
        prefetcher.close()


def test_a_store_read_error_reaches_the_training_thread():
    stream = _stream()

    def unreadable(epoch, positions):
        raise FileNotFoundError(2, "No such file or directory", "train.target.bin")

    stream.batch = unreadable
    prefetcher = Prefetcher(stream, accumulate=1, rank=0, world_size=1, pin=False)
    try:
        with pytest.raises(FileNotFoundError, match="train.target.bin"):
            prefetcher.next()
    finally:
        prefetcher.close()


def test_compile_settings_map_to_modes():
    assert compile_mode("off", CUDA) is None and compile_mode("auto", CPU) is None
    assert compile_mode("auto", CUDA) is None  # crashed on the H200 (docs/benchmarks.md): opt in with "on"
    assert compile_mode("on", CUDA) == "reduce-overhead" and compile_mode("on", CPU) == "default"
    assert compile_mode("max-autotune", CPU) == "max-autotune"


def test_length_buckets_make_a_compiled_loss_static_and_keep_every_buckets_graph(monkeypatch):
    import torch._dynamo

    config = torch._dynamo.config
    limit = "recompile_limit" if hasattr(config, "recompile_limit") else "cache_size_limit"
    monkeypatch.setattr(config, limit, 8)
    compiled = []
    monkeypatch.setattr(torch, "compile", lambda fn, **options: compiled.append(options) or fn)
    model = torch.nn.Linear(2, 2)
    dynamic = BatchLoss(model, 0.1, mode="default", device=CPU)
    assert compiled[-1]["dynamic"] is True and not dynamic.whole_lists and getattr(config, limit) == 8
    static = BatchLoss(model, 0.1, mode="default", device=CPU, buckets=12)
    assert compiled[-1]["dynamic"] is False and static.whole_lists and getattr(config, limit) == 14
    eager = BatchLoss(model, 0.1, device=CPU, buckets=12)  # buckets without compiling: nothing changes
    assert len(compiled) == 2 and not eager.whole_lists and not eager.static


def test_train_compile_reads_yaml_booleans_and_refuses_other_words(tmp_path, tiny_corpus):
    config = tiny_config_dict(tmp_path, tiny_corpus)
    for value, expected in ((False, "off"), (True, "on"), ("reduce-overhead", "reduce-overhead")):
        config["train"]["compile"] = value
        assert load_config(write_config(tmp_path / "c.yaml", config)).train.compile == expected
    config["train"]["compile"] = "fast"
    with pytest.raises(ConfigError, match="train.compile='fast' is invalid: expected auto, on, off, default"):
        load_config(write_config(tmp_path / "c.yaml", config))


def test_a_batch_without_padding_gives_the_same_loss_without_a_mask():
    model, batch, candidates = _model_and_batch()
    full = Batch(batch.source[:2], batch.target[:2])  # the first two rows are not padded
    loss = BatchLoss(model, 0.1, candidates, device=CPU)
    assert not padded_rows(full) and padded_rows(batch)
    assert float(loss(full, padded=False).detach()) == pytest.approx(float(loss(full).detach()), rel=1e-6)

import pytest
import torch

from pinyin_hanzi.checkpoint import (
    FORMAT_VERSION,
    load_checkpoint,
    model_from_checkpoint,
    newest_checkpoint,
    save_checkpoint,
)
from pinyin_hanzi.corpus import read_examples
from pinyin_hanzi.converter import Converter
from pinyin_hanzi.errors import CheckpointError


def test_checkpoint_is_self_contained_and_round_trips(trained):
    tmp, _, best = trained
    state = load_checkpoint(best)
    assert state["format_version"] == FORMAT_VERSION
    for key in ("config", "pinyin_vocab", "hanzi_vocab", "model", "optimizer", "scheduler", "step",
                "best_accuracy", "batches", "rng"):
        assert key in state
    model, pinyin_vocab, hanzi_vocab, config = model_from_checkpoint(state)
    copy = tmp / "copy.pt"
    save_checkpoint(copy, {k: v for k, v in state.items() if k != "format_version"})
    model_again, *_ = model_from_checkpoint(load_checkpoint(copy))
    examples = read_examples(tmp / "prepared" / "tiny" / "train.tsv")[:5]
    tokens = [e.tokens for e in examples]
    first = Converter(model, pinyin_vocab, hanzi_vocab).convert_tokens(tokens)
    assert Converter(model_again, pinyin_vocab, hanzi_vocab).convert_tokens(tokens) == first
    assert not copy.with_name("copy.pt.tmp").exists()  # written atomically


def test_broken_checkpoints_give_one_line_errors(trained, tmp_path):
    _, _, best = trained
    data = best.read_bytes()
    truncated = tmp_path / "truncated.pt"
    truncated.write_bytes(data[: len(data) // 2])
    garbage = tmp_path / "garbage.pt"
    garbage.write_bytes(b"not a checkpoint at all")
    foreign = tmp_path / "foreign.pt"
    torch.save({"weights": torch.zeros(2)}, foreign)
    old = tmp_path / "old.pt"
    torch.save({**torch.load(best, weights_only=True), "format_version": 99}, old)
    cases = [(tmp_path / "missing.pt", "not found"), (truncated, "truncated, corrupt"), (garbage, "truncated, corrupt"),
             (foreign, "not a pinyin_hanzi checkpoint"), (old, "format 99")]
    for path, message in cases:
        with pytest.raises(CheckpointError, match=message) as raised:
            load_checkpoint(path)
        assert "\n" not in str(raised.value)


def test_checkpoint_whose_weights_do_not_fit_its_config(trained):
    _, _, best = trained
    state = load_checkpoint(best)
    state["config"]["model"]["d_model"] = 128
    with pytest.raises(CheckpointError, match="weights do not fit .*size mismatch"):
        model_from_checkpoint(state)
    state["config"]["model"]["d_model"], state["config"]["model"]["n_heads"] = 64, 3
    with pytest.raises(CheckpointError, match="config or vocabularies do not fit"):
        model_from_checkpoint(state)


def test_newest_checkpoint(tmp_path):
    assert newest_checkpoint(tmp_path) is None
    for name in ("a", "b"):
        save_checkpoint(tmp_path / name / "best.pt", {"step": 0})
    assert newest_checkpoint(tmp_path) == tmp_path / "b" / "best.pt"


def test_export_keeps_what_translation_needs_in_half_precision(trained, tmp_path):
    from pinyin_hanzi.checkpoint import export_checkpoint

    tmp, _, best = trained
    exported = tmp_path / "shipped" / "model.pt"
    result = export_checkpoint(best, exported)
    state = load_checkpoint(exported)
    assert "optimizer" not in state and "rng" not in state and "batches" not in state
    assert all(t.dtype == torch.float16 for t in state["model"].values() if t.is_floating_point())
    assert result["bytes"] < best.stat().st_size / 4  # no Adam moments, half the bytes per weight
    examples = read_examples(tmp / "prepared" / "tiny" / "train.tsv")
    tokens = [e.tokens for e in examples]
    original = Converter(*model_from_checkpoint(load_checkpoint(best))[:3]).convert_tokens(tokens)
    assert Converter(*model_from_checkpoint(state)[:3]).convert_tokens(tokens) == original


def test_default_checkpoint_prefers_a_newer_local_training_over_the_shipped_model(tmp_path, monkeypatch):
    import os

    from pinyin_hanzi import checkpoint

    shipped = tmp_path / "pretrained" / "model.pt"
    monkeypatch.setattr(checkpoint, "PRETRAINED", shipped)
    local_root = tmp_path / "local"
    assert checkpoint.default_checkpoint(local_root) == (None, "the shipped pretrained model")
    save_checkpoint(shipped, {"step": 0})
    assert checkpoint.default_checkpoint(local_root) == (shipped, "the shipped pretrained model")
    save_checkpoint(local_root / "run" / "best.pt", {"step": 0})
    os.utime(shipped, (1, 1))  # the shipped file is older than the local run
    assert checkpoint.default_checkpoint(local_root) == (local_root / "run" / "best.pt", "the newest local training")
    os.utime(local_root / "run" / "best.pt", (0, 0))
    assert checkpoint.default_checkpoint(local_root) == (shipped, "the shipped pretrained model")


def test_a_crash_while_writing_leaves_the_previous_checkpoint(tmp_path, monkeypatch):
    path = tmp_path / "last.pt"
    save_checkpoint(path, {"step": 1, "weights": torch.ones(3)})
    before = path.read_bytes()

    def dies_half_way(obj, handle):  # as if the process were killed after writing some bytes
        handle.write(b"PK\x03\x04 half a checkpoint")
        raise KeyboardInterrupt

    monkeypatch.setattr(torch, "save", dies_half_way)
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint(path, {"step": 2, "weights": torch.zeros(3)})
    assert path.read_bytes() == before
    assert torch.load(path, weights_only=True)["step"] == 1

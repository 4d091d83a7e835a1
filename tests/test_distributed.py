"""Multi-process training: two CPU processes under torchrun (gloo) against one process with gradient
accumulation over the same global batch, from scratch and resumed."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
import torch
from conftest import ROOT, tiny_config_dict, write_config

from pinyin_hanzi import checkpoint, distributed, training
from pinyin_hanzi.checkpoint import load_checkpoint
from pinyin_hanzi.config import load_config
from pinyin_hanzi.errors import ConfigError
from pinyin_hanzi.training import train

SETTINGS = {"max_steps": 8, "eval_every": 4, "log_every": 1, "batch_tokens": 64, "grad_accum_steps": 2}
TOLERANCE = 1e-4  # relative; on this CPU the two agree exactly, but summation order may differ elsewhere


def _torchrun(config, *extra):
    return subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                           str(ROOT / "train.py"), "--config", str(config), *extra],
                          capture_output=True, text=True, check=False, timeout=300,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"})


def _losses(run_dir):
    return [json.loads(line) for line in (run_dir / "train_log.jsonl").read_text(encoding="utf-8").splitlines()]


def _assert_close(a: dict, b: dict):
    for name, tensor in b.items():
        assert torch.allclose(a[name], tensor, rtol=TOLERANCE, atol=TOLERANCE * tensor.abs().max()), name


def test_two_processes_match_one_process_with_accumulation(tmp_path, tiny_corpus, monkeypatch):
    torch.set_num_threads(1)
    one_dir, two_dir, resumed_dir = tmp_path / "one", tmp_path / "two", tmp_path / "resumed"
    one = load_config(write_config(tmp_path / "one.yaml", tiny_config_dict(one_dir, tiny_corpus, **SETTINGS)))
    two = write_config(tmp_path / "two.yaml", tiny_config_dict(two_dir, tiny_corpus, **SETTINGS))
    resumed = write_config(tmp_path / "resumed.yaml", tiny_config_dict(resumed_dir, tiny_corpus, **SETTINGS))

    # One process, two batches accumulated per step; keep its step-4 checkpoint for the resumed run below.
    original_save = checkpoint.save_checkpoint

    def save_and_keep(path, state):
        original_save(path, state)
        if state["step"] == 4 and path.name == "last.pt":
            (resumed_dir / "checkpoints" / "tiny").mkdir(parents=True)
            shutil.copy(path, resumed_dir / "checkpoints" / "tiny" / "last.pt")

    monkeypatch.setattr(checkpoint, "save_checkpoint", save_and_keep)
    train(one, log=lambda message: None)
    reference = _losses(one_dir / "runs" / "tiny")
    assert [record["step"] for record in reference] == list(range(1, 9))

    # Two processes, one batch each per step: the same global batches.
    result = _torchrun(two)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.count(str(two_dir / "checkpoints" / "tiny" / "best.pt")) == 1  # printed by rank 0 only
    logged = _losses(two_dir / "runs" / "tiny")  # written by rank 0 alone: each step once
    assert [record["step"] for record in logged] == list(range(1, 9))
    for mine, theirs in zip(logged, reference):
        assert mine["tokens"] == theirs["tokens"]  # the same examples
        assert mine["loss"] == pytest.approx(theirs["loss"], rel=TOLERANCE)
        assert mine["grad_norm"] == pytest.approx(theirs["grad_norm"], rel=TOLERANCE)
    final = load_checkpoint(one_dir / "checkpoints" / "tiny" / "last.pt")
    _assert_close(load_checkpoint(two_dir / "checkpoints" / "tiny" / "last.pt")["model"], final["model"])

    # Two processes resume the one-process run's step-4 checkpoint and end where it ended.
    result = _torchrun(resumed, "--resume")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "at step 4" in result.stderr
    after = _losses(resumed_dir / "runs" / "tiny")
    assert [record["step"] for record in after] == [5, 6, 7, 8]
    for mine, theirs in zip(after, reference[4:]):
        assert mine["loss"] == pytest.approx(theirs["loss"], rel=TOLERANCE)
    _assert_close(load_checkpoint(resumed_dir / "checkpoints" / "tiny" / "last.pt")["model"], final["model"])


def test_accumulation_must_divide_among_the_processes(tmp_path, tiny_corpus, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    config = load_config(write_config(tmp_path / "c.yaml", tiny_config_dict(tmp_path, tiny_corpus, grad_accum_steps=3)))
    with pytest.raises(ConfigError, match=r"train.grad_accum_steps=3 must be a multiple of the number of processes \(2\)"):
        train(config, log=lambda message: None)


def test_environment_of_a_single_process_and_of_torchrun(monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    assert distributed.from_environment() == distributed.Process(0, 1, 0)
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("LOCAL_RANK", "1")
    process = distributed.from_environment()
    assert process == distributed.Process(3, 4, 1) and not process.is_main
    monkeypatch.setenv("RANK", "4")
    with pytest.raises(ConfigError, match="RANK=4, WORLD_SIZE=4"):
        distributed.from_environment()


def test_accumulating_two_batches_equals_one_batch_of_both(tiny_corpus, tmp_path):
    """Loss normalised by the global batch's tokens: two accumulated batches give the gradient of their
    union as one batch (an average of per-batch averages would not)."""
    from pinyin_hanzi.corpus import prepare, read_examples
    from pinyin_hanzi.data import collate, encode_examples
    from pinyin_hanzi.model import Transformer
    from pinyin_hanzi.vocab import load_vocab

    torch.manual_seed(0)
    config = load_config(write_config(tmp_path / "c.yaml", tiny_config_dict(tmp_path, tiny_corpus)))
    data_dir = prepare(config.data)
    pinyin_vocab, hanzi_vocab = load_vocab(data_dir / "pinyin_vocab.txt"), load_vocab(data_dir / "hanzi_vocab.txt")
    encoded = encode_examples(read_examples(data_dir / "train.tsv"), pinyin_vocab, hanzi_vocab)
    first, second = encoded[:2], encoded[2:7]  # different sizes, so the two normalisations differ
    assert sum(len(e.target) for e in first) != sum(len(e.target) for e in second)
    gradients = []
    for batches in ([collate(first), collate(second)], [collate(first + second)]):
        model = Transformer(config.model, source_vocab_size=len(pinyin_vocab), target_vocab_size=len(hanzi_vocab))
        model.load_state_dict(torch.load(tmp_path / "init.pt", weights_only=True)) if gradients else \
            torch.save(model.state_dict(), tmp_path / "init.pt")
        optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
        total = sum(int((batch.target != 0).sum()) for batch in batches)
        loss, _, stepped = training.train_step(model, batches, total, optimizer, scheduler, config.train,
                                                 torch.device("cpu"))
        assert stepped
        gradients.append((loss, {name: p.grad.clone() for name, p in model.named_parameters()}))
    (accumulated_loss, accumulated), (joint_loss, joint) = gradients
    assert accumulated_loss == pytest.approx(joint_loss, rel=1e-5)
    for name, gradient in joint.items():
        assert torch.allclose(accumulated[name], gradient, rtol=1e-4, atol=1e-7), name

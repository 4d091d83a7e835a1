import json
import math
import shutil

import pytest
import torch
from conftest import tiny_config_dict, write_config

from pinyin_hanzi import training
from pinyin_hanzi.checkpoint import load_checkpoint
from pinyin_hanzi.config import TrainConfig, load_config
from pinyin_hanzi.corpus import read_examples
from pinyin_hanzi.errors import CheckpointError, TrainingError
from pinyin_hanzi.training import lr_at, train


def test_lr_warms_up_then_decays_to_the_floor():
    config = TrainConfig(lr=1e-3, warmup_steps=10, max_steps=110, min_lr_ratio=0.1)
    assert lr_at(0, config) == pytest.approx(1e-4)
    assert lr_at(9, config) == pytest.approx(1e-3)
    assert lr_at(60, config) == pytest.approx(1e-4 + 0.9e-3 * 0.5)
    assert lr_at(110, config) == pytest.approx(1e-4) and lr_at(500, config) == pytest.approx(1e-4)
    values = [lr_at(step, config) for step in range(10, 111)]
    assert all(a >= b for a, b in zip(values, values[1:]))


def test_tiny_model_memorises_the_tiny_corpus(trained):
    tmp, config_path, best = trained
    from pinyin_hanzi.converter import Converter
    from pinyin_hanzi.metrics import conversion_scores

    converter = Converter.from_checkpoint(best)
    examples = read_examples(tmp / "prepared" / "tiny" / "train.tsv")
    outputs = converter.convert_tokens([e.tokens for e in examples])
    assert outputs == [e.hanzi for e in examples]
    assert load_checkpoint(best)["best_accuracy"] > 0.5
    # and it learned something beyond the constraint: unconstrained greedy is right most of the time too
    unconstrained = converter.convert_tokens([e.tokens for e in examples], constrained=False)
    assert conversion_scores(unconstrained, [e.hanzi for e in examples])["char_accuracy"] > 0.9
    assert (tmp / "runs" / "tiny" / "config.yaml").is_file()
    assert list((tmp / "runs" / "tiny").glob("events.out.tfevents.*"))


def test_resume_continues_exactly_like_an_uninterrupted_run(tmp_path, tiny_corpus, monkeypatch):
    torch.set_num_threads(1)
    settings = dict(max_steps=24, eval_every=12, log_every=4, batch_tokens=64)
    straight = load_config(write_config(tmp_path / "a.yaml", tiny_config_dict(tmp_path / "a", tiny_corpus, **settings)))
    config_b = tiny_config_dict(tmp_path / "b", tiny_corpus, **settings)
    config_b["model"]["dropout"] = 0.1  # dropout draws random numbers: their state must be restored too
    straight.model.dropout = 0.1
    resumed = load_config(write_config(tmp_path / "b.yaml", config_b))

    # Keep the step-12 checkpoint of the straight run, as a crash right after it would have left it.
    original_save = training.save_checkpoint

    def save_and_keep(path, state):
        original_save(path, state)
        if state["step"] == 12 and path.name == "last.pt":
            shutil.copy(path, tmp_path / "step12.pt")

    monkeypatch.setattr(training, "save_checkpoint", save_and_keep)
    train(straight, log=lambda message: None)
    monkeypatch.setattr(training, "save_checkpoint", original_save)

    (tmp_path / "b" / "checkpoints" / "tiny").mkdir(parents=True)
    shutil.copy(tmp_path / "step12.pt", tmp_path / "b" / "checkpoints" / "tiny" / "last.pt")
    messages = []
    train(resumed, resume=True, log=messages.append)
    assert any("resumed" in m and "step 12" in m for m in messages)

    a = load_checkpoint(tmp_path / "a" / "checkpoints" / "tiny" / "last.pt")
    b = load_checkpoint(tmp_path / "b" / "checkpoints" / "tiny" / "last.pt")
    assert a["step"] == b["step"] == 24
    for name, tensor in a["model"].items():
        assert torch.equal(tensor, b["model"][name]), name
    assert a["valid_char_accuracy"] == b["valid_char_accuracy"]


def test_resume_refuses_a_different_model(tmp_path, tiny_corpus, trained):
    tmp, config_path, _ = trained
    config = load_config(config_path, ["model.d_ff=256"])
    with pytest.raises(CheckpointError, match=r"model\.d_ff is 256 now but 128"):
        train(config, resume=True, log=lambda message: None)
    fresh = load_config(write_config(tmp_path / "c.yaml", tiny_config_dict(tmp_path, tiny_corpus)))
    with pytest.raises(CheckpointError, match="checkpoint not found"):
        train(fresh, resume=True, log=lambda message: None)


def test_loss_is_normalised_per_target_token():
    logits = torch.zeros(2, 3, 5)
    target = torch.tensor([[4, 4, 4], [4, 0, 0]])  # 4 real tokens, 2 padding
    loss, n_tokens = training.loss_fn(logits, target, 0.0)
    assert n_tokens == 4 and float(loss) == pytest.approx(math.log(5))


def test_a_new_run_never_replaces_an_existing_one(trained):
    tmp, config_path, best = trained
    before = best.read_bytes()
    with pytest.raises(TrainingError, match="--resume.*--overwrite"):
        train(load_config(config_path), log=lambda message: None)
    assert best.read_bytes() == before


def _nan_on(monkeypatch, bad_batches):
    """Make the training loss NaN on the given training batches (counted from 1; evaluation untouched)."""
    original, calls = training.loss_sum, [0]

    def loss_sum(*args, **kwargs):
        loss, n_tokens = original(*args, **kwargs)
        if torch.is_grad_enabled():
            calls[0] += 1
            if bad_batches(calls[0]):
                loss = loss * float("nan")
        return loss, n_tokens

    monkeypatch.setattr(training, "loss_sum", loss_sum)


def test_a_non_finite_loss_skips_the_batch_with_a_warning(tmp_path, tiny_corpus, monkeypatch):
    torch.set_num_threads(1)
    config = load_config(write_config(tmp_path / "c.yaml", tiny_config_dict(
        tmp_path, tiny_corpus, max_steps=12, eval_every=6, batch_tokens=64)))
    _nan_on(monkeypatch, lambda call: call in (3, 7, 8))
    messages = []
    train(config, log=messages.append)
    warnings = [m for m in messages if m.startswith("warning: skipped a batch")]
    assert len(warnings) == 3 and "loss nan" in warnings[0] and "at step 3:" in warnings[0]
    assert "2 in a row" in warnings[2]
    state = load_checkpoint(tmp_path / "checkpoints" / "tiny" / "last.pt")
    assert state["step"] == 12  # skipped batches are not steps: the run still makes all 12
    assert all(torch.isfinite(tensor).all() for tensor in state["model"].values())  # no NaN reached the weights
    assert all(int(s["step"]) == 12 for s in state["optimizer"]["state"].values())  # AdamW stepped 12 times
    logged = [json.loads(line) for line in (tmp_path / "runs" / "tiny" / "train_log.jsonl").read_text().splitlines()]
    assert [record["step"] for record in logged] == list(range(1, 13))
    assert all(math.isfinite(record["loss"]) for record in logged)


def test_repeated_non_finite_losses_stop_with_the_last_good_checkpoint_intact(tmp_path, tiny_corpus, monkeypatch):
    torch.set_num_threads(1)
    config = load_config(write_config(tmp_path / "c.yaml", tiny_config_dict(
        tmp_path, tiny_corpus, max_steps=20, eval_every=5, batch_tokens=64, max_bad_steps=3)))
    last = tmp_path / "checkpoints" / "tiny" / "last.pt"
    _nan_on(monkeypatch, lambda call: call >= 8)  # steps 1-7 train, then every batch fails
    messages = []
    with pytest.raises(TrainingError) as raised:
        train(config, log=messages.append)
    message = str(raised.value)
    assert "stopped at step 7" in message and "3 batches in a row" in message
    assert f"the last good checkpoint is {last} (step 5)" in message and "\n" not in message
    assert sum(m.startswith("warning: skipped a batch") for m in messages) == 3
    state = load_checkpoint(last)
    assert state["step"] == 5 and all(torch.isfinite(tensor).all() for tensor in state["model"].values())


def test_non_finite_loss_before_any_checkpoint_says_so(tmp_path, tiny_corpus, monkeypatch):
    torch.set_num_threads(1)
    config = load_config(write_config(tmp_path / "c.yaml", tiny_config_dict(
        tmp_path, tiny_corpus, max_steps=20, eval_every=10, batch_tokens=64, max_bad_steps=2)))
    _nan_on(monkeypatch, lambda call: True)
    with pytest.raises(TrainingError, match="stopped at step 0: .*no checkpoint was written yet"):
        train(config, log=lambda message: None)
    assert not (tmp_path / "checkpoints" / "tiny" / "last.pt").exists()


def test_broken_weights_never_replace_the_last_good_checkpoint(tmp_path, tiny_corpus):
    """A huge learning rate makes the weights useless in one step; the evaluation then stops the run instead of
    saving them (no monkeypatching: a real overflow)."""
    torch.set_num_threads(1)
    config = load_config(write_config(tmp_path / "c.yaml", tiny_config_dict(
        tmp_path, tiny_corpus, max_steps=10, eval_every=1, warmup_steps=0, batch_tokens=64, lr=1e30)))
    with pytest.raises(TrainingError, match="stopped at step 1: the weights or the validation loss .* are no longer "
                                            "finite; no checkpoint was written yet"):
        train(config, log=lambda message: None)
    assert not (tmp_path / "checkpoints" / "tiny" / "last.pt").exists()


def test_candidate_loss_equals_the_masked_softmax_over_the_vocabulary():
    # model_loss computes the logits of each position's candidates only (the reference first); written out
    # over all v logits with a mask it is:
    from types import SimpleNamespace

    from pinyin_hanzi.config import ModelConfig
    from pinyin_hanzi.model import Transformer

    generator = torch.Generator().manual_seed(0)
    pinyin, v, c = 12, 30, 5
    torch.manual_seed(0)
    model = Transformer(ModelConfig(d_model=16, n_heads=2, n_encoder_layers=1, n_decoder_layers=1, d_ff=32,
                                    dropout=0.0, max_positions=16), source_vocab_size=pinyin, target_vocab_size=v)
    model.chunk = 4  # several chunks of positions
    lengths = torch.randint(1, c + 1, (pinyin,), generator=generator)
    real = torch.arange(c)[None, :] < lengths[:, None]  # (pinyin, c), lists first
    ids = torch.stack([torch.randperm(v - 4, generator=generator)[:c] + 4 for _ in range(pinyin)]).where(real, 0)
    source = torch.randint(4, pinyin, (3, 6), generator=generator)
    target = ids[source, 0].clone()  # the reference among the candidates, mostly
    target[1, 2], target[2, 4] = 29, 28  # and sometimes not
    source[0, 4:], target[0, 4:] = 0, 0  # padding
    batch = SimpleNamespace(source=source, target=target)
    loss, n_tokens = training.model_loss(model, batch, 0.1, (ids, real))
    allowed = torch.zeros(3, 6, v, dtype=torch.bool).scatter(-1, ids[source], real[source])
    allowed = allowed.scatter(-1, target[..., None], True)
    log_probs = model(source, target).masked_fill(~allowed, float("-inf")).log_softmax(-1)
    nll = -log_probs.gather(-1, target[..., None]).squeeze(-1)
    smooth = -log_probs.masked_fill(~allowed, 0.0).sum(-1) / allowed.sum(-1)
    expected = (0.9 * nll + 0.1 * smooth).masked_fill(target == 0, 0.0).sum() / 16
    assert n_tokens == 16 and torch.allclose(loss, expected, atol=1e-6)
    gradients = torch.autograd.grad(loss, list(model.parameters()))
    expected_gradients = torch.autograd.grad(expected, list(model.parameters()))
    for gradient, expected_gradient in zip(gradients, expected_gradients):
        assert torch.allclose(gradient, expected_gradient, atol=1e-6)


def test_precision_auto_is_bf16_on_cuda_and_on_cpus_with_native_bf16(monkeypatch):
    cpu, cuda, mps = torch.device("cpu"), torch.device("cuda"), torch.device("mps")
    monkeypatch.setattr(training, "cpu_has_native_bf16", lambda: True)
    assert [training.resolve_precision("auto", d) for d in (cpu, cuda, mps)] == ["bf16", "bf16", "fp32"]
    monkeypatch.setattr(training, "cpu_has_native_bf16", lambda: False)
    assert [training.resolve_precision("auto", d) for d in (cpu, cuda, mps)] == ["fp32", "bf16", "fp32"]
    assert training.resolve_precision("fp32", cuda) == "fp32" and training.resolve_precision("bf16", cpu) == "bf16"


def test_a_bf16_step_multiplies_in_bf16_and_keeps_fp32_weights_close_to_an_fp32_step():
    from pinyin_hanzi.config import ModelConfig
    from pinyin_hanzi.data import Batch
    from pinyin_hanzi.model import Transformer

    torch.manual_seed(0)
    model = Transformer(ModelConfig(d_model=32, n_heads=4, n_encoder_layers=1, n_decoder_layers=1, d_ff=64,
                                    dropout=0.0, max_positions=16), source_vocab_size=20, target_vocab_size=40)
    generator = torch.Generator().manual_seed(1)
    batch = Batch(torch.randint(4, 20, (4, 7), generator=generator), torch.randint(4, 40, (4, 7), generator=generator))
    results = {}
    for precision in ("fp32", "bf16"):
        copy = Transformer(model.config, source_vocab_size=20, target_vocab_size=40)
        copy.load_state_dict(model.state_dict())
        output_dtypes = []
        copy.decoder_layers[0].feed_forward.register_forward_hook(lambda m, i, out: output_dtypes.append(out.dtype))
        optimizer = torch.optim.AdamW(copy.parameters(), lr=1e-3)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
        config = TrainConfig(precision=precision, label_smoothing=0.0)
        loss, _, stepped = training.train_step(copy, [batch], batch.n_target_tokens, optimizer, scheduler, config,
                                               torch.device("cpu"))
        assert stepped and all(p.dtype == torch.float32 for p in copy.parameters())  # master weights stay fp32
        results[precision] = (loss, output_dtypes, torch.cat([p.detach().flatten() for p in copy.parameters()]))
    assert results["fp32"][1] == [torch.float32] and results["bf16"][1] == [torch.bfloat16]
    assert results["bf16"][0] != results["fp32"][0]  # it did run in lower precision...
    assert results["bf16"][0] == pytest.approx(results["fp32"][0], rel=0.02)  # ...and computed the same loss
    before = torch.cat([p.detach().flatten() for p in model.parameters()])
    fp32_update, bf16_update = results["fp32"][2] - before, results["bf16"][2] - before
    assert torch.nn.functional.cosine_similarity(fp32_update, bf16_update, dim=0) > 0.95

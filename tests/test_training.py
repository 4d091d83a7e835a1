import json
import math
import shutil

import pytest
import torch

from pinyin_hanzi import checkpoint
from pinyin_hanzi.checkpoint import load_checkpoint
from pinyin_hanzi.config import TrainConfig, load_config
from pinyin_hanzi.data.corpus import prepare, read_split
from pinyin_hanzi.errors import CheckpointError, TrainingError
from pinyin_hanzi.training import loop
from pinyin_hanzi.training import loss as losses
from pinyin_hanzi.training import recipe as training
from pinyin_hanzi.training.recipe import lr_at, train
from pinyin_hanzi.training.run import Splits

from conftest import tiny_config_dict, write_config


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
    from pinyin_hanzi.decoding.converter import Converter
    from pinyin_hanzi.evaluation.metrics import conversion_scores

    converter = Converter.from_checkpoint(best)
    examples = read_split(tmp / "prepared" / "tiny", "train")
    outputs = converter.convert_tokens([e.tokens for e in examples])
    assert outputs == [e.hanzi for e in examples]
    assert load_checkpoint(best)["best_accuracy"] > 0.5
    # and it learned something beyond the constraint: unconstrained greedy is right most of the time too
    unconstrained = converter.convert_tokens([e.tokens for e in examples], constrained=False)
    assert conversion_scores(unconstrained, [e.hanzi for e in examples])["char_accuracy"] > 0.9
    assert (tmp / "runs" / "tiny" / "config.yaml").is_file()
    assert list((tmp / "runs" / "tiny").glob("events.out.tfevents.*"))


@pytest.mark.parametrize("abbreviate, prefetch", [(0.0, -1), (0.5, -1), (0.5, 2)])
def test_resume_continues_exactly_like_an_uninterrupted_run(tmp_path, tiny_corpus, monkeypatch, abbreviate, prefetch):
    torch.set_num_threads(1)
    settings = dict(max_steps=24, eval_every=12, log_every=4, batch_tokens=64, attention_sentences=0)
    config_a = tiny_config_dict(tmp_path / "a", tiny_corpus, **settings)
    config_b = tiny_config_dict(tmp_path / "b", tiny_corpus, **settings)
    for config in (config_a, config_b):
        config["model"]["dropout"] = 0.1  # dropout draws random numbers: their state must be restored too
        config["data"]["abbreviate"] = abbreviate  # and the abbreviations of the batches after the resume
        config["train"]["prefetch"] = prefetch  # batches built ahead: the checkpoint keeps the position of those taken
    straight = load_config(write_config(tmp_path / "a.yaml", config_a))
    resumed = load_config(write_config(tmp_path / "b.yaml", config_b))

    # Keep the step-12 checkpoint of the straight run, as a crash right after it would have left it.
    original_save = checkpoint.save_checkpoint

    def save_and_keep(path, state):
        original_save(path, state)
        if state["step"] == 12 and path.name == "last.pt":
            shutil.copy(path, tmp_path / "step12.pt")

    monkeypatch.setattr(checkpoint, "save_checkpoint", save_and_keep)
    train(straight, log=lambda message: None)
    monkeypatch.setattr(checkpoint, "save_checkpoint", original_save)

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


def test_resume_needs_a_training_checkpoint_not_an_export(tmp_path, tiny_corpus, trained):
    from pinyin_hanzi.checkpoint_copies import export_checkpoint

    _, _, best = trained
    config = load_config(write_config(tmp_path / "c.yaml", tiny_config_dict(tmp_path, tiny_corpus)))
    export_checkpoint(best, tmp_path / "checkpoints" / "tiny" / "last.pt")
    with pytest.raises(CheckpointError, match="cannot resume from .*last.pt: it holds no optimizer.*--init-from"):
        train(config, resume=True, log=lambda message: None)


def test_a_new_run_never_replaces_an_existing_one(trained):
    tmp, config_path, best = trained
    before = best.read_bytes()
    with pytest.raises(TrainingError, match="--resume.*--overwrite"):
        train(load_config(config_path), log=lambda message: None)
    assert best.read_bytes() == before


def _nan_on(monkeypatch, bad_batches):
    """Make the training loss NaN on the given training batches (counted from 1; evaluation untouched)."""
    original, calls = losses.summed_loss, [0]

    def summed_loss(*args, **kwargs):
        summed = original(*args, **kwargs)
        if torch.is_grad_enabled():
            calls[0] += 1
            if bad_batches(calls[0]):
                summed = summed * float("nan")
        return summed

    monkeypatch.setattr(losses, "summed_loss", summed_loss)


def test_a_non_finite_loss_skips_the_batch_with_a_warning(tmp_path, tiny_corpus, monkeypatch):
    torch.set_num_threads(1)
    config = load_config(write_config(tmp_path / "c.yaml", tiny_config_dict(
        tmp_path, tiny_corpus, max_steps=12, eval_every=6, batch_tokens=64, attention_sentences=0)))
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
        tmp_path, tiny_corpus, max_steps=20, eval_every=5, batch_tokens=64, max_bad_steps=3,
        attention_sentences=0)))
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


def test_a_bf16_step_multiplies_in_bf16_and_keeps_fp32_weights_close_to_an_fp32_step():
    from pinyin_hanzi.config import ModelConfig
    from pinyin_hanzi.data.batches import Batch
    from pinyin_hanzi.models.transformer import Transformer

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
        loss, _, stepped = loop.train_step(copy, [batch], batch.n_target_tokens, optimizer, scheduler, config,
                                           torch.device("cpu"))
        assert stepped and all(p.dtype == torch.float32 for p in copy.parameters())  # master weights stay fp32
        results[precision] = (loss, output_dtypes, torch.cat([p.detach().flatten() for p in copy.parameters()]))
    assert results["fp32"][1] == [torch.float32] and results["bf16"][1] == [torch.bfloat16]
    assert results["bf16"][0] != results["fp32"][0]  # it did run in lower precision...
    assert results["bf16"][0] == pytest.approx(results["fp32"][0], rel=0.02)  # ...and computed the same loss
    before = torch.cat([p.detach().flatten() for p in model.parameters()])
    fp32_update, bf16_update = results["fp32"][2] - before, results["bf16"][2] - before
    assert torch.nn.functional.cosine_similarity(fp32_update, bf16_update, dim=0) > 0.95


def test_init_from_grows_the_vocabularies_and_keeps_the_known_rows(tmp_path, tiny_corpus, trained):
    """Continuing a model on data with new characters, typed abbreviated: the checkpoint's tokens keep their
    ids and rows, the new ones are appended, and the continued model trains and converts."""
    from pinyin_hanzi.decoding.converter import Converter
    from pinyin_hanzi.text.typed_input import PREFIX_TOKENS

    from conftest import TINY_SENTENCES

    torch.set_num_threads(1)
    _, _, best = trained
    old = load_checkpoint(best)
    corpus = tmp_path / "more.txt"
    sentences = TINY_SENTENCES[1:] + ["秋天的树叶变黄了。", "弟弟在公园放风筝。"]  # new characters, in train
    corpus.write_text("\n".join(sentences) + "\n", encoding="utf-8")
    settings = dict(max_steps=4, eval_every=4, batch_tokens=64, lr=1e-5, warmup_steps=0, attention_sentences=0)
    config_dict = tiny_config_dict(tmp_path, corpus, **settings)
    config_dict["data"]["abbreviate"] = 0.5
    config = load_config(write_config(tmp_path / "c.yaml", config_dict))
    data_dir = prepare(config.data)

    messages = []
    splits = Splits.read(data_dir, sample=4)
    model, pinyin_vocab, hanzi_vocab = training._setup_model(config, splits, None, best, str(best), messages.append)
    assert pinyin_vocab.tokens[: len(old["pinyin_vocab"])] == old["pinyin_vocab"]
    assert hanzi_vocab.tokens[: len(old["hanzi_vocab"])] == old["hanzi_vocab"]
    assert PREFIX_TOKENS <= set(pinyin_vocab.tokens)
    assert {"叶", "筝"} <= set(hanzi_vocab.tokens[len(old["hanzi_vocab"]):])
    assert "你" in hanzi_vocab  # only in the checkpoint's data now: kept, ids never move
    added = len(pinyin_vocab) - len(old["pinyin_vocab"]), len(hanzi_vocab) - len(old["hanzi_vocab"])
    assert messages == [f"initialised from {best}: {added[0]} pinyin and {added[1]} hanzi tokens added to its "
                        f"vocabularies"]
    state = model.state_dict()
    for name, tensor in old["model"].items():
        assert torch.equal(state[name][: tensor.shape[0]], tensor), name
        if state[name].shape != tensor.shape:  # new rows start as a fresh model's: small, not copies, not zero
            new_rows = state[name][tensor.shape[0]:]
            assert 0 < new_rows.std() < 1 and not torch.equal(new_rows[0], new_rows[1])
    assert model.output.weight.data_ptr() == model.target_embedding.tokens.weight.data_ptr()  # still tied

    new_best = train(config, init_from=str(best), log=lambda message: None)
    continued = Converter.from_checkpoint(new_best)
    assert continued.pinyin_vocab.tokens[: len(old["pinyin_vocab"])] == old["pinyin_vocab"]
    original = Converter.from_checkpoint(best)
    known = [example.tokens for example in read_split(trained[0] / "prepared" / "tiny", "train")]
    assert continued.convert_tokens(known) == original.convert_tokens(known)  # a few tiny steps change nothing
    # prefix tokens are model input now (unconstrained: what the lexicon allows for them is not this test's)
    assert len(continued.convert_tokens([["qiu", "tian", "zh*", "guo"]], constrained=False)[0]) == 4


def test_init_from_an_untied_model_grows_its_output_projection_too(tmp_path, tiny_corpus):
    from conftest import TINY_SENTENCES

    torch.set_num_threads(1)
    first = tiny_config_dict(tmp_path / "a", tiny_corpus, max_steps=2, eval_every=2, batch_tokens=64,
                             attention_sentences=0)
    first["model"]["tie_output"] = False
    best = train(load_config(write_config(tmp_path / "a.yaml", first)), log=lambda message: None)
    old = load_checkpoint(best)["model"]
    corpus = tmp_path / "more.txt"
    corpus.write_text("\n".join(TINY_SENTENCES + ["弟弟在公园放风筝。"]) + "\n", encoding="utf-8")
    second = tiny_config_dict(tmp_path / "b", corpus, max_steps=2, eval_every=2, batch_tokens=64,
                              attention_sentences=0)
    second["model"]["tie_output"] = False
    second["data"]["abbreviate"] = 1.0
    config = load_config(write_config(tmp_path / "b.yaml", second))
    splits = Splits.read(prepare(config.data), sample=4)
    model, pinyin_vocab, hanzi_vocab = training._setup_model(config, splits, None, best, str(best), lambda message: None)
    known = old["output.weight"].shape[0]
    assert len(hanzi_vocab) > known and len(pinyin_vocab) >= old["source_embedding.tokens.weight"].shape[0] + 26
    assert torch.equal(model.output.weight[:known], old["output.weight"])
    assert not torch.equal(model.output.weight[known:], model.target_embedding.tokens.weight[known:] * 0)
    assert model.output.weight.data_ptr() != model.target_embedding.tokens.weight.data_ptr()
    train(config, init_from=str(best), log=lambda message: None)



def test_init_from_a_deeper_config_grows_identity_layers_on_top(tmp_path, tiny_corpus, trained):
    """More encoder and decoder layers than the checkpoint has: its weights, plus layers on top whose output
    projections are zero, so the grown model computes exactly what the checkpoint did; then it trains."""
    _, _, best = trained
    old_model, *_ = checkpoint.model_from_checkpoint(load_checkpoint(best))
    settings = dict(max_steps=3, eval_every=3, batch_tokens=64, attention_sentences=0)
    config = load_config(write_config(tmp_path / "c.yaml", tiny_config_dict(tmp_path, tiny_corpus, **settings)),
                         ["model.n_encoder_layers=3", "model.n_decoder_layers=4", "train.name=deeper"])
    splits = Splits.read(prepare(config.data), sample=4)
    messages = []
    model, _, _ = training._setup_model(config, splits, None, None, str(best), messages.append)
    assert (len(model.encoder_layers), len(model.decoder_layers)) == (3, 4)
    assert messages[1].startswith("layers: encoder 2 -> 3 layers, decoder 2 -> 4 layers")
    assert "identity" in messages[1] and "shallower" not in messages[1]
    assert not model.decoder_layers[3].feed_forward.contract.weight.any()
    assert model.decoder_layers[3].feed_forward.expand.weight.std() > 0  # its inputs start as a fresh model's
    source, target = torch.randint(4, 20, (2, 6)), torch.randint(4, 20, (2, 5))
    model.eval(), old_model.eval()
    with torch.no_grad():
        assert torch.allclose(model(source, target), old_model(source, target), atol=1e-6)
    grown = train(config, init_from=str(best), log=lambda message: None)
    assert load_checkpoint(grown)["config"]["model"]["n_decoder_layers"] == 4


def test_init_from_a_shallower_config_says_which_layers_it_keeps(tmp_path, tiny_corpus, trained):
    _, _, best = trained
    config = load_config(write_config(tmp_path / "c.yaml", tiny_config_dict(tmp_path, tiny_corpus)),
                         ["model.n_decoder_layers=1", "train.name=shallower"])
    messages = []
    model, _, _ = training._setup_model(config, Splits.read(prepare(config.data), sample=4), None, None, str(best),
                                        messages.append)
    assert len(model.decoder_layers) == 1
    assert messages[1] == "layers: decoder 2 -> 1 layers; a shallower stack keeps the checkpoint's first layers"


@pytest.mark.parametrize("overrides, error", [
    (["model.n_encoder_layers=1", "model.n_heads=2"], r"model\.n_heads is 2 now but 4 in the checkpoint"),
    (["model.n_decoder_layers=3", "model.norm=post"], "only a pre-norm model grows deeper"),
    (["model.n_decoder_layers=3", "model.d_ff=256"], r"model\.d_ff is 256 now but 128"),
])
def test_init_from_changes_only_depths_and_grows_only_a_pre_norm_model(tmp_path, tiny_corpus, trained, overrides, error):
    _, _, best = trained
    config = load_config(write_config(tmp_path / "c.yaml", tiny_config_dict(tmp_path, tiny_corpus)), overrides)
    with pytest.raises(CheckpointError, match=f"^cannot start from .*best.pt.*{error}"):
        train(config, init_from=str(best), log=lambda message: None)

def _small_run(tmp_path, tiny_corpus, **settings):
    torch.set_num_threads(1)
    values = dict(max_steps=12, eval_every=6, batch_tokens=64, attention_sentences=0)  # no figures: faster
    values.update(settings)
    return load_config(write_config(tmp_path / "c.yaml", tiny_config_dict(tmp_path, tiny_corpus, **values)))


def test_the_language_models_are_counted_once_with_the_store_and_read_by_the_next_run(tmp_path, tiny_corpus):
    from pinyin_hanzi.data.corpus import read_split
    from pinyin_hanzi.data.vocab import load_vocab
    from pinyin_hanzi.lm.char_ngram import count_for
    from pinyin_hanzi.lm.syllable import SyllableBigrams

    config = _small_run(tmp_path, tiny_corpus, max_steps=2, eval_every=2, language_models=["char"])
    first, second = [], []
    train(config, log=first.append)
    counted = tmp_path / "prepared" / "tiny" / "counted"
    kept = sorted(path.name.split("-")[0] for path in counted.iterdir())
    assert kept == ["char_lm", "syllables"]
    assert any(line.startswith("character 3-gram model:") and " counted in " in line for line in first)
    config.train.name = "again"  # another run on the same data and settings reads what the first counted
    best = train(config, log=second.append)
    assert any(" read (counted once with the store) in " in line for line in second)
    saved = checkpoint.load_checkpoint(best)
    # the same models as counting the training split's text in memory (copies included) gives
    examples = read_split(tmp_path / "prepared" / "tiny", "train")
    hanzi_vocab = load_vocab(tmp_path / "prepared" / "tiny" / "hanzi_vocab.txt")
    expected = count_for(examples, hanzi_vocab, config.decode.lm_order, config.decode.lm_min_count).state_dict()
    assert _same_state(saved[checkpoint.CHAR_LM_KEY], expected)
    syllables = SyllableBigrams.count(example.tokens for example in examples)
    assert SyllableBigrams.from_state_dict(saved[checkpoint.SYLLABLE_LM_KEY]).bigrams == syllables.bigrams
    for path in counted.iterdir():  # a damaged kept file is counted again, with a note
        path.write_bytes(b"not a torch file")
    third = []
    config.train.name = "third"
    train(config, log=third.append)
    assert sum("could not be read; counting again" in line for line in third) == 2
    for path in counted.iterdir():  # a file torch reads, holding a state the model's own check refuses
        torch.save({"order": 9}, path)
    fourth = []
    config.train.name = "fourth"
    best = train(config, log=fourth.append)
    assert sum(" holds no usable " in line and "; counting again" in line for line in fourth) == 2
    assert _same_state(checkpoint.load_checkpoint(best)[checkpoint.CHAR_LM_KEY], expected)


def test_a_capped_char_model_is_counted_apart_from_the_uncapped_one_and_says_what_it_left_out(tmp_path, tiny_corpus):
    """decode.lm_max_ngrams is part of the kept model's name: a cap counts anew (the effective min counts in
    the log), no cap reads the model counted without one; the sorted runs' temporary folder is gone."""
    from pinyin_hanzi.data.corpus import data_fingerprint
    from pinyin_hanzi.data.store import TokenStore
    from pinyin_hanzi.lm.char_ngram import CharNgramLM
    from pinyin_hanzi.training.language_models import setup_language_models

    config = _small_run(tmp_path, tiny_corpus, language_models=["char"])
    out = prepare(config.data, log=lambda message: None)
    store, lines = TokenStore(out), []

    def char_model() -> dict:
        return setup_language_models(config, store, data_fingerprint(out), store.hanzi_vocab, lines.append)[1]

    size = CharNgramLM.stored_size(char_model())
    config.decode.lm_max_ngrams = size // 2
    lines.clear()
    capped = char_model()
    assert CharNgramLM.stored_size(capped) <= size // 2
    assert any(line.startswith(f"character 3-gram model capped by decode.lm_max_ngrams={size // 2:,}: it keeps "
                               f"only the 3-grams seen ") for line in lines)
    assert any(" counted in " in line for line in lines)
    config.decode.lm_max_ngrams = 0
    lines.clear()
    assert CharNgramLM.stored_size(char_model()) == size and any(" read (counted once" in line for line in lines)
    assert sorted(path.name.split("-")[0] for path in (out / "counted").iterdir()) == ["char_lm", "char_lm",
                                                                                      "syllables"]


def _same_state(a, b) -> bool:
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same_state(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(_same_state(x, y) for x, y in zip(a, b))
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    return a == b

"""Knowledge distillation (train.distill_from, training/distillation.py): the divergence term by hand, the
teacher over another vocabulary, and a run taught by the session's tiny model."""

import json
import math
from pathlib import Path

import pytest
import torch
import yaml

from pinyin_hanzi.config import load_config
from pinyin_hanzi.data.vocab import PAD_ID, SPECIALS, UNK_ID, Vocab
from pinyin_hanzi.errors import CheckpointError, ConfigError
from pinyin_hanzi.training.distillation import distillation_sum, load_teacher
from pinyin_hanzi.training.loss import model_loss_sum

from conftest import tiny_config_dict, write_config


def test_the_divergence_is_zero_for_equal_distributions_and_kl_by_hand_otherwise():
    student = torch.tensor([[[1.0, 2.0, 0.5]]])
    shared, real = torch.ones(1, 1, 3, dtype=torch.bool), torch.ones(1, 1, dtype=torch.bool)
    assert float(distillation_sum(student, student.clone(), shared, real, 1.0)) == pytest.approx(0.0, abs=1e-6)
    teacher = torch.tensor([[[0.0, 3.0, 1.0]]])
    for temperature in (1.0, 2.0):
        p = (teacher[0, 0] / temperature).softmax(-1)
        q = (student[0, 0] / temperature).softmax(-1)
        expected = temperature**2 * float((p * (p / q).log()).sum())
        assert float(distillation_sum(student, teacher, shared, real, temperature)) == pytest.approx(expected, rel=1e-5)


def test_columns_left_out_padding_and_positions_without_columns_count_nothing():
    student = torch.tensor([[[1.0, 2.0, 9.0], [0.3, 0.1, 0.2], [5.0, 1.0, 1.0]]], requires_grad=True)
    teacher = torch.tensor([[[0.0, 3.0, -9.0], [1.0, 1.0, 1.0], [0.0, 0.0, 0.0]]])
    shared = torch.tensor([[[True, True, False], [True, True, True], [False, False, False]]])
    real = torch.tensor([[True, False, True]])  # the second position is padding
    total = distillation_sum(student, teacher, shared, real, 1.0)
    alone = distillation_sum(student[:, :1, :2], teacher[:, :1, :2], shared[:, :1, :2], real[:, :1], 1.0)
    assert float(total.detach()) == pytest.approx(float(alone.detach()), rel=1e-6) and float(total.detach()) > 0
    total.backward()
    assert torch.isfinite(student.grad).all() and float(student.grad[0, 1:].abs().sum()) == 0.0
    assert float(student.grad[0, 0, 2]) == 0.0  # a column left out gets no gradient


def test_a_teacher_over_another_vocabulary_is_read_by_token_names(trained):
    _, _, best = trained
    state = torch.load(best, weights_only=True)
    teacher_hanzi = Vocab(state["hanzi_vocab"])
    ours = Vocab([*SPECIALS, "新", *reversed(teacher_hanzi.tokens[len(SPECIALS):])])  # one unknown, the rest reordered
    teacher = load_teacher(state, best, Vocab(state["pinyin_vocab"]), ours, 0.5, 1.0, torch.device("cpu"))
    assert teacher.hanzi_ids[ours.ids["新"]] == UNK_ID and not teacher.known[ours.ids["新"]]
    for token in ours.tokens:
        if token != "新":
            assert teacher.hanzi_ids[ours.ids[token]] == teacher_hanzi.ids[token] and teacher.known[ours.ids[token]]
    assert not any(p.requires_grad for p in teacher.model.parameters()) and not teacher.model.training


@pytest.mark.parametrize("loss", ["candidates", "full"])
def test_the_loss_mixes_reference_and_teacher_by_the_weight(trained, loss):
    from pinyin_hanzi.checkpoint import load_for_inference
    from pinyin_hanzi.data.batches import Batch
    from pinyin_hanzi.text.lexicon import Lexicon

    _, _, best = trained
    parts = load_for_inference(best)
    state = torch.load(best, weights_only=True)
    student = parts.model
    torch.manual_seed(0)
    batch = Batch(torch.randint(4, len(parts.pinyin_vocab), (3, 5)), torch.randint(4, len(parts.hanzi_vocab), (3, 5)))
    batch.target[2, 3:] = PAD_ID
    candidates = Lexicon(parts.hanzi_vocab).for_vocab(parts.pinyin_vocab) if loss == "candidates" else None
    losses = {}
    with torch.no_grad():
        plain, tokens = model_loss_sum(student, batch, 0.0, candidates)
        for weight in (0.0, 0.3, 1.0):
            teacher = load_teacher(state, best, parts.pinyin_vocab, parts.hanzi_vocab, weight, 1.0, torch.device("cpu"))
            losses[weight], counted = model_loss_sum(student, batch, 0.0, candidates, teacher)
            assert counted == tokens == 13
    assert float(losses[0.0]) == pytest.approx(float(plain), rel=1e-6)
    assert float(losses[1.0]) == pytest.approx(0.0, abs=1e-4)  # the student is its own teacher here
    assert float(losses[0.3]) == pytest.approx(0.7 * float(plain) + 0.3 * float(losses[1.0]), rel=1e-5)
    with torch.no_grad():
        for weight in student.decoder_layers[0].parameters():  # the student's own copy: the teacher keeps its own
            weight.add_(torch.randn_like(weight), alpha=0.5)
        assert float(model_loss_sum(student, batch, 0.0, candidates, teacher)[0]) > 1e-3


def test_a_run_taught_by_a_deeper_model_trains_and_validates_on_the_reference(trained, tmp_path):
    from pinyin_hanzi.training.recipe import train

    _, config_path, best = trained
    config = tiny_config_dict(tmp_path, Path("unused"), max_steps=30, eval_every=30, name="student",
                              distill_from=str(best), distill_weight=0.7, distill_temperature=2.0, loss="candidates",
                              attention_sentences=0)
    config["data"] = yaml.safe_load(config_path.read_text(encoding="utf-8"))["data"]  # its data, prepared already
    config["model"]["n_decoder_layers"] = 1
    messages = []
    student = train(load_config(write_config(tmp_path / "student.yaml", config)), log=messages.append)
    assert any(message.startswith(f"distilling from {best}") and "0.7 of the loss" in message for message in messages)
    saved = torch.load(student, weights_only=True)
    assert saved["config"]["train"]["distill_from"] == str(best) and saved["config"]["model"]["n_decoder_layers"] == 1
    runs = tmp_path / "runs" / "student"
    steps = [json.loads(line) for line in (runs / "train_log.jsonl").read_text().splitlines()]
    evaluations = [json.loads(line) for line in (runs / "eval_log.jsonl").read_text().splitlines()]
    assert len(steps) == 30 and all(math.isfinite(step["loss"]) for step in steps)
    assert evaluations and all(math.isfinite(record["valid_loss"]) for record in evaluations)


def test_a_teacher_that_cannot_be_read_is_one_line_before_anything_is_prepared(trained, tmp_path):
    from pinyin_hanzi.training.recipe import train

    config = tiny_config_dict(tmp_path, trained[0] / "corpus.txt", distill_from=str(tmp_path / "missing.pt"))
    with pytest.raises(CheckpointError, match="not found") as error:
        train(load_config(write_config(tmp_path / "bad.yaml", config)), log=lambda message: None)
    assert "\n" not in str(error.value) and not list((tmp_path / "prepared").rglob("stats.json"))  # nothing prepared
    for key, value in (("distill_weight", 1.5), ("distill_temperature", 0)):
        config = tiny_config_dict(tmp_path, trained[0] / "corpus.txt", **{key: value})
        with pytest.raises(ConfigError, match=f"train.{key}"):
            load_config(write_config(tmp_path / "bad.yaml", config))


def test_a_teacher_that_is_the_runs_own_checkpoint_is_refused_before_anything_moves(tmp_path):
    """--overwrite sets the run's checkpoints aside before the teacher is read (it was then 'not found'), and a
    resumed run rewrites them (the teacher would be the student): one line, and the run's files stay."""
    from pinyin_hanzi.training.recipe import train

    folder = tmp_path / "checkpoints" / "tiny"
    folder.mkdir(parents=True)
    (folder / "last.pt").write_bytes(b"the run's own checkpoint")  # refused before it is read
    for teacher in (folder / "last.pt", tmp_path / "checkpoints" / ".." / "checkpoints" / "tiny" / "last.pt"):
        config = load_config(write_config(tmp_path / "c.yaml", tiny_config_dict(
            tmp_path, tmp_path / "corpus.txt", distill_from=str(teacher))))
        for mode, why in (("overwrite", "which --overwrite replaces"), ("resume", "which the run rewrites")):
            with pytest.raises(ConfigError) as error:
                train(config, log=lambda message: None, **{mode: True})
            assert str(error.value).startswith(f"train.distill_from={teacher} is this run's own checkpoint, {why}")
            assert str(error.value).endswith(f"copy it elsewhere first (cp {teacher} teacher.pt) and set "
                                             f"train.distill_from=teacher.pt")
    assert sorted(path.name for path in folder.iterdir()) == [".lock", "last.pt"]  # nothing set aside
    assert (folder / "last.pt").read_bytes() == b"the run's own checkpoint"

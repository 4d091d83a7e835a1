"""Validation during training (training/validation.py): its loss, and greedy conversions that are the
converter's without a converter."""

import json
import subprocess
import sys

import pytest
import torch

from pinyin_hanzi.config import config_from_dict
from pinyin_hanzi.data.batches import encode_split, split_batch
from pinyin_hanzi.data.corpus import read_examples
from pinyin_hanzi.evaluation.metrics import conversion_scores
from pinyin_hanzi.text.lexicon import Lexicon
from pinyin_hanzi.training.loss import model_loss
from pinyin_hanzi.training.validation import greedy_conversions, validate

from conftest import FRESH_ENV, ROOT, tiny_config_dict, write_config


@pytest.fixture(scope="module")
def converter(trained):
    from pinyin_hanzi.decoding.converter import Converter

    _, _, best = trained
    return Converter.from_checkpoint(best)


def test_validation_loss_is_the_unsmoothed_loss_per_token_and_accuracy_is_of_the_first_sentences(trained, converter,
                                                                                                  tmp_path):
    tmp, _, _ = trained
    examples = read_examples(tmp / "prepared" / "tiny" / "train.tsv")
    encoded = encode_split(examples, converter.pinyin_vocab, converter.hanzi_vocab)
    raw = tiny_config_dict(tmp_path, tmp_path / "unused.txt", eval_sentences=4, label_smoothing=0.3)
    config = config_from_dict(raw)
    result = validate(converter.model, encoded, examples, Lexicon(converter.hanzi_vocab), config, torch.device("cpu"))

    with torch.no_grad():  # one example at a time
        losses = [model_loss(converter.model, split_batch(encoded, [index]), 0.0) for index in range(len(examples))]
    expected = sum(float(value) * n for value, n in losses) / sum(n for _, n in losses)
    assert result["loss"] == pytest.approx(expected, rel=1e-5)  # smoothing is for training only
    outputs = converter.convert_tokens([e.tokens for e in examples[:4]])
    assert {k: result[k] for k in ("char_accuracy", "cer", "exact", "sentences")} == {
        k: v for k, v in conversion_scores(outputs, [e.hanzi for e in examples[:4]]).items() if k != "characters"}
    assert result["sentences"] == 4 and len(result["samples"]) == 4
    assert result["samples"][0].startswith(" ".join(examples[0].tokens) + "  →  ")


@pytest.mark.parametrize("constrained", [True, False])
def test_greedy_conversions_are_the_converters_for_any_corpus_tokens(trained, converter, constrained):
    """Known and unknown syllables, a single-letter syllable that may be a Latin letter, a symbol and a
    syllable none of whose characters the model knows (their fallbacks), prefix tokens, an empty list, in
    batches smaller than the input and sorted by length: the search gives what convert_tokens gives."""
    tmp, _, _ = trained
    token_lists = [e.tokens for e in read_examples(tmp / "prepared" / "tiny" / "train.tsv")]
    token_lists += [["ni", "hao", "＠"], ["o"], ["zhuai", "wo", "men"], ["xyz", "2"], [], ["zh*", "g*", "ren"],
                    ["wo", "men", "qu", "bei", "jing", "ba", "。"] * 2]  # <= data.max_len, as valid examples are
    for batch_size in (3, 256):
        expected = converter.convert_tokens(token_lists, constrained=constrained, batch_size=batch_size)
        found = greedy_conversions(converter.model, [converter.pinyin_vocab.encode(t) for t in token_lists],
                                   token_lists, Lexicon(converter.hanzi_vocab), constrained=constrained,
                                   batch_size=batch_size)
        assert found == expected
    assert found[-3] == "" and (found[-7] == "你好＠" or not constrained)  # constrained: the symbol's fallback


def test_training_builds_no_converter(tmp_path, tiny_corpus):
    """Training sits below the inference API: a whole run (validation, the candidate loss, checkpoints)
    imports no Converter, not even lazily."""
    config = tiny_config_dict(tmp_path, tiny_corpus, max_steps=2, eval_every=2, batch_tokens=64,
                              attention_sentences=0, loss="candidates")
    script = (f"import json, sys\nfrom pinyin_hanzi.config import load_config\n"
              f"from pinyin_hanzi.training.recipe import train\n"
              f"train(load_config({str(write_config(tmp_path / 'c.yaml', config))!r}), log=lambda message: None)\n"
              f"print(json.dumps(sorted(name for name in sys.modules if name.startswith('pinyin_hanzi.'))))")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=300,
                            env=FRESH_ENV)
    assert result.returncode == 0, result.stderr
    imported = json.loads(result.stdout.splitlines()[-1])
    assert "pinyin_hanzi.training.validation" in imported and (tmp_path / "checkpoints" / "tiny" / "last.pt").is_file()
    assert not {"pinyin_hanzi.decoding.converter", "pinyin_hanzi.evaluation.evaluate"} & set(imported)

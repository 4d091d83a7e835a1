"""Copies of a checkpoint (pinyin_hanzi/checkpoint_copies.py): the inference-only export
(``python -m pinyin_hanzi.cli.export``) and the decode settings it may change."""

import pytest
import torch

from pinyin_hanzi.checkpoint import load_checkpoint, model_from_checkpoint, save_checkpoint
from pinyin_hanzi.data.corpus import read_split
from pinyin_hanzi.data.vocab import Vocab
from pinyin_hanzi.decoding.converter import Converter


def test_export_keeps_what_translation_needs_in_half_precision(trained, tmp_path):
    from pinyin_hanzi.checkpoint_copies import export_checkpoint

    tmp, _, best = trained
    exported = tmp_path / "shipped" / "model.pt"
    result = export_checkpoint(best, exported)
    state = load_checkpoint(exported)
    assert "optimizer" not in state and "rng" not in state and "batches" not in state
    assert all(t.dtype == torch.float16 for t in state["model"].values() if t.is_floating_point())
    assert result["bytes"] < best.stat().st_size / 4  # no Adam moments, half the bytes per weight
    examples = read_split(tmp / "prepared" / "tiny", "train")
    tokens = [e.tokens for e in examples]
    original = Converter(*model_from_checkpoint(load_checkpoint(best))[:3]).convert_tokens(tokens)
    assert Converter(*model_from_checkpoint(state)[:3]).convert_tokens(tokens) == original


def test_export_stores_older_n_gram_and_syllable_tables_in_the_current_compact_form(trained, tmp_path):
    from pinyin_hanzi.checkpoint_copies import export_checkpoint
    from pinyin_hanzi.lm.char_ngram import CharNgramLM, count_for
    from pinyin_hanzi.lm.syllable import SyllableBigrams

    tmp, _, best = trained
    state = load_checkpoint(best)
    lm = count_for(read_split(tmp / "prepared" / "tiny", "train"), Vocab(state["hanzi_vocab"]), order=3)
    older = lm.state_dict()  # as files written before the keys were stored as steps: plain int32 key columns
    for k, table in older["tables"].items():
        del table["context_key_steps"]
        table["context_keys"] = lm.contexts[k][0].int()
    syllables = SyllableBigrams.from_state_dict(state["syllable_lm"])
    older_syllables = {"unigrams": syllables.unigrams, "bigrams": syllables.bigrams}  # as files written before it was packed
    with_lm = tmp_path / "older.pt"
    save_checkpoint(with_lm, {**state, "char_lm": older, "syllable_lm": older_syllables})
    export_checkpoint(with_lm, tmp_path / "exported.pt")
    exported_syllables = load_checkpoint(tmp_path / "exported.pt")["syllable_lm"]
    assert "syllables" in exported_syllables and "bigrams" not in exported_syllables
    assert SyllableBigrams.from_state_dict(exported_syllables).bigrams == syllables.bigrams
    exported = load_checkpoint(tmp_path / "exported.pt")["char_lm"]
    assert all("context_key_steps" in table and "context_keys" not in table for table in exported["tables"].values())
    again = CharNgramLM.from_state_dict(exported)
    for k in lm.grams:
        assert torch.equal(again.grams[k][0], lm.grams[k][0]) and torch.equal(again.contexts[k][0], lm.contexts[k][0])


def test_export_can_change_the_default_decode_settings_and_nothing_else(trained, tmp_path):
    from pinyin_hanzi.checkpoint_copies import export_checkpoint
    from pinyin_hanzi.errors import ConfigError

    _, _, best = trained
    exported = tmp_path / "model.pt"
    export_checkpoint(best, exported, decode_overrides=["decode.prefix_beam=12", "decode.beam=3"])
    converter = Converter.from_checkpoint(exported)
    assert (converter.decode.prefix_beam, converter.beam) == (12, 3)
    assert load_checkpoint(exported)["config"]["model"] == load_checkpoint(best)["config"]["model"]
    for override, message in [("model.d_model=8", "only decode.* settings"), ("decode.beam=0", "decode.beam=0 is invalid"),
                              ("decode.bem=3", "unknown key decode.bem"), ("beam=3", "expected decode.key=value")]:
        with pytest.raises(ConfigError, match=message):
            export_checkpoint(best, tmp_path / "refused.pt", decode_overrides=[override])
        assert not (tmp_path / "refused.pt").exists()


def test_export_refuses_a_user_dictionary_that_no_load_of_the_copy_could_read(trained, tmp_path, capsys):
    """python -m pinyin_hanzi.cli.export --set decode.user_words=FILE: every load of the copy reads FILE, so
    a device, a folder, a missing file, one without a usable word or none the model can write is one error
    line and no copy; a dictionary that loads is kept, and the copy converts with it."""
    from pinyin_hanzi.cli import export

    _, _, best = trained
    (tmp_path / "folder").mkdir()
    (tmp_path / "comments.txt").write_text("# only a comment\n", encoding="utf-8")
    (tmp_path / "unwritable.txt").write_text("电脑\n", encoding="utf-8")
    (tmp_path / "words.txt").write_text("北京 bei jing 2\n", encoding="utf-8")
    target = tmp_path / "model.pt"
    for words, message in [("/dev/zero", "cannot read user words from /dev/zero: not a regular file"),
                           (tmp_path / "folder", "folder: not a regular file"),
                           (tmp_path / "missing.txt", "user words file not found:"),
                           (tmp_path / "comments.txt", "comments.txt has no usable user word"),
                           (tmp_path / "unwritable.txt", "none of its 1 words can be written")]:
        assert export.main([str(best), str(target), "--set", f"decode.user_words={words}"]) == 2
        out, err = capsys.readouterr()
        assert out == "" and err.count("\n") == 1 and err.startswith(f"error: decode.user_words={words}: "), err
        assert message in err and not target.exists()
    assert export.main([str(best), str(target), "--set", f"decode.user_words={tmp_path / 'words.txt'}"]) == 0
    converter = Converter.from_checkpoint(target)
    assert converter.user_words is not None and converter.user_words.weights == {"北京": 2.0}

"""Changed copies of a checkpoint, each written whole (through :func:`pinyin_hanzi.checkpoint.save_checkpoint`)
to a new path: the inference-only export that ships (``python -m pinyin_hanzi.cli.export``), and copies with a
character n-gram model counted in (``cli.char_lm``) or a word model added or removed (``cli.word_lm``).

They sit above both the checkpoint layout and the language models: the layout knows which entry holds which
model, the models know their own state, and these put the two together with the config and the data.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import torch

from pinyin_hanzi.checkpoint import (
    CHAR_LM_KEY,
    CONFIG_KEY,
    EXPORTED_KEYS,
    HANZI_VOCAB_KEY,
    MODEL_KEY,
    RESUME_KEYS,
    SYLLABLE_LM_KEY,
    WORD_LM_KEY,
    load_checkpoint,
    model_from_checkpoint,
    save_checkpoint,
)
from pinyin_hanzi.config import apply_overrides, config_from_dict
from pinyin_hanzi.data.corpus import prepared_store, training_texts
from pinyin_hanzi.data.prepare import phrase_texts
from pinyin_hanzi.data.vocab import Vocab
from pinyin_hanzi.errors import CheckpointError, ConfigError, DataError
from pinyin_hanzi.lm.char_ngram import CharNgramLM, count_store
from pinyin_hanzi.lm.syllable import SyllableBigrams
from pinyin_hanzi.lm.user_words import UserWords
from pinyin_hanzi.lm.word import WordLexiconLM, word_model


def export_checkpoint(source: str | Path, target: str | Path, half: bool = True,
                      decode_overrides: list[str] | tuple[str, ...] = ()) -> dict:
    """Write an inference-only copy of a training checkpoint: weights (float16 when ``half``), config,
    vocabularies, the syllable model and the n-gram models (the syllable and character models stored anew, in
    their ``state_dict``'s current form); no optimizer, scheduler, data position or RNG state.
    ``decode_overrides``: ``decode.key=value`` settings that the copy decodes with by default (the other
    sections describe how the weights were made, and stay). Returns {"parameters", "bytes"}. Raises
    CheckpointError as :func:`load_checkpoint` does, ConfigError (one line) for a bad override, and
    CheckpointError before anything is read if ``target`` is ``source`` itself or another training checkpoint
    (see :func:`_check_export_target`)."""
    _check_export_target(Path(source), Path(target))
    state = load_checkpoint(source)
    model_from_checkpoint(state, str(source))  # the weights must fit their config before we ship them
    if decode_overrides:
        config = config_from_dict(state[CONFIG_KEY], str(source))
        apply_overrides(config, decode_overrides, sections=("decode",))
        state[CONFIG_KEY] = config_from_dict(config.to_dict(), "command line").to_dict()  # validated as a whole
        if config.decode.user_words:  # every load of the copy reads it: one that cannot be read is refused now
            _check_user_words(config.decode.user_words, Vocab(state[HANZI_VOCAB_KEY]))
    weights, converted = {}, {}
    for name, tensor in state[MODEL_KEY].items():
        shared = (tensor.data_ptr(), tensor.shape)  # tied weights (embedding = output) stay one tensor, saved once
        if shared not in converted:
            converted[shared] = tensor.half() if half and tensor.is_floating_point() else tensor
        weights[name] = converted[shared]
    if state.get(CHAR_LM_KEY) is not None:  # in the current, most compact storage, whenever it was counted
        state[CHAR_LM_KEY] = CharNgramLM.from_state_dict(state[CHAR_LM_KEY]).state_dict()
    if state.get(SYLLABLE_LM_KEY) is not None:  # likewise
        state[SYLLABLE_LM_KEY] = SyllableBigrams.from_state_dict(state[SYLLABLE_LM_KEY]).state_dict()
    save_checkpoint(target, {**{key: state[key] for key in EXPORTED_KEYS if key in state}, MODEL_KEY: weights})
    return {"parameters": sum(t.numel() for t in converted.values()), "bytes": Path(target).stat().st_size}


def _check_user_words(path: str, hanzi_vocab: Vocab) -> None:
    """ConfigError (one line) unless the copy's decode.user_words ``path`` is a dictionary the copy can load: a
    regular file within UserWords' size limit, readable, with a word the model's characters can write."""
    try:
        UserWords.read(path).model(hanzi_vocab)
    except DataError as error:
        raise ConfigError(f"decode.user_words={path}: {error}") from None


def _check_export_target(source: Path, target: Path) -> None:
    """CheckpointError unless writing an export to ``target`` loses nothing: ``target`` must not be ``source``
    under any spelling (``./x.pt``, a symlink, a hard link: the same file, by device and inode), nor any other
    checkpoint that --resume could continue (an export keeps no optimizer, schedule or data position, so
    writing over a training checkpoint would silently end its run). A previous export may be replaced."""
    try:
        same = target.exists() and source.exists() and os.path.samefile(source, target)
    except OSError:  # unreadable: load_checkpoint or save_checkpoint says why
        return
    if same:
        raise CheckpointError(f"cannot export {source} onto itself ({target} is the same file): the export would "
                              f"replace the training checkpoint; name another target, e.g. "
                              f"{source.with_name(source.stem + '.export.pt')}")
    if target.is_file() and _is_training_checkpoint(target):
        raise CheckpointError(f"cannot export to {target}: it holds a training checkpoint that --resume continues, "
                              f"which an inference-only export would replace; name another target")


def _is_training_checkpoint(path: Path) -> bool:
    """Whether ``path`` holds a checkpoint with the state --resume restores. Memory-mapped, so that only the
    keys are read, not the weights; a file that is no checkpoint is none."""
    try:
        with warnings.catch_warnings():  # quiet: a file torch warns about is no training checkpoint either
            warnings.simplefilter("ignore")
            state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception:  # noqa: BLE001 - junk bytes make torch's unpickler raise about anything
        return False
    return isinstance(state, dict) and all(key in state for key in RESUME_KEYS)


def count_char_lm(checkpoint: str | Path, out: str | Path, *, order: int = 3, min_count: int = 1,
                  phrases: int = 0, weight: float = 0.6, max_ngrams: int = 0) -> tuple[CharNgramLM, Path]:
    """Write a copy of ``checkpoint`` to ``out`` with a character n-gram model counted from its training split
    (for checkpoints trained without one, or to count it again: train.py adds one itself when
    decode.lm_weight > 0), its decode.lm_* settings updated. Returns the model and the split it counted.
    Raises CheckpointError for an unreadable checkpoint, DataError when its prepared data is missing."""
    state = load_checkpoint(checkpoint)
    config = config_from_dict(state[CONFIG_KEY], str(checkpoint))
    train, hanzi_vocab = prepared_store(config.data), Vocab(state[HANZI_VOCAB_KEY])
    table = phrase_texts(config.data.raw_dir) if phrases else []
    lm = count_store(train.split("train", hanzi_vocab=hanzi_vocab), hanzi_vocab, order, min_count, table, phrases,
                     max_ngrams=max_ngrams, spill_dir=train.folder)
    decode = config.decode
    decode.lm_weight, decode.lm_order, decode.lm_min_count, decode.lm_phrases = weight, order, min_count, phrases
    decode.lm_max_ngrams = max_ngrams
    state[CONFIG_KEY], state[CHAR_LM_KEY] = config.to_dict(), lm.state_dict()
    save_checkpoint(out, state)
    return lm, train.folder


def add_word_lm(checkpoint: str | Path, out: str | Path, *, table: str = "wordfreq-zh",
                min_frequency: float = 1e-7, weight: float = 0.5, contrast: float = 0.0) -> WordLexiconLM:
    """Write a copy of ``checkpoint`` to ``out`` with a word model built from the word-frequency table
    ``table`` (fetched into the checkpoint config's data.raw_dir if needed) and decode.word_* set to these
    values; ``contrast`` > 0 divides by the words' frequencies in the checkpoint's training split. Raises
    CheckpointError for an unreadable checkpoint, DataError when the table cannot be had or the training
    split (needed for ``contrast``) is missing."""
    state = load_checkpoint(checkpoint)
    config = config_from_dict(state[CONFIG_KEY], str(checkpoint))
    decode = config.decode
    decode.word_table, decode.word_min_frequency, decode.word_weight = table, min_frequency, weight
    decode.word_contrast = contrast
    background = []
    if contrast > 0:
        background = (hanzi for _, hanzi in training_texts(config.data, "the contrast needs the training split; "))
    lm = word_model(decode, config.data.raw_dir, Vocab(state[HANZI_VOCAB_KEY]), background)
    state[CONFIG_KEY], state[WORD_LM_KEY] = config.to_dict(), lm.state_dict()
    save_checkpoint(out, state)
    return lm


def remove_word_lm(checkpoint: str | Path, out: str | Path) -> bool:
    """Write a copy of ``checkpoint`` to ``out`` without a word model and with decode.word_weight 0: a model
    that decodes best without one ships without its megabytes. Returns whether there was one to remove.
    Raises CheckpointError for an unreadable checkpoint."""
    state = load_checkpoint(checkpoint)
    config = config_from_dict(state[CONFIG_KEY], str(checkpoint))
    config.decode.word_weight, config.decode.word_contrast = 0.0, 0.0
    state[CONFIG_KEY] = config.to_dict()
    had = state.pop(WORD_LM_KEY, None) is not None
    save_checkpoint(out, state)
    return had

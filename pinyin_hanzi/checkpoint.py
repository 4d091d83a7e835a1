"""Self-contained checkpoints and their layout: format version, config, both vocabularies, model/optimizer/
scheduler state, step, best validation score, data position and RNG state. ``translate.py`` needs nothing
else.

This module owns the layout: the ``*_KEY`` constants name every entry, :func:`training_checkpoint` builds
what training writes, :data:`EXPORTED_KEYS` is what an inference-only copy keeps, and :func:`load_checkpoint`
checks every entry's type before anyone reads it. Written to a temporary file and renamed into place, so a
crash never leaves a half-written checkpoint; read with ``torch.load(weights_only=True)``, so loading one
never runs pickled code.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path

import torch

from pinyin_hanzi.char_lm import CharNgramLM
from pinyin_hanzi.config import Config, config_from_dict
from pinyin_hanzi.errors import CheckpointError, ConfigError
from pinyin_hanzi.model import Transformer
from pinyin_hanzi.syllable_lm import SyllableBigrams
from pinyin_hanzi.vocab import Vocab
from pinyin_hanzi.word_lm import WordLexiconLM

FORMAT_VERSION = 1
TEMPORARY_SUFFIX = ".tmp"  # a checkpoint being written: PATH.tmp, renamed to PATH when complete

# The entries of a checkpoint. Every writer and reader names them through these constants.
FORMAT_VERSION_KEY = "format_version"  # int, FORMAT_VERSION
CONFIG_KEY = "config"  # the resolved Config as a plain dict (Config.to_dict)
PINYIN_VOCAB_KEY = "pinyin_vocab"  # list[str]: the source vocabulary's tokens in id order
HANZI_VOCAB_KEY = "hanzi_vocab"  # list[str]: the target vocabulary's tokens in id order
MODEL_KEY = "model"  # dict[str, Tensor]: the unwrapped Transformer's state_dict
STEP_KEY = "step"  # int: optimizer steps taken
SYLLABLE_LM_KEY = "syllable_lm"  # SyllableBigrams.state_dict(), the prior of readings
CHAR_LM_KEY = "char_lm"  # CharNgramLM.state_dict(); only when the run counted one (decode.lm_weight > 0)
WORD_LM_KEY = "word_lm"  # WordLexiconLM.state_dict(); only when the run counted one (decode.word_weight > 0)
VALID_ACCURACY_KEY = "valid_char_accuracy"  # float: this checkpoint's validation character accuracy
ELAPSED_KEY = "elapsed_seconds"  # float: training wall time up to this checkpoint, resumed runs included
# What only --resume needs:
OPTIMIZER_KEY = "optimizer"  # AdamW state_dict
SCHEDULER_KEY = "scheduler"  # LambdaLR state_dict
BEST_ACCURACY_KEY = "best_accuracy"  # float: the best validation character accuracy of the run so far
BATCHES_KEY = "batches"  # BatchStream.state_dict(): the data position
RNG_KEY = "rng"  # the random generators' states (training.rng_state)
DATA_FINGERPRINT_KEY = "data_fingerprint"  # str: corpus.data_fingerprint of the prepared data it trained on

REQUIRED_KEYS = (FORMAT_VERSION_KEY, CONFIG_KEY, PINYIN_VOCAB_KEY, HANZI_VOCAB_KEY, MODEL_KEY, STEP_KEY)
RESUME_KEYS = (OPTIMIZER_KEY, SCHEDULER_KEY, BEST_ACCURACY_KEY, BATCHES_KEY, RNG_KEY)
# What an exported (inference-only) checkpoint keeps of a training checkpoint, besides its weights.
EXPORTED_KEYS = (CONFIG_KEY, PINYIN_VOCAB_KEY, HANZI_VOCAB_KEY, STEP_KEY, SYLLABLE_LM_KEY, CHAR_LM_KEY, WORD_LM_KEY,
                 VALID_ACCURACY_KEY, ELAPSED_KEY)


def training_checkpoint(*, config: dict, pinyin_vocab: list[str], hanzi_vocab: list[str], model: dict,
                        optimizer: dict, scheduler: dict, step: int, best_accuracy: float,
                        valid_char_accuracy: float, batches: dict, rng: dict, syllable_lm: dict,
                        char_lm: dict | None, elapsed_seconds: float, word_lm: dict | None = None,
                        data_fingerprint: str | None = None) -> dict:
    """The state training writes to ``last.pt`` and ``best.pt``, from plain values and state dicts (see the
    ``*_KEY`` constants for what each one is); ``char_lm``, ``word_lm`` or ``data_fingerprint`` None leaves
    its entry out."""
    state = {CONFIG_KEY: config, PINYIN_VOCAB_KEY: pinyin_vocab, HANZI_VOCAB_KEY: hanzi_vocab, MODEL_KEY: model,
             OPTIMIZER_KEY: optimizer, SCHEDULER_KEY: scheduler, STEP_KEY: step, BEST_ACCURACY_KEY: best_accuracy,
             VALID_ACCURACY_KEY: valid_char_accuracy, BATCHES_KEY: batches, RNG_KEY: rng,
             SYLLABLE_LM_KEY: syllable_lm}
    if char_lm is not None:
        state[CHAR_LM_KEY] = char_lm
    if word_lm is not None:
        state[WORD_LM_KEY] = word_lm
    if data_fingerprint is not None:
        state[DATA_FINGERPRINT_KEY] = data_fingerprint
    state[ELAPSED_KEY] = elapsed_seconds
    return state


def save_checkpoint(path: str | Path, state: dict) -> None:
    """Atomically write ``state`` (plain containers and tensors) to ``path``, with the format version: a
    process killed at any moment leaves either the previous file or the new one, never a mix.

    A write that fails (OSError: disk full, read-only) or is interrupted (Ctrl-C) removes its temporary
    file and leaves the previous ``path`` as it was; the OSError goes on naming ``path``."""
    path = Path(path)
    temporary = path.with_name(path.name + TEMPORARY_SUFFIX)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(temporary, "wb") as handle:
            torch.save({FORMAT_VERSION_KEY: FORMAT_VERSION, **state}, handle)
            handle.flush()
            os.fsync(handle.fileno())  # the bytes are on disk before the rename makes them the checkpoint
        os.replace(temporary, path)
    except BaseException as error:
        with contextlib.suppress(OSError):  # a read-only disk may refuse this too: the first error counts
            temporary.unlink(missing_ok=True)
        if isinstance(error, OSError):
            raise OSError(error.errno, error.strerror, str(path)) from None
        raise


def load_checkpoint(path: str | Path) -> dict:
    """The checkpoint's state dict, its entries checked (see :func:`validate_checkpoint`). CheckpointError
    (one line) if it is missing, unreadable, truncated, corrupt, not one of ours, of another format version,
    or holds an entry of the wrong type."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint not found: {path}")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # noqa: BLE001 - on junk bytes torch's unpickler raises about anything
        # (IndexError, KeyError, UnpicklingError, RuntimeError, EOFError, ...); all of them mean "not a checkpoint"
        reason = str(error).strip().splitlines()[0][:120] if str(error).strip() else type(error).__name__
        raise CheckpointError(f"cannot read checkpoint {path}: truncated, corrupt or not a checkpoint ({reason})") from None
    validate_checkpoint(state, str(path))
    return state


def validate_checkpoint(state, where: str = "checkpoint") -> None:
    """CheckpointError (one line, naming ``where``) unless ``state`` has the required entries, this format
    version, and every entry it has is of the type the layout gives it: config a dict, vocabularies lists of
    str, model a dict of tensors, syllable_lm and char_lm the state dicts of their models."""
    if not isinstance(state, dict) or any(key not in state for key in REQUIRED_KEYS):
        raise CheckpointError(f"{where} is not a pinyin_hanzi checkpoint (missing keys)")
    if state[FORMAT_VERSION_KEY] != FORMAT_VERSION:
        raise CheckpointError(f"{where} has checkpoint format {state[FORMAT_VERSION_KEY]!r}, this code reads "
                              f"{FORMAT_VERSION}")
    for key, (fits, expected) in _ENTRY_TYPES.items():
        if key in state and not fits(state[key]):
            raise CheckpointError(f"{where} is not a pinyin_hanzi checkpoint: its {key} is not {expected}")
    if SYLLABLE_LM_KEY in state and (problem := _syllable_lm_problem(state[SYLLABLE_LM_KEY])):
        raise CheckpointError(f"{where} is not a pinyin_hanzi checkpoint: its syllable model {problem}")
    if CHAR_LM_KEY in state and (problem := _char_lm_problem(state[CHAR_LM_KEY], len(state[HANZI_VOCAB_KEY]))):
        raise CheckpointError(_char_lm_error(where, problem))
    if WORD_LM_KEY in state and (problem := _word_lm_problem(state[WORD_LM_KEY], len(state[HANZI_VOCAB_KEY]))):
        raise CheckpointError(f"{where}: its word model {problem}; count it again with python -m pinyin_hanzi.cli.word_lm")


def require_resumable(state: dict, where: str) -> None:
    """CheckpointError unless ``state`` holds what --resume restores (an exported checkpoint does not)."""
    missing = [key for key in RESUME_KEYS if key not in state]
    if missing:
        raise CheckpointError(f"cannot resume from {where}: it holds no {', '.join(missing)} (an inference-only "
                              f"export?); start a new run from its weights with --init-from")


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_str_list(value) -> bool:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


def _is_tensor_dict(value) -> bool:
    return isinstance(value, dict) and all(isinstance(key, str) and isinstance(tensor, torch.Tensor)
                                           for key, tensor in value.items())


def _is_dict(value) -> bool:
    return isinstance(value, dict)


_ENTRY_TYPES = {  # key -> (test, what the error calls the expected type)
    CONFIG_KEY: (_is_dict, "a dict"), PINYIN_VOCAB_KEY: (_is_str_list, "a list of str"),
    HANZI_VOCAB_KEY: (_is_str_list, "a list of str"), MODEL_KEY: (_is_tensor_dict, "a dict of tensors"),
    STEP_KEY: (_is_int, "an integer"), SYLLABLE_LM_KEY: (_is_dict, "a dict"), CHAR_LM_KEY: (_is_dict, "a dict"),
    WORD_LM_KEY: (_is_dict, "a dict"),
    VALID_ACCURACY_KEY: (_is_number, "a number"), ELAPSED_KEY: (_is_number, "a number"),
    OPTIMIZER_KEY: (_is_dict, "a dict"), SCHEDULER_KEY: (_is_dict, "a dict"),
    BEST_ACCURACY_KEY: (_is_number, "a number"), BATCHES_KEY: (_is_dict, "a dict"), RNG_KEY: (_is_dict, "a dict"),
    DATA_FINGERPRINT_KEY: (lambda value: isinstance(value, str), "a str"),
}
_CHAR_LM_TABLE = ("context_keys", "totals", "distinct", "runs", "last_ids", "counts")


def _syllable_lm_problem(state: dict) -> str | None:
    """What is wrong with a SyllableBigrams state dict, or None."""
    for name in ("unigrams", "bigrams"):
        counts = state.get(name)
        if not (isinstance(counts, dict) and all(isinstance(key, str) and _is_int(count)
                                                 for key, count in counts.items())):
            return f"has no {name} counts (a dict of str -> int)"
    return None


def _char_lm_problem(state: dict, hanzi_vocab_size: int) -> str | None:
    """What is wrong with a CharNgramLM state dict over ``hanzi_vocab_size`` characters, or None."""
    order, tables = state.get("order"), state.get("tables")
    if not (_is_int(order) and order >= 1):
        return f"order {order!r}: expected an integer >= 1"
    if state.get("vocab_size") != hanzi_vocab_size:
        return f"vocab_size {state.get('vocab_size')!r}: expected the hanzi vocabulary's {hanzi_vocab_size}"
    if not _is_number(state.get("discount")):
        return "no discount"
    unigrams = state.get("unigrams")
    if not (isinstance(unigrams, torch.Tensor) and unigrams.shape == (hanzi_vocab_size,)):
        return f"no unigram table of {hanzi_vocab_size} log-probabilities"
    if not (isinstance(tables, dict) and sorted(tables) == list(range(2, order + 1))):
        return f"no tables of orders 2..{order}"
    for k, table in tables.items():
        if not (isinstance(table, dict) and all(isinstance(table.get(name), torch.Tensor) for name in _CHAR_LM_TABLE)):
            return f"order {k}'s table lacks one of {', '.join(_CHAR_LM_TABLE)}"
    return None


def _word_lm_problem(state, hanzi_vocab_size: int) -> str | None:
    """What is wrong with a word-model entry (see WordLexiconLM.state_dict), or None."""
    if not isinstance(state, dict):
        return "is not a mapping"
    tensors = ("word_keys", "word_log_probs", "is_word_char")
    if any(not isinstance(state.get(key), torch.Tensor) for key in tensors) or not _is_int(state.get("window")):
        return f"lacks {', '.join(tensors)} tensors or its window"
    if state.get("vocab_size") != hanzi_vocab_size or len(state["is_word_char"]) != hanzi_vocab_size:
        return f"counts {state.get('vocab_size')!r} characters, the hanzi vocabulary has {hanzi_vocab_size}"
    if len(state["word_keys"]) != len(state["word_log_probs"]) or state["word_keys"].dtype != torch.int64:
        return "has word keys and frequencies that do not pair up"
    return None


def _char_lm_error(where: str, reason: str) -> str:
    return (f"{where}: its character n-gram model cannot be read ({reason}); count it again with "
            f"python -m pinyin_hanzi.cli.char_lm")


def model_from_checkpoint(state: dict, where: str = "checkpoint") -> tuple[Transformer, Vocab, Vocab, Config]:
    """Rebuild (model, pinyin vocabulary, hanzi vocabulary, config) from a loaded checkpoint: fp32 weights
    on the CPU. CheckpointError if the config, the vocabularies or the weights do not fit this code."""
    try:
        config = config_from_dict(state[CONFIG_KEY], where=where)
        pinyin_vocab, hanzi_vocab = Vocab(state[PINYIN_VOCAB_KEY]), Vocab(state[HANZI_VOCAB_KEY])
    except (ConfigError, ValueError, TypeError) as error:
        raise CheckpointError(f"{where}: config or vocabularies do not fit this code: {error}") from None
    model = Transformer(config.model, source_vocab_size=len(pinyin_vocab), target_vocab_size=len(hanzi_vocab))
    try:
        model.load_state_dict({name: tensor.float() for name, tensor in state[MODEL_KEY].items()})
    except RuntimeError as error:
        details = [line.strip() for line in str(error).splitlines()[1:] if line.strip()]
        first = (details[0] if details else str(error).strip())[:160]
        raise CheckpointError(f"{where}: weights do not fit the model its config describes ({first})") from None
    return model, pinyin_vocab, hanzi_vocab, config


@dataclass
class InferenceParts:
    """What conversion needs of a checkpoint: the model (fp32, on the CPU), both vocabularies, the config,
    the syllable prior (None in checkpoints without one), the character n-gram model and the word model
    (each None unless the checkpoint has one)."""

    model: Transformer
    pinyin_vocab: Vocab
    hanzi_vocab: Vocab
    config: Config
    syllable_lm: SyllableBigrams | None
    char_lm: CharNgramLM | None
    word_lm: WordLexiconLM | None = None


def load_for_inference(path: str | Path) -> InferenceParts:
    """The inference parts of the checkpoint at ``path``. CheckpointError (one line) as
    :func:`load_checkpoint` and :func:`model_from_checkpoint` raise it, or if its n-gram model cannot be
    rebuilt."""
    state = load_checkpoint(path)
    model, pinyin_vocab, hanzi_vocab, config = model_from_checkpoint(state, str(path))
    syllable_lm = SyllableBigrams.from_state_dict(state[SYLLABLE_LM_KEY]) if SYLLABLE_LM_KEY in state else None
    char_lm = None
    if CHAR_LM_KEY in state:
        try:
            char_lm = CharNgramLM.from_state_dict(state[CHAR_LM_KEY])
        except (KeyError, TypeError, ValueError, AttributeError, RuntimeError) as error:  # tables that do not
            raise CheckpointError(_char_lm_error(str(path), repr(error))) from None  # fit one another
    word_lm = None
    if WORD_LM_KEY in state:
        try:
            word_lm = WordLexiconLM.from_state_dict(state[WORD_LM_KEY])
        except (KeyError, TypeError, ValueError, AttributeError, RuntimeError) as error:
            raise CheckpointError(f"{path}: its word model cannot be read ({error!r}); add it again with "
                                  f"python -m pinyin_hanzi.cli.word_lm") from None
    return InferenceParts(model, pinyin_vocab, hanzi_vocab, config, syllable_lm, char_lm, word_lm)


def export_checkpoint(source: str | Path, target: str | Path, half: bool = True) -> dict:
    """Write an inference-only copy of a training checkpoint: weights (float16 when ``half``), config,
    vocabularies and the syllable model; no optimizer, scheduler, data position or RNG state.
    Returns {"parameters", "bytes"}. Raises CheckpointError as :func:`load_checkpoint` does."""
    state = load_checkpoint(source)
    model_from_checkpoint(state, str(source))  # the weights must fit their config before we ship them
    weights, converted = {}, {}
    for name, tensor in state[MODEL_KEY].items():
        shared = (tensor.data_ptr(), tensor.shape)  # tied weights (embedding = output) stay one tensor, saved once
        if shared not in converted:
            converted[shared] = tensor.half() if half and tensor.is_floating_point() else tensor
        weights[name] = converted[shared]
    save_checkpoint(target, {**{key: state[key] for key in EXPORTED_KEYS if key in state}, MODEL_KEY: weights})
    return {"parameters": sum(t.numel() for t in converted.values()), "bytes": Path(target).stat().st_size}

"""Self-contained checkpoints and their layout: format version, config, both vocabularies, model/optimizer/
scheduler state, step, best validation score, data position and RNG state. ``translate.py`` needs nothing
else.

This module owns the layout: the ``*_KEY`` constants name every entry, :func:`training_checkpoint` builds
what training writes, :data:`EXPORTED_KEYS` is what an inference-only copy keeps (checkpoint_copies.py writes
it), :data:`LANGUAGE_MODELS` which entry holds which language model (each model checks its own stored
state), and :func:`load_checkpoint` checks every entry before anyone reads it. Written to a temporary file
and renamed into place, so a crash never leaves a half-written checkpoint; read with
``torch.load(weights_only=True)``, so loading one never runs pickled code.
"""

from __future__ import annotations

import contextlib
import os
import stat
import warnings
import zipfile
from dataclasses import dataclass
from pathlib import Path

import torch

from pinyin_hanzi.config import Config, config_from_dict, shown
from pinyin_hanzi.data.vocab import BOS_ID, Vocab
from pinyin_hanzi.errors import CheckpointError, ConfigError
from pinyin_hanzi.files import file_kind
from pinyin_hanzi.lm.char_ngram import CharNgramLM
from pinyin_hanzi.lm.stored import is_finite_number, is_int
from pinyin_hanzi.lm.syllable import SyllableBigrams
from pinyin_hanzi.lm.word import WordLexiconLM
from pinyin_hanzi.models.transformer import Transformer

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
CHAR_LM_KEY = "char_lm"  # CharNgramLM.state_dict(); only when the run counted one (train.language_models)
WORD_LM_KEY = "word_lm"  # WordLexiconLM.state_dict(); only when the run counted one (train.language_models)
VALID_ACCURACY_KEY = "valid_char_accuracy"  # float: this checkpoint's validation character accuracy (none if saved
# without an evaluation: training stopped by a signal)
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


@dataclass(frozen=True)
class StoredModel:
    """A language model a checkpoint entry holds. The model's class knows its own stored form: it says what
    is wrong with one (``state_problem(state, hanzi_vocab_size)``: a phrase, or None) and builds itself from
    one (``from_state_dict``); this module only names the entry and words the error."""

    model: type
    error: str  # the one-line error, with {where} (the checkpoint) and {problem} (what state_problem said)
    fused: bool = True  # scored character by character in the search (order, log_prob(context, candidates))


# The language models of a checkpoint, by entry, in the order they are checked.
LANGUAGE_MODELS = {
    SYLLABLE_LM_KEY: StoredModel(SyllableBigrams, "{where} is not a pinyin_hanzi checkpoint: its syllable model "
                                                  "{problem}", fused=False),
    CHAR_LM_KEY: StoredModel(CharNgramLM, "{where}: its character n-gram model {problem}; count it again with "
                                          "python -m pinyin_hanzi.cli.char_lm"),
    WORD_LM_KEY: StoredModel(WordLexiconLM, "{where}: its word model {problem}; count it again with "
                                            "python -m pinyin_hanzi.cli.word_lm"),
}


def training_checkpoint(*, config: dict, pinyin_vocab: list[str], hanzi_vocab: list[str], model: dict,
                        optimizer: dict, scheduler: dict, step: int, best_accuracy: float,
                        valid_char_accuracy: float | None, batches: dict, rng: dict, syllable_lm: dict,
                        char_lm: dict | None, elapsed_seconds: float, word_lm: dict | None = None,
                        data_fingerprint: str | None = None) -> dict:
    """The state training writes to ``last.pt`` and ``best.pt``, from plain values and state dicts (see the
    ``*_KEY`` constants for what each one is); ``valid_char_accuracy`` (None for a checkpoint saved without
    an evaluation, when a signal stops training), ``char_lm``, ``word_lm`` or ``data_fingerprint`` None
    leaves its entry out."""
    state = {CONFIG_KEY: config, PINYIN_VOCAB_KEY: pinyin_vocab, HANZI_VOCAB_KEY: hanzi_vocab, MODEL_KEY: model,
             OPTIMIZER_KEY: optimizer, SCHEDULER_KEY: scheduler, STEP_KEY: step, BEST_ACCURACY_KEY: best_accuracy,
             BATCHES_KEY: batches, RNG_KEY: rng, SYLLABLE_LM_KEY: syllable_lm}
    if valid_char_accuracy is not None:
        state[VALID_ACCURACY_KEY] = valid_char_accuracy
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

    A write that fails (OSError: disk full, read-only; torch's writer reports one as a RuntimeError of its
    own) or is interrupted (Ctrl-C) removes its temporary file and leaves the previous ``path`` as it was.
    CheckpointError (one line) if ``path`` is a directory or cannot be written (a read-only place, a full
    disk, a parent that is a file); for a failed write its ``__cause__`` is the OSError, so that training
    can say what it kept."""
    path = Path(path)
    if path.is_dir():
        raise CheckpointError(f"cannot write checkpoint {path}: it is a directory (name a file in it, e.g. "
                              f"{path / 'model.pt'})")
    blocking = next((parent for parent in path.parents if parent.exists() and not parent.is_dir()), None)
    if blocking is not None:
        raise CheckpointError(f"cannot write checkpoint {path}: {blocking} is a file, not a folder")
    temporary = path.with_name(path.name + TEMPORARY_SUFFIX)
    writer = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)  # a missing folder is made, as training makes its own
        with open(temporary, "wb") as handle:
            writer = _RecordingWriter(handle)
            torch.save({FORMAT_VERSION_KEY: FORMAT_VERSION, **state}, writer)
            handle.flush()
            os.fsync(handle.fileno())  # the bytes are on disk before the rename makes them the checkpoint
        os.replace(temporary, path)
    except BaseException as raised:  # interrupted or failed: no temporary file stays behind
        with contextlib.suppress(OSError):  # a read-only disk may refuse this too: the first error counts
            temporary.unlink(missing_ok=True)
        # torch's writer reports a failed write (a full disk) as a RuntimeError of its own ("unexpected
        # pos"): the OSError behind it is the one the file raised
        error = raised if isinstance(raised, OSError) else None
        if isinstance(raised, Exception) and writer is not None:  # (not Ctrl-C)
            error = error or writer.error
        if error is None:
            raise
        where = f" ({error.filename})" if error.filename not in (None, str(path), str(temporary)) else ""
        raise CheckpointError(f"cannot write checkpoint {path}: {error.strerror or error}{where}") from error


class _RecordingWriter:
    """A binary file for torch.save that remembers the OSError its writes raised."""

    def __init__(self, handle):
        self.handle, self.error = handle, None

    def write(self, data) -> int:
        try:
            return self.handle.write(data)
        except OSError as error:
            self.error = self.error or error
            raise

    def flush(self) -> None:
        try:
            self.handle.flush()
        except OSError as error:
            self.error = self.error or error
            raise


def check_checkpoint_path(path: str | Path) -> Path:
    """``path`` as a Path if it names a regular file; CheckpointError (one line) if it is missing, a directory
    (which then says which checkpoint files it holds), or another kind of file (a device, a FIFO: torch.load
    reads a checkpoint by seeking in it, and /dev/zero would never end)."""
    path = Path(path)
    try:
        mode = path.stat().st_mode
    except (FileNotFoundError, NotADirectoryError):
        raise CheckpointError(f"checkpoint not found: {path}") from None
    except ValueError as error:  # a NUL in the name
        raise CheckpointError(f"checkpoint {shown(str(path))} is not a valid path ({error})") from None
    except OSError as error:  # no permission to look into its folder, a name too long, a symlink loop
        raise CheckpointError(f"cannot read checkpoint {path}: {error.strerror or error}") from None
    if stat.S_ISDIR(mode):
        held = " or ".join(str(path / name) for name in ("best.pt", "last.pt", "model.pt") if (path / name).is_file())
        hint = f"name a checkpoint file in it ({held})" if held else "name a checkpoint file"
        raise CheckpointError(f"checkpoint {path} is a directory: {hint}")
    if not stat.S_ISREG(mode):
        raise CheckpointError(f"{path} is not a pinyin_hanzi checkpoint ({file_kind(mode)}, not a file)")
    return path


def load_checkpoint(path: str | Path) -> dict:
    """The checkpoint's state dict, its entries checked (see :func:`validate_checkpoint`). CheckpointError
    (one line) if it is missing, unreadable, truncated, corrupt, not one of ours, of another format version,
    or holds an entry of the wrong type."""
    path = check_checkpoint_path(path)
    try:
        with warnings.catch_warnings():
            # torch warns about what an odd file holds (a deprecated storage type, a quantized tensor, a pickle
            # protocol it did not write) before it fails or returns: the one-line error below says what is
            # wrong with the file, and a warning's paragraph about torch internals would come before it
            warnings.simplefilter("ignore")
            state = torch.load(path, map_location="cpu", weights_only=True)
    except OSError as error:  # no permission, an I/O error
        raise CheckpointError(f"cannot read checkpoint {path}: {error.strerror or error}") from None
    except Exception as error:  # noqa: BLE001 - on junk bytes torch's unpickler raises about anything
        # (IndexError, KeyError, UnpicklingError, RuntimeError, EOFError, ...); all of them mean "not a checkpoint",
        # and torch's words (a paragraph about weights_only, "internal miniz error") would not tell a user why
        raise CheckpointError(f"{path} is not a pinyin_hanzi checkpoint ({_unreadable_reason(path, error)})") from None
    validate_checkpoint(state, str(path))
    return state



def _unreadable_reason(path: Path, error: Exception) -> str:
    """Why torch.load could not read ``path``, in a user's words, from what the file holds: torch.save writes
    a zip archive with a pickle in it (older versions: the pickle alone)."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(4096)
    except OSError as read_error:
        return f"cannot be read: {read_error.strerror or read_error}"
    if not head:
        return "an empty file"
    if head[:4] in (b"PK\x03\x04", b"PK\x05\x06"):  # a zip archive's first entry, or an empty archive
        if not zipfile.is_zipfile(path):
            return "a truncated or damaged torch.save file"
        with zipfile.ZipFile(path) as archive:
            if not any(name.endswith("data.pkl") for name in archive.namelist()):
                return "a zip archive, but not one that torch.save wrote"
    elif not head.startswith(b"\x80"):  # every pickle torch writes starts with its protocol byte
        return "a text file" if _is_text(head) else "not a torch.save file"
    elif not head.startswith(_LEGACY_MAGIC):
        return "a pickle file that torch.save did not write: only torch.save files are read, never pickles"
    if "weights only" in str(error).lower():
        return "it holds pickled Python objects, which are never loaded: only tensors and plain values are"
    return "a truncated or damaged torch.save file"


# How torch.save's format before the zip archive begins: a protocol-2 pickle of its magic number (a long).
_LEGACY_MAGIC = b"\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19"


def _is_text(head: bytes) -> bool:
    """Whether the first bytes of a file read as UTF-8 text (the last character may be cut off)."""
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError as error:
        if error.start < len(head) - 3:
            return False
        text = head[: error.start].decode("utf-8")
    return not any(char < " " and char not in "\t\n\r\f" for char in text)


def validate_checkpoint(state, where: str = "checkpoint") -> None:
    """CheckpointError (one line, naming ``where``) unless ``state`` is a checkpoint this code can use as it
    is: the required entries, this format version, every entry of the type the layout gives it (config a dict
    that passes the config's validation, vocabularies lists of str that make vocabularies, model the state
    dict of dense, finite floating-point tensors, step an integer, scores finite
    numbers), and the syllable, character n-gram and word models' tables consistent with one another and with
    the hanzi vocabulary. The one check every reader of a checkpoint goes through (:func:`load_checkpoint`)."""
    if not isinstance(state, dict) or any(key not in state for key in REQUIRED_KEYS):
        raise CheckpointError(f"{where} is not a pinyin_hanzi checkpoint (missing keys)")
    version = state[FORMAT_VERSION_KEY]
    if not (is_int(version) and version == FORMAT_VERSION):
        small = isinstance(version, (int, float, str)) and len(repr(version)) <= 40  # never a tensor's repr
        shown = repr(version) if small else f"a {type(version).__name__}"
        raise CheckpointError(f"{where} has checkpoint format {shown}, this code reads {FORMAT_VERSION}")
    for key, (fits, expected) in _ENTRY_TYPES.items():
        if key in state and not fits(state[key]):
            raise CheckpointError(f"{where} is not a pinyin_hanzi checkpoint: its {key} is not {expected}")
    for key, value in state.items():
        if (place := _meta_tensor(value)) is not None:
            raise CheckpointError(f"{where} is not a pinyin_hanzi checkpoint: its {key} holds a tensor without values "
                                  f"({place or key} is on the meta device)")
    _, _, hanzi_vocab = _config_and_vocabularies(state, where)
    if problem := _model_problem(state[MODEL_KEY]):
        raise CheckpointError(f"{where}: weights do not fit the model its config describes ({problem})")
    for key, stored in LANGUAGE_MODELS.items():
        if key in state and (problem := stored.model.state_problem(state[key], len(hanzi_vocab))):
            raise CheckpointError(stored.error.format(where=where, problem=problem))


def require_resumable(state: dict, where: str) -> None:
    """CheckpointError unless ``state`` holds what --resume restores (an exported checkpoint does not)."""
    missing = [key for key in RESUME_KEYS if key not in state]
    if missing:
        raise CheckpointError(f"cannot resume from {where}: it holds no {', '.join(missing)} (an inference-only "
                              f"export?); start a new run from its weights with --init-from")


def clipped(text: str, limit: int) -> str:
    """``text`` on one line and at most ``limit`` characters, cut at a space (never inside a word) with "…"
    where it was cut: what a message may quote of another library's error."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    return (cut.rsplit(" ", 1)[0] if " " in cut else cut).rstrip(" ,;:") + "…"


def _meta_tensor(entry) -> str | None:
    """Where in ``entry`` (nested dicts and lists) the first tensor on the meta device is, as dotted keys
    ("" for the entry itself), or None. Such a tensor has a shape and no values: torch.load leaves it there
    whatever map_location says, and any arithmetic on it raises (a traceback, not an error line)."""
    pending = [("", entry)]  # a stack, not recursion: a file may nest lists deeper than Python recurses
    while pending:
        place, value = pending.pop()
        if isinstance(value, torch.Tensor):
            if value.is_meta:
                return place
        elif isinstance(value, dict):
            pending += [(f"{place}.{key}".lstrip("."), item) for key, item in value.items()]
        elif isinstance(value, (list, tuple)):
            pending += [(f"{place}[{index}]", item) for index, item in enumerate(value)]
    return None


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
    STEP_KEY: (is_int, "an integer"), SYLLABLE_LM_KEY: (_is_dict, "a dict"), CHAR_LM_KEY: (_is_dict, "a dict"),
    WORD_LM_KEY: (_is_dict, "a dict"),
    VALID_ACCURACY_KEY: (is_finite_number, "a finite number"), ELAPSED_KEY: (is_finite_number, "a finite number"),
    OPTIMIZER_KEY: (_is_dict, "a dict"), SCHEDULER_KEY: (_is_dict, "a dict"),
    BEST_ACCURACY_KEY: (is_finite_number, "a finite number"), BATCHES_KEY: (_is_dict, "a dict"),
    RNG_KEY: (_is_dict, "a dict"), DATA_FINGERPRINT_KEY: (lambda value: isinstance(value, str), "a str"),
}


def _config_and_vocabularies(state: dict, where: str) -> tuple[Config, Vocab, Vocab]:
    try:
        config = config_from_dict(state[CONFIG_KEY], where=where)
        return config, Vocab(state[PINYIN_VOCAB_KEY]), Vocab(state[HANZI_VOCAB_KEY])
    except (ConfigError, ValueError, TypeError) as error:
        raise CheckpointError(f"{where}: config or vocabularies do not fit this code: {error}") from None


def _model_problem(weights: dict) -> str | None:
    """What is wrong with the model's weights taken one by one, or None: each must be a dense, finite
    floating-point tensor. Whether names and shapes fit the model the config describes, loading them into it
    tells (:func:`model_from_checkpoint`)."""
    for name, tensor in weights.items():
        if tensor.layout != torch.strided or not tensor.is_floating_point():
            return f"{name} is not a dense floating-point tensor ({tensor.dtype}, {tensor.layout})"
        if tensor.numel() and not bool(tensor.abs().amax().isfinite()):  # amax keeps NaN; 10x isfinite's speed
            return f"{name} holds NaN or infinite values"
    return None


def model_from_checkpoint(state: dict, where: str = "checkpoint") -> tuple[Transformer, Vocab, Vocab, Config]:
    """Rebuild (model, pinyin vocabulary, hanzi vocabulary, config) from a checkpoint that
    :func:`validate_checkpoint` passed: fp32 weights on the CPU. CheckpointError if the config, the
    vocabularies or the weights do not fit this code, or the model would not fit in memory."""
    config, pinyin_vocab, hanzi_vocab = _config_and_vocabularies(state, where)
    try:  # a config may describe a model larger than memory: refused before it is allocated
        model = Transformer(config.model, source_vocab_size=len(pinyin_vocab), target_vocab_size=len(hanzi_vocab))
    except ConfigError as error:
        raise CheckpointError(f"{where}: its config asks for a model too large for this machine: {error}") from None
    try:
        model.load_state_dict({name: tensor.float() for name, tensor in state[MODEL_KEY].items()})
    except RuntimeError as error:
        details = [line.strip() for line in str(error).splitlines()[1:] if line.strip()]
        first = clipped(details[0] if details else str(error).strip(), 160)
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
    return inference_parts(load_checkpoint(path), str(path))


def inference_parts(state: dict, where: str) -> InferenceParts:
    """The inference parts of a checkpoint's state that :func:`validate_checkpoint` passed (``where`` names
    it in errors); CheckpointError as :func:`load_for_inference` raises it."""
    model, pinyin_vocab, hanzi_vocab, config = model_from_checkpoint(state, where)
    lms = {key: _rebuilt(key, state[key], len(hanzi_vocab), where) if key in state else None
           for key in LANGUAGE_MODELS}
    return InferenceParts(model, pinyin_vocab, hanzi_vocab, config, lms[SYLLABLE_LM_KEY], lms[CHAR_LM_KEY],
                          lms[WORD_LM_KEY])


def _rebuilt(key: str, state: dict, hanzi_vocab_size: int, where: str):
    """The language model of entry ``key``, from its ``state`` that :func:`validate_checkpoint` passed; a model
    fused into the search is asked once for the scores of a few characters after ``<s>``, as decoding will
    ask: tables that passed the checks but still do not fit one another give a CheckpointError here, at
    loading, rather than an exception in the middle of a search."""
    stored = LANGUAGE_MODELS[key]
    try:
        lm = stored.model.from_state_dict(state)
        scores = None
        if stored.fused:
            context = torch.full((1, lm.order), BOS_ID, dtype=torch.long)
            scores = lm.log_prob(context, torch.arange(min(hanzi_vocab_size, 8))[None, :])
    except Exception as exception:  # noqa: BLE001 - whatever the tables make the arithmetic raise
        reason = f"{type(exception).__name__}: {clipped(str(exception), 120)}"
        raise CheckpointError(stored.error.format(where=where, problem=f"cannot be read ({reason})")) from None
    if scores is not None and bool(scores.isnan().any()):
        raise CheckpointError(stored.error.format(where=where, problem="cannot be read (its scores are NaN)"))
    return lm

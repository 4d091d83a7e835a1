"""Self-contained checkpoints: format version, config, both vocabularies, model/optimizer/scheduler state,
step, best validation score, data position and RNG state. ``translate.py`` needs nothing else.

Written to a temporary file and renamed into place, so a crash never leaves a half-written checkpoint;
read with ``torch.load(weights_only=True)``, so loading one never runs pickled code.
"""

from __future__ import annotations

import os
import pickle
import zipfile
from pathlib import Path

import torch

from pinyin_hanzi.config import Config, config_from_dict
from pinyin_hanzi.vocab import Vocab
from pinyin_hanzi.errors import CheckpointError, ConfigError
from pinyin_hanzi.model import Transformer

FORMAT_VERSION = 1
REQUIRED_KEYS = ("format_version", "config", "pinyin_vocab", "hanzi_vocab", "model", "step")


def save_checkpoint(path: str | Path, state: dict) -> None:
    """Atomically write ``state`` (plain containers and tensors) to ``path``: a process killed at any moment
    leaves either the previous file or the new one, never a mix."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".tmp")
    with open(temporary, "wb") as handle:
        torch.save({"format_version": FORMAT_VERSION, **state}, handle)
        handle.flush()
        os.fsync(handle.fileno())  # the bytes are on disk before the rename makes them the checkpoint
    os.replace(temporary, path)


def load_checkpoint(path: str | Path) -> dict:
    """The checkpoint's state dict; CheckpointError (one line) if it is missing, unreadable, truncated,
    corrupt, not one of ours, or of another format version."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint not found: {path}")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except (RuntimeError, EOFError, pickle.UnpicklingError, zipfile.BadZipFile, ValueError, OSError) as error:
        reason = str(error).strip().splitlines()[0][:120] if str(error).strip() else type(error).__name__
        raise CheckpointError(f"cannot read checkpoint {path}: truncated, corrupt or not a checkpoint ({reason})") from None
    if not isinstance(state, dict) or any(key not in state for key in REQUIRED_KEYS):
        raise CheckpointError(f"{path} is not a pinyin_hanzi checkpoint (missing keys)")
    if state["format_version"] != FORMAT_VERSION:
        raise CheckpointError(f"{path} has checkpoint format {state['format_version']}, this code reads {FORMAT_VERSION}")
    return state


def model_from_checkpoint(state: dict, where: str = "checkpoint") -> tuple[Transformer, Vocab, Vocab, Config]:
    """Rebuild (model, pinyin vocabulary, hanzi vocabulary, config) from a loaded checkpoint."""
    try:
        config = config_from_dict(state["config"], where=where)
        pinyin_vocab, hanzi_vocab = Vocab(state["pinyin_vocab"]), Vocab(state["hanzi_vocab"])
    except (ConfigError, ValueError, TypeError) as error:
        raise CheckpointError(f"{where}: config or vocabularies do not fit this code: {error}") from None
    model = Transformer(config.model, source_vocab_size=len(pinyin_vocab), target_vocab_size=len(hanzi_vocab))
    try:
        model.load_state_dict({name: tensor.float() for name, tensor in state["model"].items()})
    except RuntimeError as error:
        details = [line.strip() for line in str(error).splitlines()[1:] if line.strip()]
        first = (details[0] if details else str(error).strip())[:160]
        raise CheckpointError(f"{where}: weights do not fit the model its config describes ({first})") from None
    return model, pinyin_vocab, hanzi_vocab, config


def newest_checkpoint(root: str | Path = "checkpoints", name: str = "best.pt") -> Path | None:
    """The most recently written ``<root>/*/best.pt``, or None."""
    found = [path for path in Path(root).glob(f"*/{name}") if path.is_file()]
    return max(found, key=lambda path: path.stat().st_mtime) if found else None


# The model shipped with the repository (see pinyin_hanzi/pretrained/MODEL_CARD.md, the model card).
PRETRAINED = Path(__file__).resolve().parent / "pretrained" / "model.pt"
# What an exported (inference-only) checkpoint keeps of a training checkpoint.
EXPORTED_KEYS = ("config", "pinyin_vocab", "hanzi_vocab", "step", "syllable_lm", "char_lm", "valid_char_accuracy",
                 "elapsed_seconds")


def default_checkpoint(root: str | Path = "checkpoints") -> tuple[Path | None, str]:
    """(checkpoint, why) for translate.py without --checkpoint: the newest local training
    (``<root>/*/best.pt``) if it is newer than the shipped model, else the shipped model."""
    local = newest_checkpoint(root)
    shipped = PRETRAINED if PRETRAINED.is_file() else None
    if local is not None and (shipped is None or local.stat().st_mtime > shipped.stat().st_mtime):
        return local, "the newest local training"
    return shipped, "the shipped pretrained model"


def export_checkpoint(source: str | Path, target: str | Path, half: bool = True) -> dict:
    """Write an inference-only copy of a training checkpoint: weights (float16 when ``half``), config,
    vocabularies and the syllable model; no optimizer, scheduler, data position or RNG state.
    Returns {"parameters", "bytes"}. Raises CheckpointError as :func:`load_checkpoint` does."""
    state = load_checkpoint(source)
    model_from_checkpoint(state, str(source))  # the weights must fit their config before we ship them
    weights, converted = {}, {}
    for name, tensor in state["model"].items():
        shared = (tensor.data_ptr(), tensor.shape)  # tied weights (embedding = output) stay one tensor, saved once
        if shared not in converted:
            converted[shared] = tensor.half() if half and tensor.is_floating_point() else tensor
        weights[name] = converted[shared]
    save_checkpoint(target, {**{key: state[key] for key in EXPORTED_KEYS if key in state}, "model": weights})
    return {"parameters": sum(t.numel() for t in converted.values()), "bytes": Path(target).stat().st_size}


def main(argv=None) -> int:
    """``python -m pinyin_hanzi.checkpoint export SOURCE TARGET [--float32]``."""
    import argparse
    import sys

    parser = argparse.ArgumentParser(prog="python -m pinyin_hanzi.checkpoint",
                                     description="Export a training checkpoint for inference (float16 weights).")
    commands = parser.add_subparsers(dest="command", required=True)
    export = commands.add_parser("export", help="write an inference-only copy (no optimizer state)")
    export.add_argument("source")
    export.add_argument("target")
    export.add_argument("--float32", action="store_true", help="keep float32 weights")
    args = parser.parse_args(argv)
    try:
        result = export_checkpoint(args.source, args.target, half=not args.float32)
    except CheckpointError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(f"{args.target}: {result['parameters']:,} parameters, {result['bytes'] / 2**20:.1f} MiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

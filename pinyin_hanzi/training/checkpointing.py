"""A run's state saved and restored: :func:`save_checkpoint` writes best.pt and last.pt (the layout is
:mod:`pinyin_hanzi.checkpoint`'s); --resume reads the kept one back (:func:`load_resumable`, checked against
this run's settings and data) and :func:`restore` puts the optimizer, schedule, data position, step, best
score and random state back where they were."""

from __future__ import annotations

import random
from pathlib import Path

import torch

from pinyin_hanzi import checkpoint
from pinyin_hanzi.config import Config
from pinyin_hanzi.data.batches import BatchStream
from pinyin_hanzi.errors import CheckpointError
from pinyin_hanzi.training.run import Parts, Run, Splits, drop_set_aside


def save_checkpoint(run: Run, parts: Parts, accuracy: float | None, elapsed: float, *, improved: bool) -> None:
    """Write ``best.pt`` when ``improved``, then ``last.pt``: the whole training state (see
    :func:`pinyin_hanzi.checkpoint.training_checkpoint`) at ``run.step``, with this evaluation's
    ``accuracy`` (None: saved without one) and ``elapsed`` training seconds, and the prepared data's
    fingerprint.

    best.pt first: last.pt records the best score, and a resumed run rewrites best.pt only when it beats
    that score. Were last.pt written first, a kill between the two writes would leave a best.pt that no
    later evaluation replaces; this way a kill leaves the previous last.pt, and the resumed run repeats
    this evaluation and writes both again (at the first evaluation there is no last.pt yet: --resume then
    continues from best.pt, the same state).

    TrainingError if a write fails (a full or read-only disk): the file it was writing stays as it was and
    no temporary file is left; the message says what was kept and how to go on."""
    state = checkpoint.training_checkpoint(
        config=run.config.to_dict(), pinyin_vocab=parts.pinyin_vocab.tokens, hanzi_vocab=parts.hanzi_vocab.tokens,
        model=parts.model.state_dict(), optimizer=parts.optimizer.state_dict(), scheduler=parts.scheduler.state_dict(),
        step=run.step, best_accuracy=run.best_accuracy, valid_char_accuracy=accuracy, batches=(parts.prefetch or parts.stream).state_dict(),
        rng=rng_state(), syllable_lm=parts.syllable_lm.state_dict(), char_lm=parts.char_lm_state,
        word_lm=parts.word_lm_state, elapsed_seconds=elapsed, data_fingerprint=run.data_fingerprint)
    for path in (run.best_path, run.last_path) if improved else (run.last_path,):
        try:
            checkpoint.save_checkpoint(path, state)
        except CheckpointError as error:
            if not isinstance(error.__cause__, OSError):
                raise
            raise run.write_failed(error.__cause__, path) from None
        if path == run.last_path or not run.last_path.exists():  # what --resume would continue from
            run.kept_path, run.kept_step = path, run.step
    if run.set_aside:  # this run now has a checkpoint of its own: the one it overwrites goes
        drop_set_aside(run)


def load_resumable(run: Run, splits: Splits) -> dict:
    """The state of the checkpoint to resume (last.pt); CheckpointError unless it holds the training state
    and was trained with the same model and data settings on the same prepared data (a checkpoint written
    before checkpoints recorded their data is taken with a note)."""
    path = run.kept_path
    saved = checkpoint.load_checkpoint(path)
    checkpoint.require_resumable(saved, str(path))
    for section in ("data", "model"):
        _check_same(run.config, saved[checkpoint.CONFIG_KEY], section, path)
    recorded = saved.get(checkpoint.DATA_FINGERPRINT_KEY)
    if recorded is None:
        run.log(f"note: {path} does not record which prepared data it trained on (an older checkpoint): "
                f"resuming on {splits.data_dir} unchecked")
    elif recorded != run.data_fingerprint:
        raise CheckpointError(f"cannot resume from {path}: the prepared data {splits.data_dir} changed since it "
                              f"was written (data fingerprint {run.data_fingerprint}, the checkpoint's {recorded}); "
                              f"train a new run on it (train.name=..., or --init-from {path})")
    if path != run.last_path:
        run.log(f"note: {run.last_path} is missing (a run stopped while writing its first checkpoints): "
                f"resuming from {path}")
    return saved


def _check_same(config: Config, saved: dict, section: str, path: Path) -> None:
    """CheckpointError ("cannot resume from PATH: ...") unless the checkpoint's config ``saved`` agrees with
    ``config`` on ``section``."""
    saved_section = saved.get(section)
    if not isinstance(saved_section, dict):
        raise CheckpointError(f"cannot resume from {path}: its config has no {section} section")
    for key, value in getattr(config, section).__dict__.items():
        if section == "data" and key in ("prepared_dir", "raw_dir"):
            continue
        if saved_section.get(key) != value:
            raise CheckpointError(f"cannot resume from {path}: {section}.{key} is {value!r} now but "
                                  f"{saved_section.get(key)!r} in the checkpoint")


def restore(run: Run, saved: dict, optimizer, scheduler, stream: BatchStream) -> None:
    """--resume: the optimizer, schedule, data position, step, best score and random state of ``saved``.
    CheckpointError (one line) if one of those states does not fit what it is restored into: their insides
    belong to torch and to BatchStream, whose own loaders raise whatever a foreign state makes them raise."""
    loaders = ((checkpoint.OPTIMIZER_KEY, optimizer.load_state_dict),
               (checkpoint.SCHEDULER_KEY, scheduler.load_state_dict),
               (checkpoint.BATCHES_KEY, stream.load_state_dict), (checkpoint.RNG_KEY, set_rng_state))
    for key, load in loaders:
        try:
            load(saved[key])
        except Exception as error:  # noqa: BLE001 - KeyError, ValueError, TypeError, IndexError, RuntimeError, ...
            raise CheckpointError(f"cannot resume from {run.last_path}: its {key} state does not fit this run "
                                  f"({type(error).__name__}: {str(error)[:100]})".replace("\n", " ")) from None
    run.step, run.best_accuracy = int(saved[checkpoint.STEP_KEY]), float(saved[checkpoint.BEST_ACCURACY_KEY])
    run.kept_step = run.step
    run.elapsed_before = float(saved.get(checkpoint.ELAPSED_KEY, 0.0))
    run.log(f"resumed {run.kept_path} at step {run.step}")


def rng_state() -> dict:
    """The random generators' states (torch's, Python's, CUDA's where there is CUDA), as a checkpoint holds
    them: tensors and lists, which ``torch.load(weights_only=True)`` reads."""
    state = {"torch": torch.get_rng_state(), "python": list(random.getstate()[1]) + [random.getstate()[2]]}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    """Put back the states :func:`rng_state` returned."""
    torch.set_rng_state(state["torch"])
    python = state["python"]
    random.setstate((3, tuple(python[:-1]), python[-1]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])

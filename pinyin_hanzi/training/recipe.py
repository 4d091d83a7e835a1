"""The training recipe: plain functions, no framework.

    train(config)
      _setup_run         seed, threads, device, where the run writes
      _owned             the run's folders checked writable and locked for the whole run (one process
                         trains a run); a new run never replaces another's
      _setup_data        prepare the splits (rank 0; the other processes wait) and read them, under the data's lock
      _setup_model       a new Transformer, the resumed last.pt's, or --init-from's weights
      _setup_language_models  syllable bigrams; the character n-gram and word models train.language_models names
      _setup_optimizer   AdamW with warm-up + cosine decay (lr_at)
      _restore           --resume: optimizer, schedule, data position, step, best score, random state
      _setup_logging     TensorBoard, train_log.jsonl, eval_log.jsonl (rank 0)
      _train_loop        for each global batch (grad_accum_steps token-budget batches, shared among
                         torchrun's processes): train_step (label-smoothed cross-entropy per target token of
                         the global batch, clipped; a batch with a non-finite loss or gradient is skipped,
                         max_bad_steps in a row stop the run); every eval_every steps evaluate_and_save:
                         validation (validation.py), then save_checkpoint: best.pt when the accuracy
                         improves, then last.pt

The run's progress (step, best score, paths) lives in one :class:`Run`; what setup builds, in :class:`Parts`.
TensorBoard logs, ``train_log.jsonl`` (every step) and ``eval_log.jsonl`` go to ``runs/<name>/``,
checkpoints to ``checkpoints/<name>/``; under torchrun only rank 0 writes them.
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import random
import shlex
import shutil
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, TextIO

import torch
from torch.utils.tensorboard import SummaryWriter
from tqdm import tqdm

from pinyin_hanzi import checkpoint, visualize
from pinyin_hanzi.config import Config, TrainConfig, save_config
from pinyin_hanzi.data.batches import Batch, BatchStream, EncodedExample, encode_examples, hanzi_ids, prefix_ids
from pinyin_hanzi.data.corpus import Example, data_fingerprint, phrase_texts, prepared_data, read_examples
from pinyin_hanzi.data.vocab import Vocab, load_vocab
from pinyin_hanzi.errors import CheckpointError, ConfigError, Interrupted, TrainingError
from pinyin_hanzi.files import check_writable, locked, os_error_reason
from pinyin_hanzi.lm.char_ngram import count_for
from pinyin_hanzi.lm.syllable import SyllableBigrams
from pinyin_hanzi.lm.word import word_model
from pinyin_hanzi.models import growing
from pinyin_hanzi.models.transformer import Transformer, check_memory
from pinyin_hanzi.runtime import autocast_for, resolve_precision, select_device, set_threads
from pinyin_hanzi.text.lexicon import Lexicon
from pinyin_hanzi.training import distributed
from pinyin_hanzi.training.loss import model_loss_sum
from pinyin_hanzi.training.validation import validate


def lr_at(step: int, config: TrainConfig) -> float:
    """Linear warm-up to ``lr`` over ``warmup_steps``, then cosine decay to ``lr * min_lr_ratio`` at
    ``max_steps``. ``step`` counts optimizer steps from 0."""
    if step < config.warmup_steps:
        return config.lr * (step + 1) / config.warmup_steps
    progress = min(1.0, (step - config.warmup_steps) / max(1, config.max_steps - config.warmup_steps))
    floor = config.lr * config.min_lr_ratio
    return floor + (config.lr - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))


def train_step(model, batches: list[Batch], total_tokens: int, optimizer, scheduler, config: TrainConfig, device,
               candidates: tuple[torch.Tensor, torch.Tensor] | None = None, world_size: int = 1
               ) -> tuple[float, float, bool]:
    """One optimizer step on this process's batches of a global batch of ``total_tokens`` target tokens.

    Each batch's summed loss is divided by the global batch's token count, so the accumulated gradient is
    exactly that of the mean loss over the whole global batch, not an average of per-batch averages. Under
    DDP (``world_size`` > 1) gradients are averaged over processes, hence the division by
    ``total_tokens / world_size``; they are synchronised once, on the last batch. ``candidates`` (ids, real),
    each (pinyin vocab, c), from :meth:`Lexicon.for_vocab`, restricts the softmax
    (train.loss=candidates).

    Returns (mean loss of the global batch, gradient norm before clipping, stepped). A non-finite loss or
    gradient norm does not step: the gradients are dropped, stepped is False, the weights are untouched."""
    model.train()
    optimizer.zero_grad(set_to_none=True)
    precision = resolve_precision(config.precision, device)
    local_loss = 0.0
    for index, batch in enumerate(batches):
        is_last = index == len(batches) - 1
        no_sync = getattr(model, "no_sync", None)  # DDP: all-reduce the gradients once, after the last batch
        with no_sync() if no_sync is not None and not is_last else contextlib.nullcontext():
            batch = batch.to(device)
            with autocast_for(device, precision):
                summed, _ = model_loss_sum(model, batch, config.label_smoothing, candidates)
            (summed / (total_tokens / world_size)).backward()
        local_loss += (summed.detach() / total_tokens).item()
    loss = distributed.sum_over_processes([local_loss], device)[0]
    max_norm = config.grad_clip if config.grad_clip > 0 else float("inf")
    grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm))
    if not (math.isfinite(loss) and math.isfinite(grad_norm)):
        optimizer.zero_grad(set_to_none=True)
        return loss, grad_norm, False
    optimizer.step()
    scheduler.step()
    return loss, grad_norm, True


def log_pictures(writer, model, examples, pinyin_vocab, hanzi_vocab, step: int) -> None:
    """TensorBoard pictures at an evaluation: cross-attention of a few fixed validation sentences (watch the
    alignment emerge) and a histogram of the weights of each layer."""
    for index, example in enumerate(examples):
        figure, _ = visualize.sentence_attention(model, pinyin_vocab.encode(example.tokens),
                                                 hanzi_vocab.encode(example.hanzi), example.tokens, example.hanzi)
        writer.add_figure(f"attention/cross_{index}", figure, step)
    for prefix, stack in (("encoder", model.encoder_layers), ("decoder", model.decoder_layers)):
        for index, layer in enumerate(stack):
            weights = torch.cat([p.detach().flatten().float().cpu() for p in layer.parameters() if p.dim() >= 2])
            try:
                writer.add_histogram(f"weights/{prefix}_layer_{index + 1}", weights, step)
            except ValueError:  # TensorBoard cannot bin some degenerate tensors (all equal and huge): a picture
                continue  # less is no reason to stop training


def rng_state() -> dict:
    state = {"torch": torch.get_rng_state(), "python": list(random.getstate()[1]) + [random.getstate()[2]]}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    python = state["python"]
    random.setstate((3, tuple(python[:-1]), python[-1]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


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


def count_parameters(model: torch.nn.Module) -> int:
    return sum(parameter.numel() for parameter in model.parameters())


def _truncate_log(path: Path, last_step: int) -> None:
    """Keep the records of a JSONL log up to ``last_step``: a resumed run repeats the steps after its
    checkpoint, and a killed run may have left a half-written last line."""
    if not path.exists():
        return
    kept = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            if json.loads(line)["step"] <= last_step:
                kept.append(line + "\n")
        except (ValueError, KeyError, TypeError):
            continue
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text("".join(kept), encoding="utf-8")
    temporary.replace(path)


# ------------------------------------------------------------------------------------------ the recipe


# What job schedulers, `timeout`, container stops and cloud preemptions send (SIGTERM), and what SLURM sends
# ahead of a time limit (`--signal=USR1@60`): training stops at the next step boundary with last.pt saved.
STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGUSR1") if hasattr(signal, name))


class StopSignals:
    """The signals of STOP_SIGNALS as requests to stop, for the block it is entered for (in the main thread;
    the previous handlers come back after it). Before the training loop a signal stops at once, as Ctrl-C
    does (there is nothing to save yet); once :meth:`defer` is called, it is only recorded in ``received``,
    and the loop stops at the next step boundary, saving last.pt first."""

    def __init__(self):
        self.received: int | None = None  # the first stop signal's number
        self.deferred = False
        self._previous: dict[int, object] = {}

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():  # signal.signal works only there
            for number in STOP_SIGNALS:
                self._previous[number] = signal.signal(number, self._receive)
        return self

    def __exit__(self, *exception) -> None:
        for number, handler in self._previous.items():
            signal.signal(number, handler)
        self._previous.clear()

    def defer(self) -> None:
        self.deferred = True

    def _receive(self, number: int, frame) -> None:
        self.received = self.received or number
        if not self.deferred:
            raise Interrupted("", number)


def stop_message(number: int) -> str:
    """How a run that ``number`` stopped begins its message: "interrupted" (Ctrl-C), "stopped by SIGTERM"."""
    return "interrupted" if number == signal.SIGINT else f"stopped by {signal.Signals(number).name}"


@dataclass
class Run:
    """One training run: its settings, where it writes, and how far it has come. The loop advances it and
    every checkpoint records it."""

    config: Config
    process: distributed.Process
    device: torch.device
    log: Callable[[str], None]  # messages for the user (a no-op on every process but rank 0)
    checkpoint_dir: Path
    run_dir: Path  # TensorBoard events, train_log.jsonl, eval_log.jsonl, config.yaml
    command: str | None = None  # the command line that trains this run, without its mode flags (for messages)
    init_from: str | None = None  # --init-from's checkpoint
    step: int = 0  # optimizer steps taken
    best_accuracy: float = -1.0  # the best validation character accuracy so far
    kept_path: Path | None = None  # the checkpoint --resume would continue from (last.pt, else best.pt)
    kept_step: int | None = None  # its step, once known
    data_fingerprint: str | None = None  # corpus.data_fingerprint of the prepared data this run reads
    elapsed_before: float = 0.0  # seconds trained before this process started (by the run it resumes)
    started: float = 0.0  # time.time() at this process's first step
    signals: StopSignals = field(default_factory=StopSignals)  # SIGTERM / SIGUSR1 received
    set_aside: bool = False  # --overwrite moved the old run's files aside; they go once this run has a checkpoint

    @property
    def last_path(self) -> Path:
        return self.checkpoint_dir / "last.pt"

    @property
    def best_path(self) -> Path:
        return self.checkpoint_dir / "best.pt"

    def elapsed(self) -> float:
        """Seconds of training, those before a resume included."""
        return time.time() - self.started + self.elapsed_before

    def last_good(self) -> str:
        if self.kept_path is None:
            return "no checkpoint was written yet"
        return f"the last good checkpoint is {self.kept_path}{self._at_step()}"

    def kept(self) -> str:
        """What a stopped run leaves to continue from, for the user."""
        return "no checkpoint was written yet" if self.kept_path is None else f"kept {self.kept_path}{self._at_step()}"

    def next_step(self) -> str:
        """The command that goes on from what was kept: --resume, or the same run started again."""
        if self.kept_path is not None:
            return f"continue with: {self.command} --resume" if self.command else "continue it with --resume"
        flags = f" --init-from {shlex.quote(self.init_from)}" if self.init_from else ""
        if self.last_path.exists() or self.best_path.exists():  # an older run's, which a new one replaces
            flags += " --overwrite"
        return f"start again with: {self.command}{flags}" if self.command else "start it again"

    def write_failed(self, error: OSError, path) -> TrainingError:
        """The error that stops a run whose write to ``path`` failed (a full or read-only disk)."""
        remedy = "free space" if error.errno in (errno.ENOSPC, errno.EDQUOT) else "make it writable"
        return TrainingError(f"{os_error_reason(error)} while saving {path}: {self.kept()}; {remedy}, then "
                             f"{self.next_step()}")

    def _at_step(self) -> str:
        return f" (step {self.kept_step})" if self.kept_step is not None else ""


@dataclass
class Splits:
    """The prepared data a run reads."""

    data_dir: Path
    train_examples: list[Example]
    valid_examples: list[Example]
    pinyin_vocab: Vocab  # the prepared data's vocabularies (a new run's; --init-from grows its own by them)
    hanzi_vocab: Vocab

    @classmethod
    def read(cls, data_dir: Path) -> Splits:
        """The splits and vocabularies of prepared data (see corpus.prepare)."""
        return cls(data_dir, read_examples(data_dir / "train.tsv", trusted=True),
                   read_examples(data_dir / "valid.tsv", trusted=True),
                   load_vocab(data_dir / "pinyin_vocab.txt"), load_vocab(data_dir / "hanzi_vocab.txt"))


@dataclass
class Parts:
    """What training builds before its first step: the model and everything that steps with it, and what
    validation needs."""

    model: Transformer  # unwrapped: checkpoints hold its state_dict
    trained_model: torch.nn.Module  # what train_step runs: the model, or its DDP / compiled wrapper
    pinyin_vocab: Vocab
    hanzi_vocab: Vocab
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LambdaLR
    stream: BatchStream
    syllable_lm: SyllableBigrams
    char_lm_state: dict | None  # the checkpoint's char_lm entry, computed once; None without one
    word_lm_state: dict | None  # the checkpoint's word_lm entry, likewise
    lexicon: Lexicon  # the hanzi each syllable may become: validation's constraint, the candidate loss's lists
    candidates: tuple[torch.Tensor, torch.Tensor] | None  # train.loss=candidates: Lexicon.for_vocab
    valid_examples: list[Example]
    valid_encoded: list[EncodedExample]


def train(config: Config, *, resume: bool = False, init_from: str | None = None, overwrite: bool = False,
          log=print, command: str | None = None) -> Path:
    """Train as configured; returns the path of the best checkpoint.

    resume: continue ``checkpoints/<name>/last.pt`` exactly (weights, optimizer, scheduler, data position,
    RNG); init_from: start a new run from another checkpoint's weights (its vocabularies keep their ids and
    grow by the new data's tokens). command: the command line that trains this run without its mode
    flags (``python train.py --config X``), which messages name as the way to go on.
    Launched by torchrun, each process trains on its share of every global batch (see distributed.py).

    One process at a time owns a run: its checkpoint and run folders are locked for the whole run.

    Raises TrainingError if a new run would replace an existing run's checkpoints (unless ``overwrite``),
    the loss or gradient is not finite for ``train.max_bad_steps`` batches in a row, or a checkpoint cannot
    be written (a full disk); OutputError if an output folder is not writable or another process trains
    the run; CheckpointError, ConfigError, DataError for unusable checkpoints, settings or data;
    errors.Interrupted (a KeyboardInterrupt) on Ctrl-C, saying what was kept and how to go on, and on
    SIGTERM or SIGUSR1 (see :class:`StopSignals`), which in the training loop save last.pt first."""
    process = distributed.from_environment()
    t = config.train
    if resume and overwrite:
        raise ConfigError("resume and overwrite exclude each other: --resume continues a run, --overwrite replaces it")
    if t.grad_accum_steps % process.world_size:
        raise ConfigError(f"train.grad_accum_steps={t.grad_accum_steps} must be a multiple of the number of "
                          f"processes ({process.world_size}): it counts the batches of one optimizer step over all")
    try:
        run = _setup_run(config, process, init_from=init_from, command=command,
                         log=log if process.is_main else lambda message: None)
        try:
            with run.signals, _owned(run, resume=resume, overwrite=overwrite), _thread_write_errors_raised_later():
                return _train(run, resume=resume)
        except KeyboardInterrupt as interrupt:
            number = getattr(interrupt, "signal_number", signal.SIGINT)
            stopped = f"{stop_message(number)} at step {run.step}"
            if not run.process.is_main:  # only rank 0 writes checkpoints, and says which it kept
                # Exit 0: torchrun ends every other process as soon as one exits non-zero, which could cut
                # rank 0 off before it has said what it kept. Rank 0's status is the job's.
                raise Interrupted(f"{stopped} (rank 0 keeps the checkpoint)", number, exit_status=0) from None
            raise Interrupted(f"{stopped}: {run.kept()}; {run.next_step()}", number) from None
        except OSError as error:  # a log or TensorBoard write (checkpoints say so themselves)
            raise run.write_failed(error, error.filename or run.run_dir) from None
    finally:
        distributed.stop()


@contextlib.contextmanager
def _thread_write_errors_raised_later():
    """TensorBoard writes its events in a thread of its own. An OSError there (a full disk) would print
    that thread's traceback; TensorBoard raises the same error again in the training thread at its next
    write or at close, which reports it in one line (see :func:`train`), so the thread's report is left
    out while training runs."""
    previous = threading.excepthook

    def report(arguments) -> None:
        if not issubclass(arguments.exc_type, OSError):
            previous(arguments)

    threading.excepthook = report
    try:
        yield
    finally:
        threading.excepthook = previous


def _train(run: Run, *, resume: bool) -> Path:
    config, t, log = run.config, run.config.train, run.log
    _check_trainable(config, 0, 0)  # the layers alone may be too many: say so before preparing the data
    splits = _setup_data(run)
    saved = _load_resumable(run, splits) if resume else None
    model, pinyin_vocab, hanzi_vocab = _setup_model(config, splits, saved, run.kept_path, run.init_from, log)
    _check_trainable(config, len(pinyin_vocab), len(hanzi_vocab))  # before the optimizer allocates its state
    model.to(run.device)
    syllable_lm, char_lm_state, word_lm_state = _setup_language_models(config, splits.train_examples, hanzi_vocab, log)
    train_encoded = encode_examples(splits.train_examples, pinyin_vocab, hanzi_vocab)
    valid_encoded = encode_examples(splits.valid_examples, pinyin_vocab, hanzi_vocab)
    abbreviate = config.data.abbreviate  # training batches only: validation measures full pinyin
    stream = BatchStream(train_encoded, t.batch_tokens, t.seed, abbreviate=abbreviate,  # the same on every process
                         prefix_of=prefix_ids(pinyin_vocab) if abbreviate > 0 else None,
                         hanzi_target=hanzi_ids(hanzi_vocab) if abbreviate > 0 else None)
    optimizer, scheduler = _setup_optimizer(model, t)
    if saved is not None:
        _restore(run, saved, optimizer, scheduler, stream)
    if run.step >= t.max_steps:
        log(f"nothing to do: step {run.step} >= train.max_steps={t.max_steps}")
        return run.best_path if run.best_path.is_file() else run.kept_path

    logs = _setup_logging(run, resume)
    lexicon = Lexicon(hanzi_vocab)
    candidates = None
    if t.loss == "candidates":
        candidates = tuple(part.to(run.device) for part in lexicon.for_vocab(pinyin_vocab))
    parts = Parts(model, _wrap_for_training(model, run), pinyin_vocab, hanzi_vocab, optimizer, scheduler, stream,
                  syllable_lm, char_lm_state, word_lm_state, lexicon, candidates, splits.valid_examples, valid_encoded)
    _log_setup(run, parts, splits, logs)
    _train_loop(run, parts, logs)
    log(f"best valid char accuracy {run.best_accuracy:.2%}; checkpoints in {run.checkpoint_dir}")
    return run.best_path


def _check_trainable(config: Config, pinyin_vocab_size: int, hanzi_vocab_size: int) -> None:
    """ConfigError (one line, naming the size) unless training the configured model fits in memory: four
    float32 copies of it (weights, gradients, AdamW's two moments), activations aside."""
    check_memory(config.model, source_vocab_size=pinyin_vocab_size, target_vocab_size=hanzi_vocab_size, copies=4,
                 needed_for="to train (weights, gradients and AdamW's two moments)")


def _setup_run(config: Config, process: distributed.Process, *, init_from: str | None, command: str | None,
               log) -> Run:
    """Seed, threads and device; where the run writes."""
    t = config.train
    random.seed(t.seed)
    torch.manual_seed(t.seed)  # the same on every process: rank 0's saved RNG state then resumes them all
    set_threads(t.threads)
    device = distributed.start(process, select_device(t.device))
    return Run(config, process, device, log, checkpoint_dir=Path(t.checkpoint_dir) / t.name,
               run_dir=Path(t.runs_dir) / t.name, command=command, init_from=init_from)


@contextlib.contextmanager
def _owned(run: Run, *, resume: bool, overwrite: bool):
    """Hold the run for the block: its output folders are checked writable (so that a read-only or missing
    disk is found now, not at the first checkpoint) and locked, so that no other process trains the same
    run meanwhile (OutputError names the one that does). Then TrainingError if a new run would replace
    another's checkpoints; CheckpointError if there is nothing to resume. Rank 0 alone writes, and locks.

    ``overwrite`` moves the old run's files aside (:func:`_set_aside`) rather than deleting them: they are
    deleted once the new run has written its first checkpoint, and put back if the block ends before that
    (a typo in the corpus path, an unusable --init-from, Ctrl-C, a signal)."""
    t = run.config.train
    with contextlib.ExitStack() as held:
        if run.process.is_main:
            check_writable(run.checkpoint_dir, "checkpoint folder")
            check_writable(run.run_dir, "run folder (TensorBoard and logs)")
            check_writable(Path(run.config.data.prepared_dir), "prepared-data folder")
            for folder in (run.checkpoint_dir, run.run_dir):
                held.enter_context(locked(folder / ".lock", busy=lambda pid: f"run {t.name} is in use by another "
                                                                             f"process (pid {pid})"))
            for leftover in run.checkpoint_dir.glob(f"*.pt{checkpoint.TEMPORARY_SUFFIX}"):
                leftover.unlink()  # a save that was killed (kill -9: nothing could clean up then)
            _settle_set_aside(run)  # of an --overwrite that was killed
        if not resume and not overwrite and (run.last_path.exists() or run.best_path.exists()):
            raise TrainingError(f"{run.checkpoint_dir} already holds a run named {t.name!r}: continue it with "
                                f"--resume, name a new one with train.name=..., or replace it with --overwrite")
        if run.init_from:  # before the data: a missing file or a device is said at once
            checkpoint.check_checkpoint_path(run.init_from)
        if resume:  # before the data: say it at once
            # last.pt, or best.pt alone when a kill at the first evaluation came between the two writes
            run.kept_path = next((path for path in (run.last_path, run.best_path) if path.is_file()), None)
            if run.kept_path is None:
                raise CheckpointError(f"checkpoint not found: {run.last_path} (nothing to resume: start without "
                                      f"--resume)")
        try:
            if overwrite and run.process.is_main:
                _set_aside(run)
            yield
        finally:
            if run.set_aside:  # the new run wrote no checkpoint: the old one stays what there is
                _put_back(run)


# --overwrite keeps the old run's files here (in checkpoints/NAME/ and runs/NAME/) until the new run has
# written its first checkpoint.
SET_ASIDE = ".overwritten"


def _run_files(run: Run) -> list[Path]:
    """The files of a run, as they are now: its checkpoints, logs, resolved config and TensorBoard events."""
    logs = [run.run_dir / name for name in ("train_log.jsonl", "eval_log.jsonl", "config.yaml")]
    files = [run.best_path, run.last_path, *logs, *run.run_dir.glob("events.out.tfevents.*")]
    return [path for path in files if path.is_file()]


def _set_aside(run: Run) -> None:
    """--overwrite: move the old run's files into SET_ASIDE folders; run.set_aside says they are there."""
    run.set_aside = True  # first: a signal or Ctrl-C in the middle puts back what was moved
    for path in _run_files(run):
        (path.parent / SET_ASIDE).mkdir(exist_ok=True)
        path.replace(path.parent / SET_ASIDE / path.name)


def _put_back(run: Run) -> None:
    """Undo :func:`_set_aside`: the new run's files go (it has no checkpoint, only logs), the old run's
    files return."""
    for path in _run_files(run):
        path.unlink()
    for folder in (run.checkpoint_dir, run.run_dir):
        if (folder / SET_ASIDE).is_dir():
            for path in (folder / SET_ASIDE).iterdir():
                path.replace(folder / path.name)
            (folder / SET_ASIDE).rmdir()
    run.set_aside = False


def _drop_set_aside(run: Run) -> None:
    """The new run has a checkpoint: the old run's files are deleted now."""
    for folder in (run.checkpoint_dir, run.run_dir):
        shutil.rmtree(folder / SET_ASIDE, ignore_errors=True)
    run.set_aside = False


def _settle_set_aside(run: Run) -> None:
    """What an --overwrite killed (kill -9) left set aside: deleted if its new run had written a checkpoint,
    else put back, with a note."""
    if not any((folder / SET_ASIDE).is_dir() for folder in (run.checkpoint_dir, run.run_dir)):
        return
    if run.last_path.exists() or run.best_path.exists():
        _drop_set_aside(run)
    else:
        _put_back(run)
        run.log(f"note: put back the run in {run.checkpoint_dir} that a killed --overwrite had set aside before "
                f"its first checkpoint")


def _setup_data(run: Run) -> Splits:
    """Prepare the splits (rank 0 prepares, the other processes wait and then find them ready) and read
    the training and validation examples and the vocabularies, holding the data's lock meanwhile so that
    they belong together."""
    process = run.process
    if not process.is_main:
        distributed.barrier()
    with prepared_data(run.config.data, log=run.log) as data_dir:
        splits = Splits.read(data_dir)
        run.data_fingerprint = data_fingerprint(data_dir)
    if process.is_main:
        distributed.barrier()
    return splits


def _load_resumable(run: Run, splits: Splits) -> dict:
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


def _setup_model(config: Config, splits: Splits, saved: dict | None, saved_path: Path | None,
                 init_from: str | None, log) -> tuple[Transformer, Vocab, Vocab]:
    """(model on the CPU, pinyin vocabulary, hanzi vocabulary): those of the resumed checkpoint ``saved``,
    the weights of ``init_from`` over its vocabularies grown by the data's new tokens (:func:`_init_from`),
    or a new model over the prepared data's vocabularies."""
    if saved is not None:
        model, pinyin_vocab, hanzi_vocab, _ = checkpoint.model_from_checkpoint(saved, str(saved_path))
    elif init_from:
        return _init_from(config, splits, init_from, log)
    else:
        pinyin_vocab, hanzi_vocab = splits.pinyin_vocab, splits.hanzi_vocab
        model = Transformer(config.model, source_vocab_size=len(pinyin_vocab), target_vocab_size=len(hanzi_vocab))
    return model, pinyin_vocab, hanzi_vocab


def _init_from(config: Config, splits: Splits, path: str, log) -> tuple[Transformer, Vocab, Vocab]:
    """--init-from: the checkpoint's weights over vocabularies grown by the prepared data's new tokens (new
    characters, the prefix tokens of data.abbreviate), and deeper if the config asks for more encoder or
    decoder layers (growing a trained model instead of training a larger one from scratch): see
    :mod:`pinyin_hanzi.models.growing`. CheckpointError unless the other model settings agree."""
    source = checkpoint.load_checkpoint(path)
    trained, trained_pinyin, trained_hanzi, _ = checkpoint.model_from_checkpoint(source, path)
    saved_model = source[checkpoint.CONFIG_KEY].get("model")
    if not isinstance(saved_model, dict):
        raise CheckpointError(f"cannot start from {path}: its config has no model section")
    deeper = growing.check_growable(config.model, saved_model, path)
    model, pinyin_vocab, hanzi_vocab = growing.grow(trained, trained_pinyin, trained_hanzi, config.model,
                                                    pinyin_tokens=splits.pinyin_vocab.tokens,
                                                    hanzi_tokens=splits.hanzi_vocab.tokens)
    log(f"initialised from {path}: {len(pinyin_vocab) - len(trained_pinyin)} pinyin and "
        f"{len(hanzi_vocab) - len(trained_hanzi)} hanzi tokens added to its vocabularies")
    if deeper:
        log(f"grown deeper: {deeper}; the new layers sit on top and start as the identity (their attention and "
            f"feed-forward output projections are zero), so the grown model converts as the checkpoint did")
    return model, pinyin_vocab, hanzi_vocab


def _setup_language_models(config: Config, train_examples: list[Example], hanzi_vocab: Vocab, log
                           ) -> tuple[SyllableBigrams, dict | None, dict | None]:
    """The models decoding uses besides the network, built in seconds: the syllable bigrams (always),
    counted from the training split; the character n-gram model's state dict when train.language_models
    has char, and the word model's when it has word, from the configured word-frequency table (else None).
    A note when decode asks for a model that is not counted (a config written when a weight > 0 counted it)."""
    syllable_lm = SyllableBigrams.count(example.tokens for example in train_examples)
    dec, counted = config.decode, config.train.language_models
    for name, weight, key, tool in (("char", dec.lm_weight, "lm_weight", "char_lm"),
                                    ("word", dec.word_weight, "word_weight", "word_lm")):
        if weight > 0 and name not in counted:
            log(f"note: decode.{key}={weight} but train.language_models has no {name}: this run counts no such "
                f"model (add {name} to train.language_models, or later: python -m pinyin_hanzi.cli.{tool})")
    char_lm_state = _count_char_lm(config, train_examples, hanzi_vocab, log) if "char" in counted else None
    word_lm_state = None
    if "word" in counted:
        started_counting = time.time()
        word_lm = word_model(dec, config.data.raw_dir, hanzi_vocab, (example.hanzi for example in train_examples))
        contrast = f", contrasted with the training split at {dec.word_contrast}" if dec.word_contrast > 0 else ""
        log(f"word model: {word_lm.size():,} words of {dec.word_table}{contrast} in "
            f"{time.time() - started_counting:.1f} s (decode.word_weight={dec.word_weight})")
        word_lm_state = word_lm.state_dict()
    return syllable_lm, char_lm_state, word_lm_state


def _count_char_lm(config: Config, train_examples: list[Example], hanzi_vocab: Vocab, log) -> dict:
    """The character n-gram model's state dict, counted from the training split (and the phrase table,
    decode.lm_phrases times)."""
    dec, started_counting = config.decode, time.time()
    phrases = phrase_texts(config.data.raw_dir) if dec.lm_phrases > 0 else []
    char_lm = count_for(train_examples, hanzi_vocab, dec.lm_order, dec.lm_min_count, phrases, dec.lm_phrases)
    with_phrases = (f", with the phrase table x {dec.lm_phrases}: {len(phrases):,} entries, "
                    f"those with characters outside the vocabulary left out" if phrases else "")
    log(f"character {dec.lm_order}-gram model: {char_lm.size():,} n-grams counted in "
        f"{time.time() - started_counting:.1f} s (decode.lm_weight={dec.lm_weight}{with_phrases})")
    return char_lm.state_dict()


def _setup_optimizer(model: Transformer, t: TrainConfig
                     ) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LambdaLR]:
    """AdamW (weight decay on matrices only) and its schedule, :func:`lr_at`."""
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": t.weight_decay},
                                   {"params": no_decay, "weight_decay": 0.0}],
                                  lr=t.lr, betas=(t.beta1, t.beta2))
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: lr_at(step, t) / t.lr)
    return optimizer, scheduler


def _restore(run: Run, saved: dict, optimizer, scheduler, stream: BatchStream) -> None:
    """--resume: the optimizer, schedule, data position, step, best score and random state of ``saved``.
    CheckpointError (one line) if one of those states does not fit what it is restored into: their insides
    belong to torch and to BatchStream, whose own loaders raise whatever a foreign state makes them raise."""
    restorers = ((checkpoint.OPTIMIZER_KEY, optimizer.load_state_dict), (checkpoint.SCHEDULER_KEY, scheduler.load_state_dict),
                 (checkpoint.BATCHES_KEY, stream.load_state_dict), (checkpoint.RNG_KEY, set_rng_state))
    for key, restore in restorers:
        try:
            restore(saved[key])
        except Exception as error:  # noqa: BLE001 - KeyError, ValueError, TypeError, IndexError, RuntimeError, ...
            raise CheckpointError(f"cannot resume from {run.last_path}: its {key} state does not fit this run "
                                  f"({type(error).__name__}: {str(error)[:100]})".replace("\n", " ")) from None
    run.step, run.best_accuracy = int(saved[checkpoint.STEP_KEY]), float(saved[checkpoint.BEST_ACCURACY_KEY])
    run.kept_step = run.step
    run.elapsed_before = float(saved.get(checkpoint.ELAPSED_KEY, 0.0))
    run.log(f"resumed {run.kept_path} at step {run.step}")


def _wrap_for_training(model: Transformer, run: Run) -> torch.nn.Module:
    """The module train_step runs: DDP over the processes when there are several, compiled with
    train.compile."""
    trained_model = model
    if run.process.world_size > 1:
        trained_model = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[run.device.index] if run.device.type == "cuda" else None)
    return torch.compile(trained_model) if run.config.train.compile else trained_model


class Logs:
    """Where rank 0 records the run: TensorBoard, ``train_log.jsonl``, ``eval_log.jsonl`` and the progress
    bar; on the other processes the writers are None and the bar is silent."""

    def __init__(self, run: Run, writer: SummaryWriter | None, train_log: TextIO | None):
        self.run, self.writer, self.train_log = run, writer, train_log
        self.progress: tqdm | None = None
        self.first_step = 0  # the step this process's bar started at (a resumed run's checkpoint step)
        self.window_tokens, self.window_start = 0, time.time()  # tokens/s since the last log_every step

    def start_progress(self) -> None:
        """The bar on stderr, on rank 0, and only when stderr is a terminal: in a log file its redraws would
        bury the messages."""
        t = self.run.config.train
        self.first_step = self.run.step
        self.progress = tqdm(total=t.max_steps, initial=self.run.step, desc=t.name, unit="step", dynamic_ncols=True,
                             file=sys.stderr, mininterval=1.0,
                             disable=not (self.run.process.is_main and sys.stderr is not None and sys.stderr.isatty()))

    def aim_at_the_last_step(self) -> None:
        """With train.max_minutes, the bar's total is the step the run will stop at: train.max_steps, or the
        step that the time cap reaches first at the pace so far (evaluations included), so that the bar's
        ETA is the time left, not that of steps the run will never take."""
        t, run = self.run.config.train, self.run
        spent, done = time.time() - run.started, run.step - self.first_step
        if t.max_minutes <= 0 or self.progress.disable or done < 1 or spent <= 0:
            return
        reachable = run.step + int(done / spent * max(t.max_minutes * 60 - spent, 0.0))
        last_step = min(t.max_steps, max(reachable, run.step))
        if last_step != self.progress.total:
            self.progress.total = last_step
            capped = f"{t.name} (stops at max_minutes={t.max_minutes:g})" if last_step < t.max_steps else t.name
            self.progress.set_description(capped, refresh=False)

    def say(self, message: str) -> None:
        """A message for the user (run.log: stderr, like every message; stdout holds only the result), printed
        above the progress bar rather than through it."""
        with tqdm.external_write_mode(file=sys.stderr):
            self.run.log(message)

    def restart_window(self) -> None:
        """Tokens/s measure training alone: the clock restarts after an evaluation."""
        self.window_tokens, self.window_start = 0, time.time()

    def record_step(self, loss: float, lr: float, grad_norm: float, tokens: int, scheduler) -> None:
        """A step's record: every step in train_log.jsonl, every log_every steps in TensorBoard."""
        step = self.run.step
        self.window_tokens += tokens
        self.aim_at_the_last_step()
        self.progress.update(1)
        if self.train_log is not None:
            self.train_log.write(json.dumps({"step": step, "loss": loss, "lr": lr, "grad_norm": grad_norm,
                                             "tokens": tokens}) + "\n")
            self.train_log.flush()  # a killed run keeps its record up to the step it reached
        if step % self.run.config.train.log_every == 0 and self.writer is not None:
            tokens_per_second = self.window_tokens / max(time.time() - self.window_start, 1e-9)
            self.restart_window()
            self.writer.add_scalar("train/loss", loss, step)
            self.writer.add_scalar("train/lr", scheduler.get_last_lr()[0], step)
            self.writer.add_scalar("train/grad_norm", grad_norm, step)
            self.writer.add_scalar("train/tokens_per_second", tokens_per_second, step)
            self.progress.set_postfix(loss=f"{loss:.3f}", tok_s=f"{tokens_per_second:,.0f}", refresh=False)

    def record_evaluation(self, result: dict, parts: Parts) -> None:
        """An evaluation's scalars, samples and pictures in TensorBoard (rank 0 only evaluates)."""
        step, writer = self.run.step, self.writer
        writer.add_scalar("valid/loss", result["loss"], step)
        writer.add_scalar("valid/char_accuracy", result["char_accuracy"], step)
        writer.add_text("valid/samples", "\n\n".join(result["samples"]), step)
        log_pictures(writer, parts.model, parts.valid_examples[: self.run.config.train.attention_sentences],
                     parts.pinyin_vocab, parts.hanzi_vocab, step)

    def append_evaluation_record(self, result: dict, elapsed: float) -> None:
        with open(self.run.run_dir / "eval_log.jsonl", "a", encoding="utf-8") as handle:
            handle.write(json.dumps({"step": self.run.step, "minutes": round(elapsed / 60, 2),
                                     "valid_loss": round(result["loss"], 4),
                                     "valid_char_accuracy": round(result["char_accuracy"], 4)}) + "\n")

    def close(self) -> None:
        if self.progress is not None:
            self.progress.close()
        if self.writer is not None:
            self.writer.close()
            self.train_log.close()


def _setup_logging(run: Run, resume: bool) -> Logs:
    """Rank 0's run folder: the logs a resumed run repeats are cut back to its checkpoint's step, a new run
    starts new ones (TensorBoard's event files included, or old and new curves would merge); the resolved
    config is written next to them."""
    if not run.process.is_main:
        return Logs(run, None, None)
    run.run_dir.mkdir(parents=True, exist_ok=True)
    for name in ("train_log.jsonl", "eval_log.jsonl"):
        if resume:  # the steps after the checkpoint are trained again: their records go
            _truncate_log(run.run_dir / name, run.step)
        else:  # a new run starts new curves
            (run.run_dir / name).unlink(missing_ok=True)
    if not resume:
        for events in run.run_dir.glob("events.out.tfevents.*"):
            events.unlink()
    save_config(run.config, run.run_dir / "config.yaml")
    writer = SummaryWriter(str(run.run_dir), purge_step=run.step + 1 if resume else None)
    train_log = open(run.run_dir / "train_log.jsonl", "a", encoding="utf-8")  # noqa: SIM115 (Logs.close)
    return Logs(run, writer, train_log)


def _log_setup(run: Run, parts: Parts, splits: Splits, logs: Logs) -> None:
    """What this run trains, on what, where: for the user, and the positional encoding for TensorBoard."""
    config, model, t = run.config, parts.model, run.config.train
    run.log(f"device {run.device}, {torch.get_num_threads()} threads, {resolve_precision(t.precision, run.device)} | "
            f"{count_parameters(model) / 1e6:.2f}M parameters | "
            f"vocab {len(parts.pinyin_vocab)} pinyin, {len(parts.hanzi_vocab)} hanzi | "
            f"{len(splits.train_examples)} train, {len(splits.valid_examples)} valid examples")
    if run.process.world_size > 1:
        run.log(f"{run.process.world_size} processes, {t.grad_accum_steps // run.process.world_size} batch(es) "
                f"each per step: global batch {t.grad_accum_steps} x {t.batch_tokens} tokens")
    mean_length = sum(len(e.hanzi) for e in splits.train_examples) / max(len(splits.train_examples), 1)
    run.log(visualize.model_summary(model, t.batch_tokens, mean_length))
    if run.step == 0 and logs.writer is not None:  # once per run: the positional-encoding matrix the embeddings add
        logs.writer.add_figure("model/positional_encoding", visualize.positional_encoding_figure(
            config.model.d_model, min(config.model.max_positions, 2 * config.data.max_len)), 0)


def _train_loop(run: Run, parts: Parts, logs: Logs) -> None:
    """Step until train.max_steps (or train.max_minutes): evaluate and save every train.eval_every steps
    and at the end. TrainingError after train.max_bad_steps non-finite batches in a row; errors.Interrupted
    after a stop signal (SIGTERM, SIGUSR1), at the end of the step it came in, with last.pt saved."""
    t = run.config.train
    run.started = time.time()
    run.signals.defer()  # from now on a stop signal ends the step first, then saves
    logs.restart_window()
    logs.start_progress()
    bad_in_a_row = 0
    try:
        while run.step < t.max_steps:
            loss, grad_norm, lr, tokens, stepped = _global_step(run, parts)
            if not stepped:  # every process sees the same summed loss and gradient norm: all skip together
                bad_in_a_row += 1
                run.log(f"warning: skipped a batch at step {run.step + 1}: loss {loss}, gradient norm {grad_norm} "
                        f"({bad_in_a_row} in a row, train.max_bad_steps={t.max_bad_steps})")
                if bad_in_a_row >= t.max_bad_steps:
                    raise TrainingError(f"stopped at step {run.step}: loss or gradient not finite for {bad_in_a_row} "
                                        f"batches in a row; {run.last_good()}; lower train.lr or check the data")
                continue
            bad_in_a_row = 0
            run.step += 1
            logs.record_step(loss, lr, grad_norm, tokens, parts.scheduler)
            out_of_time, stop_signal = _stop_requests(run)
            if run.step % t.eval_every == 0 or run.step == t.max_steps or out_of_time:
                if run.process.is_main:
                    evaluate_and_save(run, parts, logs)
                distributed.barrier()  # the others wait for the evaluation and the checkpoint
                logs.restart_window()
            if stop_signal and not out_of_time and run.step < t.max_steps:  # (a finished run just ends)
                _save_and_stop(run, parts, stop_signal)
            if out_of_time:
                logs.say(f"stopping: train.max_minutes={t.max_minutes} reached at step {run.step}")
                break
    finally:
        logs.close()


def _stop_requests(run: Run) -> tuple[bool, int | None]:
    """(whether train.max_minutes is reached, the stop signal received or None), the same on every process:
    under DDP when any process's clock or signal says so (torchrun passes a signal to each process, but a
    scheduler may reach one alone, or one a step later), so that all stop after the same step."""
    t = run.config.train
    requests = [float(t.max_minutes > 0 and time.time() - run.started >= t.max_minutes * 60)]
    requests += [float(run.signals.received == number) for number in STOP_SIGNALS]
    if run.process.world_size > 1:
        requests = distributed.sum_over_processes(requests, run.device)
    received = [number for number, count in zip(STOP_SIGNALS, requests[1:]) if count > 0]
    return requests[0] > 0, received[0] if received else None


def _save_and_stop(run: Run, parts: Parts, number: int) -> None:
    """A stop signal came: rank 0 saves last.pt at this step (without an evaluation, which could take
    longer than a scheduler waits before it kills), unless this step's checkpoint is written already; then
    every process raises errors.Interrupted (see :func:`train` for its message)."""
    if run.process.is_main and run.kept_step != run.step:
        save_checkpoint(run, parts, None, run.elapsed(), improved=False)
    distributed.barrier()
    raise Interrupted("", number)


def _global_step(run: Run, parts: Parts) -> tuple[float, float, float, int, bool]:
    """One optimizer step on the next global batch: the next grad_accum_steps batches of the stream every
    process walks in step, of which process r takes batches r, r + N, r + 2N, ... Returns (loss, gradient
    norm, learning rate used, target tokens of the global batch, stepped) (see :func:`train_step`)."""
    t, process = run.config.train, run.process
    global_batch = [parts.stream.next_indices() for _ in range(t.grad_accum_steps)]  # (epoch, indices) each
    tokens = sum(parts.stream.n_target_tokens(indices) for _, indices in global_batch)
    mine = [parts.stream.batch(epoch, indices)
            for epoch, indices in global_batch[process.rank :: process.world_size]]
    lr = parts.optimizer.param_groups[0]["lr"]
    loss, grad_norm, stepped = train_step(parts.trained_model, mine, tokens, parts.optimizer, parts.scheduler, t,
                                          run.device, parts.candidates, process.world_size)
    return loss, grad_norm, lr, tokens, stepped


def evaluate_and_save(run: Run, parts: Parts, logs: Logs) -> None:
    """Validate (see :func:`pinyin_hanzi.training.validation.validate`), record the result, and save the checkpoints.
    TrainingError, writing nothing, if the weights or the validation loss are no longer finite."""
    model = parts.model
    result = validate(model, parts.valid_encoded, parts.valid_examples, parts.lexicon, run.config, run.device,
                      parts.candidates)
    if not (math.isfinite(result["loss"]) and all(torch.isfinite(p).all() for p in model.parameters())):
        # Finite weights give a finite loss; these weights are broken and must not replace a checkpoint.
        raise TrainingError(f"stopped at step {run.step}: the weights or the validation loss ({result['loss']}) "
                            f"are no longer finite; {run.last_good()}; lower train.lr")
    logs.record_evaluation(result, parts)
    elapsed = run.elapsed()
    logs.append_evaluation_record(result, elapsed)
    improved = result["char_accuracy"] > run.best_accuracy
    run.best_accuracy = max(run.best_accuracy, result["char_accuracy"])
    save_checkpoint(run, parts, result["char_accuracy"], elapsed, improved=improved)
    logs.say(f"step {run.step}: valid loss {result['loss']:.3f}, char accuracy {result['char_accuracy']:.2%}"
                        f"{' (best)' if improved else ''}, {elapsed / 60:.1f} min | {result['samples'][0]}")


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
        step=run.step, best_accuracy=run.best_accuracy, valid_char_accuracy=accuracy, batches=parts.stream.state_dict(),
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
        _drop_set_aside(run)

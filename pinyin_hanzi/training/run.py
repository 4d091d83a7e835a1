"""One training run: its settings, where it writes and how far it has come (:class:`Run`), the data it reads
(:class:`Splits`), what setup builds for it (:class:`Parts`), the stop signals it answers
(:class:`StopSignals`), and its ownership of its folders (:func:`owned`): locked for the whole run, and
never replacing another run's files until it has a checkpoint of its own (``--overwrite``)."""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
import shlex
import shutil
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

import torch

from pinyin_hanzi import checkpoint
from pinyin_hanzi.config import Config
from pinyin_hanzi.data.batches import BatchStream
from pinyin_hanzi.data.corpus import data_fingerprint, prepared_examples
from pinyin_hanzi.data.examples import Example
from pinyin_hanzi.data.store import StoredSplit, TokenStore
from pinyin_hanzi.data.vocab import Vocab
from pinyin_hanzi.errors import CheckpointError, ConfigError, Interrupted, TrainingError
from pinyin_hanzi.files import check_writable, locked, os_error_reason
from pinyin_hanzi.lm.syllable import SyllableBigrams
from pinyin_hanzi.models.transformer import Transformer
from pinyin_hanzi.text.lexicon import Lexicon
from pinyin_hanzi.training import distributed
from pinyin_hanzi.training.distillation import Teacher
from pinyin_hanzi.training.speed import BatchLoss, Prefetcher

# What job schedulers, `timeout`, container stops and cloud preemptions send (SIGTERM), and what SLURM sends
# ahead of a time limit (`--signal=USR1@60`): training stops at the next step boundary with last.pt saved.
# Ctrl-C (SIGINT) does the same, since people press it far more often than schedulers stop a run; a second
# Ctrl-C stops at once.
STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGUSR1") if hasattr(signal, name))

SAVING_AT_CTRL_C = "interrupted: saving at the end of this step (Ctrl-C again to stop now)"


class StopSignals:
    """The signals of STOP_SIGNALS as requests to stop, for the block it is entered for (in the main thread;
    the previous handlers come back after it). Before the training loop a signal stops at once (there is
    nothing to save yet); once :meth:`defer` is called, it is only recorded in ``received``,
    and the loop stops at the next step boundary, saving last.pt first. A Ctrl-C while a stop is pending
    stops at once (errors.Interrupted), keeping the last checkpoint.

    SIGINT is taken over only from Python's own handler: a process that ignores it (started with ``&`` by
    a script, or under nohup) goes on ignoring it, and a handler of an application that calls train() stays."""

    def __init__(self):
        self.received: int | None = None  # the first stop signal's number
        self.deferred = False
        self._say: Callable[[str], None] | None = None
        self._previous: dict[int, object] = {}

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():  # signal.signal works only there
            for number in STOP_SIGNALS:
                if number != signal.SIGINT or signal.getsignal(number) is signal.default_int_handler:
                    self._previous[number] = signal.signal(number, self._receive)
        return self

    def __exit__(self, *exception) -> None:
        for number, handler in self._previous.items():
            signal.signal(number, handler)
        self._previous.clear()

    def defer(self, say: Callable[[str], None] | None = None) -> None:
        """From now on a signal asks for a stop at the next step boundary; ``say`` tells the user so when
        Ctrl-C asks (it need not: a scheduler's signal has no one watching)."""
        self.deferred, self._say = True, say

    def _receive(self, number: int, frame) -> None:
        if not self.deferred or (number == signal.SIGINT and self.received is not None):
            raise Interrupted("", number)
        self.received = self.received or number
        if number == signal.SIGINT and self._say is not None:
            # A handler runs between two bytecodes of the main thread, which may be inside a write to the
            # same stream: Python then refuses the reentrant write. The stop is recorded; only the line is lost.
            with contextlib.suppress(RuntimeError):
                self._say(SAVING_AT_CTRL_C)


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
    init_source: Path | None = None  # where it is read, if not there: --overwrite set this run's own aside
    step: int = 0  # optimizer steps taken
    best_accuracy: float = -1.0  # the best validation character accuracy so far
    kept_path: Path | None = None  # the checkpoint --resume would continue from (last.pt, else best.pt)
    kept_step: int | None = None  # its step, once known
    data_fingerprint: str | None = None  # corpus.data_fingerprint of the prepared data this run reads
    elapsed_before: float = 0.0  # seconds trained before this process started (by the run it resumes)
    started: float = 0.0  # time.time() at this process's first step
    signals: StopSignals = field(default_factory=StopSignals)  # Ctrl-C, SIGTERM, SIGUSR1 received
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

    def data_unreadable(self, error: OSError) -> TrainingError:
        """The error that stops a run whose read of the token store failed: its files were removed or moved
        while it trained (another preparation of the same folder, a clean-up), or the disk failed. Not a
        save's failure (:meth:`write_failed`): a start prepares missing data again, so --resume goes on."""
        name = Path(error.filename) if error.filename else Path(self.config.data.prepared_dir)
        if isinstance(error, FileNotFoundError):
            return TrainingError(f"the prepared data in {name.parent} was removed or moved while training ran "
                                 f"({name.name} is gone): {self.kept()}; {self.next_step()} (it prepares the data "
                                 f"again)")
        return TrainingError(f"{os_error_reason(error)} while reading the prepared data {name}: {self.kept()}; "
                             f"{self.next_step()}")

    def _at_step(self) -> str:
        return f" (step {self.kept_step})" if self.kept_step is not None else ""


@dataclass
class Splits:
    """The prepared data a run reads: the training split memory-mapped from the token store, and the first
    examples of the validation split as text (the ones validation converts and TensorBoard pictures)."""

    data_dir: Path
    store: TokenStore
    fingerprint: str  # the prepared data's (data_fingerprint): checkpoints record it, --resume compares it
    valid_sample: list[Example]

    @property
    def pinyin_vocab(self) -> Vocab:  # the prepared data's vocabularies (a new run's; --init-from grows its own)
        return self.store.pinyin_vocab

    @property
    def hanzi_vocab(self) -> Vocab:
        return self.store.hanzi_vocab

    def valid_examples(self) -> Iterator[Example]:
        """The whole validation split as text, one example at a time (its file, as preparation wrote it)."""
        return prepared_examples(self.data_dir / "valid.tsv")

    @classmethod
    def read(cls, data_dir: Path, *, sample: int) -> Splits:
        """The splits and vocabularies of prepared data (see data/corpus.py: prepare), with the first ``sample``
        validation examples as text."""
        splits = cls(data_dir, TokenStore(data_dir), data_fingerprint(data_dir), [])
        splits.valid_sample = list(itertools.islice(splits.valid_examples(), sample))
        return splits


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
    valid: StoredSplit  # the validation split in the model's vocabularies (batches.encode_split), for the loss
    valid_sample: list[Example]  # its first examples as text, for the conversions and pictures
    teacher: Teacher | None = None  # train.distill_from's model (distillation.py); None: no teacher
    batch_loss: BatchLoss | None = None  # each batch's summed loss, compiled with train.compile (speed.py)
    prefetch: Prefetcher | None = None  # the batches built ahead on a thread (train.prefetch); None: built in the step


@contextlib.contextmanager
def owned(run: Run, *, resume: bool, overwrite: bool):
    """Hold the run for the block: its output folders are checked writable (so that a read-only or missing
    disk is found now, not at the first checkpoint) and locked, so that no other process trains the same
    run meanwhile (OutputError names the one that does). Then TrainingError if a new run would replace
    another's checkpoints; CheckpointError if there is nothing to resume; ConfigError if train.distill_from
    is one of the run's own checkpoints (:func:`_check_teacher`). Rank 0 alone writes, and locks.

    ``overwrite`` moves the old run's files aside (:func:`_set_aside`) rather than deleting them: they are
    deleted once the new run has written its first checkpoint, and put back if the block ends before that
    (a typo in the corpus path, an unusable --init-from, Ctrl-C, a signal). An --init-from of the run's own
    checkpoint is then read where it was set aside (run.init_source)."""
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
        _check_teacher(run, overwrite=overwrite)
        own_start = _own_checkpoint(run, run.init_from) if overwrite else None
        if resume:  # before the data: say it at once
            # last.pt, or best.pt alone when a kill at the first evaluation came between the two writes
            run.kept_path = next((path for path in (run.last_path, run.best_path) if path.is_file()), None)
            if run.kept_path is None:
                raise CheckpointError(f"checkpoint not found: {run.last_path} (nothing to resume: start without "
                                      f"--resume)")
        try:
            if overwrite and run.process.is_main:
                _set_aside(run)
            if own_start is not None:  # --init-from this run's own checkpoint: read where it was set aside
                run.init_source = own_start.parent / SET_ASIDE / own_start.name
            yield
        finally:
            if run.set_aside:  # the new run wrote no checkpoint: the old one stays what there is
                _put_back(run)


def _own_checkpoint(run: Run, path: str | None) -> Path | None:
    """This run's best.pt or last.pt if ``path`` names it (spelt otherwise, linked or not), else None."""
    if not path:
        return None
    for own in (run.best_path, run.last_path):
        try:
            if os.path.samefile(path, own):
                return own
        except OSError:  # one of them is missing (under torchrun rank 0 may have set it aside already): by name
            if Path(path).resolve() == own.resolve():
                return own
    return None


def _check_teacher(run: Run, *, overwrite: bool) -> None:
    """ConfigError, before anything is moved, if train.distill_from is one of this run's own checkpoints:
    --overwrite sets it aside before the teacher is read (it would be missing), and a resumed run rewrites
    it (the teacher would be the student, a different one at every resume)."""
    teacher = run.config.train.distill_from
    if _own_checkpoint(run, teacher) is None:
        return
    why = "which --overwrite replaces" if overwrite else "which the run rewrites as it trains"
    raise ConfigError(f"train.distill_from={teacher} is this run's own checkpoint, {why}: copy it elsewhere first "
                      f"(cp {shlex.quote(teacher)} teacher.pt) and set train.distill_from=teacher.pt")


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


def drop_set_aside(run: Run) -> None:
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
        drop_set_aside(run)
    else:
        _put_back(run)
        run.log(f"note: put back the run in {run.checkpoint_dir} that a killed --overwrite had set aside before "
                f"its first checkpoint")

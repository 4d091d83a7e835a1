"""A training run's life (training/run.py and the loop's stops): a kill, Ctrl-C or a full disk at any moment
keeps a consistent run and says how to go on; Ctrl-C saves at the end of its step, a second one stops at once;
prepared data that vanishes while training reads it; one process owns a run; --overwrite and --resume."""

import contextlib
import json
import re
import shutil
import signal

import pytest
import torch

from pinyin_hanzi import checkpoint
from pinyin_hanzi.checkpoint import load_checkpoint
from pinyin_hanzi.config import load_config
from pinyin_hanzi.errors import CheckpointError, ConfigError, Interrupted, TrainingError
from pinyin_hanzi.training import logs, loop
from pinyin_hanzi.training.recipe import train
from pinyin_hanzi.training.run import SAVING_AT_CTRL_C, STOP_SIGNALS, StopSignals

from conftest import tiny_config_dict, write_config
from test_training import _small_run


_COMMAND = "python train.py --config c.yaml"


def _files(folder):
    return sorted(path.name for path in folder.iterdir() if path.name != ".lock")


class _Killed(BaseException):
    """The process dying between two file writes (not an Exception: nothing may catch it)."""


def test_a_kill_between_the_two_checkpoint_writes_never_loses_the_best_checkpoint(tmp_path, tiny_corpus,
                                                                                   monkeypatch):
    config = _small_run(tmp_path, tiny_corpus)  # 12 steps, evaluated at 6 and 12
    last, best = tmp_path / "checkpoints" / "tiny" / "last.pt", tmp_path / "checkpoints" / "tiny" / "best.pt"
    # A score that rises at every evaluation (across the resume too), so that each one writes both files.
    real_evaluate, evaluations = loop.validate, [0]

    def rising_evaluate(*args, **kwargs):
        evaluations[0] += 1
        return {**real_evaluate(*args, **kwargs), "char_accuracy": evaluations[0] / 10}

    monkeypatch.setattr(loop, "validate", rising_evaluate)
    real_save, writes = checkpoint.save_checkpoint, []

    def killed_after_the_first_write_at_step_12(path, state):
        real_save(path, state)
        writes.append((state["step"], path.name))
        if state["step"] == 12:
            raise _Killed

    monkeypatch.setattr(checkpoint, "save_checkpoint", killed_after_the_first_write_at_step_12)
    with pytest.raises(_Killed):
        train(config, log=lambda message: None)
    monkeypatch.setattr(checkpoint, "save_checkpoint", real_save)
    assert writes[-1][0] == 12 and len(writes) == 3  # both files at step 6, one at step 12
    # Whatever the kill left, best.pt is never behind the best score last.pt records.
    assert load_checkpoint(best)["valid_char_accuracy"] >= load_checkpoint(last)["best_accuracy"]

    train(config, resume=True, log=lambda message: None)
    best_state, last_state = load_checkpoint(best), load_checkpoint(last)
    assert last_state["step"] == best_state["step"] == 12
    assert best_state["valid_char_accuracy"] == last_state["best_accuracy"] == last_state["valid_char_accuracy"]


def test_a_kill_between_the_two_writes_of_the_first_evaluation_resumes_from_best(tmp_path, tiny_corpus, monkeypatch):
    config = _small_run(tmp_path, tiny_corpus, max_steps=4, eval_every=2)
    folder = tmp_path / "checkpoints" / "tiny"
    real_save = checkpoint.save_checkpoint

    def killed_after_best(path, state):
        real_save(path, state)
        if path.name == "best.pt":
            raise _Killed

    monkeypatch.setattr(checkpoint, "save_checkpoint", killed_after_best)
    with pytest.raises(_Killed):
        train(config, log=lambda message: None)
    monkeypatch.setattr(checkpoint, "save_checkpoint", real_save)
    assert _files(folder) == ["best.pt"]
    with pytest.raises(TrainingError, match="already holds a run.*--resume"):  # a new run must not replace it...
        train(config, log=lambda message: None)
    messages = []
    train(config, resume=True, log=messages.append)  # ... and --resume continues from it
    assert any("last.pt is missing" in m and "resuming from" in m for m in messages)
    assert any(m == f"resumed {folder / 'best.pt'} at step 2" for m in messages)
    best_state, last_state = load_checkpoint(folder / "best.pt"), load_checkpoint(folder / "last.pt")
    assert last_state["step"] == 4 and best_state["valid_char_accuracy"] == last_state["best_accuracy"]


def _interrupt_at_call(monkeypatch, call):
    real_step, calls = loop.train_step, [0]

    def train_step(*args, **kwargs):
        calls[0] += 1
        if calls[0] == call:
            raise KeyboardInterrupt
        return real_step(*args, **kwargs)

    monkeypatch.setattr(loop, "train_step", train_step)


def test_ctrl_c_says_what_was_kept_and_the_command_that_goes_on(tmp_path, tiny_corpus, monkeypatch):
    from pinyin_hanzi.errors import Interrupted

    config = _small_run(tmp_path, tiny_corpus)
    last = tmp_path / "checkpoints" / "tiny" / "last.pt"
    _interrupt_at_call(monkeypatch, 3)
    with pytest.raises(Interrupted) as raised:
        train(config, log=lambda message: None, command=_COMMAND)
    assert str(raised.value) == f"interrupted at step 2: no checkpoint was written yet; start again with: {_COMMAND}"
    assert not last.exists()
    _interrupt_at_call(monkeypatch, 9)
    with pytest.raises(Interrupted) as raised:
        train(config, log=lambda message: None, command=_COMMAND)
    assert str(raised.value) == (f"interrupted at step 8: kept {last} (step 6); continue with: {_COMMAND} --resume")
    assert isinstance(raised.value, KeyboardInterrupt)  # whatever lets Ctrl-C through lets it through


def test_ctrl_c_during_the_first_save_names_no_checkpoint_and_leaves_no_temporary_file(tmp_path, tiny_corpus,
                                                                                       monkeypatch):
    from pinyin_hanzi.errors import Interrupted

    config = _small_run(tmp_path, tiny_corpus)
    real_torch_save = torch.save

    def interrupted_half_way(obj, handle):
        if "step" not in obj:  # not a checkpoint: the language models counted once with the store
            return real_torch_save(obj, handle)
        handle.write(b"PK\x03\x04 half a checkpoint")
        raise KeyboardInterrupt

    monkeypatch.setattr(torch, "save", interrupted_half_way)
    with pytest.raises(Interrupted, match="^interrupted at step 6: no checkpoint was written yet; start again"):
        train(config, log=lambda message: None, command=_COMMAND)
    monkeypatch.setattr(torch, "save", real_torch_save)
    assert _files(tmp_path / "checkpoints" / "tiny") == []


@contextlib.contextmanager
def _ctrl_c_handled():
    """Python's own Ctrl-C handler for the block, whatever the suite started with (one started in the background
    with `&` ignores SIGINT, and training then leaves it ignored)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _ctrl_c_at_call(monkeypatch, call, presses):
    """Ctrl-C pressed ``presses`` times at the start of the ``call``-th train_step. signal.raise_signal runs the
    handler before it returns: each press is handled apart, as two presses a moment apart are."""
    real_step, calls = loop.train_step, [0]

    def train_step(*args, **kwargs):
        calls[0] += 1
        if calls[0] == call:
            for _ in range(presses):
                signal.raise_signal(signal.SIGINT)
        return real_step(*args, **kwargs)

    monkeypatch.setattr(loop, "train_step", train_step)


def test_ctrl_c_saves_at_the_end_of_its_step_and_a_second_one_stops_at_once(tmp_path, tiny_corpus, monkeypatch):
    config = _small_run(tmp_path, tiny_corpus)
    last, messages = tmp_path / "checkpoints" / "tiny" / "last.pt", []
    with _ctrl_c_handled():
        _ctrl_c_at_call(monkeypatch, 3, presses=1)
        with pytest.raises(Interrupted) as raised:
            train(config, log=messages.append, command=_COMMAND)
        assert str(raised.value) == f"interrupted at step 3: kept {last} (step 3); continue with: {_COMMAND} --resume"
        assert raised.value.exit_status == 130 and messages.count(SAVING_AT_CTRL_C) == 1
        assert load_checkpoint(last)["step"] == 3 and _files(last.parent) == ["last.pt"]  # saved, not evaluated
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # given back after training

        _ctrl_c_at_call(monkeypatch, 3, presses=2)  # steps 4 and 5, then twice in step 6: it is not finished
        with pytest.raises(Interrupted) as raised:
            train(config, resume=True, log=lambda message: None, command=_COMMAND)
        assert str(raised.value) == f"interrupted at step 5: kept {last} (step 3); continue with: {_COMMAND} --resume"
        assert load_checkpoint(last)["step"] == 3


def test_stop_signals_leave_an_ignored_ctrl_c_ignored_and_give_the_handlers_back():
    """A run started in the background by a script (`&`) or under nohup ignores Ctrl-C: training keeps it so."""
    previous = {number: signal.getsignal(number) for number in STOP_SIGNALS}
    with _ctrl_c_handled():
        with StopSignals():
            assert all(signal.getsignal(number) != previous[number] for number in STOP_SIGNALS)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        with StopSignals() as signals:
            signals.defer()
            assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN
            signal.raise_signal(signal.SIGINT)
            assert signals.received is None
        assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    assert {number: signal.getsignal(number) for number in STOP_SIGNALS} == previous


def test_prepared_data_removed_while_training_says_so_and_resume_prepares_it_again(tmp_path, tiny_corpus, monkeypatch):
    config = _small_run(tmp_path, tiny_corpus, max_steps=8, eval_every=4)
    prepared, last = tmp_path / "prepared" / "tiny", tmp_path / "checkpoints" / "tiny" / "last.pt"
    real_step, calls = loop.train_step, [0]

    def removed_at_step_6(*args, **kwargs):
        calls[0] += 1
        if calls[0] == 6:  # another preparation of the folder, or a clean-up, while the run trains
            shutil.rmtree(prepared)
        return real_step(*args, **kwargs)

    monkeypatch.setattr(loop, "train_step", removed_at_step_6)
    with pytest.raises(TrainingError) as raised:
        train(config, log=lambda message: None, command=_COMMAND)
    assert re.fullmatch(rf"the prepared data in {re.escape(str(prepared))} was removed or moved while training ran "
                        rf"\(\S+ is gone\): kept {re.escape(str(last))} \(step 4\); continue with: "
                        rf"{re.escape(_COMMAND)} --resume \(it prepares the data again\)", str(raised.value))
    monkeypatch.setattr(loop, "train_step", real_step)
    train(config, resume=True, log=lambda message: None)  # as the message says
    assert (prepared / "stats.json").is_file() and load_checkpoint(last)["step"] == 8


def test_a_full_disk_at_a_save_keeps_the_previous_checkpoint_and_says_how_to_go_on(tmp_path, tiny_corpus,
                                                                                     monkeypatch):
    import errno

    config = _small_run(tmp_path, tiny_corpus)
    folder = tmp_path / "checkpoints" / "tiny"
    real_torch_save = torch.save

    def full_at_step_12(obj, handle):
        if obj.get("step") == 12:
            handle.write(b"PK\x03\x04 the first blocks")
            raise OSError(errno.ENOSPC, "No space left on device")
        real_torch_save(obj, handle)

    monkeypatch.setattr(torch, "save", full_at_step_12)
    with pytest.raises(TrainingError) as raised:
        train(config, log=lambda message: None, command=_COMMAND)
    monkeypatch.setattr(torch, "save", real_torch_save)
    message = str(raised.value)
    assert re.fullmatch(rf"disk full while saving {folder}/(best|last)\.pt: kept {folder / 'last.pt'} \(step 6\); "
                        rf"free space, then continue with: {_COMMAND} --resume", message), message
    assert _files(folder) == ["best.pt", "last.pt"] and load_checkpoint(folder / "last.pt")["step"] == 6
    train(config, resume=True, log=lambda message: None)
    assert load_checkpoint(folder / "last.pt")["step"] == 12


def test_resume_refuses_prepared_data_that_changed_since_the_checkpoint(tmp_path, tiny_corpus):
    import os

    corpus = tmp_path / "corpus.txt"
    corpus.write_bytes(tiny_corpus.read_bytes())
    config = _small_run(tmp_path, corpus, max_steps=2, eval_every=2)
    last = tmp_path / "checkpoints" / "tiny" / "last.pt"
    train(config, log=lambda message: None)
    # A checkpoint of an older version records no data: resumed, with a note.
    state = load_checkpoint(last)
    del state[checkpoint.DATA_FINGERPRINT_KEY]
    checkpoint.save_checkpoint(last, state)
    messages = []
    train(_small_run(tmp_path, corpus, max_steps=4, eval_every=2), resume=True, log=messages.append)
    assert any(m.startswith(f"note: {last} does not record which prepared data") for m in messages)
    assert checkpoint.DATA_FINGERPRINT_KEY in load_checkpoint(last)
    # An edit that keeps the corpus's size and mtime: the data is prepared again, and --resume refuses it.
    stat = corpus.stat()
    corpus.write_bytes(corpus.read_bytes().replace("你好".encode(), "您好".encode()))
    os.utime(corpus, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert corpus.stat().st_size == stat.st_size
    with pytest.raises(CheckpointError, match=r"cannot resume from .*last.pt: the prepared data .* changed since "
                                              r"it was written \(data fingerprint \w+, the checkpoint's \w+\)"):
        train(_small_run(tmp_path, corpus, max_steps=6, eval_every=2), resume=True, log=lambda message: None)


def test_overwrite_starts_new_curves_and_removes_the_old_checkpoints(tmp_path, tiny_corpus):
    config = _small_run(tmp_path, tiny_corpus, max_steps=2, eval_every=2)
    run_dir = tmp_path / "runs" / "tiny"
    train(config, log=lambda message: None)
    (run_dir / "events.out.tfevents.0.old-host").write_bytes(b"")  # another run's curves, whatever their name
    own = tmp_path / "checkpoints" / ".." / "checkpoints" / "tiny" / "best.pt"  # the run's own, set aside first
    messages = []
    train(config, overwrite=True, init_from=str(own), log=messages.append)
    assert any(message.startswith(f"initialised from {own}: 0 pinyin") for message in messages)
    assert len(list(run_dir.glob("events.out.tfevents.*"))) == 1
    assert not list(tmp_path.glob("*/tiny/.overwritten"))
    assert [json.loads(line)["step"] for line in (run_dir / "eval_log.jsonl").read_text().splitlines()] == [2]
    with pytest.raises(ConfigError, match="exclude each other"):
        train(config, resume=True, overwrite=True, log=lambda message: None)


def test_init_from_a_checkpoint_of_another_model_says_it_cannot_start_from_it(tmp_path, tiny_corpus, trained):
    _, _, best = trained
    config = load_config(write_config(tmp_path / "c.yaml", tiny_config_dict(tmp_path, tiny_corpus)), ["model.d_ff=256"])
    with pytest.raises(CheckpointError, match=r"^cannot start from .*best.pt: model\.d_ff is 256 now but 128"):
        train(config, init_from=str(best), log=lambda message: None)


def test_a_run_whose_run_folder_another_process_holds_is_refused(tmp_path, tiny_corpus):
    import os

    from pinyin_hanzi.errors import OutputError
    from pinyin_hanzi.files import locked

    config = _small_run(tmp_path, tiny_corpus)  # another checkpoint folder, but the same runs/tiny
    with locked(tmp_path / "runs" / "tiny" / ".lock"), pytest.raises(OutputError) as raised:
        train(config, log=lambda message: None)
    assert str(raised.value) == f"run tiny is in use by another process (pid {os.getpid()})"


def test_a_full_disk_while_logging_says_what_was_kept_too(tmp_path, tiny_corpus, monkeypatch):
    import errno

    config = _small_run(tmp_path, tiny_corpus)
    real_record, log_path = logs.Logs.record_step, tmp_path / "runs" / "tiny" / "train_log.jsonl"

    def full_at_step_8(self, *args, **kwargs):
        if self.run.step == 8:
            raise OSError(errno.ENOSPC, "No space left on device", str(log_path))
        real_record(self, *args, **kwargs)

    monkeypatch.setattr(logs.Logs, "record_step", full_at_step_8)
    with pytest.raises(TrainingError) as raised:
        train(config, log=lambda message: None, command=_COMMAND)
    assert str(raised.value) == (f"disk full while saving {log_path}: kept {tmp_path / 'checkpoints' / 'tiny' / 'last.pt'} "
                                 f"(step 6); free space, then continue with: {_COMMAND} --resume")

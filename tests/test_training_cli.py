"""End-to-end: the real train.py and export tool where work could be lost (issue #37): overrides anywhere on
the command line, exports that would replace a training checkpoint, SIGTERM and Ctrl-C, --overwrite before
the new run's first checkpoint, Ctrl-C while a script imports, a full disk at a save, an honest ETA under a
time cap, and plain progress lines off a terminal."""

import atexit
import contextlib
import fcntl
import json
import os
import pty
import re
import signal
import struct
import subprocess
import sys
import tempfile
import termios
import time
from pathlib import Path

import pytest
import torch

from pinyin_hanzi.checkpoint import load_checkpoint

import forkrun
from conftest import FRESH_ENV, ROOT, tiny_config_dict, write_config

_server = None


def run(*args, cwd=ROOT):
    """``python ARGS`` to its end, forked from a process that has imported torch (see forkrun)."""
    global _server
    if _server is None:
        _server = forkrun.Server(FRESH_ENV, Path(tempfile.mkdtemp(prefix="forkrun-")))
        atexit.register(_server.close)
    return _server.run(list(args), cwd=cwd)


def _one_line_error(result, *fragments):
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def test_overrides_may_stand_before_between_and_after_the_flags(tmp_path, tiny_corpus):
    config = write_config(tmp_path / "c.yaml", tiny_config_dict(tmp_path, tiny_corpus))
    result = run(ROOT / "train.py", "data.name=before", "--config", config, "data.max_len=12", "--prepare-only",
                 "data.valid_per_mille=200")
    assert result.returncode == 0, result.stderr
    assert '"max_len": 12' in result.stdout and '"valid_per_mille": 200' in result.stdout
    assert (tmp_path / "prepared" / "before" / "train.source.bin").is_file()
    folder = tmp_path / "checkpoints" / "tiny"
    folder.mkdir(parents=True)
    (folder / "last.pt").write_bytes(b"an older run")
    trained = run(ROOT / "train.py", "--config", config, "--overwrite", "train.max_steps=2", "train.eval_every=2",
                  "train.attention_sentences=0")
    assert trained.returncode == 0, trained.stderr
    assert torch.load(folder / "last.pt", weights_only=True)["step"] == 2


def test_export_never_replaces_its_source_or_another_training_checkpoint(tmp_path, trained):
    _, _, best = trained
    source = tmp_path / "run" / "best.pt"
    source.parent.mkdir()
    source.write_bytes(best.read_bytes())
    (tmp_path / "link.pt").symlink_to(source)
    os.link(source, tmp_path / "hard.pt")
    other = tmp_path / "other" / "last.pt"
    other.parent.mkdir()
    other.write_bytes(best.read_bytes())
    before = source.read_bytes()
    export = ROOT / "pinyin_hanzi" / "cli" / "export.py"
    for target in (source, tmp_path / "run" / ".." / "run" / "best.pt", Path("run/best.pt"), tmp_path / "link.pt",
                   tmp_path / "hard.pt"):
        _one_line_error(run(export, source, target, cwd=tmp_path), "onto itself", "is the same file")
    for spelling in (Path("run/./best.pt"), tmp_path / "link.pt", tmp_path / "hard.pt"):  # the source spelt so too
        _one_line_error(run(export, spelling, source, cwd=tmp_path), "onto itself")
    _one_line_error(run(export, source, other), "it holds a training checkpoint that --resume continues")
    assert source.read_bytes() == before and other.read_bytes() == before
    assert sorted(path.name for path in source.parent.iterdir()) == ["best.pt"]  # no temporary file either
    exported = tmp_path / "model.pt"
    for _ in range(2):  # an export may replace an earlier export
        result = run(export, source, exported)
        assert result.returncode == 0, result.stderr
    assert "optimizer" not in torch.load(exported, weights_only=True)


def test_train_language_models_not_the_decoding_weights_decide_what_is_counted(tmp_path, tiny_corpus):
    """train.language_models counts the character n-gram model, whatever decode.lm_weight is; a weight for a
    model the run does not count gets a note (an older config, whose weight > 0 used to count it)."""
    config = tiny_config_dict(tmp_path, tiny_corpus, max_steps=2, eval_every=2, attention_sentences=0,
                              language_models=["char"])
    config["decode"].update(lm_order=2)  # decode.lm_weight stays 0: decoding does not use it unless asked
    path = write_config(tmp_path / "lm.yaml", config)
    counted = run(ROOT / "train.py", "--config", path)
    assert counted.returncode == 0, counted.stderr
    state = torch.load(tmp_path / "checkpoints" / "tiny" / "best.pt", weights_only=True)
    assert state["char_lm"]["order"] == 2 and state["char_lm"]["vocab_size"] == len(state["hanzi_vocab"])
    assert "character 2-gram model" in counted.stderr and "note:" not in counted.stderr

    weighed = run(ROOT / "train.py", "--config", path, "train.language_models=[]", "train.name=weighed",
                  "decode.lm_weight=0.4", "decode.word_weight=0.3")
    assert weighed.returncode == 0, weighed.stderr
    state = torch.load(tmp_path / "checkpoints" / "weighed" / "best.pt", weights_only=True)
    assert "char_lm" not in state and "word_lm" not in state and state["config"]["decode"]["lm_weight"] == 0.4
    notes = [line for line in weighed.stderr.splitlines() if line.startswith("note: decode.")]
    assert notes == ["note: decode.lm_weight=0.4 but train.language_models has no char: this run counts no such "
                     "model (add char to train.language_models, or later: python -m pinyin_hanzi.cli.char_lm)",
                     "note: decode.word_weight=0.3 but train.language_models has no word: this run counts no such "
                     "model (add word to train.language_models, or later: python -m pinyin_hanzi.cli.word_lm)"]
    _one_line_error(run(ROOT / "train.py", "--config", path, "train.language_models=[char, bigram]"),
                    "train.language_models=['char', 'bigram'] is invalid: expected a list of char and/or word")
    _one_line_error(run(ROOT / "train.py", "--config", path, "decode.lm_order=9"), "decode.lm_order=9")


def test_every_shipped_config_counts_what_it_did_when_its_weights_decided():
    """The shipped configs count exactly the models their decoding weights used to make training count."""
    from pinyin_hanzi.config import load_config

    for path in sorted((ROOT / "configs").glob("*.yaml")):
        config = load_config(path)
        decided = [name for name, weight in (("char", config.decode.lm_weight), ("word", config.decode.word_weight))
                   if weight > 0]
        assert config.train.language_models == decided, path.name


# ---- helpers for runs that a signal, a kill or a full disk meets


def _train_log(run_dir: Path) -> list[dict]:
    try:
        text = (run_dir / "train_log.jsonl").read_text(encoding="utf-8")
    except FileNotFoundError:  # not written yet, or moved aside this instant by --overwrite (checked, then gone)
        return []
    records = []
    for line in text.splitlines():
        try:
            records.append(json.loads(line))
        except ValueError:  # a line being written right now
            break
    return records


def _wait_for_step(process, run_dir: Path, step: int, timeout: float = 120) -> None:
    """Until ``process`` has logged a training step >= ``step`` in ``run_dir``; fails if it ends first."""
    deadline = time.time() + timeout
    while time.time() < deadline and process.poll() is None:
        logged = _train_log(run_dir)
        if logged and logged[-1]["step"] >= step:
            return
        time.sleep(0.02)
    raise AssertionError(f"no step {step} logged in {run_dir} (process status {process.poll()})")


def _start_training(config: Path, *overrides: str, sigint: bool = False) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(ROOT / "train.py"), "--config", str(config), *overrides],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=FRESH_ENV,
                            # A suite started in the background (`pytest &`) ignores SIGINT, and children
                            # inherit that: Python then installs no KeyboardInterrupt handler.
                            preexec_fn=(lambda: signal.signal(signal.SIGINT, signal.SIG_DFL)) if sigint else None)


def _stop(process: subprocess.Popen, number: int) -> tuple[str, str]:
    try:
        process.send_signal(number)
        return process.communicate(timeout=120)
    finally:
        process.kill()


# ---- SIGTERM and SIGUSR1: saved at the next step boundary, one line, resumable

LONG_RUN = {"max_steps": 100_000, "eval_every": 100_000, "batch_tokens": 64, "attention_sentences": 0}


def test_sigterm_saves_last_pt_at_the_next_step_and_resume_continues_from_it(tmp_path, tiny_corpus):
    config = write_config(tmp_path / "c.yaml", tiny_config_dict(tmp_path, tiny_corpus, **LONG_RUN))
    process = _start_training(config, "train.log_every=1")
    _wait_for_step(process, tmp_path / "runs" / "tiny", 3)
    stdout, stderr = _stop(process, signal.SIGTERM)
    assert process.returncode == 128 + signal.SIGTERM and stdout == "" and "Traceback" not in stderr, stderr
    folder = tmp_path / "checkpoints" / "tiny"
    command = f"python train.py --config {config} train.log_every=1"
    match = re.fullmatch(rf"stopped by SIGTERM at step (\d+): kept {folder / 'last.pt'} \(step (\d+)\); continue "
                         rf"with: {re.escape(command)} --resume", stderr.strip().splitlines()[-1])
    assert match and match[1] == match[2], stderr.strip().splitlines()[-1]
    step = int(match[1])  # saved at the end of the step the signal came in, the last one logged
    assert step >= 3 and _train_log(tmp_path / "runs" / "tiny")[-1]["step"] == step
    assert torch.load(folder / "last.pt", weights_only=True)["step"] == step
    assert sorted(path.name for path in folder.iterdir()) == [".lock", "last.pt"]  # no evaluation, no temporary
    assert "step/s" not in stderr  # no progress bar when stderr is not a terminal, but a plain line each log_every
    lines = re.findall(r"^step ([\d,]+)/100,000: loss \d+\.\d{3}, [\d,]+ tokens/s, [\d.]+ (?:s|min) elapsed, "
                       r"[\d.]+ (?:s|min|h) left$", stderr, flags=re.MULTILINE)
    assert lines == [str(n) for n in range(1, step + 1)], stderr

    resumed = run(ROOT / "train.py", "--config", config, "train.log_every=1", "--resume", f"train.max_steps={step + 2}")
    assert resumed.returncode == 0, resumed.stderr
    assert f"resumed {folder / 'last.pt'} at step {step}" in resumed.stderr
    assert [record["step"] for record in _train_log(tmp_path / "runs" / "tiny")][-3:] == [step, step + 1, step + 2]
    assert torch.load(folder / "last.pt", weights_only=True)["step"] == step + 2


# ---- --overwrite: the old run goes only once the new one has a checkpoint


def _old_run(tmp_path: Path, best: Path) -> dict[Path, bytes]:
    """An earlier run's checkpoints and logs in tmp_path (its checkpoint is the trained fixture's)."""
    files = {tmp_path / "checkpoints" / "tiny" / "best.pt": best.read_bytes(),
             tmp_path / "checkpoints" / "tiny" / "last.pt": best.read_bytes(),
             tmp_path / "runs" / "tiny" / "train_log.jsonl": b'{"step": 0, "loss": 1.0}\n',
             tmp_path / "runs" / "tiny" / "events.out.tfevents.0.old-host": b"old curves"}
    for path, content in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
    return files


def _assert_intact(files: dict[Path, bytes]) -> None:
    for path, content in files.items():
        assert path.read_bytes() == content, path
    for folder in {path.parent for path in files}:  # nothing of the new run beside them, nothing set aside
        assert sorted(path.name for path in folder.iterdir()) == sorted([".lock", *(p.name for p in files
                                                                                   if p.parent == folder)])


def test_overwrite_keeps_the_old_run_until_the_new_one_has_a_checkpoint(tmp_path, tiny_corpus, trained):
    _, _, best = trained
    config = write_config(tmp_path / "c.yaml", tiny_config_dict(tmp_path, tiny_corpus, **LONG_RUN))
    old = _old_run(tmp_path, best)
    _one_line_error(run(ROOT / "train.py", "--config", config, "--overwrite", f"data.corpus={tmp_path}/typo.txt"),
                    "corpus file not found")
    _assert_intact(old)
    refused = run(ROOT / "train.py", "--config", config, "--overwrite", "--init-from", best, "model.d_ff=256")
    assert refused.returncode == 2 and "Traceback" not in refused.stderr, refused.stderr  # after the data's summary:
    assert refused.stderr.strip().splitlines()[-1].startswith(f"error: cannot start from {best}: model.d_ff is 256 "
                                                              f"now but 128")
    _assert_intact(old)

    process = _start_training(config, "--overwrite")  # kill -9 before it: the next start puts the old run back
    _wait_for_step(process, tmp_path / "runs" / "tiny", 2)
    _stop(process, signal.SIGKILL)
    again = run(ROOT / "train.py", "--config", config)
    assert again.returncode == 2 and "put back the run in " in again.stderr, again.stderr
    assert again.stderr.strip().splitlines()[-1].endswith("or replace it with --overwrite")
    _assert_intact(old)

    # Ctrl-C: saved at the end of the step it came in, as SIGTERM is; the new run has a checkpoint, the old one goes
    process = _start_training(config, "--overwrite", sigint=True)
    _wait_for_step(process, tmp_path / "runs" / "tiny", 2)
    _, stderr = _stop(process, signal.SIGINT)
    assert process.returncode == 130 and "Traceback" not in stderr, stderr
    lines = stderr.strip().splitlines()
    assert "interrupted: saving at the end of this step (Ctrl-C again to stop now)" in lines[:-1], stderr
    folder = tmp_path / "checkpoints" / "tiny"
    match = re.fullmatch(rf"interrupted at step (\d+): kept {folder / 'last.pt'} \(step (\d+)\); continue with: "
                         rf"python train.py --config {re.escape(str(config))} --resume", lines[-1])
    assert match and match[1] == match[2], lines[-1]
    step = int(match[1])
    assert step >= 2 and torch.load(folder / "last.pt", weights_only=True)["step"] == step
    assert [record["step"] for record in _train_log(tmp_path / "runs" / "tiny")] == list(range(1, step + 1))
    assert sorted(path.name for path in folder.iterdir()) == [".lock", "last.pt"]
    assert not (tmp_path / "runs" / "tiny" / "events.out.tfevents.0.old-host").exists()
    assert not list(tmp_path.glob("*/tiny/.overwritten"))


# ---- Ctrl-C while a script imports its modules (a second or more, torch's among them)

# python -c INTERRUPT SCRIPT ARGS...: SCRIPT run as ``python SCRIPT ARGS`` would run it, with Ctrl-C pressed
# while it imports the package (at pinyin_hanzi.errors, which every command-line tool imports first of all).
INTERRUPTED_IMPORT = """
import importlib.abc, runpy, signal, sys

class CtrlC(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "pinyin_hanzi.errors":
            signal.raise_signal(signal.SIGINT)
        return None

sys.meta_path.insert(0, CtrlC())
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


@pytest.mark.parametrize("script", ["train.py", "translate.py", "serve.py"])
def test_ctrl_c_during_the_imports_is_one_line_and_status_130(script):
    result = subprocess.run([sys.executable, "-c", INTERRUPTED_IMPORT, str(ROOT / script), "--help"], cwd=ROOT,
                            capture_output=True, text=True, env=FRESH_ENV, timeout=60,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert (result.returncode, result.stderr, result.stdout) == (130, "interrupted\n", ""), result.stderr


# ---- a full disk at the first save and at a later one


def _mount_tmpfs(folder: Path, size: int) -> None:
    """A tmpfs of ``size`` bytes at ``folder`` (root only; the test is skipped where mounting is not allowed)."""
    folder.mkdir(parents=True, exist_ok=True)
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size // 4096 * 4}k", "tmpfs", str(folder)],
                            capture_output=True)
    if result.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {result.stderr.decode(errors='replace').strip()}")


def test_a_full_disk_at_any_save_is_one_line_and_keeps_the_previous_checkpoint(tmp_path, tiny_corpus, trained):
    _, _, best = trained
    size = best.stat().st_size  # a checkpoint of this config, give or take a few bytes of state
    config = write_config(tmp_path / "c.yaml", tiny_config_dict(tmp_path, tiny_corpus, max_steps=4, eval_every=2,
                                                                attention_sentences=0))
    first, later, logs = tmp_path / "first", tmp_path / "later", tmp_path / "logs"
    _mount_tmpfs(first, size // 2)  # the first checkpoint does not fit: torch's writer fails in the middle
    try:
        result = run(ROOT / "train.py", "--config", config, f"train.checkpoint_dir={first}")
        assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
        assert result.stderr.strip().splitlines()[-1] == (
            f"error: disk full while saving {first / 'tiny' / 'best.pt'}: no checkpoint was written yet; free "
            f"space, then start again with: python train.py --config {config} train.checkpoint_dir={first}")
        assert sorted(path.name for path in (first / "tiny").iterdir()) == [".lock"]  # no temporary file
    finally:
        subprocess.run(["umount", str(first)], check=False)
    _mount_tmpfs(later, size * 5 // 2)  # best.pt and last.pt of step 2 fit, a third file does not
    try:
        result = run(ROOT / "train.py", "--config", config, f"train.checkpoint_dir={later}", "train.name=later")
        assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
        folder = later / "later"
        assert re.fullmatch(rf"error: disk full while saving {folder}/(best|last)\.pt: kept {folder / 'last.pt'} "
                            rf"\(step 2\); free space, then continue with: python train.py --config .* --resume",
                            result.stderr.strip().splitlines()[-1]), result.stderr
        assert sorted(path.name for path in folder.iterdir()) == [".lock", "best.pt", "last.pt"]
        assert load_checkpoint(folder / "last.pt")["step"] == 2  # intact and loadable
    finally:
        subprocess.run(["umount", str(later)], check=False)
    _mount_tmpfs(logs, 64 * 1024)  # TensorBoard's own thread meets the full disk
    try:
        result = run(ROOT / "train.py", "--config", config, f"train.runs_dir={logs}", "train.name=logs")
        assert result.returncode == 2 and "Traceback" not in result.stderr and "Exception" not in result.stderr
        assert result.stderr.strip().splitlines()[-1].startswith(f"error: disk full while saving {logs}")
    finally:
        subprocess.run(["umount", str(logs)], check=False)


# ---- the progress bar: an honest ETA when train.max_minutes ends the run first


def test_the_progress_bar_counts_to_the_step_the_time_cap_reaches(tmp_path, tiny_corpus):
    config = write_config(tmp_path / "c.yaml", tiny_config_dict(tmp_path, tiny_corpus, **LONG_RUN))
    controller, terminal = pty.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 160, 0, 0))  # a terminal 160 columns wide
    process = subprocess.Popen([sys.executable, str(ROOT / "train.py"), "--config", str(config),
                                "train.max_minutes=0.1"], stdout=subprocess.DEVNULL, stderr=terminal, env=FRESH_ENV)
    os.close(terminal)
    written = b""
    with contextlib.suppress(OSError):  # EIO once the process has closed the terminal
        while chunk := os.read(controller, 65536):
            written += chunk
    os.close(controller)
    assert process.wait(timeout=120) == 0
    states = re.findall(r"(\d+)/(\d+) \[(\d+):(\d+)<(\d+):(\d+), +[\d.]+step/s",
                        written.decode("utf-8", errors="replace"))
    assert len(states) >= 3, written[-2000:]
    # total: the step 6 seconds reach, not train.max_steps; ETA: about the seconds left, not the ~20 minutes
    # that 100,000 steps would take (tqdm's rate is a moving average: a loaded machine makes it jumpy)
    for done, total, *clock in states:
        remaining = int(clock[2]) * 60 + int(clock[3])
        assert int(done) <= int(total) < 100_000 and remaining <= 60, states
    assert "stops at max_minutes=0.1" in written.decode("utf-8", errors="replace")
    assert b" tokens/s, " not in written  # the plain lines stand in for the bar off a terminal only

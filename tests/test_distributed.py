"""Multi-process training: two CPU processes under torchrun (gloo) against one process with gradient
accumulation over the same global batch, from scratch and resumed; a stop signal to one of them."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

from pinyin_hanzi.config import load_config
from pinyin_hanzi.errors import ConfigError
from pinyin_hanzi.training import distributed
from pinyin_hanzi.training.loop import train_step
from pinyin_hanzi.training.recipe import train

import forkrun
from conftest import FRESH_ENV, ROOT, python_path, tiny_config_dict, write_config

SETTINGS = {"max_steps": 8, "eval_every": 4, "log_every": 1, "batch_tokens": 64, "grad_accum_steps": 2,
            "attention_sentences": 0}  # no TensorBoard pictures: what is compared is the same without them
TOLERANCE = 1e-4  # relative; on this CPU the two agree exactly, but summation order may differ elsewhere


class Snapshot:
    """A copy of the package and train.py, which every training process of this module runs, and ``train``,
    which runs one such training to its end.

    The processes a test compares must run the same code. The test process imported the package when the
    session began, and a full suite on a busy machine may run for a quarter of an hour in a working tree that
    changes meanwhile (work in progress beside it): a process started minutes later can compute other losses,
    or write a checkpoint that the test process's older loader refuses. That, not the machine's load as such,
    made the two-process test fail now and then in a full run and pass alone. So every process of a
    comparison starts from one snapshot, and the test process reads their results as plain JSON and tensors."""

    def __init__(self, folder: Path):
        shutil.copytree(ROOT / "pinyin_hanzi", folder / "pinyin_hanzi",
                        ignore=shutil.ignore_patterns("__pycache__", "pretrained"))
        shutil.copy(ROOT / "train.py", folder / "train.py")
        self.script = folder / "train.py"
        self.environment = {**FRESH_ENV, "PYTHONPATH": python_path(folder)}  # the snapshot's package, not ROOT's
        # Runs are forked from one process that imported torch and the snapshot's package once (forkrun.py).
        self.server = forkrun.Server(self.environment, folder / "forkrun", timeout=600)

    def train(self, config: Path, *extra: str, processes: int = 1) -> subprocess.CompletedProcess:
        """``python train.py --config CONFIG EXTRA``, or torchrun's ``processes`` of it; fails unless it succeeds."""
        launcher = ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(processes)]
        result = self.server.run([*(launcher if processes > 1 else []), self.script, "--config", config, *extra])
        assert result.returncode == 0, result.stderr[-3000:]
        return result


@pytest.fixture(scope="module")
def snapshot(tmp_path_factory):
    code = Snapshot(tmp_path_factory.mktemp("code"))
    yield code
    code.server.close()


def _losses(run_dir):
    return [json.loads(line) for line in (run_dir / "train_log.jsonl").read_text(encoding="utf-8").splitlines()]


def _weights(path: Path) -> dict:
    """A checkpoint's model weights, read as tensors (not through this process's checkpoint loader)."""
    return torch.load(path, weights_only=True)["model"]


def _step_of(path: Path) -> int:
    return torch.load(path, weights_only=True)["step"]


def _assert_close(a: dict, b: dict):
    for name, tensor in b.items():
        assert torch.allclose(a[name], tensor, rtol=TOLERANCE, atol=TOLERANCE * tensor.abs().max()), name


def test_two_processes_match_one_process_with_accumulation(tmp_path, tiny_corpus, snapshot):
    train = snapshot.train
    one_dir, two_dir, resumed_dir = tmp_path / "one", tmp_path / "two", tmp_path / "resumed"
    one, two, resumed = (write_config(tmp_path / f"{name}.yaml", tiny_config_dict(folder, tiny_corpus, **SETTINGS))
                         for name, folder in (("one", one_dir), ("two", two_dir), ("resumed", resumed_dir)))
    # One process, two batches accumulated per step, stopped at step 4 and resumed (warm-up lasts 20 steps: the
    # learning rates of steps 1-8 do not depend on max_steps); its step-4 checkpoint is also the one the two
    # processes resume below.
    train(one, "train.max_steps=4")
    (resumed_dir / "checkpoints" / "tiny").mkdir(parents=True)
    shutil.copy(one_dir / "checkpoints" / "tiny" / "last.pt", resumed_dir / "checkpoints" / "tiny" / "last.pt")
    train(one, "--resume")
    reference = _losses(one_dir / "runs" / "tiny")
    assert [record["step"] for record in reference] == list(range(1, 9))

    # Two processes, one batch each per step: the same global batches.
    result = train(two, processes=2)
    assert result.stdout.count(str(two_dir / "checkpoints" / "tiny" / "best.pt")) == 1  # rank 0's alone
    logged = _losses(two_dir / "runs" / "tiny")  # written by rank 0 alone: each step once
    assert [record["step"] for record in logged] == list(range(1, 9))
    for mine, theirs in zip(logged, reference):
        assert mine["tokens"] == theirs["tokens"]  # the same examples
        assert mine["loss"] == pytest.approx(theirs["loss"], rel=TOLERANCE)
        assert mine["grad_norm"] == pytest.approx(theirs["grad_norm"], rel=TOLERANCE)
    final = _weights(one_dir / "checkpoints" / "tiny" / "last.pt")
    _assert_close(_weights(two_dir / "checkpoints" / "tiny" / "last.pt"), final)

    # Two processes resume the one-process run's step-4 checkpoint and end where it ended.
    result = train(resumed, "--resume", processes=2)
    assert "at step 4" in result.stderr
    after = _losses(resumed_dir / "runs" / "tiny")
    assert [record["step"] for record in after] == [5, 6, 7, 8]
    for mine, theirs in zip(after, reference[4:]):
        assert mine["loss"] == pytest.approx(theirs["loss"], rel=TOLERANCE)
    _assert_close(_weights(resumed_dir / "checkpoints" / "tiny" / "last.pt"), final)


def _worker_of_rank(launcher_pid: int, rank: int, timeout: float = 60) -> int:
    """The pid of torchrun's worker process of ``rank`` (its children, found in /proc, by their RANK)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        pending = [launcher_pid]
        while pending:
            pid = pending.pop()
            with contextlib.suppress(OSError):
                if f"RANK={rank}" in Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace").split("\0"):
                    return pid
                for task in Path(f"/proc/{pid}/task").iterdir():
                    pending += [int(child) for child in (task / "children").read_text().split()]
        time.sleep(0.2)
    raise AssertionError(f"no worker of rank {rank} under process {launcher_pid}")


def test_a_stop_signal_to_one_process_stops_all_after_the_same_step(tmp_path, tiny_corpus, snapshot):
    """SLURM may signal one task, or one sooner than another: the processes agree on the step where they
    stop (a stop flag summed over them every step), rank 0 saves last.pt there, and the run resumes."""
    if not Path(f"/proc/{os.getpid()}/task/{threading.get_native_id()}/children").is_file():
        pytest.skip("finding torchrun's workers needs /proc/PID/task/TID/children")
    # log_every: no progress lines into the stderr pipe, which is read only at the end
    settings = {**SETTINGS, "max_steps": 100_000, "eval_every": 100_000, "log_every": 100_000}
    config = write_config(tmp_path / "c.yaml", tiny_config_dict(tmp_path, tiny_corpus, **settings))
    launcher = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
                                 "2", str(snapshot.script), "--config", str(config)], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=snapshot.environment)
    try:
        deadline = time.time() + 120
        while time.time() < deadline and launcher.poll() is None and not (
                (tmp_path / "runs" / "tiny" / "train_log.jsonl").is_file() and
                len(_losses(tmp_path / "runs" / "tiny")) >= 3):
            time.sleep(0.05)
        os.kill(_worker_of_rank(launcher.pid, 1), signal.SIGUSR1)  # rank 1 alone
        _, stderr = launcher.communicate(timeout=120)
    finally:
        launcher.kill()
    stopped = re.findall(r"^(\[rank 1\] )?stopped by SIGUSR1 at step (\d+)", stderr, flags=re.MULTILINE)
    assert sorted(rank for rank, _ in stopped) == ["", "[rank 1] "] and len({step for _, step in stopped}) == 1, stderr
    step = int(stopped[0][1])
    folder = tmp_path / "checkpoints" / "tiny"
    assert f"stopped by SIGUSR1 at step {step}: kept {folder / 'last.pt'} (step {step}); continue with: " in stderr
    assert _step_of(folder / "last.pt") == step == _losses(tmp_path / "runs" / "tiny")[-1]["step"]
    # One process with the same accumulation goes on from there.
    resumed = snapshot.train(config, "--resume", f"train.max_steps={step + 1}")
    assert f"at step {step}" in resumed.stderr, resumed.stderr
    assert _step_of(folder / "last.pt") == step + 1


def test_accumulation_must_divide_among_the_processes(tmp_path, tiny_corpus, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    config = load_config(write_config(tmp_path / "c.yaml", tiny_config_dict(tmp_path, tiny_corpus, grad_accum_steps=3)))
    with pytest.raises(ConfigError, match=r"train.grad_accum_steps=3 must be a multiple of the number of processes \(2\)"):
        train(config, log=lambda message: None)


def test_environment_of_a_single_process_and_of_torchrun(monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    assert distributed.from_environment() == distributed.Process(0, 1, 0)
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("LOCAL_RANK", "1")
    process = distributed.from_environment()
    assert process == distributed.Process(3, 4, 1) and not process.is_main
    monkeypatch.setenv("RANK", "4")
    with pytest.raises(ConfigError, match="RANK=4, WORLD_SIZE=4"):
        distributed.from_environment()


def test_more_cuda_processes_than_gpus_is_a_one_line_error(monkeypatch):
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(ConfigError, match=r"LOCAL_RANK=1, but this machine has 1 CUDA device\(s\).*--nproc_per_node 1"):
        distributed.start(distributed.Process(1, 2, 1), torch.device("cuda"))
    assert not torch.distributed.is_initialized()


def test_accumulating_two_batches_equals_one_batch_of_both(tiny_corpus, tmp_path):
    """Loss normalised by the global batch's tokens: two accumulated batches give the gradient of their
    union as one batch (an average of per-batch averages would not)."""
    from pinyin_hanzi.data.batches import encode_split, split_batch
    from pinyin_hanzi.data.corpus import prepare, read_split
    from pinyin_hanzi.data.vocab import load_vocab
    from pinyin_hanzi.models.transformer import Transformer

    torch.set_num_threads(1)  # one thread, as everywhere in the suite: no OpenMP team waiting on a busy machine
    torch.manual_seed(0)
    config = load_config(write_config(tmp_path / "c.yaml", tiny_config_dict(tmp_path, tiny_corpus)))
    data_dir = prepare(config.data)
    pinyin_vocab, hanzi_vocab = load_vocab(data_dir / "pinyin_vocab.txt"), load_vocab(data_dir / "hanzi_vocab.txt")
    encoded = encode_split(read_split(data_dir, "train"), pinyin_vocab, hanzi_vocab)
    first, second = range(2), range(2, 7)  # different sizes, so the two normalisations differ
    assert encoded.offsets[2] - encoded.offsets[0] != encoded.offsets[7] - encoded.offsets[2]
    gradients = []
    for batches in ([split_batch(encoded, first), split_batch(encoded, second)], [split_batch(encoded, range(7))]):
        model = Transformer(config.model, source_vocab_size=len(pinyin_vocab), target_vocab_size=len(hanzi_vocab))
        model.load_state_dict(torch.load(tmp_path / "init.pt", weights_only=True)) if gradients else \
            torch.save(model.state_dict(), tmp_path / "init.pt")
        optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
        total = sum(int((batch.target != 0).sum()) for batch in batches)
        loss, _, stepped = train_step(model, batches, total, optimizer, scheduler, config.train,
                                      torch.device("cpu"))
        assert stepped
        gradients.append((loss, {name: p.grad.clone() for name, p in model.named_parameters()}))
    (accumulated_loss, accumulated), (joint_loss, joint) = gradients
    assert accumulated_loss == pytest.approx(joint_loss, rel=1e-5)
    for name, gradient in joint.items():
        assert torch.allclose(accumulated[name], gradient, rtol=1e-4, atol=1e-7), name

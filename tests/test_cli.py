"""End-to-end: the real train.py and translate.py scripts, run as a user would."""

import atexit
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

from pinyin_hanzi.lm.char_ngram import CharNgramLM

import forkrun
from conftest import FRESH_ENV, ROOT, tiny_config_dict, write_config

_server = None


def run(*args, stdin=None, cwd=ROOT, env=None):
    """``python ARGS`` to its end, as a fresh process would run it, forked from one that has imported torch
    (see forkrun): the many short runs of this file need not each pay the interpreter's start-up."""
    global _server
    if _server is None:
        _server = forkrun.Server(FRESH_ENV, Path(tempfile.mkdtemp(prefix="forkrun-")))
        atexit.register(_server.close)
    return _server.run(list(args), stdin=stdin, cwd=cwd, env=env)


def _one_line_error(result, *fragments):
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.stderr
    for fragment in fragments:
        assert fragment in lines[0]


def test_translate_one_shot(trained):
    _, _, best = trained
    result = run(ROOT / "translate.py", "--checkpoint", best, "ni hao")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "你好\n"
    assert run(ROOT / "translate.py", "--checkpoint", best, "wo", "men", "qu", "bei", "jing", "ba").stdout == "我们去北京吧\n"


def test_translate_file_mode_one_output_line_per_input_line(trained, tmp_path):
    tmp, _, best = trained
    from pinyin_hanzi.data.corpus import read_split
    from pinyin_hanzi.text.pinyin import is_hanzi

    examples = read_split(tmp / "prepared" / "tiny", "train")
    seen = [e for e in examples if all(is_hanzi(c) or c in "，。！？" for c in e.hanzi)][:3]
    assert len(seen) == 3
    lines = [" ".join(seen[0].tokens), "", " ".join(seen[1].tokens), "   ", "'".join(seen[2].tokens)]
    expected = [seen[0].hanzi, "", seen[1].hanzi, "", seen[2].hanzi]  # the last one typed xi'an-style
    source = tmp_path / "in.txt"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    result = run(ROOT / "translate.py", "--checkpoint", best, "--input", source)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[:-1] == expected
    from_stdin = run(ROOT / "translate.py", "--checkpoint", best, "--input", "-", "--batch-size", "2",
                     stdin="\n".join(lines) + "\n")
    assert from_stdin.stdout == result.stdout


def test_translate_evaluate_reports_scores(trained):
    tmp, _, best = trained
    result = run(ROOT / "translate.py", "--checkpoint", best, "--evaluate", tmp / "prepared" / "tiny" / "train.tsv")
    assert result.returncode == 0, result.stderr
    scores = json.loads(result.stdout.strip().splitlines()[-1])
    assert scores["char_accuracy"] == 1.0 and scores["exact"] == 1.0 and scores["cer"] == 0.0
    assert "character accuracy 100.00%" in result.stdout


def test_translate_evaluate_compare_scores_two_checkpoints_side_by_side(trained, tmp_path):
    tmp, _, best = trained
    split = tmp / "prepared" / "tiny" / "train.tsv"
    state = torch.load(best, weights_only=True)
    generator = torch.Generator().manual_seed(0)
    for name, weight in state["model"].items():  # the same model, damaged
        if weight.is_floating_point():
            weight.add_(torch.randn(weight.shape, generator=generator) * 0.5)
    damaged = tmp_path / "damaged.pt"
    torch.save(state, damaged)

    result = run(ROOT / "translate.py", "--checkpoint", best, "--evaluate", split, "--compare", damaged)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    scores = json.loads(lines[-1])
    assert scores["cer"] == 0.0 and scores["other_cer"] > 0 and scores["interval"][0] > 0
    assert scores["compare"] == str(damaged) and scores["beam"] == 5
    assert lines[-2] == f"{damaged} is worse (the interval excludes 0)"
    same = run(ROOT / "translate.py", "--checkpoint", best, "--evaluate", split, "--compare", best, "--beam", "1")
    assert "no difference the sentences can tell apart" in same.stdout and "difference +0.00 points" in same.stdout

    _one_line_error(run(ROOT / "translate.py", "--checkpoint", best, "--evaluate", split, "--compare",
                        tmp_path / "missing.pt"), "missing.pt")
    usage = run(ROOT / "translate.py", "--compare", best, "ni hao")
    assert usage.returncode == 2 and usage.stderr.strip().splitlines()[-1].endswith("--compare needs --evaluate")


def test_translate_beam_defaults_to_the_checkpoints_decode_beam(trained, tmp_path):
    tmp, _, best = trained
    split = tmp / "prepared" / "tiny" / "train.tsv"

    def beam_used(checkpoint, *extra):
        result = run(ROOT / "translate.py", "--checkpoint", checkpoint, "--evaluate", split, *extra)
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout.strip().splitlines()[-1])["beam"]

    assert beam_used(best) == 5  # DecodeConfig's default
    assert beam_used(best, "--beam", "1") == 1
    greedy_by_default = tmp_path / "greedy.pt"
    state = torch.load(best, weights_only=True)
    state["config"]["decode"]["beam"] = 1
    torch.save(state, greedy_by_default)
    assert beam_used(greedy_by_default) == 1
    assert beam_used(greedy_by_default, "--beam", "3") == 3


def test_translate_evaluate_of_a_named_split_prepares_the_checkpoints_data_when_none_is_there(trained, tmp_path):
    """A fresh clone has no prepared data: --evaluate test.<source> makes it from the checkpoint's data config
    (as the shipped model's test.novels needs), once; an unknown split names the splits there are."""
    _, _, best = trained
    moved = tmp_path / "moved.pt"
    state = torch.load(best, weights_only=True)
    state["config"]["data"]["prepared_dir"] = str(tmp_path / "fresh")  # nothing prepared there yet
    torch.save(state, moved)
    first = run(ROOT / "translate.py", "--checkpoint", moved, "--evaluate", "test", "--beam", "1")
    assert first.returncode == 0 and "note: preparing" in first.stderr and "error" not in first.stderr, first.stderr
    assert json.loads(first.stdout.strip().splitlines()[-1])["sentences"] > 0
    assert (tmp_path / "fresh" / "tiny" / "test.tsv").is_file()
    again = run(ROOT / "translate.py", "--checkpoint", moved, "--evaluate", "valid", "--beam", "1")
    assert again.returncode == 0 and "preparing" not in again.stderr, again.stderr
    _one_line_error(run(ROOT / "translate.py", "--checkpoint", moved, "--evaluate", "test.novels"),
                    "test.novels.tsv not found", "has the splits test, valid")


def test_translate_errors_are_one_line(trained, tmp_path):
    _, _, best = trained
    _one_line_error(run(ROOT / "translate.py", "--checkpoint", best, "--input", tmp_path / "missing.txt"), "not found")
    _one_line_error(run(ROOT / "translate.py", "--checkpoint", tmp_path / "none.pt", "ni hao"), "checkpoint not found")
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"ni hao\n\xff\xfe\n")
    _one_line_error(run(ROOT / "translate.py", "--checkpoint", best, "--input", bad), "line 2 is not valid UTF-8")
    shipped = run(ROOT / "translate.py", "ni hao", cwd=tmp_path)  # no local training: the shipped model
    assert shipped.returncode == 0 and "using the shipped model" in shipped.stderr
    named = run(ROOT / "translate.py", "ni hao", cwd=tmp_path, env={"PINYIN_HANZI_CHECKPOINT": str(best)})
    assert named.returncode == 0 and f"using the checkpoint named by PINYIN_HANZI_CHECKPOINT: {best}" in named.stderr
    usage = run(ROOT / "translate.py", "--checkpoint", best, "--input", "-", "ni hao")
    assert usage.returncode == 2 and "not several" in usage.stderr
    for bad in (["--beam", "0"], ["--nbest", "1000"], ["--nbest", "0"], ["--lm-weight", "-1"]):
        usage = run(ROOT / "translate.py", "--checkpoint", best, *bad, "ni hao")
        assert usage.returncode == 2 and "Traceback" not in usage.stderr and "must be" in usage.stderr


def test_translate_device_the_machine_lacks_is_one_line(trained):
    _, _, best = trained
    if torch.cuda.is_available():  # then the one after the last is missing
        device, message = f"cuda:{torch.cuda.device_count()}", "but this machine has"
    else:
        device, message = "cuda", "device='cuda', but this machine has no CUDA device: use cpu, or auto"
    _one_line_error(run(ROOT / "translate.py", "--checkpoint", best, "--device", device, "ni hao"), message)


def test_a_character_ngram_model_added_to_a_checkpoint_is_used_and_can_be_turned_off(trained, tmp_path):
    tmp, _, best = trained
    with_lm = tmp_path / "with_lm.pt"
    added = run("-m", "pinyin_hanzi.cli.char_lm", best, with_lm, "--order", "3", "--weight", "0.5")
    assert added.returncode == 0, added.stderr
    state = torch.load(with_lm, weights_only=True)
    assert state["config"]["decode"]["lm_weight"] == 0.5 and state["char_lm"]["order"] == 3

    def best_score(checkpoint, *extra):
        result = run(ROOT / "translate.py", "--checkpoint", checkpoint, "--json", "wo men qu bei jing ba", *extra)
        assert result.returncode == 0, result.stderr
        found = json.loads(result.stdout)
        assert found["output"] == "我们去北京吧"  # a sentence of the training data, with or without the n-grams
        return found["candidates"][0]["score"], result.stderr

    plain, _ = best_score(best)
    fused, _ = best_score(with_lm)
    off, _ = best_score(with_lm, "--lm-weight", "0")
    assert off == plain and fused < plain  # the n-gram log-probabilities (< 0) are added
    missing, note = best_score(best, "--lm-weight", "1")
    assert missing == plain and "has no character n-gram model" in note
    _one_line_error(run("-m", "pinyin_hanzi.cli.char_lm", tmp_path / "none.pt", tmp_path / "out.pt"), "not found")
    usage = run("-m", "pinyin_hanzi.cli.char_lm", best, tmp_path / "out.pt", "--phrases", "-1")
    assert usage.returncode == 2 and "--phrases must be between 0 and 1000" in usage.stderr and "Traceback" not in usage.stderr
    usage = run("-m", "pinyin_hanzi.cli.char_lm", best, tmp_path / "out.pt", "--max-ngrams", "-1")
    assert usage.returncode == 2 and "--max-ngrams must be between 0 and" in usage.stderr and "Traceback" not in usage.stderr
    capped = run("-m", "pinyin_hanzi.cli.char_lm", best, tmp_path / "capped.pt", "--max-ngrams", "40")
    assert capped.returncode == 0, capped.stderr
    state = torch.load(tmp_path / "capped.pt", weights_only=True)
    assert state["config"]["decode"]["lm_max_ngrams"] == 40 and CharNgramLM.stored_size(state["char_lm"]) <= 40


def test_train_errors_are_one_line(tmp_path, tiny_corpus):
    _one_line_error(run(ROOT / "train.py", "--config", tmp_path / "missing.yaml"), "config file not found")
    config = write_config(tmp_path / "c.yaml", tiny_config_dict(tmp_path, tiny_corpus))
    _one_line_error(run(ROOT / "train.py", "--config", config, "model.n_heads=5"), "model.n_heads=5", str(config))
    _one_line_error(run(ROOT / "train.py", "--config", config, "data.corpus=" + str(tmp_path / "none.txt")),
                    "corpus file not found")


def test_train_cli_prepare_only_writes_stats(tmp_path, tiny_corpus):
    config = write_config(tmp_path / "c.yaml", tiny_config_dict(tmp_path, tiny_corpus))
    result = run(ROOT / "train.py", "--config", config, "--prepare-only")
    assert result.returncode == 0, result.stderr
    stats = json.loads(result.stdout)
    assert stats["examples"]["train"] > 0 and (tmp_path / "prepared" / "tiny" / "test.tsv").is_file()


def test_translate_nbest_and_json(trained):
    _, _, best = trained
    result = run(ROOT / "translate.py", "--checkpoint", best, "--nbest", "3", "shi")  # 世 是 市 in the corpus
    fields = result.stdout.rstrip("\n").split("\t")
    texts = fields[0::3]  # text, score, the syllables it was read as
    assert result.returncode == 0 and len(texts) >= 2 and len(set(texts)) == len(texts) and set(texts) <= set("世是市")
    scores = [float(score) for score in fields[1::3]]
    assert len(scores) == len(texts) and fields[2::3] == ["shi"] * len(texts)
    assert scores == sorted(scores, reverse=True)
    result = run(ROOT / "translate.py", "--checkpoint", best, "--json", "--beam", "4", "--nbest", "2", "nihao")
    record = json.loads(result.stdout)
    assert record["input"] == "nihao" and record["output"] == "你好" and record["segmentation"] == ["ni", "hao"]
    assert record["syllables"] == ["ni", "hao"]
    assert len(record["candidates"]) == 2 and record["candidates"][0]["text"] == "你好"


def test_translate_reads_piped_stdin_without_arguments(trained):
    _, _, best = trained
    result = run(ROOT / "translate.py", "--checkpoint", best, stdin="ni hao\n\nwo men\n")
    assert result.returncode == 0 and result.stdout.split("\n")[:3] == ["你好", "", "我们"]


def test_translate_interactive_prompt_on_a_terminal(trained):
    import os
    import pty

    _, _, best = trained
    controller, terminal = pty.openpty()
    process = subprocess.Popen([sys.executable, str(ROOT / "translate.py"), "--checkpoint", str(best)],
                               stdin=terminal, stdout=terminal, stderr=terminal, cwd=ROOT,
                               env=FRESH_ENV)
    os.close(terminal)
    output = b""
    try:
        os.write(controller, b"\xff\xfe\n")  # not UTF-8: an error line, and the session goes on
        os.write(controller, b"ni hao\n")
        while b"\xe4\xbd\xa0\xe5\xa5\xbd" not in output:  # 你好
            output += os.read(controller, 1024)
        os.write(controller, b"\x04")  # Ctrl-D
        assert process.wait(timeout=60) == 0
    finally:
        process.kill()
        os.close(controller)
    assert b"pinyin> " in output
    assert b"error: that line is not valid UTF-8" in output and b"Traceback" not in output


def _on_a_terminal(args, stream: str) -> tuple[int, str, str]:
    """(status, stdout, stderr) of ``python ARGS`` with ``stream`` ("stdout" or "stderr") a terminal (a pty,
    its "\r\n" read back as "\n") and the other a pipe."""
    import fcntl
    import os
    import pty
    import struct
    import termios

    controller, terminal = pty.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))  # tqdm draws nothing on 0 columns
    streams = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, stream: terminal}
    process = subprocess.Popen([sys.executable, *map(str, args)], stdin=subprocess.DEVNULL, cwd=ROOT, env=FRESH_ENV,
                               **streams)
    os.close(terminal)
    other = process.stderr if stream == "stdout" else process.stdout
    shown = b""
    try:
        while True:
            try:
                chunk = os.read(controller, 4096)
            except OSError:  # EIO: the process closed the terminal
                break
            if not chunk:
                break
            shown += chunk
        piped = other.read()
        status = process.wait(timeout=120)
    finally:
        process.kill()
        other.close()
        os.close(controller)
    shown_text = shown.decode("utf-8").replace("\r\n", "\n")
    piped_text = piped.decode("utf-8")
    return (status, shown_text, piped_text) if stream == "stdout" else (status, piped_text, shown_text)


def test_translate_nbest_on_a_terminal_is_one_candidate_a_line(trained):
    import re

    _, _, best = trained
    status, stdout, stderr = _on_a_terminal([ROOT / "translate.py", "--checkpoint", best, "--nbest", "3",
                                             "shi\rni hao"], "stdout")  # two input lines
    assert status == 0, stderr
    blocks = [block.splitlines() for block in stdout.rstrip("\n").split("\n\n")]  # a blank line between
    assert len(blocks) == 2
    rows = [re.fullmatch(r"(\d)  (\S+)\s+(-\d+\.\d{3})  ([a-z ]+)", line) for block in blocks for line in block]
    assert all(rows), stdout
    shi, ni_hao = [[rows.pop(0).groups() for _ in block] for block in blocks]
    assert [rank for rank, *_ in shi] == [str(i) for i in range(1, len(shi) + 1)] and len(shi) >= 2
    assert {text for _, text, *_ in shi} <= set("世是市") and len({text for _, text, *_ in shi}) == len(shi)
    assert [float(score) for _, _, score, _ in shi] == sorted((float(score) for _, _, score, _ in shi), reverse=True)
    assert ni_hao[0][1] == "你好" and ni_hao[0][3] == "ni hao" and {row[3] for row in shi} == {"shi"}
    piped = run(ROOT / "translate.py", "--checkpoint", best, "--nbest", "3", "shi\rni hao")  # one line per line
    lines = piped.stdout.splitlines()
    assert len(lines) == 2 and lines[0].split("\t")[0::3] == [text for _, text, *_ in shi]


def test_translate_evaluate_shows_progress_on_a_terminal_only(trained):
    tmp, _, best = trained
    split = tmp / "prepared" / "tiny" / "train.tsv"
    status, stdout, stderr = _on_a_terminal([ROOT / "translate.py", "--checkpoint", best, "--evaluate", split,
                                             "--batch-size", "4"], "stderr")
    assert status == 0 and "character accuracy 100.00%" in stdout
    sentences = json.loads(stdout.splitlines()[-1])["sentences"]
    assert "converting: 100%" in stderr and f"{sentences}/{sentences} [" in stderr and "sentences/s]" in stderr
    piped = run(ROOT / "translate.py", "--checkpoint", best, "--evaluate", split, "--batch-size", "4")
    assert piped.stdout == stdout and "converting" not in piped.stderr  # the same scores; no bar in a log


def _line_within(stream, seconds: float) -> bytes:
    """What ``stream`` (a pipe) gives up to its next line end, waiting at most ``seconds`` for it."""
    import os
    import select
    import time

    deadline, line = time.monotonic() + seconds, b""
    while not line.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([stream], [], [], left)[0]:
            break
        byte = os.read(stream.fileno(), 1)
        if not byte:
            break
        line += byte
    return line


def test_translate_streams_lines_from_a_fifo_and_a_pipe_as_they_arrive(trained, tmp_path):
    """Each line's output comes while the writer still holds the input open, as an interactive program
    feeding translate.py through a pipe or FIFO needs."""
    import os

    _, _, best = trained
    fifo = tmp_path / "lines.fifo"
    os.mkfifo(fifo)
    for source in ("fifo", "pipe"):
        extra = ["--input", str(fifo)] if source == "fifo" else []
        process = subprocess.Popen([sys.executable, str(ROOT / "translate.py"), "--checkpoint", str(best), *extra],
                                   stdin=subprocess.PIPE if source == "pipe" else subprocess.DEVNULL,
                                   stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=FRESH_ENV)
        # O_RDWR: a FIFO opened so never waits for its reader (a translate.py that failed would leave it waiting)
        writer = open(fifo, "r+b", buffering=0) if source == "fifo" else process.stdin
        try:
            writer.write(b"ni hao\n")
            writer.flush()
            assert _line_within(process.stdout, 120) == "你好\n".encode(), source
            writer.write(b"wo men\n")
            writer.flush()
            assert _line_within(process.stdout, 60) == "我们\n".encode(), source
            writer.close()  # the end of the input: translate.py ends
            assert process.wait(timeout=60) == 0 and process.stdout.read() == b"", source
        finally:
            writer.close()
            process.kill()
            process.wait()
            process.stdout.close()


def test_a_forkrun_server_leaves_no_pipe_to_the_garbage_collector(tmp_path):
    import gc
    import warnings

    server = forkrun.Server(FRESH_ENV, tmp_path)
    assert server.run([ROOT / "translate.py", "--help"]).returncode == 0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        server.close()
        del server
        gc.collect()
    assert not [warning for warning in caught if issubclass(warning.category, ResourceWarning)]


def test_train_refuses_to_overwrite_a_run(trained):
    _, config_path, best = trained
    before = best.read_bytes()
    _one_line_error(run(ROOT / "train.py", "--config", config_path), "--overwrite")
    assert best.read_bytes() == before


def _train_log(run_dir):
    path = run_dir / "train_log.jsonl"
    if not path.exists():
        return []
    records = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            records.append(json.loads(line))
        except ValueError:  # a line being written right now
            break
    return records


def _wait_for_step(process, run_dir, step: int, timeout: float = 120) -> None:
    """Until ``process`` has logged a training step >= ``step`` in ``run_dir``, has ended, or ``timeout`` s passed."""
    import time

    deadline = time.time() + timeout
    while time.time() < deadline and process.poll() is None:
        logged = _train_log(run_dir)
        if logged and logged[-1]["step"] >= step:
            return
        time.sleep(0.01)


def test_kill_9_then_resume_reproduces_the_uninterrupted_losses(tmp_path, tiny_corpus):
    import signal

    from pinyin_hanzi.checkpoint import load_checkpoint

    settings = {"max_steps": 48, "eval_every": 12, "log_every": 6, "batch_tokens": 64}
    killed_dir, straight_dir = tmp_path / "killed", tmp_path / "straight"
    killed = write_config(tmp_path / "killed.yaml", tiny_config_dict(killed_dir, tiny_corpus, **settings))
    straight = write_config(tmp_path / "straight.yaml", tiny_config_dict(straight_dir, tiny_corpus, **settings))
    env = FRESH_ENV
    reference = subprocess.Popen([sys.executable, str(ROOT / "train.py"), "--config", str(straight)], env=env,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    victim = subprocess.Popen([sys.executable, str(ROOT / "train.py"), "--config", str(killed)], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:  # kill it mid-way: after the step-12 checkpoint, with steps since then that will be lost
        _wait_for_step(victim, killed_dir / "runs" / "tiny", 18)
        victim.send_signal(signal.SIGKILL)
        assert victim.wait(timeout=60) == -signal.SIGKILL
    finally:
        victim.kill()
    reached = _train_log(killed_dir / "runs" / "tiny")[-1]["step"]
    assert 18 <= reached < 48, reached
    checkpoint = load_checkpoint(killed_dir / "checkpoints" / "tiny" / "last.pt")  # intact, not half-written
    assert checkpoint["step"] % 12 == 0 and checkpoint["step"] <= reached  # the steps since it are lost ...

    resumed = run(ROOT / "train.py", "--config", killed, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert f"resumed {killed_dir / 'checkpoints' / 'tiny' / 'last.pt'} at step {checkpoint['step']}" in resumed.stderr
    _, reference_errors = reference.communicate(timeout=300)  # which closes its stderr pipe too
    assert reference.returncode == 0, reference_errors
    # ... and trained again: the record is clean (each step once) and equal to the uninterrupted run's.
    after_resume, uninterrupted = _train_log(killed_dir / "runs" / "tiny"), _train_log(straight_dir / "runs" / "tiny")
    assert [record["step"] for record in uninterrupted] == list(range(1, 49))
    assert after_resume == uninterrupted
    a = load_checkpoint(killed_dir / "checkpoints" / "tiny" / "last.pt")["model"]
    b = load_checkpoint(straight_dir / "checkpoints" / "tiny" / "last.pt")["model"]
    assert all(torch.equal(a[name], b[name]) for name in b)


# ---- typing like an IME user, with the shipped model (the tiny one knows too few words)


def _json_lines(*args):
    result = run(ROOT / "translate.py", "--json", *args)
    assert result.returncode == 0, result.stderr
    return [json.loads(line) for line in result.stdout.splitlines()]


def test_translate_ime_fuzzy_pinyin_and_abbreviations(tmp_path):
    from pinyin_hanzi.text.lexicon import Lexicon

    lines = tmp_path / "typed.txt"
    lines.write_text("zi dao\nbei j\n", encoding="utf-8")
    plain_zi, plain_bei = _json_lines("--input", lines)
    assert plain_zi["output"][0] in Lexicon.characters("zi") and plain_zi["output"][0] not in Lexicon.characters("zhi")
    assert plain_bei["output"] == "北京"  # the shipped model learnt abbreviations: prefixes are on by default
    (typed_out,) = _json_lines("--prefixes", "off", "bei j")
    assert typed_out["output"].endswith("j") and typed_out["segmentation"][-1] == "j"
    fuzzy_zi, abbreviated = _json_lines("--input", lines, "--fuzzy", "z-zh", "--fuzzy", "n-l,an-ang",
                                        "--prefixes", "on", "--nbest", "3")
    assert fuzzy_zi["output"][0] in Lexicon.characters("zhi") and fuzzy_zi["syllables"][0] == "zhi"
    assert fuzzy_zi["segmentation"] == ["zi", "dao"]
    assert abbreviated["output"].startswith("北") and abbreviated["segmentation"] == ["bei", "j*"]
    assert len(abbreviated["candidates"]) == 3
    for candidate in abbreviated["candidates"]:  # each with its own reading: 北京 bei jing, 北极 bei ji ...
        assert candidate["segmentation"] == ["bei", "j*"] and candidate["syllables"][1].startswith("j")
        assert all(char in Lexicon.characters(syllable) for char, syllable in zip(candidate["text"],
                                                                                  candidate["syllables"]))
    assert len({tuple(c["syllables"]) for c in abbreviated["candidates"]}) > 1


def test_translate_ime_shuangpin():
    result = run(ROOT / "translate.py", "--shuangpin", "microsoft", "--nbest", "2", "nihk")  # ni hao
    assert result.returncode == 0, result.stderr
    fields = result.stdout.rstrip("\n").split("\t")
    assert fields[0] == "你好" and fields[2] == "ni hao"


def test_translate_ime_evaluate_with_abbreviations(tmp_path):
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("wo men qu bei jing ba\t我们去北京吧\nzhong guo ren min hen qin lao\t中国人民很勤劳\n",
                     encoding="utf-8")
    result = run(ROOT / "translate.py", "--evaluate", pairs, "--abbreviate", "0.3", "--beam", "1")
    assert result.returncode == 0, result.stderr
    scores = json.loads(result.stdout.strip().splitlines()[-1])
    assert scores["abbreviate"] == 0.3 and scores["prefixes"] is True and scores["sentences"] == 2
    assert scores["char_accuracy"] >= 0.5
    assert "30% of syllables typed as their initial" in result.stdout and scores["abbreviate_as"] == "initial"
    first = run(ROOT / "translate.py", "--evaluate", pairs, "--abbreviate", "1", "--abbreviate-as", "letter",
                "--beam", "1")
    assert first.returncode == 0, first.stderr  # z g r m for 中国人民: z read as zh* too
    assert "100% of syllables typed as their first letter" in first.stdout
    assert json.loads(first.stdout.strip().splitlines()[-1])["abbreviate_as"] == "letter"
    typed_out = run(ROOT / "translate.py", "--evaluate", pairs, "--abbreviate", "0.3", "--beam", "1", "--prefixes", "off")
    letters = json.loads(typed_out.stdout.strip().splitlines()[-1])  # the abbreviations come back as letters
    assert letters["prefixes"] is False and letters["char_accuracy"] < scores["char_accuracy"]


def test_translate_evaluate_converts_with_the_command_lines_options_for_both_models(trained, tmp_path):
    """--evaluate and --compare read and search as every mode does: the command line's options go to each
    call (they used to be set on the converter), to the compared model as well; the report says what ran."""
    _, _, best = trained
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("wo men qu bei jing ba\t我们去北京吧\nni hao shi jie\t你好世界\n", encoding="utf-8")

    def scores(*options):
        result = run(ROOT / "translate.py", "--checkpoint", best, "--evaluate", pairs, "--beam", "1", *options)
        assert result.returncode == 0, result.stderr
        return result.stdout, json.loads(result.stdout.strip().splitlines()[-1])

    _, full_pinyin = scores()
    report, double_pinyin = scores("--shuangpin", "microsoft", "--unconstrained")  # wo men ... as key pairs
    assert double_pinyin["cer"] > full_pinyin["cer"] and double_pinyin["constrained"] is False
    assert "unconstrained greedy" in report.splitlines()[0]
    _, compared = scores("--shuangpin", "microsoft", "--unconstrained", "--compare", best)
    assert compared["cer"] == compared["other_cer"] == double_pinyin["cer"] and compared["constrained"] is False


def test_translate_ime_bad_option_values_are_usage_errors():
    for bad, message in ((["--fuzzy", "z-zh,q-x", "ni"], "--fuzzy: unknown pair 'q-x'"),
                         (["--shuangpin", "dvorak", "ni"], "invalid choice: 'dvorak'"),
                         (["--prefixes", "maybe", "ni"], "invalid choice: 'maybe'"),
                         (["--abbreviate", "1.5", "--evaluate", "test"], "--abbreviate must be a finite number between 0 and 1"),
                         (["--abbreviate", "0.3", "ni"], "--abbreviate needs --evaluate"),
                         (["--abbreviate-as", "letter", "--evaluate", "test"], "--abbreviate-as needs --abbreviate"),
                         (["--abbreviate", "0.3", "--abbreviate-as", "x", "--evaluate", "test"], "invalid choice: 'x'"),
                         (["--attention", "a.png", "--evaluate", "test"], "--attention needs pinyin text to convert")):
        usage = run(ROOT / "translate.py", *bad)
        lines = usage.stderr.strip().splitlines()
        assert usage.returncode == 2 and "Traceback" not in usage.stderr and usage.stdout == ""
        assert lines[0].startswith("usage: ") and lines[-1].startswith("translate.py: error: ") and message in lines[-1]


# ---- runs that meet another process, Ctrl-C or a full or read-only disk


def test_a_run_another_process_trains_is_refused_with_its_pid(tmp_path, tiny_corpus):
    import os

    from pinyin_hanzi.files import locked

    config = write_config(tmp_path / "c.yaml", tiny_config_dict(tmp_path, tiny_corpus))
    with locked(tmp_path / "checkpoints" / "tiny" / ".lock"):  # held as a training process holds it
        _one_line_error(run(ROOT / "train.py", "--config", config),
                        f"run tiny is in use by another process (pid {os.getpid()})")
    assert not (tmp_path / "runs" / "tiny" / "train_log.jsonl").exists()  # and it wrote nothing


def test_preparing_data_another_process_prepares_waits_for_it(tmp_path, tiny_corpus):
    import os

    from pinyin_hanzi.files import locked

    config = write_config(tmp_path / "c.yaml", tiny_config_dict(tmp_path, tiny_corpus))
    with locked(tmp_path / "prepared" / ".tiny.lock"):
        process = subprocess.Popen([sys.executable, str(ROOT / "train.py"), "--config", str(config), "--prepare-only"],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                   env=FRESH_ENV)
        waiting = process.stderr.readline()
        assert waiting.startswith(f"waiting for process {os.getpid()}, which is preparing "), waiting
        assert process.poll() is None and not (tmp_path / "prepared" / "tiny").exists()
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 0, stderr
    assert json.loads(stdout)["examples"]["train"] > 0


def test_ctrl_c_is_one_line_on_stderr_with_what_was_kept_and_the_resume_command(tmp_path, tiny_corpus):
    import re
    import signal

    settings = {"max_steps": 100_000, "eval_every": 5, "batch_tokens": 64, "attention_sentences": 0}
    config = write_config(tmp_path / "c.yaml", tiny_config_dict(tmp_path, tiny_corpus, **settings))
    process = subprocess.Popen([sys.executable, str(ROOT / "train.py"), "--config", str(config), "train.seed=8"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=FRESH_ENV,
                               # A suite started in the background (`pytest &`) ignores SIGINT, and children
                               # inherit that: Python then installs no KeyboardInterrupt handler.
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        _wait_for_step(process, tmp_path / "runs" / "tiny", 7)
        process.send_signal(signal.SIGINT)
        stdout, stderr = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 130 and stdout == "" and "Traceback" not in stderr, stderr
    last_line = stderr.strip().splitlines()[-1]
    folder = tmp_path / "checkpoints" / "tiny"
    command = f"python train.py --config {config} train.seed=8"
    match = re.fullmatch(rf"interrupted at step (\d+): kept {folder / 'last.pt'} \(step (\d+)\); continue with: "
                         rf"{re.escape(command)} --resume", last_line)
    assert match, last_line
    from pinyin_hanzi.checkpoint import load_checkpoint

    assert load_checkpoint(folder / "last.pt")["step"] == int(match[2]) <= int(match[1])
    assert sorted(path.name for path in folder.iterdir()) == [".lock", "best.pt", "last.pt"]  # no temporary file


def _mount_tmpfs(folder, options):
    """A small tmpfs at ``folder`` (root only; the test is skipped where mounting is not allowed)."""
    folder.mkdir(parents=True, exist_ok=True)
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(folder)], capture_output=True)
    if result.returncode != 0:
        import pytest

        pytest.skip(f"cannot mount a tmpfs here: {result.stderr.decode(errors='replace').strip()}")


def test_a_real_full_disk_and_a_read_only_one(tmp_path, tiny_corpus):
    small, read_only = tmp_path / "small", tmp_path / "read_only"
    _mount_tmpfs(small, "size=96k")
    try:
        _mount_tmpfs(read_only, "ro,size=64k")
        try:
            config = write_config(tmp_path / "c.yaml", tiny_config_dict(tmp_path, tiny_corpus, max_steps=2,
                                                                         eval_every=2, attention_sentences=0))
            _one_line_error(run(ROOT / "train.py", "--config", config, f"train.checkpoint_dir={read_only}"),
                            f"cannot write to the checkpoint folder {read_only / 'tiny'}: read-only file system")
            full = run(ROOT / "train.py", "--config", config, f"train.checkpoint_dir={small}")
            assert full.returncode == 2 and "Traceback" not in full.stderr, full.stderr
            assert full.stderr.strip().splitlines()[-1] == (
                f"error: disk full while saving {small / 'tiny' / 'best.pt'}: no checkpoint was written yet; free "
                f"space, then start again with: python train.py --config {config} train.checkpoint_dir={small}")
            assert sorted(path.name for path in (small / "tiny").iterdir()) == [".lock"]  # no temporary file
        finally:
            subprocess.run(["umount", str(read_only)], check=False)
    finally:
        subprocess.run(["umount", str(small)], check=False)


def test_an_error_line_reaches_stderr_in_one_write(monkeypatch):
    """Unbuffered (PYTHONUNBUFFERED=1), print() writes a line's text and its newline apart, and the lines of
    torchrun's processes, sharing one stderr, run together; the shared error path writes each line whole."""
    import io

    from pinyin_hanzi.cli import run as run_tool
    from pinyin_hanzi.errors import ConfigError, Interrupted

    class Writes(io.StringIO):
        def __init__(self):
            super().__init__()
            self.calls = []

        def write(self, text):
            self.calls.append(text)
            return super().write(text)

    for raised, line in ((ConfigError("bad value"), "[rank 1] error: bad value\n"),
                         (Interrupted("stopped by SIGUSR1 at step 7 (rank 0 keeps the checkpoint)", 10),
                          "[rank 1] stopped by SIGUSR1 at step 7 (rank 0 keeps the checkpoint)\n")):
        stderr = Writes()
        monkeypatch.setattr(sys, "stderr", stderr)
        monkeypatch.setenv("RANK", "1")

        def main(argv, raised=raised):
            raise raised

        run_tool(main, [])
        assert stderr.calls == [line]

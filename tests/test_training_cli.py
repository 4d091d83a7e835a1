"""End-to-end: the real train.py and export tool where work could be lost: overrides anywhere on the command
line, exports that would replace a training checkpoint (issue #37)."""

import atexit
import os
import tempfile
from pathlib import Path

import forkrun
import torch
from conftest import ROOT, tiny_config_dict, write_config

ENV = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
_server = None


def run(*args, cwd=ROOT):
    """``python ARGS`` to its end, forked from a process that has imported torch (see forkrun)."""
    global _server
    if _server is None:
        _server = forkrun.Server(ENV, Path(tempfile.mkdtemp(prefix="forkrun-")))
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
    assert (tmp_path / "prepared" / "before" / "train.tsv").is_file()
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

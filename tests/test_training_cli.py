"""End-to-end: the real train.py and export tool where work could be lost: overrides anywhere on the command
line (issue #37)."""

import atexit
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

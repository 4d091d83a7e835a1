"""The token store checked as training opens it (data/store.py): damage that keeps every file's size (ids past
the vocabulary, zeroed counts, offsets negative, past the end or out of order, a vocabulary with two characters
swapped, stats.json's types) is one `error:` line naming the file and saying to prepare the data again, through
the real train.py, never a traceback nor a run on wrong examples."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from pinyin_hanzi.cli.train import main
from pinyin_hanzi.config import load_config
from pinyin_hanzi.data import store as store_module
from pinyin_hanzi.data.corpus import prepare
from pinyin_hanzi.data.store import INTEGRITY_KEY, TokenStore
from pinyin_hanzi.errors import DataError

from conftest import tiny_config_dict, write_config


@pytest.fixture(scope="module")
def pristine(tmp_path_factory, tiny_corpus) -> Path:
    """The tiny corpus prepared once; each test damages a copy of it."""
    tmp = tmp_path_factory.mktemp("integrity")
    config = write_config(tmp / "tiny.yaml", tiny_config_dict(tmp, tiny_corpus))
    return prepare(load_config(config).data, workers=1)


@pytest.fixture
def setup(tmp_path, tiny_corpus, pristine) -> tuple[Path, Path]:
    """(config, its prepared folder: a copy of the pristine one, which preparation finds up to date)."""
    config = write_config(tmp_path / "tiny.yaml", tiny_config_dict(tmp_path, tiny_corpus))
    folder = tmp_path / "prepared" / pristine.name
    shutil.copytree(pristine, folder)
    return config, folder


def _poke(path: Path, index: int, value: int, dtype) -> None:
    array = np.memmap(path, dtype=dtype, mode="r+")
    array[index] = value
    array.flush()
    del array


def _swap_two_characters(folder: Path) -> None:
    lines = (folder / "hanzi_vocab.txt").read_text(encoding="utf-8").split("\n")
    lines[5], lines[6] = lines[6], lines[5]  # the sizes stay; ids 5 and 6 would name each other's character
    (folder / "hanzi_vocab.txt").write_text("\n".join(lines), encoding="utf-8")


def _edit_stats(folder: Path, edit) -> None:
    stats = json.loads((folder / "stats.json").read_text(encoding="utf-8"))
    edit(stats)
    (folder / "stats.json").write_text(json.dumps(stats, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")


def _unknown_dtype_without_hashes(stats: dict) -> None:  # a store prepared before the hashes, then damaged
    stats.pop(INTEGRITY_KEY)
    stats["store"]["source_dtype"] = "float99"


DAMAGE = {
    "target id past the vocabulary": (lambda f: _poke(f / "train.target.bin", 3, 60_000, np.uint16),
                                      "train.target.bin", "id 60,000 at token 3"),
    "source id past the vocabulary": (lambda f: _poke(f / "train.source.bin", 0, 65_535, np.uint16),
                                      "train.source.bin", "id 65,535 at token 0"),
    "zeroed target (ids of no character)": (
        lambda f: (f / "train.target.bin").write_bytes(bytes((f / "train.target.bin").stat().st_size)),
        "train.target.bin", "id 0 at token 0"),
    "zeroed copies": (lambda f: (f / "train.copies.bin").write_bytes(bytes((f / "train.copies.bin").stat().st_size)),
                      "train.copies.bin", "example 0 is trained on 0 times"),
    "offset past the end": (lambda f: _poke(f / "train.offsets.bin", 5, 10**6, np.int64),
                            "train.offsets.bin", "offset 5 is 1,000,000, outside 0.."),
    "negative offset": (lambda f: _poke(f / "train.offsets.bin", 5, -4, np.int64),
                        "train.offsets.bin", "offset 5 is -4, outside 0.."),
    "offsets out of order": (lambda f: _poke(f / "train.offsets.bin", 5, 3, np.int64),
                             "train.offsets.bin", "offset 5 is 3, below the"),
    "first offset not 0": (lambda f: _poke(f / "train.offsets.bin", 0, 1, np.int64),
                           "train.offsets.bin", "the first offset is 1, not 0"),
    "two characters of the vocabulary swapped": (_swap_two_characters, "hanzi_vocab.txt", "content hash"),
    "unknown dtype in stats.json": (lambda f: _edit_stats(f, lambda s: s["store"].update(target_dtype="int8")),
                                    "stats.json", "content hash"),
    "unknown dtype in an older store's stats.json": (lambda f: _edit_stats(f, _unknown_dtype_without_hashes),
                                                     "stats.json", "store.source_dtype is 'float99', not uint16"),
}


@pytest.mark.parametrize("damage", DAMAGE, ids=list(DAMAGE))
def test_damage_that_keeps_the_sizes_is_one_line_naming_the_file(setup, damage, capsys):
    config, folder = setup
    make, file, why = DAMAGE[damage]
    make(folder)
    status = main(["--config", str(config), "train.max_steps=1", "train.eval_every=1"])
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert status == 2 and "Traceback" not in captured.err and len(lines) == 1, captured.err
    assert lines[0].startswith(f"error: {folder / file} is damaged (") and why in lines[0], lines[0]
    assert lines[0].endswith(f"delete {folder} and prepare the data again "
                             f"(python train.py --config CONFIG --prepare-only)"), lines[0]
    assert not (Path(config).parent / "checkpoints" / "tiny" / "last.pt").exists()  # no step trained


def test_a_store_prepared_before_the_hashes_opens_with_the_other_checks(setup):
    _, folder = setup
    _edit_stats(folder, lambda stats: stats.pop(INTEGRITY_KEY))
    store = TokenStore(folder)
    assert len(store.split("train")) == store.layout["examples"]["train"]
    _poke(folder / "train.target.bin", 0, len(store.hanzi_vocab), np.uint16)
    with pytest.raises(DataError, match=r"train\.target\.bin is damaged \(id \d+ at token 0"):
        TokenStore(folder).split("train")


def test_a_missing_or_cut_split_file_is_one_line(setup):
    # (Training prepares such a folder again: its sizes are not those stats.json lists; other readers say so.)
    _, folder = setup
    (folder / "train.copies.bin").unlink()
    with pytest.raises(DataError, match=r"train\.copies\.bin is damaged \(missing\): delete "):
        TokenStore(folder).split("train")
    (folder / "valid.source.bin").write_bytes((folder / "valid.source.bin").read_bytes()[:-1])
    with pytest.raises(DataError, match=r"valid\.source\.bin is damaged \(\d+ bytes, not \d+\)"):
        TokenStore(folder).split("valid")


def test_a_split_is_checked_once_per_store_opened_and_across_the_read_blocks(setup, monkeypatch):
    _, folder = setup
    checked = []
    real = store_module.split_problem
    monkeypatch.setattr(store_module, "split_problem", lambda *args: checked.append(args[0]) or real(*args))
    store = TokenStore(folder)
    store.split("train")
    store.split("train", hanzi_vocab=store.hanzi_vocab)  # training opens it twice (language models, batches)
    assert checked == ["train"]
    monkeypatch.setattr(store_module, "CHECK_BLOCK", 4)  # damage where one block of the check meets the next
    offsets = np.fromfile(folder / "train.offsets.bin", np.int64)
    _poke(folder / "train.offsets.bin", 8, offsets[7] - 1, np.int64)
    with pytest.raises(DataError, match=rf"offset 8 is {offsets[7] - 1}, below the {offsets[7]} before it"):
        TokenStore(folder).split("train")

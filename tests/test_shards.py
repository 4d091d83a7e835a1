"""Preparing over machines through the real CLI, in this process (``train.py --prepare-only --shard I/N``, then
``--merge``): the shard count is bounded, missing parts are a count and a few ranges, and every damaged, missing
or stray part is one ``error:`` line saying what to do again, never a traceback, never a hang."""

from __future__ import annotations

import shutil
import signal
from contextlib import contextmanager
from pathlib import Path

import pytest

from pinyin_hanzi.cli.train import main
from pinyin_hanzi.data.corpus import MAX_SHARDS

from conftest import tiny_config_dict, write_config


@contextmanager
def answers_within(seconds: int):
    """Fails the test, instead of hanging it, when the block takes longer than ``seconds``."""
    def late(signum, frame):
        raise TimeoutError(f"no answer within {seconds} s")

    previous = signal.signal(signal.SIGALRM, late)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def _config(tmp_path: Path, corpus: Path) -> Path:
    config = tiny_config_dict(tmp_path, corpus)
    config["train"]["language_models"] = []  # --merge counts none: these tests are about the parts
    return write_config(tmp_path / "tiny.yaml", config)


def _one_error_line(capsys, status: int) -> str:
    err = capsys.readouterr().err
    assert status == 2 and "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and len(lines[0]) < 400, err
    return lines[0]


@pytest.fixture(scope="module")
def two_parts(tmp_path_factory, tiny_corpus) -> Path:
    """The parts folder of the tiny corpus prepared as shards 1/2 and 2/2 (copied by each test)."""
    tmp = tmp_path_factory.mktemp("two_parts")
    config = _config(tmp, tiny_corpus)
    for shard in ("1/2", "2/2"):
        assert main(["--config", str(config), "--prepare-only", "--shard", shard, "--workers", "1"]) == 0
    return tmp / "prepared" / "tiny.parts"


@pytest.fixture
def parts(tmp_path, tiny_corpus, two_parts) -> tuple[Path, Path]:
    """(config, parts folder): a fresh copy of :func:`two_parts` where this test's config merges."""
    folder = tmp_path / "prepared" / "tiny.parts"
    shutil.copytree(two_parts, folder)
    return _config(tmp_path, tiny_corpus), folder


@pytest.mark.parametrize("shard", ["1/100000000000000000000000", f"1/{MAX_SHARDS + 1}", "0/3", "3/2", "1/0",
                                   "١/٣", "1/3x", pytest.param("1/" + "9" * 100_000, id="100,000 digits")])
def test_a_shard_beyond_the_bound_or_not_i_of_n_is_a_short_usage_error(tmp_path, tiny_corpus, capsys, shard):
    with answers_within(10), pytest.raises(SystemExit) as exited:
        main(["--config", str(_config(tmp_path, tiny_corpus)), "--prepare-only", "--shard", shard])
    err = capsys.readouterr().err
    assert exited.value.code == 2 and "Traceback" not in err
    assert f"is not I/N with 1 <= I <= N <= {MAX_SHARDS:,}" in err and len(err) < 1000  # the usage, one line
    assert not (tmp_path / "prepared").exists()


def test_missing_parts_are_a_count_and_a_few_ranges(tmp_path, tiny_corpus, capsys):
    config = _config(tmp_path, tiny_corpus)
    with answers_within(20):
        assert main(["--config", str(config), "--prepare-only", "--shard", f"1/{MAX_SHARDS}", "--workers", "1"]) == 0
        for index in (5, 7, 9, 11, 13):  # present, whatever they hold: missing parts are said first
            (tmp_path / "prepared" / "tiny.parts" / f"part-{index}-of-{MAX_SHARDS}").mkdir()
        capsys.readouterr()
        line = _one_error_line(capsys, main(["--config", str(config), "--prepare-only", "--merge"]))
    assert line == (f"error: cannot merge {tmp_path / 'prepared' / 'tiny.parts'}: the parts of shards "
                    f"2-4/{MAX_SHARDS}, 6/{MAX_SHARDS}, 8/{MAX_SHARDS}, 10/{MAX_SHARDS} and 2 more ranges are "
                    f"missing ({MAX_SHARDS - 6:,} of {MAX_SHARDS:,} parts); run --prepare-only --shard "
                    f"I/{MAX_SHARDS} for each, then --merge")


def _cut_json(folder: Path) -> None:
    path = folder / "part-1-of-2" / "part.json"
    path.write_bytes(path.read_bytes()[:40])


def _cut_data(folder: Path) -> None:
    path = folder / "part-1-of-2" / "source.bin"
    path.write_bytes(path.read_bytes()[:10])


def _swap(folder: Path) -> None:
    (folder / "part-1-of-2").rename(folder / "swapped")
    (folder / "part-2-of-2").rename(folder / "part-1-of-2")
    (folder / "swapped").rename(folder / "part-2-of-2")


def _overwrite(folder: Path, name: str, data: bytes) -> None:
    (folder / "part-1-of-2" / name).write_bytes(data)


DAMAGE = {
    "part.json cut short": (_cut_json, "part {folder}/part-1-of-2 is damaged: its part.json is not JSON: "
                                       "run --prepare-only --shard 1/2 again, then --merge"),
    "part.json of another shape": (lambda folder: _overwrite(folder, "part.json", b"[1, 2]"),
                                   "part {folder}/part-1-of-2 is damaged: its part.json holds no object: run "
                                   "--prepare-only --shard 1/2 again, then --merge"),
    "part.json missing": (lambda folder: (folder / "part-1-of-2" / "part.json").unlink(),
                          "part {folder}/part-1-of-2 is incomplete: it has no part.json, which its preparation "
                          "writes last: run --prepare-only --shard 1/2 again, then --merge"),
    "data file cut short": (_cut_data, "part {folder}/part-1-of-2 is damaged: source.bin holds 10 bytes where "
                                       "part.json lists"),
    "ids beyond the vocabulary": (lambda folder: _overwrite(folder, "source.bin", b"\xff" * len(
        (folder / "part-1-of-2" / "source.bin").read_bytes())), "source.bin holds ids beyond the"),
    "a stray part folder": (lambda folder: (folder / "part-3-of-2").mkdir(),
                            "{folder}/part-3-of-2 is no part of a preparation (a part is a folder part-I-of-N with "
                            f"1 <= I <= N <= {MAX_SHARDS:,}): remove it, then --merge again"),
    "a part folder of an absurd count": (lambda folder: (folder / f"part-1-of-{10**23}").mkdir(),
                                         f"part-1-of-{10**23} is no part of a preparation"),
    "a file named as a part": (lambda folder: (folder / "part-5-of-7").write_text("x"), "is no part of"),
    "parts of two counts": (lambda folder: shutil.copytree(folder / "part-1-of-2", folder / "part-1-of-3"),
                            "{folder} mixes parts of different shard counts (2, 3): remove the parts of the counts "
                            "not used now, then --merge again"),
    "parts under each other's names": (_swap, "part-1-of-2 holds the part of another shard (its part.json says "
                                              "so): run --prepare-only --shard 1/2 again, then --merge"),
}


@pytest.mark.parametrize("damage", DAMAGE)
def test_a_damaged_missing_or_stray_part_is_one_line_saying_what_to_do_again(parts, capsys, damage):
    config, folder = parts
    spoil, expected = DAMAGE[damage]
    spoil(folder)
    with answers_within(20):
        line = _one_error_line(capsys, main(["--config", str(config), "--prepare-only", "--merge"]))
    assert expected.format(folder=folder) in line
    assert folder.is_dir() and not (folder.parent / "tiny").exists()  # the parts stay; nothing was written


def test_the_part_prepared_again_merges(parts, capsys):
    config, folder = parts
    _cut_data(folder)
    assert main(["--config", str(config), "--prepare-only", "--merge"]) == 2
    assert main(["--config", str(config), "--prepare-only", "--shard", "1/2", "--workers", "1"]) == 0
    assert main(["--config", str(config), "--prepare-only", "--merge"]) == 0
    assert (folder.parent / "tiny" / "stats.json").is_file() and not folder.exists()

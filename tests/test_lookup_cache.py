"""The n-gram lookup cache (lm/lookup_cache.py): a stored model's lookup tables are derived once, kept on disk,
and mapped by later loads; what the cache holds never changes a score, and a cache that is off, unwritable,
damaged or full changes nothing either."""

import errno
import os
import shutil
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from pinyin_hanzi.lm import lookup_cache
from pinyin_hanzi.lm.char_ngram import CharNgramLM

V = 40


def _state(seed: int = 0, order: int = 3) -> dict:
    generator = torch.Generator().manual_seed(seed)
    sentences = [torch.randint(4, V, (int(torch.randint(3, 12, (1,), generator=generator)),),
                               generator=generator).tolist() for _ in range(200)]
    return CharNgramLM.count(sentences, V, order=order).state_dict()


def _scores(lm: CharNgramLM) -> torch.Tensor:
    contexts = torch.randint(1, V, (50, lm.order - 1), generator=torch.Generator().manual_seed(7))
    return lm.log_prob(contexts, torch.arange(V).expand(50, V))


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv(lookup_cache.CACHE_VARIABLE, str(tmp_path / "cache"))
    monkeypatch.setattr(lookup_cache, "MIN_NGRAMS", 0)  # these models are small
    return tmp_path / "cache"


def _mapped(array: np.ndarray) -> bool:
    """Read from a cache entry: a plain read-only array over a file mapping (np.memmap's own indexing is slow)."""
    base = array
    while isinstance(base, np.ndarray) and not isinstance(base, np.memmap):
        base = base.base
    return type(array) is np.ndarray and not array.flags.writeable and isinstance(base, np.memmap)


def _entries(cache) -> list:
    return sorted(path.name for path in cache.iterdir()) if cache.exists() else []


def test_a_second_load_maps_the_tables_the_first_derived_and_scores_the_same(cache):
    state = _state()
    built = CharNgramLM.from_state_dict(state)
    [entry] = _entries(cache)
    assert entry == lookup_cache.state_digest(state)
    mapped = CharNgramLM.from_state_dict(state)
    assert _mapped(mapped._lookup.gram_keys) and not _mapped(built._lookup.gram_keys)
    assert torch.equal(_scores(mapped), _scores(built))
    assert mapped._gram_tables is None  # the counts stay packed until asked for
    assert mapped.size() == built.size() and mapped.state_dict()["tables"].keys() == state["tables"].keys()
    for k, (keys, counts) in built.grams.items():
        assert torch.equal(mapped.grams[k][0], keys) and torch.equal(mapped.grams[k][1], counts)


def test_models_that_differ_in_any_value_have_entries_of_their_own(cache):
    state = _state()
    other = dict(state, discount=0.5)
    assert lookup_cache.state_digest(other) != lookup_cache.state_digest(state)
    a, b = CharNgramLM.from_state_dict(state), CharNgramLM.from_state_dict(other)
    assert len(_entries(cache)) == 2 and not torch.equal(_scores(a), _scores(b))
    assert torch.equal(_scores(CharNgramLM.from_state_dict(other)), _scores(b))


@pytest.mark.parametrize("damage", ["truncated", "other length", "not an array"])
def test_a_damaged_entry_is_rebuilt(cache, damage):
    state = _state()
    expected = _scores(CharNgramLM.from_state_dict(state))
    path = cache / lookup_cache.state_digest(state) / "gram_log_probs.npy"
    if damage == "truncated":
        path.write_bytes(path.read_bytes()[:200])
    elif damage == "other length":
        np.save(path, np.zeros(3, np.float32))
    else:
        path.write_bytes(b"not an array at all")
    again = CharNgramLM.from_state_dict(state)
    assert not _mapped(again._lookup.gram_log_probs)  # rebuilt, not read
    assert torch.equal(_scores(again), expected)
    assert _mapped(CharNgramLM.from_state_dict(state)._lookup.gram_log_probs)  # and kept again


def test_no_cache_when_it_is_off_or_cannot_be_written(tmp_path, monkeypatch):
    monkeypatch.setattr(lookup_cache, "MIN_NGRAMS", 0)
    state = _state()
    expected = _scores(CharNgramLM.from_state_dict(state))
    monkeypatch.setenv(lookup_cache.CACHE_VARIABLE, "off")
    assert lookup_cache.cache_folder() is None
    assert torch.equal(_scores(CharNgramLM.from_state_dict(state)), expected)
    blocker = tmp_path / "a file"
    blocker.write_text("")
    monkeypatch.setenv(lookup_cache.CACHE_VARIABLE, str(blocker / "cache"))  # a folder cannot be made there
    assert torch.equal(_scores(CharNgramLM.from_state_dict(state)), expected)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["a file"]


def test_a_full_disk_while_writing_leaves_no_entry_and_loads_as_before(cache, monkeypatch):
    first, second = _state(0), _state(1)
    CharNgramLM.from_state_dict(first)
    expected = _scores(CharNgramLM.from_state_dict(second))
    shutil.rmtree(cache / lookup_cache.state_digest(second))
    saved = []

    def disk_full(path, array, **_):
        if saved:
            raise OSError(errno.ENOSPC, "No space left on device")
        saved.append(path)
        Path(path).write_bytes(b"the first file")

    monkeypatch.setattr(np, "save", disk_full)
    assert torch.equal(_scores(CharNgramLM.from_state_dict(second)), expected) and len(saved) == 1
    assert _entries(cache) == [lookup_cache.state_digest(first)]  # no entry of the second, nothing left aside


def test_the_folder_defaults_to_the_users_cache(monkeypatch, tmp_path):
    monkeypatch.delenv(lookup_cache.CACHE_VARIABLE)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert lookup_cache.cache_folder() == tmp_path / "pinyin_hanzi"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert lookup_cache.cache_folder() == tmp_path / "home" / ".cache" / "pinyin_hanzi"

    def homeless():
        raise RuntimeError("Could not determine home directory.")

    monkeypatch.setattr(Path, "home", homeless)
    assert lookup_cache.cache_folder() is None


def test_small_models_are_not_cached(tmp_path, monkeypatch):
    monkeypatch.setenv(lookup_cache.CACHE_VARIABLE, str(tmp_path / "cache"))
    state = _state()
    assert CharNgramLM.stored_size(state) < lookup_cache.MIN_NGRAMS
    CharNgramLM.from_state_dict(state)
    assert not (tmp_path / "cache").exists()


def test_the_least_recently_used_entries_go_first_and_writers_killed_long_ago_leave_nothing(cache, monkeypatch):
    monkeypatch.setattr(lookup_cache, "MAX_ENTRIES", 2)
    states = [_state(seed) for seed in range(3)]
    CharNgramLM.from_state_dict(states[0])
    CharNgramLM.from_state_dict(states[1])
    old = time.time() - 100
    os.utime(cache / lookup_cache.state_digest(states[1]), (old, old))
    CharNgramLM.from_state_dict(states[0])  # used again: now the more recent of the two
    abandoned = cache / ".writing-abandoned"
    abandoned.mkdir()
    os.utime(abandoned, (old - 3600, old - 3600))
    CharNgramLM.from_state_dict(states[2])
    assert _entries(cache) == sorted(lookup_cache.state_digest(states[i]) for i in (0, 2))


def test_two_writers_of_one_entry_leave_one_whole_entry(cache):
    state = _state()
    lm = CharNgramLM.from_state_dict(state)
    digest = lookup_cache.state_digest(state)
    lookup_cache.store(digest, {name: np.zeros(2) for name in lm._lookup._fields})  # arrives second: dropped
    assert _entries(cache) == [digest]
    assert _mapped(CharNgramLM.from_state_dict(state)._lookup.gram_keys)
    assert torch.equal(_scores(CharNgramLM.from_state_dict(state)), _scores(lm))

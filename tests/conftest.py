"""Shared fixtures: a tiny corpus written by the tests, its config, and one tiny model trained on it once
per test session (a few seconds on a CPU). Nothing here touches the network or files outside tmp dirs."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

import pytest
import torch
import yaml

ROOT = Path(__file__).resolve().parents[1]
# The n-gram lookup cache (lm/lookup_cache.py) of this test process and its children: a folder of its own,
# not the user's ~/.cache, removed at the end
CACHE = tempfile.mkdtemp(prefix="pinyin-hanzi-test-cache-")
os.environ["PINYIN_HANZI_CACHE"] = CACHE
atexit.register(shutil.rmtree, CACHE, ignore_errors=True)


def python_path(*first: str | Path) -> str:
    """A child process's PYTHONPATH: ``first``, then the caller's own, which a child must keep: packages
    installed with ``pip --target`` (a machine without site-packages of its own) are found only through it."""
    return os.pathsep.join(filter(None, [*map(str, first), os.environ.get("PYTHONPATH")]))


# The environment a child process of a test starts with: what a fresh shell would give, plus the repository on
# the import path.
FRESH_ENV = {"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1", "PYTHONPATH": python_path(ROOT),
             "PINYIN_HANZI_CACHE": CACHE}

TINY_SENTENCES = [
    "你好，世界！",
    "我们去北京吧。",
    "今天天气很好。",
    "银行在长安街上。",
    "他长大了，想当医生。",
    "我爱北京天安门。",
    "2024年我们学习Python。",
    "妈妈买了三斤苹果。",
    "请问火车站怎么走？",
    "这本书很有意思。",
    "我们明天早上八点见。",
    "她喜欢唱歌和跳舞。",
    "学生们在教室里读书。",
    "中国人民很勤劳。",
    "春天来了，花都开了。",
    "你吃饭了吗？",
    "谢谢你的帮助。",
    "上海是一个大城市。",
    "他每天骑自行车上班。",
    "我想喝一杯茶。",
]


def tiny_config_dict(tmp: Path, corpus: Path, **train_overrides) -> dict:
    train = {
        "name": "tiny", "seed": 7, "device": "cpu", "threads": 1, "max_steps": 220, "batch_tokens": 160,
        "lr": 3e-3, "warmup_steps": 20, "min_lr_ratio": 0.1, "weight_decay": 0.0, "label_smoothing": 0.0,
        "log_every": 10, "eval_every": 110, "eval_sentences": 20,
        "precision": "fp32",  # the same arithmetic on every machine (train.precision=auto depends on the CPU)
        "checkpoint_dir": str(tmp / "checkpoints"), "runs_dir": str(tmp / "runs"),
    }
    train.update(train_overrides)
    return {
        "data": {"corpus": str(corpus), "prepared_dir": str(tmp / "prepared"), "raw_dir": str(tmp / "raw"),
                 "max_len": 16, "valid_per_mille": 150, "test_per_mille": 150},
        "model": {"d_model": 64, "n_heads": 4, "n_encoder_layers": 2, "n_decoder_layers": 2, "d_ff": 128,
                  "dropout": 0.0, "max_positions": 64},
        "train": train,
        "decode": {"batch_sentences": 64},
    }


def write_config(path: Path, config: dict) -> Path:
    path.write_text(yaml.safe_dump(config, allow_unicode=True), encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def tiny_corpus(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("corpus") / "tiny.txt"
    path.write_text("\n".join(TINY_SENTENCES) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def trained(tmp_path_factory, tiny_corpus):
    """(workdir, config path, best checkpoint path) of a tiny model trained to memorise the tiny corpus."""
    from pinyin_hanzi.config import load_config
    from pinyin_hanzi.data.prepare import export_train_tsv
    from pinyin_hanzi.training.recipe import train

    torch.set_num_threads(1)
    tmp = tmp_path_factory.mktemp("trained")
    config_path = write_config(tmp / "tiny.yaml", tiny_config_dict(tmp, tiny_corpus))
    best = train(load_config(config_path), log=lambda message: None)
    export_train_tsv(tmp / "prepared" / "tiny")  # train.tsv: what the tests evaluate the memorising model on
    return tmp, config_path, best


@pytest.fixture(scope="session")
def shipped_converter():
    """The shipped model (pinyin_hanzi/pretrained/model.pt), loaded once per session; tests never change it."""
    from pinyin_hanzi.decoding.converter import Converter

    return Converter.from_pretrained()


UNTRAINED_HANZI = list("你好妮号我们门北京经吧八，。1") + ["A"]
UNTRAINED_PINYIN = ["ni", "hao", "wo", "men", "bei", "jing", "ba", "，", "。", "1", "A"]


def untrained_converter(seed=0, pinyin=UNTRAINED_PINYIN, hanzi=UNTRAINED_HANZI, **options):
    """A Converter over an untrained model: whatever it prefers, the constraint must hold."""
    from pinyin_hanzi.config import ModelConfig
    from pinyin_hanzi.data.vocab import Vocab
    from pinyin_hanzi.decoding.converter import Converter
    from pinyin_hanzi.models.transformer import Transformer

    torch.manual_seed(seed)
    config = ModelConfig(d_model=32, n_heads=4, n_encoder_layers=1, n_decoder_layers=1, d_ff=64, dropout=0.0,
                         max_positions=16)
    pinyin_vocab = Vocab(["<pad>", "<s>", "</s>", "<unk>"] + list(pinyin))
    hanzi_vocab = Vocab(["<pad>", "<s>", "</s>", "<unk>"] + list(hanzi))
    model = Transformer(config, source_vocab_size=len(pinyin_vocab), target_vocab_size=len(hanzi_vocab))
    # fp32: the tests over it hold the search to the model's exact scores (bf16 is tested apart, test_inference)
    return Converter(model, pinyin_vocab, hanzi_vocab, **{"precision": "fp32", **options})


def plain_pypinyin_tokens(text):
    """hanzi_to_tokens as it was: pypinyin's own lazy_pinyin on the text, every reading converted anew (the
    reference the faster annotation must equal): None where a character gets no syllable, as hanzi_to_tokens."""
    from pypinyin import Style, lazy_pinyin

    from pinyin_hanzi.text.pinyin import is_hanzi, syllables

    chars = "".join(text) if isinstance(text, list) else text
    tokens = lazy_pinyin(text, style=Style.NORMAL, v_to_u=False, errors=lambda piece: list(piece))
    if len(tokens) != len(chars):
        return None
    if any(is_hanzi(char) and (token == char or token not in syllables()) for char, token in zip(chars, tokens)):
        return None
    return tokens


# The files whose tests take longest (most of their time waiting on child processes), first: with the README's
# `pytest -n 2 --dist loadfile` a test process takes a whole file at a time, in this order, so that the short
# files fill the end and both processes finish together instead of one running a long file alone.
LONGEST_FIRST = ("test_cli.py", "test_training_cli.py", "test_bad_input.py", "test_service.py", "test_distributed.py",
                 "test_training.py", "test_ime_remote.py", "test_converter.py", "test_browser.py", "test_connections.py",
                 "test_packaging.py", "test_history.py", "test_ime.py", "test_user_words.py", "test_checkpoint.py",
                 "test_validation.py", "test_training_run.py", "test_visualize.py", "test_service_learning.py",
                 "test_char_ngram.py", "test_pinyin.py")


def pytest_configure(config):
    # pytest-xdist (3.6 on) hands out files by their number of tests, most first, unless told to keep the order
    # of collection: a file of three long tests would then come last and run alone.
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(items):
    rank = {name: place for place, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: each file's tests keep their order

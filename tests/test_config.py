import dataclasses
from pathlib import Path

import pytest

from pinyin_hanzi.checkpoint import CONFIG_KEY, load_checkpoint
from pinyin_hanzi.config import SECTIONS, Config, config_from_dict, load_config
from pinyin_hanzi.config_docs import config_reference, field_docs
from pinyin_hanzi.decoding.converter import SHIPPED_MODEL
from pinyin_hanzi.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]


def _write(tmp_path, text):
    path = tmp_path / "c.yaml"
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize("name", ["quickstart.yaml", "base.yaml", "mix_small.yaml", "everyday.yaml", "finetune.yaml"])
def test_shipped_configs_load(name):
    config = load_config(ROOT / "configs" / name)
    assert config.model.d_model % config.model.n_heads == 0


def test_the_everyday_config_continues_the_shipped_network():
    # --init-from needs equal model sections: everyday.yaml starts from the shipped model's weights
    everyday, mix = (load_config(ROOT / "configs" / name) for name in ("everyday.yaml", "mix_small.yaml"))
    assert everyday.model == mix.model


def test_the_finetune_config_continues_the_shipped_model_as_it_was_trained_and_decodes():
    # --init-from refuses a model section other than the checkpoint's. Abbreviations, phrase readings, clause
    # length and decoding as the shipped model had them: the fine-tuned model is the shipped one, continued.
    shipped = load_checkpoint(SHIPPED_MODEL)[CONFIG_KEY]
    finetune = load_config(ROOT / "configs" / "finetune.yaml").to_dict()
    assert finetune["model"] == shipped["model"]
    assert {key: finetune["decode"][key] for key in shipped["decode"]} == shipped["decode"]
    same_data = ("phrase_pinyin", "max_len", "min_char_count", "abbreviate")
    assert {key: finetune["data"][key] for key in same_data} == {key: shipped["data"][key] for key in same_data}
    assert "data/domain/libreoffice/train.txt" in finetune["data"]["sources"]
    assert finetune["train"]["lr"] < shipped["train"]["lr"] and finetune["train"]["max_steps"] <= 2000


def test_overrides_are_typed():
    config = load_config(ROOT / "configs" / "quickstart.yaml", ["train.lr=3e-4", "model.norm=post", "train.name=42",
                                                              "train.max_steps=10", "model.tie_output=false"])
    assert config.train.lr == 3e-4 and config.model.norm == "post" and config.train.name == "42"
    assert config.train.max_steps == 10 and config.model.tie_output is False


@pytest.mark.parametrize(
    "text, message",
    [
        ("model:\n  d_modle: 64\n", r"unknown key model\.d_modle"),
        ("modle:\n  d_model: 64\n", r"unknown section 'modle'"),
        ("model:\n  d_model: big\n", r"model\.d_model='big' has the wrong type: expected an integer"),
        ("model:\n  d_model: 100\n  n_heads: 3\n", r"model\.n_heads=3 is invalid: expected a divisor"),
        ("model:\n  norm: middle\n", r"model\.norm='middle' is invalid"),
        ("train:\n  lr: -1\n", r"train\.lr=-1\.0 is invalid"),
        ("train:\n  max_steps: 1.5\n", r"train\.max_steps=1\.5 has the wrong type"),
        ("train:\n  precision: fp16\n", r"train\.precision='fp16' is invalid: expected 'auto', 'fp32' or 'bf16'"),
        ("decode:\n  lm_phrases: -1\n", r"decode\.lm_phrases=-1 is invalid: expected an integer in 0\.\.1000"),
        # every numeric key has a finite range: no value that passes makes a run crash or allocate without bound
        ("data:\n  sources: {pd1998: .nan}\n", r"data\.sources\.pd1998=nan is invalid: expected a weight: a finite"),
        ("data:\n  sources: {pd1998: .inf}\n", r"data\.sources\.pd1998=inf is invalid"),
        ("data:\n  sources: {pd1998: 1e308}\n", r"data\.sources\.pd1998=1e\+308 is invalid: .*\[0, 100\]"),
        ("train:\n  seed: 18446744073709551616\n", r"train\.seed=18446744073709551616 is invalid: expected an integer in 0\.\.4294967295"),
        ("train:\n  seed: -1\n", r"train\.seed=-1 is invalid"),
        ("data:\n  max_len: 100000000\n", r"data\.max_len=100000000 is invalid: expected an integer in 2\.\.4096"),
        ("train:\n  batch_tokens: 100000000000\n", r"train\.batch_tokens=100000000000 is invalid"),
        ("model:\n  d_model: 1000000\n", r"model\.d_model=1000000 is invalid: expected an integer in 1\.\.8192"),
        ("model:\n  dropout: .nan\n", r"model\.dropout=nan is invalid: expected a finite number in \[0, 1\]"),
        ("train:\n  lr: .inf\n", r"train\.lr=inf is invalid"),
        ("train:\n  threads: 30000\n", r"train\.threads=30000 is invalid: expected an integer in 0\.\.256"),
        ("train:\n  max_minutes: 1e400\n", r"train\.max_minutes=inf is invalid"),
        ("train:\n  grad_clip: 100000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000\n",
         r"train\.grad_clip=1000.* is invalid: expected a finite number"),
        ("decode:\n  beam: 100000\n", r"decode\.beam=100000 is invalid: expected an integer in 1\.\.64"),
        ("decode:\n  lm_weight: 1e308\n", r"decode\.lm_weight=1e\+308 is invalid: expected a finite number in \[0, 100\]"),
        ("decode:\n  fuzzy: [z-zh, q-x]\n", r"decode\.fuzzy has an unknown pair 'q-x'"),
        ("decode:\n  fuzzy: 3\n", r"decode\.fuzzy=3 has the wrong type: expected a list of names"),
        ("decode:\n  shuangpin: dvorak\n", r"decode\.shuangpin='dvorak' is invalid: expected '' or one of microsoft"),
        ("decode:\n  prefixes: maybe\n", r"decode\.prefixes='maybe' is invalid: expected 'auto', 'on' or 'off'"),
        ("decode:\n  precision: fp16\n", r"decode\.precision='fp16' is invalid: expected 'auto', 'fp32', 'bf16' or 'int8'"),
        ("model: [1, 2]\n", r"section 'model' must be a mapping"),
        ("model:\n  d_model: [\n", r"not valid YAML"),
        ("- a\n- b\n", r"expected a mapping of sections"),
    ],
)
def test_bad_configs_name_the_key_and_the_file(tmp_path, text, message):
    path = _write(tmp_path, text)
    with pytest.raises(ConfigError, match=message) as raised:
        load_config(path)
    assert "\n" not in str(raised.value)
    if "YAML" not in message and "mapping" not in message:
        assert str(path) in str(raised.value)


def test_bad_overrides_and_missing_file(tmp_path):
    with pytest.raises(ConfigError, match=r"unknown key train\.lrr"):
        load_config(None, ["train.lrr=1"])
    with pytest.raises(ConfigError, match="expected section.key=value"):
        load_config(None, ["lr=1"])
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(tmp_path / "missing.yaml")


def test_ime_options_read_from_files_and_overrides(tmp_path):
    path = _write(tmp_path, "decode:\n  prefixes: off\n  fuzzy: [z-zh, an-ang]\n  shuangpin: xiaohe\n")
    decode = load_config(path).decode  # a bare YAML off is a boolean: it still means "off"
    assert (decode.prefixes, decode.fuzzy, decode.shuangpin) == ("off", ["z-zh", "an-ang"], "xiaohe")
    decode = load_config(path, ["decode.prefixes=on", "decode.fuzzy=n-l,r-l", "decode.shuangpin="]).decode
    assert (decode.prefixes, decode.fuzzy, decode.shuangpin) == ("on", ["n-l", "r-l"], "")
    assert config_from_dict(load_config(path).to_dict()).decode == load_config(path).decode


def test_round_trip_through_a_dict():
    config = load_config(ROOT / "configs" / "quickstart.yaml")
    assert config_from_dict(config.to_dict()) == config


@pytest.mark.parametrize("section", list(SECTIONS))
def test_every_field_has_a_doc(section):
    cls = SECTIONS[section]
    docs = field_docs(cls)
    assert set(docs) == {item.name for item in dataclasses.fields(cls)}
    assert [name for name, doc in docs.items() if not doc] == []


def test_section_docs_and_sections_match_the_config():
    assert list(SECTIONS) == [item.name for item in dataclasses.fields(Config)]
    assert all(field_docs(Config).values())


@dataclasses.dataclass
class _Documented:
    plain: int = 1  # one line
    long: str = "x|y"  # first part,
    # second part

    # a comment after a blank line belongs to no field
    bare: float = 0.0
    mapping: dict[str, float] = dataclasses.field(default_factory=dict)  # name -> weight


def test_field_docs_join_continuation_lines_below_their_field_only():
    assert field_docs(_Documented) == {"plain": "one line", "long": "first part, second part", "bare": "",
                                       "mapping": "name -> weight"}
    decode = field_docs(SECTIONS["decode"])
    assert decode["lm_weight"].endswith("translate.py --lm-weight overrides it")
    assert decode["lm_order"].startswith("n of the character n-gram model")


def test_docs_config_md_is_generated_from_the_field_docs():
    written = (ROOT / "docs" / "config.md").read_text(encoding="utf-8")
    assert written == config_reference(), "docs/config.md is stale: python -m pinyin_hanzi.cli.config_reference > docs/config.md"


def test_reference_lists_every_key_with_its_default():
    reference = config_reference()
    assert "| `train.max_steps` | `int` | `10000` |" in reference
    assert "| `data.sources` | `dict[str, float]` | `{}` |" in reference
    assert "| `data.name` | `str` | `''` |" in reference
    for section, cls in SECTIONS.items():
        for item in dataclasses.fields(cls):
            assert f"| `{section}.{item.name}` |" in reference


@pytest.mark.parametrize("name", ["..", ".", "a/b", "..\\x", "c:x", "' run '", ""])
def test_a_run_name_is_one_plain_folder_name(name):
    with pytest.raises(ConfigError, match="train.name"):
        load_config(None, [f"train.name={name}"])


@pytest.mark.parametrize("text", ["", "\n# only a comment\n"])
def test_an_empty_config_file_is_an_error(tmp_path, text):
    path = tmp_path / "empty.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match="is empty"):
        load_config(path)


@pytest.mark.parametrize("source", ["my_text.txt", "chats.tsv.gz", "data/my_text/", "data/my_text/**/*.txt",
                                    "notes/today", "*.txt"])
def test_your_own_text_may_be_a_file_a_folder_or_a_glob(tmp_path, source):
    path = _write(tmp_path, f"data:\n  sources:\n    {source!r}: 1.0\n    pd1998: 0.5\n")
    assert load_config(path).data.sources == {source: 1.0, "pd1998": 0.5}


def test_a_bare_unknown_source_name_is_taken_for_a_misspelt_one(tmp_path):
    path = _write(tmp_path, "data:\n  sources:\n    pd1989: 1.0\n")
    with pytest.raises(ConfigError, match="unknown source 'pd1989'.*a folder or a glob"):
        load_config(path)

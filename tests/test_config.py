from pathlib import Path

import pytest

from pinyin_hanzi.config import config_from_dict, load_config
from pinyin_hanzi.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]


def _write(tmp_path, text):
    path = tmp_path / "c.yaml"
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize("name", ["quickstart.yaml", "base.yaml"])
def test_shipped_configs_load(name):
    config = load_config(ROOT / "configs" / name)
    assert config.model.d_model % config.model.n_heads == 0


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
        ("decode:\n  lm_phrases: -1\n", r"decode\.lm_phrases=-1 is invalid: expected an integer >= 0"),
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


def test_round_trip_through_a_dict():
    config = load_config(ROOT / "configs" / "quickstart.yaml")
    assert config_from_dict(config.to_dict()) == config

"""Model surgery (models/growing.py): a trained model carried into larger vocabularies and more layers."""

import dataclasses

import pytest
import torch

from pinyin_hanzi.config import ModelConfig
from pinyin_hanzi.data.vocab import SPECIALS, Vocab
from pinyin_hanzi.errors import CheckpointError
from pinyin_hanzi.models.growing import RESIDUAL_OUTPUTS, check_growable, grow
from pinyin_hanzi.models.transformer import Transformer

SMALL = ModelConfig(d_model=32, n_heads=4, n_encoder_layers=1, n_decoder_layers=2, d_ff=64, dropout=0.0,
                    max_positions=16)


def _trained(config: ModelConfig = SMALL) -> tuple[Transformer, Vocab, Vocab]:
    torch.manual_seed(0)
    pinyin_vocab, hanzi_vocab = Vocab(list(SPECIALS) + ["ni", "hao"]), Vocab(list(SPECIALS) + list("你好"))
    model = Transformer(config, source_vocab_size=len(pinyin_vocab), target_vocab_size=len(hanzi_vocab))
    for parameter in model.parameters():  # no zero projections: a layer that is already x -> x proves nothing
        torch.nn.init.normal_(parameter, std=0.2)
    return model, pinyin_vocab, hanzi_vocab


def test_the_residual_outputs_name_every_projection_into_the_residual_stream():
    """Each name is a parameter of every layer: were one renamed in transformer.py, grown layers would
    not start as identities."""
    model = Transformer(SMALL, source_vocab_size=8, target_vocab_size=8)
    names = [name for name, _ in model.named_parameters()]
    per_layer = {"encoder_layers.0.": 4, "decoder_layers.0.": 6, "decoder_layers.1.": 6}  # attention(s), feed-forward
    for prefix, count in per_layer.items():
        assert sum(name.startswith(prefix) and name.endswith(RESIDUAL_OUTPUTS) for name in names) == count, prefix


@pytest.mark.parametrize("tie_output", [True, False])
def test_a_grown_model_keeps_the_known_rows_and_converts_as_the_trained_one_did(tie_output):
    config = dataclasses.replace(SMALL, tie_output=tie_output)
    trained, pinyin_vocab, hanzi_vocab = _trained(config)
    deeper = dataclasses.replace(config, n_encoder_layers=3, n_decoder_layers=3)
    model, grown_pinyin, grown_hanzi = grow(trained, pinyin_vocab, hanzi_vocab, deeper,
                                            pinyin_tokens=["hao", "zh*", "men"], hanzi_tokens=list("们好中"))
    assert grown_pinyin.tokens == pinyin_vocab.tokens + ["zh*", "men"]  # ids never move
    assert grown_hanzi.tokens == hanzi_vocab.tokens + list("们中")
    assert (len(model.encoder_layers), len(model.decoder_layers)) == (3, 3)
    known = len(hanzi_vocab)
    assert torch.equal(model.output.weight[:known], trained.output.weight)
    assert model.output.weight[known:].std() > 0  # new rows start as a fresh model's, not as zeros
    assert (model.output.weight.data_ptr() == model.target_embedding.tokens.weight.data_ptr()) == tie_output
    source, target = torch.tensor([[4, 5, 4], [5, 4, 0]]), torch.tensor([[4, 5, 5], [5, 4, 0]])
    model.eval(), trained.eval()
    with torch.no_grad():
        assert torch.allclose(model(source, target)[..., :known], trained(source, target), atol=1e-5)


def test_a_shallower_model_keeps_the_first_layers():
    """A decoder of 1 layer from one of 2 (and an encoder grown on top at the same time): the first decoder
    layer's weights, the second's left out; the encoder's new layer starts as the identity."""
    trained, pinyin_vocab, hanzi_vocab = _trained()
    shallower = dataclasses.replace(SMALL, n_encoder_layers=2, n_decoder_layers=1)
    assert check_growable(shallower, dataclasses.asdict(SMALL), "x.pt") == \
        "encoder 1 -> 2 layers, decoder 2 -> 1 layers"
    model, *_ = grow(trained, pinyin_vocab, hanzi_vocab, shallower, pinyin_tokens=[], hanzi_tokens=[])
    assert len(model.decoder_layers) == 1
    for name, weight in model.decoder_layers[0].state_dict().items():
        assert torch.equal(weight, trained.decoder_layers[0].state_dict()[name]), name
    assert torch.equal(model.decoder_norm.weight, trained.decoder_norm.weight)
    source = torch.tensor([[4, 5, 4]])
    model.eval(), trained.eval()
    with torch.no_grad():  # the same memory: the new encoder layer adds nothing yet
        assert torch.allclose(model.encode(source)[0], trained.encode(source)[0], atol=1e-6)


@pytest.mark.parametrize("changes, error", [
    ({"n_encoder_layers": 2, "norm": "post"}, r" with model\.n_encoder_layers=2 \(it has 1\): only a pre-norm model"),
    ({"n_decoder_layers": 0}, r": model\.n_decoder_layers is 0 now but 2 in the checkpoint"),
    ({"n_decoder_layers": 3, "d_ff": 128}, r": model\.d_ff is 128 now but 64 in the checkpoint"),
])
def test_only_a_pre_norm_model_grows_and_other_settings_agree(changes, error):
    saved = dataclasses.asdict(SMALL)
    assert check_growable(dataclasses.replace(SMALL, n_encoder_layers=3), saved, "x.pt") == "encoder 1 -> 3 layers"
    assert check_growable(dataclasses.replace(SMALL, n_decoder_layers=1, norm="post"), {**saved, "norm": "post"},
                          "x.pt") == "decoder 2 -> 1 layers"  # dropping layers needs no identities
    assert check_growable(SMALL, saved, "x.pt") == ""
    with pytest.raises(CheckpointError, match="^cannot start from x.pt" + error):
        check_growable(dataclasses.replace(SMALL, **changes), saved, "x.pt")

import math

import pytest
import torch

from pinyin_hanzi.training.loss import loss_fn, model_loss


def test_loss_is_normalised_per_target_token():
    logits = torch.zeros(2, 3, 5)
    target = torch.tensor([[4, 4, 4], [4, 0, 0]])  # 4 real tokens, 2 padding
    loss, n_tokens = loss_fn(logits, target, 0.0)
    assert n_tokens == 4 and float(loss) == pytest.approx(math.log(5))


def test_candidate_loss_equals_the_masked_softmax_over_the_vocabulary(monkeypatch):
    # model_loss computes the logits of each position's candidates only (the reference first); written out
    # over all v logits with a mask it is:
    from types import SimpleNamespace

    from pinyin_hanzi.config import ModelConfig
    from pinyin_hanzi.models import candidate_logits
    from pinyin_hanzi.models.transformer import Transformer

    generator = torch.Generator().manual_seed(0)
    pinyin, v, c = 12, 30, 5
    torch.manual_seed(0)
    model = Transformer(ModelConfig(d_model=16, n_heads=2, n_encoder_layers=1, n_decoder_layers=1, d_ff=32,
                                    dropout=0.0, max_positions=16), source_vocab_size=pinyin, target_vocab_size=v)
    monkeypatch.setattr(candidate_logits, "POSITIONS_PER_CHUNK", 4)  # several chunks of positions
    lengths = torch.randint(1, c + 1, (pinyin,), generator=generator)
    real = torch.arange(c)[None, :] < lengths[:, None]  # (pinyin, c), lists first
    ids = torch.stack([torch.randperm(v - 4, generator=generator)[:c] + 4 for _ in range(pinyin)]).where(real, 0)
    source = torch.randint(4, pinyin, (3, 6), generator=generator)
    target = ids[source, 0].clone()  # the reference among the candidates, mostly
    target[1, 2], target[2, 4] = 29, 28  # and sometimes not
    source[0, 4:], target[0, 4:] = 0, 0  # padding
    batch = SimpleNamespace(source=source, target=target)
    loss, n_tokens = model_loss(model, batch, 0.1, (ids, real))
    allowed = torch.zeros(3, 6, v, dtype=torch.bool).scatter(-1, ids[source], real[source])
    allowed = allowed.scatter(-1, target[..., None], True)
    log_probs = model(source, target).masked_fill(~allowed, float("-inf")).log_softmax(-1)
    nll = -log_probs.gather(-1, target[..., None]).squeeze(-1)
    smooth = -log_probs.masked_fill(~allowed, 0.0).sum(-1) / allowed.sum(-1)
    expected = (0.9 * nll + 0.1 * smooth).masked_fill(target == 0, 0.0).sum() / 16
    assert n_tokens == 16 and torch.allclose(loss, expected, atol=1e-6)
    gradients = torch.autograd.grad(loss, list(model.parameters()))
    expected_gradients = torch.autograd.grad(expected, list(model.parameters()))
    for gradient, expected_gradient in zip(gradients, expected_gradients):
        assert torch.allclose(gradient, expected_gradient, atol=1e-6)

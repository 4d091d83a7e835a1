import pytest
import torch

from pinyin_hanzi.data.vocab import PAD_ID
from pinyin_hanzi.models import candidate_logits as module
from pinyin_hanzi.models.candidate_logits import candidate_logits

V, D = 40, 32  # vocabulary, model width


def _weight(seed=0, requires_grad=False) -> torch.Tensor:
    return torch.randn(V, D, generator=torch.Generator().manual_seed(seed)).requires_grad_(requires_grad)


def test_gathered_and_full_product_candidate_logits_are_equal_with_their_gradients(monkeypatch):
    # Training chunks: lists of every length up to the whole vocabulary (a prefix token's is long), <pad> after
    # each; the chunks either gather their rows or take the full product and pick columns (DENSE_ROWS).
    monkeypatch.setattr(module, "POSITIONS_PER_CHUNK", 16)
    weight = _weight(requires_grad=True)
    generator = torch.Generator().manual_seed(4)
    hidden = torch.randn(4, 20, D, generator=generator, requires_grad=True)  # (b, t, d): 80 positions, 5 chunks
    lengths = torch.randint(1, V - 4, (4, 20), generator=generator)
    candidates = torch.randint(4, V, (4, 20, V - 4), generator=generator)
    candidates = candidates.masked_fill(torch.arange(V - 4) >= lengths[..., None], PAD_ID)
    real = candidates != PAD_ID
    results = {}
    for ratio in (float("inf"), 8, 0):  # always gather; chunks with lists over 20 only; always the full product
        monkeypatch.setattr(module, "DENSE_ROWS", ratio)
        logits = candidate_logits(hidden, weight, candidates)
        (logits[real] ** 2).sum().backward()
        results[ratio] = logits[real].detach(), hidden.grad.clone(), weight.grad.clone()
        hidden.grad, weight.grad = None, None
    expected = (hidden @ weight.T).gather(-1, candidates)[real].detach()
    for logits, hidden_grad, weight_grad in results.values():
        assert torch.allclose(logits, expected, atol=1e-5)
        assert torch.allclose(hidden_grad, results[float("inf")][1], atol=1e-4)
        assert torch.allclose(weight_grad, results[float("inf")][2], atol=1e-4)


def test_few_positions_with_long_lists_take_the_full_product(monkeypatch):
    monkeypatch.setattr(module, "DENSE_ROWS", 1)
    weight, hidden = _weight(), torch.randn(1, 2, D)
    short = torch.tensor([[[5, 6], [7, PAD_ID]]])  # 4 rows gathered: fewer than the matrix's 40
    long = torch.arange(4, V).repeat(1, 2, 1)  # (1, 2, 36): 72 rows, more than the matrix has
    full = hidden @ weight.T  # (1, 2, v)
    assert torch.allclose(candidate_logits(hidden, weight, short)[0, 0], full[0, 0, [5, 6]], atol=1e-5)
    assert torch.allclose(candidate_logits(hidden, weight, long), full[..., 4:], atol=1e-5)


@pytest.mark.parametrize("dense_rows", [float("inf"), 0])
@pytest.mark.parametrize("inputs_per_chunk", [32, 1])
def test_candidate_lists_shared_by_consecutive_rows_give_each_row_its_lists_logits(monkeypatch, dense_rows,
                                                                                     inputs_per_chunk):
    # A beam search passes one list per input for its beams (rows 3i..3i+2 share list i): the same logits as
    # the list repeated for every row, gathered once or by the full product, all inputs at once or one by one.
    monkeypatch.setattr(module, "DENSE_ROWS", dense_rows)
    monkeypatch.setattr(module, "INPUTS_PER_CHUNK", inputs_per_chunk)
    weight = _weight()
    hidden = torch.randn(2 * 3, 1, D, generator=torch.Generator().manual_seed(5))  # (g n, t, d), g = 3
    shared = torch.tensor([[[5, 9, 7, PAD_ID]], [[11, 4, 30, 6]]])  # (n, t, c)
    logits = candidate_logits(hidden, weight, shared)
    assert logits.shape == (6, 1, 4)
    assert torch.allclose(logits, candidate_logits(hidden, weight, shared.repeat_interleave(3, dim=0)), atol=1e-5)
    assert torch.allclose(logits[4, 0], (hidden[4, 0] @ weight.T)[[11, 4, 30, 6]], atol=1e-5)
    alone = candidate_logits(hidden[:3], weight, shared[:1])  # one input (a single sentence's step)
    assert torch.allclose(alone, logits[:3], atol=1e-5)
    with pytest.raises(ValueError, match="cannot be shared"):
        candidate_logits(hidden[:5], weight, shared)


def test_shared_lists_take_the_full_product_only_when_longer_than_their_rows_make_it_pay(monkeypatch):
    # The full product's cost grows with the rows sharing a list, gathering's does not: lists of 20 of a
    # 40-character vocabulary take it for one row per list, not for three (DENSE_ROWS / POSITIONS_PER_CHUNK
    # = 1/4 here: lists longer than 10 characters per row sharing them).
    monkeypatch.setattr(module, "POSITIONS_PER_CHUNK", 16)
    products = []
    real_linear = module.F.linear
    weight, lists = _weight(), torch.arange(4, 24).view(1, 1, 20)
    monkeypatch.setattr(module.F, "linear", lambda *a: (products.append(a[0].shape) if a[1] is weight else None)
                        or real_linear(*a))  # the full products (a single list's gathered rows are a product too)
    for rows in (1, 3):
        hidden = torch.randn(rows, 1, D, generator=torch.Generator().manual_seed(rows))
        logits = module.shared_candidate_logits(hidden, weight, lists)
        assert torch.allclose(logits, (hidden @ weight.T)[..., 4:24], atol=1e-5)
    assert products == [(1, 1, D)]

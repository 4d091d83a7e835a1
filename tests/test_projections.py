"""models/projections.py: a linear layer's weights in each form (int8, oneDNN's blocked layout) give the plain
product, and a form this build of PyTorch would not serve is left out."""

import pytest
import torch
import torch.nn.functional as F

from pinyin_hanzi.models import projections


def test_int8_weights_round_each_row_to_its_own_scale_and_are_left_out_where_the_kernel_would_not_serve(
        monkeypatch):
    weight, bias = torch.randn(48, 64, generator=torch.Generator().manual_seed(1)), torch.randn(48)
    weight[3] *= 100  # a row of large weights does not coarsen the others: one scale per output row
    int8 = projections._int8_weights(weight, bias)
    if int8 is None:
        pytest.skip("this PyTorch build has no int8 weight kernel")
    quantized, scales, low_bias = int8
    assert quantized.dtype == torch.int8 and int(quantized.abs().amax(dim=1).min()) == 127
    assert torch.all((quantized.float() * scales.float()[:, None] - weight).abs() <= scales.float()[:, None])
    assert torch.equal(low_bias, bias.bfloat16())
    projection = projections.Projection.of_weights(weight, bias, "int8")
    for rows in (1, 5, 6):
        x = torch.randn(rows, 1, 64)
        assert torch.allclose(projection(x), F.linear(x, weight, bias), atol=0.05 * float(weight.abs().amax()))
    # an input that starts off the kernel's alignment (a view at an offset) is copied first, not read there
    # (the kernel would crash the process)
    x = torch.randn(5 * 64 + 3).bfloat16()[3:].view(5, 1, 64)
    assert x.data_ptr() % 32
    assert torch.equal(projection(x), projection(x.clone()))
    # an ``in`` the kernel would read past (it crashes rather than refuse), a kernel whose product differs, or
    # none: bf16 weights
    assert projections._int8_weights(weight[:, :40], None) is None
    original = projections._INT8_MATMUL
    monkeypatch.setattr(projections, "_INT8_MATMUL", lambda x, weight, scales: original(x, weight, scales) + 1)
    assert projections._int8_weights(weight, bias) is None
    monkeypatch.setattr(projections, "_INT8_MATMUL", None)
    assert projections._int8_weights(weight, bias) is None
    assert projections.Projection.of_weights(weight, bias, "int8").int8 is None


def test_onednn_blocked_weights_give_the_plain_products_and_are_left_out_where_they_would_not(monkeypatch):
    weight, bias = torch.randn(48, 32, generator=torch.Generator().manual_seed(1)), torch.randn(48)
    packed = projections._prepacked(weight, bias)
    if packed is None:
        pytest.skip("this PyTorch build has no oneDNN linear kernel")
    projection = projections.Projection(weight, bias, packed=packed)
    for rows in (1, 2, 5, 300):
        x = torch.randn(rows, 1, 32)
        assert torch.allclose(projection(x), F.linear(x, weight, bias), atol=1e-5)
    low = weight.bfloat16(), bias.bfloat16()
    # oneDNN refuses bf16 weights on a CPU without AVX-512 (or AVX-NE-CONVERT): the plain bf16 products there
    low_packed = projections._prepacked(*low)
    assert low_packed is not None or not torch.cpu._is_avx512_supported()
    projection = projections.Projection(weight, bias, low, 2, packed, low_packed)
    assert (projection.low_packed is None) == (low_packed is None)
    x = torch.randn(5, 1, 32)
    assert torch.allclose(projection(x), F.linear(x, weight, bias), atol=0.1, rtol=0.05)
    assert projection(x, keep_bf16=True).dtype == torch.bfloat16
    # a kernel whose product differs from F.linear's, or no oneDNN: the plain weights
    original = projections._packed_linear
    monkeypatch.setattr(projections, "_packed_linear", lambda x, packed, bias: original(x, packed, bias) + 1)
    assert projections._prepacked(weight, bias) is None
    monkeypatch.setattr(projections, "_packed_linear", original)
    monkeypatch.setattr(torch.backends.mkldnn, "is_available", lambda: False)
    assert projections._prepacked(weight, bias) is None

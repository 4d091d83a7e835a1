"""A linear layer's weights for conversion's hot loop (models/inference.py), on the kernel its size favours.

A decoder step multiplies a few rows (one per hypothesis) by each weight, a batch's first steps a thousand;
no one kernel is fastest at every size. :class:`Projection` holds a layer's weights in the forms that serve
(fp32; bf16 copies; oneDNN's blocked layout of either; weight-only int8) and picks one per call from the
number of rows, by the measured thresholds below. Every form gives F.linear's product up to rounding: a form
this build of PyTorch lacks, or whose product of a probe differs, is left out (None), and the plainer one
serves instead.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

# Which kernel multiplies x (rows, in) by a weight (out, in) fastest, measured on the development CPU (AMD EPYC,
# AVX512-BF16), one thread. F.linear (MKL) costs about rows x a one-row product: 256 x 256 at 1 / 5 / 11 rows
# 4.9 / 14.1 / 22.3 us, 1024 x 256 15 / 56 / 88 us. oneDNN's blocked weights cost ~11 us a call whatever the
# size (an 8 x 8 product too), then little per row: 256 x 256 13.9 / 17.5 us at 5 / 11 rows, 1024 x 256 25 /
# 39 us, and in bf16 (the casts included) less again from two rows: 13.3 / 15.7, 17.5 / 25.7 us. So products
# from PACKED_MIN_MACS multiply-adds (5 rows of 256 x 256, 2 of 768 x 256) take the blocked weights, in bf16
# where bf16 is on; smaller ones (a first step's one row, a single sentence's 256 x 256 below 5 rows) F.linear
# in fp32. Without blocked weights a bf16 product (F.linear) pays for its casts from about a million
# multiply-adds (UNPACKED_BF16_MIN_MACS: at 5 rows, 256 x 1024 175 us fp32 vs 74 us bf16, 256 x 256 31 vs 48).
PACKED_MIN_MACS = 5 << 16
UNPACKED_BF16_MIN_MACS = 1 << 20
# Weight-only int8 (decode.precision "int8"): each output row's weights scaled into int8 by their largest
# magnitude, multiplied with bf16 inputs by torch._weight_int8pack_mm. That kernel reads the weights once per
# input row (768 x 256 at 1 / 5 / 10 rows: 7 / 19 / 33 us hot, one thread, against oneDNN's blocked bf16 16 /
# 17 / 20 us), but it reads half the bytes, and a search's steps find the weights gone from the caches: between
# two steps the n-gram model walks its tables and everything else runs. So products of at most INT8_MAX_ROWS
# rows take int8 weights: a single sentence's first step (one row) and beam of five, all of them. Taking only
# some of a step's products gained nothing (docs/benchmarks.md).
INT8_MAX_ROWS = 5


class Projection(NamedTuple):
    """A linear layer's weights, and optionally their bf16 copies: inputs of at least ``bf16_rows`` rows
    are then multiplied in bf16 (fp32 accumulation inside the kernel), while everything around the products
    (residual stream, LayerNorm, softmax, scores) stays fp32. ``packed`` and ``low_packed``: the same
    weights in oneDNN's blocked layout (:func:`_prepacked`), or None where this build of PyTorch has none.
    ``int8``: int8 weights, their scales and the bias in bf16 (:func:`_int8_weights`), which inputs of at most
    INT8_MAX_ROWS rows are then multiplied by (in bf16), or None."""

    weight: torch.Tensor  # (out, in)
    bias: torch.Tensor | None  # (out,)
    low: tuple[torch.Tensor, torch.Tensor | None] | None = None  # bf16 weight and bias, or None: always fp32
    bf16_rows: int = 0  # rows from which ``low`` is used: PACKED_MIN_MACS (or UNPACKED_...) / (out x in), >= 2
    packed: torch.Tensor | None = None
    low_packed: torch.Tensor | None = None
    packed_rows: int = 2  # rows from which ``packed`` is used (fp32): PACKED_MIN_MACS / (out x in), >= 2
    int8: tuple[torch.Tensor, torch.Tensor, torch.Tensor | None] | None = None  # :func:`_int8_weights`

    def __call__(self, x: torch.Tensor, keep_bf16: bool = False) -> torch.Tensor:
        """x @ weight.T + bias, in x's dtype; ``keep_bf16``: a bf16 product's output stays bf16 (for a
        next product that would cast it back, or a residual addition that promotes it)."""
        rows = x.shape[:-1].numel()
        int8 = self.int8 is not None and rows <= INT8_MAX_ROWS
        if int8 or (self.low is not None and rows >= self.bf16_rows):
            low = x if x.dtype == torch.bfloat16 else x.to(torch.bfloat16)  # (a call costs a microsecond)
            if int8:
                product = _int8_linear(low, *self.int8)
            elif self.low_packed is not None:
                product = _packed_linear(low, self.low_packed, self.low[1])
            else:
                product = F.linear(low, *self.low)
            return product if keep_bf16 or x.dtype == torch.bfloat16 else product.to(x.dtype)
        if x.dtype != self.weight.dtype:  # a bf16 input (attention over a bf16 cache) below bf16_rows
            x = x.to(self.weight.dtype)
        if self.packed is not None and rows >= self.packed_rows:
            return _packed_linear(x, self.packed, self.bias)
        return F.linear(x, self.weight, self.bias)

    @classmethod
    def of(cls, layer: nn.Linear, precision: str) -> Projection:
        """:meth:`of_weights` of an nn.Linear's weight and bias."""
        return cls.of_weights(layer.weight, layer.bias, precision)

    @classmethod
    def of_weights(cls, weight: torch.Tensor, bias: torch.Tensor | None, precision: str) -> Projection:
        """A Projection for ``precision``: "fp32", "bf16" (bf16 copies of the weights), "int8" (bf16, and int8
        weights for products of at most INT8_MAX_ROWS rows, where this build of PyTorch has the kernel)."""
        weight, bias = weight.detach(), None if bias is None else bias.detach()
        packed, packed_rows = _prepacked(weight, bias), _rows_for(PACKED_MIN_MACS, weight)
        if precision == "fp32":
            return cls(weight, bias, packed=packed, packed_rows=packed_rows)
        low = weight.bfloat16(), None if bias is None else bias.bfloat16()
        low_packed = _prepacked(*low)
        bf16_rows = packed_rows if low_packed is not None else _rows_for(UNPACKED_BF16_MIN_MACS, weight)
        int8 = _int8_weights(weight, bias) if precision == "int8" else None
        return cls(weight, bias, low, bf16_rows, packed, low_packed, packed_rows, int8)


def _int8_weights(weight: torch.Tensor, bias: torch.Tensor | None
                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None] | None:
    """weight (out, in) as int8 (out, in) and bf16 scales (out,): each output row scaled by its largest
    magnitude / 127, rounded; and the bias in bf16. None (the weights then stay bf16) where this build of
    PyTorch lacks the kernel, ``in`` is not a multiple of INT8_IN_MULTIPLE, or the kernel's product of a probe
    is not close to F.linear's."""
    if weight.device.type != "cpu" or _INT8_MATMUL is None or weight.shape[1] % INT8_IN_MULTIPLE:
        return None
    scales = (weight.abs().amax(dim=1) / 127).clamp(min=torch.finfo(torch.float32).tiny)
    quantized = (weight / scales[:, None]).round().clamp(-127, 127).to(torch.int8)
    int8 = quantized, scales.bfloat16(), None if bias is None else bias.bfloat16()
    try:
        probe = torch.linspace(-1, 1, 3 * weight.shape[1]).view(3, -1).bfloat16()
        product = _int8_linear(probe, *int8[:2], None).float()
    except (RuntimeError, NotImplementedError):
        return None
    dequantized = quantized.float() * int8[1].float()[:, None]  # the kernel's own weights: its arithmetic checked
    reference, bound = F.linear(probe.float(), dequantized), F.linear(probe.float().abs(), dequantized.abs())
    return int8 if bool(((product - reference).abs() <= 0.01 * bound + 1e-6).all()) else None


def _rows_for(macs: int, weight: torch.Tensor) -> int:
    """The fewest rows (at least 2) whose product by ``weight`` takes ``macs`` multiply-adds."""
    return max(2, -(-macs // weight.numel()))


def _packed_linear(x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return _LINEAR_POINTWISE(x, packed, bias, "none", [], "")


def _int8_linear(x: torch.Tensor, weight: torch.Tensor, scales: torch.Tensor, bias: torch.Tensor | None
                 ) -> torch.Tensor:
    """x (..., in) bf16 times int8 weights (out, in) with their scales (out,), + bias -> (..., out) bf16."""
    flat = x.reshape(-1, x.shape[-1])
    if flat.data_ptr() % 64 or not flat.is_contiguous():  # the kernel's aligned loads: see _INT8_MATMUL
        flat = flat.clone(memory_format=torch.contiguous_format)
    product = _INT8_MATMUL(flat, weight, scales).view(*x.shape[:-1], -1)
    return product if bias is None else product.add_(bias)


# weight-only int8 products (x bf16 (rows, in), weight int8 (out, in), scales (out,)); None where this build lacks
# it. Its vectorized CPU kernel (bf16 inputs only) reads x in whole, aligned vectors without a check: torch 2.13's
# crashes the process (a segmentation fault, not an error) for in = 3, 8, 24, 33 or 100 on AVX-512, and for an
# input that starts off a 32-byte boundary (a view at an offset). So only multiples of 64 take it, and an input
# not 64-byte aligned is copied first. Windows builds (MSVC) compile that kernel out: a scalar loop remains.
_INT8_MATMUL = getattr(torch, "_weight_int8pack_mm", None)
INT8_IN_MULTIPLE = 64
# oneDNN's linear kernel, its one overload named (the op's overload resolution costs a microsecond a call);
# None where this build of PyTorch has none
_LINEAR_POINTWISE = getattr(getattr(torch.ops.mkldnn, "_linear_pointwise", None), "default", None)


def _prepacked(weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor | None:
    """The weight in oneDNN's blocked layout for its linear kernel (what torch.compile's CPU backend uses),
    or None: on a GPU, where this build of PyTorch has no oneDNN or refuses it, or where its product of a
    probe differs from F.linear's. A decoder step multiplies a few rows by each weight, where the blocked
    layout reads the weight faster: at 5 rows 1.3-2x (256 x 768 fp32 21.8 vs 41.7 us, 256 x 1024 bf16
    23.1 vs 33.2 us, one thread); for small products it is slower (PACKED_MIN_MACS); a batch's 1,280 rows
    gain 5-8%."""
    if weight.device.type != "cpu" or not torch.backends.mkldnn.is_available() or _LINEAR_POINTWISE is None:
        return None
    try:
        packed = torch.ops.mkldnn._reorder_linear_weight(weight, PACKED_ROWS_HINT)
        probe = torch.linspace(-1, 1, 3 * weight.shape[1]).view(3, -1).to(weight.dtype)
        same = torch.allclose(_packed_linear(probe, packed, bias).float(), F.linear(probe, weight, bias).float(),
                              rtol=0.02, atol=0.02 * float(weight.abs().amax()))
    except (AttributeError, RuntimeError, NotImplementedError):
        return None
    return packed if same else None


PACKED_ROWS_HINT = 5  # the rows oneDNN's layout is chosen for: a beam's five

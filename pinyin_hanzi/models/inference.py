"""Conversion's model, fast: :meth:`Transformer.encode` and :meth:`Transformer.decode` with a cache, as plain
functions over the model's weights.

Why a second spelling of the decoder step: a search decodes one position per call with one query row per
hypothesis, so a step's arithmetic is a few small matrix products, and nn.Module's machinery around them
(for the shipped model about 90 lookups of parameters and submodules through ``nn.Module.__getattr__`` and
15 module calls per step) costs as much as a third of it (docs/benchmarks.md). Here the weights are read
once per search into plain tuples, through the modules' public attributes, and a step is ``F.*`` calls over
them: the book model's operations in the book model's order, so the values are the same up to rounding
(tests/test_inference.py holds it to the book model's uncached ``decode``). Heads are split with views, not
einops, whose per-call cost counts at one row per step.

Where it differs in how, not what, it computes, for speed on CPUs: each product on the kernel its size
favours (oneDNN's blocked weights, in bf16 with ``bf16``, or plain F.linear: models/projections.py holds a
layer's weights in those forms); plain matmul attention from MATMUL_ATTENTION_ROWS rows; a beam's rows
attending to their input's one row of memory as several queries; a single input's cross-attention with its
query and output projections folded into the memory; and, with ``bf16``, a batch's attention and cache in
bf16 (LayerNorm, softmax, the residual stream and the scores fp32), with ``int8`` also a few rows' products
over int8 weights.
The encoder, run once per batch, is the book's encoder spelt the same way (:meth:`InferenceDecoder.encode`).

It runs the model as in eval mode (no dropout): it serves inference only.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from pinyin_hanzi.data.vocab import PAD_ID
from pinyin_hanzi.models.candidate_logits import shared_candidate_logits
from pinyin_hanzi.models.kv_cache import DecoderCache, KVCache
from pinyin_hanzi.models.projections import UNPACKED_BF16_MIN_MACS, Projection
from pinyin_hanzi.models.transformer import DecoderLayer, EncoderLayer, MultiHeadAttention, Transformer

Norm = tuple[tuple[int, ...], torch.Tensor, torch.Tensor, float]  # F.layer_norm's: shape, weight, bias, eps

# Cross-attention over a memory with its query and output projections folded in (_fold_memory) in searches of
# at most this many inputs: a step then costs two small products instead of two projections and an attention
# (one sentence's cross-attention 44 -> 13 us hot, one thread; its search 10.4 vs 10.7 ms). From two inputs
# on the folded products, one per input, are no faster than the projections of all rows at once (2 and 4
# inputs alike, 24: 82 vs 77 ms).
FOLDED_MAX_INPUTS = 1
# A step's attention of one query row per hypothesis: PyTorch's fused CPU kernel is the faster below about 80
# rows and slower above, 2x for self-attention at 1,280 rows (a batch's beams: 1.47 vs 0.72 ms, two threads)
# and 5x where g rows share their keys (cross-attention, 256 inputs x 5 beams: 2.4 vs 0.43 ms).
MATMUL_ATTENTION_ROWS = 64


class AttentionWeights(NamedTuple):
    """Self-attention projects one input into queries, keys and values: one stacked (3d, d) product,
    ``query_key_value``. Cross-attention projects the memory once and each step's input apart: ``query`` and
    ``key_value``. Each keeps only the projections it runs (None for the others)."""

    query: Projection | None
    key_value: Projection | None
    query_key_value: Projection | None
    out: Projection
    n_heads: int
    # cross-attention's query and output weights split by head, for folding into the memory (_fold_memory):
    # the query's weight and bias scaled by 1 / sqrt(k), (h, k, d) and (h, k, 1), and the output's, (h, k, d)
    by_head: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None

    @classmethod
    def of(cls, module: MultiHeadAttention, precision: str, stacked: bool) -> AttentionWeights:
        out = Projection.of(module.out, precision)
        if stacked:
            query_key_value = Projection.of_weights(torch.cat([module.query.weight, module.key_value.weight]).detach(),
                                                   torch.cat([module.query.bias, module.key_value.bias]).detach(),
                                                   precision)
            return cls(None, None, query_key_value, out, module.n_heads)
        h, d = module.n_heads, module.query.weight.shape[1]
        k = d // h
        by_head = ((module.query.weight.detach() * k**-0.5).view(h, k, d).contiguous(),
                   (module.query.bias.detach() * k**-0.5).view(h, k, 1).contiguous(),
                   module.out.weight.detach().view(-1, h, k).permute(1, 2, 0).contiguous())
        return cls(Projection.of(module.query, precision), Projection.of(module.key_value, precision), None, out, h,
                   by_head)


class DecoderLayerWeights(NamedTuple):
    self_attention: AttentionWeights
    cross_attention: AttentionWeights
    expand: Projection
    contract: Projection
    norms: tuple[Norm, ...]  # around self-attention, cross-attention, feed-forward

    @classmethod
    def of(cls, layer: DecoderLayer, precision: str) -> DecoderLayerWeights:
        return cls(AttentionWeights.of(layer.self_attention, precision, stacked=True),
                   AttentionWeights.of(layer.cross_attention, precision, stacked=False),
                   Projection.of(layer.feed_forward.expand, precision),
                   Projection.of(layer.feed_forward.contract, precision),
                   tuple(_norm(sublayer.norm) for sublayer in layer.sublayers))


class EncoderLayerWeights(NamedTuple):
    self_attention: AttentionWeights
    expand: Projection
    contract: Projection
    norms: tuple[Norm, ...]  # around self-attention, feed-forward

    @classmethod
    def of(cls, layer: EncoderLayer, precision: str) -> EncoderLayerWeights:
        return cls(AttentionWeights.of(layer.self_attention, precision, stacked=True),
                   Projection.of(layer.feed_forward.expand, precision),
                   Projection.of(layer.feed_forward.contract, precision),
                   tuple(_norm(sublayer.norm) for sublayer in layer.sublayers))


class InferenceDecoder:
    """What a search runs: ``encode``, ``new_cache`` and a cached one-position ``decode`` with the signatures
    and values of :class:`Transformer`'s. It reads the model's weights when it is built, some of them as
    copies (self-attention's query and key/value weights stacked into one product): build one per search (a
    fraction of a millisecond) while the model changes (validation during training), and again after changing
    it (``to()``, loading weights).

    ``bf16``: the encoder's and decoder's products of ``PACKED_MIN_MACS`` multiply-adds or more run in bf16
    (faster where the CPU multiplies bf16 natively), and a batch's attention. The bf16 copies of the weights
    (5 MB for the shipped model) take milliseconds to make: a converter builds its decoder once and keeps it.
    ``int8`` (with ``bf16`` only): products of at most INT8_MAX_ROWS rows multiply int8 copies of the weights
    instead, one scale per output row (a single sentence's steps: see INT8_MAX_ROWS in models/projections.py)."""

    def __init__(self, model: Transformer, bf16: bool = False, int8: bool = False):
        self.model, self.bf16, self.int8 = model, bf16, int8 and bf16
        precision = "int8" if self.int8 else "bf16" if bf16 else "fp32"
        source = model.source_embedding
        self.source_tokens, self.source_positions = source.tokens.weight, source.positions
        self.pre_norm = model.config.norm == "pre"
        self.encoder_layers = [EncoderLayerWeights.of(layer, precision) for layer in model.encoder_layers]
        self.encoder_norm = _norm(model.encoder_norm) if self.pre_norm else None  # post-norm: nn.Identity
        embedding = model.target_embedding
        self.tokens, self.positions, self.scale = embedding.tokens.weight, embedding.positions, embedding.scale
        self.layers = [DecoderLayerWeights.of(layer, precision) for layer in model.decoder_layers]
        self.final_norm = _norm(model.decoder_norm) if self.pre_norm else None  # post-norm: nn.Identity
        self.output = model.output.weight  # (v, d)
        self.output_low = self.output.detach().bfloat16() if bf16 else None  # candidate logits of batches

    def encode(self, source: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`Transformer.encode`: source (b, s) -> memory (b, s, d), fp32, and the padding mask (b, 1, 1, s).
        Attention applies no mask where nothing is padded (a single sentence). ValueError past max_positions."""
        x = _embed(source, self.source_tokens, self.source_positions, self.scale, 0)  # (b, s, d)
        padding_mask = (source != PAD_ID)[:, None, None, :]
        mask = None if bool(padding_mask.all()) else padding_mask
        for layer in self.encoder_layers:
            around_attention, around_feed_forward = layer.norms
            x = self._sublayer(x, around_attention, _encoder_self_attention, layer.self_attention, mask)
            x = self._sublayer(x, around_feed_forward, _feed_forward, layer.expand, layer.contract)
        return (x if self.encoder_norm is None else F.layer_norm(x, *self.encoder_norm)), padding_mask

    def new_cache(self) -> DecoderCache:
        """A cache whose memory keys/values stay one row per input (see :meth:`decode`)."""
        return DecoderCache(len(self.layers), shared_memory=True)

    def decode(self, target_input: torch.Tensor, memory: torch.Tensor, padding_mask: torch.Tensor | None, *,
               cache: DecoderCache, candidates: torch.Tensor | None = None) -> torch.Tensor:
        """:meth:`Transformer.decode` of one position with a cache: target_input (b, 1) at ``cache.length``,
        memory (b, s, d), padding_mask (b, 1, 1, s) or None -> logits (b, 1, v), or (b, 1, c) of
        ``candidates`` (b, 1, c), or of (b / g, 1, c) shared by g consecutive rows. The memory is projected at
        the first step and kept one row per input: where the cache holds g rows per input after it (a beam
        search's reorder), each input's g rows attend to its memory together, as g queries, without copies of
        it (the memory passed after the first step is not read). ValueError past max_positions, or for several
        positions."""
        if target_input.shape[1] != 1:
            raise ValueError(f"a cached decoder step takes one position, not {target_input.shape[1]}")
        x = _embed(target_input, self.tokens, self.positions, self.scale, cache.length)  # (b, 1, d)
        for layer, layer_cache in zip(self.layers, cache.layers):
            x = self._layer_step(x, layer, memory, padding_mask, layer_cache)
        cache.length += 1
        hidden = x if self.final_norm is None else F.layer_norm(x, *self.final_norm)  # (b, 1, d)
        if candidates is None:
            return F.linear(hidden, self.output)  # (b, 1, v)
        if self.output_low is not None and hidden.numel() * candidates.shape[-1] >= UNPACKED_BF16_MIN_MACS:  # a batch's
            return shared_candidate_logits(hidden.to(torch.bfloat16), self.output_low, candidates).float()
        return shared_candidate_logits(hidden, self.output, candidates)  # (b, 1, c)

    def _layer_step(self, x: torch.Tensor, layer: DecoderLayerWeights, memory: torch.Tensor,
                    cross_mask: torch.Tensor | None, cache: KVCache) -> torch.Tensor:
        """:class:`DecoderLayer` with a cache: x (b, 1, d) -> (b, 1, d)."""
        around_self, around_cross, around_feed_forward = layer.norms
        x = self._sublayer(x, around_self, _self_attention, layer.self_attention, cache)
        x = self._sublayer(x, around_cross, _cross_attention, layer.cross_attention, memory, cross_mask, cache)
        return self._sublayer(x, around_feed_forward, _feed_forward, layer.expand, layer.contract)

    def _sublayer(self, x: torch.Tensor, norm: Norm, function: Callable[..., torch.Tensor], *args) -> torch.Tensor:
        """:class:`Sublayer`: pre-norm x + f(LN(x)), or post-norm LN(x + f(x)). f's output may be bf16 (a bf16
        product's): adding it to the fp32 residual stream promotes it, as a cast would, without the copy."""
        if self.pre_norm:
            return x + function(F.layer_norm(x, *norm), *args)
        return F.layer_norm(x + function(x, *args), *norm)


def _embed(ids: torch.Tensor, tokens: torch.Tensor, positions: torch.Tensor, scale: float,
           start: int) -> torch.Tensor:
    """:class:`~pinyin_hanzi.models.transformer.Embedding` (no dropout): ids (b, t) from position ``start`` ->
    tokens x scale + positions, (b, t, d), in one addition. ValueError past max_positions."""
    end = start + ids.shape[1]
    if end > positions.shape[0]:
        raise ValueError(f"sequence of {end} positions exceeds max_positions={positions.shape[0]}")
    return torch.add(positions[start:end], F.embedding(ids, tokens), alpha=scale)




def _norm(layer: nn.LayerNorm) -> Norm:
    return tuple(layer.normalized_shape), layer.weight, layer.bias, layer.eps


def _split_heads(x: torch.Tensor, n_heads: int) -> torch.Tensor:
    """(b, t, h*k) -> (b, h, t, k): rearrange "b t (h k) -> b h t k", as a view."""
    return x.view(x.shape[0], x.shape[1], n_heads, -1).transpose(1, 2)


def _keys_values(source: torch.Tensor, attention: AttentionWeights,
                 keep_bf16: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """source (b, s, d) -> keys and values, each (b, h, s, k); bf16 if ``keep_bf16`` and the product is."""
    keys, values = attention.key_value(source, keep_bf16).chunk(2, dim=-1)  # (b, s, 2d) -> two (b, s, d)
    return _split_heads(keys, attention.n_heads), _split_heads(values, attention.n_heads)


def _attend(query: torch.Tensor, attention: AttentionWeights, keys: torch.Tensor, values: torch.Tensor,
            mask: torch.Tensor | None) -> torch.Tensor:
    """query (g n, 1, d) over keys/values (n, h, s, k), each shared by g consecutive query rows (g = 1 for
    self-attention; a beam's hypotheses of one input in cross-attention) -> (g n, 1, d)."""
    rows, n = query.shape[0], keys.shape[0]
    query = query.view(n, rows // n, attention.n_heads, -1).transpose(1, 2)  # (n, h, g, k): g queries each
    if rows < MATMUL_ATTENTION_ROWS:
        attended = F.scaled_dot_product_attention(query, keys, values, attn_mask=mask)  # (n, h, g, k)
    else:  # the book's attention, spelt out: softmax(q k^T / sqrt(k)) v
        scores = query @ keys.transpose(-2, -1) * query.shape[-1] ** -0.5  # (n, h, g, s)
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        attended = scores.float().softmax(dim=-1).to(values.dtype) @ values  # (n, h, g, k)
    return attention.out(attended.transpose(1, 2).reshape(rows, 1, -1), keep_bf16=True)  # (n, g, h k) -> (g n, 1, d)


def _encoder_self_attention(x: torch.Tensor, attention: AttentionWeights, mask: torch.Tensor | None) -> torch.Tensor:
    """Every source position attends to every real one: x (b, s, d) -> (b, s, d); in bf16 where the stacked
    product is."""
    query, keys, values = (_split_heads(part, attention.n_heads)
                           for part in attention.query_key_value(x, keep_bf16=True).chunk(3, dim=-1))
    attended = F.scaled_dot_product_attention(query, keys, values, attn_mask=mask)  # (b, h, s, k)
    return attention.out(attended.transpose(1, 2).reshape(x.shape[0], x.shape[1], -1), keep_bf16=True)


def _self_attention(x: torch.Tensor, attention: AttentionWeights, cache: KVCache) -> torch.Tensor:
    """The newest position attends to itself and the cached earlier ones (all of which it may see)."""
    low = x.shape[0] >= MATMUL_ATTENTION_ROWS if cache.keys is None else cache.keys.dtype == torch.bfloat16
    query, keys, values = attention.query_key_value(x, keep_bf16=low).chunk(3, dim=-1)  # three (b, 1, d)
    keys, values = cache.append(_split_heads(keys, attention.n_heads), _split_heads(values, attention.n_heads))
    return _attend(query, attention, keys, values, None)  # keys, values: (b, h, t, k)


def _cross_attention(x: torch.Tensor, attention: AttentionWeights, memory: torch.Tensor,
                     cross_mask: torch.Tensor | None, cache: KVCache) -> torch.Tensor:
    """The newest position attends to the memory, projected into keys/values at the first step only (kept in
    bf16 where a batch's first step is wide enough for matmul attention and the product is bf16, as
    self-attention's cache); for a single input, with the query and output projections folded into them."""
    if cache.memory_keys is None:
        low = x.shape[0] >= MATMUL_ATTENTION_ROWS
        cache.memory_keys, cache.memory_values = _keys_values(memory, attention, low)  # (b, h, s, k) each
        if not low and attention.by_head is not None and memory.shape[0] <= FOLDED_MAX_INPUTS:
            cache.folded = _fold_memory(attention, cache.memory_keys, cache.memory_values)
    if cache.folded is not None:
        return _folded_attention(x, attention, cache.folded, cross_mask)
    low = cache.memory_keys.dtype == torch.bfloat16
    query = attention.query(x, keep_bf16=low)
    if query.dtype != cache.memory_keys.dtype:
        query = query.to(cache.memory_keys.dtype)
    return _attend(query, attention, cache.memory_keys, cache.memory_values, cross_mask)


def _fold_memory(attention: AttentionWeights, keys: torch.Tensor, values: torch.Tensor
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A memory's keys and values (n, h, s, k) with cross-attention's query and output projections folded in.
    Head i's scores are (x Wq_i^T + bq_i) K_i^T / sqrt(k) = x (K_i Wq_i / sqrt(k))^T + K_i bq_i / sqrt(k), and
    its share of the output softmax(scores_i) V_i Wo_i^T (Wo_i: the output weight's columns of head i), so
    with queries = K_i Wq_i / sqrt(k) stacked over heads (n, h s, d), biases (n, 1, h s) and outputs =
    V_i Wo_i^T stacked (n, h s, d), a step is x queries^T + biases, a softmax per head, and the weights times
    outputs (+ the output bias): the same attention, in fp32, without a step's two d x d projections."""
    n, h, s, _ = keys.shape
    query_weight, query_bias, out_weight = attention.by_head
    queries = torch.matmul(keys, query_weight).view(n, h * s, -1)  # (n, h, s, k) @ (h, k, d) -> (n, h s, d)
    biases = torch.matmul(keys, query_bias).view(n, 1, h * s)
    outputs = torch.matmul(values, out_weight).view(n, h * s, -1)  # (n, h s, d)
    return queries, biases, outputs


def _folded_attention(x: torch.Tensor, attention: AttentionWeights,
                      folded: tuple[torch.Tensor, torch.Tensor, torch.Tensor], mask: torch.Tensor | None
                      ) -> torch.Tensor:
    """Cross-attention of x (g n, 1, d) over a folded memory (:func:`_fold_memory`) of n inputs, each shared by g
    consecutive rows; mask (n, 1, 1, s) or None -> (g n, 1, d)."""
    queries, biases, outputs = folded
    rows, n = x.shape[0], queries.shape[0]
    scores = torch.baddbmm(biases, x.view(n, rows // n, -1), queries.transpose(1, 2))  # (n, g, h s)
    scores = scores.view(n, rows // n, attention.n_heads, -1)  # (n, g, h, s)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = scores.softmax(dim=-1).view(n, rows // n, -1)  # (n, g, h s)
    bias = attention.out.bias
    attended = torch.bmm(weights, outputs) if bias is None else torch.baddbmm(bias, weights, outputs)
    return attended.view(rows, 1, -1)  # (g n, 1, d)


def _feed_forward(x: torch.Tensor, expand: Projection, contract: Projection) -> torch.Tensor:
    """(b, t, d) -> (b, t, f) -> (b, t, d). A batch's (b, f) stays bf16 between its products (they have one
    size, so both or neither are bf16): the same values as casting it to fp32 and back, without the copies."""
    return contract(F.relu(expand(x, keep_bf16=True)), keep_bf16=True)

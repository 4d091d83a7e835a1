"""The encoder-decoder Transformer ("Attention Is All You Need"), written out module by module as the book
draws it. Training runs this model; conversion runs it through models/inference.py (below).

Axis legend used in shape comments:
    b batch   s source length (pinyin tokens)   t target length (hanzi)   h heads   d model width
    k head width (d / h)   f feed-forward width   v vocabulary size   c candidates per position

Mask convention (one, everywhere): a boolean tensor that is True where attention is ALLOWED, broadcast
against the (b, h, query, key) score matrix, as ``F.scaled_dot_product_attention`` expects.
- padding mask  (b, 1, 1, s): source keys that are real tokens, for encoder self- and cross-attention;
- look-ahead mask: decoder position i may see targets 0..i only (``is_causal=True``, no tensor needed);
- cross-attention mask: the padding mask of the source, applied to decoder queries.
Padded target positions need no mask of their own: under the look-ahead mask a real position never sees
a later (padded) one, and the loss ignores outputs at padded positions.

Incremental decoding: ``Transformer.new_cache()`` gives a :class:`DecoderCache`; ``decode(next_ids, memory,
padding_mask, cache=cache)`` then takes the next position alone, and each decoder layer's :class:`KVCache`
keeps the self-attention keys/values of earlier positions and the cross-attention keys/values of the memory
(projected once per input). ``cache.reorder(order)`` follows a beam search's re-ranking of its hypotheses.

Speed lives beside the book, not in it: models/candidate_logits.py computes the logits of a few candidate
characters per position instead of all v (training and decoding); models/inference.py runs the encoder and
the cached decoder step as plain functions over this model's weights, where one query row per step makes
nn.Module's per-call overhead count (tests/test_inference.py holds it to this model's ``encode`` and ``decode``).
"""

from __future__ import annotations

import math
from typing import Any, Callable, Mapping

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import nn

from pinyin_hanzi.config import ModelConfig
from pinyin_hanzi.data.vocab import BOS_ID, PAD_ID
from pinyin_hanzi.errors import ConfigError
from pinyin_hanzi.models.candidate_logits import candidate_logits
from pinyin_hanzi.models.kv_cache import DecoderCache, KVCache
from pinyin_hanzi.runtime import memory_bytes, size_text

# The projections that write into the residual stream, as state_dict names within a layer: with them zero,
# a pre-norm layer is the identity x -> x (how a trained model grows deeper, training --init-from).
RESIDUAL_OUTPUTS = tuple(f"{projection}.{kind}"
                         for projection in ("self_attention.out", "cross_attention.out", "feed_forward.contract")
                         for kind in ("weight", "bias"))

# Checkpoints written before the feed-forward's layers had names held them in an nn.Sequential
# (Linear, ReLU, Dropout, Linear): state_dict names net.0 and net.3. Transformer.load_state_dict renames them.
_OLD_NAMES = {"feed_forward.net.0.": "feed_forward.expand.", "feed_forward.net.3.": "feed_forward.contract."}


def _renamed(name: str) -> str:
    """A state_dict name of an old checkpoint as this model names it (see _OLD_NAMES)."""
    for old, new in _OLD_NAMES.items():
        name = name.replace(old, new)
    return name


def shift_right(target: torch.Tensor) -> torch.Tensor:
    """Decoder input for teacher forcing: ``<s>`` + target[:-1]. (b, t) -> (b, t).

    The only place where the target is shifted: position i of the decoder sees characters < i and is
    trained to output character i.
    """
    bos = torch.full_like(target[:, :1], BOS_ID)
    return torch.cat([bos, target[:, :-1]], dim=1)


def sinusoidal_table(max_positions: int, d_model: int) -> torch.Tensor:
    """(max_positions, d): PE[pos, 2i] = sin(pos / 10000^(2i/d)), PE[pos, 2i+1] = cos(same)."""
    position = torch.arange(max_positions, dtype=torch.float32)[:, None]
    frequency = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(10000.0) / d_model))
    table = torch.zeros(max_positions, d_model)
    table[:, 0::2] = torch.sin(position * frequency)
    table[:, 1::2] = torch.cos(position * frequency[: d_model // 2])
    return table


def attention_weights(query: torch.Tensor, keys: torch.Tensor, mask: torch.Tensor | None,
                      causal: bool) -> torch.Tensor:
    """softmax(Q K^T / sqrt(k)) written out, as in the book: query (b, h, t, k), keys (b, h, s, k) ->
    weights (b, h, t, s), each row a distribution over the keys it may see. What the fused kernel computes
    inside and does not return; :meth:`Transformer.attention_maps` draws them."""
    scores = query @ keys.transpose(-2, -1) / math.sqrt(query.shape[-1])  # (b, h, t, s)
    if causal:  # query i sees keys up to i (shifted by s - t when t < s: the newest t of s positions)
        t, s = scores.shape[-2:]
        scores = scores.masked_fill(~torch.ones(t, s, dtype=torch.bool, device=scores.device).tril(s - t),
                                    float("-inf"))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return scores.softmax(dim=-1)


class Embedding(nn.Module):
    """Token embedding x sqrt(d) + sinusoidal positional encoding, then dropout."""

    def __init__(self, *, vocab_size: int, d_model: int, max_positions: int, dropout: float):
        super().__init__()
        self.tokens = nn.Embedding(vocab_size, d_model, padding_idx=PAD_ID)
        nn.init.normal_(self.tokens.weight, std=d_model**-0.5)  # so that x sqrt(d) has unit scale
        with torch.no_grad():
            self.tokens.weight[PAD_ID].zero_()
        self.register_buffer("positions", sinusoidal_table(max_positions, d_model), persistent=False)
        self.scale = math.sqrt(d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, ids: torch.Tensor, start: int = 0) -> torch.Tensor:
        """(b, t) ids, first position ``start`` -> (b, t, d). ValueError past max_positions."""
        end = start + ids.shape[1]
        if end > self.positions.shape[0]:
            raise ValueError(f"sequence of {end} positions exceeds max_positions={self.positions.shape[0]}")
        return self.dropout(self.tokens(ids) * self.scale + self.positions[start:end])  # (b, t, d) + (t, d)


class MultiHeadAttention(nn.Module):
    """Scaled dot-product attention over h heads. Self-attention when ``memory`` is None, otherwise
    cross-attention from ``x`` (queries) to ``memory`` (keys and values)."""

    def __init__(self, *, d_model: int, n_heads: int, dropout: float):
        super().__init__()
        self.n_heads = n_heads
        self.dropout_p = dropout  # on the attention weights, in training (inside the fused kernel)
        self.query = nn.Linear(d_model, d_model)
        self.key_value = nn.Linear(d_model, 2 * d_model)  # keys and values in one product
        self.out = nn.Linear(d_model, d_model)
        self.record = False  # when True, the weights are computed explicitly and kept in last_weights
        self.last_weights: torch.Tensor | None = None  # (b, h, t, s), for pictures

    def keys_values(self, source: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """source (b, s, d) -> keys and values, each (b, h, s, k)."""
        keys, values = rearrange(self.key_value(source), "b s (two h k) -> two b h s k", two=2, h=self.n_heads)
        return keys, values

    def forward(self, x: torch.Tensor, memory: torch.Tensor | None = None, *, mask: torch.Tensor | None = None,
                causal: bool = False, cache: KVCache | None = None) -> torch.Tensor:
        """x (b, t, d) -> (b, t, d). With a ``cache`` (incremental decoding), self-attention appends this
        step's keys/values to the earlier positions' and attends to all of them; cross-attention projects
        the memory at the first step and reuses it."""
        query = rearrange(self.query(x), "b t (h k) -> b h t k", h=self.n_heads)
        if cache is None:
            keys, values = self.keys_values(x if memory is None else memory)  # (b, h, s, k) each
        elif memory is None:
            keys, values = cache.append(*self.keys_values(x))  # earlier positions' and this one's, (b, h, t, k)
        else:
            if cache.memory_keys is None:
                cache.memory_keys, cache.memory_values = self.keys_values(memory)
            keys, values = cache.memory_keys, cache.memory_values
        # (b, h, t, k) queries attend over (b, h, s, k) keys; mask broadcasts to the (b, h, t, s) scores
        if self.record:
            self.last_weights = attention_weights(query, keys, mask, causal)  # (b, h, t, s)
            attended = self.last_weights @ values  # (b, h, t, s) @ (b, h, s, k) -> (b, h, t, k)
        else:
            attended = F.scaled_dot_product_attention(query, keys, values, attn_mask=mask, is_causal=causal,
                                                      dropout_p=self.dropout_p if self.training else 0.0)
        return self.out(rearrange(attended, "b h t k -> b t (h k)"))


class FeedForward(nn.Module):
    """Position-wise feed-forward: expand (d -> f), ReLU, dropout, contract (f -> d)."""

    def __init__(self, *, d_model: int, d_ff: int, dropout: float):
        super().__init__()
        self.expand = nn.Linear(d_model, d_ff)
        self.dropout = nn.Dropout(dropout)
        self.contract = nn.Linear(d_ff, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(b, t, d) -> (b, t, f) -> (b, t, d)."""
        return self.contract(self.dropout(F.relu(self.expand(x))))


class Sublayer(nn.Module):
    """Residual connection + LayerNorm around one sublayer: pre-norm x + f(LN(x)), or post-norm LN(x + f(x))."""

    def __init__(self, *, d_model: int, dropout: float, pre_norm: bool):
        super().__init__()
        self.norm = nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)
        self.pre_norm = pre_norm

    def forward(self, x: torch.Tensor, sublayer: Callable[..., torch.Tensor], *args, **kwargs) -> torch.Tensor:
        """x (b, t, d) -> (b, t, d); ``sublayer(y, *args, **kwargs)`` is the wrapped function, (b, t, d)."""
        if self.pre_norm:
            return x + self.dropout(sublayer(self.norm(x), *args, **kwargs))
        return self.norm(x + self.dropout(sublayer(x, *args, **kwargs)))


class EncoderLayer(nn.Module):
    """Self-attention over the source, then the feed-forward, each inside a :class:`Sublayer`."""

    def __init__(self, *, d_model: int, n_heads: int, d_ff: int, dropout: float, pre_norm: bool):
        super().__init__()
        self.self_attention = MultiHeadAttention(d_model=d_model, n_heads=n_heads, dropout=dropout)
        self.feed_forward = FeedForward(d_model=d_model, d_ff=d_ff, dropout=dropout)
        self.sublayers = nn.ModuleList(Sublayer(d_model=d_model, dropout=dropout, pre_norm=pre_norm) for _ in range(2))

    def forward(self, x: torch.Tensor, padding_mask: torch.Tensor) -> torch.Tensor:
        """x (b, s, d), padding_mask (b, 1, 1, s) -> (b, s, d)."""
        around_attention, around_feed_forward = self.sublayers
        x = around_attention(x, self.self_attention, mask=padding_mask)
        return around_feed_forward(x, self.feed_forward)


class DecoderLayer(nn.Module):
    """Look-ahead-masked self-attention, cross-attention to the memory, then the feed-forward."""

    def __init__(self, *, d_model: int, n_heads: int, d_ff: int, dropout: float, pre_norm: bool):
        super().__init__()
        self.self_attention = MultiHeadAttention(d_model=d_model, n_heads=n_heads, dropout=dropout)
        self.cross_attention = MultiHeadAttention(d_model=d_model, n_heads=n_heads, dropout=dropout)
        self.feed_forward = FeedForward(d_model=d_model, d_ff=d_ff, dropout=dropout)
        self.sublayers = nn.ModuleList(Sublayer(d_model=d_model, dropout=dropout, pre_norm=pre_norm) for _ in range(3))

    def forward(self, x: torch.Tensor, memory: torch.Tensor, cross_mask: torch.Tensor | None,
                cache: KVCache | None = None) -> torch.Tensor:
        """x (b, t, d), memory (b, s, d), cross_mask (b, 1, 1, s) or None -> (b, t, d).

        Without a cache, x is the whole shifted target and the look-ahead mask applies; with one, x is the
        newest position alone and attends to the cached earlier positions (all of which it may see)."""
        around_self, around_cross, around_feed_forward = self.sublayers
        x = around_self(x, self.self_attention, causal=cache is None, cache=cache)
        x = around_cross(x, self.cross_attention, memory, mask=cross_mask, cache=cache)
        return around_feed_forward(x, self.feed_forward)


def model_values(config: ModelConfig, *, source_vocab_size: int, target_vocab_size: int) -> int:
    """The float32 values a :class:`Transformer` of this shape holds, counted from the config alone: its
    parameters (a tied output projection once) and its two positional-encoding tables."""
    d, f = config.d_model, config.d_ff
    attention = 4 * d * d + 4 * d  # query (d x d), keys and values (d x 2d), out (d x d), with biases
    feed_forward = 2 * d * f + f + d
    norm = 2 * d
    encoder_layer = attention + feed_forward + 2 * norm
    decoder_layer = 2 * attention + feed_forward + 3 * norm
    final_norms = 2 * norm if config.norm == "pre" else 0
    embeddings = (source_vocab_size + target_vocab_size) * d
    output = 0 if config.tie_output else d * target_vocab_size
    positions = 2 * config.max_positions * d
    return (config.n_encoder_layers * encoder_layer + config.n_decoder_layers * decoder_layer + final_norms
            + embeddings + output + positions)


def check_memory(config: ModelConfig, *, source_vocab_size: int, target_vocab_size: int, copies: int = 1,
                 needed_for: str = "of parameters") -> None:
    """ConfigError (one line, naming the size) if ``copies`` float32 copies of a model of this shape (see
    :func:`model_values`; training keeps 4: weights, gradients, AdamW's two moments) would not fit in this
    machine's memory. Asked before anything is allocated: a model of a valid config may still be far larger
    than any machine (a 400-byte config can ask for terabytes), and the allocator would fail with a
    traceback, or the kernel end the process, only after minutes of work."""
    available = memory_bytes()
    needed = 4 * copies * model_values(config, source_vocab_size=source_vocab_size,
                                       target_vocab_size=target_vocab_size)
    if available is not None and needed > available:
        c = config
        raise ConfigError(f"model.d_model={c.d_model}, model.d_ff={c.d_ff}, model.n_encoder_layers="
                          f"{c.n_encoder_layers}, model.n_decoder_layers={c.n_decoder_layers} would need "
                          f"{size_text(needed)} {needed_for}; this machine has {size_text(available)}")


class Transformer(nn.Module):
    """Pinyin encoder + autoregressive hanzi decoder. ``encode`` -> ``decode`` -> logits over hanzi."""

    def __init__(self, config: ModelConfig, *, source_vocab_size: int, target_vocab_size: int):
        """ConfigError before allocating anything if the model would not fit in memory (:func:`check_memory`):
        every model, new or read from a checkpoint, is built here."""
        check_memory(config, source_vocab_size=source_vocab_size, target_vocab_size=target_vocab_size)
        super().__init__()
        self.config = config
        c, pre_norm = config, config.norm == "pre"
        layer_args = dict(d_model=c.d_model, n_heads=c.n_heads, d_ff=c.d_ff, dropout=c.dropout, pre_norm=pre_norm)
        embed_args = dict(d_model=c.d_model, max_positions=c.max_positions, dropout=c.dropout)
        self.source_embedding = Embedding(vocab_size=source_vocab_size, **embed_args)
        self.target_embedding = Embedding(vocab_size=target_vocab_size, **embed_args)
        self.encoder_layers = nn.ModuleList(EncoderLayer(**layer_args) for _ in range(c.n_encoder_layers))
        self.decoder_layers = nn.ModuleList(DecoderLayer(**layer_args) for _ in range(c.n_decoder_layers))
        # Pre-norm stacks end with a LayerNorm (post-norm layers already end with one).
        self.encoder_norm = nn.LayerNorm(c.d_model) if pre_norm else nn.Identity()
        self.decoder_norm = nn.LayerNorm(c.d_model) if pre_norm else nn.Identity()
        self.output = nn.Linear(c.d_model, target_vocab_size, bias=False)
        for name, parameter in self.named_parameters():
            if parameter.dim() == 2 and "embedding" not in name:
                nn.init.xavier_uniform_(parameter)
        if c.tie_output:
            self.output.weight = self.target_embedding.tokens.weight

    def encode(self, source: torch.Tensor, padded: bool = True) -> tuple[torch.Tensor, torch.Tensor | None]:
        """source (b, s) ids -> memory (b, s, d) and the padding mask (b, 1, 1, s), True at real tokens; None
        when the caller knows that no row is padded (``padded=False``: training's batches hold examples of one
        length), so that attention can take the fused kernels that accept no mask."""
        padding_mask = (source != PAD_ID)[:, None, None, :] if padded else None
        x = self.source_embedding(source)
        for layer in self.encoder_layers:
            x = layer(x, padding_mask)
        return self.encoder_norm(x), padding_mask

    def decode(self, target_input: torch.Tensor, memory: torch.Tensor, padding_mask: torch.Tensor | None, *,
               cache: DecoderCache | None = None, candidates: torch.Tensor | None = None) -> torch.Tensor:
        """target_input (b, t) ids (already shifted), memory (b, s, d), padding_mask (b, 1, 1, s) or None
        (nothing padded) -> logits (b, t, v).

        With ``cache`` (from :meth:`new_cache`), ``target_input`` (b, 1) is the next position alone (at
        ``cache.length``): keys/values of earlier positions and of the memory come from the cache instead of
        being recomputed, and the cache grows by one position. With ``candidates`` (b, t, c) hanzi ids, the
        logits of those ids only, (b, t, c), or candidates (b / g, t, c) shared by g consecutive rows (see
        :func:`candidate_logits`). ValueError past max_positions, or for several positions with a cache."""
        if cache is not None and target_input.shape[1] != 1:
            raise ValueError(f"a cached decoder step takes one position, not {target_input.shape[1]}")
        x = self.target_embedding(target_input, start=0 if cache is None else cache.length)
        layer_caches = [None] * len(self.decoder_layers) if cache is None else cache.layers
        for layer, layer_cache in zip(self.decoder_layers, layer_caches):
            x = layer(x, memory, padding_mask, layer_cache)
        if cache is not None:
            cache.length += 1
        hidden = self.decoder_norm(x)  # (b, t, d)
        if candidates is None:
            return self.output(hidden)  # (b, t, v)
        return candidate_logits(hidden, self.output.weight, candidates)  # (b, t, c)

    def new_cache(self) -> DecoderCache:
        """An empty cache for incremental :meth:`decode`, one per batch of inputs."""
        return DecoderCache(len(self.decoder_layers))

    def forward(self, source: torch.Tensor, target: torch.Tensor, candidates: torch.Tensor | None = None,
                padded: bool = True) -> torch.Tensor:
        """Teacher-forced logits: source (b, s), target (b, t) -> (b, t, v); position i predicts target[:, i].
        With ``candidates`` (b, t, c) hanzi ids, the logits of those only (b, t, c), as in :meth:`decode`.
        ``padded=False``: no row of ``source`` is padded (see :meth:`encode`)."""
        memory, padding_mask = self.encode(source, padded)
        return self.decode(shift_right(target), memory, padding_mask, candidates=candidates)

    def load_state_dict(self, state_dict: Mapping[str, Any], *args, **kwargs) -> Any:
        """``nn.Module.load_state_dict``, which also reads checkpoints written before the feed-forward's
        layers had names (``feed_forward.net.0`` / ``net.3``, now ``expand`` / ``contract``)."""
        if any(old in name for name in state_dict for old in _OLD_NAMES):
            state_dict = {_renamed(name): tensor for name, tensor in state_dict.items()}
        return super().load_state_dict(state_dict, *args, **kwargs)

    @torch.no_grad()
    def attention_maps(self, source: torch.Tensor, target: torch.Tensor) -> dict[str, list[torch.Tensor]]:
        """Attention weights of a teacher-forced pass, per layer: "encoder" (b, h, s, s), "decoder"
        (b, h, t, t) and "cross" (b, h, t, s); rows are queries and sum to 1."""
        kinds = {"encoder": [layer.self_attention for layer in self.encoder_layers],
                 "decoder": [layer.self_attention for layer in self.decoder_layers],
                 "cross": [layer.cross_attention for layer in self.decoder_layers]}
        modules = [module for group in kinds.values() for module in group]
        was_training = self.training
        self.eval()
        try:
            for module in modules:
                module.record = True
            self(source, target)
            return {kind: [module.last_weights for module in group] for kind, group in kinds.items()}
        finally:
            for module in modules:
                module.record, module.last_weights = False, None
            self.train(was_training)

"""The output layer restricted to each position's candidates: the logits of a syllable's few dozen characters
instead of all v. It skips most of the (d x v) product, a quarter of the model's FLOPs, in training (the
candidate loss, train.loss=candidates) and in decoding (a constrained search) alike.

Axes as in transformer.py, and: n positions (flattened), c candidates per position, g rows sharing a list.
Candidate lists hold hanzi ids, each list first and <pad> after it; the logits after a list are meaningless
(callers mask them).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from pinyin_hanzi.data.vocab import PAD_ID

# Positions whose candidate logits are computed together in training (see candidate_logits).
POSITIONS_PER_CHUNK = 256
# Candidate logits that would gather more than DENSE_ROWS x v rows of the output matrix (positions x list
# width) take the full (d x v) product and pick columns instead: gathered rows are memory-bound
# matrix-vector products (and scatter-adds in the backward pass), the product one matmul near peak. On a CPU
# (d=256, v=6,000-11,000) the two cost the same at about 4 x v rows, forward alone and with the backward
# pass; for a chunk of 256 positions that is lists longer than v / 64 (~170 characters for the shipped model:
# prefix tokens' lists, and ji's), and a prefix token's chunk would otherwise hold hundreds of MB of gathered
# rows. inf: always gather.
DENSE_ROWS = 4.0


def candidate_logits(hidden: torch.Tensor, weight: torch.Tensor, candidates: torch.Tensor) -> torch.Tensor:
    """hidden (b, t, d), output weight (v, d), candidates (b, t, c) -> the logits of those ids, (b, t, c):
    ``(hidden @ weight.T).gather(-1, candidates)``, computed without the full product where that is cheaper.

    Many positions (training) go in order of their list's length, POSITIONS_PER_CHUNK at a time, each chunk
    gathering only as many output rows as its longest list (~20 on average, up to ~100); a chunk with a long
    list (a prefix token's: all characters of an initial, up to ~1,500) takes the full product (DENSE_ROWS).

    Candidates (n, t, c) for hidden (g n, t, d) are shared by each g consecutive rows, as a beam search's
    hypotheses of one input share their syllable's list: each list's output rows are gathered once and
    multiplied with its g rows in one small matrix product. ValueError if g n rows cannot share n lists."""
    if candidates.shape[0] != hidden.shape[0]:
        return shared_candidate_logits(hidden, weight, candidates)
    if candidates.shape[:-1].numel() <= POSITIONS_PER_CHUNK:  # a few positions (decoding): all at once
        return _gathered_logits(hidden, weight, candidates)
    flat_hidden, flat_ids = hidden.flatten(0, -2), candidates.flatten(0, -2)  # (n, d), (n, c)
    lengths = (flat_ids != PAD_ID).sum(dim=-1)  # (n,)
    order = lengths.argsort()
    pieces = []
    for chunk in order.split(POSITIONS_PER_CHUNK):
        ids = flat_ids[chunk, : int(lengths[chunk].max())]  # (m, c'), c' <= c: this chunk's longest list
        logits = _gathered_logits(flat_hidden[chunk], weight, ids)  # (m, c')
        pieces.append(F.pad(logits, (0, flat_ids.shape[1] - ids.shape[1])))  # (m, c)
    return torch.cat(pieces)[order.argsort()].view(candidates.shape)  # back to position order, (b, t, c)


def shared_candidate_logits(hidden: torch.Tensor, weight: torch.Tensor, candidates: torch.Tensor) -> torch.Tensor:
    """hidden (g n, t, d), candidates (n, t, c), each list shared by g consecutive rows -> (g n, t, c)."""
    n, t, c = candidates.shape
    group = hidden.shape[0] // n
    if group * n != hidden.shape[0]:
        raise ValueError(f"{n} candidate lists cannot be shared by {hidden.shape[0]} rows")
    if candidates.numel() > DENSE_ROWS * weight.shape[0]:  # long lists: the full product (see DENSE_ROWS)
        return _gathered_logits(hidden, weight, candidates.repeat_interleave(group, dim=0))
    rows = F.embedding(candidates, weight)  # (n, t, c, d): each list's output rows, once
    grouped = hidden.view(n, group, t, -1).transpose(1, 2)  # (n, t, g, d)
    logits = grouped @ rows.transpose(-2, -1)  # (n, t, g, d) @ (n, t, d, c) -> (n, t, g, c)
    return logits.transpose(1, 2).reshape(n * group, t, c)


def _gathered_logits(hidden: torch.Tensor, weight: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """hidden (..., d), ids (..., c) -> (..., c): the logits of ``ids``, from their gathered output rows, or,
    where that would gather more than DENSE_ROWS x v rows, from the full product with their columns picked."""
    if ids.numel() > DENSE_ROWS * weight.shape[0]:
        return F.linear(hidden, weight).gather(-1, ids)  # (..., v) -> (..., c)
    rows = F.embedding(ids, weight)  # (..., c, d)
    return (rows @ hidden[..., None]).squeeze(-1)  # (..., c, d) @ (..., d, 1) -> (..., c)

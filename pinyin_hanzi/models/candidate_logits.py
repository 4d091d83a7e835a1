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
# Decoding's inputs whose candidate logits are computed together (shared_candidate_logits). A step of 256
# inputs with ~190 candidates at the widest would gather 50 MB of rows in fp32: a block the allocator maps
# afresh and the kernel faults in page by page at every step (20-30 ms on the development CPU), where 32
# inputs' rows stay in the cache (1.4-1.9 ms for all 256 in bf16).
INPUTS_PER_CHUNK = 32


def candidate_logits(hidden: torch.Tensor, weight: torch.Tensor, candidates: torch.Tensor) -> torch.Tensor:
    """hidden (b, t, d), output weight (v, d), candidates (b, t, c) -> the logits of those ids, (b, t, c):
    ``(hidden @ weight.T).gather(-1, candidates)``, computed without the full product where that is cheaper.

    Many positions (training) go in order of their list's length, POSITIONS_PER_CHUNK at a time, each chunk
    gathering only as many output rows as its longest list (~20 on average, up to ~100); a chunk with a long
    list (a prefix token's: all characters of an initial, up to ~1,500) takes the full product (DENSE_ROWS).

    Candidates (n, t, c) for hidden (g n, t, d) are shared by each g consecutive rows, as a beam search's
    hypotheses of one input share their syllable's list: each list's output rows are gathered once and
    multiplied with its g rows in one small matrix product. ValueError if g n rows cannot share n lists.

    On a GPU the full product is taken and the candidates' columns picked: there it is one matrix product
    near peak, where the chunks read their widths back from the device, a stall each. So it is in a compiled
    step (train.compile), whose graph a width read back would break and each new width recompile."""
    if candidates.shape[0] != hidden.shape[0]:  # rows sharing lists: decoding's case
        return shared_candidate_logits(hidden, weight, candidates)
    if hidden.is_cuda or torch.compiler.is_compiling():  # one product, no width read back (see above)
        return F.linear(hidden, weight).gather(-1, candidates)
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
    """hidden (g n, t, d), candidates (n, t, c), each list shared by g consecutive rows (g = 1: a list per row)
    -> (g n, t, c). Decoding's: a list is gathered once for its g rows, and it takes the full product only
    where its list is longer than g x v / 64 (DENSE_ROWS over POSITIONS_PER_CHUNK, as a training chunk's rule
    for g = 1): the product's cost grows with g, the gathering's does not. Inputs go INPUTS_PER_CHUNK at a
    time. ValueError if g n rows cannot share n lists."""
    n, t, c = candidates.shape
    group = hidden.shape[0] // n
    if group * n != hidden.shape[0]:
        raise ValueError(f"{n} candidate lists cannot be shared by {hidden.shape[0]} rows")
    dense = c * POSITIONS_PER_CHUNK > DENSE_ROWS * group * weight.shape[0]
    if n == 1 and t == 1 and not dense:  # a single sentence's step: its rows times its one list's rows
        return F.linear(hidden, F.embedding(candidates[0, 0], weight))  # (g, 1, d) x (c, d) -> (g, 1, c)
    pieces = []
    for begin in range(0, n, INPUTS_PER_CHUNK):
        ids = candidates[begin : begin + INPUTS_PER_CHUNK]  # (m, t, c)
        rows = hidden[begin * group : (begin + len(ids)) * group]  # (g m, t, d)
        if dense:
            pieces.append(F.linear(rows, weight).gather(-1, ids.repeat_interleave(group, dim=0)))
            continue
        gathered = F.embedding(ids, weight)  # (m, t, c, d): each list's output rows, once
        grouped = rows.view(len(ids), group, t, -1).transpose(1, 2)  # (m, t, g, d)
        logits = grouped @ gathered.transpose(-2, -1)  # (m, t, g, d) @ (m, t, d, c) -> (m, t, g, c)
        pieces.append(logits.transpose(1, 2).reshape(len(ids) * group, t, c))
    return torch.cat(pieces) if len(pieces) != 1 else pieces[0]


def _gathered_logits(hidden: torch.Tensor, weight: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """hidden (..., d), ids (..., c) -> (..., c): the logits of ``ids``, from their gathered output rows, or,
    where that would gather more than DENSE_ROWS x v rows, from the full product with their columns picked."""
    if ids.numel() > DENSE_ROWS * weight.shape[0]:
        return F.linear(hidden, weight).gather(-1, ids)  # (..., v) -> (..., c)
    rows = F.embedding(ids, weight)  # (..., c, d)
    return (rows @ hidden[..., None]).squeeze(-1)  # (..., c, d) @ (..., d, 1) -> (..., c)

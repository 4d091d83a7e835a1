"""The stored form of the character n-gram model (lm/char_ngram.py): what a checkpoint's ``char_lm`` holds.

Each order k >= 2 keeps its tables compactly: an n-gram's key is its context's key * v + its last id, and the
n-grams of a context are consecutive, so an order stores its sorted context keys (as differences), each
context's total count, distinct next characters and run of n-grams, and each n-gram's last id and count;
every column packed by :func:`~pinyin_hanzi.lm.stored.pack_integers` (int16 with the few values beyond it
listed apart, deflated), since counts are mostly ones and twos.

This module holds the layout both ways (:func:`pack_tables`, :func:`unpack_tables`), its sizes read without
building anything (:func:`stored_size`, :func:`stored_context_count`), and the check a possibly crafted
state passes before anything is built from it (:func:`state_problem`).
"""

from __future__ import annotations

import torch

from pinyin_hanzi.lm.stored import column_length, is_finite_number, is_int, is_vector, pack_integers, unpack_integers

TABLE_COLUMNS = ("context_keys", "totals", "distinct", "runs", "last_ids", "counts")


def pack_tables(grams: dict[int, tuple[torch.Tensor, torch.Tensor]],
                contexts: dict[int, tuple[torch.Tensor, torch.Tensor, torch.Tensor]], vocab_size: int
                ) -> dict[int, dict]:
    """Order -> its packed columns, from the model's ``grams`` (order -> sorted keys, counts) and ``contexts``
    (order -> sorted context keys, totals, distinct next characters)."""
    tables = {}
    for k, (gram_keys, counts) in grams.items():
        context_keys, totals, distinct = contexts[k]
        runs = torch.bincount(torch.searchsorted(context_keys, gram_keys // vocab_size), minlength=len(context_keys))
        context_key_steps = torch.diff(context_keys, prepend=context_keys[:0].new_zeros(1))
        tables[k] = {"context_key_steps": pack_integers(context_key_steps), "totals": pack_integers(totals),
                     "distinct": pack_integers(distinct), "runs": pack_integers(runs),
                     "last_ids": pack_integers(gram_keys % vocab_size), "counts": pack_integers(counts)}
    return tables


def unpack_tables(tables: dict[int, dict], vocab_size: int) -> tuple[dict, dict]:
    """(grams, contexts) as the model holds them, of stored ``tables`` (:func:`pack_tables`' form, checked)."""
    grams, contexts = {}, {}
    for k, table in tables.items():
        columns = table_columns(table)
        context_keys = columns["context_keys"]
        contexts[k] = (context_keys, columns["totals"].int(), columns["distinct"].int())
        gram_keys = context_keys.repeat_interleave(columns["runs"]) * vocab_size + columns["last_ids"]
        grams[k] = (gram_keys, columns["counts"].int())
    return grams, contexts


def stored_size(state: dict) -> int:
    """The number of n-grams (all orders >= 2) a stored state (checked: :func:`state_problem`) holds."""
    return sum(column_length(table["counts"]) for table in state["tables"].values())


def stored_context_count(state: dict) -> int:
    """The number of contexts (all orders >= 2) a stored state (checked: :func:`state_problem`) holds."""
    return sum(column_length(table["runs"]) for table in state["tables"].values())


def table_columns(table: dict) -> dict[str, torch.Tensor]:
    """The int64 columns (``TABLE_COLUMNS``) of one order's stored table, as :func:`pack_tables` wrote them;
    files written before the context keys were stored as differences hold them as they are.
    ValueError (what is wrong) for a table that is not such a thing."""
    if not isinstance(table, dict):
        raise ValueError("not a dict")
    columns = {}
    for name in TABLE_COLUMNS:
        if name == "context_keys" and "context_key_steps" in table:
            columns[name] = unpack_integers(table["context_key_steps"], name).cumsum(0)
        elif name in table:
            columns[name] = unpack_integers(table[name], name)
        else:
            raise ValueError(f"no {name} column")
    return columns


def state_problem(state: dict, hanzi_vocab_size: int) -> str | None:
    """What is wrong with a stored state (the model's ``state_dict`` form, or an older one) over
    ``hanzi_vocab_size`` characters, as what follows "its character n-gram model" in a one-line error
    ("cannot be read (order 7: ...)"), or None where the model may be built from it."""
    reason = _table_problem(state, hanzi_vocab_size)
    return None if reason is None else f"cannot be read ({reason})"


def _table_problem(state: dict, hanzi_vocab_size: int) -> str | None:
    """What is wrong with a stored state over ``hanzi_vocab_size`` characters, or None: the tables
    of each order must pair up (one total, distinct count and run length per context; one last id and count
    per n-gram), hold keys and ids inside the vocabulary, and keep the context keys sorted (they are searched)."""
    order, tables, v = state.get("order"), state.get("tables"), hanzi_vocab_size
    if not (is_int(order) and 1 <= order <= 4):
        return f"order {order!r}: expected an integer in 1..4"
    if state.get("vocab_size") != v or not is_int(state.get("vocab_size")):
        return f"vocab_size {state.get('vocab_size')!r}: expected the hanzi vocabulary's {v}"
    if (order + 1) * v**order >= 2**63:
        return f"order {order} over {v} characters does not fit in int64 keys"
    discount = state.get("discount")
    if not (is_finite_number(discount) and 0 < discount < 1):
        return f"discount {discount!r}: expected a number in (0, 1)"
    unigrams = state.get("unigrams")
    if not (is_vector(unigrams, "float", v) and bool(torch.isfinite(unigrams).all())):
        return f"no unigram table of {v} finite log-probabilities"
    if not (isinstance(tables, dict) and sorted(tables, key=repr) == list(range(2, order + 1))):
        return f"no tables of orders 2..{order}"
    for k, stored in tables.items():
        try:
            table = table_columns(stored)
        except ValueError as error:
            return f"order {k}'s table lacks one of {', '.join(TABLE_COLUMNS)} (1-D integer tensors): {error}"
        contexts, runs = table["context_keys"], table["runs"]
        if any(len(table[name]) != len(contexts) for name in ("totals", "distinct", "runs")):
            return f"order {k}'s context_keys, totals, distinct and runs differ in length"
        if bool((runs < 0).any()) or not len(table["last_ids"]) == len(table["counts"]) == int(runs.sum()):
            return f"order {k}'s runs do not add up to its last_ids and counts"
        if len(contexts) and (int(contexts.min()) < 0 or int(contexts.max()) >= v ** (k - 1)
                              or bool((contexts[1:] <= contexts[:-1]).any())):
            return f"order {k}'s context_keys are not sorted keys of {k - 1} characters"
        last_ids = table["last_ids"]
        if len(last_ids) and (int(last_ids.min()) < 0 or int(last_ids.max()) >= v):
            return f"order {k}'s last_ids lie outside the vocabulary"
        if any(len(table[name]) and int(table[name].min()) < 1 for name in ("totals", "distinct", "counts")):
            return f"order {k}'s totals, distinct or counts are not positive"
    return None

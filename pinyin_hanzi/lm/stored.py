"""What the language models keep in a checkpoint is made of: integer columns packed compactly
(:func:`pack_integers`, :func:`unpack_integers`) and plain values, which each model's ``state_problem``
checks with the tests below before anything is built from them (a checkpoint may be crafted)."""

from __future__ import annotations

import math
import zlib

import torch

# A packed column may list at most this share of its values apart, outside its int16 body.
_MAX_EXCEPTIONS = 0.01
_PACKED_TYPES = {"int16": torch.int16, "int32": torch.int32, "int64": torch.int64}


def pack_integers(values: torch.Tensor) -> dict:
    """``values`` (integers) packed for the checkpoint: a dict of ``zlib`` (the column's bytes, deflated: an
    n-gram table's columns are mostly small, repeated numbers, and shrink to about 40%), ``dtype``,
    ``length``, and ``at`` / ``wide``, the positions and values of the few (<= 1%) that an int16 body cannot
    hold (clipped there). A column with more of those is stored whole in int32 or int64. See :func:`unpack_integers`."""
    low, high = (int(values.min()), int(values.max())) if len(values) else (0, 0)
    outside = ((values < -2**15) | (values > 2**15 - 1)).nonzero().flatten()
    if len(outside) <= _MAX_EXCEPTIONS * len(values):
        body, dtype, at = values.clamp(-2**15, 2**15 - 1).short(), "int16", outside
    else:
        dtype = "int32" if -2**31 <= low and high <= 2**31 - 1 else "int64"
        body, at = values.to(_PACKED_TYPES[dtype]), outside[:0]
    return {"zlib": zlib.compress(body.numpy().tobytes(), 6), "dtype": dtype, "length": len(values),
            "at": at.int() if len(values) < 2**31 else at, "wide": values[at].long()}


def column_length(stored) -> int:
    """How many values a column holds, packed (:func:`pack_integers`) or a plain tensor, without unpacking it."""
    return stored["length"] if isinstance(stored, dict) else len(stored)


def _is_integer_vector(value) -> bool:
    return (isinstance(value, torch.Tensor) and value.layout == torch.strided and value.dim() == 1
            and not value.is_floating_point() and not value.is_complex() and value.dtype != torch.bool)


def unpack_integers(stored, name: str = "column") -> torch.Tensor:
    """The int64 values of a column that :func:`pack_integers` packed, or of a plain integer tensor (files written
    before columns were packed); ValueError if ``stored`` is neither."""
    if _is_integer_vector(stored):
        return stored.long()
    problem = f"{name} is not a 1-D integer tensor or a packed column"
    if not (isinstance(stored, dict) and isinstance(stored.get("zlib"), bytes) and stored.get("dtype") in _PACKED_TYPES
            and isinstance(stored.get("length"), int) and 0 <= stored["length"] < 2**40
            and _is_integer_vector(stored.get("at")) and _is_integer_vector(stored.get("wide"))):
        raise ValueError(problem)
    dtype = _PACKED_TYPES[stored["dtype"]]
    size = stored["length"] * dtype.itemsize
    inflate = zlib.decompressobj()
    try:
        raw = inflate.decompress(stored["zlib"], size)  # never more than the column claims to hold
    except zlib.error:
        raise ValueError(f"{problem} (its zlib data is corrupt)") from None
    if len(raw) != size or inflate.unconsumed_tail or not inflate.eof:
        raise ValueError(f"{problem} (its zlib data does not hold {stored['length']} {stored['dtype']} values)")
    values = torch.frombuffer(bytearray(raw), dtype=dtype).long() if size else torch.zeros(0, dtype=torch.long)
    at = stored["at"].long()
    if len(at) != len(stored["wide"]) or (len(at) and (int(at.min()) < 0 or int(at.max()) >= len(values))):
        raise ValueError(f"{problem} (its exceptions do not fit it)")
    values[at] = stored["wide"].long()
    return values


def is_int(value) -> bool:
    """An int that is not a bool (True is no count)."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_finite_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def is_vector(value, kind: str, length: int | None = None) -> bool:
    """A dense 1-D tensor of integers (``kind`` "int"), floats ("float") or booleans ("bool"), of ``length``."""
    if not (isinstance(value, torch.Tensor) and value.layout == torch.strided and value.dim() == 1):
        return False
    fits = {"int": not value.is_floating_point() and not value.is_complex() and value.dtype != torch.bool,
            "float": value.is_floating_point(), "bool": value.dtype == torch.bool}[kind]
    return fits and (length is None or len(value) == length)

"""A family's values held as float32 while every one of them is exactly a
float32: the value codec of ``buffers.py``.

Why: most samples a fleet stores are counters that rarely move from small whole
numbers (a fault kind's count of every device is nine tenths of a simulated
Llama-3 fleet's samples), and a float64 spends 8 bytes on each. A family starts
narrow (float32) and stays so while each value written converts to float32 and
back to the same 64 bits; the first that does not widens the family to float64
for good. Every read converts back to float64 (``wide``), so what a query sees,
and every figure computed from it, is bit for bit what a float64 store gives.

A stale marker (``STALE_NAN_BITS``) has no float32 form that converts back to
it, so a narrow family marks one with ``STALE32_BITS``, a signalling NaN that no
conversion produces (they give quiet NaNs), and ``wide`` writes the float64
marker where it finds one.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from autoscaler.promql.symbols import F64

STALE_NAN_BITS = 0x7FF0000000000002
"""Prometheus's stale marker (``value.StaleNaN``), a NaN no arithmetic produces."""
STALE32_BITS = 0x7FA00002
"""A narrow family's stale marker: a signalling float32 NaN."""


def bits(arr: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """``arr``'s values as unsigned integers of their width (a view): moves and
    copies keep every NaN's bits, which float copies need not."""
    return arr.view(np.uint32 if arr.itemsize == 4 else np.uint64)


def stale_bits(arr: npt.NDArray[Any]) -> int:
    """The stale marker's bits in ``arr``'s width (its values or their bits)."""
    return STALE32_BITS if arr.itemsize == 4 else STALE_NAN_BITS


def nan_bits(arr: npt.NDArray[Any]) -> int:
    """Padding's bits (a quiet NaN) in ``arr``'s width (its values or their bits)."""
    if arr.itemsize == 4:
        return int(np.float32(np.nan).view(np.uint32))
    return int(np.float64(np.nan).view(np.uint64))


def fits(values: F64) -> bool:
    """Whether every one of ``values`` is exactly a float32 (its 64 bits come
    back from the round trip; a stale marker's do not)."""
    with np.errstate(over="ignore", invalid="ignore"):  # past float32's range: no fit
        back = values.astype(np.float32).astype(np.float64)
    return bool((back.view(np.uint64) == np.ascontiguousarray(values).view(np.uint64)).all())


def wide(values: npt.NDArray[Any]) -> F64:
    """``values`` as float64: itself if it is, else converted, stale markers
    written as the float64 one."""
    if values.dtype == np.float64:
        return values
    with np.errstate(invalid="ignore"):  # a signalling NaN (a stale marker) quietened
        out: F64 = values.astype(np.float64)
    stale = values.view(np.uint32) == STALE32_BITS
    if stale.any():
        out.view(np.uint64)[stale] = STALE_NAN_BITS
    return out


__all__ = ["STALE32_BITS", "STALE_NAN_BITS", "bits", "fits", "nan_bits", "stale_bits", "wide"]

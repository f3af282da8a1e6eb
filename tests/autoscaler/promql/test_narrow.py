"""``narrow.py``: a value is held as float32 only where it comes back as the same
64 bits, so a narrow family reads exactly what a float64 one would; stale
markers, which have no float32 form, come back as Prometheus's."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from autoscaler.promql.narrow import STALE32_BITS, STALE_NAN_BITS, bits, fits, wide

_BITS = st.integers(min_value=0, max_value=2**64 - 1)
# Every kind of float64: whole numbers, fractions, huge and tiny ones, signed
# zeros, infinities, NaNs with any payload (the stale marker among them).
_VALUES = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-(2**40), max_value=2**40).map(float),
    _BITS.map(lambda b: float(np.uint64(b).view(np.float64))),
    st.just(float(np.uint64(STALE_NAN_BITS).view(np.float64))),
)


@given(st.lists(_VALUES, min_size=1, max_size=20))
def test_what_fits_comes_back_bit_for_bit(values: list[float]) -> None:
    v = np.array(values, dtype=np.float64)
    if fits(v):
        back = wide(v.astype(np.float32))
        assert back.view(np.uint64).tolist() == v.view(np.uint64).tolist()
    else:
        one = [fits(np.array([x])) for x in v]
        assert not all(one)


def test_a_stale_marker_never_fits_and_is_kept_by_its_own_bits() -> None:
    stale = np.array([STALE_NAN_BITS], dtype=np.uint64).view(np.float64)
    assert not fits(stale)
    narrow = np.array([1.0, np.nan, 3.0], dtype=np.float32)
    bits(narrow)[1] = STALE32_BITS
    out = wide(narrow)
    assert out.view(np.uint64)[1] == STALE_NAN_BITS
    assert out[0] == 1.0 and out[2] == 3.0
    # Padding (a quiet NaN) is not a marker.
    pad = wide(np.full(2, np.nan, dtype=np.float32))
    assert (pad.view(np.uint64) != STALE_NAN_BITS).all()


def test_wide_reads_transposed_views() -> None:
    narrow = np.arange(12, dtype=np.float32).reshape(3, 4)
    bits(narrow)[1, 2] = STALE32_BITS
    out = wide(narrow[:, 1:3].T)
    assert out.shape == (2, 3)
    assert out.view(np.uint64)[1, 1] == STALE_NAN_BITS
    assert out[0].tolist() == [1.0, 5.0, 9.0]

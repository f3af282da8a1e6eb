"""``vectors.member``, the set operators' and narrowed joins' membership test,
answers exactly what ``np.isin`` does for integer keys: dense keys (label codes
combined: the table) and sparse ones (the sorted search), with repeats, empty
sides and keys at the ends of int64."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from autoscaler.promql.vectors import member

_INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)


def _keys(values: st.SearchStrategy[int]) -> st.SearchStrategy[np.ndarray]:
    return st.lists(values, max_size=60).map(lambda v: np.array(v, dtype=np.int64))


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(
        st.tuples(_keys(st.integers(0, 200)), _keys(st.integers(0, 200))),
        st.tuples(_keys(st.integers(-50, 10**12)), _keys(st.integers(-50, 10**12))),
        st.tuples(_keys(_INT64), _keys(_INT64)),
    )
)
def test_member_is_isin(sides: tuple[np.ndarray, np.ndarray]) -> None:
    keys, of = sides
    got = member(keys, of)
    assert got.dtype == np.bool_ and got.shape == keys.shape
    assert np.array_equal(got, np.isin(keys, of))


def test_member_on_a_fleet_of_keys() -> None:
    rng = np.random.default_rng(7)
    for span in (1_000, 10**9, 2**62):
        keys = rng.integers(0, span, size=20_000)
        of = np.concatenate([rng.choice(keys, 5_000), rng.integers(0, span, size=5_000)])
        assert np.array_equal(member(keys, of), np.isin(keys, of))

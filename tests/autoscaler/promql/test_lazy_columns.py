"""``vectors.Cols``: label columns gathered when read. Whatever is read of them,
in any order, after any rows are taken, columns picked or set, is what gathering
every column at once would have given; and a column nobody reads is never
gathered."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from autoscaler.promql.vectors import Cols, Vec, drop_name, pick

I64 = np.ndarray[Any, np.dtype[np.int64]]


def _eager(source: dict[str, I64], rows: I64) -> dict[str, I64]:
    return {k: c[rows] for k, c in source.items()}


def _same(got: Any, want: dict[str, I64]) -> None:
    assert sorted(got) == sorted(want)
    assert len(got) == len(want)
    for k, c in want.items():
        assert k in got
        assert np.array_equal(got[k], c), k
    assert "nope" not in got
    with pytest.raises(KeyError):
        got["nope"]


@pytest.mark.parametrize("seed", range(40))
def test_reads_are_what_gathering_every_column_gives(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 50))
    names = [f"l{i}" for i in range(int(rng.integers(1, 8)))]
    source = {k: rng.integers(0, 9, n).astype(np.int64) for k in names}
    rows = rng.integers(0, n, int(rng.integers(0, 2 * n))).astype(np.int64)
    lazy: Any = Cols(source, rows)
    want = _eager(source, rows)
    for _ in range(6):
        # Some columns read before the next step, some not.
        for k in rng.permutation(list(want))[: int(rng.integers(0, len(want) + 1))]:
            assert np.array_equal(lazy[k], want[k])
        step = rng.integers(0, 4)
        size = len(next(iter(want.values()))) if want else 0
        if step == 0:  # rows taken, by positions or by a mask
            idx: Any = rng.random(size) < 0.5
            if rng.random() < 0.5 and size:
                idx = rng.integers(0, size, int(rng.integers(0, size + 1)))
            lazy = pick(lazy, idx)
            want = {k: c[idx] for k, c in want.items()}
        elif step == 1:  # columns picked
            keep = [k for k in want if rng.random() < 0.7]
            lazy = pick(lazy, None, keep)
            want = {k: want[k] for k in keep}
        elif step == 2:  # a column set over the others
            extra = {str(rng.choice([*names, "__name__"])): rng.integers(0, 9, size)}
            lazy = pick(lazy, None, None, extra)
            want = {**want, **extra}
        else:  # rows taken and columns picked and set at once
            idx = np.flatnonzero(rng.random(size) < 0.6)
            keep = [k for k in want if rng.random() < 0.7]
            extra = {"x": rng.integers(0, 9, idx.size)}
            lazy = pick(lazy, idx, keep, extra)
            want = {**{k: want[k][idx] for k in keep}, **extra}
        _same(lazy, want)


def test_a_column_nobody_reads_is_not_gathered() -> None:
    source = {k: np.arange(10, dtype=np.int64) * (i + 1) for i, k in enumerate("abcd")}
    vec = Vec(Cols(source, np.array([1, 3, 5], dtype=np.int64)), np.ones(3))
    taken = vec.take(np.array([True, False, True]))
    assert np.array_equal(taken.cols["b"], [2, 10])
    assert isinstance(taken.cols, Cols)
    assert set(taken.cols._got) == {"b"}
    # A name dropped keeps the other columns ungathered.
    named = Vec(pick(vec.cols, None, None, {"__name__": np.full(3, 7)}), vec.values)
    dropped = drop_name(named)
    assert "__name__" not in dropped.cols
    assert isinstance(dropped.cols, Cols)
    assert not dropped.cols._got
    assert np.array_equal(dropped.cols["d"], [4, 12, 20])

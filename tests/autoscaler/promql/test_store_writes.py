"""A write lands on the series its refs name, whatever the store remembers.

``SeriesStore._groups`` keeps what it found for a write's refs (the families, the
rows, the rows as a slice) so that a scrape, which writes the same refs every
time, does not resolve them again. These tests hold that against a plain record
of what was written to which series: across drops that renumber the rows, refs
whose array the caller changed in place, refs that name several families in any
order, duplicates, and the strided refs of one kind of every device.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from autoscaler.promql.store import SeriesStore


def _latest(store: SeriesStore, name: str) -> dict[str, float]:
    """Each series of ``name`` by its ``i`` label: its newest value."""
    out: dict[str, float] = {}
    for fam, rows in store.select([]):
        if fam.name != name:
            continue
        for r in rows.tolist():
            if fam.count[r]:
                out[dict(fam.labels[r])["i"]] = float(fam.last_value[r])
    return out


def test_writes_follow_their_series_across_drops_and_changed_arrays() -> None:
    rng = np.random.default_rng(3)
    store = SeriesStore(retention=math.inf)
    names = [f"m{k}" for k in range(3)]
    refs = {
        (k, i): store.ref({"__name__": names[k], "i": str(i)}) for k in range(3) for i in range(40)
    }
    expected: dict[tuple[int, int], float] = {}
    t = 1_000.0
    kept: list[tuple[int, int]] = []
    reused = np.zeros(0, dtype=np.int64)
    for step in range(120):
        t += 15.0
        live = [key for key in refs if refs[key] >= 0]
        shape = step % 4
        if shape == 0:  # every series of one family, in order
            k = step % 3
            keys = [key for key in live if key[0] == k]
        elif shape == 1:  # every third series of one family (one kind of every device)
            keys = [key for key in live if key[0] == 1][::3]
        elif shape == 2:  # several families, shuffled, with a duplicate
            keys = [live[int(j)] for j in rng.permutation(len(live))[:30]]
            keys = [*keys, keys[0]] if keys else keys
        else:
            # The array of the step before, two of its middle refs swapped in
            # place by the caller: the same first and last ref, the same object.
            keys = kept
        if not keys or any(refs[key] < 0 for key in keys):
            continue
        if shape == 3 and len(keys) > 3:
            keys[1], keys[2] = keys[2], keys[1]
            reused[[1, 2]] = reused[[2, 1]]
            array = reused
        else:
            array = np.array([refs[key] for key in keys], dtype=np.int64)
        values = rng.random(array.size)
        store.append(array, t, values)
        seen: set[tuple[int, int]] = set()
        for key, v in zip(keys, values.tolist(), strict=True):
            if key not in seen:  # a duplicate keeps its first value
                expected[key] = v
                seen.add(key)
        _check(store, names, expected)
        if shape == 2:
            kept, reused = list(keys), array
        if step % 17 == 16:
            # Some series stop; the others are written later, and a drop before
            # that forgets the stopped ones and renumbers the rows after them: a
            # kept plan must not outlive that.
            gone = [key for key in live if key[1] % 5 == step % 5]
            rest = [key for key in live if key not in gone]
            fresh = rng.random(len(rest))
            store.append(np.array([refs[key] for key in rest]), t + 10, fresh)
            store.drop_before(t + 5)
            for key in gone:
                with pytest.raises(KeyError):
                    store.append(np.array([refs[key]]), t + 20, np.array([0.0]))
                refs[key] = -1
                expected.pop(key, None)
            # The same refs again: the rows they name moved up.
            again = rng.random(len(rest))
            store.append(np.array([refs[key] for key in rest]), t + 15, again)
            expected.update(zip(rest, again.tolist(), strict=True))
            t += 10
    _check(store, names, expected)


def _check(store: SeriesStore, names: list[str], expected: dict[tuple[int, int], float]) -> None:
    for k, name in enumerate(names):
        got = _latest(store, name)
        want = {str(i): v for (kk, i), v in expected.items() if kk == k}
        assert {i: got.get(i) for i in want} == want

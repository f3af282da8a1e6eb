"""``StoreSource.query_targets`` keeps exactly the samples of the asked targets.

A rule's recover condition is asked for its active targets only; the evaluator
cuts the result down by label codes (``Evaluator._restrict``). Whatever it does
inside, it must answer what the whole query's samples filtered in Python answer:
with labels absent from some series, values no series ever had, the empty value,
and several label names at once.
"""

from __future__ import annotations

import asyncio

from hypothesis import given, settings
from hypothesis import strategies as st

from autoscaler.sources.store import StoreSource
from autoscaler.types import Vector

NODES = ("n0", "n1", "n2", "")
DEVICES = ("0", "1", "")
NAMES = (("node",), ("node", "device"), ("device", "node"))

series = st.lists(st.tuples(st.sampled_from(NODES), st.sampled_from(DEVICES)), max_size=12)
wanted = st.lists(
    st.tuples(st.sampled_from((*NODES, "gone")), st.sampled_from((*DEVICES, "9"))), max_size=6
)


def _text(rows: list[tuple[str, str]]) -> str:
    lines = []
    for i, (node, device) in enumerate(dict.fromkeys(rows)):
        labels = [f'i="{i}"']
        if node:
            labels.append(f'node="{node}"')
        if device:
            labels.append(f'device="{device}"')
        lines.append(f"x{{{','.join(labels)}}} {i}")
    return "\n".join(lines) + "\n"


@settings(max_examples=200, deadline=None)
@given(series, wanted, st.sampled_from(NAMES))
def test_query_targets_is_the_query_filtered(
    rows: list[tuple[str, str]], asked: list[tuple[str, str]], names: tuple[str, ...]
) -> None:
    source = StoreSource()
    source.store.ingest_text(_text(rows), 60.0, target="t")
    targets = [
        tuple(dict(zip(("node", "device"), a, strict=True))[n] for n in names) for a in asked
    ]
    whole = asyncio.run(source.query("x", 60.0))
    cut = asyncio.run(source.query_targets("x", 60.0, names, targets))
    assert isinstance(whole, Vector) and isinstance(cut, Vector)
    keep = set(targets)
    expected = [s for s in whole.samples if tuple(s.get(n, "") for n in names) in keep]
    assert sorted(cut.samples, key=lambda s: s.value) == sorted(expected, key=lambda s: s.value)

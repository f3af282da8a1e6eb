"""The layouts file reader: the shipped file loads, and any text at all is either
layouts or a LayoutsError with positions, never another exception (hypothesis)."""

from __future__ import annotations

from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nodeagent import layouts


def test_the_shipped_layouts() -> None:
    found = layouts.load()
    assert found["h100-all-1g"].mig == ("1g.10gb",) * 7
    assert found["h100-whole"].mig is None
    assert (found["mi300x-cpx"].compute, found["mi300x-cpx"].memory) == ("CPX", "NPS4")
    assert found["h100-half"].matches("NVIDIA H100 80GB HBM3")
    assert not found["h100-half"].matches("NVIDIA H1000")  # a word, not a substring


WORDS = st.sampled_from(
    ["layouts", "model", "mig", "compute", "memory", "H100", "off", "CPX", "NPS4",
     "1g.10gb x7", "3g.40gb", ":", " ", "\n", "  ", "- ", "[", "]", "{", "}", ",", "&a", "*a",
     "!!python/object", "x99", "'", '"', "0", "~"]
)  # fmt: skip


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.lists(WORDS, max_size=40).map("".join))
def test_any_text_is_layouts_or_positioned_problems(tmp_path: Path, text: str) -> None:
    path = tmp_path / "layouts.yaml"
    path.write_text(text)
    try:
        found = layouts.load(path)
    except layouts.LayoutsError as e:
        assert e.problems and all(str(p).startswith(str(path)) for p in e.problems)
    else:
        assert all(isinstance(v, layouts.Layout) for v in found.values())

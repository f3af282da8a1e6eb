"""``quote`` (Go's ``strconv.Quote`` for label values) and ``regex_escape`` (a
value as a regular expression that matches it alone), which the rhythm learner
runs every cycle over alternations of thousands of node names: their fast paths
give what the character-by-character definitions give, for any text, and an
escaped alternation matches exactly its values."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from autoscaler.promql.matchers import literal_alternatives, quote, regex_escape

_GO_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\t": "\\t", "\r": "\\r"}


def _quote_by_char(value: str) -> str:
    out = ['"']
    for ch in value:
        if ch in _GO_ESCAPES:
            out.append(_GO_ESCAPES[ch])
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    return "".join([*out, '"'])


_TEXT = st.text(
    alphabet=st.one_of(
        st.sampled_from(list('abz-_.09"\\\n\t\r\x00\x1f\x7f|()[]{}^$*+?')),
        st.characters(),
    ),
    max_size=40,
)


@settings(max_examples=400, deadline=None)
@given(_TEXT)
def test_quote_is_go_quote_char_by_char(value: str) -> None:
    assert quote(value) == _quote_by_char(value)


@settings(max_examples=400, deadline=None)
@given(st.lists(_TEXT.filter(lambda v: v != ""), min_size=1, max_size=6, unique=True), _TEXT)
def test_an_escaped_alternation_matches_exactly_its_values(values: list[str], other: str) -> None:
    pattern = "|".join(regex_escape(v) for v in values)
    assert all(re.fullmatch(pattern, v, re.DOTALL) for v in values)
    if other not in values:
        assert re.fullmatch(pattern, other, re.DOTALL) is None
    found = literal_alternatives(pattern)
    assert found is None or found == frozenset(values)

"""Interned label values: the symbol table of the built-in evaluator's store.

Why a module of its own: every label value of every series is stored once here and
referred to everywhere else by an integer code, so that families keep one int64
column per label name, the evaluator joins and groups on codes, and label strings
are only touched to build a final result. Selecting series is a comparison of a
code column with one code (``=``, ``!=``), or a lookup table indexed by code whose
entries are the regular expression's verdict on each distinct value, evaluated
once per value ever seen (``=~``, ``!~``); a regular expression that is only
plain strings joined by ``|`` is a membership test of their codes instead.

The array types of the columnar store are named here, at its lowest layer.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from autoscaler.promql.matchers import Matcher, MatchType

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]
Mask = npt.NDArray[np.bool_]

_MAX_LUTS = 512


class Symbols:
    """Interned label values: code 0 is the empty string, i.e. an absent label."""

    def __init__(self) -> None:
        self._ids: dict[str, int] = {"": 0}
        self._strings: list[str] = [""]
        self._array: npt.NDArray[np.object_] = np.array([""], dtype=object)
        self._luts: dict[tuple[MatchType, str], npt.NDArray[np.int8]] = {}

    def __len__(self) -> int:
        return len(self._strings)

    def intern(self, value: str) -> int:
        code = self._ids.get(value)
        if code is None:
            code = len(self._strings)
            self._ids[value] = code
            self._strings.append(value)
        return code

    def code(self, value: str) -> int:
        """The code of a value, or -1 if no series ever had it."""
        return self._ids.get(value, -1)

    def string(self, code: int) -> str:
        return self._strings[code]

    def decode(self, codes: I64) -> list[str]:
        if len(self._array) != len(self._strings):
            grown = np.empty(max(len(self._strings), 2 * len(self._array)), dtype=object)
            grown[: len(self._array)] = self._array
            grown[len(self._array) : len(self._strings)] = self._strings[len(self._array) :]
            self._array = grown[: len(self._strings)]
        out: list[str] = self._array[codes].tolist()
        return out

    def named_codes(self, matcher: Matcher) -> list[int] | None:
        """The codes of the values a matcher names (``=``, or ``=~``/``!~`` of plain
        strings; -1: a value no series ever had), or None for one that names none."""
        if matcher.type is MatchType.EQ:
            return [self.code(matcher.value)]
        if matcher.literals is not None:
            return [self.code(v) for v in matcher.literals]
        return None

    def match(self, matcher: Matcher, codes: I64) -> Mask:
        """Which codes satisfy the matcher (on values; the label name is the caller's)."""
        if matcher.type is MatchType.EQ:
            eq: Mask = codes == self.code(matcher.value)
            return eq
        if matcher.type is MatchType.NE:
            ne: Mask = codes != self.code(matcher.value)
            return ne
        if matcher.literals is not None:
            # Plain strings joined by "|": the codes of those that exist.
            wanted = [c for c in self.named_codes(matcher) or () if c >= 0]
            hit: Mask = np.isin(codes, np.array(wanted, dtype=np.int64))
            return hit if matcher.type is MatchType.RE else ~hit
        key = (matcher.type, matcher.value)
        lut = self._luts.get(key)
        if lut is None:
            if len(self._luts) >= _MAX_LUTS:
                self._luts.clear()
            lut = np.full(len(self._strings), -1, dtype=np.int8)
        elif len(lut) < len(self._strings):
            lut = np.concatenate([lut, np.full(len(self._strings) - len(lut), -1, np.int8)])
        self._luts[key] = lut
        verdict = lut[codes]
        unknown = verdict < 0
        if unknown.any():
            for code in np.unique(codes[unknown]).tolist():
                lut[code] = 1 if matcher.matches(self._strings[code]) else 0
            verdict = lut[codes]
        out: Mask = verdict == 1
        return out


__all__ = ["F64", "I64", "Mask", "Symbols"]

"""PromQL 2.42's functions of an instant vector, on whole columns.

Why a module of its own: the evaluator's dispatcher stays small, and these
functions share one shape: a ``Vec`` in, a ``Vec`` out, computed on the value
column (math and date functions, ``round``, ``clamp*``, ``sort``) or on the label
code columns (``label_replace``/``label_join``), never series by series. The
label functions compute each distinct source value once (``np.unique`` over the
codes) and map the codes back, so a million series with ten distinct values cost
ten regular-expression matches.

Semantics follow ``promql/functions.go`` at v2.42.0: every function drops the
metric name except ``sort``/``sort_desc`` and the label functions (which keep
it unless they overwrite ``__name__``); date functions read a value as unix
seconds (``time.Unix(int64(v), 0).UTC()``); ``round`` rounds half up to the
nearest multiple of its argument.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from autoscaler.promql.errors import EvalError
from autoscaler.promql.goorder import INSERTION_MAX, reverse_sort, reverse_value_less, value_less
from autoscaler.promql.matchers import RegexError, compile_go_regex
from autoscaler.promql.symbols import F64, I64, Symbols
from autoscaler.promql.vectors import Vec, check_unique, drop_name, empty

_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")

MATH: dict[str, Callable[[F64], F64]] = {
    "abs": np.abs,
    "ceil": np.ceil,
    "floor": np.floor,
    "exp": np.exp,
    "sqrt": np.sqrt,
    "ln": np.log,
    "log2": np.log2,
    "log10": np.log10,
    "sin": np.sin,
    "cos": np.cos,
    "tan": np.tan,
    "asin": np.arcsin,
    "acos": np.arccos,
    "atan": np.arctan,
    "sinh": np.sinh,
    "cosh": np.cosh,
    "tanh": np.tanh,
    "asinh": np.arcsinh,
    "acosh": np.arccosh,
    "atanh": np.arctanh,
    "deg": np.degrees,
    "rad": np.radians,
    "sgn": np.sign,
}
"""Value-wise functions: ``math.*`` in Go, the same IEEE results in numpy."""

DATE_FUNCTIONS = frozenset(
    {
        "minute",
        "hour",
        "day_of_week",
        "day_of_month",
        "day_of_year",
        "days_in_month",
        "month",
        "year",
    }
)
LABEL_FUNCTIONS = frozenset({"label_replace", "label_join"})
OTHER = frozenset({"round", "clamp", "clamp_min", "clamp_max", "sort", "sort_desc"})
NAMES = frozenset(MATH) | DATE_FUNCTIONS | LABEL_FUNCTIONS | OTHER


def vector_function(name: str, vec: Vec, args: list[float | str], symbols: Symbols) -> Vec:
    """``name`` applied to ``vec`` with its other (scalar or string) arguments."""
    if name in LABEL_FUNCTIONS:
        strings = [a for a in args if isinstance(a, str)]
        if name == "label_replace":
            return label_replace(vec, *strings[:4], symbols=symbols)
        return label_join(vec, strings[0], strings[1], strings[2:], symbols)
    if name in ("sort", "sort_desc"):
        return _sort(vec, descending=name == "sort_desc")
    v = vec.values
    bounds = [float(a) for a in args if not isinstance(a, str)]
    with np.errstate(all="ignore"):
        if name in MATH:
            out = MATH[name](v)
        elif name in DATE_FUNCTIONS:
            out = date_function(name, v)
        elif name == "round":
            to_nearest = bounds[0] if bounds else 1.0
            inverse = 1.0 / to_nearest
            out = np.floor(v * inverse + 0.5) / inverse
        elif name == "clamp":
            lo, hi = bounds
            if hi < lo:
                return empty()
            out = np.maximum(lo, np.minimum(hi, v))
        elif name == "clamp_min":
            out = np.maximum(bounds[0], v)
        else:
            out = np.minimum(bounds[0], v)
    return drop_name(vec).with_values(np.asarray(out, dtype=np.float64))


def _sort(vec: Vec, descending: bool) -> Vec:
    """``funcSort``/``funcSortDesc``: by value, NaN last; names are kept. Up to
    12 samples, ties and NaNs come out as Go's insertion sort leaves them
    (``goorder``); longer vectors keep the input order among equal values."""
    v = vec.values
    if len(v) <= INSERTION_MAX:
        less = value_less if descending else reverse_value_less
        return vec.take(np.asarray(reverse_sort(v.tolist(), less), dtype=np.int64))
    key = -v if descending else v
    # NaN sorts last in numpy's ordering already, whichever the direction.
    order = np.argsort(key, kind="stable")
    return vec.take(order)


def date_function(name: str, v: F64) -> F64:
    """The calendar field of unix seconds ``v`` in UTC (``time.Unix(int64(v), 0)``)."""
    return np.asarray(_calendar(name, v), dtype=np.float64)


def _calendar(name: str, v: F64) -> npt.NDArray[Any]:
    secs = np.trunc(v).astype("int64")
    days = np.floor_divide(secs, 86400)
    dates = days.astype("datetime64[D]")
    years = dates.astype("datetime64[Y]")
    months = dates.astype("datetime64[M]")
    out: npt.NDArray[Any]
    if name == "minute":
        out = np.mod(secs, 3600) // 60
    elif name == "hour":
        out = np.mod(secs, 86400) // 3600
    elif name == "day_of_week":
        out = np.mod(days + 4, 7)  # 1970-01-01 was a Thursday
    elif name == "year":
        out = years.astype(np.int64) + 1970
    elif name == "month":
        out = months.astype(np.int64) % 12 + 1
    elif name == "day_of_month":
        out = (dates - months).astype(np.int64) + 1
    elif name == "day_of_year":
        out = (dates - years).astype(np.int64) + 1
    elif name == "days_in_month":
        following = (months + 1).astype("datetime64[D]")
        out = (following - months.astype("datetime64[D]")).astype(np.int64)
    else:
        raise ValueError(f"{name} is not a date function")
    return out


def _check_label_name(name: str, function: str) -> None:
    if not _LABEL_NAME.match(name):
        raise EvalError(f"invalid destination label name in {function}(): {name}")


def _set_label(vec: Vec, dst: str, codes: I64) -> Vec:
    cols = dict(vec.cols)
    if codes.any():
        cols[dst] = codes
    else:
        cols.pop(dst, None)
    out = Vec(cols, vec.values)
    check_unique(out)
    return out


def _mapped(codes: I64, convert: Callable[[tuple[int, ...]], int], extra: list[I64]) -> I64:
    """``convert`` applied once per distinct tuple of codes, mapped back to rows."""
    stacked = np.stack([codes, *extra], axis=1) if extra else codes[:, None]
    distinct, back = np.unique(stacked, axis=0, return_inverse=True)
    table = np.fromiter(
        (convert(tuple(int(c) for c in row)) for row in distinct),
        dtype=np.int64,
        count=len(distinct),
    )
    out: I64 = table[back.reshape(-1)]
    return out


def label_replace(
    vec: Vec, dst: str, replacement: str, src: str, regex: str, *, symbols: Symbols
) -> Vec:
    """``funcLabelReplace``: where ``regex`` matches the whole of ``src``'s value,
    ``dst`` becomes ``replacement`` with ``$1``/``${name}`` expanded."""
    try:
        pattern = compile_go_regex(regex)
    except RegexError as e:
        raise EvalError(f"invalid regular expression in label_replace(): {regex}: {e}") from None
    _check_label_name(dst, "label_replace")
    if not len(vec):
        return vec
    zeros = np.zeros(len(vec), dtype=np.int64)
    src_codes = vec.cols.get(src, zeros)
    dst_codes = vec.cols.get(dst, zeros)

    def convert(pair: tuple[int, ...]) -> int:
        m = pattern.fullmatch(symbols.string(pair[0]) if pair[0] else "")
        if m is None:
            return pair[1]
        value = expand(replacement, m)
        return symbols.intern(value) if value else 0

    return _set_label(vec, dst, _mapped(src_codes, convert, [dst_codes]))


def expand(template: str, m: re.Match[str]) -> str:
    """Go's ``Regexp.ExpandString``: ``$1``, ``${1}``, ``$name``, ``${name}``,
    ``$$``; an unknown group expands to nothing."""
    out: list[str] = []
    i = 0
    while i < len(template):
        c = template[i]
        if c != "$" or i + 1 >= len(template):
            out.append(c)
            i += 1
            continue
        nxt = template[i + 1]
        if nxt == "$":
            out.append("$")
            i += 2
            continue
        braced = nxt == "{"
        found = re.match(
            r"\{([a-zA-Z0-9_]+)\}" if braced else r"([a-zA-Z0-9_]+)", template[i + 1 :]
        )
        if found is None:
            out.append(c)
            i += 1
            continue
        name = found.group(1)
        i += 1 + found.end()
        try:
            group = m.group(int(name)) if name.isdigit() else m.group(name)
        except IndexError:
            group = None
        out.append(group or "")
    return "".join(out)


def label_join(vec: Vec, dst: str, sep: str, srcs: list[str], symbols: Symbols) -> Vec:
    """``funcLabelJoin``: ``dst`` becomes the values of ``srcs`` joined by ``sep``."""
    _check_label_name(dst, "label_join")
    for s in srcs:
        if not _LABEL_NAME.match(s):
            raise EvalError(f"invalid source label name in label_join(): {s}")
    if not len(vec):
        return vec
    zeros = np.zeros(len(vec), dtype=np.int64)
    cols = [vec.cols.get(s, zeros) for s in srcs]

    def convert(codes: tuple[int, ...]) -> int:
        value = sep.join(symbols.string(c) if c else "" for c in codes)
        return symbols.intern(value) if value else 0

    if not cols:
        return _set_label(vec, dst, zeros)
    return _set_label(vec, dst, _mapped(cols[0], convert, cols[1:]))


__all__ = [
    "DATE_FUNCTIONS",
    "LABEL_FUNCTIONS",
    "MATH",
    "NAMES",
    "date_function",
    "expand",
    "label_join",
    "label_replace",
    "vector_function",
]

"""Where in a PromQL expression a parse error is: the offset of the bad token.

``promql_parser`` says *what* is wrong ("invalid promql query", "unclosed left
parenthesis") but not *where*, and an operator who wrote a 300-character
expression across eight lines deserves the line and column of the mistake, as
promtool gives it. So the error is located here, from the outside:

* the expression is split into tokens (strings, numbers and durations, names,
  operators, brackets) by one regular expression;
* a prefix of the tokens is *viable* when some short completion makes it parse:
  nothing, an operand, a label value, a duration or range, a grouping, followed
  by the brackets still open and then perhaps an aggregation's body. An LR parser
  stops at the first token that makes its input not viable, so that token is
  found by searching back from the end in doubling steps and bisecting the last
  one (a few dozen probes of a few dozen parses each, milliseconds);
* messages that name the culprit are answered directly: an unclosed bracket is
  the innermost bracket left open, an unterminated string is its opening quote,
  an unknown function or a call with the wrong arguments is the function's name,
  and "at character N" (``promql/guard.py``'s limits) is that character.

The answer is an offset into the expression's text; ``accel_common.yamlread``
maps it to the file's line and column. Every probe goes through
``autoscaler.promql.guard.parse``, the only door to the parser library.
"""

from __future__ import annotations

import re

from autoscaler.promql.errors import ExprError
from autoscaler.promql.guard import parse

_TOKEN = re.compile(
    r"""
      (?P<space>\s+|\#[^\n]*)
    | (?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)
    | (?P<open_string>["'`])
    | (?P<number>(?:\d|\.\d)[\w.]*(?:[eE][-+]\d+)?)
    | (?P<name>[A-Za-z_:][\w:]*)
    | (?P<op>==|!=|>=|<=|=~|!~|[-+*/%^<>=(){}\[\],@:])
    | (?P<other>.)
    """,
    re.VERBOSE | re.DOTALL,
)
_CLOSERS = {"(": ")", "{": "}", "[": "]"}
# What may follow a viable prefix to make it a whole expression (before the
# brackets it leaves open are closed), and what may follow those brackets.
_MIDDLES = (
    "",
    " x",
    " 1",
    '="v"',
    ' "v"',
    "5m",
    " 5m",
    ' x="v"',
    "[5m]",
    " x[5m]",
    " ()",
    "()",
    ' "v", x',
)
_TAILS = ("", " (x)", " x")
_CHARACTER = re.compile(r"at character (\d+)")
_NAMED_CALL = re.compile(r"(?:function with name|in call to|call to function) '([\w:]+)'")


def _tokens(expr: str) -> list[tuple[int, int, str]]:
    """(start, end, kind) of every token, whitespace and comments left out."""
    out = []
    for m in _TOKEN.finditer(expr):
        kind = m.lastgroup or "other"
        if kind != "space":
            out.append((m.start(), m.end(), kind))
    return out


def _open_brackets(expr: str, tokens: list[tuple[int, int, str]]) -> list[int]:
    """Offsets of the brackets still open after ``tokens``, innermost last."""
    stack: list[int] = []
    for start, _, kind in tokens:
        if kind != "op":
            continue
        c = expr[start]
        if c in _CLOSERS:
            stack.append(start)
        elif c in ")}]" and stack and _CLOSERS[expr[stack[-1]]] == c:
            stack.pop()
    return stack


class _OutOfBudget(Exception):
    """The probes have parsed as many characters as one error may cost."""


class _Probe:
    """Parses completions of prefixes, within a budget of characters parsed: a
    long expression with an early mistake must cost milliseconds, not seconds."""

    def __init__(self, expr: str, tokens: list[tuple[int, int, str]], budget: int) -> None:
        self.expr, self.tokens, self.budget = expr, tokens, budget

    def parses(self, text: str) -> bool:
        self.budget -= len(text)
        if self.budget < 0:
            raise _OutOfBudget
        try:
            parse(text)
        except ExprError:
            return False
        return True

    def viable(self, k: int) -> bool:
        """Whether the first ``k`` tokens can begin some expression."""
        if k == 0:
            return True
        expr, tokens = self.expr, self.tokens
        prefix = expr[: tokens[k - 1][1]]
        closers = "".join(_CLOSERS[expr[i]] for i in reversed(_open_brackets(expr, tokens[:k])))
        # A selector closed inside a function that takes a range: increase(x{a="b"
        ranged = closers.replace("}", "}[5m]", 1)
        # The body of an aggregation goes inside the brackets left open
        # ("(sum by (a)" + " (x)" + ")") or after them ("sum(x) by" + " ()" + " (x)").
        return any(
            self.parses(prefix + middle + text)
            for middle in _MIDDLES
            for tail in _TAILS
            for end in dict.fromkeys((closers, ranged))
            for text in dict.fromkeys((end + tail, tail + end))
        )


# Characters parsed while locating one error: a fraction of a second. A rule's
# expression of a few hundred characters is located well within it.
BUDGET = 300_000


def error_offset(expr: str, message: str, budget: int = BUDGET) -> int | None:
    """The offset in ``expr`` of what the parser's ``message`` is about, or None
    when it cannot be told within ``budget`` characters parsed (the caller then
    reports the expression as a whole)."""
    if m := _CHARACTER.search(message):
        return max(int(m.group(1)) - 1, 0)
    tokens = _tokens(expr)
    if not tokens:
        return None
    for start, _, kind in tokens:
        if kind == "open_string":
            return start
    if "unclosed" in message:
        open_ = _open_brackets(expr, tokens)
        if open_:
            return open_[-1]
    if m := _NAMED_CALL.search(message):
        for i, (start, end, kind) in enumerate(tokens[:-1]):
            if kind == "name" and expr[start:end] == m.group(1) and expr[tokens[i + 1][0]] == "(":
                return start
    try:
        return _search(_Probe(expr, tokens, budget))
    except _OutOfBudget:
        return None


def _search(probe: _Probe) -> int:
    expr, tokens = probe.expr, probe.tokens
    if probe.viable(len(tokens)):
        # Every token fits: what is missing is at the end.
        return len(expr.rstrip())
    # The parser stopped at the last token that turned a viable prefix into one
    # that is not. A completion this does not know can make an earlier prefix
    # look not viable, so look back from the end, doubling the step, and bisect
    # only the last stretch: the answer is never before the true one's stretch.
    high, step = len(tokens), 1
    low = max(high - step, 0)
    while low > 0 and not probe.viable(low):
        high, step = low, step * 2
        low = max(high - step, 0)
    while high - low > 1:
        mid = (low + high) // 2
        if probe.viable(mid):
            low = mid
        else:
            high = mid
    return tokens[high - 1][0]


def token_at(expr: str, offset: int) -> str:
    """The token that starts at ``offset``, shortened for a message ('' at the end)."""
    m = _TOKEN.match(expr, offset)
    if m is None or offset >= len(expr):
        return ""
    text = m.group(0)
    return text if len(text) <= 30 else text[:27] + "..."


__all__ = ["BUDGET", "error_offset", "token_at"]

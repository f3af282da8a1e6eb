"""Label matchers with Prometheus's semantics, and Go regular expressions in Python.

A matcher tests the value of one label, and a series without the label has the
value "": ``x{a!="b"}`` and ``x{a=~"|b"}`` select series with no ``a`` at all, as
they do in Prometheus. Regular expressions are anchored at both ends
(``^(?:re)$``, Prometheus's ``FastRegexMatcher``).

Prometheus compiles them with Go's RE2 package and we compile them with Python's
``re``. The two agree on the syntax that rules use (alternations, classes,
repetition, ``(?i)``), and where they would silently disagree we translate
(``\\z``, POSIX classes such as ``[[:digit:]]``) or refuse with a reason
(``\\p{Greek}``, ``\\Q...\\E``, ``(?U)``): a rule the built-in evaluator would read
differently from Prometheus must be refused when it is loaded, never evaluated.
``re.ASCII`` gives ``\\d``, ``\\w``, ``\\s`` and ``\\b`` their RE2 meaning.
"""

from __future__ import annotations

import enum
import functools
import re
from dataclasses import dataclass, field

import promql_parser


class MatchType(enum.Enum):
    EQ = "="
    NE = "!="
    RE = "=~"
    NRE = "!~"


_POSIX_CLASSES = {
    "alnum": "0-9A-Za-z",
    "alpha": "A-Za-z",
    "ascii": "\\x00-\\x7f",
    "blank": "\\t ",
    "cntrl": "\\x00-\\x1f\\x7f",
    "digit": "0-9",
    "graph": "!-~",
    "lower": "a-z",
    "print": " -~",
    "punct": "!-/:-@\\[-`{-~",
    "space": "\\t\\n\\v\\f\\r ",
    "upper": "A-Z",
    "word": "0-9A-Za-z_",
    "xdigit": "0-9A-Fa-f",
}


class RegexError(ValueError):
    """A Go regular expression that Python's ``re`` cannot read the same way."""


def translate_go_regex(pattern: str) -> str:
    """Rewrite an RE2 pattern into the Python ``re`` pattern with the same meaning.

    Raises RegexError naming the construct where no faithful rewrite exists.
    """
    out: list[str] = []
    i = 0
    n = len(pattern)
    in_class = False
    opened = [0]  # per open group: scoped flag groups to close with it
    while i < n:
        c = pattern[i]
        if c == "\\":
            if i + 1 >= n:
                raise RegexError(f"regular expression {pattern!r} ends with a lone backslash")
            nxt = pattern[i + 1]
            if nxt in "pP":
                raise RegexError(
                    f"regular expression {pattern!r} uses Unicode classes (\\{nxt}), "
                    "which the built-in evaluator does not support"
                )
            if nxt == "Q":
                raise RegexError(
                    f"regular expression {pattern!r} uses \\Q...\\E, "
                    "which the built-in evaluator does not support"
                )
            if nxt == "C":
                raise RegexError(
                    f"regular expression {pattern!r} uses \\C, "
                    "which the built-in evaluator does not support"
                )
            if nxt == "z" and not in_class:
                out.append("\\Z")
            else:
                out.append(pattern[i : i + 2])
            i += 2
            continue
        if in_class:
            if c == "[" and pattern.startswith("[:", i):
                end = pattern.find(":]", i + 2)
                if end < 0:
                    out.append(c)
                    i += 1
                    continue
                name = pattern[i + 2 : end]
                if name.startswith("^") or name not in _POSIX_CLASSES:
                    raise RegexError(
                        f"regular expression {pattern!r} uses the class [:{name}:], "
                        "which the built-in evaluator does not support"
                    )
                out.append(_POSIX_CLASSES[name])
                i = end + 2
                continue
            if c == "[":
                # A literal "[" inside a class: Python warns about possible set
                # operations unless it is escaped.
                out.append("\\[")
                i += 1
                continue
            if c == "]":
                in_class = False
            out.append(c)
            i += 1
            continue
        if c == "[":
            in_class = True
            out.append(c)
            i += 1
            # "]" right after "[" or "[^" is a literal in both dialects.
            if i < n and pattern[i] == "^":
                out.append("^")
                i += 1
            if i < n and pattern[i] == "]":
                out.append("\\]")
                i += 1
            continue
        if c == "(" and pattern.startswith("(?", i):
            flags = re.match(r"\(\?([imsU-]*)[:)]", pattern[i:])
            if flags and "U" in flags.group(1):
                raise RegexError(
                    f"regular expression {pattern!r} uses the (?U) flag, "
                    "which the built-in evaluator does not support"
                )
            if flags and flags.group(0).endswith(")"):
                # RE2 lets "(?i)" stand anywhere and apply to the rest of its
                # group; Python only takes it at the start, so it becomes a
                # scoped "(?i:" closed where the group ends.
                out.append(flags.group(0)[:-1] + ":")
                opened[-1] += 1
                i += len(flags.group(0))
                continue
        if c == "(":
            opened.append(0)
        elif c == ")" and len(opened) > 1:
            out.append(")" * opened.pop())
        out.append(c)
        i += 1
    return "".join(out) + ")" * opened[0]


@functools.lru_cache(maxsize=4096)
def compile_go_regex(pattern: str) -> re.Pattern[str]:
    """A compiled equivalent of the pattern; callers use ``fullmatch``, which anchors
    it at both ends like Prometheus's ``^(?:pattern)$``."""
    translated = translate_go_regex(pattern)
    try:
        return re.compile(translated, re.ASCII)
    except re.error as e:
        raise RegexError(
            f"regular expression {pattern!r} cannot be evaluated by the built-in evaluator: {e}"
        ) from None


@dataclass(frozen=True)
class Matcher:
    """One label matcher: ``name op value``."""

    name: str
    type: MatchType
    value: str
    _regex: re.Pattern[str] | None = field(default=None, compare=False, repr=False)

    @classmethod
    def make(cls, name: str, type: MatchType, value: str) -> Matcher:
        regex = None
        if type in (MatchType.RE, MatchType.NRE):
            regex = compile_go_regex(value)
        return cls(name, type, value, regex)

    @classmethod
    def from_parser(cls, m: promql_parser.Matcher) -> Matcher:
        op = m.op
        if op == promql_parser.MatchOp.Equal:
            t = MatchType.EQ
        elif op == promql_parser.MatchOp.NotEqual:
            t = MatchType.NE
        elif op == promql_parser.MatchOp.Re:
            t = MatchType.RE
        else:
            t = MatchType.NRE
        return cls.make(m.name, t, m.value)

    def matches(self, value: str) -> bool:
        if self.type is MatchType.EQ:
            return value == self.value
        if self.type is MatchType.NE:
            return value != self.value
        assert self._regex is not None
        found = self._regex.fullmatch(value) is not None
        return found if self.type is MatchType.RE else not found

    def __str__(self) -> str:
        return f"{self.name}{self.type.value}{quote(self.value)}"


def quote(value: str) -> str:
    """A label value quoted the way Go's ``strconv.Quote`` does for printable text."""
    out = ['"']
    for ch in value:
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ch == "\r":
            out.append("\\r")
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def format_labels(labels: tuple[tuple[str, str], ...]) -> str:
    """``{a="b", c="d"}``: how Prometheus prints a label set in its error messages."""
    return "{" + ", ".join(f"{k}={quote(v)}" for k, v in labels) + "}"

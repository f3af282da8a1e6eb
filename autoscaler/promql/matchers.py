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
            out.append(_escape(pattern, i, in_class))
            i += 2
        elif in_class:
            text, i, in_class = _class_member(pattern, i)
            out.append(text)
        elif c == "[":
            text, i = _class_start(pattern, i)
            out.append(text)
            in_class = True
        elif (flags := _flag_group(pattern, i)) is not None:
            # RE2 lets "(?i)" stand anywhere and apply to the rest of its group;
            # Python only takes it at the start, so it becomes a scoped "(?i:"
            # closed where the group ends.
            out.append(flags[:-1] + ":")
            opened[-1] += 1
            i += len(flags)
        else:
            if c == "(":
                opened.append(0)
            elif c == ")" and len(opened) > 1:
                out.append(")" * opened.pop())
            out.append(c)
            i += 1
    return "".join(out) + ")" * opened[0]


def _unsupported(pattern: str, what: str) -> RegexError:
    return RegexError(
        f"regular expression {pattern!r} uses {what}, which the built-in evaluator does not support"
    )


def _escape(pattern: str, i: int, in_class: bool) -> str:
    """The escape at ``pattern[i]`` (a backslash and one character), rewritten:
    RE2's ``\\z`` is Python's ``\\Z``; escapes with no Python equivalent are refused."""
    if i + 1 >= len(pattern):
        raise RegexError(f"regular expression {pattern!r} ends with a lone backslash")
    nxt = pattern[i + 1]
    if nxt in "pP":
        raise RegexError(
            f"regular expression {pattern!r} uses Unicode classes (\\{nxt}), "
            "which the built-in evaluator does not support"
        )
    if nxt == "Q":
        raise _unsupported(pattern, "\\Q...\\E")
    if nxt == "C":
        raise _unsupported(pattern, "\\C")
    if nxt == "z" and not in_class:
        return "\\Z"
    return pattern[i : i + 2]


def _class_member(pattern: str, i: int) -> tuple[str, int, bool]:
    """Inside a character class: the rewrite of what starts at ``i``, where the
    next piece starts, and whether the class is still open. POSIX classes are
    spelled out; a literal "[" is escaped."""
    c = pattern[i]
    if c == "[" and pattern.startswith("[:", i):
        end = pattern.find(":]", i + 2)
        if end < 0:
            return c, i + 1, True
        name = pattern[i + 2 : end]
        if name.startswith("^") or name not in _POSIX_CLASSES:
            raise _unsupported(pattern, f"the class [:{name}:]")
        return _POSIX_CLASSES[name], end + 2, True
    if c == "[":
        # A literal "[" inside a class: Python warns about possible set
        # operations unless it is escaped.
        return "\\[", i + 1, True
    return c, i + 1, c != "]"


def _class_start(pattern: str, i: int) -> tuple[str, int]:
    """The opening "[" at ``i`` (with a "^" after it), and where the class's
    members start: "]" right after "[" or "[^" is a literal in both dialects."""
    n = len(pattern)
    text = "["
    i += 1
    if i < n and pattern[i] == "^":
        text += "^"
        i += 1
    if i < n and pattern[i] == "]":
        text += "\\]"
        i += 1
    return text, i


def _flag_group(pattern: str, i: int) -> str | None:
    """The flags-only group ("(?i)") at ``i``, or None; (?U) is refused, since
    Python has no ungreedy flag."""
    if not pattern.startswith("(?", i):
        return None
    flags = re.match(r"\(\?([imsU-]*)[:)]", pattern[i:])
    if flags and "U" in flags.group(1):
        raise _unsupported(pattern, "the (?U) flag")
    if flags and flags.group(0).endswith(")"):
        return flags.group(0)
    return None


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


# What is special outside a character class in RE2 (and in Python's ``re``).
_REGEX_SYNTAX = frozenset("\\.+*?()|[]{}^$")


_REGEX_ESCAPES = str.maketrans({c: "\\" + c for c in _REGEX_SYNTAX})


def regex_escape(value: str) -> str:
    """A regular expression that matches ``value`` alone, in RE2 and in ``re``
    (its inverse is ``literal_alternatives``)."""
    return value.translate(_REGEX_ESCAPES)


@functools.lru_cache(maxsize=4096)
def literal_alternatives(pattern: str) -> frozenset[str] | None:
    """The strings an anchored pattern matches when it is nothing but plain strings
    joined by ``|`` (punctuation escaped with a backslash is plain), else None.

    A selector that names many values (``node=~"n1|n2|..."``, as the rhythm
    learner writes one) is then a lookup of their codes instead of one run of the
    expression per distinct value in the store."""
    found: list[str] = []
    part: list[str] = []
    i = 0
    n = len(pattern)
    while i < n:
        c = pattern[i]
        if c == "\\":
            if i + 1 >= n or pattern[i + 1].isalnum() or not pattern[i + 1].isascii():
                return None
            part.append(pattern[i + 1])
            i += 2
            continue
        if c == "|":
            found.append("".join(part))
            part = []
        elif c in _REGEX_SYNTAX:
            return None
        else:
            part.append(c)
        i += 1
    found.append("".join(part))
    return frozenset(found)


@dataclass(frozen=True)
class Matcher:
    """One label matcher: ``name op value``."""

    name: str
    type: MatchType
    value: str
    _regex: re.Pattern[str] | None = field(default=None, compare=False, repr=False)
    # A regular expression that is an alternation of plain strings ("a|b\\.c"):
    # those strings, so that the store selects by their codes without running it.
    literals: frozenset[str] | None = field(default=None, compare=False, repr=False)

    @classmethod
    def make(cls, name: str, type: MatchType, value: str) -> Matcher:
        regex = None
        literals = None
        if type in (MatchType.RE, MatchType.NRE):
            literals = literal_alternatives(value)
            if literals is None:  # plain strings need no compiled expression
                regex = compile_go_regex(value)
        return cls(name, type, value, regex, literals)

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
        if self.literals is not None:
            found = value in self.literals
        else:
            assert self._regex is not None
            found = self._regex.fullmatch(value) is not None
        return found if self.type is MatchType.RE else not found

    def __str__(self) -> str:
        return f"{self.name}{self.type.value}{quote(self.value)}"


# ``quote``'s escapes, applied in one pass (the rhythm learner quotes
# alternations of thousands of escaped node names every cycle).
_GO_QUOTE = str.maketrans(
    {
        **{chr(c): f"\\x{c:02x}" for c in (*range(0x20), 0x7F)},
        "\n": "\\n",
        "\t": "\\t",
        "\r": "\\r",
        '"': '\\"',
        "\\": "\\\\",
    }
)


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def quote(value: str) -> str:
    """A label value quoted the way Go's ``strconv.Quote`` does for printable text."""
    if _CONTROL.search(value) is None:
        # The usual value: only backslashes and quotes to escape, each found by
        # ``str.replace`` in C.
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return f'"{value.translate(_GO_QUOTE)}"'


def format_labels(labels: tuple[tuple[str, str], ...]) -> str:
    """``{a="b", c="d"}``: how Prometheus prints a label set in its error messages."""
    return "{" + ", ".join(f"{k}={quote(v)}" for k, v in labels) + "}"

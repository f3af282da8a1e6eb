"""The one reader of operator-written YAML: positions, problems, typed values.

Rule files, rule unit tests, scenarios, sim scripts and the exporter's web config
are written by people, and a mistake in any of them should be answered the same
way: ``file:line:col: message``, pointing at the node, saying what was expected,
and listing every mistake at once rather than the first one (promtool's and the
descheduler's habit), so that one edit fixes them all.

Why it is built this way:

* **Composed nodes, not** ``safe_load``: ``yaml.compose`` keeps the line and column
  of every key and value, which plain Python objects lose. Values are constructed
  node by node with PyYAML's ``SafeConstructor``, so only plain YAML types exist:
  a ``!python/...`` or custom tag is a problem at its position, never an object.
* **A problem is data.** ``Reader.problem`` records one and the reader carries on;
  each typed reader returns None for a bad value (the problem already recorded),
  so a caller falls back to a default and keeps walking. The caller raises its own
  error type once, at the end, with ``sorted_problems``.
* **One place for limits.** ``Limits`` holds every bound, and ``Reader.load``
  applies them (``accel_common.yamlcompose``): the size of the file before
  anything parses it, UTF-8 with the line and column of the first bad byte,
  the nesting depth and the nodes that aliases expand to while composing (a
  "billion laughs" file is refused at its first alias over the limit, in
  milliseconds), and integers that fit in 64 bits when constructed. An
  attacker's file is a list of problems, never a traceback, a hang or an
  exhausted memory. Each format adds its own per-field bounds through the
  typed readers (``integer(maximum=)``, ``duration(maximum=)``).
* **One wording.** Every file format says "unknown key 'x' in a rule; did you mean
  'y'? (expected ...)" the same way, with the suggestion from
  ``accel_common.suggest`` and durations from ``accel_common.durations``.
"""

from __future__ import annotations

import math
import re
import stat
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from yaml.constructor import SafeConstructor
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from accel_common.durations import duration_seconds, format_whole
from accel_common.suggest import did_you_mean
from accel_common.yamlcompose import INT64_MAX, BoundedConstructor, Located, compose, decode

NULL_TAG = "tag:yaml.org,2002:null"
# The tags safe YAML constructs (str, int, float, bool, null, timestamp, binary,
# seq, map, ...); a node with any other was written with an explicit tag.
_SAFE_TAGS = frozenset(t for t in SafeConstructor.yaml_constructors if t is not None)


@dataclass(frozen=True)
class Limits:
    """How much input a reader accepts before it parses anything."""

    # The largest file: every format read here is a few kilobytes when written by
    # hand; a multi-megabyte one is a mistake (or an attack) that should not cost
    # the controller its memory.
    max_bytes: int = 4 * 1024 * 1024
    # Collections inside collections: the shipped formats nest at most 8 deep.
    max_depth: int = 64
    # Nodes reached through aliases, each alias counting every node it stands
    # for: generous for ``<<: *defaults`` habits, and a "billion laughs" file is
    # refused at its first alias past it.
    max_alias_nodes: int = 10_000


LIMITS = Limits()


@dataclass(frozen=True)
class Position:
    file: str
    line: int  # 1-based; 0: the file as a whole
    col: int  # 1-based

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"


def whole_file(file: str) -> Position:
    """The position of a problem that is about a file, not a place in it."""
    return Position(file, 0, 0)


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a file. A position with line 0 means the file as a
    whole (missing, unreadable, empty) and prints as ``file: message``."""

    position: Position
    message: str

    def __str__(self) -> str:
        if self.position.line <= 0:
            return f"{self.position.file}: {self.message}"
        return f"{self.position}: {self.message}"

    def sort_key(self) -> tuple[str, int, int, str]:
        p = self.position
        return (p.file, p.line, p.col, self.message)


def sorted_problems(problems: Iterable[Problem]) -> list[Problem]:
    """Sorted by file, line, column; exact duplicates (an alias read twice) dropped."""
    return sorted(set(problems), key=Problem.sort_key)


class ProblemsError(ValueError):
    """Input that cannot be used; ``problems`` lists every reason, and ``str()`` is
    one ``file:line:col: message`` per line. Each format subclasses it."""

    def __init__(self, problems: Iterable[Problem]) -> None:
        self.problems: list[Problem] = sorted_problems(problems)
        super().__init__("\n".join(str(p) for p in self.problems))


# A mapping's entries: key -> (key node, value node).
Entries = dict[str, tuple[ScalarNode, Node]]


def is_null(node: Node) -> bool:
    return isinstance(node, ScalarNode) and node.tag == NULL_TAG


def kind(node: Node) -> str:
    """What a node is, in words, without its value (for values that may be secret)."""
    if isinstance(node, MappingNode):
        return "a mapping"
    if isinstance(node, SequenceNode):
        return "a list"
    return "nothing" if is_null(node) else "a scalar"


def count_text(n: int, noun: str, plural: str | None = None) -> str:
    """``1 problem``, ``2 problems``: a count with its noun in the right number."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"


def choices_text(choices: Sequence[str]) -> str:
    """``a or b``, or ``one of a, b, c``: the choices as a message lists them."""
    if len(choices) <= 2:
        return " or ".join(choices)
    return f"one of {', '.join(choices)}"


class Reader:
    """Reads one file's node tree, recording every problem with its position."""

    def __init__(self, file: str | Path, limits: Limits = LIMITS) -> None:
        self.file = str(file)
        self.input_limits = limits
        self.problems: list[Problem] = []
        # The text last loaded, for positions inside a scalar (``position_in``).
        self._text: str | None = None
        self._lines: list[str] | None = None

    # -- positions and problems -------------------------------------------------

    def pos(self, node: Node) -> Position:
        return Position(self.file, node.start_mark.line + 1, node.start_mark.column + 1)

    def problem(self, node: Node, message: str) -> None:
        self.at(self.pos(node), message)

    def at(self, position: Position, message: str) -> None:
        self.problems.append(Problem(position, message))

    def whole(self, message: str) -> None:
        """A problem with the file as a whole."""
        self.at(whole_file(self.file), message)

    def sorted(self) -> list[Problem]:
        return sorted_problems(self.problems)

    # -- the document ----------------------------------------------------------

    def load(self, text: str | None = None, *, empty: str | None = None) -> Node | None:
        """The root node of the file (of ``text`` when the caller read it). None,
        with a problem recorded, when the file cannot be read, is too large, is
        not UTF-8 or not YAML, or is over a limit (depth, aliases); None without
        one for an empty document, unless ``empty`` says why that is a problem."""
        if text is None:
            text = self._read()
            if text is None:
                return None
        if len(text) > self.input_limits.max_bytes:
            self.whole(f"larger than {self.input_limits.max_bytes} bytes; is this the right file?")
            return None
        self._text, self._lines = text, None
        limits = self.input_limits
        root = compose(text, limits.max_depth, limits.max_alias_nodes)
        if isinstance(root, Located):
            self.located(root)
            return None
        if root is None and empty is not None:
            self.whole(empty)
        return root

    def located(self, found: Located) -> None:
        """Records a problem found while decoding or composing."""
        if found.line is None:
            self.whole(found.message)
        else:
            self.at(Position(self.file, found.line + 1, (found.col or 0) + 1), found.message)

    def _read(self) -> str | None:
        path = Path(self.file)
        limit = self.input_limits.max_bytes
        try:
            mode = path.stat().st_mode
            if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
                # Opening a pipe waits for a writer: a check would hang.
                self.whole("not a regular file (a pipe or a socket); give a file")
                return None
            # Read at most one byte past the limit: a file that grows, or a
            # device such as /dev/zero, is never read whole.
            with path.open("rb") as f:
                data = f.read(limit + 1)
        except OSError as e:
            self.whole(f"cannot read: {e.strerror or e}")
            return None
        except ValueError as e:  # a NUL byte in the name
            self.whole(f"cannot read: {e}")
            return None
        if len(data) > limit:
            self.whole(f"larger than {limit} bytes; is this the right file?")
            return None
        text = decode(data)
        if isinstance(text, Located):
            self.located(text)
            return None
        return text

    # -- shapes ----------------------------------------------------------------

    def mapping(
        self,
        node: Node,
        what: str,
        keys: Sequence[str] | None,
        required: Sequence[str] = (),
    ) -> Entries | None:
        """The entries of a mapping node, after reporting unknown, duplicate and
        missing keys; merge keys (``<<: *base``) are applied. ``keys`` None accepts
        any key (an action's parameters, which the action validates)."""
        if not isinstance(node, MappingNode):
            self.problem(node, f"{what} must be a mapping, got {self.describe(node)}")
            return None
        try:
            SafeConstructor().flatten_mapping(node)
        except yaml.YAMLError as e:
            self.problem(node, f"invalid YAML: {getattr(e, 'problem', None) or e}")
            return None
        out: Entries = {}
        for k, v in node.value:
            if not isinstance(k, ScalarNode) or not self.safe(k):
                self.problem(k, f"{what}: keys must be strings")
                continue
            key = str(k.value)
            if key in out:
                first = out[key][0].start_mark.line + 1
                self.problem(k, f"duplicate key {key!r} in {what} (first at line {first})")
                continue
            if keys is not None and key not in keys:
                self.problem(
                    k,
                    f"unknown key {key!r} in {what}{did_you_mean(key, keys)}"
                    f" (expected {', '.join(keys)})",
                )
                continue
            out[key] = (k, v)
        for r in required:
            if r not in out:
                self.problem(node, f"{what}: missing required key {r!r}")
        return out

    def sequence(self, node: Node, what: str, expected: str = "a list") -> list[Node] | None:
        """The items of a list node; null (``key:`` with nothing) is an empty list."""
        if is_null(node):
            return []
        if not isinstance(node, SequenceNode):
            self.problem(node, f"{what} must be {expected}, got {self.describe(node)}")
            return None
        return list(node.value)

    # -- values ----------------------------------------------------------------

    def safe(self, node: Node) -> bool:
        """Whether a scalar carries only a tag that plain YAML resolves by itself;
        an explicit custom tag is reported once, here."""
        if not isinstance(node, ScalarNode) or node.tag in _SAFE_TAGS:
            return True
        self.problem(node, f"invalid YAML value: the tag {node.tag!r} is not plain YAML")
        return False

    def value(self, node: Node) -> Any:
        """The Python value of a node, or None with a problem recorded when a tag
        that safe YAML cannot construct (``!python/...``, a custom ``!tag``) is
        there. A null node is None too, without a problem: use ``is_null`` to tell."""
        return self.construct(node)[1]

    def construct(self, node: Node) -> tuple[bool, Any]:
        """(True, the Python value), or (False, None) with the problem recorded:
        a tag safe YAML cannot construct, an integer beyond 64 bits, a number
        that overflows, or a date that does not exist."""
        try:
            return True, BoundedConstructor().construct_object(node, deep=True)
        except yaml.YAMLError as e:
            where = getattr(e, "problem_mark", None)
            problem = getattr(e, "problem", None) or str(e)
            message = f"invalid YAML value: {problem}"
            if where is not None:
                self.at(Position(self.file, where.line + 1, where.column + 1), message)
            else:
                self.problem(node, message)
        except (ValueError, OverflowError) as e:
            # Timestamps that do not exist (2024-02-30) and conversions Python
            # refuses reach here as plain exceptions.
            self.problem(node, f"invalid YAML value: {e}")
        except (AttributeError, KeyError, TypeError, IndexError):
            # An explicit tag on text it does not fit (``!!timestamp x``,
            # ``!!bool maybe``): PyYAML's constructors assume the resolver's
            # match and fail in their own ways.
            tag = str(node.tag).rsplit(":", 1)[-1]
            self.problem(node, f"invalid YAML value: {self.text(node)!r} is not a valid !!{tag}")
        return False, None

    def describe(self, node: Node) -> str:
        """A node for a message: ``a mapping``, ``a list`` or the value's repr."""
        if isinstance(node, (MappingNode, SequenceNode)):
            return kind(node)
        try:
            return repr(BoundedConstructor().construct_object(node, deep=True))
        except (yaml.YAMLError, ValueError, OverflowError, AttributeError, KeyError, TypeError):
            text = str(node.value)
            return repr(text if len(text) <= 40 else text[:37] + "...")

    def text(self, node: Node) -> str:
        """A scalar as written (``0x1F`` stays ``0x1F``), for messages and merges."""
        return str(node.value) if isinstance(node, ScalarNode) else self.describe(node)

    def string(self, node: Node, what: str, *, empty: bool = False) -> str | None:
        """A YAML string (not a number or a boolean); non-empty unless ``empty``."""
        ok, value = self.construct(node)
        if not ok:
            return None
        if not isinstance(value, str) or not (empty or value.strip()):
            expected = "a string" if empty else "a non-empty string"
            self.problem(node, f"{what} must be {expected}, got {self.describe(node)}")
            return None
        return value

    def written(self, node: Node, what: str) -> str | None:
        """A non-empty scalar as written, whatever YAML would make of it: label
        values, node names and series values, where ``0`` means the text "0"."""
        if not isinstance(node, ScalarNode) or is_null(node) or node.value == "":
            self.problem(node, f"{what} must be a non-empty string, got {self.describe(node)}")
            return None
        return str(node.value) if self.safe(node) else None

    def choice(self, node: Node, what: str, choices: Sequence[str]) -> str | None:
        ok, value = self.construct(node)
        if not ok:
            return None
        if not isinstance(value, str) or value not in choices:
            self.problem(
                node,
                f"{what} must be {choices_text(choices)}, got {self.describe(node)}"
                f"{did_you_mean(str(value), choices)}",
            )
            return None
        return value

    def integer(
        self, node: Node, what: str, minimum: int = 0, *, maximum: int = INT64_MAX
    ) -> int | None:
        """A whole number from ``minimum`` to ``maximum`` (64-bit by default)."""
        ok, value = self.construct(node)
        if not ok:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
            limit = f">= {minimum}" if maximum == INT64_MAX else f"from {minimum} to {maximum}"
            self.problem(node, f"{what} must be a whole number {limit}, got {self.describe(node)}")
            return None
        return value

    def number(
        self,
        node: Node,
        what: str,
        low: float = 0.0,
        high: float = float("inf"),
        *,
        finite: bool = True,
    ) -> float | None:
        """A number from ``low`` to ``high``; ``.inf`` and ``.nan`` only when
        ``finite`` is False (no field here means "forever" by a number)."""
        ok, value = self.construct(node)
        if not ok:
            return None
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not low <= value <= high
            or (finite and not math.isfinite(value))
        ):
            limit = f"from {low:g} to {high:g}" if high != float("inf") else f">= {low:g}"
            self.problem(node, f"{what} must be a number {limit}, got {self.describe(node)}")
            return None
        return float(value)

    def boolean(self, node: Node, what: str) -> bool | None:
        ok, value = self.construct(node)
        if not ok:
            return None
        if not isinstance(value, bool):
            self.problem(node, f"{what} must be true or false, got {self.describe(node)}")
            return None
        return value

    def duration(
        self,
        node: Node,
        what: str,
        *,
        positive: bool = False,
        minimum: float | None = None,
        maximum: float | None = None,
    ) -> float | None:
        """Seconds, in ``accel_common.durations``' grammar (always finite);
        ``positive`` refuses 0, ``minimum`` and ``maximum`` (seconds) bound it."""
        ok, value = self.construct(node)
        if not ok:
            return None
        try:
            seconds = duration_seconds(value)
        except ValueError as e:
            self.problem(node, f"{what}: {e}")
            return None
        if positive and seconds <= 0 and minimum is None:
            self.problem(node, f"{what} must be longer than 0s, got {value!r}")
            return None
        low = minimum if minimum is not None else 0.0
        high = maximum if maximum is not None else math.inf
        if not low <= seconds <= high:
            self.problem(node, f"{what} must be {_span(minimum, maximum)}, got {value!r}")
            return None
        return seconds

    # -- positions inside a scalar -------------------------------------------------

    def position_in(self, node: Node, offset: int) -> tuple[Position, bool]:
        """Where the character at ``offset`` of a scalar's value was written, and
        whether that is exact. Exact for plain, quoted and block scalars whose
        value this can rebuild from the text (folded lines, escapes); otherwise
        the scalar's own position, not exact."""
        if isinstance(node, ScalarNode) and self._text is not None and offset >= 0:
            if self._lines is None:
                self._lines = _LINE_BREAK.split(self._text)
            chars = _char_positions(self._lines, node)
            if chars:
                line, col = chars[min(offset, len(chars) - 1)]
                if offset >= len(chars):
                    col += 1 + offset - len(chars)
                return Position(self.file, line + 1, col + 1), True
        return self.pos(node), False


# YAML's line breaks (1.1 counts NEL and the Unicode separators as well).
_LINE_BREAK = re.compile("\r\n|\r|\n|\x85|\u2028|\u2029")
_ESCAPE_LENGTHS = {"x": 2, "u": 4, "U": 8}


def _span(minimum: float | None, maximum: float | None) -> str:
    def text(seconds: float) -> str:
        return format_whole(round(seconds * 1000))

    if minimum is not None and maximum is not None:
        return f"from {text(minimum)} to {text(maximum)}"
    if maximum is not None:
        return f"at most {text(maximum)}"
    return f"at least {text(minimum or 0.0)}"


def _char_positions(lines: Sequence[str], node: ScalarNode) -> list[tuple[int, int]]:
    """(line, col), 0-based, of each character of the scalar's value, rebuilt
    from the source lines; empty when the rebuilt value is not the value (a
    folding or escape this does not model), so that no guess passes as exact."""
    value = str(node.value)
    first, last = node.start_mark.line, node.end_mark.line
    if last >= len(lines):
        return []
    # Each line's content, as (line, col of its first char, text).
    segments: list[tuple[int, int, str]] = []
    style = node.style
    if style in ("|", ">"):
        body = [(n, lines[n]) for n in range(first + 1, last + 1)]
        if body and body[-1][0] == last:
            body[-1] = (last, lines[last][: node.end_mark.column])
        written = [t for _, t in body if t.strip()]
        indent = min((len(t) - len(t.lstrip(" ")) for t in written), default=0)
        segments = [(n, indent, t[indent:]) for n, t in body]
        while segments and not segments[-1][2].strip():
            segments.pop()
    else:
        quote = 1 if style in ("'", '"') else 0
        for n in range(first, last + 1):
            start = node.start_mark.column + quote if n == first else 0
            end = node.end_mark.column - quote if n == last else len(lines[n])
            text = lines[n][start:end]
            if first != last:
                stripped = text.lstrip(" 	") if n != first else text
                start += len(text) - len(stripped)
                text = stripped.rstrip(" 	") if n != last else stripped
            segments.append((n, start, text))
    chars: list[str] = []
    where: list[tuple[int, int]] = []
    blank = 0
    for i, (n, col, text) in enumerate(segments):
        if i > 0:
            if style == "|":
                chars.append("\n")
                where.append((n - 1, len(lines[n - 1])))
            elif not text:
                blank += 1
                continue
            else:
                breaks = "\n" * blank if blank else " "
                chars.extend(breaks)
                where.extend([(n - 1, len(lines[n - 1]))] * len(breaks))
                blank = 0
        j = 0
        while j < len(text):
            step = 1
            c = text[j]
            if style == "'" and text.startswith("''", j):
                step = 2
            elif style == '"' and c == "\\":
                if j + 1 >= len(text):
                    return []
                step = 2 + _ESCAPE_LENGTHS.get(text[j + 1], 0)
                c = "\x00"  # the decoded character: compared loosely below
            chars.append(c)
            where.append((n, col + j))
            j += step
    rebuilt = "".join(chars)
    if style in ("|", ">"):
        rebuilt, value = rebuilt.rstrip("\n"), value.rstrip("\n")
    same = len(rebuilt) == len(value) and all(
        a == b or a == "\x00" for a, b in zip(rebuilt, value, strict=True)
    )
    return where[: len(value)] if same else []


__all__ = [
    "LIMITS",
    "NULL_TAG",
    "Entries",
    "Limits",
    "Position",
    "Problem",
    "ProblemsError",
    "Reader",
    "choices_text",
    "count_text",
    "is_null",
    "kind",
    "sorted_problems",
    "whole_file",
]

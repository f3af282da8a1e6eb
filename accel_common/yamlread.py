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
* **One place for limits.** ``Limits`` and ``Reader.load`` are where input is
  bounded before PyYAML sees it; today the size of a file, and only safe tags.
  Alias, depth and node-count limits belong in ``load`` too.
* **One wording.** Every file format says "unknown key 'x' in a rule; did you mean
  'y'? (expected ...)" the same way, with the suggestion from
  ``accel_common.suggest`` and durations from ``accel_common.durations``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from yaml.constructor import SafeConstructor
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from accel_common.durations import duration_seconds
from accel_common.suggest import did_you_mean

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
        with a problem recorded, when the file cannot be read, is too large or is
        not YAML; None without one for an empty document, unless ``empty`` says
        why that is a problem."""
        if text is None:
            text = self._read()
            if text is None:
                return None
        if len(text) > self.input_limits.max_bytes:
            self.whole(f"larger than {self.input_limits.max_bytes} bytes; is this the right file?")
            return None
        try:
            root = yaml.compose(text, Loader=yaml.SafeLoader)
        except yaml.MarkedYAMLError as e:
            mark = e.problem_mark or e.context_mark
            context = f"{e.context}: " if e.context else ""
            message = f"invalid YAML: {context}{e.problem or 'cannot parse'}"
            if mark is None:
                self.whole(message)
            else:
                self.at(Position(self.file, mark.line + 1, mark.column + 1), message)
            return None
        except yaml.YAMLError as e:
            self.whole(f"invalid YAML: {e}")
            return None
        if root is None and empty is not None:
            self.whole(empty)
        return root

    def _read(self) -> str | None:
        path = Path(self.file)
        try:
            if path.stat().st_size > self.input_limits.max_bytes:
                self.whole(
                    f"larger than {self.input_limits.max_bytes} bytes; is this the right file?"
                )
                return None
            return path.read_text(encoding="utf-8")
        except OSError as e:
            self.whole(f"cannot read: {e.strerror or e}")
        except UnicodeDecodeError as e:
            self.whole(f"not UTF-8 text: {e}")
        return None

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
        SafeConstructor().flatten_mapping(node)
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
        """(True, the Python value), or (False, None) with the problem recorded."""
        try:
            return True, SafeConstructor().construct_object(node, deep=True)
        except yaml.YAMLError as e:
            problem = getattr(e, "problem", None) or str(e)
            self.problem(node, f"invalid YAML value: {problem}")
            return False, None

    def describe(self, node: Node) -> str:
        """A node for a message: ``a mapping``, ``a list`` or the value's repr."""
        if isinstance(node, (MappingNode, SequenceNode)):
            return kind(node)
        try:
            return repr(SafeConstructor().construct_object(node, deep=True))
        except yaml.YAMLError:
            return repr(node.value)

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

    def integer(self, node: Node, what: str, minimum: int = 0) -> int | None:
        ok, value = self.construct(node)
        if not ok:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            self.problem(
                node, f"{what} must be a whole number >= {minimum}, got {self.describe(node)}"
            )
            return None
        return value

    def number(
        self, node: Node, what: str, low: float = 0.0, high: float = float("inf")
    ) -> float | None:
        ok, value = self.construct(node)
        if not ok:
            return None
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not low <= value <= high
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

    def duration(self, node: Node, what: str, *, positive: bool = False) -> float | None:
        """Seconds, in ``accel_common.durations``' grammar; ``positive`` refuses 0."""
        ok, value = self.construct(node)
        if not ok:
            return None
        try:
            seconds = duration_seconds(value)
        except ValueError as e:
            self.problem(node, f"{what}: {e}")
            return None
        if positive and seconds <= 0:
            self.problem(node, f"{what} must be longer than 0s, got {value!r}")
            return None
        return seconds


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
    "is_null",
    "kind",
    "sorted_problems",
    "whole_file",
]

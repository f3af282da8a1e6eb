"""Bounded YAML composition: operator-written text into PyYAML nodes, or a refusal
with the line and column that broke a limit.

``accel_common.yamlread`` is the API every file format uses; this module is its
engine room, kept apart so that the reader stays readable. It exists because
PyYAML's own ``compose`` can be made to hang, exhaust memory or overflow the
Python stack by a few kilobytes of hostile text, and because it is slow:

* **Aliases.** ``a: &a [x, x, x, ...]``, ``b: &b [*a, *a, ...]``, nine levels
  deep, is a 1 KB file whose nodes stand for a billion. Composition shares the
  aliased node, so the cost comes later, in whoever walks or copies the tree.
  Here every node's *expanded* size is known as soon as it is composed, and each
  alias adds its target's size to a running total; past ``max_alias_nodes`` the
  file is refused at that alias. An alias to a node that contains it (a cycle
  that would make every walk endless) is refused too.
* **Depth.** PyYAML's composer and constructor recurse once per level, so a
  file nested 5,000 deep raises RecursionError. This composer is a loop over
  parser events with an explicit stack, and refuses the first collection past
  ``max_depth`` at its position; the constructor then never meets a deep tree.
* **Speed.** libyaml's C parser (PyYAML's ``CSafeLoader``) produces the events
  where it is installed, about thirty times faster than the pure-Python parser
  (4 MiB in about a second instead of half a minute); the pure-Python parser is
  the fallback, with the same composer. Only the node building is Python.
* **Bytes.** Text is decoded here, and a byte that is not UTF-8 is reported at
  its line and column, as is a character YAML does not allow (a control
  character).
* **Numbers.** ``BoundedConstructor`` builds values like PyYAML's safe
  constructor, except that an integer longer than any 64-bit value, or outside
  the signed 64-bit range, and a float written finite that overflows to
  infinity (``1e400``) are errors at their node rather than a 5,000-digit
  conversion, Python's int-string limit (ValueError), or a silent infinity.
"""

from __future__ import annotations

import gc
import math
from dataclasses import dataclass
from typing import Any

import yaml
from yaml.constructor import ConstructorError, SafeConstructor
from yaml.error import Mark, MarkedYAMLError
from yaml.events import (
    AliasEvent,
    MappingEndEvent,
    MappingStartEvent,
    ScalarEvent,
    SequenceEndEvent,
    SequenceStartEvent,
    StreamEndEvent,
)
from yaml.nodes import CollectionNode, MappingNode, Node, ScalarNode, SequenceNode
from yaml.reader import ReaderError

from accel_common.readfile import NotUTF8, decode_utf8

# libyaml where it is installed; the pure-Python parser otherwise. Both give the
# same events and resolve tags the same way (``SafeLoader``'s resolver).
_LIBYAML: bool = bool(getattr(yaml, "__with_libyaml__", False))
_Loader: Any = yaml.CSafeLoader if _LIBYAML else yaml.SafeLoader

# The largest and smallest integers a value may hold: int64, what Kubernetes and
# Prometheus store. 19 digits is the longest such number in decimal; the text of a
# longer one is refused before Python converts it.
INT64_MAX = 2**63 - 1
_MAX_INTEGER_TEXT = 64


class LimitError(MarkedYAMLError):
    """Input over one of ``Limits``; ``problem`` says which and what to do, and
    ``problem_mark`` is where."""


@dataclass(frozen=True)
class Located:
    """A problem found before or while composing: a message and, when known, the
    0-based line and column it is at (None: the file as a whole)."""

    message: str
    line: int | None = None
    col: int | None = None


def decode(data: bytes) -> str | Located:
    """UTF-8 text, or where its first byte that is not UTF-8 is."""
    try:
        return decode_utf8(data)
    except NotUTF8 as e:
        return Located(
            f"not UTF-8 text: byte 0x{e.byte:02x} cannot be decoded (save the file as UTF-8)",
            e.line - 1,
            e.column - 1,
        )


def compose(text: str, max_depth: int, max_alias_nodes: int) -> Node | Located | None:
    """The root node of the single document in ``text`` (None when empty), or
    where and why it cannot be composed within the limits."""
    loader = _Loader(text)
    # Composing makes hundreds of thousands of small containers that all live
    # until the end; the cyclic collector would scan them again and again (it
    # made a 1 MiB file take seconds more). None of them forms a cycle.
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _compose(loader, max_depth, max_alias_nodes)
    except LimitError as e:
        mark = e.problem_mark
        return Located(e.problem or "over a limit", *_line_col(mark))
    except MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        if "maximum nesting depth" in str(e.problem):
            # libyaml's own bound (1,000 flow levels), met while it scans ahead
            # of this composer's: the same problem, in the same words.
            return Located(_too_deep(max_depth), *_line_col(mark))
        context = f"{e.context}: " if e.context else ""
        message = f"invalid YAML: {context}{e.problem or 'cannot parse'}"
        return Located(message, *_line_col(mark))
    except ReaderError as e:
        return _reader_problem(text, e)
    except yaml.YAMLError as e:
        return Located(f"invalid YAML: {e}")
    finally:
        if collecting:
            gc.enable()
        loader.dispose()


def _too_deep(max_depth: int) -> str:
    return f"nested more than {max_depth} levels deep; flatten the structure"


def _line_col(mark: Mark | None) -> tuple[int | None, int | None]:
    return (None, None) if mark is None else (mark.line, mark.column)


def _reader_problem(text: str, e: ReaderError) -> Located:
    # libyaml reports the offset in the UTF-8 bytes, PyYAML in characters.
    offset = int(e.position)
    if _LIBYAML:
        offset = len(text.encode("utf-8")[:offset].decode("utf-8", errors="ignore"))
    before = text[:offset]
    line = before.count("\n")
    col = offset - (before.rfind("\n") + 1)
    char = e.character if isinstance(e.character, int) else 0
    return Located(
        f"invalid YAML: the character U+{char:04X} is not allowed in YAML text "
        "(remove it, or write it as an escape in a double-quoted string)",
        line,
        col,
    )


class _Frame:
    """A collection being composed: its node, its key awaiting a value (for a
    mapping), and the nodes it stands for so far (itself and its children,
    aliases expanded)."""

    __slots__ = ("key", "node", "size")

    def __init__(self, node: CollectionNode) -> None:
        self.node = node
        self.key: Node | None = None
        self.size = 1


class _Composition:
    """One document's composition state: the anchors seen, the expanded size of
    every finished node, the open collections, and the nodes reached through
    aliases so far (the total ``max_alias_nodes`` bounds)."""

    __slots__ = ("anchors", "loader", "max_alias_nodes", "max_depth", "sizes", "stack", "through")

    def __init__(self, loader: Any, max_depth: int, max_alias_nodes: int) -> None:
        self.loader = loader
        self.max_depth = max_depth
        self.max_alias_nodes = max_alias_nodes
        self.anchors: dict[str, Node] = {}
        # id(node) -> how many nodes it stands for with its aliases expanded; known
        # once the node is complete, so an alias to an unfinished node is a cycle.
        self.sizes: dict[int, int] = {}
        self.stack: list[_Frame] = []
        self.through = 0

    def attach(self, node: Node) -> Node | None:
        """Adds a finished node to the open collection; the node itself when there
        is none (it is the document's root)."""
        if not self.stack:
            return node
        frame = self.stack[-1]
        frame.size += self.sizes[id(node)]
        if isinstance(frame.node, SequenceNode):
            frame.node.value.append(node)
        elif frame.key is None:
            frame.key = node
        else:
            frame.node.value.append((frame.key, node))
            frame.key = None
        return None

    def anchor(self, event: Any, node: Node) -> None:
        name = getattr(event, "anchor", None)
        if name is None:
            return
        if name in self.anchors:
            raise yaml.composer.ComposerError(
                f"found duplicate anchor {name!r}; first occurrence",
                self.anchors[name].start_mark,
                "second occurrence",
                event.start_mark,
            )
        self.anchors[name] = node

    def alias(self, event: Any) -> Node | None:
        """The aliased node, attached, once its expanded size is counted against
        the limit; a cycle or an undefined alias is refused at the alias."""
        node = self.anchors.get(event.anchor)
        if node is None:
            raise yaml.composer.ComposerError(
                None, None, f"found undefined alias {event.anchor!r}", event.start_mark
            )
        size = self.sizes.get(id(node))
        if size is None:
            raise LimitError(
                None,
                None,
                f"the alias *{event.anchor} is inside the node it refers to; a "
                "node that contains itself has no end (refer to it from outside)",
                event.start_mark,
            )
        self.through += size
        if self.through > self.max_alias_nodes:
            raise LimitError(
                None,
                None,
                f"aliases expand to more than {self.max_alias_nodes} nodes (at *{event.anchor}); "
                "write the values out, or use fewer aliases of large nodes",
                event.start_mark,
            )
        return self.attach(node)

    def scalar(self, event: Any) -> Node | None:
        tag = event.tag
        if tag is None or tag == "!":
            tag = self.loader.resolve(ScalarNode, event.value, event.implicit)
        node = ScalarNode(
            tag, event.value, event.start_mark, event.end_mark, style=event.style or None
        )
        self.anchor(event, node)
        self.sizes[id(node)] = 1
        return self.attach(node)

    def open(self, event: Any, kind: type) -> None:
        """A collection starts: refused past ``max_depth``, at its position."""
        if len(self.stack) >= self.max_depth:
            raise LimitError(None, None, _too_deep(self.max_depth), event.start_mark)
        cls = SequenceNode if kind is SequenceStartEvent else MappingNode
        tag = event.tag
        if tag is None or tag == "!":
            tag = self.loader.resolve(cls, None, event.implicit)
        collection = cls(tag, [], event.start_mark, None, flow_style=event.flow_style)
        self.anchor(event, collection)
        self.stack.append(_Frame(collection))

    def close(self, event: Any) -> Node | None:
        frame = self.stack.pop()
        frame.node.end_mark = event.end_mark
        self.sizes[id(frame.node)] = frame.size
        return self.attach(frame.node)


def _compose(loader: Any, max_depth: int, max_alias_nodes: int) -> Node | None:
    loader.get_event()  # stream start
    if loader.check_event(StreamEndEvent):
        loader.get_event()
        return None
    document = loader.get_event()  # document start
    root = _compose_document(_Composition(loader, max_depth, max_alias_nodes))
    loader.get_event()  # document end
    if not loader.check_event(StreamEndEvent):
        event = loader.get_event()
        raise yaml.composer.ComposerError(
            "expected a single document in the stream",
            document.start_mark,
            "but found another document",
            event.start_mark,
        )
    loader.get_event()
    return root


def _compose_document(c: _Composition) -> Node:
    """The loop over one document's events, with an explicit stack instead of
    PyYAML's recursion, until its root node is complete."""
    root: Node | None = None
    get_event = c.loader.get_event
    while root is None:
        # Any: libyaml's events carry its own Mark type, which PyYAML's stubs
        # do not accept where a Mark goes; both have line, column and index.
        # (So events are told apart by ``kind``, which leaves ``event`` Any.)
        event: Any = get_event()
        kind = type(event)
        if kind is AliasEvent:
            root = c.alias(event)
        elif kind is ScalarEvent:
            root = c.scalar(event)
        elif kind in (SequenceStartEvent, MappingStartEvent):
            c.open(event, kind)
        elif kind in (SequenceEndEvent, MappingEndEvent):
            root = c.close(event)
        else:  # pragma: no cover - the parser emits nothing else inside a document
            raise yaml.composer.ComposerError(
                None, None, f"unexpected {type(event).__name__}", event.start_mark
            )
    return root


class BoundedConstructor(SafeConstructor):
    """PyYAML's safe constructor with integers held to 64 bits and floats that
    do not overflow to infinity; what it refuses is a ConstructorError at the
    node."""

    def construct_yaml_int(self, node: ScalarNode) -> int:
        text = str(self.construct_scalar(node))
        if len(text) > _MAX_INTEGER_TEXT:
            raise ConstructorError(
                None, None, _out_of_range(f"an integer of {len(text)} characters"), node.start_mark
            )
        value: int = super().construct_yaml_int(node)
        if not -INT64_MAX - 1 <= value <= INT64_MAX:
            raise ConstructorError(None, None, _out_of_range(text), node.start_mark)
        return value

    def construct_yaml_float(self, node: ScalarNode) -> float:
        text = str(self.construct_scalar(node))
        if len(text) > _MAX_INTEGER_TEXT * 2:
            raise ConstructorError(
                None, None, _out_of_range(f"a number of {len(text)} characters"), node.start_mark
            )
        value: float = super().construct_yaml_float(node)
        written_infinite = text.lower().lstrip("+-") == ".inf"
        if math.isinf(value) and not written_infinite:
            raise ConstructorError(
                None, None, f"{text} is too large to be a number (it overflows)", node.start_mark
            )
        return value


def _out_of_range(what: str) -> str:
    return f"{what} is out of range (integers are 64-bit: at most {INT64_MAX})"


# The stubs type add_constructor's class parameter too narrowly for a subclass.
BoundedConstructor.add_constructor(  # type: ignore[type-var]
    "tag:yaml.org,2002:int", BoundedConstructor.construct_yaml_int
)
BoundedConstructor.add_constructor(  # type: ignore[type-var]
    "tag:yaml.org,2002:float", BoundedConstructor.construct_yaml_float
)


__all__ = ["INT64_MAX", "BoundedConstructor", "LimitError", "Located", "compose", "decode"]

"""The shared YAML reader: every problem with its position, a size limit before
parsing, and plain YAML tags only."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

from accel_common import yamlcompose
from accel_common.yamlread import Limits, Reader, count_text


def test_reader_refuses_a_file_over_the_size_limit(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    path.write_text("a: " + "x" * 200 + "\n")
    reader = Reader(path, Limits(max_bytes=100))
    assert reader.load() is None
    assert [str(p) for p in reader.problems] == [
        f"{path}: larger than 100 bytes; is this the right file?"
    ]


def test_reader_refuses_tags_that_are_not_plain_yaml(tmp_path: Path) -> None:
    path = tmp_path / "t.yaml"
    path.write_text("a: !!python/name:os.system x\nb: !custom y\n")
    reader = Reader(path)
    root = reader.load()
    assert root is not None
    entries = reader.mapping(root, "a test", ("a", "b"))
    assert entries is not None
    assert reader.written(entries["a"][1], "a") is None
    assert reader.string(entries["b"][1], "b") is None
    assert [p.position.line for p in reader.problems] == [1, 2]
    assert all("invalid YAML value" in p.message for p in reader.problems)


def test_reader_collects_every_problem_with_its_position(tmp_path: Path) -> None:
    path = tmp_path / "t.yaml"
    path.write_text("nmae: x\ncount: -1\nkind: bleu\n")
    reader = Reader(path)
    root = reader.load()
    assert root is not None
    entries = reader.mapping(root, "a thing", ("name", "count", "kind"), required=("name",))
    assert entries is not None
    reader.integer(entries["count"][1], "count")
    reader.choice(entries["kind"][1], "kind", ("red", "green", "blue"))
    assert [str(p) for p in reader.sorted()] == [
        f"{path}:1:1: a thing: missing required key 'name'",
        f"{path}:1:1: unknown key 'nmae' in a thing; did you mean 'name'? "
        "(expected name, count, kind)",
        f"{path}:2:8: count must be a whole number >= 0, got -1",
        f"{path}:3:7: kind must be one of red, green, blue, got 'bleu'; did you mean 'blue'?",
    ]


# --- limits: every hostile input is a problem at its position, quickly --------------


def load(tmp_path: Path, data: bytes | str, limits: Limits | None = None) -> Reader:
    path = tmp_path / "t.yaml"
    if isinstance(data, str):
        data = data.encode()
    path.write_bytes(data)
    reader = Reader(path, limits or Limits())
    root = reader.load()
    if root is not None:
        for _, value in (reader.mapping(root, "a test", None) or {}).values():
            reader.value(value)
    return reader


def only(reader: Reader) -> str:
    problems = [str(p).replace(f"{reader.file}", "t.yaml") for p in reader.sorted()]
    assert len(problems) == 1, problems
    return problems[0]


def billion_laughs(levels: int = 9) -> str:
    lines = ["a: &a [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, levels + 1):
        name, last = chr(97 + i), chr(96 + i)
        lines.append(f"{name}: &{name} [{', '.join([f'*{last}'] * 10)}]")
    return "\n".join(lines) + "\n"


def test_an_alias_bomb_is_refused_at_its_first_alias_over_the_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    events: list[Any] = []

    class Counting(yamlcompose._Loader):  # type: ignore[misc]
        """The parser the composer uses, keeping every event it hands out."""

        def get_event(self) -> Any:
            event = super().get_event()
            events.append(event)
            return event

    monkeypatch.setattr(yamlcompose, "_Loader", Counting)
    reader = load(tmp_path, billion_laughs())
    # a: 11 nodes; b: 10 x 11 = 110 through aliases; c: 10 x 111 more (1,220 in
    # all); d: each *c adds 1,111, and its 8th passes 10,000.
    assert only(reader) == (
        "t.yaml:4:36: aliases expand to more than 10000 nodes (at *c); write the values "
        "out, or use fewer aliases of large nodes"
    )
    # Refused at once: that alias is the last event parsed, so nothing of the
    # billion nodes the rest of the file stands for was read, let alone expanded.
    last = events[-1]
    assert (type(last).__name__, last.start_mark.line, last.start_mark.column) == (
        "AliasEvent",
        3,
        35,
    )
    # Stream, document and mapping starts, a/b/c's 13 events each, d's key, its
    # sequence start and its 8 aliases.
    assert len(events) == 3 + 3 * 13 + 10, len(events)


def test_aliases_within_the_limit_are_fine(tmp_path: Path) -> None:
    reader = load(tmp_path, "base: &b {x: 1, y: 2}\none: {<<: *b, z: 3}\ntwo: *b\n")
    assert reader.problems == []
    reader = load(tmp_path, billion_laughs(3), Limits(max_alias_nodes=100))
    assert "aliases expand to more than 100 nodes" in only(reader)


def test_a_recursive_alias_is_refused(tmp_path: Path) -> None:
    assert only(load(tmp_path, "a: &a [1, *a]\n")).startswith(
        "t.yaml:1:11: the alias *a is inside the node it refers to"
    )


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("a: " + "[" * 5000 + "]" * 5000 + "\n", "t.yaml:1:"),
        ("a: " + "[" * 100 + "]" * 100 + "\n", "t.yaml:1:67:"),
        ("a: " + "{a: " * 100 + "1" + "}" * 100 + "\n", "t.yaml:1:256:"),
        ("a:\n" + "- " * 5000 + "x\n", "t.yaml:2:127:"),
    ],
    ids=["flow 5,000", "flow 100", "flow mappings", "block 5,000"],
)
def test_deep_nesting_is_refused_without_recursion(tmp_path: Path, text: str, where: str) -> None:
    problem = only(load(tmp_path, text))
    assert problem.startswith(where), problem
    assert "nested more than 64 levels deep" in problem


def test_not_utf8_is_refused_at_the_first_bad_byte(tmp_path: Path) -> None:
    assert only(load(tmp_path, b"a: 1\nb: \xc3\xa9t\xe9\n")) == (
        "t.yaml:2:6: not UTF-8 text: byte 0xe9 cannot be decoded (save the file as UTF-8)"
    )


def test_a_control_character_is_refused_at_its_position(tmp_path: Path) -> None:
    assert only(load(tmp_path, "a: 1\nbé: x\x07y\n")).startswith(
        "t.yaml:2:6: invalid YAML: the character U+0007 is not allowed"
    )


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("a: " + "9" * 5000, "an integer of 5000 characters is out of range"),
        ("a: 0x" + "f" * 30, "out of range (integers are 64-bit"),
        ("a: 9223372036854775808", "out of range (integers are 64-bit"),
        ("a: " + ":".join(["59"] * 40), "out of range"),
        ("a: 1.0e+400", "1.0e+400 is too large to be a number"),
        ("a: 2024-02-30", "day is out of range for month"),
        ("a: {<<: 1}", "expected a mapping or list of mappings for merging"),
        ("a: !!timestamp x", "'x' is not a valid !!timestamp"),
        ("a: !!bool maybe", "'maybe' is not a valid !!bool"),
        ("a: !!int abc", "invalid literal for int()"),
    ],
)
def test_values_python_cannot_hold_are_problems(tmp_path: Path, text: str, needle: str) -> None:
    problem = only(load(tmp_path, text + "\n"))
    assert problem.startswith("t.yaml:1:"), problem
    assert needle in problem, problem


def test_integers_numbers_and_durations_take_bounds(tmp_path: Path) -> None:
    reader = load(tmp_path, "n: 11\nf: .inf\nd: 2h\nz: 0s\ne: 1y\n")
    root = reader.load()
    assert root is not None
    e = reader.mapping(root, "a test", None)
    assert e is not None
    assert reader.integer(e["n"][1], "n", maximum=10) is None
    assert reader.integer(e["n"][1], "n", 1, maximum=11) == 11
    assert reader.number(e["f"][1], "f") is None
    assert reader.number(e["f"][1], "f", finite=False) == float("inf")
    assert reader.duration(e["d"][1], "d", maximum=3600) is None
    assert reader.duration(e["z"][1], "z", minimum=1) is None
    assert reader.duration(e["e"][1], "e") == 365 * 86400
    assert [p.message for p in reader.sorted()] == [
        "n must be a whole number from 0 to 10, got 11",
        "f must be a number >= 0, got inf",
        "d must be at most 1h, got '2h'",
        "z must be at least 1s, got '0s'",
    ]


def test_count_text() -> None:
    assert count_text(1, "problem") == "1 problem"
    assert count_text(0, "problem") == "0 problems"
    assert count_text(2, "series", "series") == "2 series"


# --- where a character of a scalar was written -----------------------------------------


@pytest.mark.parametrize(
    ("text", "target", "where"),
    [
        ("k: abc >> d\n", ">>", (1, 8)),
        ("k: 'a''b >> c'\n", ">>", (1, 10)),
        ('k: "a\\"b >> c"\n', ">>", (1, 10)),
        ('k: "\\u00e9 >> c"\n', ">>", (1, 12)),
        ("k: |\n  one\n  two >> x\n", ">>", (3, 7)),
        ("k: >\n  one\n  two >> x\n", ">>", (3, 7)),
        ("k: >-\n  one\n\n  two >> x\n", ">>", (4, 7)),
        ("k: one\n  two >> x\n", ">>", (2, 7)),
        ("k: 'one\n   two >> x'\n", ">>", (2, 8)),
    ],
    ids=[
        "plain",
        "single",
        "double",
        "unicode escape",
        "literal",
        "folded",
        "folded gap",
        "plain lines",
        "quoted lines",
    ],
)
def test_position_in_a_scalar(
    tmp_path: Path, text: str, target: str, where: tuple[int, int]
) -> None:
    reader = load(tmp_path, text)
    root = reader.load()
    assert root is not None
    node = root.value[0][1]
    position, exact = reader.position_in(node, str(node.value).index(target))
    assert exact, text
    assert (position.line, position.col) == where


def test_position_in_a_scalar_it_cannot_rebuild_is_the_scalar(tmp_path: Path) -> None:
    # A more-indented line in a folded scalar keeps its break: not modelled.
    reader = load(tmp_path, "k: >\n  one\n    two\n  three >> x\n")
    root = reader.load()
    assert root is not None
    node = root.value[0][1]
    position, exact = reader.position_in(node, str(node.value).index(">>"))
    assert (exact, position.line, position.col) in {(False, 1, 4), (True, 4, 9)}


def test_a_large_file_loads_in_seconds(tmp_path: Path) -> None:
    text = "rules:\n" + "".join(
        f"  - {{name: r{i}, expr: 'up{{a=\"b\"}} > 1', target: node}}\n" for i in range(10_000)
    )
    # CPU seconds (about half of one here), which other busy processes do not
    # stretch as they do the wall clock; the load runs on this thread.
    start = time.process_time()
    reader = load(tmp_path, text)
    assert reader.problems == []
    worked = time.process_time() - start
    assert worked < 5.0, worked


def test_a_pipe_or_an_endless_device_is_refused_without_hanging(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.yaml"
    os.mkfifo(fifo)
    reader = Reader(fifo)
    assert reader.load() is None
    assert [str(p) for p in reader.problems] == [
        f"{fifo}: not a regular file (a pipe or a socket); give a file"
    ]
    zero = tmp_path / "zero.yaml"
    zero.symlink_to("/dev/zero")
    reader = Reader(zero, Limits(max_bytes=1000))
    assert reader.load() is None
    assert [str(p) for p in reader.problems] == [
        f"{zero}: larger than 1000 bytes; is this the right file?"
    ]

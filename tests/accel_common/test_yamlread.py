"""The shared YAML reader: every problem with its position, a size limit before
parsing, and plain YAML tags only."""

from __future__ import annotations

from pathlib import Path

from accel_common.yamlread import Limits, Reader


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

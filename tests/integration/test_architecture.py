"""The house's size rules, held by a test: no hand-written module over 700 lines
(docs/design.md), and no function or method over 80 lines except the
argument-parser builders named in ``LONG_ALLOWED`` (issue 28).

Why a test and not a linter setting: ruff's complexity rules count branches and
statements, not lines, and the rule the house keeps is about what a reader can
hold on one screen. Lengths are measured with ``ast`` as ``end_lineno - lineno +
1`` of the ``def``, decorators left out, so comments and docstrings count: they
are part of what has to be read. A parser builder is a flat list of
``add_argument`` calls, one per flag, and reads no worse for being long; it is
named here rather than exempted by its name, so that a new long function is never
let through by what it is called."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.support.paths import REPO

# The hand-written code: the Python packages of the three programs and what they share.
CODE_ROOTS = ("accel_common", "exporter", "autoscaler", "nodeagent")
MAX_MODULE_LINES = 700
MAX_FUNCTION_LINES = 80
# Argument-parser builders: one add_argument per flag, so they grow with the flags.
LONG_ALLOWED = frozenset(
    {
        ("exporter/cli.py", "build_parser"),
        ("autoscaler/commands/run.py", "add_arguments"),
        ("autoscaler/commands/flags.py", "add_source_arguments"),
    }
)


@dataclass(frozen=True)
class Function:
    """A function or method: where it starts, its dotted name within the module
    (``Class.method``, ``outer.inner``), and its length in lines."""

    path: str
    line: int
    name: str
    length: int

    def __str__(self) -> str:
        return f"{self.path}:{self.line} {self.name} is {self.length} lines"


def modules() -> list[Path]:
    """Every hand-written module: generated protobuf stubs (``*_pb2*.py``) left out."""
    return sorted(
        p
        for root in CODE_ROOTS
        for p in (REPO / root).rglob("*.py")
        if "_pb2" not in p.name and ".venv" not in p.parts
    )


def functions(source: str, path: str) -> Iterator[Function]:
    """Every function and method in ``source``, nested ones included."""

    def walk(node: ast.AST, prefix: str) -> Iterator[Function]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                name = prefix + child.name
                end = child.end_lineno or child.lineno
                yield Function(path, child.lineno, name, end - child.lineno + 1)
                yield from walk(child, name + ".")
            elif isinstance(child, ast.ClassDef):
                yield from walk(child, prefix + child.name + ".")
            else:
                yield from walk(child, prefix)

    yield from walk(ast.parse(source, filename=path), "")


def too_long(source: str, path: str) -> list[Function]:
    """The functions of ``source`` over the limit and not on the allow-list."""
    return [
        f
        for f in functions(source, path)
        if f.length > MAX_FUNCTION_LINES and (path, f.name) not in LONG_ALLOWED
    ]


def _relative(p: Path) -> str:
    return p.relative_to(REPO).as_posix()


def test_no_hand_written_module_is_over_700_lines() -> None:
    over = []
    for p in modules():
        lines = len(p.read_text(encoding="utf-8").splitlines())
        if lines > MAX_MODULE_LINES:
            over.append(f"{_relative(p)}: {lines} lines")
    assert not over, (
        f"modules over {MAX_MODULE_LINES} lines (docs/design.md): "
        + "; ".join(over)
        + ". Move a part with a name of its own into a new module beside it (and name "
        "that module in docs/design.md's table of where code goes)."
    )


def test_no_function_is_over_80_lines() -> None:
    found: list[Function] = []
    seen: set[tuple[str, str]] = set()
    for p in modules():
        path = _relative(p)
        source = p.read_text(encoding="utf-8")
        found.extend(too_long(source, path))
        seen.update((path, f.name) for f in functions(source, path))
    assert not found, (
        f"functions over {MAX_FUNCTION_LINES} lines (issue 28, docs/development.md):\n"
        + "\n".join(f"  {f}" for f in found)
        + "\nSplit each along its seams into helpers named in the field's words, with "
        "docstrings that say why; only argument-parser builders may be longer, named "
        "in LONG_ALLOWED in tests/integration/test_architecture.py."
    )
    # An entry that names nothing would let a future function of that name through.
    stale = sorted(LONG_ALLOWED - seen)
    assert not stale, f"LONG_ALLOWED names functions that do not exist; remove them: {stale}"


def test_lengths_are_counted_from_def_to_last_line() -> None:
    # The measure itself: 81 lines is over, 80 is not, decorators do not count,
    # methods and nested functions are found and named.
    def body(name: str, lines: int, indent: str = "") -> str:
        return f"{indent}def {name}():\n" + f"{indent}    x = 1\n" * (lines - 1)

    source = (
        "import functools\n"
        "@functools.cache\n"
        "@functools.wraps(print)\n"
        + body("fits", 80)
        + body("over", 81)
        + "class Reader:\n"
        + body("method", 81, "    ")
        + body("outer", 3)
        + body("inner", 81, "    ")
    )
    found = {(f.name, f.line, f.length) for f in too_long(source, "x.py")}
    # A function is as long as what it holds: ``outer`` is over with ``inner``.
    assert found == {
        ("over", 84, 81),
        ("Reader.method", 166, 81),
        ("outer", 247, 84),
        ("outer.inner", 250, 81),
    }
    allowed = too_long(body("build_parser", 200), "exporter/cli.py")
    assert allowed == []

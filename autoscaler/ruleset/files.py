"""Which files a list of rule paths names: the files given, and the rule files
directly inside each directory given.

Kept apart from ``loader`` (which re-exports it) because finding files is about
the filesystem, not about what a rule says: every path that does not exist, or
cannot be listed, is a ``Problem`` like any in a file, so ``check`` reports them
all together.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from autoscaler.ruleset.errors import Problem, whole_file

RULE_FILE_SUFFIXES = (".yaml", ".yml")


def rule_files(paths: Sequence[str | Path]) -> tuple[list[str], list[Problem]]:
    """The rule files that ``paths`` name: files as given, and the ``*.yaml``/``*.yml``
    files directly inside a directory (so ``rules/tests/`` is not read). A path that
    does not exist, or a directory without rule files, is a problem."""
    files: list[str] = []
    problems: list[Problem] = []
    seen: set[Path] = set()
    for raw in paths:
        path = Path(raw)
        try:
            if path.is_dir():
                found = sorted(
                    c for c in path.iterdir() if c.is_file() and c.suffix in RULE_FILE_SUFFIXES
                )
                if not found:
                    problems.append(
                        Problem(whole_file(str(path)), "no rule files (*.yaml, *.yml) in directory")
                    )
            elif path.exists():
                found = [path]
            else:
                problems.append(Problem(whole_file(str(raw)), "no such file or directory"))
                continue
        except (OSError, ValueError) as e:
            # A name too long for the system, a NUL byte, a directory that cannot
            # be listed: pathlib passes these through where it says False to others.
            problems.append(Problem(whole_file(str(raw)), f"cannot read: {_reason(e)}"))
            continue
        for f in found:
            key = f.resolve()
            if key not in seen:
                seen.add(key)
                files.append(str(f))
    return files, problems


def _reason(e: Exception) -> str:
    return (e.strerror if isinstance(e, OSError) else None) or str(e)

"""An mkdocs hook that writes the actions page's parameter tables from the actions
themselves, at build time, so that the documentation cannot drift from the code.

Each action keeps its parameters, defaults and validation beside it
(``autoscaler/actions/<name>.py``: a frozen ``Params`` dataclass and a ``validate``
function, registered in ``ACTIONS``). A hand-copied table would go stale the first
time a default changed, so every fact in the tables comes from the registry:

* the parameters and their order: ``ActionSpec.keys``;
* the defaults: ``validate({})`` (a parameter it reports missing is required);
* what a parameter accepts: found by asking ``validate`` about sample values, so
  the table says what the validation really enforces (a duration, > 0, a whole
  number of at least 1, a choice);
* the targets and whether a rule's ``recover`` can undo the action: the spec.

Only the prose meaning of each parameter is not in the spec; it comes from the
``Parameters:`` table in the action module's docstring, and a parameter without a
row there stops the build, so a new parameter cannot go undocumented.

The page asks for the tables with the marker ``<!-- action-parameters -->``.

Lists of actions elsewhere are generated for the same reason: a list written by hand
goes stale the day an action is added. Two more markers, usable on any page:

* ``<!-- action-summary -->``: a table of every action with its targets, whether a
  ``recover`` undoes it, and what it does, the first paragraph of its module
  docstring, after the action's name that opens it;
* ``<!-- action-names: SELECTION -->``: the names inline, in the registry's order,
  for a sentence to carry. ``SELECTION`` is ``all``, ``reversible`` (a ``recover``
  can undo them: ``check`` warns when a rule with one has none, and ``repeat`` is
  refused on them), ``irreversible`` (``recover`` refused, ``repeat`` allowed) or
  ``breaker`` (what the circuit breaker counts as a node under remediation,
  ``UNHEALTHY_ACTIONS``). An unknown selection stops the build.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from typing import Any, NamedTuple

from autoscaler.actions import ACTIONS, ActionSpec
from autoscaler.engine.breaker import UNHEALTHY_ACTIONS

MARKER = "<!-- action-parameters -->"
SUMMARY_MARKER = "<!-- action-summary -->"
NAMES_MARKER = re.compile(r"<!-- action-names: *([a-z]+) *-->")

_BORDER = re.compile(r"^=+(\s+=+)+\s*$")
_KEY_CELL = re.compile(r"``([^`]+)``\s*")
_GAP = re.compile(r"\s{2,}")


class DocRow(NamedTuple):
    """One row of an action docstring's ``Parameters:`` table (a NamedTuple: mkdocs
    loads a hook from its path, outside ``sys.modules``, where a dataclass cannot be
    made)."""

    key: str
    meaning: str
    default: str


def docstring_rows(spec: ActionSpec) -> dict[str, DocRow]:
    """The rows of the RST simple table under ``Parameters:`` in the action's module
    docstring, keyed by parameter. Rows may wrap: a line whose first column is empty
    continues the row above, in the column its text starts under."""
    module = importlib.import_module(f"autoscaler.actions.{spec.name}")
    doc = module.__doc__ or ""
    lines = doc.split("Parameters:", 1)[1].splitlines() if "Parameters:" in doc else []
    borders = [i for i, line in enumerate(lines) if _BORDER.match(line)]
    if len(borders) < 2:
        return {}
    # Column starts from the first border: runs of '='.
    starts = [m.start() for m in re.finditer(r"=+", lines[borders[0]])]
    default_start = starts[2] if len(starts) > 2 else len(lines[borders[0]]) + 1
    rows: dict[str, tuple[list[str], list[str]]] = {}
    key = ""
    for line in lines[borders[0] + 1 : borders[1]]:
        if not line.strip():
            continue
        offset = len(line) - len(line.lstrip())
        if offset == 0:
            match = _KEY_CELL.match(line)
            if match is None:
                raise ValueError(f"{spec.name}: a parameter row without a ``key``: {line!r}")
            key = match.group(1)
            rows[key] = ([], [])
            offset = match.end()
        if not key:
            raise ValueError(f"{spec.name}: the parameter table starts with a continuation")
        meaning, default = rows[key]
        rest = line[offset:]
        position = offset
        for chunk in _GAP.split(rest.strip()):
            at = line.index(chunk, position)
            position = at + len(chunk)
            (default if at >= default_start - 1 else meaning).append(chunk)
    return {
        k: DocRow(k, _markdown(" ".join(m)), _markdown(" ".join(d))) for k, (m, d) in rows.items()
    }


def _markdown(rst: str) -> str:
    return rst.replace("``", "`")


def format_duration(seconds: float) -> str:
    """Seconds as the rule files write them: ``600`` is ``10m``, ``5400`` is ``1h30m``."""
    if seconds == 0:
        return "0s"
    millis = round(seconds * 1000)
    out = ""
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        count, millis = divmod(millis, size)
        if count:
            out += f"{count}{unit}"
    return out + (f"{millis}ms" if millis else "")


def _problems(spec: ActionSpec, key: str, value: Any) -> list[str]:
    _, problems = spec.validate({key: value})
    return [p.message for p in problems if p.param == key]


def accepts(spec: ActionSpec, key: str) -> str:
    """What ``validate`` accepts for ``key``, found by trying sample values."""
    if not _problems(spec, key, True) and _problems(spec, key, 1):
        return "true or false"
    # A label selector takes "90s" too (a label key), but no duration takes a word.
    if not _problems(spec, key, "90s") and _problems(spec, key, "app"):
        return "duration > 0" if _problems(spec, key, "0s") else "duration"
    if not _problems(spec, key, 0.5):
        # A ratio: its bounds are in what the validation says about a wrong type.
        for message in _problems(spec, key, "?"):
            if m := re.search(r"a number from (\S+) to (\S+),", message):
                return f"number {m.group(1)}–{m.group(2)}"
        return "number"
    if not _problems(spec, key, 2):
        least = next(n for n in (0, 1, 2) if not _problems(spec, key, n))
        return f"whole number ≥ {least}"
    for message in _problems(spec, key, "?"):
        if m := re.match(r"must be (.+?), got", message):
            return " or ".join(f"`{c}`" for c in m.group(1).split(" or "))
    return "string"


def _default(spec: ActionSpec, key: str, kind: str, docs: DocRow) -> str:
    defaults, problems = spec.validate({})
    if any(p.param == key for p in problems):
        return "required"
    value = defaults.get(key)
    if value is None:
        return docs.default or "unset"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if kind.startswith("duration"):
        return f"`{format_duration(float(value))}`"
    if isinstance(value, float):
        return f"`{value:g}`"
    return f"`{value}`"


def action_section(spec: ActionSpec) -> str:
    """One action's heading, targets, undo, and parameter table, as Markdown."""
    targets = ", ".join(f"`{t}`" for t in spec.targets)
    undo = (
        "a rule's `recover` block can undo it"
        if spec.reversible
        else "it cannot be undone, so a rule with it has no `recover`"
    )
    out = [f"### `{spec.name}`", "", f"Targets: {targets}; {undo}.", ""]
    if not spec.keys:
        return "\n".join([*out, "No parameters.", ""])
    docs = docstring_rows(spec)
    undocumented = [k for k in spec.keys if k not in docs]
    if undocumented:
        raise ValueError(
            f"autoscaler/actions/{spec.name}.py: the docstring's Parameters table has no row "
            f"for {', '.join(undocumented)}"
        )
    out += ["| parameter | accepts | default | meaning |", "|---|---|---|---|"]
    for key in spec.keys:
        kind = accepts(spec, key)
        default = _default(spec, key, kind, docs[key])
        out.append(f"| `{key}` | {kind} | {default} | {docs[key].meaning} |")
    return "\n".join([*out, ""])


def parameter_tables() -> str:
    """Every registered action, in the registry's order."""
    return "\n".join(action_section(spec) for spec in ACTIONS.values())


def summary(spec: ActionSpec) -> str:
    """What the action does: the first paragraph of its module docstring, without
    the action's name and colon that open it, as one Markdown line."""
    module = importlib.import_module(f"autoscaler.actions.{spec.name}")
    first = (module.__doc__ or "").strip().split("\n\n", 1)[0]
    lead = f"``{spec.name}``:"
    if not first.startswith(lead):
        raise ValueError(
            f"autoscaler/actions/{spec.name}.py: the module docstring must start with "
            f"'{lead} what it does', the sentence the actions table shows"
        )
    return _markdown(" ".join(first[len(lead) :].split()))


def summary_table() -> str:
    """Every registered action, in the registry's order, each linked to its parameter
    section on the actions page (the page this marker is meant for)."""
    rows = ["| action | targets | a `recover` undoes it | what it does |", "|---|---|---|---|"]
    for spec in ACTIONS.values():
        undo = "yes" if spec.reversible else "no"
        targets = ", ".join(spec.targets)
        rows.append(f"| [`{spec.name}`](#{spec.name}) | {targets} | {undo} | {summary(spec)} |")
    return "\n".join(rows)


# The selections an ``action-names`` marker may ask for; each is a fact of the code.
SELECTIONS: dict[str, Callable[[ActionSpec], bool]] = {
    "all": lambda spec: True,
    "reversible": lambda spec: spec.reversible,
    "irreversible": lambda spec: not spec.reversible,
    "breaker": lambda spec: spec.name in UNHEALTHY_ACTIONS,
}


def action_names(selection: str) -> str:
    """The selected actions as a Markdown phrase: "`a`, `b` and `c`"."""
    keep = SELECTIONS.get(selection)
    if keep is None:
        raise ValueError(
            f"<!-- action-names: {selection} -->: no such selection; "
            f"use one of {', '.join(SELECTIONS)}"
        )
    names = [f"`{spec.name}`" for spec in ACTIONS.values() if keep(spec)]
    if len(names) < 2:
        return "".join(names)
    return f"{', '.join(names[:-1])} and {names[-1]}"


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    """mkdocs hook: replace the markers with the generated tables and lists."""
    if MARKER in markdown:
        markdown = markdown.replace(MARKER, parameter_tables())
    if SUMMARY_MARKER in markdown:
        markdown = markdown.replace(SUMMARY_MARKER, summary_table())
    return NAMES_MARKER.sub(lambda m: action_names(m.group(1)), markdown)

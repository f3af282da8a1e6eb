"""An mkdocs hook that writes each vendor page's fault-code table from the fault
catalogue itself (``exporter/faults/``), at build time, so that the documentation
cannot drift from the classes the exporter publishes.

A page asks for its vendor's table with the marker ``<!-- fault-codes: VENDOR -->``
(``nvidia``, ``amd``, ``oneapi``, ``gaudi``, ``ascend``, ``tpu``). Every row comes
from the catalogue entry: the code, its name, severity, action class and the
vendor source the class is taken from; the last column says what the shipped rules
do for that class, and, for a vendor whose devices the node agent cannot reset
(``accel_common.remedies.RESETTABLE_VENDORS``), that a reset step is skipped. An
unknown vendor in a marker stops the build.
"""

from __future__ import annotations

import re
from typing import Any

from accel_common.remedies import UNKNOWN_CLASS, ActionClass, can_reset
from exporter import faults

MARKER = re.compile(r"<!-- fault-codes: *([a-z]+) *-->")

# What the shipped rules do for each class (docs/rules.md has the ladders).
DOES: dict[ActionClass, str] = {
    "ignore": "nothing but the counter",
    "app": "requeue the job; the device stays in service",
    "watch": "nothing but the counter (a rule can single the code out, or count repeats)",
    "reset_when_idle": "keep new work off, reset once the device is idle; no job is moved",
    "reset": "move the jobs, then the ladder's reset step",
    "reboot": "move the jobs, then the ladder's reboot step (no reset is tried)",
    "isolate": "taint, move the jobs, and mark the part for return or replacement; "
    "it does not return to service",
}
_RESETS = ("reset", "reset_when_idle")


def _cell(text: str) -> str:
    return " ".join(text.replace("|", "\\|").split())


def does(vendor: str, action: ActionClass) -> str:
    text = DOES[action]
    if action in _RESETS and not can_reset(vendor):
        text += "; the node agent cannot reset this vendor's devices, so that step is skipped"
    return text


def fault_table(vendor: str) -> str:
    """The vendor's catalogue as a Markdown table, in the catalogue's order."""
    table = faults.CATALOGUES.get(vendor)
    if table is None:
        raise ValueError(
            f"<!-- fault-codes: {vendor} -->: no such catalogue; "
            f"use one of {', '.join(faults.CATALOGUES)}"
        )
    rows = [
        "| code | name | severity | class | source | what the project does |",
        "|---|---|---|---|---|---|",
    ]
    for c in table.values():
        rows.append(
            f"| `{c.code}` | {_cell(c.name)} | `{c.severity}` | `{c.action}` | "
            f"{_cell(c.source)} | {_cell(does(vendor, c.action))} |"
        )
    rows.append(
        f"| any other code | not in the table | `{faults.UNKNOWN_SEVERITY}` | "
        f"`{UNKNOWN_CLASS}` | exporter (unknown code) | {DOES[UNKNOWN_CLASS]} |"
    )
    return "\n".join(rows)


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    """mkdocs hook: replace each marker with its vendor's table."""
    return MARKER.sub(lambda m: fault_table(m.group(1)), markdown)

"""An mkdocs hook that writes the node agent's vendor table (``docs/agent.md``) from
the declaration itself (``accel_common.agentsupport``), at build time, so that the
page cannot promise a reset or a partition kind that the agent, the controller's
actions and the simulator do not share.

A page asks for the table with the marker ``<!-- agent-support -->``. One row per
vendor, in the declaration's order: whether the agent resets its devices and how,
what must be free (and is reset) with the device, what the agent looks at after the
reset before it answers ``done``, the partition kinds it applies, and why not where
it does neither.
"""

from __future__ import annotations

import re
from typing import Any

from accel_common.agentsupport import SUPPORT, VendorSupport

MARKER = re.compile(r"<!-- agent-support -->")


def _cell(text: str) -> str:
    return " ".join(text.replace("|", "\\|").split()) or "-"


def _row(s: VendorSupport) -> str:
    if s.reset is not None:
        reset = f"yes: `{s.reset.how}`"
        together, after = s.reset.together, s.reset.after
    else:
        reset, together, after = "no", "", ""
    parts = "; ".join(f"`{p.kind}`: {p.how}" for p in s.partitions) or "none"
    why = "; ".join(
        f"{what}: {text}"
        for what, text in (("reset", s.no_reset), ("partitions", s.no_partitions))
        if text
    )
    cells = (f"`{s.vendor}` ({s.name})", reset, together, after, parts, why)
    return "| " + " | ".join(_cell(c) for c in cells) + " |"


def support_table() -> str:
    """The declaration as a Markdown table."""
    rows = [
        "| vendor | reset | free (and reset) with it | after the reset, `done` only when "
        "| partitions | why not |",
        "|---|---|---|---|---|---|",
    ]
    rows += [_row(s) for s in SUPPORT.values()]
    return "\n".join(rows)


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    """mkdocs hook: replace the marker with the table."""
    return MARKER.sub(lambda m: support_table(), markdown)

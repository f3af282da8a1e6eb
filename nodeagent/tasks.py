"""The interface between the agent loop and the work it does (tasks).

Each kind of node-side work (partition layouts, GPU resets, reboots) is a Task: the
loop reads the Node, hands it to every task, and merges the NodePatch each returns
into one merge-patch of the Node's metadata. Tasks never talk to the API server
themselves, so a test can drive them with a plain dict and fakes in the context.

Work that must not happen unless an answer is on the Node first (a reset only after
"resetting", a reboot only after "rebooting" with the boot id) rides on the patch as
``after``: the loop writes the patch conditionally on the resourceVersion it read
(``nodeagent.agent``), and runs the work only when that write succeeded, handing it
the Node as written. A controller that closed the request in between makes the write
a 409 Conflict, and the loop reads again and asks the tasks again, so the check and
the claim are one conditional write.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from exporter.model import PodAssignment

# Work that runs once its patch is on the Node, given the Node as written, and
# answers with what to write next (NodePatch.after).
Work = Callable[[Mapping[str, Any]], "NodePatch"]


@dataclass
class NodePatch:
    """A merge-patch of the Node's metadata; a value of None deletes the key.

    ``after``: work to run once this patch is on the Node, each given the Node as the
    write returned it and answering with the patch to write next (what it did)."""

    labels: dict[str, str | None] = field(default_factory=dict)
    annotations: dict[str, str | None] = field(default_factory=dict)
    after: list[Work] = field(default_factory=list)

    def update(self, other: NodePatch) -> None:
        """Merges ``other`` into this patch (later tasks win on the same key)."""
        self.labels.update(other.labels)
        self.annotations.update(other.annotations)
        self.after.extend(other.after)

    def empty(self) -> bool:
        return not self.labels and not self.annotations and not self.after


@dataclass
class AgentContext:
    """What a task may touch on the node; tests fill it with fakes."""

    node_name: str
    nvml: Any | None  # pynvml module or tests' FakeNVML; None: no NVIDIA
    amdsmi: Any | None  # amdsmi module or fake; None: no AMD
    sysfs_root: Path  # "/sys" on a host, a fixture tree in tests
    holders: Callable[[], list[PodAssignment]]  # containers holding devices now
    clock: Callable[[], float]
    boot_id: Callable[[], str]
    reboot: Callable[[], None]  # a host reboot in production, a fake in tests
    nvidia_reset: Callable[[list[str]], None] | None  # RESET provides the real one
    # Where the agent asks the exporter to let go of NVML for a reset, and how long it
    # waits for the answer (nodeagent.nvmlrelease); None: no exporter is asked.
    nvml_hold_dir: Path | None = None
    nvml_release_wait: float = 30.0
    # The host's procfs, where the processes holding a GPU's device file are looked
    # for before an NVIDIA reset (nodeagent.devholders); None: not looked for.
    procfs: Path | None = None


class Task(Protocol):
    """One kind of node-side work, driven by the agent loop."""

    name: str

    def start(self, ctx: AgentContext) -> NodePatch:
        """Called once when the agent starts."""
        ...

    def reconcile(self, node: Mapping[str, Any], ctx: AgentContext) -> NodePatch:
        """Called every interval with the freshly read Node (a plain dict)."""
        ...

"""The node agent's hold on NVML, as the nvidia backend sees it
(``accel_common.nvmlhold``): while the agent resets GPUs, the backend has let go of
NVML and says so, and it discovers again once the hold ends.

Why it is built this way:

* **Looked at once a poll**, from ``layout_changed`` (the poller asks it before
  every poll of a discovered backend) and at the start of ``discover``: one bounded
  read of a file that is almost always absent.
* **Let go first, answer after.** The backend closes NVML (every handle, the Xid
  event set, GPM samples, ``nvmlShutdown``) before it writes its answer, so an agent
  that reads the answer finds the GPUs free of this client.
* **Down, with the reason.** Discovery raises ``BackendUnavailableError`` naming the
  reset, so ``accel_exporter_backend_up`` is 0 and each GPU's ``accel_up`` is 0 with
  that reason for the reset's length (seconds: shorter than the ``for`` of the rule
  that taints a lost device), and the backend is asked again at the next poll.
* **A broken hold file is no hold.** It is said once, and NVML stays open: the
  exporter is never blinded by a file it cannot read.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from accel_common.nvmlhold import Hold, HoldError, read_hold, write_released
from exporter.model import BackendUnavailableError

log = logging.getLogger("accel_exporter.nvidia")

# Asked to discover again this soon (in practice: at the next poll).
RETRY_SECONDS = 1.0


class AgentHold:
    """The hold in ``directory`` (None: never held)."""

    def __init__(self, directory: Path | None, clock: Callable[[], float] = time.time) -> None:
        self.directory = directory
        self.clock = clock
        self._said = ""

    def current(self) -> Hold | None:
        if self.directory is None:
            return None
        try:
            hold = read_hold(self.directory, self.clock())
        except HoldError as e:
            if str(e) != self._said:
                self._said = str(e)
                log.warning("the node agent's NVML hold is unreadable, NVML stays open: %s", e)
            return None
        self._said = ""
        return hold

    def let_go(self, hold: Hold) -> BackendUnavailableError:
        """Answers ``hold`` (NVML already closed); the error discovery raises."""
        assert self.directory is not None
        try:
            write_released(self.directory, hold.id, self.clock())
        except OSError as e:
            log.warning("NVML let go for reset %s, but the answer was not written: %s", hold.id, e)
        until = datetime.fromtimestamp(hold.until, UTC).strftime("%H:%M:%SZ")
        return BackendUnavailableError(
            f"NVML let go while the node agent resets GPUs (request {hold.id}, until "
            f"{until} at the latest); discovering again once the reset is over",
            retry_seconds=RETRY_SECONDS,
        )

"""Every NVML client of the node lets go of the GPUs for ``nvidia-smi --gpu-reset``:
the exporter, asked through the hold file (``accel_common.nvmlhold``), and this
agent itself.

Why it is built this way:

* nvidia-smi's manual: no application may be using a GPU being reset, monitoring
  applications such as another nvidia-smi included, and ``nvmlInit`` attaches every
  GPU. The agent keeps NVML open for its looks and layouts, and the exporter on the
  same node keeps it open to poll: left so, the reset fails "in use" and the ladder
  reboots the node for a reason of our own making.
* **The exporter first, and waited for.** The hold names the request and ends by
  itself (``until``); the agent waits, bounded (``AgentContext.nvml_release_wait``),
  for the exporter's answer naming the same request. No answer (no exporter on this
  node, or one that does not share the directory) is said in the reset's message and
  the reset goes ahead: nvidia-smi is the one that knows whether the GPU is free.
* **The agent's own NVML last, and back at once.** ``nvmlShutdown`` right before
  nvidia-smi and ``nvmlInit`` right after, so that the look after the reset reads
  NVML as a fresh client would; a failed ``nvmlInit`` is an error of the reset, in
  words. The hold is removed when the reset is over, whatever happened, and the
  exporter discovers again at its next poll.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager

from accel_common.nvmlhold import (
    Hold,
    HoldError,
    clear_hold,
    read_released,
    write_hold,
)
from nodeagent.tasks import AgentContext

log = logging.getLogger("accel_node_agent.reset")

NOT_RESTARTED = "NVML did not start again after the reset"
# How often the agent looks for the exporter's answer while it waits.
ANSWER_POLL_SECONDS = 0.1
# The hold outlasts the wait, nvidia-smi's own limit and the look after it.
HOLD_MARGIN_SECONDS = 360.0


@contextmanager
def nvml_released(ctx: AgentContext, rid: str) -> Iterator[list[str]]:
    """NVML let go by the exporter (asked, waited for) and by this agent while the
    body runs. Yields a list that ends up holding what went wrong in doing so, in
    words, for the reset's message."""
    notes: list[str] = []
    held = _hold(ctx, rid, notes)
    own = _shut_down(ctx, notes)
    try:
        yield notes
    finally:
        if own:
            assert ctx.nvml is not None
            try:
                ctx.nvml.nvmlInit()
            except Exception as e:  # the driver's state after a reset is the question
                notes.append(f"{NOT_RESTARTED}: {type(e).__name__}")
        if held and ctx.nvml_hold_dir is not None:
            try:
                clear_hold(ctx.nvml_hold_dir)
            except OSError as e:
                log.warning("reset %s: the NVML hold was not removed: %s", rid, e)


def _hold(ctx: AgentContext, rid: str, notes: list[str]) -> bool:
    """Asks the exporter to let go and waits for its answer; whether a hold was
    written (to be removed after)."""
    directory = ctx.nvml_hold_dir
    if directory is None:
        return False
    wait = ctx.nvml_release_wait
    until = ctx.clock() + wait + HOLD_MARGIN_SECONDS
    try:
        write_hold(directory, Hold(rid, until), by=f"accel-node-agent on {ctx.node_name}")
    except OSError as e:
        notes.append(f"the exporter was not asked to let go of NVML ({directory}: {e})")
        return False
    deadline = time.monotonic() + wait
    while True:
        try:
            if read_released(directory) == rid:
                return True
        except HoldError as e:
            log.warning("reset %s: %s", rid, e)
        if time.monotonic() >= deadline:
            break
        time.sleep(ANSWER_POLL_SECONDS)
    notes.append(
        f"no exporter said it let go of NVML within {wait:g}s (none runs on this node, "
        f"or it does not share {directory})"
    )
    return True


def _shut_down(ctx: AgentContext, notes: list[str]) -> bool:
    """This agent's own NVML closed; whether it was (to open it again after)."""
    nvml = ctx.nvml
    if nvml is None:
        return False
    try:
        nvml.nvmlShutdown()
    except Exception as e:  # not shut down: still ours, and nvidia-smi will say so
        notes.append(f"this agent could not let go of NVML: {type(e).__name__}")
        return False
    return True

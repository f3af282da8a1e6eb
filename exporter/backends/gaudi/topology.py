"""The links between the Gaudis of one host: on-chip RoCE ports, else the PCIe tree.

What HLML tells and what it does not:

* ``hlml_get_mac_addr_info`` gives each device two port masks: every enabled RoCE
  port, and those of them that are external (scale-out, cabled out of the box). The
  others are internal: wired on the baseboard to the other Gaudis of the host.
  ``hlml_nic_get_link`` says whether a port's link is up.
* HLML does not say which peer an internal port reaches. Intel's HLS baseboards
  (HLS-Gaudi2, HLS-Gaudi3) wire their 8 Gaudis all-to-all, 3 ports to each of the
  other 7 (21 internal ports, 3 external), so a device's internal ports that are up,
  divided by the 7 peers of the board, is the number of links it has to each peer.
  A down port lowers that figure for the device as a whole, since HLML cannot say
  which peer lost it. A device with no internal port (a PCIe card) has RoCE peers
  only through a switch, which is the network's business, not this host's topology.
* Every pair without RoCE links is placed by its PCIe path in sysfs
  (``exporter.pcitopo``), as the other vendors are.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

from exporter.backends.gaudi.device import Gaudi
from exporter.backends.gaudi.hlml import Hlml, HlmlError
from exporter.model import Link
from exporter.pcitopo import pcie_links

log = logging.getLogger("accel_exporter.gaudi")

# The other Gaudis each Gaudi of an HLS baseboard is wired to.
BOARD_PEERS = 7


def internal_ports_up(lib: Hlml, gpu: Gaudi) -> int:
    """How many of the device's internal RoCE ports have their link up; 0 when HLML
    cannot say (no port masks), never a guess."""
    try:
        ports, external = lib.port_masks(gpu.handle)
    except HlmlError as e:
        log.debug("%s: no RoCE port masks: %s", gpu.name, e)
        return 0
    internal = [p for p in range(ports.bit_length()) if (ports & ~external) >> p & 1]
    up = 0
    for port in internal:
        try:
            up += lib.port_up(gpu.handle, port)
        except HlmlError as e:
            # Without a link state, an enabled internal port is taken as wired:
            # the masks already say it exists on the board.
            log.debug("%s: port %d link state unknown: %s", gpu.name, port, e)
            up += 1
    return up


def links(lib: Hlml, gpus: Sequence[Gaudi], sysfs: Path) -> list[Link]:
    per_peer = {g.name: internal_ports_up(lib, g) // BOARD_PEERS for g in gpus if not g.lost}
    out: list[Link] = []
    joined: set[tuple[str, str]] = set()
    for a in gpus:
        for b in gpus:
            if a is b:
                continue
            n = min(per_peer.get(a.name, 0), per_peer.get(b.name, 0))
            if n > 0:
                out.append(Link(a.name, b.name, "roce", n))
                joined.add((a.name, b.name))
    out.extend(
        link
        for link in pcie_links(sysfs, [g.info for g in gpus])
        if (link.device, link.peer_device) not in joined
    )
    return out

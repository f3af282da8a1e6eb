"""``make demo``: the exporter on this host, with its real backends plus a simulated
8-GPU NVIDIA and 4-GPU AMD node that plays a fault timeline, and where to look."""

from __future__ import annotations

import os
import sys
from importlib import resources

from exporter import backends, cli


def main() -> int:
    address = os.environ.get("DEMO_ADDRESS", "127.0.0.1:9835")
    script = resources.files("exporter") / "data" / "demo-faults.yaml"
    real = backends.default_backends()
    base = f"http://{address}"
    print(
        f"""
accel-exporter demo
  real backends : {", ".join(real)} (a missing driver shows accel_exporter_backend_up 0)
  simulated     : nvidia:8 (H100), amd:4 (MI300X), faults from {script}

Where to look:
  {base}/metrics      the exposition Prometheus scrapes
  {base}/healthz      liveness, and each backend up or down
  {base}/             landing page

Try:
  curl -s {base}/metrics | grep -E '^accel_(up|fault_events_total)'
  curl -s {base}/metrics | grep 'severity="fatal"'     # nvidia3's Xid 79 at 30s
  curl -s {base}/metrics | grep accel_exporter_backend_up

Timeline: 30s nvidia3 Xid 79 and lost; 45s nvidia6 Xid 13 (info);
          60s amd1 uncorrectable RAS + 2 ECC; 75s nvidia5 pinned at 100%/91C; 120s nvidia3 back.
Ctrl-C stops it.
""",
        flush=True,
    )
    return cli.main(
        [
            "--web.listen-address",
            address,
            "--backends",
            ",".join([*real, "sim"]),
            "--sim-devices",
            "nvidia:8,amd:4",
            "--sim-script",
            str(script),
            "--poll-interval",
            "2s",
        ]
    )


if __name__ == "__main__":
    sys.exit(main())

"""The node agent: privileged work on one node that the controller must not do itself.

The controller asks through the Node's labels and annotations (the "agent channel"
in docs/agent.md); this agent, one per node as its own DaemonSet, carries the request
out against the local devices (partition layouts, resets, reboots) and answers on the
same Node. It may import ``exporter`` (the backends and the kubelet client) and
``accel_common``, never ``autoscaler``.
"""

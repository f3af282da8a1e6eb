"""The kubelet's PodResources gRPC API (v1): the proto and its generated stubs.

The ``*_pb2*`` modules are generated from ``podresources.proto`` by ``make proto``
and committed, so that installing the exporter needs no protobuf compiler.
"""

"""kubelet's plugin APIs a DRA driver serves: the protos and protoc's ``api_pb2`` (SOURCES.md)."""

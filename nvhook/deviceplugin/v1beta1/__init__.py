"""The kubelet device-plugin API v1beta1: ``api.proto`` and protoc's ``api_pb2`` (SOURCES.md)."""

"""A subset of the CRI v1 API: ``api.proto`` and protoc's ``api_pb2`` (SOURCES.md)."""

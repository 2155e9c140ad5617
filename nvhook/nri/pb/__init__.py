"""NRI's API (``api.proto``) and ttRPC's envelope (``ttrpc.proto``), protoc's output: SOURCES.md."""

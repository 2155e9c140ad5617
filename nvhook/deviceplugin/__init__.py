"""The Kubernetes device plugin (``nvhook device-plugin``): GPUs as kubelet resources.

What is advertised and how an allocation is answered is plain logic over values
(:mod:`.model`, :mod:`.resources`, :mod:`.allocate`, :mod:`.preferred`, :mod:`.health`),
independent of the gRPC layer (:mod:`.server`) so that another front end (DRA) can reuse
it; the YAML configuration is validated with pydantic in :mod:`.config` only. Never on a
container's start path.
"""

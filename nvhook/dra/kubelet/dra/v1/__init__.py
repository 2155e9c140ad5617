"""See ``nvhook/dra/kubelet/SOURCES.md``."""

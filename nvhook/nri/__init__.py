"""The NRI plugin (``nvhook nri-plugin``): ttRPC and NRI's multiplexer (:mod:`.ttrpc`), what one
container gets (:mod:`.inject`, over :mod:`nvhook.create`), the daemon (:mod:`.plugin`)."""

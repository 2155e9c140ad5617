"""The tools beside the start path: ``explain``, ``info``, ``generate``, ``demo``, launchers.

Nothing here runs when a container starts; a test keeps the shim's modules from importing it.
"""

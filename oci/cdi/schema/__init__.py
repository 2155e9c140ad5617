"""The official CDI JSON schema (``schema.json`` + ``defs.json``), shipped as package data.

Copied verbatim from tags.cncf.io/container-device-interface (Apache-2.0); see
``SOURCES.md`` here. :mod:`oci.cdi.validate` loads them with
``importlib.resources``.
"""

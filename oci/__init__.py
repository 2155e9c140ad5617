"""Vendor-neutral OCI runtime-spec and CDI machinery (never imports nvhook, pynvml, click).

Import what you use from its submodule (``from oci.cdi.registry import Registry``): this
package re-exports nothing and imports nothing, because the runtime shim imports
``oci.argv`` on every call and must not pay for the rest (docs/architecture.md, D5).
``tests/test_layers.py`` states and checks what ``oci`` may import.
"""

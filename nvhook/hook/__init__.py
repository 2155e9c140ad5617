"""``nvhook-hook``: the OCI hooks nvhook injects into containers (docs/architecture.md D7).

Each command reads the container's OCI state on stdin (runc writes it there),
finds what it needs from it, and does one small job:

=================  ===============  ===============================================
command            lifecycle        what it does
=================  ===============  ===============================================
create-container   createContainer  all of a container's createContainer work in one
                                    process (one interpreter start): the private driver
                                    params of ``--params`` (see :mod:`.device_files`), the
                                    links of ``--link`` and ``--device-link``, then the ld
                                    cache of ``--folder``; what
                                    nvhook injects (``create-symlinks`` and
                                    ``update-ldcache`` stay for specs made before)
update-ldcache     createContainer  writes ``/etc/ld.so.conf.d/00-nvhook.conf`` for the
                                    driver's library folders and runs the host's
                                    ``ldconfig -r ROOTFS`` (see :mod:`.ldcache`)
create-symlinks    createContainer  creates links such as ``libcuda.so -> libcuda.so.1``,
                                    idempotently (see :mod:`.symlinks`)
netdev             createRuntime    moves host network interfaces into the container's
                                    network namespace and renames them (see :mod:`.netdev`)
prestart           prestart         hook mode: devices, device cgroup, driver mounts, ld
                                    cache and links for a created container, as the shim
                                    would have put them in its spec (see :mod:`.prestart`)
=================  ===============  ===============================================

Hooks run as root on the host over a rootfs the image controls, so every path in
it goes through :mod:`nvhook.rootfs.safepath`, and the injected hooks carry an explicit
environment and an isolated interpreter (:mod:`nvhook.discover.hooks`).

The package's modules are the steps (rank 3 of the start path, docs/architecture.md
section 4): :mod:`.args` (the command line), :mod:`.create_container` (the
createContainer steps in their order) and one module per job; the process entry
point, :mod:`.dispatch` (``nvhook-hook``), and hook mode, :mod:`.prestart`, sit above
them (rank 9) and nothing imports them. This package's own module runs nothing:
each command's module is imported when it runs.

Exit codes (:class:`oci.errors.ExitCode`): 0 done (or an optional step skipped,
with the reason on stderr), 2 usage, 3 unreadable state or config.json, 11 the
hook refused to act (a path escaping the rootfs, a conflicting link, a missing
interface).
"""

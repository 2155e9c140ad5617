"""``create-container``: a container's createContainer work in one process, in its order.

First, with ``--params``, the private copy of the driver's params (:mod:`.device_files`);
then the links of ``--link`` and ``--device-link`` (:mod:`.create_symlinks`: ldconfig
then sees the SONAME links); then the application profile of ``--application-profile``
(:mod:`.app_profile`: EGL and Vulkan see only the container's GPUs); then the ld cache of
``--folder`` (:mod:`.update_ldcache`), with the image's CUDA compat folder first where
``--cuda-compat`` finds it newer (:mod:`.cuda_compat`). The older ``create-symlinks`` and
``update-ldcache`` commands and hook mode (:mod:`.prestart`) run the same function.
"""

from __future__ import annotations

from oci.errors import Error

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

__all__ = ["create_container"]


def create_container(
    rootfs: str,
    options: dict[str, list[str]],
    *,
    env: Mapping[str, str] | None = None,
    ldconfig: str | None = None,
    log: Callable[[str], None],
) -> None:
    """The steps of ``create-container`` (and of the two older commands) over ``rootfs``,
    from their parsed ``options``, in their order; hook mode (:mod:`.prestart`) runs the same.
    ``env`` is the container's (``--cuda-compat`` reads it), ``ldconfig`` the default for a
    missing ``--ldconfig``."""
    links = options.get("--link", [])
    device_links = options.get("--device-link", [])
    folders = options.get("--folder", [])
    params = options.get("--params", [])
    compat = options.get("--cuda-compat", [])
    profile = options.get("--application-profile", [])
    if profile:  # a bad path fails before any step changed the rootfs
        from nvhook.hook.app_profile import check_profile_path, write_application_profile

        check_profile_path(profile[0])
    if compat:  # the image's newer libcuda before the driver's folders (cuda_compat module)
        folders = _with_compat(rootfs, compat[0], env or {}, folders)
    if params:  # first: the driver must not make nodes for a later step's opens
        from nvhook.hook.device_files import disable_device_file_modification

        disable_device_file_modification(rootfs, params[0])
    if links or device_links:  # first: ldconfig then sees the SONAME links
        from nvhook.hook.create_symlinks import create_symlinks, parse_link

        create_symlinks(
            rootfs,
            [parse_link(spec) for spec in links],
            device_links=[parse_link(spec) for spec in device_links],
        )
    if profile:
        write_application_profile(rootfs, profile[0], log=log)
    if folders:
        from nvhook.hook.update_ldcache import update_ldcache

        given = options.get("--ldconfig", [])
        update_ldcache(rootfs, folders, ldconfig=given[0] if given else ldconfig, log=log)


def _with_compat(
    rootfs: str, host_driver: str, env: Mapping[str, str], folders: list[str]
) -> list[str]:
    from nvhook.hook.cuda_compat import Compat, compat_in
    from nvhook.hook.update_ldcache import check_folder

    found = compat_in(rootfs, env, host_driver)
    if not isinstance(found, Compat) or not found.used:
        return folders
    try:
        check_folder(found.folder)  # a name ld.so.conf cannot hold is not used
    except Error:
        return folders
    return [found.folder, *(f for f in folders if f != found.folder)]

"""Doctor checks of the driver: the kernel module, the device nodes, the persistence daemon."""

from __future__ import annotations

import os
import stat
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    pass
from nvhook.tools.doctor.base import (
    CTL_MINOR,
    NVIDIA_MAJOR,
    PERSISTENCED_SOCKET,
    Check,
    Options,
    shell_quote,
    under,
)


def check_driver(opts: Options) -> list[Check]:
    from nvhook.devices.procfs import read_driver
    from nvhook.errors import DriverError

    root = opts.root
    out: list[Check] = []
    modules = under(root, "/proc/modules")
    loaded_modules: set[str] | None = None
    try:
        with open(modules) as f:
            loaded_modules = {line.split(" ", 1)[0] for line in f}
    except OSError:
        pass  # no /proc/modules (a mock root): /proc/driver/nvidia says it
    if loaded_modules is not None and "nvidia" not in loaded_modules:
        out.append(
            Check("driver", "fail", "the nvidia kernel module is not loaded", "modprobe nvidia")
        )
        return out
    try:
        driver = read_driver(root)
    except DriverError as e:
        out.append(Check("driver", "fail", e.message, "modprobe nvidia"))
        return out
    kind = "open" if driver.open_module else "proprietary"
    gpus = len(driver.gpus)
    if gpus:
        out.append(
            Check(
                "driver",
                "ok",
                f"driver {driver.version} ({kind} kernel module), {gpus} GPU{'s' * (gpus != 1)}",
            )
        )
    else:
        out.append(
            Check(
                "driver",
                "warn",
                f"driver {driver.version} is loaded but sees no GPU (the kernel log says why)",
                "dmesg | grep -i nvrm",
            )
        )
    if loaded_modules is not None and "nvidia_uvm" not in loaded_modules:
        out.append(
            Check(
                "driver",
                "warn",
                "the nvidia_uvm module is not loaded: CUDA cannot run",
                "nvidia-modprobe -u -c 0",
            )
        )
    out += _check_nodes(opts, driver)
    out += _check_libraries(opts, driver.version)
    socket_path = under(root, PERSISTENCED_SOCKET)
    try:
        is_socket = stat.S_ISSOCK(os.stat(socket_path).st_mode)
    except OSError:
        is_socket = False
    if not is_socket:
        out.append(
            Check(
                "driver",
                "warn",
                f"{socket_path} is missing: nvidia-persistenced is not running, so GPUs are "
                "re-initialised for every container (slow starts, lost state)",
                "systemctl enable --now nvidia-persistenced",
            )
        )
    return out


#: The user-space libraries without which a container gets no GPU: (capability, stem, use).
_ESSENTIAL = (
    ("compute", "libcuda.so", "CUDA cannot run in any container"),
    ("utility", "libnvidia-ml.so", "nvidia-smi and NVML cannot run in any container"),
)


def _check_libraries(opts: Options, version: str) -> list[Check]:
    """``libcuda`` and NVML of the loaded driver's version under the driver root: a host
    with the kernel module but without them starts containers that see no GPU."""
    from nvhook.discover import discover_driver_files
    from oci.errors import Error

    driver_root = opts.driver_root or opts.root
    try:
        files = discover_driver_files(
            driver_root, ["utility", "compute"], driver_version=version, host_root=opts.root
        )
    except Error as e:
        return [Check("driver", "fail", f"cannot look for the driver's libraries: {e.message}")]
    branch = version.partition(".")[0]
    out: list[Check] = []
    found: list[str] = []
    for capability, stem, lost in _ESSENTIAL:
        names = [os.path.basename(p) for p in files.capability(capability).libraries]
        if f"{stem}.{version}" in names:
            found.append(f"{stem}.{version}")
            continue
        out.append(
            Check(
                "driver",
                "fail",
                f"{stem}.{version} is not under {driver_root} (its ld.so.cache and library "
                f"directories): {lost}",
                f"install the user-space libraries of driver {version} (Debian/Ubuntu: "
                f"libnvidia-compute-{branch}; RHEL: nvidia-driver-cuda-libs) or set "
                "host.driver_root",
            )
        )
    if found:
        out.insert(0, Check("driver", "ok", ", ".join(found)))
    return out


def _check_nodes(opts: Options, driver: Any) -> list[Check]:
    dev_root = opts.dev_root or opts.root
    mode_param = driver.params.get("DeviceFileMode", "")
    want_mode = int(mode_param) & 0o777 if mode_param.isdigit() else 0o666
    uvm = driver.majors.get("nvidia-uvm")
    nodes: list[tuple[str, int | None, int, str]] = [
        ("/dev/nvidiactl", NVIDIA_MAJOR, CTL_MINOR, "nvidia-modprobe"),
    ]
    nodes += [
        (f"/dev/nvidia{g.minor}", NVIDIA_MAJOR, g.minor, f"nvidia-modprobe -c {g.minor}")
        for g in driver.gpus
    ]
    nodes += [
        ("/dev/nvidia-uvm", uvm, 0, "nvidia-modprobe -u -c 0"),
        ("/dev/nvidia-uvm-tools", uvm, 1, "nvidia-modprobe -u -c 0"),
    ]
    out: list[Check] = []
    good = 0
    present: list[tuple[str, os.stat_result]] = []
    for node, major, minor, create in nodes:
        path = under(dev_root, node)
        try:
            st = os.stat(path)
        except OSError:
            out.append(Check("driver", "fail", f"{path} is missing", create))
            continue
        if not stat.S_ISCHR(st.st_mode):
            out.append(
                Check(
                    "driver",
                    "fail",
                    f"{path} is not a character device",
                    f"rm -f {shell_quote(path)} && {create}",
                )
            )
            continue
        found = (os.major(st.st_rdev), os.minor(st.st_rdev))
        if major is not None and found != (major, minor):
            out.append(
                Check(
                    "driver",
                    "fail",
                    f"{path} is device {found[0]}:{found[1]}, the driver's is {major}:{minor}",
                    f"rm -f {shell_quote(path)} && {create}",
                )
            )
            continue
        present.append((path, st))
        mode = stat.S_IMODE(st.st_mode)
        if mode & want_mode != want_mode:
            out.append(
                Check(
                    "driver",
                    "warn",
                    f"{path} has mode {mode:04o}, the driver gives {want_mode:04o} "
                    "(DeviceFileMode): containers running as other users cannot open it",
                    f"chmod {want_mode:04o} {shell_quote(path)}",
                )
            )
            continue
        good += 1
    if good:
        out.insert(0, Check("driver", "ok", f"{good} device nodes present, mode {want_mode:04o}"))
    return out + _check_access(present)


def _check_access(nodes: list[tuple[str, os.stat_result]]) -> list[Check]:
    """Whether the user running doctor (not root) may open the nodes: a driver loaded with
    ``NVreg_DeviceFileGID``/``DeviceFileMode`` (``root:video 0660``) lets only that group,
    and the containers of a user outside it (rootless podman: the nodes are the host's,
    bind-mounted) see no GPU. In it, rootless podman keeps the group only with
    ``--group-add keep-groups`` (crun; runc drops it)."""
    if os.geteuid() == 0 or not nodes:
        return []
    import grp
    import pwd

    uid = os.geteuid()
    try:
        user = pwd.getpwuid(uid).pw_name
    except KeyError:
        user = str(uid)
    closed = [(p, st) for p, st in nodes if not os.access(p, os.R_OK | os.W_OK)]
    groups = {st.st_gid for p, st in nodes if st.st_mode & 0o060 == 0o060 and st.st_gid}
    names = {}
    for gid in groups:
        try:
            names[gid] = grp.getgrgid(gid).gr_name
        except KeyError:
            names[gid] = str(gid)
    if not closed:
        if not groups:
            return []
        via = ", ".join(f"{names[g]} (gid {g})" for g in sorted(groups))
        return [
            Check(
                "driver",
                "ok",
                f"user {user} opens the device nodes through group {via}; rootless podman "
                "keeps it in the container with --group-add keep-groups (crun)",
            )
        ]
    path, st = closed[0]
    more = f" and {len(closed) - 1} more" if len(closed) > 1 else ""
    mode = stat.S_IMODE(st.st_mode)
    gid = st.st_gid
    if mode & 0o060 == 0o060 and gid and gid not in os.getgroups():
        name = names.get(gid, str(gid))
        return [
            Check(
                "driver",
                "fail",
                f"user {user} (uid {uid}) is not in group {name} (gid {gid}), which alone may "
                f"open {path}{more} ({mode:04o}): its containers (rootless podman) see no GPU",
                f"usermod -aG {name} {user} (then log in again) and run rootless podman with "
                "--group-add keep-groups",
            )
        ]
    return [
        Check(
            "driver",
            "fail",
            f"user {user} (uid {uid}) cannot open {path}{more} (owner {st.st_uid}, group "
            f"{gid}, mode {mode:04o}): its containers see no GPU",
            f"chmod 0666 {shell_quote(path)} (or load the driver with NVreg_DeviceFileMode)",
        )
    ]

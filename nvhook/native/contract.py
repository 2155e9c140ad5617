"""The one contract between the Python side and the two C programs: ``nvhook-contract.h``.

Every value ``nvhook-runtime.c`` and ``nvhook-hook.c`` share with Python (exit codes,
limits, paths and file names, the shim server's protocol words, runc's flag tables, the
front-end's data format, environment variable names, ...) is taken here from the module
that owns it and written into one header, checked in beside the C files, which both
``#include "nvhook-contract.h"`` (a quoted include: found beside the source whoever
compiles it). Regenerate it after changing any of these values::

    python -m nvhook.native.contract          # writes nvhook/native/nvhook-contract.h
    python -m nvhook.native.contract --check  # exit 1 when the checked-in one differs

``tests/nvhook/native/test_contract.py`` compares the checked-in header with
:func:`render` byte for byte. What stays in the C files is C's own (buffer sizes, the
JSON reader's other limits) or the kernel's (syscall numbers, flags), each with the header it
comes from.

Not on the start path: imported by the build and the tests only.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

__all__ = ["ENV_HOOK_TRACE", "HEADER", "HEADER_NAME", "main", "render", "trace_enabled"]

#: The header's file name, beside the C sources.
HEADER_NAME = "nvhook-contract.h"
#: Its path in the package.
HEADER = os.path.join(os.path.dirname(os.path.abspath(__file__)), HEADER_NAME)
#: The environment variable that makes the native hook print each handover's source line.
ENV_HOOK_TRACE = "NVHOOK_HOOK_TRACE"
_COMMAND = "python -m nvhook.native.contract"


def trace_enabled(value: str | None) -> bool:
    """Whether ``NVHOOK_HOOK_TRACE=value`` turns the native hook's tracing on: Go's
    ``strconv.ParseBool`` true after blanks are stripped, as nvhook reads every boolean
    variable (``NVIDIA_DISABLE_REQUIRE``: :mod:`nvhook.requests.values`); ``0``, ``false``,
    empty or unset: off. The C hook reads it from :data:`TRUE_WORDS <oci.argv._TRUE>` in
    the header."""
    from nvhook.requests.values import BLANKS
    from oci.argv import _TRUE

    return value is not None and value.strip(BLANKS) in _TRUE


def _c_string(text: str | bytes) -> str:
    raw = text.encode() if isinstance(text, str) else text
    out = []
    for byte in raw:
        if byte in b'"\\':
            out.append("\\" + chr(byte))
        elif byte in b"\n\t":
            out.append("\\n" if byte == 0x0A else "\\t")
        elif 0x20 <= byte < 0x7F:
            out.append(chr(byte))
        else:
            raise ValueError(f"{text!r}: only printable ASCII, tabs and newlines go in the header")
    return '"' + "".join(out) + '"'


def _list(items: Iterable[str | bytes]) -> str:
    return "{" + ", ".join([*(_c_string(i) for i in items), "NULL"]) + "}"


class _Header:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def section(self, title: str) -> None:
        self.lines += ["", f"/* --- {title} */"]

    def define(self, name: str, value: object, source: str) -> None:
        if isinstance(value, bool) or not isinstance(value, int | str | bytes):
            raise TypeError(f"{name}: {value!r} is no int or string")
        text = str(value) if isinstance(value, int) else _c_string(value)
        self.lines.append(f"#define {name} {text} /* {source} */")

    def literal(self, name: str, c_text: str, source: str) -> None:
        """A number in C's spelling (an octal mode, a long long)."""
        self.lines.append(f"#define {name} {c_text} /* {source} */")

    def strings(self, name: str, items: Sequence[str | bytes], source: str) -> None:
        """A NULL-terminated initializer: ``static const char *const X[] = NAME;``."""
        self.lines += [f"/* {source} */", f"#define {name} {_list(items)}"]


def _flag_table(h: _Header, stem: str, table: object, what: str) -> None:
    from oci.argv import _Table

    assert isinstance(table, _Table)
    aliases = [w for short, long_ in sorted(table.aliases.items()) for w in (short, long_)]
    h.strings(f"NVHOOK_{stem}_VALUES", sorted(table.values), f"{what}: flags with a value")
    h.strings(f"NVHOOK_{stem}_BOOLS", sorted(table.bools), f"{what}: flags without one")
    h.strings(f"NVHOOK_{stem}_ALIASES", aliases, f"{what}: pairs, short then long")


def _process(h: _Header) -> None:
    """Exit codes, booleans, the settings and the shim, the data file, the server."""
    from nvhook import native
    from nvhook import shim_protocol as protocol
    from nvhook.call import DEFAULT_PATH, LOG_MODE, PROG
    from nvhook.requests.values import BLANKS
    from nvhook.settings import CACHE_ENV, CONFIG_ENV, DEFAULT_CACHE_DIR, DEFAULT_CONFIG_PATH
    from oci import argv
    from oci.errors import ExitCode

    h.section("exit codes (oci.errors.ExitCode)")
    h.define("NVHOOK_EXIT_RUNTIME", ExitCode.RUNTIME, "ExitCode.RUNTIME")
    h.define("NVHOOK_EXIT_HOOK", ExitCode.HOOK, "ExitCode.HOOK")

    h.section("booleans: Go's strconv.ParseBool (oci.argv)")
    h.strings("NVHOOK_TRUE_WORDS", sorted(argv._TRUE), "oci.argv._TRUE")
    h.strings("NVHOOK_FALSE_WORDS", sorted(argv._BOOL - argv._TRUE), "oci.argv._BOOL - _TRUE")
    h.define("NVHOOK_BOOL_BLANKS", BLANKS, "stripped first: nvhook.requests.values.BLANKS")

    h.section("settings and the shim (nvhook.settings, nvhook.call)")
    h.define("NVHOOK_ENV_CONFIG", CONFIG_ENV, "nvhook.settings.CONFIG_ENV")
    h.define("NVHOOK_ENV_CACHE_DIR", CACHE_ENV, "nvhook.settings.CACHE_ENV")
    h.define("NVHOOK_DEFAULT_CONFIG", DEFAULT_CONFIG_PATH, "nvhook.settings.DEFAULT_CONFIG_PATH")
    h.define("NVHOOK_DEFAULT_CACHE_DIR", DEFAULT_CACHE_DIR, "nvhook.settings.DEFAULT_CACHE_DIR")
    h.define("NVHOOK_RUNTIME_PROGRAM", PROG, "nvhook.call.PROG")
    h.define("NVHOOK_DEFAULT_PATH", DEFAULT_PATH, "nvhook.call.DEFAULT_PATH")
    h.literal("NVHOOK_LOG_MODE", f"0{LOG_MODE:o}", "nvhook.call.LOG_MODE")

    h.section("the front-end's data file (nvhook.native)")
    h.define("NVHOOK_DATA_FORMAT", str(native.FORMAT), "nvhook.native.FORMAT")
    h.define("NVHOOK_DATA_PREFIX", native.PREFIX, "nvhook.native.PREFIX")
    h.define("NVHOOK_DATA_MAGIC", native.MAGIC, "nvhook.native.MAGIC")
    for key in ("CONFIG", "SETTINGS", "LOG", "RUNTIME", "TRIGGER", "HANDOVER", "END"):
        h.define(f"NVHOOK_DATA_{key}", getattr(native, f"KEY_{key}"), f"nvhook.native.KEY_{key}")
    h.define("NVHOOK_DATA_ABSENT", native.ABSENT, "nvhook.native.ABSENT")

    h.section("repairing a venv whose interpreter is gone (nvhook.native)")
    h.define("NVHOOK_REPAIR_SETUP", native.PACKAGE_SETUP, "nvhook.native.PACKAGE_SETUP")
    h.define("NVHOOK_REPAIR_REINSTALL", native.REINSTALL, "nvhook.native.REINSTALL")

    h.section("nvhook-shim-server's protocol (nvhook.shim_protocol)")
    h.define("NVHOOK_SERVER_SOCKET", protocol.SOCKET_NAME, "nvhook.shim_protocol.SOCKET_NAME")
    h.define("NVHOOK_SERVER_PROTOCOL", protocol.PROTOCOL, "nvhook.shim_protocol.PROTOCOL")
    h.define("NVHOOK_SERVER_MAGIC", protocol.MAGIC, "nvhook.shim_protocol.MAGIC")
    header = len(protocol.frame(b""))
    h.define("NVHOOK_SERVER_HEADER", header, "len(shim_protocol.frame(b'')): MAGIC, a length")
    h.define("NVHOOK_SERVER_MAX_REQUEST", protocol.MAX_REQUEST, "shim_protocol.MAX_REQUEST")
    h.define("NVHOOK_SERVER_FDS", protocol.FDS, "shim_protocol.FDS: cwd, stdin, stdout, stderr")
    h.define("NVHOOK_SERVER_ACK", protocol.ACK, "nvhook.shim_protocol.ACK")
    h.define("NVHOOK_SERVER_EXEC", protocol.EXEC, "nvhook.shim_protocol.EXEC")
    h.define("NVHOOK_SERVER_EXIT", protocol.EXIT, "nvhook.shim_protocol.EXIT")


def _runc(h: _Header) -> None:
    """runc's command line as oci.argv reads it."""
    from oci import argv
    from oci.bundle import CONFIG_NAME
    from oci.jsoncodec import MAX_DEPTH as JSON_MAX_DEPTH

    h.section("runc's command line, as oci.argv reads it")
    commands = sorted(argv.CREATE_COMMANDS)
    assert commands == ["create", "run"], commands
    h.define("NVHOOK_CMD_CREATE", commands[0], "oci.argv.CREATE_COMMANDS")
    h.define("NVHOOK_CMD_RUN", commands[1], "oci.argv.CREATE_COMMANDS")
    _flag_table(h, "GLOBAL", argv._GLOBAL, "oci.argv._GLOBAL")
    _flag_table(h, "CREATE", argv._COMMANDS["create"], "oci.argv._COMMANDS['create']")
    _flag_table(h, "RUN", argv._COMMANDS["run"], "oci.argv._COMMANDS['run']")
    # the long names of the flags the front-end reads, from their short forms' aliases
    flags = {
        "HELP": (argv._GLOBAL, "h", "_GLOBAL"),
        "VERSION": (argv._GLOBAL, "v", "_GLOBAL"),
        "BUNDLE": (argv._COMMANDS["create"], "b", "_COMMANDS['create']"),
        "DETACH": (argv._COMMANDS["run"], "d", "_COMMANDS['run']"),
    }
    for stem, (table, short, where) in flags.items():
        h.define(f"NVHOOK_FLAG_{stem}", table.aliases[short], f"oci.argv.{where}: -{short}")
    h.define("NVHOOK_CONFIG_JSON", CONFIG_NAME, "oci.bundle.CONFIG_NAME")
    h.define("NVHOOK_JSON_MAX_DEPTH", JSON_MAX_DEPTH, "oci.jsoncodec.MAX_DEPTH")


def _hook(h: _Header) -> None:
    """The hook's command line, the ld cache step, the compat folder, ``--params``, the
    application profile."""
    from nvhook import gpurecords
    from nvhook.constants import ENV_CUDA_COMPAT_DIR, ENV_DISABLE_CUDA_COMPAT
    from nvhook.hook import app_profile, cuda_compat, device_files
    from nvhook.hook import update_ldcache as ld
    from nvhook.hook.args import COMMANDS, PROGRAM
    from nvhook.hook.create_symlinks import SEPARATOR
    from nvhook.rootfs import safepath

    h.section("the hook's command line (nvhook.hook.args)")
    h.define("NVHOOK_HOOK_PROGRAM", PROGRAM, "nvhook.constants.HOOK_PROGRAM")
    names = ("create-container", "update-ldcache", "create-symlinks")
    for name in names:
        assert name in COMMANDS, name
        h.define(f"NVHOOK_HOOK_{name.upper().replace('-', '_')}", name, "nvhook.hook.args.COMMANDS")
    options = sorted({o for n in names for o in COMMANDS[n]})
    for option in options:
        stem = option.removeprefix("--").upper().replace("-", "_")
        h.define(f"NVHOOK_OPT_{stem}", option, "nvhook.hook.args.COMMANDS")
    h.strings("NVHOOK_UPDATE_LDCACHE_OPTIONS", sorted(COMMANDS["update-ldcache"]),
              "nvhook.hook.args.COMMANDS['update-ldcache']")  # fmt: skip
    h.strings("NVHOOK_CREATE_SYMLINKS_OPTIONS", sorted(COMMANDS["create-symlinks"]),
              "nvhook.hook.args.COMMANDS['create-symlinks']")  # fmt: skip
    h.define("NVHOOK_LINK_SEPARATOR", SEPARATOR, "nvhook.hook.create_symlinks.SEPARATOR")
    h.define("NVHOOK_ENV_HOOK_TRACE", ENV_HOOK_TRACE, "nvhook.native.contract.ENV_HOOK_TRACE")
    h.define("NVHOOK_ENV_SAFEPATH", safepath.ENV_IMPL, "nvhook.rootfs.safepath.ENV_IMPL")
    openat2 = [i for i in safepath.IMPLS if i != "walk"]  # "auto" picks openat2 where it works
    h.strings("NVHOOK_SAFEPATH_OPENAT2", openat2, "nvhook.rootfs.safepath.IMPLS but walk")
    h.define("NVHOOK_EAGAIN_TRIES", safepath._EAGAIN_TRIES, "nvhook.rootfs.safepath._EAGAIN_TRIES")
    read_limit = (safepath.RootFd.read_file.__kwdefaults__ or {})["limit"]
    h.define("NVHOOK_READ_FILE_LIMIT", read_limit, "nvhook.rootfs.safepath.RootFd.read_file")

    h.section("the ld cache step (nvhook.hook.update_ldcache)")
    conf_name = os.path.basename(ld.CONF_PATH)
    assert os.path.dirname(ld.CONF_PATH) == ld.CONF_DIR
    etc = os.path.dirname(ld.CONF_DIR)
    assert etc == os.path.dirname(ld.LD_SO_CONF) == os.path.dirname(ld.LD_SO_CACHE)
    h.define("NVHOOK_ETC", etc, "dirname(update_ldcache.CONF_DIR)")
    h.define("NVHOOK_CONF_DIR", ld.CONF_DIR, "update_ldcache.CONF_DIR")
    h.define("NVHOOK_CONF_DIR_NAME", os.path.basename(ld.CONF_DIR), "basename(CONF_DIR)")
    h.define("NVHOOK_CONF_NAME", conf_name, "basename(update_ldcache.CONF_PATH)")
    h.define("NVHOOK_LD_SO_CONF", ld.LD_SO_CONF, "update_ldcache.LD_SO_CONF")
    h.define("NVHOOK_LD_SO_CONF_NAME", os.path.basename(ld.LD_SO_CONF), "basename(LD_SO_CONF)")
    h.define("NVHOOK_LD_SO_CACHE", ld.LD_SO_CACHE, "update_ldcache.LD_SO_CACHE")
    h.define("NVHOOK_INCLUDE_LINE", ld.INCLUDE_LINE + "\n", "update_ldcache.INCLUDE_LINE")
    h.define("NVHOOK_CONF_HEADER", ld.CONF_HEADER, "update_ldcache.CONF_HEADER")
    h.literal("NVHOOK_DIR_MODE", f"0{ld.DIR_MODE:o}", "update_ldcache.DIR_MODE")
    h.literal("NVHOOK_FILE_MODE", f"0{ld.FILE_MODE:o}", "update_ldcache.FILE_MODE")
    # every name the ld cache step writes, and ldconfig's temp file (glibc writes CACHE~ and
    # renames it): a link by one of these names would change what that step writes
    written = (ld.LD_SO_CONF, ld.CONF_PATH, ld.LD_SO_CACHE, ld.LD_SO_CACHE + "~")
    ld_names = sorted({part for path in written for part in path.split("/") if part})
    h.strings("NVHOOK_LD_NAMES", ld_names, "the names in LD_SO_CONF, CONF_PATH, LD_SO_CACHE(~)")
    h.strings("NVHOOK_LDCONFIG_CANDIDATES", ld.LDCONFIG_CANDIDATES,
              "update_ldcache.LDCONFIG_CANDIDATES")  # fmt: skip
    timeout_ms = round(ld.LDCONFIG_TIMEOUT_S * 1000)
    h.define("NVHOOK_LDCONFIG_TIMEOUT_MS", timeout_ms, "update_ldcache.LDCONFIG_TIMEOUT_S")
    h.literal("NVHOOK_LDCONFIG_MAX_DATA", f"{ld.LDCONFIG_MAX_DATA}LL", "LDCONFIG_MAX_DATA")
    bad = "".join(sorted(c for c in ld._BAD_FOLDER_CHARS if c.isprintable()))
    h.define("NVHOOK_BAD_FOLDER_CHARS", bad, "update_ldcache._BAD_FOLDER_CHARS, printable")

    h.section("the CUDA compat folder (nvhook.hook.cuda_compat)")
    h.define("NVHOOK_COMPAT_DIR", cuda_compat.DEFAULT_DIR, "cuda_compat.DEFAULT_DIR")
    h.define("NVHOOK_LIBCUDA_PREFIX", cuda_compat._PREFIX, "cuda_compat._PREFIX")
    h.define("NVHOOK_NOTE_SECTION", cuda_compat._NOTE_SECTION, "cuda_compat._NOTE_SECTION")
    h.define("NVHOOK_NOTE_OWNER", cuda_compat._NOTE_OWNER, "cuda_compat._NOTE_OWNER")
    h.define("NVHOOK_MAX_NOTE", cuda_compat._MAX_NOTE, "cuda_compat._MAX_NOTE")
    h.define("NVHOOK_MAX_SECTIONS", cuda_compat._MAX_SECTIONS, "cuda_compat._MAX_SECTIONS")
    h.define("NVHOOK_ENV_DISABLE_CUDA_COMPAT", ENV_DISABLE_CUDA_COMPAT,
             "nvhook.constants.ENV_DISABLE_CUDA_COMPAT")  # fmt: skip
    h.define("NVHOOK_ENV_CUDA_COMPAT_DIR", ENV_CUDA_COMPAT_DIR,
             "nvhook.constants.ENV_CUDA_COMPAT_DIR")  # fmt: skip

    h.section("the GPU and MIG layout records create-container checks (nvhook.gpurecords)")
    h.define("NVHOOK_ENV_GPU_RECORD", gpurecords.GPU_ENV, "gpurecords.GPU_ENV")
    h.define("NVHOOK_ENV_LAYOUT_RECORD", gpurecords.LAYOUT_ENV, "gpurecords.LAYOUT_ENV")
    h.define("NVHOOK_RECORD_GPUS_DIR", gpurecords.GPUS_DIR, "gpurecords.GPUS_DIR")
    h.define("NVHOOK_RECORD_CAPS_DIR", gpurecords.CAPS_DIR, "gpurecords.CAPS_DIR")

    h.section("--params (nvhook.hook.device_files)")
    h.define("NVHOOK_PARAMS_PATH", device_files.PARAMS_PATH, "device_files.PARAMS_PATH")
    h.strings("NVHOOK_TMPFILE_DIRS", device_files.TMPFILE_DIRS, "device_files.TMPFILE_DIRS")
    h.define("NVHOOK_PARAMS_PREFIX", device_files._PREFIX, "device_files._PREFIX")
    h.define("NVHOOK_MAX_PARAMS", device_files._MAX_PARAMS, "device_files._MAX_PARAMS")
    h.define("NVHOOK_PARAMS_KEY", device_files._KEY, "device_files._KEY")
    h.define("NVHOOK_PARAMS_OFF", device_files._OFF, "device_files._OFF")

    h.section("--application-profile (nvhook.hook.app_profile)")
    h.literal("NVHOOK_PROFILE_DIR_MODE", f"0{app_profile.DIR_MODE:o}", "app_profile.DIR_MODE")
    h.literal("NVHOOK_PROFILE_FILE_MODE", f"0{app_profile.FILE_MODE:o}", "app_profile.FILE_MODE")
    h.define("NVHOOK_DEV_DIR", app_profile.DEV_DIR, "app_profile.DEV_DIR")
    h.define("NVHOOK_GPU_NODE_PREFIX", app_profile.NODE_PREFIX, "app_profile.NODE_PREFIX")
    h.define("NVHOOK_PROFILE_MAX_MINOR", app_profile.MAX_MINOR, "app_profile.MAX_MINOR")
    h.define("NVHOOK_PROFILE_HEAD", app_profile.PROFILE_HEAD, "app_profile.PROFILE_HEAD")
    h.define("NVHOOK_PROFILE_MASK_PREFIX", app_profile.MASK_PREFIX, "app_profile.MASK_PREFIX")
    h.define("NVHOOK_PROFILE_TAIL", app_profile.PROFILE_TAIL, "app_profile.PROFILE_TAIL")


def render() -> str:
    """The text of ``nvhook-contract.h``, from the Python values."""
    h = _Header()
    h.lines += [
        f"/* {HEADER_NAME}: generated by `{_COMMAND}`, do not edit.",
        " * The values the C programs share with Python, each with the Python value it is;",
        " * tests/nvhook/native/test_contract.py compares this file with the generator's text. */",
        "#ifndef NVHOOK_CONTRACT_H",
        "#define NVHOOK_CONTRACT_H",
    ]
    for section in (_process, _runc, _hook):
        section(h)
    h.lines += ["", "#endif", ""]
    return "\n".join(h.lines)


def main(args: Sequence[str] | None = None) -> int:
    """Write the header (``--check``: say whether the checked-in one is :func:`render`'s)."""
    args = sys.argv[1:] if args is None else list(args)
    text = render()
    if args == ["--check"]:
        with open(HEADER, encoding="utf-8") as f:
            if f.read() == text:
                return 0
        print(f"{HEADER} is stale: run `{_COMMAND}`", file=sys.stderr)
        return 1
    if args:
        print(f"usage: {_COMMAND} [--check]", file=sys.stderr)
        return 2
    with open(HEADER, "w", encoding="utf-8") as f:
        f.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
